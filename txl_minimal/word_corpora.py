"""Words: WikiText-103 / WikiText-2 (Merity et al., 2016; the paper's word benchmarks) and
text8-mini split into words (offline), each read into the authors' Vocab (words.py).

    words = load_text8_mini_words()   # 10,000 words + <unk>, built in a fraction of a second
    wt103 = load_wikitext("wt103")    # the .npy cache, else the zip in text8_dir(), else a download
    word_stats(words)                 # words and <unk> rate, split by split

A word corpus has ``unit == "word"``: its ids index ``corpus.vocab`` (a tuple of symbols, by
falling count), and it is scored in perplexity rather than bits per character. WikiText
lives in text8's folder and is fetched and cached by text8.py's _download and _write_cache.
"""

from __future__ import annotations

import hashlib
import urllib.request
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable

import numpy as np

from txl_minimal.text8 import (MINI_PATH, Corpus, CorpusError, _download, _write_cache, corpus_dir, decode,
                               load_text8_mini)
from txl_minimal.utils import remove_leftovers
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


@dataclass(frozen=True)
class WikiTextSource:
    """One WikiText archive (Merity et al., 2016; the authors' getdata.sh fetches the same zips)."""

    name: str  # the corpus name in load_corpus: "wt103" or "wt2"
    url: str
    zip_name: str
    folder: str  # the archive's folder, holding wiki.{train,valid,test}.tokens
    zip_bytes: int  # the progress bar's total when the server sends no Content-Length
    zip_md5: str
    zip_sha256: str


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
SPLITS = ("train", "valid", "test")


def _wikitext_hint(d: Path, src: WikiTextSource, placed: Path | None = None) -> str:
    first = f"delete or replace {placed}, then " if placed is not None else ""
    return (f"Fix: {first}download {src.url} by hand and put {src.zip_name} in {d}/ , set "
            f"TXL_DATA_DIR to where it is, or use the offline word corpus: load_corpus('text8-mini-words').")


def _check_wikitext_zip(path: Path, src: WikiTextSource, d: Path, what: str,
                        placed: Path | None = None) -> list[list[str]]:
    """The lines of wiki.{train,valid,test}.tokens, once the archive's MD5 checks out."""
    raw = path.read_bytes()
    md5 = hashlib.md5(raw).hexdigest()
    if md5 != src.zip_md5:
        looks = (" It looks like an HTML page (an error or login page?), not a zip."
                 if raw.lstrip()[:1] == b"<" else "")
        raise CorpusError(f"{what} is not {src.zip_name}: expected MD5 {src.zip_md5}, got {md5} "
                          f"({len(raw):,} bytes; truncated or another file?).{looks} "
                          + _wikitext_hint(d, src, placed))
    sha = hashlib.sha256(raw).hexdigest()
    if sha != src.zip_sha256:
        warnings.warn(f"{src.zip_name}: the MD5 matches but the SHA-256 is {sha}, not {src.zip_sha256}",
                      stacklevel=2)
    try:
        with zipfile.ZipFile(path) as zf:
            return [zf.read(f"{src.folder}/wiki.{split}.tokens").decode("utf-8").splitlines()
                    for split in SPLITS]
    except (zipfile.BadZipFile, KeyError, EOFError, OSError, UnicodeDecodeError) as e:
        raise CorpusError(f"{what} has the right MD5 but cannot be read ({e}). "
                          + _wikitext_hint(d, src, placed)) from e


def _read_word_cache(cache: list[Path], vocab_file: Path) -> tuple[list[np.ndarray], tuple[str, ...], str | None]:
    """(splits, symbols, None) from the .npy cache, or ([], (), what is wrong with it)."""
    symbols = tuple(vocab_file.read_text(encoding="utf-8").split("\n"))
    arrays = []
    for path in cache:
        try:
            arr = np.load(path, mmap_mode="r")
        except (ValueError, OSError, EOFError) as e:
            return [], (), f"{path} is truncated or corrupt ({e or type(e).__name__})"
        if arr.dtype != np.int32 or arr.ndim != 1:
            return [], (), f"{path} holds {arr.shape} {arr.dtype}, not int32 word ids"
        arrays.append(arr)
    return arrays, symbols, None


def load_wikitext(name: str = "wt103", data_dir: str | Path | None = None, download: bool = True, *,
                  source: WikiTextSource | None = None, opener: Callable | None = None,
                  timeout: float = 5.0, progress: bool = True) -> Corpus:
    """WikiText-103 (``"wt103"``) or WikiText-2 (``"wt2"``), word level, as the authors read it:
    the vocabulary is ``<eos>`` then every word of train by falling count (``Vocab(special=
    ["<eos>"])``, min_freq 0: 267,735 symbols for WikiText-103), one ``<eos>`` ends each line.

    Read from the .npy cache in ``text8_dir(data_dir)`` (text8's folder); else from the zip
    there; else downloaded (MD5-checked, written under a temp name, then renamed)."""
    if name not in WIKITEXT and source is None:
        raise ValueError(f"unknown WikiText {name!r}; use one of {sorted(WIKITEXT)}")
    src = source or WIKITEXT[name]
    d = corpus_dir(data_dir)
    cache = [d / f"{src.name}.{split}.npy" for split in SPLITS]
    vocab_file = d / f"{src.name}.vocab.txt"
    if all(p.exists() for p in cache) and vocab_file.exists():
        arrays, symbols, problem = _read_word_cache(cache, vocab_file)
        if problem is None:
            return Corpus(src.name, *arrays, vocab=symbols, unit="word")
        warnings.warn(f"{problem}; rebuilding the {src.name} cache in {d} from {src.zip_name} "
                      "(or a download)", stacklevel=2)

    remove_leftovers(d, f"{src.zip_name}*.part")
    remove_leftovers(d, f"{src.name}.*.part")
    zpath = d / src.zip_name
    if zpath.exists():  # placed by hand or downloaded earlier
        lines = _check_wikitext_zip(zpath, src, d, str(zpath), placed=zpath)
    elif download:
        lines = _download(src.url, zpath, opener or urllib.request.urlopen, timeout, progress, src.zip_bytes,
                          _wikitext_hint(d, src),
                          lambda tmp: _check_wikitext_zip(tmp, src, d, f"the file downloaded from {src.url}"))
    else:
        raise CorpusError(f"{src.zip_name} not found in {d}/ and download=False. " + _wikitext_hint(d, src))

    vocab = Vocab(special=["<eos>"], add_eos=True)
    vocab.count_lines(lines[0])
    vocab.build_vocab()
    splits = [vocab.encode_lines(split_lines) for split_lines in lines]
    files = {**{path: lambda f, a=ids: np.save(f, a) for path, ids in zip(cache, splits)},
             vocab_file: lambda f: f.write("\n".join(vocab.idx2sym).encode("utf-8"))}  # last: marks it complete
    if not _write_cache(files, d, src.name):
        return Corpus(src.name, *splits, vocab=tuple(vocab.idx2sym), unit="word")
    arrays, symbols, _ = _read_word_cache(cache, vocab_file)
    return Corpus(src.name, *arrays, vocab=symbols, unit="word")


def word_stats(corpus: Corpus) -> dict:
    """Words, types and ``<unk>`` rate of a word corpus's splits (for READMEs and notebooks)."""
    vocab = Vocab.from_symbols(corpus.vocab)
    return {split: dict(words=len(ids), unk=1.0 - coverage(vocab, ids))
            for split, ids in zip(SPLITS, (corpus.train, corpus.valid, corpus.test))}
