"""Characters: text8 (the paper's character benchmark, Mahoney's cleaned Wikipedia) as ids
of its 27 symbols, downloaded, checked and cached; and text8-mini, its small twin shipped in the package.

    ids = encode(" the king")      # uint8 ids: space = 0, a = 1, ..., z = 26; decode(ids) reverses it
    corpus = load_text8()          # the .npy cache, else text8 / text8.zip in text8_dir(), else a download
    mini = load_text8_mini()       # offline: ~3.1M characters

text8 is 10^8 characters of cleaned English Wikipedia using 27 symbols: space
and a-z. Like the authors' `prep_text8.py`, the last 10M characters are held
out: 5M valid, then 5M test; the first 90M are train. Corpus and CorpusError live here, at
the bottom of the corpora, because the word corpora (word_corpora.py) return and raise them
too, and keep their files as text8 does: in text8_dir(), through _download and _write_cache.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import os
import tempfile
import urllib.request
import warnings
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable

import numpy as np
import torch

from txl_minimal import provenance
from txl_minimal.symbols import decode_symbols, encode_symbols
from txl_minimal.utils import (NO_SPACE, WriteError, atomic_write, check_shipped, file_in_the_way, remove_leftovers,
                               shipped_fix)

VOCAB = " abcdefghijklmnopqrstuvwxyz"  # id 0 = space, 1 = a, ..., 26 = z
"""text8's 27 characters in the order of their ids: space (id 0), then a to z (ids 1 to 26).

Examples:
    >>> VOCAB[0], VOCAB[1], VOCAB[26]
    (' ', 'a', 'z')
    >>> VOCAB.index("t")
    20
