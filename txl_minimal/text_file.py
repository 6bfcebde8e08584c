"""Your own text as a corpus: any UTF-8 file, read as characters (the default) or as words.

    corpus = load_corpus("my.txt")                 # characters: the file's own Unicode code points
    corpus = load_corpus("my.txt", unit="word")    # words, as WikiText's are read
    ids = corpus.encode("Привет, мир!")            # and corpus.decode(ids) gives the text back

    python -m txl_minimal.train --corpus my.txt --out runs/mine     # vocab_size follows the file
    python -m txl_minimal.evaluate runs/mine                        # scored on its own file again

**Characters** (``unit="character"``): the vocabulary is UNKNOWN_CHAR (U+FFFD, id 0: a character
seen only in valid or test) followed by every character of the TRAINING split, by falling count
(ties by code point), as the authors' Vocab orders words: so adaptive-softmax cutoffs cut by
frequency here too. Nothing is normalised: uppercase, digits, accents, "\\r" and "\\n", emoji and
any script are symbols of their own. **Words** (``unit="word"``): each line split at whitespace and
ended by ``<eos>``, WikiText's way; the vocabulary is ``<eos>`` (id 0), ``<unk>`` (id 1), then the
training split's words by falling count. ``max_vocab`` caps either vocabulary (specials included):
a rarer symbol becomes the unknown one.

**Splits**: the text's N symbols (characters, or words and ``<eos>``) cut by ``split`` (default
90/5/5) in order: train first, then valid, then test, as prep_text8.py cuts text8; valid holds
round(N * split[1]) symbols, test round(N * split[2]), train the rest: the same places every time.
Ids take the narrowest integer type that holds them (uint8 up to 256 symbols, uint16, int32).

**A vocabulary given** (``vocab=``: a model's symbols, to score your text with a model trained on
another): the file's characters (words) read as ids of ``vocab``; a character it lacks is refused,
named, unless it has UNKNOWN_CHAR (a model of a text file), which such characters then become, with
a warning naming them; a word it lacks is ``<unk>`` (a warning says how many).

**Large files**: read ``chunk_bytes`` at a time, three passes (count, vocabulary, ids), never
holding the text, only its ids; the ids are cached as .npy files in ``text8_dir(data_dir)/own/``
(named after the file and a hash of its path and settings; tied to the file's content, its
SHA-256, not to its size and time: a rewrite that keeps both, as ``cp -p`` or unzip leave, is read
again) and memory-mapped back. ``corpus.reading`` records how the file was read (its path, SHA-256,
unit, split, max_vocab): a checkpoint keeps it, so that evaluate and --resume read the same text
the same way. A file that is not UTF-8 (the byte offset and line are named), holds NUL characters,
is empty, holds no words, is too short for three splits, is a folder or a pipe, is refused with the
fix. A corpus too short for the model's segments is said by ``batching.check_split`` where the
lengths are known (train). Where the cache cannot be written (a full disk, $TXL_DATA_DIR naming a
file) the corpus is used from memory, with a warning saying why.

``$TXL_CORPUS`` (which CI sets to force the bundled corpus) overrides a corpus *name*, never a path
to your own file: that is not a download CI has to avoid.
"""
from __future__ import annotations

import codecs
import hashlib
import json
import os
import re
import stat
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from txl_minimal.corpora import (Corpus, CorpusError, cache_files, data_dir_problem, read_splits, split_sizes,
                                 text8_dir, write_cache)
from txl_minimal.files import file_sha256
from txl_minimal.symbols import UNKNOWN_CHAR, char_table, code_points, narrowest_dtype, normalising_hint
from txl_minimal.words import Vocab

