"""Bytes: enwik8 (the Hutter Prize file: the first 10^8 bytes of the English Wikipedia XML dump
of 3 March 2006; the paper's Table 2, 0.99 bpc for 24 layers) prepared as the authors prepare it.

    corpus = load_enwik8()              # the .npy cache, else enwik8 / enwik8.zip in text8_dir(), else a download
    corpus.vocab[:3]                    # ('32', '101', '116') on the real file: space, e, t (see below)
    ids = encode_bytes("Paris", corpus.vocab); decode_bytes(ids, corpus.vocab)   # 'Paris'

The authors' getdata.sh runs awd-lstm-lm's prep_enwik8.py: the last 10M bytes are held out,
5M valid then 5M test (split_corpus, as text8), and every byte is written as its decimal number,
numbers separated by spaces, except the newline byte, written as a line break. Their reader
(pytorch/data_utils.py: Vocab without specials, add_eos=False) splits each line at whitespace,
so the newline bytes drop out of the id streams, and it counts train, valid AND test
(count_file on all three) before build_vocab: the symbols are the byte numbers as strings, by
falling count over the whole file, ties in first-seen order (words.Vocab, the authors' Vocab).
The same here, computed with NumPy on the bytes rather than on 350 MB of decimal text; tests
check it against that text pipeline on a small fake.

The real file holds 205 distinct byte values (Ha et al.'s HyperNetworks, Sec. 4.4: "205 unique
characters"); without the newline, 204 symbols: the authors' code logs "final vocab size 204
from 204 unique tokens" on enwik8 (laekov/fastmoe issue #163, running the authors'
transformer-xl code; its printout of sym2idx begins '32', '101', '116', '97', '105'). How many
newline bytes drop, split by split, was not computed here: HuggingFace datasets reads 1,128,024
lines from enwik8, so about 1.1% of the bytes (roughly 98.9M ids remain). A model is scored in
bits per remaining byte (``unit="byte"``, "bpc"), as the authors score it.

NEVER FETCHED HERE: the machines this was written on have no internet. The URL, sizes and
checksums come from public sources (below); the download, the checks and the preparation were
exercised only on a small fake (tests/test_enwik8.py), never on the real enwik8.zip.
"""

from __future__ import annotations

import hashlib
import json
import urllib.request
import warnings
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from txl_minimal.text8 import Corpus, CorpusError, _download, _write_cache, split_corpus, text8_dir
from txl_minimal.utils import remove_leftovers
from txl_minimal.words import Vocab

NEWLINE = 10  # the byte the authors' reader drops (prep_enwik8.py writes it as a line break)
UNIT = "byte"  # Corpus.unit and a checkpoint's: scored in bits per byte, named "bpc" as the paper does
SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class Enwik8Source:
    """Where enwik8 comes from and what it must look like (tests swap in a small fake)."""

    url: str = "http://mattmahoney.net/dc/enwik8.zip"
    zip_bytes: int = 36_445_475
    zip_sha256: str = "547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc"
    text_bytes: int = 100_000_000
    text_md5: str = "a1fa5ffddb56f4953e226637dabbb36a"
    member: str = "enwik8"  # the zip's one file, the name prep_enwik8.py reads


# The checks, and who publishes them (none verified here: no internet). The unzipped file's size
# and MD5 are Mahoney's own (his table, quoted in gluon-nlp's large_text_compression_benchmark.py
# with the SHA-1 57b8363b...), and many users pin the same MD5. The zip's size and SHA-256 are
# those HuggingFace datasets verifies (datasets/enwik8/dataset_infos.json: 36,445,475 bytes) and a
# DataDeps.jl registration (`register_enwiki8`) and several benchmark scripts pin. The content is
# the check (an error); a zip of another SHA-256 with the right content only warns (a re-zip).
ENWIK8 = Enwik8Source()


# ---------------------------------------------------------------------------- bytes <-> ids


