"""What a built ``TransformerXL`` offers beyond Section 3 (its base class, ``ModelControls``): lengths changed
in a new, checked config (``set_lengths``, ``with model.lengths(...)``), the fast paths' switch (``fast_attn``),
its size (``num_params``) and sampling (``generate``); and its attention's score as the four terms apart
(``AttentionControls.score_terms``: ``return_terms``). model.py copied alone builds on ``nn.Module`` instead:
the same model, set with ``model.cfg = dataclasses.replace(model.cfg, ...)``, without these methods.
"""
from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Optional

import torch
import torch.nn as nn

from txl_minimal import sampling, validation

SPEEDUP = None  # fast.switch(model, on): set by fast.py on import; swaps in its same-named subclasses


class ModelControls(nn.Module):
    """The base of ``TransformerXL``: its frozen config replaced whole, the fast paths' switch, sampling."""

    @property
    def cfg(self) -> TXLConfig:  # noqa: F821 (model.py's) frozen: set_lengths or model.cfg = replace(...) replaces it
        return self._cfg

    @cfg.setter
    def cfg(self, new) -> None:  # its layers' too (fast.py reads their lengths)
        if "_cfg" not in self.__dict__:  # at construction: a dict or a preset's name said, not an AttributeError
            validation.check_config_type(new, type(self).__name__)
        else:  # a ValueError for another size (the layers were built for this one), or a clamp_len or
            validation.check_new_config(self._cfg, new)  # same_length set where it changes nothing
        for m in self.modules():
            if isinstance(m.__dict__.get("cfg"), type(new)):
                m.cfg = new
        self._cfg = new

    def set_lengths(self, tgt_len: Optional[int] = None, mem_len: Optional[int] = None,
                    clamp_len: Optional[int] = None, same_length: Optional[bool] = None) -> None:
        """Change lengths (None keeps one) in a new, checked config; a bad value: ``ValueError``, nothing changed."""
        new = dict(tgt_len=tgt_len, mem_len=mem_len, clamp_len=clamp_len, same_length=same_length)
        self.cfg = replace(self.cfg, **{k: v for k, v in new.items() if v is not None})

    @contextlib.contextmanager
    def lengths(self, tgt_len: Optional[int] = None, mem_len: Optional[int] = None,
                clamp_len: Optional[int] = None, same_length: Optional[bool] = None):
        """``with model.lengths(mem_len=512):`` in eval mode; lengths and mode come back on exit."""
        cfg, was_training = self.cfg, self.training
        self.set_lengths(tgt_len, mem_len, clamp_len, same_length)
        try:
            yield self.eval()
        finally:
            self.cfg = cfg
            self.train(was_training)

    @property  # True (the package's default): fast.py's subclasses; False: model.py's code
    def fast_attn(self) -> bool:
        return self._fast

    @fast_attn.setter
    def fast_attn(self, on: bool) -> None:
        self._fast = bool(on) and SPEEDUP is not None
        if SPEEDUP is not None:
            SPEEDUP(self, self._fast)

    def num_params(self) -> int:
        """How many numbers the model learns (a tied weight counted once)."""
        return sum(p.numel() for p in self.parameters())

    def generate(self, prompt, n_new: int, temperature: float = 1.0, top_k: Optional[int] = None,
                 generator: Optional[torch.Generator] = None, exclude=()) -> torch.Tensor:
        """The prompt's ids ((B, T) or (T,)) and ``n_new`` sampled ones, never one of ``exclude`` (sampling.py;
        text: ``generate_text``)."""
        return sampling.generate(self, prompt, n_new, temperature, top_k, generator, exclude)


class AttentionControls(nn.Module):
    """The base of model.py's ``RelMultiHeadAttn``: its score's terms apart (``model(..., return_terms=True)``)."""

    def score_terms(self, h, mem, pos, mask, u, v) -> tuple[dict[str, torch.Tensor], Optional[torch.Tensor]]:
        """The terms (a)-(d) apart, unscaled, NaN where masked; and what attend's rel_shift is given (None: no R).

        (c) and (d) have no query content: one row per head, (c) the same for every query, (d) read at each key's
        distance mlen + i - j (column j + qlen-1-i of the row against R_{klen-1..0}, where rel_shift moves it)."""
        q, k, _ = self.project(h, mem)
        terms = {"a": q @ k.transpose(-1, -2)}
        if pos is not None:
            terms["b"] = self.positional_score(q, pos, None)
        if u is not None:
            qlen, klen = terms["a"].shape[-2:]
            terms["c"] = (u[:, None] @ k.transpose(-1, -2)).expand_as(terms["a"])
            row = self.positional_score(torch.zeros_like(q[:1, :, :1]), pos, v, shift=False)  # v^T W_k,R R_r
            col = torch.arange(klen, device=k.device) - torch.arange(qlen, device=k.device)[:, None] + qlen - 1
            terms["d"] = row[..., 0, col.clamp(0, klen - 1)].expand_as(terms["a"])  # (above the diagonal: masked)
        terms = {name: t.masked_fill(mask, float("nan")) for name, t in terms.items()}
        shift_input = None if pos is None else self.positional_score(q, pos, v, shift=False)  # column c: R_{klen-1-c}
        return terms, shift_input
