"""Token ids in order, batch first, as the authors' LMOrderedIterator serves them: row b of
each batch continues row b of the batch before, so the memory (Sec. 3.2) carries over.

    it = LMOrderedIterator(corpus.train, batch_size=22, tgt_len=512)
    for x, y in it: ...                        # (batch, seq) LongTensors, y = x shifted by one
    ids = as_ids(corpus.valid, limit=10_000)   # any ids as a new LongTensor on the CPU
    check_split(len(corpus.train), "train", corpus.name, batch_size=22, tgt_len=512)  # too short: a sentence
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Optional

import numpy as np
import torch

from txl_minimal import validation
from txl_minimal.machine import check_device


def as_ids(data, limit: int | None = None) -> torch.Tensor:
    """Token ids (a list, a NumPy array or memmap, a tensor) as a new LongTensor on the CPU.

    ``data``: the ids, of any integer type (a corpus's uint8 or uint16 ids too); floats are refused
    rather than truncated. ``limit`` keeps only the first that many (None: all).

    Returns:
        A new int64 tensor on the CPU (a copy: changing it leaves ``data`` alone); ``[None]`` makes
        it the batch of one row a model reads.

    Examples:
        >>> as_ids([3, 1, 2], limit=2)
        tensor([3, 1])
        >>> as_ids(encode("the"))[None]
        tensor([[20,  8,  5]])
        >>> as_ids([0.5])
        Traceback (most recent call last):
        ValueError: token ids must be integers, got torch.float32 (0.5 would be read as 0). Fix: encode text ...
    """
    limit, = validation.counts("as_ids", 0, limit=limit)  # -1 would drop the last id, 2.5 fail in a slice
    data = validation.integer_ids(data)  # floats, bools, text, a set: a sentence (a list: a tensor)
    data = data[:limit] if limit is not None else data
    if not isinstance(data, torch.Tensor):
        return torch.from_numpy(np.asarray(data).astype(np.int64))  # astype copies
    return data.detach().to("cpu", torch.long, copy=True)


def check_split(n_tokens: int, split: str, corpus: str, unit: str = "token", batch_size: Optional[int] = None,
                tgt_len: Optional[int] = None) -> None:
    """ValueError naming the sizes and the fix unless a split of ``n_tokens`` can be read: for training
    (``batch_size`` and ``tgt_len`` given), one full segment in each of the batch's columns, tgt_len + 1
    tokens a column (LMOrderedIterator drops a shorter tail); for an evaluation, one prediction (2 tokens).
    Checked before a training's first step: the split is read only later (the valid one at the first
    evaluation), when the steps before it would be lost."""
    if batch_size is None or tgt_len is None:
        if n_tokens < 2:
            raise ValueError(f"the {split} split of {corpus} holds {n_tokens} {unit}{'s' * (n_tokens != 1)}: its "
                             f"evaluation needs at least 2 (one prediction). Fix: give the corpus a {split} split, "
                             f"e.g. Corpus(name, train, valid, test) with a few thousand {unit}s of your text in each "
                             "of valid and test")
        return
    need = batch_size * (tgt_len + 1)
    if n_tokens >= need:
        return
    fixes = [f"a smaller batch_size (at most {n_tokens // (tgt_len + 1):,} for tgt_len {tgt_len:,})"
             if n_tokens // (tgt_len + 1) else "",
             f"a smaller tgt_len (at most {n_tokens // batch_size - 1:,} for batch_size {batch_size:,})"
             if n_tokens // batch_size > 1 else "", f"a longer {split} split"]
    raise ValueError(f"the {split} split of {corpus} holds {n_tokens:,} {unit}s, too few for one training segment in "
                     f"each batch column: batch_size {batch_size:,} x (tgt_len {tgt_len:,} + 1) = {need:,}. Fix: "
                     + ", or ".join(f for f in fixes if f))


class LMOrderedIterator:
    """Serve a token stream as in-order segments, batch first, for recurrence memory.

    The stream ``data`` (token ids: a corpus split, a list, a tensor) is cut into ``batch_size``
    contiguous columns (row b of every batch continues row b of the previous one, so mems carry
    over), read ``tgt_len`` tokens at a time, on ``device``.

    - training (default): every segment has L = tgt_len; the short tail is dropped.
    - evaluation=True: the last, shorter segment is kept, so every token of each
      column (after its first) is predicted exactly once.
    - var_len=True: the authors' training trick; L ~ N(tgt_len, 5) (and tgt_len/2
      with p=0.05), clipped to [5, tgt_len + 15], drawn from ``seed``; len() is then only an estimate.

    Yields:
        (inputs, targets): two (batch_size, L) LongTensors, the targets the same columns shifted by
        one. ``len(it)`` is the number of segments.

    Examples:
        >>> it = LMOrderedIterator(encode("abcdefghijklmnopqrstuvwxyz"), batch_size=2, tgt_len=4)
        >>> len(it)
        3
        >>> x, y = next(iter(it))
        >>> x.shape, decode(x[0]), decode(y[0]), decode(x[1])        # row 1 starts half way
        (torch.Size([2, 4]), 'abcd', 'bcde', 'nopq')
    """

    def __init__(self, data, batch_size: int, tgt_len: int, device: str | torch.device = "cpu",
                 evaluation: bool = False, var_len: bool = False, seed: int = 0):
        caller = "LMOrderedIterator"
        batch_size, tgt_len = (validation.count(v, name, caller) for name, v in (("batch_size", batch_size),
                                                                                ("tgt_len", tgt_len)))
        seed = validation.count(seed, "seed", caller, 0)
        evaluation, var_len = (validation.flag(v, name, caller) for name, v in (("evaluation", evaluation),
                                                                               ("var_len", var_len)))
        data = validation.integer_ids(data, f"{caller}'s token ids")  # 0.7 would be read as 0: refused
        if data.ndim != 1:  # a (1, N) batch would count as 1 token
            raise ValueError(f"LMOrderedIterator reads one stream of token ids (1-D), got shape {tuple(data.shape)}. "
                             "Fix: pass the text as one sequence (ids.flatten()); batch_size cuts it into columns")
        if not isinstance(data, torch.Tensor):
            data = np.array(data)  # a copy: memmaps are read-only
            if data.dtype.kind == "u" and data.dtype.itemsize > 1:  # a text file's uint16 ids: torch 2.3 lacks uint16
                data = data.astype(np.int32 if data.dtype.itemsize == 2 else np.int64)
            data = torch.from_numpy(data)
        n_step = len(data) // batch_size  # tokens per column; the remainder is dropped
        if n_step < 2:
            raise ValueError(f"{caller}: {len(data):,} tokens are too few for batch_size={batch_size:,}: each column "
                             "needs 2 (one prediction). Fix: " + (f"batch_size <= {len(data) // 2:,}" if len(data) > 3
                                                                  else "more tokens"))
        if n_step - 1 < tgt_len and not (evaluation or var_len):  # training keeps only full segments: none
            raise ValueError(f"{caller}: {len(data):,} tokens in {batch_size:,} columns leave {n_step - 1:,} "
                             f"predictions a column, fewer than one training segment of tgt_len={tgt_len:,}, so it "
                             f"would yield no batch. Fix: tgt_len <= {n_step - 1:,}, a smaller batch_size, or "
                             "evaluation=True (which keeps the short last segment)")
        # (batch, n_step) on the device, still uint8 for text8; .long() happens per segment.
        self.data = data[: n_step * batch_size].view(batch_size, n_step).to(check_device(device, f"{caller}'s device"))
        self.batch_size, self.tgt_len = batch_size, tgt_len
        self.evaluation, self.var_len = evaluation, var_len
        self.rng = np.random.default_rng(seed)

    def _starts_and_lengths(self) -> Iterator[tuple[int, int]]:
        n_pred = self.data.size(1) - 1  # positions that have a next token
        i = 0
        while i < n_pred:
            L = self.tgt_len
            if self.var_len:
                mean = self.tgt_len if self.rng.random() < 0.95 else self.tgt_len / 2
                L = int(min(self.tgt_len + 15, max(5, int(self.rng.normal(mean, 5)))))
            L = min(L, n_pred - i)
            if L < self.tgt_len and not (self.evaluation or self.var_len):
                return  # training: keep every batch the same shape
            yield i, L
            i += L

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for i, L in self._starts_and_lengths():
            # .long() of a column slice makes a fresh contiguous tensor (safe to .view()).
            yield self.data[:, i : i + L].long(), self.data[:, i + 1 : i + 1 + L].long()

    def __len__(self) -> int:
        n_pred = self.data.size(1) - 1
        full, rest = divmod(n_pred, self.tgt_len)
        return full + int(rest > 0 and (self.evaluation or self.var_len))