def _byte_values(symbols: Sequence[str]) -> np.ndarray:
    """The byte each symbol names ("32" -> 32), as uint8; ValueError for a vocabulary of other symbols."""
    try:
        values = [int(s) for s in symbols]
    except (TypeError, ValueError):
        values = [-1]
    if not values or min(values) < 0 or max(values) > 255 or len(set(values)) != len(values):
        raise ValueError(f"not a byte vocabulary ({len(symbols):,} symbols, beginning {list(symbols[:3])!r}): "
                         "its symbols must be distinct byte numbers '0'..'255', as enwik8's are. "
                         "Fix: pass corpus.vocab of a byte corpus (load_corpus('enwik8')) or model.vocab")
    return np.asarray(values, dtype=np.uint8)


def encode_bytes(text: str | bytes, symbols: Sequence[str], what: str = "the text") -> np.ndarray:
    """``text``'s UTF-8 bytes (or ``text`` itself, given bytes) as ids of ``symbols`` (uint8); a
    byte outside them is a ValueError naming it and its character (a newline always is for
    enwik8: the authors' reader drops it)."""
    table = np.full(256, -1, dtype=np.int16)
    table[_byte_values(symbols)] = np.arange(len(symbols))
    raw = bytes(text) if isinstance(text, (bytes, bytearray)) else text.encode("utf-8")
    ids = table[np.frombuffer(raw, dtype=np.uint8)]
    bad = np.flatnonzero(ids < 0)
    if bad.size:
        at = int(bad[0])
        # the character the byte belongs to (a str: count the whole characters before it)
        char = text[len(raw[:at].decode("utf-8", "ignore"))] if isinstance(text, str) else chr(raw[at])
        why, fix = "", f"leave {char!r} out"
        if raw[at] == NEWLINE:
            why = " (the authors' enwik8 reader drops every newline: no enwik8 model has seen one)"
            fix = "write it on one line (a space for each newline)"
        raise ValueError(f"{what}: the byte {raw[at]} of the character {char!r} (byte {at} of its UTF-8) is not "
                         f"among the {len(symbols):,} bytes of this vocabulary{why}. Fix: {fix}")
    return ids.astype(np.uint8)


def decode_bytes(ids, symbols: Sequence[str]) -> str:
    """The bytes ``ids`` (list, NumPy array or tensor) stand for, read as UTF-8: a sequence a model
    cut or invented becomes U+FFFD (errors="replace") rather than an error."""
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    ids = np.asarray(ids, dtype=np.int64).ravel()
    if ids.size and (ids.min() < 0 or ids.max() >= len(symbols)):
        raise ValueError(f"decode_bytes: ids must lie in [0, {len(symbols)}), got {ids.min()}..{ids.max()}")
    return _byte_values(symbols)[ids].tobytes().decode("utf-8", errors="replace")


# ---------------------------------------------------------------------------- the authors' preparation


def byte_vocab(text: bytes, block: int = 1 << 22) -> Vocab:
    """The authors' Vocab of ``text`` (all of enwik8): every byte but the newline, as its number,
    by falling count, ties in first-seen order (their Counter, fed the three splits in order)."""
    raw, counts = np.frombuffer(text, dtype=np.uint8), np.zeros(256, dtype=np.int64)
    for i in range(0, len(raw), block):  # np.bincount widens to int64: a block at a time, not 800 MB
        counts += np.bincount(raw[i:i + block], minlength=256)
    counts[NEWLINE] = 0
    first = {v: text.find(bytes([v])) for v in np.flatnonzero(counts).tolist()}  # find: memchr, fast
    vocab = Vocab()
    vocab.counter = Counter({str(v): int(counts[v]) for v in sorted(first, key=first.get)})
    vocab.build_vocab()  # most_common: falling count, a stable sort, so ties stay in first-seen order
    return vocab