"""
VOCAB_SIZE = len(VOCAB)
"""27, the number of text8's characters: a text8 model's ``vocab_size`` (TXLConfig's default).

Examples:
    >>> VOCAB_SIZE, TXLConfig().vocab_size
    (27, 27)
"""
# text8-mini ships inside the package (so `pip install .` has it too); REPO_DATA is the
# repository's data/ folder, present only in a source checkout (its build script lives there).
MINI_PATH = Path(__file__).resolve().parent / "corpus" / "text8-mini.txt.gz"
REPO_DATA = Path(__file__).resolve().parents[1] / "data"
MINI_HINT = "use the bundled corpus instead: TXL_CORPUS=text8-mini (or load_corpus('text8-mini'))"

# byte value -> token id; 255 marks a byte outside the vocabulary
_BYTE_TO_ID = np.full(256, 255, dtype=np.uint8)
_BYTE_TO_ID[np.frombuffer(VOCAB.encode(), dtype=np.uint8)] = np.arange(VOCAB_SIZE)
_ID_TO_BYTE = np.frombuffer(VOCAB.encode(), dtype=np.uint8)


class CorpusError(RuntimeError):
    """A corpus is missing or broken; the message says how to fix it."""


@dataclass(frozen=True)
class Text8Source:
    """Where text8 comes from and what it must look like (tests swap in a tiny fake)."""

    url: str = "http://mattmahoney.net/dc/text8.zip"
    zip_bytes: int = 31_344_016
    zip_sha256: str = "a6640522afe85d1963ad56c05b0ede0a0c000dddc9671758a6cc09b7a38e5232"
    text_bytes: int = 100_000_000
    text_md5: str = "3bea1919949baf155f99411df5fada7e"


TEXT8 = Text8Source()


def encode(text: str | bytes) -> np.ndarray:
    """Map text over text8's 27 characters (VOCAB) to their ids; any other character is a ValueError.

    ``text``: a str, or bytes of those characters. For a corpus of another vocabulary (your own text,
    words, enwik8) use its own ``corpus.encode``; a model's: ``generate_text``.

    Returns:
        A uint8 NumPy array, one id per character.

    Examples:
        >>> encode("the king")
        array([20,  8,  5,  0, 11,  9, 14,  7], dtype=uint8)
        >>> encode("The")
        Traceback (most recent call last):
        ValueError: encode: character 'T' at position 0 is not in VOCAB ' abcdefghijklmnopqrstuvwxyz'
    """
    raw = text.encode("latin-1", "replace") if isinstance(text, str) else text
    ids = _BYTE_TO_ID[np.frombuffer(raw, dtype=np.uint8)]
    bad = np.flatnonzero(ids == 255)
    if bad.size:
        i = int(bad[0])
        ch = text[i] if isinstance(text, str) else chr(raw[i])
        raise ValueError(f"encode: character {ch!r} at position {i} is not in VOCAB {VOCAB!r}")
    return ids


def decode(ids) -> str:
    """Map text8 character ids back to text: the inverse of ``encode``.

    ``ids``: a list, a NumPy array or a tensor (any device, any shape: read in order), each in [0, 27).

    Returns:
        The text, a str; an id outside [0, 27) is a ValueError.

    Examples:
        >>> decode([20, 8, 5])
        'the'
        >>> decode(as_ids(encode("the king")))
        'the king'
        >>> decode([27])
        Traceback (most recent call last):
        ValueError: decode: ids must lie in [0, 27), got 27..27
    """
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    ids = np.asarray(ids, dtype=np.int64).ravel()
    if ids.size and (ids.min() < 0 or ids.max() >= VOCAB_SIZE):
        raise ValueError(f"decode: ids must lie in [0, {VOCAB_SIZE}), got {ids.min()}..{ids.max()}")
    return _ID_TO_BYTE[ids].tobytes().decode("ascii")


@dataclass(repr=False)
class Corpus:
    """A corpus: its train, valid and test splits as token ids, with its vocabulary and unit.

    ``load_corpus`` makes one: text8's uint8 character ids over VOCAB, a word corpus's int32 ids
    over a tuple of words, a text file's (text_file.py) ids over its own characters (a string) or
    words in the narrowest integer type, enwik8's over its bytes. ``corpus.encode``/``corpus.decode``
    turn text into its ids and back.

    Attributes:
        name: "text8-mini", "wt103", ...; a text file's: its absolute path.
        train: the training split's ids, a 1-d NumPy array (possibly memory-mapped: read-only).
        valid: the validation split's ids, read after train.
        test: the test split's ids, read after valid.
        vocab: the symbol of each id: a str of characters, or a tuple of words (enwik8: of byte numbers, "32").
        unit: "character" (scored in bpc), "word" (perplexity) or "byte" (enwik8, bpc).
        vocab_size: len(vocab), the model's ``vocab_size``.

    Examples:
        >>> corpus = load_corpus("text8-mini")
        >>> corpus.vocab_size, corpus.unit, corpus.train.dtype
        (27, 'character', dtype('uint8'))
        >>> corpus.decode(corpus.train[:24])
        ' anarchism is a politica'
    """

    name: str
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    vocab: str | tuple[str, ...] = VOCAB
    unit: str = "character"  # "character" (scored in bpc), "word" (in perplexity) or "byte" (enwik8, in bpc)

    def __post_init__(self) -> None:  # its ids know their vocabulary: evaluate refuses them to another model
        provenance.remember(self.name, self.unit, self.vocab, self.train, self.valid, self.test)

    @property
    def vocab_size(self) -> int:
        """The number of symbols, ``len(vocab)``: the ``vocab_size`` of a model of this corpus."""
        return len(self.vocab)

    def encode(self, text: str) -> np.ndarray:
        """``text`` as this corpus's ids: over text8's 27 characters as ``encode`` (another character
        is a ValueError); over a text file's characters each one's id (one the vocabulary lacks:
        UNKNOWN_CHAR's, id 0); words line by line, each line ending with ``<eos>`` where the
        vocabulary has it (``symbols.encode_symbols``).

        Returns:
            The ids, a NumPy array (text8: uint8; another vocabulary: the narrowest integer type).

        Examples:
            >>> from txl_minimal import load_corpus
            >>> load_corpus("text8-mini").encode("the").tolist()
            [20, 8, 5]
        """
        if self.unit == "character" and self.vocab == VOCAB:
            return encode(text)
        return encode_symbols(text, self.vocab, self.unit)

    def decode(self, ids) -> str:
        """The text of ``ids`` (list, NumPy array, tensor): characters joined, words joined by spaces.

        Returns:
            The text, a str.

        Examples:
            >>> from txl_minimal import load_corpus
            >>> corpus = load_corpus("text8-mini")
            >>> corpus.decode(corpus.encode("the king"))
            'the king'
        """
        if self.unit == "character" and self.vocab == VOCAB:
            return decode(ids)
        return decode_symbols(ids, self.vocab, self.unit)

    def __repr__(self) -> str:
        return (f"Corpus({self.name!r}, train={len(self.train):,}, valid={len(self.valid):,}, "
                f"test={len(self.test):,}, vocab_size={self.vocab_size:,}"
                + ("" if self.unit == "character" else f", unit={self.unit!r}") + ")")


def split_corpus(ids: np.ndarray, heldout_fraction: float = 0.1) -> tuple[np.ndarray, ...]:
    """Split as prep_text8.py: hold out the END; its first half is valid, the second test."""
    n, half = len(ids), round(len(ids) * heldout_fraction / 2)  # text8: exactly 5,000,000
    return ids[: n - 2 * half], ids[n - 2 * half : n - half], ids[n - half :]


# ---------------------------------------------------------------------------- files


def _fix_hint(data_dir: Path, src: Text8Source, placed: Path | None = None) -> str:
    """How to get a good text8; ``placed`` is a bad local file, which would win again
    (data_dir/text8 is read before text8.zip), so it has to go first."""
    first = f"delete or replace {placed}, then " if placed is not None else ""
    return (f"Fix: {first}download {src.url} by hand and put text8.zip (or the unzipped text8) "
            f"in {data_dir}/ , set TXL_DATA_DIR to where it is, or {MINI_HINT}.")


def _unzip_and_check(zip_path: Path, src: Text8Source, data_dir: Path, what: str,
                     placed: Path | None = None) -> bytes:
    """Extract the single text8 member and verify its size and MD5 (what really matters).
    ``placed``: the zip is a local file the user must remove if bad (see _fix_hint)."""
    try:
        with zipfile.ZipFile(zip_path) as zf:
            text = zf.read(zf.namelist()[0])
    except (zipfile.BadZipFile, IndexError, EOFError, OSError, zlib.error, NotImplementedError,
            RuntimeError) as e:  # zlib.error: a damaged deflate stream; RuntimeError: encrypted
        raise CorpusError(f"{what} is not a valid zip (truncated or corrupted?): {e}. "
                          + _fix_hint(data_dir, src, placed)) from e
    _check_text(text, src, data_dir, what, placed)
    return text


def _check_text(text: bytes, src: Text8Source, data_dir: Path, what: str,
                placed: Path | None = None) -> None:
    """CorpusError unless ``text`` has text8's size and MD5."""
    if len(text) != src.text_bytes or hashlib.md5(text).hexdigest() != src.text_md5:
        raise CorpusError(f"{what} does not contain text8: expected {src.text_bytes:,} bytes with "
                          f"MD5 {src.text_md5}, got {len(text):,} bytes with MD5 "
                          f"{hashlib.md5(text).hexdigest()}. " + _fix_hint(data_dir, src, placed))


def _download(url: str, dest: Path, opener: Callable, timeout: float, progress: bool,
              expected_bytes: int, fix: str, verify: Callable[[Path], object]):
    """Fetch ``url`` to a temp file beside ``dest`` with a progress bar; ``verify(temp)`` checks
    it (raising CorpusError) and its result is returned; only then is the file renamed to
    ``dest``. Anything that fails leaves no file behind. ``fix`` ends every error message."""
    from tqdm import tqdm

    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name + ".", suffix=".part")
    except OSError as e:  # a read-only or forbidden data folder: nowhere to download to
        raise CorpusError(f"cannot download {url} into {dest.parent}/ ({e.strerror}). {fix}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            try:
                with opener(url, timeout=timeout) as r:
                    total = int(r.headers.get("Content-Length") or 0)  # 0: unknown
                    with tqdm(total=total or expected_bytes, unit="B", unit_scale=True,
                              desc=dest.name, disable=not progress) as bar:
                        while chunk := r.read(1 << 20):
                            f.write(chunk)
                            bar.update(len(chunk))
            # URLError, timeouts, refused connections are OSErrors; a body cut off
            # mid-stream is http.client.IncompleteRead, an HTTPException.
            except (OSError, http.client.HTTPException) as e:
                if isinstance(e, OSError) and e.errno in NO_SPACE:  # our write, not the network
                    raise CorpusError(f"no space left in {dest.parent}/ for {dest.name} (the partial download "
                                      "was removed). Fix: free some disk space, or set TXL_DATA_DIR to a "
                                      f"folder on another disk; or {MINI_HINT}.") from None
                raise CorpusError(f"could not download {url} ({e}). " + fix) from e
        got = os.path.getsize(tmp)
        if got < total:  # a cut connection; the checks in verify would catch it too
            raise CorpusError(f"download of {url} stopped after {got:,} of {total:,} bytes. " + fix)
        result = verify(Path(tmp))
        os.replace(tmp, dest)
        return result
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _download_text8(src: Text8Source, data_dir: Path, opener: Callable, timeout: float,
                    progress: bool) -> bytes:
    """Fetch text8.zip to a temp file; it becomes text8.zip only once its content checks out."""
    def verify(tmp: Path) -> bytes:
        sha = hashlib.sha256(tmp.read_bytes()).hexdigest()
        if sha != src.zip_sha256:  # only a warning: a re-zipped but identical text8 is fine
            warnings.warn(f"text8.zip SHA-256 is {sha}, expected {src.zip_sha256}; "
                          "checking the unzipped content instead", stacklevel=2)
        return _unzip_and_check(tmp, src, data_dir, f"the file downloaded from {src.url}")

    return _download(src.url, data_dir / "text8.zip", opener, timeout, progress, src.zip_bytes,
                     _fix_hint(data_dir, src), verify)


def default_text8_dir() -> Path:
    """data/text8/ in a source checkout (an editable install); for an installed package
    (site-packages is no place for downloads) the user cache: $XDG_CACHE_HOME/txl_minimal/text8,
    by default ~/.cache/txl_minimal/text8."""
    if (REPO_DATA / "build_text8_mini.py").is_file():
        return REPO_DATA / "text8"
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "txl_minimal" / "text8"


def text8_dir(data_dir: str | Path | None = None) -> Path:
    """Where text8 lives: data_dir, else $TXL_DATA_DIR, else default_text8_dir()."""
    return Path(data_dir or os.environ.get("TXL_DATA_DIR") or default_text8_dir())


def corpus_dir(data_dir: str | Path | None = None) -> Path:
    """``text8_dir(data_dir)``, or a ``CorpusError`` naming what set it when a file stands where that
    folder must be (TXL_DATA_DIR=notes.txt): the download would fail with "File exists" instead."""
    d = text8_dir(data_dir)
    blocker = file_in_the_way(d)
    if blocker is None:
        return d
    if data_dir:
        what, fix = f"data_dir={str(data_dir)!r}", "pass data_dir= a folder (it is made if missing)"
    elif os.environ.get("TXL_DATA_DIR"):
        what, fix = (f"TXL_DATA_DIR={os.environ['TXL_DATA_DIR']}", "set TXL_DATA_DIR to a folder (it is made if "
                     f"missing), or unset it to use {default_text8_dir()}")
    else:
        what, fix = "the default data folder", f"move {blocker} out of the way, or set TXL_DATA_DIR to a folder"
    inside = "" if blocker == d.absolute() else f" inside {blocker}"
    raise CorpusError(f"{what} names {d}{inside}, but {blocker} is a file, not a folder: corpora are kept in a "
                      f"folder. Fix: {fix}; or {MINI_HINT}.")


def _read_cache(cache: list[Path], vocab_file: Path, src: Text8Source) -> tuple[list[np.ndarray], str | None]:
    """(the memory-mapped splits, None), or ([], what is wrong with the cache): a file cut
    short (a full disk, a killed copy) or one from another text8."""
    if vocab_file.read_bytes() != VOCAB.encode():
        return [], f"{vocab_file} holds another vocabulary"
    arrays = []
    for path, size in zip(cache, map(len, split_corpus(range(src.text_bytes)))):  # range: no copy
        try:
            arr = np.load(path, mmap_mode="r")  # mmap: instant, no RAM copy
        except (ValueError, OSError, EOFError) as e:
            return [], f"{path} is truncated or corrupt ({e or type(e).__name__})"
        if arr.dtype != np.uint8 or arr.shape != (size,):
            return [], f"{path} holds {arr.shape} {arr.dtype}, not the {size:,} uint8 ids of its split"
        arrays.append(arr)
    if _ids_md5(arrays) != src.text_md5:  # the right shapes, other ids (an edit, another corpus)
        return [], f"{', '.join(p.name for p in cache)} do not hold text8 (their text's MD5 is not {src.text_md5})"
    return arrays, None


def _ids_md5(arrays: list[np.ndarray], block: int = 1 << 24) -> str:
    """MD5 of the text the id arrays spell, in order (a block at a time: no 100 MB copy);
    an id outside the vocabulary spells a byte no text8 holds."""
    h, to_byte = hashlib.md5(), np.append(_ID_TO_BYTE, np.zeros(256 - VOCAB_SIZE, np.uint8))
    for arr in arrays:
        for i in range(0, len(arr), block):
            h.update(to_byte[arr[i:i + block]].tobytes())
    return h.hexdigest()


def load_text8(data_dir: str | Path | None = None, download: bool = True, *,
               source: Text8Source = TEXT8, opener: Callable | None = None,
               timeout: float = 5.0, progress: bool = True) -> Corpus:
    """Load text8 from the .npy cache; else from text8 / text8.zip in data_dir; else download.
    A damaged cache is rebuilt (with a warning that names the file)."""
    d = corpus_dir(data_dir)
    names = ("train", "valid", "test")
    cache = [d / f"text8.{n}.npy" for n in names]
    vocab_file = d / "text8.vocab.txt"
    if all(p.exists() for p in cache) and vocab_file.exists():
        arrays, problem = _read_cache(cache, vocab_file, source)
        if problem is None:
            return Corpus("text8", *arrays)
        warnings.warn(f"{problem}; rebuilding the text8 cache in {d} from text8 or text8.zip (or a download)",
                      stacklevel=2)

    remove_leftovers(d, "text8*.part")  # what a killed download or cache write left behind
    if (d / "text8").exists():  # placed by hand, already unzipped
        text = (d / "text8").read_bytes()
        _check_text(text, source, d, f"{d / 'text8'}", placed=d / "text8")
    elif (d / "text8.zip").exists():  # placed by hand or downloaded earlier
        text = _unzip_and_check(d / "text8.zip", source, d, f"{d / 'text8.zip'}", placed=d / "text8.zip")
    elif download:
        text = _download_text8(source, d, opener or urllib.request.urlopen, timeout, progress)
    else:
        raise CorpusError(f"text8 not found in {d}/ and download=False. " + _fix_hint(d, source))

    splits = split_corpus(encode(text))
    files = {**{path: lambda f, a=arr: np.save(f, a) for path, arr in zip(cache, splits)},
             vocab_file: lambda f: f.write(VOCAB.encode())}  # written last: marks the cache complete
    if not _write_cache(files, d, "text8"):
        return Corpus("text8", *splits)
    return Corpus("text8", *[np.load(p, mmap_mode="r") for p in cache])


def _write_cache(files: dict[Path, Callable], d: Path, name: str) -> bool:
    """Write a corpus's .npy cache (each file whole, then renamed); False, with a warning saying
    so, where ``d`` cannot take it (read-only, forbidden, full): the corpus is then used from memory."""
    try:
        for path, write in files.items():
            atomic_write(path, write, suffix=".part")
    except WriteError as e:
        for path in files:  # no half cache: the vocab file (last) marks a complete one
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        warnings.warn(f"{name}: could not write its cache in {d}/ ({e.reason}): using it from memory, rebuilt "
                      "from the archive at every load. Fix: make the folder writable, or set TXL_DATA_DIR to a "
                      "writable folder holding the archive (the cache then goes there).", stacklevel=3)
        return False
    return True


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
