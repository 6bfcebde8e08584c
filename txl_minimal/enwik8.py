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
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from txl_minimal.corpora import (SPLITS, Corpus, Source, cache_files, corpus_dir, fetch, from_cache,
                                 read_splits, split_corpus, write_cache)
from txl_minimal.words import Vocab

NEWLINE = 10  # the byte the authors' reader drops (prep_enwik8.py writes it as a line break)
UNIT = "byte"  # Corpus.unit and a checkpoint's: scored in bits per byte, named "bpc" as the paper does


# The checks, and who publishes them (none verified here: no internet). The unzipped file's size
# and MD5 are Mahoney's own (his table, quoted in gluon-nlp's large_text_compression_benchmark.py
# with the SHA-1 57b8363b...), and many users pin the same MD5. The zip's size and SHA-256 are
# those HuggingFace datasets verifies (datasets/enwik8/dataset_infos.json: 36,445,475 bytes) and a
# DataDeps.jl registration (`register_enwiki8`) and several benchmark scripts pin. The content is
# the check (an error); a zip of another SHA-256 with the right content only warns (a re-zip).
ENWIK8 = Source("enwik8", "http://mattmahoney.net/dc/enwik8.zip", "enwik8.zip", zip_bytes=36_445_475,
                zip_sha256="547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc",
                text_bytes=100_000_000, text_md5="a1fa5ffddb56f4953e226637dabbb36a",
                members=("enwik8",))  # the zip's one file, the name prep_enwik8.py reads


def Enwik8Source(**fields) -> Source:
    """ENWIK8 with ``fields`` changed: a small fake's url, sizes and checksums in tests (it was
    ENWIK8's class before one corpora.Source described every corpus's zip)."""
    return replace(ENWIK8, **fields)


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


def _ids_md5(arrays: Sequence[np.ndarray]) -> str:
    h = hashlib.md5()
    for arr in arrays:
        h.update(np.ascontiguousarray(arr).data)
    return h.hexdigest()


def _read_cache(files: list[Path], src: Source) -> tuple[Corpus | None, str | None]:
    """(enwik8 from its cache, memory-mapped; None), or (None, what is wrong with the cache)."""
    try:
        meta = json.loads(files[3].read_text(encoding="utf-8"))
        symbols, lengths, ids_md5 = tuple(meta["symbols"]), meta["lengths"], meta["ids_md5"]
        _byte_values(symbols)
        if len(lengths) != len(SPLITS):
            raise ValueError(f"{len(lengths)} lengths, not {len(SPLITS)}")
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"{files[3]} is damaged ({e or type(e).__name__})"
    if meta.get("source_md5") != src.text_md5:
        return None, f"{files[3]} was built from another file than enwik8 (MD5 {src.text_md5})"
    arrays, problem = read_splits(files[:3], np.uint8, lengths)
    if problem is None and _ids_md5(arrays) != ids_md5:  # the right shapes, other ids (an edit)
        problem = f"{', '.join(p.name for p in files[:3])} do not hold the ids {files[3].name} describes"
    return (None, problem) if problem else (Corpus(src.name, *arrays, vocab=symbols, unit=UNIT), None)


def load_enwik8(data_dir: str | Path | None = None, download: bool = True, *, source: Source | None = None,
                opener: Callable | None = None, timeout: float = 5.0, progress: bool = True) -> Corpus:
    """enwik8 as the authors read it (see the module docstring): a ``Corpus`` of uint8 ids over
    byte symbols ("32" = space), ``unit="byte"``. From the .npy cache in ``text8_dir(data_dir)``
    (text8's folder, or $TXL_DATA_DIR); else from enwik8 or enwik8.zip placed there; else
    downloaded (checked before it is renamed into place). A damaged cache is rebuilt, with a warning.
    ``source``: another file's URL and checks (tests; None: ENWIK8, looked up at the call)."""
    source = source or ENWIK8
    files = cache_files(corpus_dir(data_dir), source.name, ".vocab.json")
    corpus = from_cache(files, source, _read_cache)
    if corpus is None:
        text, = fetch(source, files[0].parent, download, opener=opener, timeout=timeout, progress=progress)
        splits, symbols = prepare(text)
        del text  # the ids alone from here on
        meta = dict(source_md5=source.text_md5, symbols=list(symbols), lengths=[len(s) for s in splits],
                    ids_md5=_ids_md5(splits))
        corpus = write_cache(Corpus(source.name, *splits, vocab=symbols, unit=UNIT), files,
                             json.dumps(meta).encode("utf-8"))  # the record, written last
    return corpus
