"""Words: WikiText-103 / WikiText-2 (Merity et al., 2016; the paper's word benchmarks) and
text8-mini split into words (offline), each read into the authors' Vocab (words.py).

    words = load_text8_mini_words()   # 10,000 words + <unk>, built in a fraction of a second
    wt103 = load_wikitext("wt103")    # the .npy cache, else the zip in text8_dir(), else a download
    word_stats(words)                 # words and <unk> rate, split by split

A word corpus has ``unit == "word"``: its ids index ``corpus.vocab`` (a tuple of symbols, by
falling count), and it is scored in perplexity rather than bits per character. WikiText
lives in text8's folder, fetched, checked and cached by corpora.py as text8 and enwik8 are.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from txl_minimal.corpora import (SPLITS, Corpus, Source, cache_files, corpus_dir, fetch, from_cache, read_splits,
                                 write_cache)
from txl_minimal.symbols import decode
from txl_minimal.text8 import MINI_PATH, load_text8_mini
from txl_minimal.words import Vocab, coverage

MINI_WORDS_MAX_SIZE = 10_000  # text8-mini-words keeps its 10,000 most frequent train words (+ <unk>)


def load_text8_mini_words(max_size: int = MINI_WORDS_MAX_SIZE, path: str | Path = MINI_PATH) -> Corpus:
    """text8-mini as words: the character corpus's train/valid/test split (so a word cut by a
    split boundary becomes two pieces), each split at spaces. The vocabulary is ``<unk>`` (id 0)
    then the ``max_size`` most frequent words of train, by falling count; every other word is
    ``<unk>``. text8 has no lines, so no ``<eos>``. Built in a fraction of a second: not cached."""
    chars = load_text8_mini(path)
    texts = [decode(split) for split in (chars.train, chars.valid, chars.test)]
    vocab = Vocab(special=["<unk>"], max_size=max_size)
    vocab.count_lines(texts[:1])
    vocab.build_vocab()
    return Corpus("text8-mini-words", *[vocab.encode_lines([t]) for t in texts],
                  vocab=tuple(vocab.idx2sym), unit="word")


def WikiTextSource(name: str, url: str, zip_name: str, folder: str, zip_bytes: int, zip_md5: str,
                   zip_sha256: str) -> Source:
    """One WikiText archive (Merity et al., 2016; the authors' getdata.sh fetches the same zips) as a
    Source: ``name`` the corpus's in load_corpus ("wt103", "wt2"), ``folder`` the archive's, holding
    wiki.{train,valid,test}.tokens; the zip's MD5 is its check (see WIKITEXT)."""
    return Source(name, url, zip_name, zip_bytes, zip_sha256, zip_md5=zip_md5,
                  members=tuple(f"{folder}/wiki.{split}.tokens" for split in SPLITS),
                  offline="use the offline word corpus: load_corpus('text8-mini-words')")


# The original s3.amazonaws.com/research.metamind.io/wikitext/ URLs answer 403 since 2023; the
# dataset's author serves the same archives at wikitext.smerity.com. The MD5s are torchtext's
# (torchtext/datasets/wikitext103.py and wikitext2.py, which verify every download against them);
# the SHA-256s are those a Julia package registers for the same URLs (a `module WikiText` of
# DataDeps.jl registrations, found by code search). The MD5 is the check (several independent
# users agree on it); a SHA-256 mismatch only warns (one source; neither was verified here: no internet).
# zip_bytes are approximate (progress bar only).
WIKITEXT = {
    "wt103": WikiTextSource("wt103", "https://wikitext.smerity.com/wikitext-103-v1.zip",
                            "wikitext-103-v1.zip", "wikitext-103", 190_000_000,
                            "9ddaacaf6af0710eda8c456decff7832",
                            "242ba0f20b329cfdf1ccc61e9e9e5b59becf189db7f7a81cd2a0e2fc31539590"),
    "wt2": WikiTextSource("wt2", "https://wikitext.smerity.com/wikitext-2-v1.zip",
                          "wikitext-2-v1.zip", "wikitext-2", 4_500_000,
                          "542ccefacc6c27f945fb54453812b3cd",
                          "92675f1d63015c1c8b51f1656a52d5bdbc33aafa60cc47a218a66e7ee817488c"),
}


def _read_cache(files: list[Path], src: Source) -> tuple[Corpus | None, str | None]:
    """(the WikiText corpus from its cache, memory-mapped; None), or (None, what is wrong with it)."""
    symbols = tuple(files[3].read_text(encoding="utf-8").split("\n"))
    arrays, problem = read_splits(files[:3], np.int32)
    return (None, problem) if problem else (Corpus(src.name, *arrays, vocab=symbols, unit="word"), None)


def load_wikitext(name: str = "wt103", data_dir: str | Path | None = None, download: bool = True, *,
                  source: Source | None = None, opener: Callable | None = None,
                  timeout: float = 5.0, progress: bool = True) -> Corpus:
    """WikiText-103 (``"wt103"``) or WikiText-2 (``"wt2"``), word level, as the authors read it:
    the vocabulary is ``<eos>`` then every word of train by falling count (``Vocab(special=
    ["<eos>"])``, min_freq 0: 267,735 symbols for WikiText-103), one ``<eos>`` ends each line.

    Read from the .npy cache in ``text8_dir(data_dir)`` (text8's folder); else from the zip
    there; else downloaded (MD5-checked, written under a temp name, then renamed)."""
    if name not in WIKITEXT and source is None:
        raise ValueError(f"unknown WikiText {name!r}; use one of {sorted(WIKITEXT)}")
    src = source or WIKITEXT[name]
    files = cache_files(corpus_dir(data_dir), src.name, ".vocab.txt")
    corpus = from_cache(files, src, _read_cache)
    if corpus is None:
        raw = fetch(src, files[0].parent, download, opener=opener, timeout=timeout, progress=progress)
        lines = [split.decode("utf-8").splitlines() for split in raw]  # (the zip's MD5 is checked: UTF-8)
        vocab = Vocab(special=["<eos>"], add_eos=True)
        vocab.count_lines(lines[0])
        vocab.build_vocab()
        corpus = write_cache(Corpus(src.name, *[vocab.encode_lines(split) for split in lines],
                                    vocab=tuple(vocab.idx2sym), unit="word"),
                             files, "\n".join(vocab.idx2sym).encode("utf-8"))  # the record, written last
    return corpus


def word_stats(corpus: Corpus) -> dict:
    """Words, types and ``<unk>`` rate of a word corpus's splits (for READMEs and notebooks)."""
    if not isinstance(corpus, Corpus) or corpus.unit != "word":
        raise ValueError(f"word_stats reads a word corpus (a Corpus of unit 'word'), got "
                         f"{corpus!r}"[:200] + ". Fix: e.g. word_stats(load_corpus('text8-mini-words'))")
    vocab = Vocab.from_symbols(corpus.vocab)
    return {split: dict(words=len(ids), unk=1.0 - coverage(vocab, ids))
            for split, ids in zip(SPLITS, (corpus.train, corpus.valid, corpus.test))}