def prepare(text: bytes) -> tuple[list[np.ndarray], tuple[str, ...]]:
    """(train, valid, test ids as uint8, symbols): prep_enwik8.py's split and the authors' reader
    (newlines dropped) over ``text``, the file's bytes, never copied whole."""
    vocab = byte_vocab(text)
    table = np.zeros(256, dtype=np.uint8)  # <= 255 symbols (the newline is none): uint8 ids
    table[[int(s) for s in vocab.idx2sym]] = np.arange(len(vocab))
    return [_encode_split(part, table) for part in split_corpus(np.frombuffer(text, dtype=np.uint8))], \
        tuple(vocab.idx2sym)


def _encode_split(part: np.ndarray, table: np.ndarray, block: int = 1 << 22) -> np.ndarray:
    """``table``'s ids of the bytes of ``part`` but its newlines, written block by block into one array."""
    blocks = range(0, len(part), block)
    out = np.empty(len(part) - sum(int(np.count_nonzero(part[i:i + block] == NEWLINE)) for i in blocks),
                   dtype=np.uint8)
    at = 0
    for i in blocks:
        chunk = part[i:i + block]
        ids = table[chunk[chunk != NEWLINE]]
        out[at:at + len(ids)] = ids
        at += len(ids)
    return out


# ---------------------------------------------------------------------------- files


def _fix_hint(d: Path, src: Enwik8Source, placed: Path | None = None) -> str:
    """How to get a good enwik8; ``placed`` is a bad local file, read again on every call until it goes."""
    first = f"delete or replace {placed}, then " if placed is not None else ""
    return (f"Fix: {first}download {src.url} by hand and put enwik8.zip (or the unzipped enwik8) in {d}/ , "
            "or set TXL_DATA_DIR to where it is; offline, a character corpus ships with the package: "
            "load_corpus('text8-mini').")


def _check_text(text: bytes, src: Enwik8Source, d: Path, what: str, placed: Path | None = None) -> None:
    """CorpusError unless ``text`` has enwik8's size and MD5."""
    md5 = hashlib.md5(text).hexdigest()
    if len(text) != src.text_bytes or md5 != src.text_md5:
        raise CorpusError(f"{what} does not hold enwik8: expected {src.text_bytes:,} bytes with MD5 {src.text_md5}, "
                          f"got {len(text):,} bytes with MD5 {md5}. " + _fix_hint(d, src, placed))


def _unzip_and_check(zpath: Path, src: Enwik8Source, d: Path, what: str, placed: Path | None = None) -> bytes:
    """enwik8's bytes from the zip, once they check out; a zip of another SHA-256 only warns."""
    try:
        with zipfile.ZipFile(zpath) as zf:
            text = zf.read(src.member)
    except (zipfile.BadZipFile, KeyError, EOFError, OSError, zlib.error, NotImplementedError, RuntimeError) as e:
        with open(zpath, "rb") as f:
            html = f.read(512).lstrip()[:1] == b"<"
        looks = " It looks like an HTML page (an error or login page?), not a zip." if html else ""
        raise CorpusError(f"{what} is not a valid enwik8.zip (truncated or corrupted?): {e}.{looks} "
                          + _fix_hint(d, src, placed)) from None
    _check_text(text, src, d, what, placed)
    sha = hashlib.sha256(zpath.read_bytes()).hexdigest()
    if sha != src.zip_sha256:  # the content is right: a re-zipped enwik8 is fine
        warnings.warn(f"{what}: the zip's SHA-256 is {sha}, not {src.zip_sha256}, but the unzipped enwik8 "
                      "checks out (size and MD5)", stacklevel=3)
    return text


def _cache_files(d: Path) -> tuple[list[Path], Path]:
    return [d / f"enwik8.{s}.npy" for s in SPLITS], d / "enwik8.vocab.json"


def _ids_md5(arrays: Sequence[np.ndarray]) -> str:
    h = hashlib.md5()
    for arr in arrays:
        h.update(np.ascontiguousarray(arr).data)
    return h.hexdigest()


