"""The corpora by name, and text in and out of a model: ``load_corpus`` and ``generate_text``.
The front door of text8.py (characters), word_corpora.py (words) and batching.py (the ordered
iterator): their public names are importable from here too.

    corpus = load_corpus("auto")              # text8 if present/downloadable, else text8-mini
    it = LMOrderedIterator(corpus.train, batch_size=22, tgt_len=512)
    for x, y in it: ...                       # (batch, seq) LongTensors, y = x shifted by one
    words = load_corpus("text8-mini-words")   # offline: 10,000 words + <unk>; also "wt103", "wt2"

A character corpus is scored in bits per character, a word corpus (``unit == "word"``) in
perplexity. The other names are handed on from where they live, so patch one there: setting
``txl_minimal.text8.REPO_DATA`` moves text8_dir(), setting ``txl_minimal.data.REPO_DATA`` would not.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from txl_minimal.batching import LMOrderedIterator, as_ids, check_split
from txl_minimal.text8 import (MINI_HINT, MINI_PATH, REPO_DATA, TEXT8, VOCAB, VOCAB_SIZE, Corpus, CorpusError,
                               Text8Source, decode, default_text8_dir, encode, load_text8, load_text8_mini,
                               split_corpus, text8_dir)
from txl_minimal.word_corpora import (MINI_WORDS_MAX_SIZE, SPLITS, WIKITEXT, WikiTextSource, load_text8_mini_words,
                                      load_wikitext, word_stats)
from txl_minimal.words import Vocab

__all__ = ["CORPORA", "WORD_CORPORA", "load_corpus", "generate_text",
           # text8.py
           "VOCAB", "VOCAB_SIZE", "MINI_PATH", "REPO_DATA", "MINI_HINT", "TEXT8", "Text8Source", "Corpus",
           "CorpusError", "encode", "decode", "split_corpus", "default_text8_dir", "text8_dir", "load_text8",
           "load_text8_mini",
           # word_corpora.py
           "MINI_WORDS_MAX_SIZE", "SPLITS", "WIKITEXT", "WikiTextSource", "load_text8_mini_words", "load_wikitext",
           "word_stats",
           # batching.py
           "LMOrderedIterator", "as_ids", "check_split"]


def generate_text(model: torch.nn.Module, prompt: str, n_new: int, **kwargs) -> str:
    """``model.generate`` for text: the prompt encoded, ``n_new`` tokens sampled after it, and the
    result as text that starts with the prompt. A character model reads space and a-z; a word
    model that knows its vocabulary (loaded from a checkpoint, or returned by ``train``) reads
    the prompt's words (``<unk>`` for one it lacks) and adds ``n_new`` words, joined by spaces.
    ``kwargs`` go to ``model.generate`` (temperature, top_k, generator)."""
    if not isinstance(prompt, str):
        raise ValueError(f"generate_text takes a string prompt, got {type(prompt).__name__}. "
                         "Fix: for token ids call model.generate(ids, n_new)")
    unit, symbols = getattr(model, "unit", None), getattr(model, "vocab", None)
    if unit == "word":
        return _generate_words(model, prompt, n_new, symbols, **kwargs)
    size = getattr(getattr(model, "cfg", None), "vocab_size", VOCAB_SIZE)
    if unit is None and size != VOCAB_SIZE:  # a model built in Python, not over the 27 characters
        raise ValueError(f"generate_text reads and writes the {VOCAB_SIZE} characters of VOCAB, but this model has "
                         f"vocab_size {size:,} and does not say what its ids mean. Fix: load it from its "
                         "checkpoint (txl_minimal.load), which knows its vocabulary, or call model.generate(ids, "
                         "n_new) with ids of its own vocabulary")
    return decode(model.generate(torch.as_tensor(encode(prompt), dtype=torch.long), n_new, **kwargs))


def _generate_words(model: torch.nn.Module, prompt: str, n_new: int, symbols, **kwargs) -> str:
    """generate_text for a word model: the prompt's words as ids of ``symbols``, new words appended."""
    if symbols is None:
        raise ValueError("generate_text: this is a word model, but its vocabulary is unknown (a checkpoint saved "
                         "before checkpoints held it). Fix: model.generate(ids, n_new) with ids from its corpus "
                         "(corpus.vocab), or train it again")
    vocab = Vocab.from_symbols(symbols)
    ids = []
    for word in prompt.split():
        if word not in vocab.sym2idx and vocab.unk_idx is None:
            raise ValueError(f"generate_text: the word {word!r} is not in this model's vocabulary "
                             f"({len(symbols):,} words), which has no <unk>. Fix: use words of its corpus")
        ids.append(vocab.get_idx(word))
    out = model.generate(torch.tensor(ids, dtype=torch.long), n_new, **kwargs)
    new = vocab.decode(out[len(ids):].tolist()) if n_new else ""
    return prompt + ("" if not new or not prompt or prompt[-1].isspace() else " ") + new


CORPORA = ("text8", "text8-mini", "auto", "text8-mini-words", "wt103", "wt2")  # load_corpus's names
WORD_CORPORA = ("text8-mini-words", "wt103", "wt2")  # unit "word": scored in perplexity


def load_corpus(name: str = "auto", data_dir: str | Path | None = None,
                download: bool = True) -> Corpus:
    """Load a corpus by name: characters "text8", "text8-mini" or "auto" (text8 if present or
    downloadable, else mini); words "text8-mini-words" (offline), "wt103" or "wt2" (WikiText).

    $TXL_CORPUS, when set, overrides `name` (so CI can force text8-mini everywhere).
    """
    name = os.environ.get("TXL_CORPUS") or name
    if name == "text8-mini":
        return load_text8_mini()
    if name == "text8":
        return load_text8(data_dir, download)
    if name == "text8-mini-words":
        return load_text8_mini_words()
    if name in WIKITEXT:
        return load_wikitext(name, data_dir, download)
    if name != "auto":
        raise ValueError(f"unknown corpus {name!r}; use one of {', '.join(map(repr, CORPORA))}")
    try:
        return load_text8(data_dir, download)
    except (CorpusError, OSError) as e:  # OSError: a data folder we may not even read
        reason = str(e).split(". Fix:")[0]
        print(f"text8 unavailable ({reason}); using text8-mini instead "
              "(TXL_CORPUS=text8 to insist).")
        return load_text8_mini()
