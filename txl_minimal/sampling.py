"""Sampling token ids from a trained model: ``TransformerXL.generate`` (torch only).

The prompt is read segment by segment; then each new token is read once, as the next segment of
one token, with each layer's memory of its last ``mem_len`` states: the reuse of Section 3.2 that
makes the paper's evaluation fast. A model without memory (``mem_len`` 0) re-reads its last
``tgt_len`` tokens for every new one. Text in and out: ``txl_minimal.generate_text`` (data.py).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch
import torch.nn.functional as F

from txl_minimal import validation


@torch.no_grad()
def generate(model: torch.nn.Module, prompt, n_new: int, temperature: float = 1.0, top_k: Optional[int] = None,
             generator: Optional[torch.Generator] = None, exclude: Sequence[int] = ()) -> torch.Tensor:
    """The prompt's token ids ((B, T) or (T,), a tensor or a list of ints) followed by ``n_new``
    ids sampled from ``model`` (a ``TransformerXL``); ``temperature == 0`` is greedy, ``top_k``
    keeps the k most likely tokens; the ids of ``exclude`` are never drawn (generate_text: a placeholder,
    U+FFFD or <unk>, its training text never held). A model that knows its symbols (``model.vocab``: loaded
    from a checkpoint, or returned by ``train``) draws only ids that have one. The model is in eval mode
    meanwhile, and comes back as it was."""
    if isinstance(prompt, str):  # text is encoded where text lives, not in the model
        raise ValueError(f"generate takes token ids, not text (got {prompt!r}). Fix: "
                         "txl_minimal.generate_text(model, text, n_new), or pass token ids: "
                         "model.generate(torch.tensor([8, 9]), n_new)")
    prompt, n_new, temperature, top_k = validation.check_generate(prompt, n_new, temperature, top_k)
    seq = torch.as_tensor(prompt, device=model.pos_emb.inv_freq.device).long()
    squeeze = seq.dim() == 1
    seq = seq[None] if squeeze else seq
    L, recurrent = model.cfg.tgt_len, model.cfg.mem_len > 0
    known = len(getattr(model, "vocab", None) or ())  # a model that knows its symbols (from its checkpoint)
    try:
        exclude = sorted({int(i) for i in exclude})
    except (TypeError, ValueError):
        raise ValueError(f"exclude must be token ids never to draw (integers), got {exclude!r}") from None
    if any(not 0 <= i < model.cfg.vocab_size for i in exclude):
        raise ValueError(f"exclude holds ids outside [0, {model.cfg.vocab_size}) (the model's vocab_size): {exclude}")
    if len(exclude) >= (known or model.cfg.vocab_size):
        raise ValueError(f"exclude holds every id the model could draw ({len(exclude)}): nothing is left to sample")
    unread, mems = (seq if recurrent else seq[:, -L:]), None
    with model.lengths():  # eval mode, restored afterwards
        for _ in range(n_new):
            for segment in unread.split(L, dim=1):  # the prompt: segment by segment
                out = model(segment, mems)
                mems = out.mems  # (empty without memory)
            logits = out.logits[:, -1].float()
            if 0 < known < logits.size(-1):  # ids past its symbols (vocab_size larger than its text's): never drawn
                logits[:, known:] = float("-inf")
            if exclude:
                logits[:, exclude] = float("-inf")
            if top_k is not None:  # only the k most likely tokens may be drawn
                kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            if temperature == 0:  # greedy
                nxt = logits.argmax(-1, keepdim=True)
            else:
                # (logit - max) / T in float64 lies in [-inf, 0] for any T > 0: no NaN from a T
                # of 1e-45 (inf) or 1e39 (inf in float32, and -inf / inf after top_k)
                scaled = (logits - logits.max(-1, keepdim=True).values).double() / temperature
                nxt = torch.multinomial(F.softmax(scaled, -1), 1, generator=generator)
            seq = torch.cat([seq, nxt], dim=1)
            unread = nxt if recurrent else seq[:, -L:]  # with memory each token is read once
    return seq[0] if squeeze else seq