UNITS = ("character", "word")
DEFAULT_SPLIT = (0.9, 0.05, 0.05)  # train, valid, test
CHUNK_BYTES = 1 << 22  # read 4 MiB of the file at a time
WORD_SPECIALS = ("<eos>", "<unk>")
CACHE_FORMAT = 2  # raise when the cache's layout or the reading changes: older caches are rebuilt (2: SHA-256)
_BOM = codecs.BOM_UTF8
# what a file that is not text looks like, by its first bytes, and what to do with it (not iconv: it is no text)
_MAGIC = {b"PK\x03\x04": ("a zip archive", "unzip it and pass the text file inside: unzip {path}"),
          b"\x1f\x8b": ("a gzip file", "decompress it first: gunzip -k {path}, then pass the .txt it leaves "
                                       "(a .tar.gz: tar xzf {path})"),
          b"BZh": ("a bzip2 file", "decompress it first: bunzip2 -k {path}"),
          b"\xfd7zXZ\x00": ("an xz file", "decompress it first: unxz -k {path}"),
          b"(\xb5/\xfd": ("a zstd file", "decompress it first: unzstd {path}"),
          b"7z\xbc\xaf\x27\x1c": ("a 7-Zip archive", "extract the text file inside: 7z x {path}"),
          b"%PDF": ("a PDF", "extract its text first: pdftotext {path} {stem}.txt"),
          b"\x89PNG": ("a PNG image", "pass a text file"), b"\xff\xd8\xff": ("a JPEG image", "pass a text file"),
          b"\x7fELF": ("a program", "pass a text file")}


def check_settings(unit: str | None = None, split: Sequence[float] | None = None,
                   max_vocab: int | None = None) -> tuple[str, tuple[float, float, float], int | None]:
    """(unit, split, max_vocab) with None read as the defaults; ValueError naming a bad one."""
    unit = "character" if unit is None else unit
    if unit not in UNITS:
        raise ValueError(f"unit must be 'character' or 'word', got {unit!r}")
    split = DEFAULT_SPLIT if split is None else split
    try:
        parts = tuple(float(f) for f in split)
    except (TypeError, ValueError):
        parts = ()
    if len(parts) != 3 or not all(0 < f < 1 for f in parts) or abs(sum(parts) - 1) > 1e-6:
        raise ValueError(f"split is the fractions (train, valid, test), each above 0, adding up to 1; got {split!r}. "
                         "Fix: e.g. split=(0.9, 0.05, 0.05) (--set split=0.9,0.05,0.05)")
    low = 2 if unit == "character" else len(WORD_SPECIALS) + 1
    if max_vocab is not None and (isinstance(max_vocab, bool) or not isinstance(max_vocab, (int, np.integer))
                                  or max_vocab < low):
        raise ValueError(f"max_vocab (the most {unit} symbols kept, the unknown one included) must be an integer "
                         f">= {low} or None (no cap), got {max_vocab!r}")
    return unit, parts, None if max_vocab is None else int(max_vocab)


def load_text_file(path: str | os.PathLike, unit: str | None = None, split: Sequence[float] | None = None,
                   max_vocab: int | None = None, data_dir: str | Path | None = None, *,
                   vocab: str | Sequence[str] | None = None, chunk_bytes: int = CHUNK_BYTES,
                   cache: bool = True) -> Corpus:
    """A UTF-8 text file as a Corpus (see the module docstring): ``unit`` "character" (default) or
    "word", ``split`` (train, valid, test) fractions (default 0.9, 0.05, 0.05), ``max_vocab`` a cap
    on the vocabulary (default none), ``vocab`` a vocabulary to read it onto (a model's symbols;
    default its own), the cache in ``text8_dir(data_dir)/own`` (``cache=False``: none).
    ``load_corpus(path, ...)`` calls it. The corpus's name is the file's absolute path; its
    ``reading`` says how it was read.

        >>> corpus = load_text_file("war_and_peace.txt")          # doctest: +SKIP
        >>> corpus.decode(corpus.encode("Война и мир"))           # doctest: +SKIP
        'Война и мир'
    """
    unit, split, max_vocab = check_settings(unit, split, max_vocab)
    vocab = _given_vocab(vocab, unit, max_vocab)
    path = _existing_file(path)
    reading = dict(path=str(path), sha256=file_sha256(path), bytes=path.stat().st_size, unit=unit, split=list(split),
                   max_vocab=max_vocab, fixed_vocab=vocab is not None)  # the content, not its size and time
    key = dict(reading, format=CACHE_FORMAT, vocab=None if vocab is None else _vocab_sha256(vocab))
    problem = data_dir_problem(data_dir) if cache else None
    if problem is not None:  # the cache is only a shortcut: the file is read without one, said once here
        warnings.warn(f"{path.name}: no cache: {problem}; reading it from memory, again at every load", stacklevel=2)
        cache = False
    files = _cache_files(text8_dir(data_dir) / "own", key)
    if cache:
        found = _read_cache(files, key)
        if found is not None:
            _say_outside(found.reading, vocab)
            return found
    if vocab is not None:
        symbols, ids, reading["outside"] = _read_onto(path, vocab, unit, split, chunk_bytes)
    else:
        reader = _read_words if unit == "word" else _read_chars
        symbols, ids = reader(path, split, max_vocab, chunk_bytes)
    _say_outside(reading, vocab)
    sizes = split_sizes(len(ids), split)
    splits = (ids[:sizes[0]], ids[sizes[0]:sizes[0] + sizes[1]], ids[sizes[0] + sizes[1]:])
    corpus = Corpus(str(path), *splits, vocab="".join(symbols) if unit == "character" else tuple(symbols), unit=unit,
                    reading=reading)
    if not cache:
        return corpus
    record = json.dumps(dict(key=key, symbols=list(symbols), reading=reading), ensure_ascii=False).encode("utf-8")
    return write_cache(corpus, files, record)  # the record last: it marks the cache complete


