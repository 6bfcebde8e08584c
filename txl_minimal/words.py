"""Word-level vocabulary, as the authors' ``Vocab`` (pytorch/utils/vocabulary.py) builds it.

    vocab = Vocab(special=["<eos>"], add_eos=True)     # WikiText: one <eos> per line
    vocab.count_lines(train_lines); vocab.build_vocab()
    ids = vocab.encode_lines(valid_lines)              # int32 numpy array, in text order

Symbols are ordered as the authors order them: the specials first, then the words by
falling count (ties in first-seen order, as ``Counter.most_common``). The adaptive softmax
relies on that order: its cutoffs cut the vocabulary by frequency rank, so id 0..c_1-1
are the most frequent words (the head) and the rare ones sit in the tail clusters.
Words the vocabulary does not keep (count < ``min_freq`` or beyond ``max_size``) become
``<unk>``, which must then be one of the specials.
"""
from __future__ import annotations

from collections import Counter
from typing import Optional
from collections.abc import Iterable

import numpy as np


class Vocab:
    """Symbols <-> ids. ``min_freq``: keep words counted at least that often; ``max_size``:
    keep at most that many words (specials not counted); ``add_eos``: each line ends with
    ``<eos>``; ``lower_case`` lowers every line first (the authors' PTB setting)."""

    def __init__(self, special: Iterable[str] = (), min_freq: int = 0, max_size: Optional[int] = None,
                 lower_case: bool = False, add_eos: bool = False):
        self.special, self.min_freq, self.max_size = list(special), min_freq, max_size
        self.lower_case, self.add_eos = lower_case, add_eos
        self.counter: Counter = Counter()
        self.idx2sym: list[str] = []
        self.sym2idx: dict[str, int] = {}

    def tokenize(self, line: str) -> list[str]:
        """Whitespace-separated symbols of one line (+ ``<eos>`` when ``add_eos``)."""
        line = line.strip()
        symbols = (line.lower() if self.lower_case else line).split()
        return symbols + ["<eos>"] if self.add_eos else symbols

    def count_lines(self, lines: Iterable[str]) -> None:
        """Add the symbols of ``lines`` to the counts (the authors' ``count_file``)."""
        for line in lines:
            self.counter.update(self.tokenize(line))

    def build_vocab(self) -> None:
        """Specials first, then words by falling count until ``min_freq``/``max_size`` stop it."""
        self.idx2sym, self.sym2idx = [], {}
        for sym in self.special:
            self._add(sym)
        for sym, cnt in self.counter.most_common(self.max_size):
            if cnt < self.min_freq:
                break
            self._add(sym)

    @classmethod
    def from_symbols(cls, symbols: Iterable[str], **kwargs) -> Vocab:
        """A vocabulary with exactly these symbols, in this order (a cached vocab file)."""
        vocab = cls(**kwargs)
        for sym in symbols:
            vocab._add(sym)
        return vocab

    def _add(self, sym: str) -> None:
        if sym not in self.sym2idx:
            self.sym2idx[sym] = len(self.idx2sym)
            self.idx2sym.append(sym)

    def __len__(self) -> int:
        return len(self.idx2sym)

    @property
    def unk_idx(self) -> Optional[int]:
        return self.sym2idx.get("<unk>")

    def get_idx(self, sym: str) -> int:
        """The id of ``sym``; ``<unk>``'s for a word outside the vocabulary."""
        idx = self.sym2idx.get(sym, self.unk_idx)
        if idx is None:
            raise KeyError(f"{sym!r} is not in the vocabulary and it has no '<unk>'. "
                           "Fix: build the Vocab with special=[..., '<unk>'] or a smaller min_freq")
        return idx

    def get_sym(self, idx: int) -> str:
        return self.idx2sym[idx]

    def encode_lines(self, lines: Iterable[str]) -> np.ndarray:
        """The ids of every symbol of ``lines`` in order, as one int32 array (the stream)."""
        get, unk = self.sym2idx.get, self.unk_idx
        chunks, ids = [], []
        for line in lines:
            symbols = self.tokenize(line)
            ids.extend(get(s, unk) for s in symbols)
            if unk is None and None in ids:
                self.get_idx(next(s for s in symbols if s not in self.sym2idx))  # raises, naming it
            if len(ids) >= 1 << 20:  # int32 chunks: WikiText-103's 10^8 Python ints would need GBs
                chunks.append(np.asarray(ids, dtype=np.int32))
                ids = []
        return np.concatenate(chunks + [np.asarray(ids, dtype=np.int32)])

    def decode(self, ids) -> str:
        """Symbols of ``ids`` joined by spaces (``<eos>`` kept as written)."""
        return " ".join(self.idx2sym[int(i)] for i in np.asarray(ids).ravel())


def coverage(vocab: Vocab, ids: np.ndarray) -> float:
    """Fraction of the tokens in ``ids`` that are not ``<unk>`` (1.0 without an ``<unk>``)."""
    ids = np.asarray(ids)
    return 1.0 if vocab.unk_idx is None or not ids.size else float(np.mean(ids != vocab.unk_idx))
