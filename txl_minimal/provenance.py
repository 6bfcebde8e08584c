"""Which corpus an array of token ids comes from, so that a model is not scored on another vocabulary's ids.

Ids are plain integers: text8's 27 character ids lie inside a 102-symbol model's vocabulary, and
scoring them gives a number (8.996 bpc) that means nothing. A ``Corpus`` remembers its splits here
(``remember``), and ``corpus_of`` finds the corpus of its splits or of any view of them
(``corpus.valid[:2001]``, ``corpus.test[None]``: NumPy views share their base array). A copy, a
tensor made from the ids, or ids from anywhere else are unknown (None): they are checked only
against the model's ``vocab_size``. Weak references: remembering keeps nothing alive. NumPy only.
"""
from __future__ import annotations

import weakref
from typing import NamedTuple, Optional

import numpy as np


class Origin(NamedTuple):
    """The corpus ids come from: its name, unit ("character", "word", "byte") and the symbol of each id."""

    name: str
    unit: str
    vocab: object  # a str of characters or a tuple of words (Corpus.vocab)


_REMEMBERED: list[tuple[weakref.ref, Origin]] = []  # (an array of a corpus's ids or its base, that corpus)


def _chain(ids) -> list[np.ndarray]:
    """``ids`` and the arrays it is a view of (``.base``, then its base...), NumPy arrays only."""
    found = []
    while isinstance(ids, np.ndarray):
        found.append(ids)
        ids = ids.base
    return found


def remember(name: str, unit: str, vocab, *splits) -> None:
    """Note that ``splits`` (arrays of ids) and the arrays they are views of hold corpus ``name``'s ids."""
    _REMEMBERED[:] = [(ref, origin) for ref, origin in _REMEMBERED if ref() is not None]
    origin = Origin(name, unit, vocab)
    for split in splits:
        for array in _chain(split):
            _REMEMBERED.append((weakref.ref(array), origin))


def corpus_of(ids) -> Optional[Origin]:
    """The corpus ``ids`` (an array, or a view of one) were taken from, if a ``Corpus`` remembered them;
    None for ids of unknown origin, or of two corpora that disagree on their vocabulary."""
    mine = {id(a) for a in _chain(ids)}
    if not mine:
        return None
    found = [origin for ref, origin in _REMEMBERED if (a := ref()) is not None and id(a) in mine]
    if not found or any(o is not found[0] and (o.unit != found[0].unit or tuple(o.vocab) != tuple(found[0].vocab))
                        for o in found[1:]):
        return None
    return found[-1]


def check_vocab(model_vocab: Optional[dict], ids, caller: str) -> None:
    """ValueError if ``ids`` come from a corpus (``corpus_of``) of another unit or vocabulary than the
    model's (``model_vocab``: checkpoint.model_vocab's {"unit", "symbols"}, symbols None where unknown);
    silent where either is unknown (a model built in Python, ids of unknown origin)."""
    came = corpus_of(ids)
    if came is None or model_vocab is None:
        return
    unit, symbols = model_vocab["unit"], model_vocab.get("symbols")
    mine = f"{len(symbols):,} {unit}s" if symbols is not None else f"{unit}s"
    theirs = f"{came.name}'s {len(came.vocab):,} {came.unit}s"
    if unit != came.unit:
        problem = f"the model reads {mine} but these ids are {theirs}: they would be read as {unit}s"
    elif symbols is not None and list(symbols) != list(came.vocab):
        problem = (f"the model was trained on another vocabulary ({mine}) than these ids' ({theirs}): the same id "
                   "would mean another symbol")
    else:
        return
    raise ValueError(f"{caller}: {problem}. Fix: score the model on its own corpus's ids (load_corpus of the name "
                     "or file it was trained on), or train a model on this corpus")