# ----------------------------------------------------------------------------- reading the file

def _existing_file(path: str | os.PathLike) -> Path:
    """The absolute path of a file that exists; CorpusError for a folder, ValueError for nothing there."""
    given = Path(path).expanduser()
    if given.is_dir():
        raise CorpusError(f"{path} is a folder, not a text file. Fix: pass one UTF-8 text file (join several "
                          f"with  cat {path}/*.txt > all.txt  and pass all.txt)")
    if given.exists() and not given.is_file():  # a pipe (--corpus <(zcat f.gz)), a socket, a device
        kind = "a pipe" if stat.S_ISFIFO(given.stat().st_mode) else "not a regular file (a device or a socket)"
        raise CorpusError(f"{path} is {kind}: a corpus file is read more than once (its size, its vocabulary, its "
                          "ids, its SHA-256), and a pipe gives its text only once. Fix: save the text to a file "
                          "first (zcat f.gz > my.txt, or ... > my.txt) and pass my.txt")
    if not given.is_file():
        raise ValueError(f"unknown corpus {str(path)!r}: no file {given.resolve()} (and not a named corpus). "
                         "Fix: check the path, or use a named corpus (load_corpus's CORPORA)")
    return given.resolve()


def _pieces(path: Path, chunk_bytes: int) -> Iterator[str]:
    """The file's text, decoded ``chunk_bytes`` bytes at a time (a UTF-8 BOM dropped); CorpusError
    naming the byte offset and line of the first bytes that are not UTF-8, or a NUL character."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    offset, chars = 0, 0  # bytes read, characters decoded so far
    with open(path, "rb") as f:
        while True:
            block = f.read(max(1, chunk_bytes) if offset else max(4, chunk_bytes))  # the first: a whole BOM
            if offset == 0:
                _check_start(path, block)
                if block.startswith(_BOM):
                    block, offset = block[len(_BOM):], len(_BOM)
            pending = len(decoder.getstate()[0])  # a character's first bytes, kept from the last block
            try:
                text = decoder.decode(block, final=not block)
            except UnicodeDecodeError as e:
                raise CorpusError(_not_utf8(path, offset - pending + e.start, e.object[e.start:e.end])) from None
            offset += len(block)
            if "\0" in text:
                at = chars + text.index("\0")
                raise CorpusError(f"{path} holds a NUL character (character {at:,}): it is not a text file, or not "
                                  "UTF-8 (UTF-16 writes one after every ASCII letter). Fix: pass a UTF-8 text "
                                  f"file; to convert from UTF-16: iconv -f UTF-16 -t UTF-8 {path} > "
                                  f"{path.stem}.utf8.txt")
            chars += len(text)
            if text:
                yield text
            if not block:
                return


def _check_start(path: Path, head: bytes) -> None:
    """CorpusError for a UTF-16/32 byte-order mark (each is also valid-looking bytes to misread)."""
    for bom, name in ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
                      (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16")):
        if head.startswith(bom):
            raise CorpusError(f"{path} is {name} text (it starts with a {name} byte-order mark), not UTF-8. "
                              f"Fix: convert it: iconv -f {name} -t UTF-8 {path} > {path.stem}.utf8.txt")


def _not_utf8(path: Path, offset: int, bad: bytes) -> str:
    """The sentence for bytes that do not decode: where (byte offset, line), what the file looks like, the fix."""
    lines, read = 1, 0
    with open(path, "rb") as f:
        start = f.read(8)
        f.seek(0)
        while read < offset:  # the line: newlines before the offset, a block at a time
            block = f.read(min(CHUNK_BYTES, offset - read))
            lines, read = lines + block.count(b"\n"), read + len(block)
    where = (f"{path} is not UTF-8 text: the byte{'s' if len(bad) > 1 else ''} {bad.hex(' ')} at byte offset "
             f"{offset:,} (line {lines:,}) {'do' if len(bad) > 1 else 'does'} not decode as UTF-8.")
    for magic, (what, fix) in _MAGIC.items():
        if start.startswith(magic):  # not text in another encoding: iconv would not help
            return f"{where} It looks like {what}, not text. Fix: {fix.format(path=path, stem=path.stem)}"
    return (f"{where} Fix: pass a UTF-8 text file; convert one in another encoding first, e.g. iconv -f LATIN1 -t "
            f"UTF-8 {path} > {path.stem}.utf8.txt (CP1252 for Windows text, or save it as UTF-8 in your editor)")


def _read_chars(path: Path, split: tuple, max_vocab: int | None, chunk_bytes: int) -> tuple[list[str], np.ndarray]:
    """(symbols, ids) of a file's characters: three passes (count; the training split's counts;
    the ids, written into one array of the narrowest type)."""
    n = sum(len(text) for text in _pieces(path, chunk_bytes))
    n_train = _check_sizes(path, n, split, "characters")
    counts, seen = np.zeros(0x110000, dtype=np.int64), 0
    for text in _pieces(path, chunk_bytes):
        cps = code_points(text[:n_train - seen])
        values, times = np.unique(cps, return_counts=True)
        counts[values] += times
        seen += len(cps)
        if seen >= n_train:
            break
    counts[ord(UNKNOWN_CHAR)] = 0  # a U+FFFD in the text is the unknown character itself
    present = np.flatnonzero(counts)
    order = present[np.lexsort((present, -counts[present]))]  # falling count, then code point
    if max_vocab is not None:
        order = order[:max_vocab - 1]
    symbols = [UNKNOWN_CHAR] + [chr(c) for c in order]
    table = char_table(symbols)
    ids, at = np.empty(n, dtype=narrowest_dtype(len(symbols))), 0
    for text in _pieces(path, chunk_bytes):
        found = table[code_points(text)]
        ids[at:at + len(found)] = np.where(found < 0, 0, found)
        at += len(found)
    return symbols, ids


def _line_blocks(path: Path, chunk_bytes: int) -> Iterator[list[str]]:
    """The file's lines (ended by "\\n"; "\\r\\n" too, its "\\r" being whitespace), a chunk's worth at a time."""
    carry = ""
    for text in _pieces(path, chunk_bytes):
        lines = (carry + text).split("\n")
        carry = lines.pop()
        yield lines
    if carry:
        yield [carry]


def _tokens(lines: list[str]) -> list[str]:
    """Each line's words then ``<eos>``: ``Vocab(add_eos=True).tokenize`` of every line, at once."""
    return [word for line in lines for word in line.split() + ["<eos>"]]


