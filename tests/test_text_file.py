"""A text file of your own as a corpus (text_file.py, symbols.py): characters of any script, words,
the splits, the chunked reading and its cache, every bad file, and the vocabulary travelling with
the model through train, evaluate, load and generate_text, from the command line as a user runs it."""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

import txl_minimal
from tiny import ROOT, cli_error, tiny_cfg, tiny_train_cfg
from txl_minimal import text_file
from txl_minimal.batching import LMOrderedIterator, check_split
from txl_minimal.checkpoint import load, load_checkpoint, save
from txl_minimal.data import (UNKNOWN_CHAR, CorpusError, encode, generate_text, is_corpus_path, load_corpus,
                              load_text_file)
from txl_minimal.evaluate import evaluate, evaluate_checkpoint
from txl_minimal.evaluate import main as evaluate_main
from txl_minimal.model import TransformerXL
from txl_minimal.pretrained import _shipped_state
from txl_minimal.symbols import decode_symbols, encode_symbols, narrowest_dtype
from txl_minimal.train import TrainConfig, train
from txl_minimal.train import main as train_main

# Cyrillic, Chinese, Korean, accents, digits, uppercase, punctuation, newlines and an emoji
LINES = ["Привет, мир! Это тест.", "中文字符和한국어 문장.", "Café naïve résumé — Ünïcödé 123 ABC 😀"]
MIXED = "\n".join(LINES * 40) + "\n"
WORDS = "the cat sat on the mat\nthe dog ate the bone\n\na bird sang a song in the tree\n" * 60
ENV = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TQDM_DISABLE="1",
           TXL_CORPUS="text8-mini")  # CI's setting: a file's path must win over it
