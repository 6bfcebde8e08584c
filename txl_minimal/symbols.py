"""Text <-> ids over a vocabulary: text8's 27 characters (VOCAB, ``encode``/``decode``: the default
of a Corpus and of a model, TXLConfig's vocab_size 27), and any other a corpus or a checkpoint names:
characters (a string, or a tuple of one-character strings: the symbol of id i is ``symbols[i]``) or
words (a tuple of words, read as the authors' Vocab reads them), a text file's (load_corpus("my.txt")).

    encode(" the king")                                # text8's: uint8 ids, space = 0, a = 1, ..., z = 26
    ids = encode_symbols("Привет", "\\ufffdПривет ")    # uint8 ids [1, 2, 3, 4, 5, 6]
    decode_symbols(ids, "\\ufffdПривет ")              # "Привет"

A character vocabulary built from a text file starts with UNKNOWN_CHAR (U+FFFD, id 0): the id of
a character seen only in valid or test. ``strict=True`` refuses such a character instead, naming
it (generate_text: a prompt the model cannot read is said, not replaced).
"""
from __future__ import annotations

import unicodedata
from collections.abc import Sequence

import numpy as np
import torch

from txl_minimal import validation
from txl_minimal.words import Vocab

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
# byte value -> token id; 255 marks a byte outside the vocabulary
_BYTE_TO_ID = np.full(256, 255, dtype=np.uint8)
_BYTE_TO_ID[np.frombuffer(VOCAB.encode(), dtype=np.uint8)] = np.arange(VOCAB_SIZE)
_ID_TO_BYTE = np.frombuffer(VOCAB.encode(), dtype=np.uint8)


def _id_array(ids) -> np.ndarray:
    """``ids`` (list, NumPy array, tensor on any device) as one flat int64 NumPy array; floats, text or a
    set: the ValueError ``validation.integer_ids`` says (0.7 would be decoded as id 0)."""
    ids = validation.integer_ids(ids, "decode: the ids")
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    return np.asarray(ids, dtype=np.int64).ravel()


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
    if not isinstance(text, (str, bytes)):
        raise ValueError(f"encode reads text (a str), got {validation.a_kind(text)}. Fix: encode(\"the text\"); "
                         "ids back to text: decode(ids)")
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
    ids = _id_array(ids)
    if ids.size and (ids.min() < 0 or ids.max() >= VOCAB_SIZE):
        raise ValueError(f"decode: ids must lie in [0, {VOCAB_SIZE}), got {ids.min()}..{ids.max()}")
    return _ID_TO_BYTE[ids].tobytes().decode("ascii")


# ---------------------------------------------------------------------------- any other vocabulary

UNKNOWN_CHAR = "\ufffd"  # id 0 of a text file's characters: one seen only in valid/test (or outside the vocabulary)
MAX_CODE_POINT = 0x10FFFF


def narrowest_dtype(n_symbols: int) -> np.dtype:
    """The narrowest integer type that holds ids 0 .. n_symbols - 1: uint8 up to 256 symbols, then
    uint16 up to 65,536, then int32. (Torch is handed int32 or int64, never uint16: batching.py.)"""
    if n_symbols <= 1 << 8:
        return np.dtype(np.uint8)
    return np.dtype(np.uint16) if n_symbols <= 1 << 16 else np.dtype(np.int32)