def _read_words(path: Path, split: tuple, max_vocab: int | None, chunk_bytes: int) -> tuple[list[str], np.ndarray]:
    """(symbols, ids) of a file's words, WikiText's way (Vocab, ``<eos>`` per line): three passes
    as ``_read_chars``."""
    n = lines = 0
    for block in _line_blocks(path, chunk_bytes):
        n, lines = n + sum(len(line.split()) for line in block) + len(block), lines + len(block)
    if n == lines:
        raise CorpusError(f"{path} holds no words ({'it is empty' if n == 0 else 'only whitespace'}). "
                          "Fix: pass a text file with words in it")
    n_train, seen = _check_sizes(path, n, split, "words (<eos> included)"), 0
    vocab = Vocab(special=WORD_SPECIALS, max_size=None if max_vocab is None else max_vocab - len(WORD_SPECIALS))
    for block in _line_blocks(path, chunk_bytes):
        tokens = _tokens(block)[:n_train - seen]
        vocab.counter.update(tokens)
        seen += len(tokens)
        if seen >= n_train:
            break
    for special in WORD_SPECIALS:  # counted apart: max_vocab counts them once, first
        vocab.counter.pop(special, None)
    vocab.build_vocab()
    get, unk = vocab.sym2idx.get, vocab.unk_idx
    ids, at = np.empty(n, dtype=narrowest_dtype(len(vocab))), 0
    for block in _line_blocks(path, chunk_bytes):
        tokens = _tokens(block)
        ids[at:at + len(tokens)] = np.fromiter((get(t, unk) for t in tokens), dtype=np.int64, count=len(tokens))
        at += len(tokens)
    return vocab.idx2sym, ids