TINY_RUN = ["--max-steps", "4", "--batch-size", "4", "--no-progress", "--set", "d_model=16", "d_head=8",
            "d_inner=32", "n_layer=1", "tgt_len=8", "mem_len=8", "eval_interval=2", "eval_tokens=64", "amp=off",
            "warmup_steps=1"]


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    """Every cache of these tests in a temporary folder, never in data/text8/own."""
    monkeypatch.setenv("TXL_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def python(*args: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m ...`` as a user runs it; fails the test with its output if it fails."""
    done = subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


# ----------------------------------------------------------------------------- characters

def test_the_characters_of_any_script_are_the_vocabulary_by_falling_count(tmp_path):
    corpus = load_corpus(write(tmp_path / "mixed.txt", MIXED))
    n = len(MIXED)
    assert (len(corpus.valid), len(corpus.test)) == (round(n * 0.05), round(n * 0.05))
    assert len(corpus.train) == n - 2 * round(n * 0.05)
    train_text = MIXED[:len(corpus.train)]
    counts = Counter(train_text)
    naive = UNKNOWN_CHAR + "".join(sorted(counts, key=lambda c: (-counts[c], ord(c))))
    assert corpus.vocab == naive and corpus.unit == "character"
    assert {"П", "中", "한", "é", "1", "A", "\n", "😀"} <= set(corpus.vocab)
    assert corpus.train.dtype == np.uint8
    assert corpus.decode(np.concatenate([corpus.train, corpus.valid, corpus.test])) == MIXED  # all seen in train
    assert corpus.decode(corpus.encode("Привет 😀\n")) == "Привет 😀\n"
    assert corpus.name == str((tmp_path / "mixed.txt").resolve())


def test_a_character_seen_only_in_valid_or_test_is_the_unknown_id_0(tmp_path):
    text = "abcab" * 200 + "Ωxyz"  # Ω, x, y, z only in test
    corpus = load_corpus(write(tmp_path / "t.txt", text), split=(0.9, 0.05, 0.05))
    assert corpus.vocab[0] == UNKNOWN_CHAR and set(corpus.vocab) == {UNKNOWN_CHAR, "a", "b", "c"}
    assert corpus.test[-4:].tolist() == [0, 0, 0, 0]
    assert corpus.decode(corpus.test[-4:]) == UNKNOWN_CHAR * 4
    assert corpus.encode("aΩ").tolist() == [corpus.vocab.index("a"), 0]


@pytest.mark.parametrize("n, dtype", [(256, np.uint8), (257, np.uint16), (65_536, np.uint16), (65_537, np.int32)])
def test_ids_take_the_narrowest_integer_type(n, dtype):
    assert narrowest_dtype(n) == dtype


def test_more_than_256_characters_are_uint16_and_train_and_evaluate(tmp_path):
    """uint16 ids go through LMOrderedIterator (as int32: torch 2.3 has no uint16 tensors), evaluate and train."""
    cjk = "".join(chr(0x4E00 + i) for i in range(300))
    corpus = load_corpus(write(tmp_path / "cjk.txt", cjk * 12))
    assert corpus.train.dtype == np.uint16 and corpus.vocab_size == 301
    it = LMOrderedIterator(corpus.train, batch_size=2, tgt_len=5)
    x, y = next(iter(it))
    assert x.dtype == torch.long and x[0].tolist() == corpus.train[:5].astype(int).tolist()
    model = TransformerXL(tiny_cfg(vocab_size=301)).eval()
    assert evaluate(model, corpus.valid)["tokens"] == len(corpus.valid) - 1
    res = train(tiny_cfg(vocab_size=301), tiny_train_cfg(tmp_path / "run", corpus=str(tmp_path / "cjk.txt"),
                                                        max_steps=2, eval_interval=2), progress=False)
    assert res.step == 2 and np.isfinite(res.valid_bpc) and res.model.vocab == tuple(corpus.vocab)


def test_more_than_65536_characters_are_int32(tmp_path):
    text = "".join(chr(0x20000 + i) for i in range(70_000))
    corpus = load_corpus(write(tmp_path / "wide.txt", text * 2), split=(0.98, 0.01, 0.01))
    assert corpus.train.dtype == np.int32 and corpus.vocab_size == 70_001


# ----------------------------------------------------------------------------- words

def test_words_are_read_as_wikitext_with_eos_unk_and_a_cap(tmp_path):
    path = write(tmp_path / "w.txt", WORDS + "zebra quokka\n")  # two words only in test
    corpus = load_corpus(path, unit="word")
    tokens = [t for line in (WORDS + "zebra quokka\n").split("\n")[:-1] for t in line.split() + ["<eos>"]]
    n_train = len(tokens) - 2 * round(len(tokens) * 0.05)
    counts = Counter(t for t in tokens[:n_train] if t != "<eos>")
    assert corpus.vocab[:2] == ("<eos>", "<unk>") and corpus.unit == "word"
    assert list(corpus.vocab[2:]) == [w for w, _ in counts.most_common()]
    ids = np.concatenate([corpus.train, corpus.valid, corpus.test])
    assert [corpus.vocab[i] for i in ids] == [t if t in corpus.vocab else "<unk>" for t in tokens]
    assert corpus.test[-3:].tolist() == [1, 1, 0]  # zebra quokka <eos>
    capped = load_corpus(path, unit="word", max_vocab=5)
    assert capped.vocab == ("<eos>", "<unk>", "the", "a", "cat")
    assert capped.decode(capped.encode("the dog")) == "the <unk> <eos>"


def test_a_word_corpus_trains_and_generates_words(tmp_path):
    corpus = load_corpus(write(tmp_path / "w.txt", WORDS), unit="word")
    res = train(tiny_cfg(vocab_size=corpus.vocab_size), tiny_train_cfg(tmp_path / "run", max_steps=2, eval_interval=2),
                corpus, progress=False)
    text = generate_text(res.model, "the cat", 5, generator=torch.Generator().manual_seed(0))
    assert text.startswith("the cat ") and all(w in corpus.vocab for w in text.split())
    save(res.model, tmp_path / "mine.safetensors")  # no training config: its vocabulary says "word"
    assert evaluate_checkpoint(tmp_path / "mine.safetensors", corpus=str(tmp_path / "w.txt"))["unit"] == "word"


# ----------------------------------------------------------------------------- splits, chunks, cache

def test_splits_cut_at_the_same_places_every_time_and_are_settable(tmp_path):
    path = write(tmp_path / "m.txt", MIXED)
    a, b = (load_text_file(path, split=(0.8, 0.1, 0.1), cache=False) for _ in range(2))
    n = len(MIXED)
    assert (len(a.train), len(a.valid), len(a.test)) == (n - 2 * round(n * 0.1), round(n * 0.1), round(n * 0.1))
    for part in ("train", "valid", "test"):
        assert np.array_equal(getattr(a, part), getattr(b, part))
    assert a.decode(a.valid) == MIXED[len(a.train):len(a.train) + len(a.valid)]  # train, then valid, then test


@pytest.mark.parametrize("unit", ["character", "word"])
@pytest.mark.parametrize("chunk", [1, 3, 7])
def test_the_chunked_reader_equals_a_whole_file_read(tmp_path, unit, chunk):
    """Chunks of 1, 3, 7 bytes cut inside every multi-byte character and inside \\r\\n."""
    text = "\ufeff" + (WORDS[:300] + MIXED).replace("\n", "\r\n", 7)  # a BOM (dropped), some CRLF lines
    path = write(tmp_path / "c.txt", text)
    whole = load_text_file(path, unit, chunk_bytes=1 << 30, cache=False)
    pieces = load_text_file(path, unit, chunk_bytes=chunk, cache=False)
    assert whole.vocab == pieces.vocab and UNKNOWN_CHAR + "\ufeff" not in whole.vocab[:2]
    for part in ("train", "valid", "test"):
        assert np.array_equal(getattr(whole, part), getattr(pieces, part))
    if unit == "character":
        assert whole.decode(np.concatenate([whole.train, whole.valid, whole.test])) == text[1:]


def test_the_cache_is_reused_and_rebuilt_when_the_file_changes(tmp_path, data_dir, monkeypatch):
    path = write(tmp_path / "m.txt", MIXED)
    first = load_corpus(path)
    files = sorted((data_dir / "own").iterdir())
    assert [f.name.split(".", 1)[1] for f in files] == ["test.npy", "train.npy", "valid.npy", "vocab.json"]
    assert isinstance(first.train, np.memmap)
    real = text_file._read_chars
    calls = []
    monkeypatch.setattr(text_file, "_read_chars", lambda *a: calls.append(a) or real(*a))
    again = load_corpus(path)
    assert calls == [] and np.array_equal(again.train, first.train)  # read from the cache
    write(path, MIXED + "Ещё одна строка.\n")
    changed = load_corpus(path)
    seen = "".join(c if c in changed.vocab else UNKNOWN_CHAR for c in "Ещё одна строка.\n")
    assert len(calls) == 1 and changed.decode(changed.test).endswith(seen) and seen.count(UNKNOWN_CHAR) > 0
    assert sorted((data_dir / "own").iterdir()) == files  # replaced, not kept beside
    expected = np.array(changed.train)
    del changed  # (a memory map of the file damaged below)
    assert load_corpus(path, split=(0.8, 0.1, 0.1)).vocab_size > 0 and len(calls) == 2  # other settings: other cache
    files[1].write_bytes(files[1].read_bytes()[:100])  # a damaged cache: said, and rebuilt
    with pytest.warns(UserWarning, match="is damaged"):
        rebuilt = load_corpus(path)
    assert np.array_equal(rebuilt.train, expected)


# ----------------------------------------------------------------------------- bad files and settings

@pytest.mark.parametrize("content, unit, message", [
    (b"ab\ncd\ne\xe9t\xe9", "character",
     r"is not UTF-8 text: the byte e9 at byte offset 7 \(line 3\).*Fix: .*iconv -f LATIN1 -t UTF-8"),
    ("Привет".encode("utf-16"), "character", r"is UTF-16 text.*Fix: convert it: iconv -f UTF-16 -t UTF-8"),
    (b"a\x00b\x00c\x00d\x00" * 20, "character", r"holds a NUL character \(character 1\).*Fix:"),
    (b"\x1f\x8b\x08\x00" + bytes(range(128, 200)), "character",
     r"byte offset 1 \(line 1\) .*It looks like a gzip file, not text\. Fix: decompress it first: gunzip -k .*bad.txt"),
    (b"BZh91AY&SY\xff" + bytes(range(128, 200)), "character", r"looks like a bzip2 file, not text\. Fix: .*bunzip2"),
    (b"PK\x03\x04\x14\x00\x08\x08\xff" + bytes(range(128, 200)), "character",
     r"looks like a zip archive, not text\. Fix: unzip it"),
    (b"", "character", r"is empty\. Fix:"),
    (b" \n\t\n  \n" * 50, "word", r"holds no words \(only whitespace\)\. Fix:"),
    (b"", "word", r"holds no words \(it is empty\)\. Fix:"),
    (b"abcdefghij" * 2, "character", r"holds 20 characters: too few to split 0.9, 0.05, 0.05.*Fix: a longer text"),
])
def test_a_bad_file_is_refused_with_the_fix(tmp_path, content, unit, message):
    path = write(tmp_path / "bad.txt", content)
    with pytest.raises(CorpusError, match=message) as refused:
        load_corpus(path, unit=unit)
    if "looks like" in message:  # an archive is no text in another encoding: iconv would not help
        assert "iconv" not in str(refused.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_pipe_as_the_corpus_is_said_to_be_one(tmp_path):
    """--corpus <(zcat f.gz) passes /dev/fd/63, a pipe: it was called "no file" (an unknown corpus)."""
    os.mkfifo(tmp_path / "pipe.txt")
    for name in (tmp_path / "pipe.txt", str(tmp_path / "pipe.txt")):
        with pytest.raises(CorpusError, match=r"pipe.txt is a pipe: a corpus file is read more than once .*Fix: "
                                              r"save the text to a file first"):
            load_corpus(name)


def test_a_folder_a_missing_file_and_an_unknown_name_say_what_works(tmp_path, monkeypatch):
    monkeypatch.delenv("TXL_CORPUS", raising=False)  # (it would replace the name "text9", not a path)
    with pytest.raises(CorpusError, match=r"is a folder, not a text file\. Fix: pass one UTF-8 text file"):
        load_corpus(tmp_path)
    for name in (str(tmp_path / "missing.txt"), "missing.txt", "text9"):
        with pytest.raises(ValueError, match=r"unknown corpus .*nor a file .*does not exist\)\. Fix: .*the path to "
                                             r"a UTF-8 text file"):
            load_corpus(name)
    with pytest.raises(ValueError, match="unknown corpus"):
        load_text_file(tmp_path / "missing.txt")


@pytest.mark.parametrize("kwargs, message", [
    (dict(unit="letters"), "unit must be 'character' or 'word'"),
    (dict(split=(0.5, 0.5, 0.0)), r"split is the fractions \(train, valid, test\), each above 0"),
    (dict(split=(0.9, 0.05)), "split is the fractions"),
    (dict(split="abc"), "split is the fractions"),
    (dict(max_vocab=1), r"max_vocab .* must be an integer >= 2"),
    (dict(unit="word", max_vocab=2), r"max_vocab .* must be an integer >= 3"),
])
def test_bad_settings_are_named(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        load_corpus(write(tmp_path / "m.txt", MIXED), **kwargs)


def test_a_named_corpus_refuses_the_settings_of_a_file(monkeypatch):
    monkeypatch.delenv("TXL_CORPUS", raising=False)
    with pytest.raises(ValueError, match=r"text8-mini is a named corpus of characters .*unit='word' applies only"):
        load_corpus("text8-mini", unit="word")
    assert load_corpus("text8-mini-words", unit="word").unit == "word"  # its own unit may be repeated


def test_txl_corpus_overrides_a_name_never_a_files_path(tmp_path, monkeypatch):
    path = write(tmp_path / "m.txt", MIXED)
    monkeypatch.setenv("TXL_CORPUS", "text8-mini")
    assert load_corpus(path).name == str(path.resolve())
    assert load_corpus("text8").name == "text8-mini"
    assert is_corpus_path("my.txt") and is_corpus_path(path) and not is_corpus_path("text8-mini")
    assert not is_corpus_path("synthetic") and not is_corpus_path("")


def test_a_corpus_too_short_for_one_segment_per_column_is_said_before_training(tmp_path):
    path = write(tmp_path / "short.txt", "abcdefgh" * 40)  # 288 training characters
    with pytest.raises(ValueError, match=r"the train split of .*short.txt holds 288 characters, too few for one "
                                         r"training segment in each batch column: batch_size 64 x \(tgt_len 8 \+ 1\) "
                                         r"= 576\. Fix: a smaller batch_size \(at most 32 for tgt_len 8\)"):
        train(tiny_cfg(), tiny_train_cfg(tmp_path / "run", corpus=str(path), batch_size=64), progress=False)
    assert not (tmp_path / "run" / "log.csv").exists()
    check_split(576, "train", "short.txt", "character", 64, 8)  # exactly enough: no error


def test_train_config_takes_a_path_and_the_file_settings(tmp_path):
    path = write(tmp_path / "m.txt", MIXED)
    cfg = TrainConfig(corpus=path, unit="word", split=[0.8, 0.1, 0.1], max_vocab=100)
    assert (cfg.corpus, cfg.split) == (str(path), (0.8, 0.1, 0.1))
    with pytest.raises(ValueError, match=r"TrainConfig.corpus must be one of .* or the path to a UTF-8 text file, "
                                         r"got .*nope.txt' \(no file "):
        TrainConfig(corpus=str(tmp_path / "nope.txt"))
    with pytest.raises(ValueError, match="TrainConfig.unit must be one of"):
        TrainConfig(corpus=path, unit="byte")
    with pytest.raises(ValueError, match="split is the fractions"):
        TrainConfig(corpus=path, split=(1.0, 0.0, 0.0))


def test_a_2d_split_is_said_to_be_2d_not_too_short():
    ids = np.tile(np.arange(5, dtype=np.uint8), (4, 200))  # (4, 1000): it was read as 4 tokens, "too short"
    with pytest.raises(ValueError, match=r"Corpus 'rows': its train split must be one stream of token ids \(1-D\), "
                                         r"got shape \(4, 1000\)\. Fix: .*ids.ravel\(\)"):
        txl_minimal.Corpus("rows", ids, ids[0], ids[0])


# ----------------------------------------------------------------------------- the cache and its folder

def test_the_cache_follows_the_content_not_the_size_and_time(tmp_path):
    """cp -p, tar and unzip keep a file's time: a same-size rewrite used to get the old cached ids back."""
    path = write(tmp_path / "m.txt", MIXED)
    first = load_corpus(path)
    before = os.stat(path)
    write(path, MIXED.replace("Привет", "Превет"))  # the same size in bytes and characters
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_size == before.st_size and os.stat(path).st_mtime_ns == before.st_mtime_ns
    again = load_corpus(path)
    assert again.decode(again.train).startswith("Превет") and first.reading["sha256"] != again.reading["sha256"]


def test_a_data_folder_that_is_a_file_or_a_full_disk_leaves_the_corpus_in_memory(tmp_path, monkeypatch):
    """The documented fallback: a cache that cannot be written is said, and the corpus used from memory (a file
    as TXL_DATA_DIR was a raw NotADirectoryError; a full disk numpy's OSError)."""
    path = write(tmp_path / "m.txt", MIXED)
    expected = load_text_file(path, cache=False)
    notes = write(tmp_path / "notes.txt", "not a folder")
    monkeypatch.setenv("TXL_DATA_DIR", str(notes))
    with pytest.warns(UserWarning, match=r"m.txt: no cache: TXL_DATA_DIR=.*notes.txt names .*is a file, not a folder.*"
                                         r"Fix: set TXL_DATA_DIR to a folder.*reading it from memory"):
        corpus = load_corpus(path)
    assert np.array_equal(corpus.train, expected.train) and not isinstance(corpus.train, np.memmap)
    monkeypatch.setenv("TXL_DATA_DIR", str(tmp_path / "data"))
    real = np.save

    def full(file, array, *args, **kwargs):  # what numpy raises on a full disk: no errno
        if len(array) > 100:
            raise OSError(f"{array.nbytes} requested and 0 written")
        return real(file, array, *args, **kwargs)
    monkeypatch.setattr(np, "save", full)
    with pytest.warns(UserWarning, match=r"m.txt: could not write its cache in .*own/ \(\d+ requested and 0 "
                                         r"written\): using it from memory"):
        corpus = load_corpus(path)
    assert np.array_equal(corpus.train, expected.train)
    assert sorted(p.name for p in (tmp_path / "data" / "own").iterdir()) == []  # no half cache, no .part
    monkeypatch.setattr(np, "save", real)
    monkeypatch.setenv("TXL_DATA_DIR", str(tmp_path / "other"))
    (tmp_path / "other").mkdir()
    write(tmp_path / "other" / "own", "a file where the cache folder goes")  # (was a raw FileExistsError)
    with pytest.warns(UserWarning, match=r"m.txt: could not write its cache in .*other/own/ .*using it from memory"):
        assert np.array_equal(load_corpus(path).train, expected.train)


def test_a_write_killed_half_way_leaves_no_part_file_to_later_loads(tmp_path, data_dir):
    """A SIGKILL while the cache is written left a .part (31 MB for a 31 MB file) that every later load kept."""
    path = write(tmp_path / "m.txt", MIXED)
    code = ("import os, signal, numpy as np, txl_minimal.corpora as c\n"
            "real = np.save\n"
            "def killed(f, a, *args, **kw):\n"
            "    f.write(b'half an array'); f.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
            "np.save = killed\n"
            f"from txl_minimal.data import load_corpus\nload_corpus({str(path)!r})\n")
    done = subprocess.run([sys.executable, "-c", code], env=dict(ENV, TXL_DATA_DIR=str(data_dir)),
                          capture_output=True, timeout=300)
    assert done.returncode == -9
    left = list((data_dir / "own").glob("*.part"))
    assert len(left) == 1 and left[0].stat().st_size > 0  # what the killed write left
    live = left[0].with_name(left[0].name.replace(left[0].name.split(".")[-2], str(os.getpid())))
    live.write_bytes(b"a write in progress in a live process")  # e.g. another DDP rank building it now
    corpus = load_corpus(path)
    assert isinstance(corpus.train, np.memmap) and not left[0].exists() and live.exists()
    assert sorted(p.name.split(".", 1)[1] for p in (data_dir / "own").iterdir() if p != live) == [
        "test.npy", "train.npy", "valid.npy", "vocab.json"]


# ----------------------------------------------------------------------------- read again as it was read

def tiny_run(tmp_path: Path, corpus, max_steps: int = 4, resume: bool = False):
    """A run of ``max_steps`` on ``corpus`` (a Corpus from load_corpus) in tmp_path/run, through the Python API."""
    return train(tiny_cfg(vocab_size=corpus.vocab_size, n_layer=1),
                 tiny_train_cfg(tmp_path / "run", max_steps=max_steps, eval_interval=2), corpus=corpus,
                 resume=resume, progress=False)


@pytest.mark.parametrize("settings", [dict(split=(0.6, 0.2, 0.2)), dict(max_vocab=20), dict(unit="word")])
def test_a_checkpoint_records_how_its_file_was_read_and_evaluate_reads_it_so(tmp_path, settings):
    """load_corpus(f, split=(0.6, 0.2, 0.2)) or max_vocab=20 given to train() was recorded nowhere: evaluate RUN
    read the file 90/5/5 (another split) or refused its own file as another vocabulary."""
    path = write(tmp_path / "m.txt", MIXED if settings.get("unit") != "word" else WORDS)
    corpus = load_corpus(path, **settings)
    tiny_run(tmp_path, corpus)
    for name in ("ckpt.pt", "best.pt"):
        record = load_checkpoint(tmp_path / "run" / name)["corpus"]
        assert record["reading"] == corpus.reading and record["reading"]["sha256"] == hashlib.sha256(
            path.read_bytes()).hexdigest()
        assert record["reading"]["split"] == list(settings.get("split", (0.9, 0.05, 0.05)))
    model = load(tmp_path / "run")
    save(model, tmp_path / "mine.safetensors")  # a saved model keeps the record too
    for target in (tmp_path / "run", tmp_path / "mine.safetensors"):
        for split in ("valid", "test"):
            result = evaluate_checkpoint(target, split)
            assert result["tokens"] == len(getattr(corpus, split)) - 1 and result["corpus"] == corpus.name
            assert np.isclose(result["loss"], evaluate(model, getattr(corpus, split))["loss"])


def test_evaluate_says_its_training_file_moved_or_changed(tmp_path):
    path = write(tmp_path / "m.txt", MIXED)
    corpus = load_corpus(path, split=(0.6, 0.2, 0.2))
    tiny_run(tmp_path, corpus)
    (tmp_path / "elsewhere").mkdir()
    moved = path.rename(tmp_path / "elsewhere" / "m.txt")
    with pytest.raises(ValueError, match=r"was trained on .*m.txt, which is no longer there\. Fix: --corpus the file "
                                         r"where it is now"):
        evaluate_checkpoint(tmp_path / "run")
    result = evaluate_checkpoint(tmp_path / "run", corpus=str(moved))  # the same text: read as the run read it
    assert result["tokens"] == len(corpus.valid) - 1
    write(path, MIXED.replace("Привет", "Превет"))  # back in its place, edited: another text, the same vocabulary
    with pytest.raises(ValueError, match=r"m.txt changed since the run read it \(SHA-256 .* then, .* now\).*Fix: "
                                         r"restore the file the run trained on, or name it, --corpus"):
        evaluate_checkpoint(tmp_path / "run")
    assert evaluate_checkpoint(tmp_path / "run", corpus=str(path))["tokens"] == len(corpus.valid) - 1  # named: scored


def test_a_resume_goes_on_over_the_same_text_wherever_it_is(tmp_path):
    """A file moved and resumed from its new path was refused ("the memory and data position would not line
    up"); a file edited (the same vocabulary, size and time) was trained on without a word."""
    path = write(tmp_path / "m.txt", MIXED)
    tiny_run(tmp_path, load_corpus(path, split=(0.6, 0.2, 0.2)), max_steps=2)
    (tmp_path / "moved").mkdir()
    moved = write(tmp_path / "moved" / "m.txt", MIXED)
    res = tiny_run(tmp_path, load_corpus(moved, split=(0.6, 0.2, 0.2)), max_steps=4, resume=True)
    assert res.step == 4 and load_checkpoint(tmp_path / "run" / "ckpt.pt")["corpus"]["reading"]["path"] == str(moved)
    before = os.stat(moved)
    write(moved, MIXED.replace("Привет", "Превет"))
    os.utime(moved, ns=(before.st_atime_ns, before.st_mtime_ns))
    edited = load_corpus(moved, split=(0.6, 0.2, 0.2))
    with pytest.raises(ValueError, match=r"ckpt.pt: .*moved/m.txt changed since the run read it \(SHA-256 .*, "
                                         r"[\d,]+ bytes then, SHA-256 .* now\): the run would go on over another "
                                         r"text\. Fix: restore the file"):
        tiny_run(tmp_path, edited, resume=True, max_steps=6)
    with pytest.raises(ValueError, match=r"is read otherwise than the run read it \(split \[0.6, 0.2, 0.2\] there, "
                                         r"\[0.9, 0.05, 0.05\] here\)"):
        tiny_run(tmp_path, load_corpus(path), resume=True, max_steps=6)


def test_the_command_line_resume_names_the_runs_file_and_reads_it_as_the_run_did(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "ru.txt", MIXED)
    train_main(["--corpus", "ru.txt", "--out", "run", *TINY_RUN, "split=0.6,0.2,0.2", "--stop-at", "2"])
    monkeypatch.delenv("TXL_CORPUS", raising=False)
    err = cli_error(train_main, ["--out", "run", "--resume", *TINY_RUN], capsys)  # (it said: vocab_size 49 vs 27)
    assert "the run trained on ru.txt, but this resume reads text8-mini. Fix: add --corpus ru.txt" in err
    monkeypatch.setenv("TXL_CORPUS", "text8-mini")
    err = cli_error(train_main, ["--out", "run", "--resume", *TINY_RUN], capsys)
    assert "reads text8-mini ($TXL_CORPUS=text8-mini is set: it overrides a corpus name" in err
    train_main(["--corpus", "ru.txt", "--out", "run", "--resume", *TINY_RUN])  # its split: from the checkpoint
    ckpt = load_checkpoint(tmp_path / "run" / "ckpt.pt")
    assert ckpt["step"] == 4 and ckpt["corpus"]["reading"]["split"] == [0.6, 0.2, 0.2]


def test_a_resume_on_a_name_the_variable_chose_names_the_variable(tmp_path, monkeypatch):
    """$TXL_CORPUS (set by CI, or a shell) replaces the name typed: the message named --corpus and the variable
    only as a maybe."""
    from txl_minimal.corpora import corpus_change
    saved, used = dict(name="text8", reading=None), dict(name="text8-mini", reading=None)
    monkeypatch.setenv("TXL_CORPUS", "text8-mini")
    assert corpus_change(saved, used).startswith("the run trained on text8, but this resume reads text8-mini because "
                                                 "$TXL_CORPUS=text8-mini is set, which overrides the corpus named")
    monkeypatch.delenv("TXL_CORPUS")
    assert corpus_change(saved, used).startswith("used corpus='text8', this run 'text8-mini': the memory and data "
                                                 "position would not line up. Fix: resume on its own corpus, --corpus "
                                                 "text8")
    assert corpus_change(saved, dict(saved)) is None


# ----------------------------------------------------------------------------- your text, a model's vocabulary

def test_a_shipped_model_scores_your_text_read_onto_its_vocabulary(tmp_path, capsys):
    """evaluate txl-tiny --corpus lower.txt (text8-mini's own characters) was refused "another vocabulary (27)
    than (28)", and its fix, "drop --corpus", left no way to score one's own text with a shipped model."""
    mini = load_corpus("text8-mini")
    lower = write(tmp_path / "lower.txt", mini.decode(mini.train[:60_000]))
    result = evaluate_checkpoint("txl-tiny", corpus=str(lower))
    onto = load_corpus(lower, vocab=txl_minimal.VOCAB)
    assert onto.vocab == txl_minimal.VOCAB and np.array_equal(onto.valid, mini.train[54_000:57_000])
    assert result["tokens"] == 2_999 and np.isclose(
        result["loss"], evaluate(txl_minimal.load_pretrained("txl-tiny"), mini.train[54_000:57_000])["loss"])
    evaluate_main(["txl-tiny", "--corpus", str(lower), "--no-progress"])
    assert f"on {lower} valid: bpc " in capsys.readouterr().out
    upper = write(tmp_path / "upper.txt", mini.decode(mini.train[:6_000]).title() + " é 7")
    err = cli_error(evaluate_main, ["txl-tiny", "--corpus", str(upper), "--no-progress"], capsys)
    assert re.search(r"upper.txt: [\d,]+ characters \(\d+ different: 'T' \(U\+0054\), .*\) are not in the vocabulary "
                     r"of 27 characters it is read onto \(the model's\), which has no U\+FFFD", err)
    assert "are upper case, which the vocabulary holds in lower case: lower-case the text first" in err


def test_a_model_of_your_text_scores_another_text_read_onto_its_vocabulary(char_run, tmp_path):
    d, _, _ = char_run
    other = write(tmp_path / "other.txt", "другой текст, другие буквы. " * 20)
    with pytest.warns(UserWarning, match=r"other.txt: 240 of its 560 characters \(7 different: 'у', 'г', 'д', .*\) "
                                         r"are not in the vocabulary it is read onto: read as U\+FFFD"):
        result = evaluate_checkpoint(d / "run", corpus=str(other))
    assert result["tokens"] == round(560 * 0.05) - 1


def test_a_model_of_an_nfd_text_names_the_normalisation(tmp_path):
    """A text saved decomposed (macOS file names, some editors: 'é' = 'e' + U+0301): a prompt typed composed
    was refused as "'é' is not in the vocabulary", with no word of why."""
    import unicodedata
    symbols = UNKNOWN_CHAR + unicodedata.normalize("NFD", "café résumé naïve")
    symbols = "".join(dict.fromkeys(symbols))
    model = TransformerXL(tiny_cfg(vocab_size=len(symbols))).eval()
    model.unit, model.vocab = "character", tuple(symbols)
    with pytest.raises(ValueError, match=r"'é' \(U\+00E9\) is not in the vocabulary .*The vocabulary holds 'é' "
                                         r"decomposed \(Unicode NFD: .*normalise the text first, "
                                         r"unicodedata.normalize\('NFD', text\)"):
        generate_text(model, "café", 3)
    assert generate_text(model, unicodedata.normalize("NFD", "café"), 3).startswith("cafe\u0301")
    nfd = write(tmp_path / "nfd.txt", unicodedata.normalize("NFD", "café résumé " * 100))
    with pytest.raises(CorpusError, match=r"U\+0301 is a combining mark: the text is decomposed .*"
                                          r"unicodedata.normalize\('NFC', text\)"):
        load_corpus(nfd, vocab=txl_minimal.VOCAB + "é")


# ----------------------------------------------------------------------------- the vocabulary travels

@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_any_characters_round_trip_through_a_saved_model(tmp_path, suffix):
    symbols = UNKNOWN_CHAR + "\n \t\"\\😀中é\u2028"
    model = TransformerXL(tiny_cfg(vocab_size=len(symbols)))
    model.unit, model.vocab = "character", tuple(symbols)
    save(model, tmp_path / f"m{suffix}")
    back = load(tmp_path / f"m{suffix}")
    assert (back.unit, back.vocab) == ("character", tuple(symbols))


def test_generate_text_names_the_characters_a_prompt_holds_outside_the_vocabulary(tmp_path):
    symbols = UNKNOWN_CHAR + "абвгде ."
    model = TransformerXL(tiny_cfg(vocab_size=len(symbols))).eval()
    model.unit, model.vocab = "character", tuple(symbols)
    out = generate_text(model, "где", 20, generator=torch.Generator().manual_seed(0))
    assert out.startswith("где") and len(out) == 23 and set(out) <= set(symbols)
    with pytest.raises(ValueError, match=r"the prompt's 2 characters 'Zж' \(U\+005A, U\+0436\) are not in the "
                                         r"vocabulary of 9 characters, which knows 'абвгде \.'\. Fix:"):
        generate_text(model, "аZжZ", 3)
    with pytest.raises(ValueError, match=r"1 character 'x' \(U\+0078\) is not in the vocabulary"):
        encode_symbols("аx", symbols, strict=True)  # a Cyrillic а, a Latin x
    assert decode_symbols(encode_symbols("где", symbols), symbols) == "где"


def test_a_model_with_more_ids_than_symbols_samples_only_its_symbols():
    """A preset's vocab_size (27) above a small file's vocabulary (9): the ids past the symbols were never
    trained on and mean nothing; generate draws only ids that have a symbol (they used to reach decode)."""
    symbols = UNKNOWN_CHAR + "абвгде ."
    torch.manual_seed(0)
    model = TransformerXL(tiny_cfg(vocab_size=27)).eval()
    with torch.no_grad():
        model.out_bias[len(symbols):] = 10.0  # the meaningless ids are the likeliest
    model.unit, model.vocab = "character", tuple(symbols)
    out = generate_text(model, "где", 200, temperature=3.0, generator=torch.Generator().manual_seed(0))
    assert len(out) == 203 and set(out) <= set(symbols)
    ids = model.generate(torch.tensor([1, 2]), 200, temperature=3.0, generator=torch.Generator().manual_seed(0))
    assert int(ids.max()) < len(symbols)


def test_text8_models_and_encode_are_unchanged():
    model = txl_minimal.load_pretrained("txl-tiny")
    assert model.vocab == tuple(txl_minimal.VOCAB)
    with pytest.raises(ValueError, match=r"encode: character 'A' at position 0 is not in VOCAB"):
        generate_text(model, "A king", 2)
    mini = load_corpus("text8-mini")
    assert np.array_equal(mini.encode("the king"), encode("the king")) and mini.decode([20, 8, 5]) == "the"


@pytest.fixture(scope="module")
def char_run(tmp_path_factory):
    """``python -m txl_minimal.train --corpus mixed.txt`` as a user runs it (relative path, CI's TXL_CORPUS set)."""
    d = tmp_path_factory.mktemp("chars")
    write(d / "mixed.txt", MIXED)
    env = dict(ENV, TXL_DATA_DIR=str(d / "data"))
    done = python("-m", "txl_minimal.train", "--corpus", "mixed.txt", "--out", "run", *TINY_RUN, env=env, cwd=d)
    return d, env, done.stdout


def test_train_evaluate_and_generate_on_a_file_of_any_script_from_the_command_line(char_run, capsys):
    d, env, printed = char_run
    assert "step 4: train bpc" in printed
    corpus = load_text_file(d / "mixed.txt", data_dir=d / "data")
    for name in ("ckpt.pt", "best.pt"):  # the vocabulary in every checkpoint
        ckpt = load_checkpoint(d / "run" / name)
        assert ckpt["vocab"] == dict(unit="character", symbols=list(corpus.vocab))
        assert ckpt["model_config"]["vocab_size"] == corpus.vocab_size == 49  # taken from the file
        assert ckpt["train_config"]["corpus"] == str((d / "mixed.txt").resolve())
    out = python("-m", "txl_minimal.evaluate", "run", "--no-progress", env=env, cwd=d).stdout
    assert f"best.pt on {(d / 'mixed.txt').resolve()} valid: bpc" in out
    evaluate_main([str(d / "run"), "--corpus", str(d / "mixed.txt"), "--no-progress"])  # named again: the same
    assert capsys.readouterr().out.splitlines()[-1] == out.splitlines()[-1].replace("run/", f"{d / 'run'}/")
    model = load(d / "run")
    assert (model.unit, model.vocab) == ("character", tuple(corpus.vocab))
    text = generate_text(model, "Привет", 40, generator=torch.Generator().manual_seed(0))
    assert text.startswith("Привет") and len(text) == 46 and set(text) <= set(corpus.vocab)
    save(model, d / "mine.safetensors")  # how a model of your own text is shipped to students
    assert generate_text(load(d / "mine.safetensors"), "Привет", 40,
                         generator=torch.Generator().manual_seed(0)) == text


def test_evaluate_refuses_a_corpus_of_another_vocabulary_naming_both(char_run, tmp_path, capsys):
    d, env, _ = char_run
    with pytest.raises(ValueError, match=r"was trained on another vocabulary \(49 characters\) than text8-mini's "
                                         r"\(27 characters\).*Fix: drop --corpus text8-mini"):
        evaluate_checkpoint(d / "run", corpus="text8-mini")
    err = cli_error(evaluate_main, [str(d / "run"), "--corpus", "text8-mini", "--no-progress"], capsys)
    assert "another vocabulary (49 characters)" in err  # (another file: read onto its vocabulary, below)


def test_a_resume_on_another_file_is_refused(char_run, tmp_path, capsys):
    d, env, _ = char_run
    other = write(tmp_path / "other.txt", MIXED.upper())
    err = cli_error(train_main, ["--corpus", str(other), "--out", str(d / "run"), "--resume", "--max-steps", "6",
                                 *TINY_RUN[2:]], capsys)
    assert f"used corpus='{(d / 'mixed.txt').resolve()}', this run '{other.resolve()}'" in err


def test_a_run_on_your_own_text_is_not_shipped_as_a_text8_model(char_run):
    d, _, _ = char_run
    with pytest.raises(ValueError, match=r"is not a character model trained on text8 or text8-mini \(49 characters\)"
                                         r".*txl_minimal.save"):
        _shipped_state(d / "run", "txl-tiny")


def test_train_evaluate_and_generate_words_from_the_command_line(tmp_path, capsys):
    write(tmp_path / "w.txt", WORDS)
    env = dict(ENV, TXL_DATA_DIR=str(tmp_path / "data"))
    python("-m", "txl_minimal.train", "--corpus", "w.txt", "--unit", "word", "--out", "run", *TINY_RUN,
           "max_vocab=10", "split=0.8,0.1,0.1", env=env, cwd=tmp_path)
    ckpt = load_checkpoint(tmp_path / "run" / "best.pt")
    assert ckpt["vocab"]["unit"] == "word" and len(ckpt["vocab"]["symbols"]) == 10
    assert (ckpt["train_config"]["unit"], ckpt["train_config"]["max_vocab"]) == ("word", 10)
    assert ckpt["train_config"]["split"] == (0.8, 0.1, 0.1)
    evaluate_main([str(tmp_path / "run"), "--no-progress"])
    assert "valid: ppl" in capsys.readouterr().out  # read again as words, capped at 10 (its checkpoint says how)
    model = load(tmp_path / "run")
    text = generate_text(model, "the cat", 6, generator=torch.Generator().manual_seed(0))
    assert text.startswith("the cat ") and len(text.split()) == 8 and set(text.split()) <= set(model.vocab)
    record = json.loads(next((tmp_path / "data" / "own").glob("*.vocab.json")).read_text(encoding="utf-8"))
    assert record["symbols"] == ckpt["vocab"]["symbols"]
    other = write(tmp_path / "other.txt", "the cat sat on a zebra\n" * 40)  # another text, onto its 10 words
    with pytest.warns(UserWarning, match=r"other.txt: 40 of its 280 words \(1 different: 'zebra'\) are not in the "
                                         r"vocabulary it is read onto: read as <unk>"):  # (280: <eos> ends a line)
        onto = evaluate_checkpoint(tmp_path / "run", corpus=str(other))
    assert onto["unit"] == "word" and onto["tokens"] == round(280 * 0.1) - 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the cache the training wrote is read again: the same key
        result = evaluate_checkpoint(tmp_path / "run")
    n = sum(len(line.split()) + 1 for line in WORDS.split("\n")[:-1])  # words and one <eos> a line
    assert result["unit"] == "word" and result["tokens"] == round(n * 0.1) - 1  # its valid split of 10%
