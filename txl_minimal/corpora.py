"""The corpus layer, what every corpus shares: ``Corpus`` (its splits as ids, its vocabulary and
unit), ``CorpusError`` (a corpus missing or broken: the message says the fix), the folder corpora
live in, their split, and for those fetched as a zip (text8, enwik8, WikiText) one ``Source``, one
download with its checks and one .npy cache. text8.py, enwik8.py, word_corpora.py and text_file.py
each add one kind of corpus on top; data.py is their front door.

text8.py's load_text8 is these four lines and the reader of its cache:

    files = cache_files(corpus_dir(), "text8", ".vocab.txt")     # text8.train.npy, ..., text8.vocab.txt
    corpus = from_cache(files, TEXT8, _read_cache)               # the cache, memory-mapped (None: build it)
    text, = fetch(TEXT8, files[0].parent)                        # placed by hand, downloaded earlier or now
    corpus = write_cache(Corpus("text8", *split_corpus(encode(text))), files, VOCAB.encode())

A zip is checked before it is read, a download before it is renamed into place: by the size and
MD5 of its unzipped text (text8, enwik8; a copy placed unzipped is read too) or by its own MD5
(WikiText); a zip of another SHA-256 whose content checks out only warns (a re-zip). What fails is
a CorpusError naming the file (an HTML page where one came instead) and the fix, and leaves no
file behind. A cache is written whole, its record (the vocabulary) last, and memory-mapped back;
where the folder cannot take it the corpus is used from memory, with a warning saying so.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import io
import os
import tempfile
import urllib.request
import warnings
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from txl_minimal import provenance, validation
from txl_minimal.symbols import VOCAB, decode, decode_symbols, encode, encode_symbols
from txl_minimal.utils import NO_SPACE, WriteError, atomic_write, file_in_the_way, remove_leftovers

SPLITS = ("train", "valid", "test")
# REPO_DATA is the repository's data/ folder, present only in a source checkout (its build script lives there).
REPO_DATA = Path(__file__).resolve().parents[1] / "data"
MINI_HINT = "use the bundled corpus instead: TXL_CORPUS=text8-mini (or load_corpus('text8-mini'))"
HTML_HINT = " It looks like an HTML page (an error or login page?), not a zip."


class CorpusError(RuntimeError):
    """A corpus is missing or broken; the message says how to fix it."""


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
        for split in SPLITS:  # float ids (0.7) would be trained on as 0, text fail inside torch: said here
            validation.integer_ids(getattr(self, split), f"Corpus {self.name!r}'s {split} split", dims=1)
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


def split_sizes(n: int, split: Sequence[float]) -> tuple[int, int, int]:
    """(train, valid, test) sizes of ``n`` symbols: valid round(n * split[1]), test round(n * split[2])."""
    valid, test = round(n * split[1]), round(n * split[2])
    return n - valid - test, valid, test


# ---------------------------------------------------------------------------- the data folder


def default_text8_dir() -> Path:
    """data/text8/ in a source checkout (an editable install); for an installed package
    (site-packages is no place for downloads) the user cache: $XDG_CACHE_HOME/txl_minimal/text8,
    by default ~/.cache/txl_minimal/text8."""
    if (REPO_DATA / "build_text8_mini.py").is_file():
        return REPO_DATA / "text8"
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "txl_minimal" / "text8"


def text8_dir(data_dir: str | Path | None = None) -> Path:
    """Where the corpora live (text8's folder, named for it): data_dir, else $TXL_DATA_DIR, else default_text8_dir()."""
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


# ---------------------------------------------------------------------------- a corpus fetched as a zip


@dataclass(frozen=True)
class Source:
    """Where a corpus's zip comes from and what it must hold (tests swap in a small fake:
    ``dataclasses.replace(TEXT8, url=..., text_md5=...)``). One check decides: ``text_md5`` with
    ``text_bytes``, those of the unzipped text (text8, enwik8), or ``zip_md5``, the zip's own
    (WikiText); a zip of another ``zip_sha256`` only warns once its content checks out."""

    name: str  # the corpus; its cache is name.train.npy, ...; its unzipped text, placed by hand, the file `name`
    url: str
    zip_name: str  # the zip's name in the data folder
    zip_bytes: int  # the progress bar's total when the server sends no Content-Length
    zip_sha256: str
    text_bytes: int = 0
    text_md5: str = ""
    zip_md5: str = ""
    members: tuple[str, ...] = ()  # the files read from the zip, in order; (): its first (text8's only one)
    offline: str = MINI_HINT  # the last words of every fix: what to use instead, offline

    @property
    def files(self) -> tuple[str, ...]:
        """What is looked for in the data folder, in order: the unzipped text (where text_md5 checks it), the zip."""
        return (self.name, self.zip_name) if self.text_md5 else (self.zip_name,)


def fix_hint(src: Source, d: Path, placed: Path | None = None) -> str:
    """How to get a good copy of ``src`` into ``d``; ``placed`` is a bad local file, read again at every
    call (an unzipped text even before a good zip) until it goes, so it has to go first."""
    first = f"delete or replace {placed}, then " if placed is not None else ""
    unzipped = f" (or the unzipped {src.name})" if src.text_md5 else ""
    return (f"Fix: {first}download {src.url} by hand and put {src.zip_name}{unzipped} in {d}/ , set TXL_DATA_DIR "
            f"to where it is, or {src.offline}.")


def check_text(text: bytes, src: Source, d: Path, what: str, placed: Path | None = None) -> None:
    """CorpusError naming ``what`` unless ``text`` has the size and MD5 of ``src``'s unzipped text."""
    md5 = hashlib.md5(text).hexdigest()
    if len(text) != src.text_bytes or md5 != src.text_md5:
        raise CorpusError(f"{what} does not hold {src.name}: expected {src.text_bytes:,} bytes with MD5 "
                          f"{src.text_md5}, got {len(text):,} bytes with MD5 {md5}. " + fix_hint(src, d, placed))


def unzip_and_check(zpath: Path, src: Source, d: Path, what: str, placed: Path | None = None) -> list[bytes]:
    """The bytes of ``src.members`` in the zip ``zpath`` once they check out (see Source); else a
    CorpusError naming ``what`` and the fix. ``placed``: a local file the user must remove if bad."""
    try:
        raw = zpath.read_bytes()
    except OSError as e:  # a folder of that name, a file we may not read
        raise CorpusError(f"{what} cannot be read ({e}). " + fix_hint(src, d, placed)) from None
    looks = HTML_HINT if raw[:512].lstrip()[:1] == b"<" else ""
    if src.zip_md5 and (md5 := hashlib.md5(raw).hexdigest()) != src.zip_md5:
        raise CorpusError(f"{what} is not {src.zip_name}: expected MD5 {src.zip_md5}, got {md5} ({len(raw):,} bytes; "
                          f"truncated or another file?).{looks} " + fix_hint(src, d, placed))
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as zf:
            texts = [zf.read(member) for member in src.members or [zf.namelist()[0]]]
    except (zipfile.BadZipFile, KeyError, IndexError, EOFError, OSError, zlib.error, NotImplementedError,
            RuntimeError) as e:  # zlib.error: a damaged deflate stream; RuntimeError: encrypted; IndexError: empty
        why = "has the right MD5 but cannot be read" if src.zip_md5 else "is not a valid zip (truncated or corrupted?)"
        raise CorpusError(f"{what} {why}: {e}.{looks} " + fix_hint(src, d, placed)) from None
    if src.text_md5:
        check_text(texts[0], src, d, what, placed)
    sha = hashlib.sha256(raw).hexdigest()
    if sha != src.zip_sha256:  # the content is right: a re-zipped copy is fine
        checks = f"the unzipped {src.name} checks out (size and MD5)" if src.text_md5 else "its MD5 checks out"
        warnings.warn(f"{what}: the zip's SHA-256 is {sha}, not {src.zip_sha256}, but {checks}", stacklevel=3)
    return texts


def download_zip(src: Source, d: Path, opener: Callable, timeout: float, progress: bool) -> list[bytes]:
    """Fetch ``src.url`` to a temp file beside d/src.zip_name with a progress bar; ``unzip_and_check``
    checks it and its result is returned; only then is the file renamed to src.zip_name. Anything
    that fails leaves no file behind."""
    from tqdm import tqdm

    dest, fix = d / src.zip_name, fix_hint(src, d)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name + ".", suffix=".part")
    except OSError as e:  # a read-only or forbidden data folder: nowhere to download to
        raise CorpusError(f"cannot download {src.url} into {dest.parent}/ ({e.strerror}). {fix}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            try:
                with opener(src.url, timeout=timeout) as r:
                    total = int(r.headers.get("Content-Length") or 0)  # 0: unknown
                    with tqdm(total=total or src.zip_bytes, unit="B", unit_scale=True,
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
                                      f"folder on another disk; or {src.offline}.") from None
                raise CorpusError(f"could not download {src.url} ({e}). " + fix) from e
        got = os.path.getsize(tmp)
        if got < total:  # a cut connection; the checks would catch it too
            raise CorpusError(f"download of {src.url} stopped after {got:,} of {total:,} bytes. " + fix)
        texts = unzip_and_check(Path(tmp), src, d, f"the file downloaded from {src.url}")
        os.replace(tmp, dest)
        return texts
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def fetch(src: Source, d: Path, download: bool = True, *, opener: Callable | None = None, timeout: float = 5.0,
          progress: bool = True) -> list[bytes]:
    """The checked bytes of ``src``'s members (text8, enwik8: the one text): from its unzipped text
    placed in ``d`` by hand, else its zip there (placed by hand or downloaded earlier), else a
    download through ``opener`` (default urllib.request.urlopen; tests pass a fake); where
    ``download`` is False and neither is there, a CorpusError saying how to get it."""
    remove_leftovers(d, f"{src.name}.*.part")  # what a killed download or cache write left behind
    remove_leftovers(d, f"{src.zip_name}.*.part")
    text_path, zpath = d / src.name, d / src.zip_name
    if src.text_md5 and text_path.exists():  # placed by hand, already unzipped
        text = text_path.read_bytes()
        check_text(text, src, d, str(text_path), placed=text_path)
        return [text]
    if zpath.exists():  # placed by hand or downloaded earlier
        return unzip_and_check(zpath, src, d, str(zpath), placed=zpath)
    if download:
        return download_zip(src, d, opener or urllib.request.urlopen, timeout, progress)
    raise CorpusError(f"{src.files[0]} not found in {d}/ and download=False. " + fix_hint(src, d))


# ---------------------------------------------------------------------------- the cache


def cache_files(d: Path, stem: str, record: str) -> list[Path]:
    """A corpus's cache in ``d``: stem.train.npy, stem.valid.npy, stem.test.npy, then stem + ``record``
    (its vocabulary, written last: the cache is complete once it exists)."""
    return [d / f"{stem}.{split}.npy" for split in SPLITS] + [d / f"{stem}{record}"]


def read_splits(paths: Sequence[Path], dtype, lengths: Sequence[int] | None = None) -> tuple[list[np.ndarray],
                                                                                            str | None]:
    """(the splits in ``paths``, memory-mapped: instant, no RAM copy; None), or ([], what is wrong):
    a file cut short (a full disk, a killed copy), or not the 1-d ``dtype`` ids (of ``lengths``) of its split."""
    arrays, dtype = [], np.dtype(dtype)
    for i, path in enumerate(paths):
        try:
            arr = np.load(path, mmap_mode="r")
        except (ValueError, OSError, EOFError) as e:
            return [], f"{path} is truncated or corrupt ({e or type(e).__name__})"
        n = None if lengths is None else lengths[i]
        if arr.dtype != dtype or arr.ndim != 1 or (n is not None and len(arr) != n):
            return [], f"{path} holds {arr.shape} {arr.dtype}, not the {'' if n is None else f'{n:,} '}{dtype} ids " \
                       "of its split"
        arrays.append(arr)
    return arrays, None


def from_cache(files: list[Path], src: Source,
               read: Callable[[list[Path], Source], tuple[Corpus | None, str | None]]) -> Corpus | None:
    """The corpus ``read(files, src)`` finds in its cache (memory-mapped) when all of ``files`` are
    there; None to build it: quietly without a cache, with a warning naming the damage with one."""
    if not all(p.exists() for p in files):
        return None
    corpus, problem = read(files, src)
    if corpus is None:
        warnings.warn(f"{problem}; rebuilding the {src.name} cache in {files[0].parent} from {' or '.join(src.files)} "
                      "(or a download)", stacklevel=3)
    return corpus


def write_cache(corpus: Corpus, files: list[Path], record: bytes) -> Corpus:
    """``corpus`` read back memory-mapped from its cache, once its splits and ``record`` are written to
    ``files`` (cache_files; each whole, then renamed; the record last); ``corpus`` itself, with a warning
    saying so, where their folder cannot take them (read-only, forbidden, full)."""
    writes = [lambda f, a=a: np.save(f, a) for a in (corpus.train, corpus.valid, corpus.test)]
    try:
        for path, write in zip(files, writes + [lambda f: f.write(record)]):
            atomic_write(path, write, suffix=".part")
    except WriteError as e:
        for path in files:  # no half cache: the record (last) marks a complete one
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        warnings.warn(f"{Path(corpus.name).name}: could not write its cache in {files[0].parent}/ ({e.reason}): using "
                      "it from memory, built again at every load. Fix: make the folder writable, or set TXL_DATA_DIR "
                      "to a writable folder holding the archive (the cache then goes there).", stacklevel=3)
        return corpus
    return replace(corpus, **{split: np.load(path, mmap_mode="r") for split, path in zip(SPLITS, files)})
