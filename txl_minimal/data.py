"""Character-level text8 (the paper's char benchmark) and its small shipped twin; word-level
WikiText-103 / WikiText-2 (the paper's word benchmarks) and text8-mini split into words.

    corpus = load_corpus("auto")              # text8 if present/downloadable, else text8-mini
    it = LMOrderedIterator(corpus.train, batch_size=22, tgt_len=512)
    for x, y in it: ...                       # (batch, seq) LongTensors, y = x shifted by one
    words = load_corpus("text8-mini-words")   # offline: 10,000 words + <unk>; also "wt103", "wt2"

text8 is 10^8 characters of cleaned English Wikipedia using 27 symbols: space
and a-z. Like the authors' `prep_text8.py`, the last 10M characters are held
out: 5M valid, then 5M test; the first 90M are train. A word corpus has
``unit == "word"``: its ids index ``corpus.vocab`` (a tuple of symbols, by falling
count), and it is scored in perplexity rather than bits per character.
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
from collections.abc import Callable, Iterator

import numpy as np
import torch

from txl_minimal.utils import NO_SPACE, WriteError, atomic_write, check_shipped, remove_leftovers, shipped_fix
from txl_minimal.words import Vocab, coverage

VOCAB = " abcdefghijklmnopqrstuvwxyz"  # id 0 = space, 1 = a, ..., 26 = z
VOCAB_SIZE = len(VOCAB)
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
    """Map text over VOCAB to a uint8 array of ids; any other character is a ValueError."""
    raw = text.encode("latin-1", "replace") if isinstance(text, str) else text
    ids = _BYTE_TO_ID[np.frombuffer(raw, dtype=np.uint8)]
    bad = np.flatnonzero(ids == 255)
    if bad.size:
        i = int(bad[0])
        ch = text[i] if isinstance(text, str) else chr(raw[i])
        raise ValueError(f"encode: character {ch!r} at position {i} is not in VOCAB {VOCAB!r}")
    return ids


def decode(ids) -> str:
    """Map ids (list, numpy array or tensor, any device) back to a string."""
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    ids = np.asarray(ids, dtype=np.int64).ravel()
    if ids.size and (ids.min() < 0 or ids.max() >= VOCAB_SIZE):
        raise ValueError(f"decode: ids must lie in [0, {VOCAB_SIZE}), got {ids.min()}..{ids.max()}")
    return _ID_TO_BYTE[ids].tobytes().decode("ascii")


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


@dataclass(repr=False)
class Corpus:
    """Encoded train/valid/test splits (numpy arrays, possibly memory-mapped): uint8 character
    ids over VOCAB, or int32 word ids over a tuple of symbols (``unit="word"``)."""

    name: str
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    vocab: str | tuple[str, ...] = VOCAB
    unit: str = "character"  # "character" (scored in bpc) or "word" (scored in perplexity)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

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
    d = text8_dir(data_dir)
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


# ---------------------------------------------------------------------------- words

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
    d = text8_dir(data_dir)
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


def as_ids(data, limit: int | None = None) -> torch.Tensor:
    """Token ids (list, numpy array or memmap, tensor) as a new LongTensor on the CPU.

    ``limit`` keeps only the first that many. Floats are refused rather than truncated.
    """
    data = data[:limit] if limit is not None else data
    if not isinstance(data, torch.Tensor):
        data = np.asarray(data)
        if data.size and data.dtype.kind not in "iu":
            raise ValueError(f"token ids must be integers, got {data.dtype}. "
                             "Encode text with encode().")
        return torch.from_numpy(data.astype(np.int64))  # astype copies
    if data.is_floating_point() or data.is_complex() or data.dtype == torch.bool:
        raise ValueError(f"token ids must be integers, got {data.dtype}. Encode text with encode().")
    return data.detach().to("cpu", torch.long, copy=True)


class LMOrderedIterator:
    """Serve a token stream as in-order segments, batch first, for recurrence memory.

    The stream is cut into `batch_size` contiguous columns (row b of every batch
    continues row b of the previous one, so mems carry over). Each step yields
    inputs (batch, L) and targets (batch, L), the same columns shifted by one.

    - training (default): every segment has L = tgt_len; the short tail is dropped.
    - evaluation=True: the last, shorter segment is kept, so every token of each
      column (after its first) is predicted exactly once.
    - var_len=True: the authors' training trick; L ~ N(tgt_len, 5) (and tgt_len/2
      with p=0.05), clipped to [5, tgt_len + 15]; len() is then only an estimate.
    """

    def __init__(self, data, batch_size: int, tgt_len: int, device: str | torch.device = "cpu",
                 evaluation: bool = False, var_len: bool = False, seed: int = 0):
        if not isinstance(data, torch.Tensor):
            data = torch.from_numpy(np.array(data))  # a copy: memmaps are read-only
        if data.dim() != 1:  # a (1, N) batch would count as 1 token
            raise ValueError(f"LMOrderedIterator reads one stream of token ids (1-D), got shape {tuple(data.shape)}. "
                             "Fix: pass the text as one sequence (ids.flatten()); batch_size cuts it into columns")
        n_step = len(data) // batch_size  # tokens per column; the remainder is dropped
        if n_step < 2:
            raise ValueError(f"{len(data)} tokens are too few for batch_size={batch_size}")
        # (batch, n_step) on the device, still uint8 for text8; .long() happens per segment.
        self.data = data[: n_step * batch_size].view(batch_size, n_step).to(device)
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