def _given_vocab(vocab, unit: str, max_vocab: int | None) -> str | tuple[str, ...] | None:
    """``vocab`` (load_text_file's) as a str of characters or a tuple of words, or a ValueError naming what is wrong."""
    if vocab is None:
        return None
    if max_vocab is not None:
        raise ValueError(f"vocab= fixes the vocabulary, so max_vocab={max_vocab} cannot cap it. Fix: drop max_vocab")
    if isinstance(vocab, str):
        symbols = tuple(vocab) if unit == "character" else None
    else:
        try:
            symbols = tuple(vocab)
        except TypeError:
            symbols = None
    if not symbols or not all(isinstance(s, str) and s for s in symbols) or len(set(symbols)) != len(symbols):
        raise ValueError(f"vocab must be the symbols of a vocabulary, each once (a model's: model.vocab, a corpus's: "
                         f"corpus.vocab), got {vocab!r:.80}")
    if unit == "character" and any(len(s) != 1 for s in symbols):
        longer = next(s for s in symbols if len(s) != 1)
        raise ValueError(f"vocab holds symbols longer than one character ({longer!r}): a word vocabulary. Fix: "
                         "unit='word' (--unit word)")
    return "".join(symbols) if unit == "character" else symbols


def _vocab_sha256(vocab: str | tuple[str, ...]) -> str:
    """A short digest of a vocabulary given: which cache holds the file read onto it."""
    return hashlib.sha256("\n".join(vocab).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _read_onto(path: Path, vocab: str | tuple[str, ...], unit: str, split: tuple,
               chunk_bytes: int) -> tuple[list[str], np.ndarray, dict | None]:
    """(symbols, ids, outside) of a file read onto ``vocab``: each character (word) its id there, one it lacks
    UNKNOWN_CHAR's (``<unk>``'s) where it has one, else a CorpusError naming them; ``outside`` counts those
    ({"count", "symbols": the commonest, at most 10}; None: every symbol known)."""
    symbols, missing = list(vocab), Counter()
    if unit == "character":
        n = sum(len(text) for text in _pieces(path, chunk_bytes))
        _check_sizes(path, n, split, "characters")
        table, ids, at = char_table(symbols), np.empty(n, dtype=narrowest_dtype(len(symbols))), 0
        unknown = int(table[ord(UNKNOWN_CHAR)])
        for text in _pieces(path, chunk_bytes):
            cps = code_points(text)
            found = table[cps]
            if (found < 0).any():
                values, times = np.unique(cps[found < 0], return_counts=True)
                missing.update({chr(c): int(t) for c, t in zip(values, times)})
            ids[at:at + len(found)] = np.where(found < 0, max(unknown, 0), found)
            at += len(found)
        what, instead = "characters", f"U+FFFD ({UNKNOWN_CHAR}, the unknown character)"
    else:
        eos = "<eos>" in symbols  # lines end with <eos> where the vocabulary has one (encode_symbols)
        vocab_ = Vocab.from_symbols(symbols, add_eos=eos)
        get, unknown = vocab_.sym2idx.get, vocab_.unk_idx

        def tokens(block: list[str]) -> list[str]:
            return [word for line in block for word in line.split() + (["<eos>"] if eos else [])]
        n = sum(len(tokens(block)) for block in _line_blocks(path, chunk_bytes))
        if n == 0:
            raise CorpusError(f"{path} holds no words. Fix: pass a text file with words in it")
        _check_sizes(path, n, split, "words")
        ids, at = np.empty(n, dtype=narrowest_dtype(len(symbols))), 0
        for block in _line_blocks(path, chunk_bytes):
            words = tokens(block)
            found = np.fromiter((get(t, -1) for t in words), dtype=np.int64, count=len(words))
            if (found < 0).any():
                missing.update(t for t, i in zip(words, found) if i < 0)
            ids[at:at + len(found)] = np.where(found < 0, 0 if unknown is None else unknown, found)
            at += len(found)
        unknown = -1 if unknown is None else unknown
        what, instead = "words", "<unk>"
    if not missing:
        return symbols, ids, None
    common = [s for s, _ in missing.most_common(10)]
    shown = ", ".join(f"{s!r} (U+{ord(s):04X})" if unit == "character" else repr(s) for s in common)
    count = sum(missing.values())
    if unknown < 0:
        hint = normalising_hint(missing, symbols) if unit == "character" else ""
        raise CorpusError(f"{path}: {count:,} {what} ({len(missing):,} different: {shown}"
                          f"{', ...' if len(missing) > 10 else ''}) are not in the vocabulary of {len(symbols):,} "
                          f"{what} it is read onto (the model's), which has no {instead} for them{hint}. Fix: a text "
                          f"in the model's {what}, or a model trained on this text")
    return symbols, ids, dict(count=count, kinds=len(missing), symbols=common, instead=instead, what=what, n=n)


def _say_outside(reading: dict | None, vocab) -> None:
    """The warning that symbols of a file read onto a vocabulary (``vocab=``) are not in it, naming them."""
    outside = (reading or {}).get("outside")
    if vocab is None or not outside:
        return
    shown = ", ".join(map(repr, outside["symbols"])) + (", ..." if outside["kinds"] > len(outside["symbols"]) else "")
    hint = normalising_hint(dict.fromkeys(outside["symbols"], 1), vocab) if outside["what"] == "characters" else ""
    warnings.warn(f"{Path(reading['path']).name}: {outside['count']:,} of its {outside['n']:,} {outside['what']} "
                  f"({outside['kinds']:,} different: {shown}) are not in the vocabulary it is read onto: read as "
                  f"{outside['instead']}{hint}", stacklevel=3)


def _check_sizes(path: Path, n: int, split: tuple, what: str) -> int:
    """The training split's size; CorpusError for a file too short to give every split 2 symbols."""
    if n == 0:
        raise CorpusError(f"{path} is empty. Fix: pass a text file with text in it")
    sizes = split_sizes(n, split)
    if min(sizes) < 2:
        need = max(2 / f for f in split)
        raise CorpusError(f"{path} holds {n:,} {what}: too few to split {', '.join(f'{f:g}' for f in split)} into "
                          f"train, valid and test of at least 2 each (about {need:,.0f} needed). Fix: a longer "
                          "text (a few hundred KB gives a small model something to learn), or larger valid and "
                          "test fractions (split=...)")
    return sizes[0]


# ----------------------------------------------------------------------------- the cache

def _cache_files(d: Path, key: dict) -> list[Path]:
    """train, valid, test .npy and the vocabulary's .json: named after the file and a hash of its path and settings
    (not its content: an edited file's cache is replaced, not kept beside the new one)."""
    settings = {k: key[k] for k in ("path", "unit", "split", "max_vocab")}
    if key.get("vocab") is not None:  # read onto a vocabulary given: a cache of its own
        settings["vocab"] = key["vocab"]
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    return cache_files(d, re.sub(r"[^\w.-]", "_", Path(key["path"]).stem)[:40] + f"-{digest}", ".vocab.json")


def _read_cache(files: list[Path], key: dict) -> Corpus | None:
    """The cached corpus, memory-mapped, if its key (the file's SHA-256, its settings) is ``key`` and its files
    are whole; None to build it (with a warning if a cache was there but damaged)."""
    if not all(p.is_file() for p in files):
        return None
    try:
        record = json.loads(files[3].read_text(encoding="utf-8"))
        if record.get("key") != key:  # the file changed (or an older format): read it again, silently
            return None
        symbols, reading = record["symbols"], record["reading"]
        arrays, problem = read_splits(files[:3], narrowest_dtype(len(symbols)))
    except (ValueError, OSError, KeyError, TypeError) as e:
        arrays, problem = [], str(e)
    sizes = tuple(map(len, arrays))
    if problem is None and sizes != split_sizes(sum(sizes), key["split"]):
        problem = f"its splits' sizes {sizes} are not those of split={tuple(key['split'])}"
    if problem is not None:
        warnings.warn(f"the cache of {key['path']} in {files[0].parent} is damaged ({problem}); reading the file "
                      "again", stacklevel=3)
        return None
    vocab = "".join(symbols) if key["unit"] == "character" else tuple(symbols)
    return Corpus(key["path"], *arrays, vocab=vocab, unit=key["unit"], reading=reading)
