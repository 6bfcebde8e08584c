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
a CorpusError naming the file (an HTML page where one came instead; a folder in its place, as
``unzip text8.zip -d text8`` makes) and the fix, and leaves no file behind. A cache is written
whole, its record (the vocabulary) last, and memory-mapped back; where the folder cannot take it
(read-only, full, a file in its place) the corpus is used from memory, with a warning saying so;
what a write killed half-way left is removed by the next (never a live process's).

A checkpoint records the corpus its model trained on (``corpus_record``: a text file's path,
SHA-256, unit, split and max_vocab, ``Corpus.reading``), so that evaluate and --resume read the
same text the same way, and ``corpus_change`` says why a resume would not (an edited file, another
file, the run's file missing from the command, a name $TXL_CORPUS chose).
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
from txl_minimal.symbols import UNKNOWN_CHAR, VOCAB, decode, decode_symbols, encode, encode_symbols
from txl_minimal.files import NO_SPACE, atomic_write, file_in_the_way, part_suffix, remove_dead_parts

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
        reading: how a text file was read, to read it again the same way (every checkpoint of a run records
            it: evaluate, --resume): its "path", "sha256" and "bytes" (its content), "unit", "split",
            "max_vocab" and "fixed_vocab" (read onto a vocabulary given, ``load_corpus(path, vocab=...)``);
            None for a named corpus (its name says it all) or one built in Python.

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
    reading: dict | None = None  # a text file's: how it was read (path, sha256, unit, split, ...), to read it again

    def __post_init__(self) -> None:  # its ids know their vocabulary: evaluate refuses them to another model
        for split in SPLITS:  # float ids (0.7) would be trained on as 0, text fail inside torch: said here
            ids = validation.integer_ids(getattr(self, split), f"Corpus {self.name!r}'s {split} split")
            if np.ndim(ids) != 1:  # a (rows, columns) array would be read as `rows` tokens: "too short"
                raise ValueError(f"Corpus {self.name!r}: its {split} split must be one stream of token ids (1-D), "
                                 f"got shape {tuple(np.shape(ids))}. Fix: pass the ids as one "
                                 "sequence (ids.ravel() for rows that continue each other); LMOrderedIterator "
                                 "cuts them into batch columns itself")
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


READ_AS = ("unit", "split", "max_vocab", "fixed_vocab")  # how a text file was read: the same file read otherwise


def corpus_record(corpus: Corpus) -> dict:
    """What a checkpoint records of the corpus its model trained on (its "corpus" entry), to read it
    again and to sample as it was: its "name" and "unit", a text file's "reading" (``Corpus.reading``:
    path, SHA-256, unit, split, max_vocab; None for a named corpus) and "unknown", how many training ids
    are its unknown symbol (U+FFFD of characters, ``<unk>`` of words; None without one): generate_text
    draws it only where the text held it."""
    symbols = list(corpus.vocab)
    placeholder = {"character": UNKNOWN_CHAR, "word": "<unk>"}.get(corpus.unit)
    train, block = np.asarray(corpus.train), 1 << 24  # a block at a time: no 100 MB mask for WikiText-103
    unknown = (sum(int(np.count_nonzero(train[i:i + block] == symbols.index(placeholder)))
                   for i in range(0, len(train), block)) if placeholder in symbols else None)
    return dict(name=corpus.name, unit=corpus.unit, reading=corpus.reading, unknown=unknown)


def shown_path(path: str | Path) -> str:
    """``path`` as a user would type it here: relative to the current folder when inside it, else absolute."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def corpus_change(saved: dict, used: dict) -> str | None:
    """Why a run whose checkpoint records ``saved`` (``corpus_record``) cannot go on over ``used``, in a
    sentence with the fix; None when both are the same text read the same way (a file moved or copied
    elsewhere is the same text: its SHA-256 says so)."""
    a, b = saved.get("reading"), used.get("reading")
    env = os.environ.get("TXL_CORPUS")
    if a is not None and b is not None:
        if a["sha256"] != b["sha256"]:
            then = f"SHA-256 {a['sha256'][:12]}..., {a['bytes']:,} bytes"
            now = f"SHA-256 {b['sha256'][:12]}..., {b['bytes']:,} bytes"
            if a["path"] == b["path"]:
                return (f"{shown_path(a['path'])} changed since the run read it ({then} then, {now} now): the run "
                        "would go on over another text. Fix: restore the file the run trained on, or train afresh "
                        "in another --out")
            return (f"used corpus={a['path']!r}, this run {b['path']!r}: another text ({then} there, {now} here). Fix: "
                    f"resume on the file it trained on, --corpus {shown_path(a['path'])} (or a copy of it), or train "
                    "afresh in another --out")
        differ = [f"{k} {a.get(k)!r} there, {b.get(k)!r} here" for k in READ_AS if a.get(k) != b.get(k)]
        if differ:
            return (f"{shown_path(b['path'])} is read otherwise than the run read it ({'; '.join(differ)}): the ids "
                    "would not line up. Fix: resume with the run's own settings (--unit, --set split=..., --set "
                    "max_vocab=...; left out, a resume takes them from the checkpoint)")
        return None
    if a is not None:  # a named corpus (or one built in Python) in place of the run's file
        came = (f" ($TXL_CORPUS={env} is set: it overrides a corpus name, never a file's path)"
                if env and env == used["name"] else "")
        return (f"the run trained on {shown_path(a['path'])}, but this resume reads {used['name']}{came}. Fix: add "
                f"--corpus {shown_path(a['path'])} (in Python: load_corpus({shown_path(a['path'])!r}))")
    if saved["name"] == used["name"]:
        return None
    if env and env == used["name"] and b is None:  # the variable, never typed in this command, chose the corpus
        return (f"the run trained on {saved['name']}, but this resume reads {used['name']} because $TXL_CORPUS="
                f"{env} is set, which overrides the corpus named (--corpus, TrainConfig.corpus). Fix: unset "
                f"TXL_CORPUS (or set it to {saved['name']}) to resume on {saved['name']}")
    theirs = b["path"] if b is not None else used["name"]
    return (f"used corpus={saved['name']!r}, this run {theirs!r}: the memory and data position would not line up. "
            f"Fix: resume on its own corpus, --corpus {saved['name']}, or train afresh in another --out")


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
    problem = data_dir_problem(data_dir)
    if problem is not None:
        raise CorpusError(f"{problem}; or {MINI_HINT}.")
    return text8_dir(data_dir)


def data_dir_problem(data_dir: str | Path | None = None) -> str | None:
    """The sentence (up to its fix) saying that a file stands where ``text8_dir(data_dir)`` must be a
    folder, naming what set it (data_dir=, $TXL_DATA_DIR, the default); None when it is or can become one."""
    d = text8_dir(data_dir)
    blocker = file_in_the_way(d)
    if blocker is None:
        return None
    if data_dir:
        what, fix = f"data_dir={str(data_dir)!r}", "pass data_dir= a folder (it is made if missing)"
    elif os.environ.get("TXL_DATA_DIR"):
        what, fix = (f"TXL_DATA_DIR={os.environ['TXL_DATA_DIR']}", "set TXL_DATA_DIR to a folder (it is made if "
                     f"missing), or unset it to use {default_text8_dir()}")
    else:
        what, fix = "the default data folder", f"move {blocker} out of the way, or set TXL_DATA_DIR to a folder"
    inside = "" if blocker == d.absolute() else f" inside {blocker}"
    return f"{what} names {d}{inside}, but {blocker} is a file, not a folder: corpora are kept in a folder. Fix: {fix}"


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
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name + ".", suffix=part_suffix())
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
    remove_dead_parts(d, src.name)  # what a killed download or cache write left behind (not a live one's)
    remove_dead_parts(d, src.zip_name)
    text_path, zpath = d / src.name, d / src.zip_name
    for placed in (d / name for name in src.files):
        if placed.is_dir():  # `unzip text8.zip -d text8` makes one: reading it would be an IsADirectoryError
            raise CorpusError(folder_in_place(placed, src))
    if src.text_md5 and text_path.exists():  # placed by hand, already unzipped
        text = text_path.read_bytes()
        check_text(text, src, d, str(text_path), placed=text_path)
        return [text]
    if zpath.exists():  # placed by hand or downloaded earlier
        return unzip_and_check(zpath, src, d, str(zpath), placed=zpath)
    if download:
        return download_zip(src, d, opener or urllib.request.urlopen, timeout, progress)
    raise CorpusError(f"{src.files[0]} not found in {d}/ and download=False. " + fix_hint(src, d))


def folder_in_place(placed: Path, src: Source) -> str:
    """The sentence for a folder where ``src``'s unzipped text or its zip belongs (``unzip text8.zip -d text8``
    run in the data folder makes text8/text8): what is there and how to put the file in its place."""
    inside = placed / src.name
    if placed.name == src.name:
        what = f"the unzipped {src.name} (as unzip {src.zip_name} -d {src.name} makes)"
    else:
        what = f"the zip {src.zip_name}"
    move = (f"move the {src.name} it holds into its place: mv {inside} {placed}.moved && rmdir {placed} && "
            f"mv {placed}.moved {placed}" if placed.name == src.name and inside.is_file() else
            f"move the folder out of the way (or delete it), then place {' or '.join(src.files)} in "
            f"{placed.parent}/ by hand, or let it download")
    return f"{placed} is a folder, not {what}. Fix: {move}; or {src.offline}."


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
    if not all(p.is_file() for p in files):  # (a folder of that name is no cache: writing it says so)
        return None
    corpus, problem = read(files, src)
    if corpus is None:
        warnings.warn(f"{problem}; rebuilding the {src.name} cache in {files[0].parent} from {' or '.join(src.files)} "
                      "(or a download)", stacklevel=3)
    return corpus


def write_cache(corpus: Corpus, files: list[Path], record: bytes) -> Corpus:
    """``corpus`` read back memory-mapped from its cache, once its splits and ``record`` are written to
    ``files`` (cache_files; each whole, then renamed; the record last); ``corpus`` itself, with a warning
    saying so, where their folder cannot take them (read-only, forbidden, full, a file in its place).
    What a write killed half-way left (``name.*.PID.part`` of an ended process) is removed first."""
    writes = [lambda f, a=a: np.save(f, a) for a in (corpus.train, corpus.valid, corpus.test)]
    try:
        for path, write in zip(files, writes + [lambda f: f.write(record)]):
            with contextlib.suppress(OSError):  # (a folder that is not there yet, or a file in its place)
                remove_dead_parts(path.parent, path.name)
            atomic_write(path, write, suffix=part_suffix())
    except OSError as e:  # WriteError; numpy's own for a full disk ("... requested and 0 written"); a file in
        # the way of the folder (NotADirectoryError, FileExistsError)
        for path in files:  # no half cache: the record (last) marks a complete one
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        reason = getattr(e, "reason", "") or e.strerror or str(e)
        warnings.warn(f"{Path(corpus.name).name}: could not write its cache in {files[0].parent}/ ({reason}): using "
                      "it from memory, built again at every load. Fix: make the folder writable (or free some disk "
                      "space), or set TXL_DATA_DIR to a writable folder holding the archive (the cache then goes "
                      "there).", stacklevel=3)
        return corpus
    return replace(corpus, **{split: np.load(path, mmap_mode="r") for split, path in zip(SPLITS, files)})