def code_points(text: str) -> np.ndarray:
    """The Unicode code points of ``text`` as a uint32 array (one per character, no copy of the text as str)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def char_table(symbols: Sequence[str]) -> np.ndarray:
    """code point -> id over every code point (about 4 MB); -1 where ``symbols`` lacks it."""
    table = np.full(MAX_CODE_POINT + 1, -1, dtype=np.int32)
    cps = code_points("".join(symbols))
    if len(cps) != len(symbols):
        raise ValueError("a character vocabulary holds one character per symbol; got a longer symbol")
    table[cps] = np.arange(len(symbols), dtype=np.int32)
    return table


def _missing(text: str, found: np.ndarray, symbols: Sequence[str]) -> str:
    """The sentence naming the characters of ``text`` a vocabulary lacks and what it knows."""
    cps = code_points(text)
    bad = list(dict.fromkeys(chr(c) for c in cps[found < 0]))  # in order, once each
    known = "".join(s for s in symbols if s != UNKNOWN_CHAR)
    shown = known if len(known) <= 120 else known[:120] + "..."
    return (f"{len(bad)} character{'s' if len(bad) > 1 else ''} {''.join(bad)!r} "
            f"({', '.join(f'U+{ord(c):04X}' for c in bad[:10])}{', ...' if len(bad) > 10 else ''}) "
            f"{'are' if len(bad) > 1 else 'is'} not in the vocabulary of {len(symbols):,} characters, "
            f"which knows {shown!r}" + normalising_hint(bad, symbols))


def normalising_hint(missing, symbols: Sequence[str]) -> str:
    """" ... normalise the text first" for the characters of ``missing`` a vocabulary lacks but holds in
    another Unicode form ('é' as one code point, U+00E9, or as 'e' + U+0301) or in lower case (text8's
    27 are), naming the fix of each kind; "" where none is."""
    known = set(symbols)
    missing = [c for c in dict.fromkeys(missing) if c not in known]
    decomposed = [c for c in missing if len(unicodedata.normalize("NFD", c)) > 1
                  and set(unicodedata.normalize("NFD", c)) <= known]
    marks = [c for c in missing if unicodedata.combining(c)]
    upper = [c for c in missing if c not in decomposed and c.lower() != c and set(c.lower()) <= known]
    hints = []
    if decomposed:
        hints.append(f"the vocabulary holds {''.join(decomposed[:10])!r} decomposed (Unicode NFD: 'é' as 'e' + "
                     "U+0301): normalise the text first, unicodedata.normalize('NFD', text)")
    if marks:
        names = ", ".join(f"U+{ord(c):04X}" for c in marks[:5])
        hints.append(f"{names} {'is a combining mark' if len(marks) == 1 else 'are combining marks'}: the text is "
                     "decomposed (Unicode NFD: 'é' as 'e' + U+0301) and the vocabulary's is not: normalise the text "
                     "first, unicodedata.normalize('NFC', text)")
    if upper:
        hints.append(f"{''.join(upper[:10])!r} {'is' if len(upper) == 1 else 'are'} upper case, which the "
                     "vocabulary holds in lower case: lower-case the text first (text.lower())")
    return "".join(f". {hint[0].upper()}{hint[1:]}" for hint in hints)


def encode_symbols(text: str, symbols: Sequence[str], unit: str = "character", strict: bool = False,
                   table: np.ndarray | None = None) -> np.ndarray:
    """``text`` as ids of ``symbols`` (the narrowest dtype). Characters: each character's id; one
    the vocabulary lacks is UNKNOWN_CHAR's id where it has one and ``strict`` is False, else a
    ValueError naming it. Words: ``text``'s lines split at whitespace, each ending with ``<eos>``
    where the vocabulary has it (as a corpus was read), an unknown word ``<unk>``'s id (a
    ValueError naming it without one; ``strict`` is for characters).
    ``table``: char_table(symbols), built once by a caller encoding many pieces.

        >>> encode_symbols("aba", "\\ufffdab").tolist()
        [1, 2, 1]
    """
    if not isinstance(text, str):
        raise ValueError(f"encode_symbols reads text (a str), got {validation.a_kind(text)}. Fix: the text itself; "
                         "ids back to text: decode_symbols(ids, symbols)")
    if unit == "word":
        vocab = Vocab.from_symbols(symbols, add_eos="<eos>" in symbols)
        try:
            return vocab.encode_lines(text.split("\n")).astype(narrowest_dtype(len(symbols)))
        except KeyError as e:  # a vocabulary without <unk>
            raise ValueError(e.args[0]) from None
    table = char_table(symbols) if table is None else table
    found = table[code_points(text)]
    unknown = -1 if strict else int(table[ord(UNKNOWN_CHAR)])
    if unknown < 0 and (found < 0).any():
        raise ValueError(_missing(text, found, symbols))
    return np.where(found < 0, unknown, found).astype(narrowest_dtype(len(symbols)))


def decode_symbols(ids, symbols: Sequence[str], unit: str = "character") -> str:
    """The text of ``ids`` (list, NumPy array or tensor, any device): characters joined as they
    are, words joined by spaces (``<eos>`` kept as written, as Vocab.decode).

        >>> decode_symbols([1, 2, 1], "\\ufffdab")
        'aba'
    """
    ids = _id_array(ids)
    if ids.size and (ids.min() < 0 or ids.max() >= len(symbols)):
        raise ValueError(f"decode: ids must lie in [0, {len(symbols)}) (the vocabulary's size), got "
                         f"{ids.min()}..{ids.max()}")
    return (" " if unit == "word" else "").join(symbols[i] for i in ids)