def _read_cache(d: Path, src: Enwik8Source) -> tuple[list[np.ndarray], tuple[str, ...], str | None]:
    """(the memory-mapped splits, symbols, None), or ([], (), what is wrong with the cache)."""
    cache, meta_file = _cache_files(d)
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        symbols, lengths, ids_md5 = tuple(meta["symbols"]), meta["lengths"], meta["ids_md5"]
        _byte_values(symbols)
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [], (), f"{meta_file} is damaged ({e or type(e).__name__})"
    if meta.get("source_md5") != src.text_md5:
        return [], (), f"{meta_file} was built from another file than enwik8 (MD5 {src.text_md5})"
    arrays = []
    for path, n in zip(cache, lengths):
        try:
            arr = np.load(path, mmap_mode="r")  # no RAM copy
        except (ValueError, OSError, EOFError) as e:
            return [], (), f"{path} is truncated or corrupt ({e or type(e).__name__})"
        if arr.dtype != np.uint8 or arr.shape != (n,):
            return [], (), f"{path} holds {arr.shape} {arr.dtype}, not the {n:,} uint8 ids of its split"
        arrays.append(arr)
    if len(arrays) != 3 or _ids_md5(arrays) != ids_md5:  # the right shapes, other ids (an edit)
        return [], (), f"{', '.join(p.name for p in cache)} do not hold the ids {meta_file.name} describes"
    return arrays, symbols, None


def load_enwik8(data_dir: str | Path | None = None, download: bool = True, *, source: Enwik8Source | None = None,
                opener: Callable | None = None, timeout: float = 5.0, progress: bool = True) -> Corpus:
    """enwik8 as the authors read it (see the module docstring): a ``Corpus`` of uint8 ids over
    byte symbols ("32" = space), ``unit="byte"``. From the .npy cache in ``text8_dir(data_dir)``
    (text8's folder, or $TXL_DATA_DIR); else from enwik8 or enwik8.zip placed there; else
    downloaded (checked before it is renamed into place). A damaged cache is rebuilt, with a warning.
    ``source``: another file's URL and checks (tests; None: ENWIK8, looked up at the call)."""
    source, d = source or ENWIK8, text8_dir(data_dir)
    cache, meta_file = _cache_files(d)
    if all(p.exists() for p in cache) and meta_file.exists():
        arrays, symbols, problem = _read_cache(d, source)
        if problem is None:
            return Corpus("enwik8", *arrays, vocab=symbols, unit=UNIT)
        warnings.warn(f"{problem}; rebuilding the enwik8 cache in {d} from enwik8 or enwik8.zip (or a download)",
                      stacklevel=2)

    remove_leftovers(d, "enwik8*.part")  # what a killed download or cache write left behind
    text_path, zpath = d / "enwik8", d / "enwik8.zip"
    if text_path.exists():  # placed by hand, already unzipped
        text = text_path.read_bytes()
        _check_text(text, source, d, str(text_path), placed=text_path)
    elif zpath.exists():  # placed by hand or downloaded earlier
        text = _unzip_and_check(zpath, source, d, str(zpath), placed=zpath)
    elif download:
        text = _download(source.url, zpath, opener or urllib.request.urlopen, timeout, progress, source.zip_bytes,
                         _fix_hint(d, source),
                         lambda tmp: _unzip_and_check(tmp, source, d, f"the file downloaded from {source.url}"))
    else:
        raise CorpusError(f"enwik8 not found in {d}/ and download=False. " + _fix_hint(d, source))

    splits, symbols = prepare(text)
    del text  # the ids alone from here on
    meta = dict(source_md5=source.text_md5, symbols=list(symbols), lengths=[len(s) for s in splits],
                ids_md5=_ids_md5(splits))
    files = {**{path: lambda f, a=arr: np.save(f, a) for path, arr in zip(cache, splits)},
             meta_file: lambda f: f.write(json.dumps(meta).encode("utf-8"))}  # last: marks the cache complete
    if not _write_cache(files, d, "enwik8"):
        return Corpus("enwik8", *splits, vocab=symbols, unit=UNIT)
    return Corpus("enwik8", *[np.load(p, mmap_mode="r") for p in cache], vocab=symbols, unit=UNIT)
