"""The corpora by name, and text in and out of a model: ``load_corpus`` and ``generate_text``.
The front door of the corpus layer (corpora.py: Corpus, CorpusError, the data folder, the download,
its checks and the cache), the corpora over it, text8.py (characters), word_corpora.py (words),
enwik8.py (bytes) and text_file.py (your own file), and of batching.py (the ordered iterator): their
public names are importable from here too.

    corpus = load_corpus("auto")              # text8 if present/downloadable, else text8-mini
    it = LMOrderedIterator(corpus.train, batch_size=22, tgt_len=512)
    for x, y in it: ...                       # (batch, seq) LongTensors, y = x shifted by one
    words = load_corpus("text8-mini-words")   # offline: 10,000 words + <unk>; also "wt103", "wt2"
    wiki = load_corpus("enwik8")              # bytes of Wikipedia XML, as the authors prepare it

A character corpus is scored in bits per character, enwik8 (``unit == "byte"``) in bits per
byte (named bpc, as the paper does), a word corpus (``unit == "word"``) in perplexity. The
other names are handed on from where they live, so patch one there: setting
``txl_minimal.corpora.REPO_DATA`` moves text8_dir(), setting ``txl_minimal.data.REPO_DATA`` would not.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from txl_minimal.batching import LMOrderedIterator, as_ids, check_split
from txl_minimal.corpora import (MINI_HINT, REPO_DATA, SPLITS, Corpus, CorpusError, Source, default_text8_dir,
                                 split_corpus, text8_dir)
from txl_minimal.enwik8 import ENWIK8, Enwik8Source, decode_bytes, encode_bytes, load_enwik8
from txl_minimal.text8 import MINI_PATH, TEXT8, Text8Source, load_text8, load_text8_mini
from txl_minimal.word_corpora import (MINI_WORDS_MAX_SIZE, WIKITEXT, WikiTextSource, load_text8_mini_words,
                                      load_wikitext, word_stats)
from txl_minimal.symbols import UNKNOWN_CHAR, VOCAB, VOCAB_SIZE, decode, decode_symbols, encode, encode_symbols
from txl_minimal.text_file import DEFAULT_SPLIT, UNITS, load_text_file
from txl_minimal.words import Vocab

__all__ = ["CORPORA", "WORD_CORPORA", "load_corpus", "generate_text", "is_corpus_path",
           # text_file.py, symbols.py
           "load_text_file", "DEFAULT_SPLIT", "UNITS", "UNKNOWN_CHAR",
           # corpora.py (what every corpus shares)
           "Corpus", "CorpusError", "Source", "SPLITS", "REPO_DATA", "MINI_HINT", "split_corpus", "default_text8_dir",
           "text8_dir",
           # text8.py; its characters from symbols.py
           "VOCAB", "VOCAB_SIZE", "MINI_PATH", "TEXT8", "Text8Source", "encode", "decode", "load_text8",
           "load_text8_mini",
           # word_corpora.py
           "MINI_WORDS_MAX_SIZE", "WIKITEXT", "WikiTextSource", "load_text8_mini_words", "load_wikitext",
           "word_stats",
           # enwik8.py
           "ENWIK8", "Enwik8Source", "load_enwik8", "encode_bytes", "decode_bytes",
           # batching.py
           "LMOrderedIterator", "as_ids", "check_split"]


def generate_text(model: torch.nn.Module, prompt: str, n_new: int, *, allow_unknown: bool = False,
                  **kwargs) -> str:
    """Text from a model: the ``prompt`` encoded, ``n_new`` tokens sampled after it, decoded.

    ``model.generate`` for text, in the model's own vocabulary. A text8 character model reads space
    and a-z; a model trained on a text file reads and writes that file's characters (a prompt character
    outside them is a ValueError naming it); a word model that knows its vocabulary (loaded from a
    checkpoint, or returned by ``train``) reads the prompt's words (``<unk>`` for one it lacks), a line
    break as ``<eos>`` where the vocabulary has it (as its corpus was read), and adds ``n_new`` words,
    joined by spaces, a generated ``<eos>`` written as a line break; an enwik8 model (``unit == "byte"``)
    reads the prompt's UTF-8 bytes and writes bytes read as UTF-8. The unknown symbol (U+FFFD, id 0 of
    a text file's characters; ``<unk>``) is not drawn where the training text never held it (the
    checkpoint counts it; a model of a text file's characters that does not say: not drawn), unless
    ``allow_unknown``.
    ``kwargs`` go to ``model.generate``: ``temperature`` (0: greedy), ``top_k`` (1: greedy),
    ``generator`` (a seeded ``torch.Generator``: the same text every time).

    Returns:
        The prompt followed by the new text, a str.

    Examples:
        >>> model = load_pretrained("txl-tiny")
        >>> generate_text(model, "the king of ", 20, top_k=1)
        'the king of the south and the st'
        >>> generate_text(model, "The King", 20)
        Traceback (most recent call last):
        ValueError: encode: character 'T' at position 0 is not in VOCAB ' abcdefghijklmnopqrstuvwxyz'
    """

    if isinstance(prompt, str) and not prompt.strip() and (prompt == "" or getattr(model, "unit", None) == "word"):
        raise ValueError("generate_text got an empty prompt: the model continues a text, so it needs at least "
                         "one character (a word model: one word) to start from. Fix: e.g. "
                         "generate_text(model, 'the ', n_new)")
    if not isinstance(prompt, str):
        raise ValueError(f"generate_text takes a string prompt, got {type(prompt).__name__}. "
                         "Fix: for token ids call model.generate(ids, n_new)")
    unit, symbols = getattr(model, "unit", None), getattr(model, "vocab", None)
    if not allow_unknown and (never := never_drawn(model)):
        kwargs["exclude"] = sorted(set(kwargs.get("exclude", ())) | set(never))
    if unit == "word":
        return _generate_words(model, prompt, n_new, symbols, **kwargs)
    if unit == "byte":
        return _generate_bytes(model, prompt, n_new, symbols, **kwargs)
    if unit == "character" and symbols is not None and tuple(symbols) != tuple(VOCAB):  # a text file's characters
        try:
            ids = encode_symbols(prompt, symbols, strict=True)
        except ValueError as e:
            raise ValueError(f"generate_text: the prompt's {e}. Fix: write the prompt in characters of the model's "
                             "training text") from None
        return decode_symbols(model.generate(torch.as_tensor(ids, dtype=torch.long), n_new, **kwargs), symbols)
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
    eos = vocab.sym2idx.get("<eos>")  # its corpus read each line break as <eos> (a vocabulary without: as a space)
    ids, lines = [], prompt.split("\n")
    for i, line in enumerate(lines):
        for word in line.split():
            if word not in vocab.sym2idx and vocab.unk_idx is None:
                raise ValueError(f"generate_text: the word {word!r} is not in this model's vocabulary "
                                 f"({len(symbols):,} words), which has no <unk>. Fix: use words of its corpus")
            ids.append(vocab.get_idx(word))
        if eos is not None and i < len(lines) - 1:  # the line ended: as the corpus was read
            ids.append(eos)
    out = model.generate(torch.tensor(ids, dtype=torch.long), n_new, **kwargs)
    new = _as_text([vocab.get_sym(int(t)) for t in out[len(ids):]])
    return prompt + ("" if not new or not prompt or prompt[-1].isspace() or new[0] == "\n" else " ") + new


def _as_text(words: list[str]) -> str:
    """Words joined by spaces, each ``<eos>`` a line break (no space beside it): text as its corpus was written."""
    text = ""
    for word in words:
        text += "\n" if word == "<eos>" else word if not text or text.endswith("\n") else " " + word
    return text


def _generate_bytes(model: torch.nn.Module, prompt: str, n_new: int, symbols, **kwargs) -> str:
    """generate_text for a byte model (enwik8): the prompt's UTF-8 bytes in, ``n_new`` bytes out, the
    whole read as UTF-8 (a sequence the model cut or invented becomes U+FFFD)."""
    if symbols is None:
        raise ValueError("generate_text: this is a byte model, but its vocabulary is unknown. Fix: "
                         "model.generate(ids, n_new) with ids from its corpus (corpus.vocab), or train it again")
    ids = encode_bytes(prompt, symbols, what="generate_text: the prompt")
    return decode_bytes(model.generate(torch.as_tensor(ids, dtype=torch.long), n_new, **kwargs), symbols)


def never_drawn(model: torch.nn.Module) -> list[int]:
    """The id of the model's unknown symbol (U+FFFD of a text file's characters, ``<unk>``) where its training
    text never held it (the checkpoint's "corpus" entry counts it: ``corpus_record``), which ``generate_text``
    then does not draw; [] where it did, or the model has none. A model that does not say (an older
    checkpoint): its U+FFFD is never drawn (it stands for characters of valid and test), its ``<unk>`` is
    (WikiText's text holds it)."""
    unit, symbols = getattr(model, "unit", None), getattr(model, "vocab", None)
    placeholder = {"character": UNKNOWN_CHAR, "word": "<unk>"}.get(unit)
    if symbols is None or placeholder not in symbols:
        return []
    seen = (getattr(model, "corpus_record", None) or {}).get("unknown")
    if seen is None:
        return [list(symbols).index(placeholder)] if unit == "character" else []
    return [] if seen else [list(symbols).index(placeholder)]


CORPORA = ("text8", "text8-mini", "auto", "text8-mini-words", "wt103", "wt2", "enwik8")  # load_corpus's names
WORD_CORPORA = ("text8-mini-words", "wt103", "wt2")  # unit "word": scored in perplexity


def is_corpus_path(name: str | os.PathLike) -> bool:
    """Whether ``name`` means a file rather than a corpus name: a Path, or a string that is not one of
    CORPORA and holds a folder separator, has a suffix (".txt") or names something that exists."""
    if isinstance(name, os.PathLike):
        return True
    return (isinstance(name, str) and name != "" and name not in CORPORA
            and ("/" in name or os.sep in name or Path(name).suffix != "" or Path(name).exists()))


def unknown_corpus(name) -> ValueError:
    """The error for a name that is neither a corpus of CORPORA nor an existing file, with the fix."""
    path = isinstance(name, (str, os.PathLike)) and str(name) != ""
    where = f" ({Path(name).expanduser().resolve()} does not exist)" if path else ""
    return ValueError(f"unknown corpus {name if name is None else str(name)!r}: not one of "
                      f"{', '.join(map(repr, CORPORA))}, nor a file{where}. Fix: name one of those, or pass the "
                      "path to a UTF-8 text file of your own (load_corpus('path/to/file.txt'), --corpus "
                      "path/to/file.txt: its characters, or its words with unit='word' / --unit word)")


def load_corpus(name: str | os.PathLike = "auto", data_dir: str | Path | None = None, download: bool = True, *,
                unit: str | None = None, split: tuple[float, float, float] | None = None,
                max_vocab: int | None = None, vocab: str | tuple[str, ...] | None = None) -> Corpus:
    """Load a corpus by name, or a UTF-8 text file of your own by its path.

    ``name``: characters "text8", "text8-mini" or "auto" (text8 if present or downloadable, else
    mini); words "text8-mini-words" (offline), "wt103" or "wt2" (WikiText); bytes "enwik8"; or the
    path to a UTF-8 text file (text_file.py): its characters, or its words with ``unit="word"``;
    ``split`` its (train, valid, test) fractions, default (0.9, 0.05, 0.05), cut in that order;
    ``max_vocab`` a cap on its vocabulary; ``vocab`` a vocabulary to read it onto instead of its
    own (a model's, ``model.vocab``: your text scored by a model trained on another; a character it
    lacks is named). (A named corpus has its own unit, splits and vocabulary: those four are for a
    file; ``unit`` may repeat a named corpus's own.) ``data_dir``: where downloads
    and caches go (default: $TXL_DATA_DIR, else data/text8/ in a clone, ~/.cache/txl_minimal/text8
    for an installed package); ``download=False`` never fetches (a missing corpus is then a
    CorpusError saying how to get it).

    $TXL_CORPUS, when set, overrides a corpus name (so CI can force text8-mini everywhere), never
    the path to a file.

    Returns:
        A ``Corpus``: its ``train``, ``valid`` and ``test`` ids, ``vocab`` and ``unit``.

    Examples:
        >>> load_corpus("text8-mini")
        Corpus('text8-mini', train=2,759,702, valid=153,317, test=153,317, vocab_size=27)
        >>> from pathlib import Path
        >>> _ = Path("my.txt").write_text("Привет, мир!\\nПока, мир.\\n" * 50, encoding="utf-8")
        >>> mine = load_corpus("my.txt")                     # its characters: any script
        >>> mine
        Corpus('.../my.txt', train=1,080, valid=60, test=60, vocab_size=16)
        >>> mine.decode(mine.encode("мир"))
        'мир'
        >>> load_corpus("my.txt", unit="word", split=(0.8, 0.1, 0.1)).vocab[:4]    # words: <eos> ends a line
        ('<eos>', '<unk>', 'Привет,', 'мир!')
        >>> _ = Path("lower.txt").write_text("the king and the queen " * 50, encoding="utf-8")
        >>> load_corpus("lower.txt", vocab=VOCAB).vocab_size          # read onto text8's 27: a text8 model scores it
        27
    """
    if not is_corpus_path(name):
        name = os.environ.get("TXL_CORPUS") or name
    if is_corpus_path(name):
        if not Path(name).expanduser().exists():
            raise unknown_corpus(name)
        return load_text_file(name, unit, split, max_vocab, data_dir, vocab=vocab)
    if name not in CORPORA:
        raise unknown_corpus(name)
    own = "word" if name in WORD_CORPORA else "byte" if name == "enwik8" else "character"
    if unit not in (None, own) or split is not None or max_vocab is not None or vocab is not None:
        given = ", ".join(f"{k}={v!r:.40}" for k, v in dict(unit=unit, split=split, max_vocab=max_vocab,
                                                            vocab=vocab).items()
                          if v is not None and not (k == "unit" and v == own))
        raise ValueError(f"{name} is a named corpus of {own}s with its own splits and vocabulary: {given} "
                         "applies only to a text file of your own. Fix: drop it, or pass the path to a text file")
    if name == "text8-mini":
        return load_text8_mini()
    if name == "text8":
        return load_text8(data_dir, download)
    if name == "text8-mini-words":
        return load_text8_mini_words()
    if name in WIKITEXT:
        return load_wikitext(name, data_dir, download)
    if name == "enwik8":
        return load_enwik8(data_dir, download)
    try:
        return load_text8(data_dir, download)
    except (CorpusError, OSError) as e:  # OSError: a data folder we may not even read
        reason = str(e).split(". Fix:")[0]
        print(f"text8 unavailable ({reason}); using text8-mini instead "
              "(TXL_CORPUS=text8 to insist).")
        return load_text8_mini()
