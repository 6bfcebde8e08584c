"""Characters: text8 (the paper's character benchmark, Mahoney's cleaned Wikipedia: 10^8 characters
of VOCAB's 27, space and a-z), downloaded, checked and cached by corpora.py; and text8-mini, its
small twin shipped in the package.

    corpus = load_text8()          # the .npy cache, else text8 / text8.zip in text8_dir(), else a download
    mini = load_text8_mini()       # offline: ~3.1M characters
    ids = encode(" the king")      # uint8 ids: space = 0, a = 1, ..., z = 26; decode(ids) reverses it

Like the authors' `prep_text8.py`, the last 10M characters are held out: 5M valid, then 5M test;
the first 90M are train (split_corpus). What every corpus shares (Corpus, CorpusError, the data
folder, the download with its checks, the cache) lives in corpora.py, text8's 27 characters
(VOCAB, encode, decode) in symbols.py; those names import from here too, as they did.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from dataclasses import replace
from pathlib import Path
from collections.abc import Callable

import numpy as np

from txl_minimal.corpora import (Corpus, CorpusError, Source, cache_files, corpus_dir, fetch, from_cache, read_splits,
                                 split_corpus, write_cache)
from txl_minimal.symbols import VOCAB, encode
from txl_minimal.utils import check_shipped, shipped_fix

# They lived here before corpora.py and symbols.py: still importable from txl_minimal.text8.
from txl_minimal.corpora import MINI_HINT, REPO_DATA, default_text8_dir, text8_dir  # noqa: F401
from txl_minimal.symbols import VOCAB_SIZE, decode  # noqa: F401

# text8-mini ships inside the package (so `pip install .` has it too)
MINI_PATH = Path(__file__).resolve().parent / "corpus" / "text8-mini.txt.gz"

TEXT8 = Source("text8", "http://mattmahoney.net/dc/text8.zip", "text8.zip", zip_bytes=31_344_016,
               zip_sha256="a6640522afe85d1963ad56c05b0ede0a0c000dddc9671758a6cc09b7a38e5232",
               text_bytes=100_000_000, text_md5="3bea1919949baf155f99411df5fada7e")


def Text8Source(**fields) -> Source:
    """TEXT8 with ``fields`` changed: a small fake's url, zip_bytes, zip_sha256, text_bytes and text_md5
    in tests (it was TEXT8's class before one corpora.Source described every corpus's zip)."""
    return replace(TEXT8, **fields)


def _read_cache(files: list[Path], src: Source) -> tuple[Corpus | None, str | None]:
    """(text8 from its cache, memory-mapped; None), or (None, what is wrong with the cache): a file
    cut short (a full disk, a killed copy) or one from another text8."""
    if files[3].read_bytes() != VOCAB.encode():
        return None, f"{files[3]} holds another vocabulary"
    arrays, problem = read_splits(files[:3], np.uint8, [len(s) for s in split_corpus(range(src.text_bytes))])
    if problem is None and _ids_md5(arrays) != src.text_md5:  # the right shapes, other ids (an edit, another corpus)
        problem = f"{', '.join(p.name for p in files[:3])} do not hold text8 (their text's MD5 is not {src.text_md5})"
    return (None, problem) if problem else (Corpus(src.name, *arrays), None)


def _ids_md5(arrays: list[np.ndarray], block: int = 1 << 24) -> str:
    """MD5 of the text the id arrays spell, in order (a block at a time: no 100 MB copy);
    an id outside the vocabulary spells a byte no text8 holds."""
    h, to_byte = hashlib.md5(), np.frombuffer(VOCAB.encode().ljust(256, b"\0"), np.uint8)  # id -> its byte
    for arr in arrays:
        for i in range(0, len(arr), block):
            h.update(to_byte[arr[i:i + block]].tobytes())
    return h.hexdigest()


def load_text8(data_dir: str | Path | None = None, download: bool = True, *,
               source: Source = TEXT8, opener: Callable | None = None,
               timeout: float = 5.0, progress: bool = True) -> Corpus:
    """Load text8 from the .npy cache; else from text8 / text8.zip in data_dir; else download.
    A damaged cache is rebuilt (with a warning that names the file)."""
    files = cache_files(corpus_dir(data_dir), source.name, ".vocab.txt")
    corpus = from_cache(files, source, _read_cache)
    if corpus is None:
        text, = fetch(source, files[0].parent, download, opener=opener, timeout=timeout, progress=progress)
        corpus = write_cache(Corpus(source.name, *split_corpus(encode(text))), files, VOCAB.encode())
    return corpus


def load_text8_mini(path: str | Path = MINI_PATH) -> Corpus:
    """Load the ~3.1M-character corpus shipped in the package (built by data/build_text8_mini.py)."""
    path = Path(path)
    if not path.exists():
        raise CorpusError(f"{path} is missing; it ships with the package (reinstall it), "
                          "or rebuild it with data/build_text8_mini.py")
    check_shipped(path, CorpusError)  # size and SHA-256 against corpus/MANIFEST.json
    fix = shipped_fix(path) if path.resolve() == MINI_PATH else "Fix: rebuild it with data/build_text8_mini.py."
    try:
        text = gzip.decompress(path.read_bytes())
    except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError; EOFError: cut short
        raise CorpusError(f"{path} is not a complete gzip file ({type(e).__name__}: {e}). {fix}") from None
    try:
        ids = encode(text)
    except ValueError as e:
        raise CorpusError(f"{path} does not hold text8-style text ({e}). {fix}") from None
    if len(ids) < 1000:  # split_corpus would leave (nearly) empty splits
        raise CorpusError(f"{path} holds only {len(ids):,} characters, not a corpus. {fix}")
    return Corpus("text8-mini", *split_corpus(ids))
