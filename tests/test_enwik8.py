"""txl_minimal.enwik8 through txl_minimal.data: enwik8 as the authors prepare it, its download,
checks and cache, byte models in generate_text, train and evaluate. Everything runs on a small
fake enwik8 served from tmp_path (file:// URLs; the real file was never fetched here)."""

import hashlib
import json
import re
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import txl_minimal.enwik8
from tiny import TINY_SET, synthetic_corpus, tiny_cfg, tiny_train_cfg
from txl_minimal.checkpoint import load
from txl_minimal.data import (Corpus, CorpusError, Enwik8Source, decode_bytes, encode_bytes, generate_text,
                              load_corpus, load_enwik8, split_corpus)
from txl_minimal.devices import cpu_precision
from txl_minimal.evaluate import evaluate
from txl_minimal.evaluate import main as evaluate_main
from txl_minimal.train import main as train_main
from txl_minimal.train import train
from txl_minimal.utils import score_name, score_of
from txl_minimal.words import Vocab

pytestmark = pytest.mark.usefixtures("no_network")  # (tests/conftest.py: file:// URLs only)

N = 20_000  # the fake's bytes: 18,000 train, 1,000 valid, 1,000 test (prep_enwik8.py's proportions)
PIECES = ["<page>", "</page>", "\n", "\n", "  <title>", "</title>", " ", " ", " ", "the ", "of ", "[[", "]]",
          "Caf\u00e9 ", "\u2014", "\u65e5\u672c", "&amp;", "{{cite}}", "1906 ", "\t", "\r\n"]


def fake_text(n: int = N) -> bytes:
    """Wikipedia-like bytes with newlines (alone and after \\r), multi-byte UTF-8 characters, two
    bytes of equal count seen in the reverse of their numeric order ('$' twice, then '#' twice),
    and one byte ('~') that only the test split holds."""
    rng = np.random.default_rng(0)
    out = bytearray()
    while len(out) < n:
        out += PIECES[rng.integers(len(PIECES))].encode()
    out = out[:n]
    for at, byte in ((100, b"$"), (5_000, b"$"), (200, b"#"), (6_000, b"#"), (n - 10, b"~")):
        out[at:at + 1] = byte
    return bytes(out)


def fake_enwik8(tmp_path: Path, text: bytes | None = None) -> tuple[Enwik8Source, Path, bytes]:
    """The fake zipped as the real one is (one member, "enwik8"), and a source that expects it."""
    text = fake_text() if text is None else text
    zpath = tmp_path / "server" / "enwik8.zip"
    zpath.parent.mkdir(exist_ok=True)
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("enwik8", text)
    src = Enwik8Source(url=zpath.as_uri(), zip_bytes=zpath.stat().st_size,
                       zip_sha256=hashlib.sha256(zpath.read_bytes()).hexdigest(),
                       text_bytes=len(text), text_md5=hashlib.md5(text).hexdigest())
    return src, zpath, text


def authors_pipeline(text: bytes, folder: Path) -> tuple[list[np.ndarray], list[str]]:
    """prep_enwik8.py (each byte's number, spaces between, the newline as a line break, written to
    train/valid/test.txt), then the authors' Corpus for enwik8: Vocab counting the three files
    line by line as text, build_vocab, encode with add_eos=False. Nothing shared with enwik8.py."""
    held = len(text) // 20  # their 5,000,000 of 10^8
    parts = {"train": text[:-2 * held], "valid": text[-2 * held:-held], "test": text[-held:]}
    folder.mkdir()
    for name, part in parts.items():
        (folder / f"{name}.txt").write_text(" ".join(str(c) if c != 10 else "\n" for c in part))
    vocab = Vocab(add_eos=False)
    for name in parts:
        with open(folder / f"{name}.txt", encoding="utf-8") as f:
            vocab.count_lines(f)
    vocab.build_vocab()
    streams = []
    for name in parts:
        with open(folder / f"{name}.txt", encoding="utf-8") as f:
            streams.append(vocab.encode_lines(f))
    return streams, vocab.idx2sym


def never_called(url, timeout=None):
    raise AssertionError("must not download again")


def files(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()} if d.exists() else set()


CACHE = {"enwik8.train.npy", "enwik8.valid.npy", "enwik8.test.npy", "enwik8.vocab.json"}


# ---------------------------------------------------------------- the authors' preparation


def test_splits_and_symbols_are_the_authors(tmp_path):
    text = fake_text()
    splits, symbols = txl_minimal.enwik8.prepare(text)
    want, want_symbols = authors_pipeline(text, tmp_path / "prep")
    assert symbols == tuple(want_symbols)
    assert all(np.array_equal(got, ref) for got, ref in zip(splits, want))
    assert all(s.dtype == np.uint8 for s in splits)
    # the symbols that remain, counted here from the bytes themselves: every byte value but the newline
    assert len(symbols) == len(set(text) - {10}) and "10" not in symbols
    assert "126" in symbols  # '~', in test only: the authors count valid and test too
    assert symbols.index("36") < symbols.index("35")  # '$' and '#', two each: first seen first
    counts = [text.count(bytes([int(s)])) for s in symbols]
    assert counts == sorted(counts, reverse=True)
    # tokens per split: the split's bytes less its newlines (the \r of \r\n stays: "13")
    parts = [bytes(p) for p in split_corpus(np.frombuffer(text, np.uint8))]
    assert [len(s) for s in splits] == [len(p) - p.count(b"\n") for p in parts]
    assert (len(parts[1]), len(parts[2])) == (1_000, 1_000) and "13" in symbols


def test_the_symbols_spell_the_bytes_back(tmp_path):
    """Read back through the symbols, the ids are the file without its newlines."""
    text = fake_text()
    splits, symbols = txl_minimal.enwik8.prepare(text)
    spelled = b"".join(bytes(int(symbols[i]) for i in s) for s in splits)
    assert spelled == text.replace(b"\n", b"")


# ---------------------------------------------------------------- download, checks and cache


def test_download_verify_cache_and_no_second_fetch(tmp_path):
    src, _, text = fake_enwik8(tmp_path)
    d = tmp_path / "data"
    c = load_enwik8(d, source=src, progress=False)
    want, symbols = authors_pipeline(text, tmp_path / "prep")
    assert (c.name, c.unit, c.vocab, c.vocab_size) == ("enwik8", "byte", tuple(symbols), len(symbols))
    assert all(np.array_equal(a, b) for a, b in zip((c.train, c.valid, c.test), want))
    assert repr(c).endswith(f"vocab_size={len(symbols)}, unit='byte')")
    assert files(d) == {"enwik8.zip"} | CACHE  # no *.part left over
    meta = json.loads((d / "enwik8.vocab.json").read_text())
    assert meta["symbols"] == symbols and meta["source_md5"] == src.text_md5
    again = load_enwik8(d, source=src, opener=never_called)  # from the cache, memory-mapped
    assert isinstance(again.train, np.memmap) and again.vocab == c.vocab and np.array_equal(again.test, c.test)
    for p in d.glob("*.npy"):  # cache gone, enwik8.zip still there: rebuilt without fetching
        p.unlink()
    assert np.array_equal(load_enwik8(d, source=src, opener=never_called).valid, c.valid)


def test_placed_unzipped_enwik8_is_used(tmp_path):
    src, _, text = fake_enwik8(tmp_path)
    d = tmp_path / "data"
    d.mkdir()
    (d / "enwik8").write_bytes(text)
    c = load_enwik8(d, source=src, opener=never_called)
    assert np.array_equal(c.test, authors_pipeline(text, tmp_path / "prep")[0][2])
    assert files(d) == {"enwik8"} | CACHE


def test_zip_of_another_sha256_only_warns_when_the_content_is_right(tmp_path):
    src, _, _ = fake_enwik8(tmp_path)
    src = Enwik8Source(**{**src.__dict__, "zip_sha256": "f" * 64})  # e.g. a re-zipped copy
    with pytest.warns(UserWarning, match="SHA-256 .* but the unzipped enwik8 checks out"):
        c = load_enwik8(tmp_path / "data", source=src, progress=False)
    assert len(c.valid) == 1_000 - fake_text()[-2_000:-1_000].count(b"\n")


@pytest.mark.parametrize("corrupt", ["checksum", "truncated", "html"])
def test_bad_download_raises_and_leaves_nothing(tmp_path, corrupt):
    src, zpath, _ = fake_enwik8(tmp_path)
    if corrupt == "checksum":  # a zip of another file
        src = Enwik8Source(**{**src.__dict__, "text_md5": "0" * 32})
        match = f"does not hold enwik8: expected {N:,} bytes with MD5 0{{32}}"
    elif corrupt == "truncated":
        zpath.write_bytes(zpath.read_bytes()[:-100])
        match = "is not a valid zip \\(truncated or corrupted\\?\\)"
    else:  # what a mirror or a captive portal answers
        zpath.write_bytes(b"<!DOCTYPE html>\n<html><body>404 Not Found</body></html>")
        match = "It looks like an HTML page"
    d = tmp_path / "data"
    with pytest.raises(CorpusError, match=match) as e:
        load_enwik8(d, source=src, progress=False)
    message = str(e.value)
    assert message.startswith(f"the file downloaded from {src.url} ")  # names the file
    assert f"Fix: download {src.url} by hand and put enwik8.zip" in message and str(d) in message
    assert "delete or replace" not in message  # the bad download is already gone
    assert files(d) == set()


@pytest.mark.parametrize("placed", ["enwik8", "enwik8.zip"])
def test_bad_placed_file_says_to_remove_it(tmp_path, placed):
    """A bad local file would be read again on every call, so the fix names it; it is not deleted."""
    src, zpath, text = fake_enwik8(tmp_path)
    d = tmp_path / "data"
    d.mkdir()
    bad = d / placed
    bad.write_bytes(text[:-10] if placed == "enwik8" else b"<html>Moved</html>")
    with pytest.raises(CorpusError, match="MD5" if placed == "enwik8" else "HTML page") as e:
        load_enwik8(d, source=src, opener=never_called)
    assert str(e.value).startswith(f"{bad} ") and f"Fix: delete or replace {bad}, then" in str(e.value)
    assert files(d) == {placed}


def test_missing_enwik8_without_download(tmp_path):
    with pytest.raises(CorpusError, match=f"enwik8 not found in {re.escape(str(tmp_path))}/ and download=False"):
        load_corpus("enwik8", data_dir=tmp_path, download=False)


@pytest.mark.parametrize("damage", ["truncated", "other ids", "wrong length", "vocab file", "other source"])
def test_damaged_cache_is_named_and_rebuilt(tmp_path, damage):
    src, _, _ = fake_enwik8(tmp_path)
    d = tmp_path / "data"
    c = load_enwik8(d, source=src, progress=False)
    good = [np.array(s) for s in (c.train, c.valid, c.test)]  # copies: memmaps see the damage
    npy, meta_file = d / "enwik8.valid.npy", d / "enwik8.vocab.json"
    meta = json.loads(meta_file.read_text())
    if damage == "truncated":
        npy.write_bytes(npy.read_bytes()[:-100])
        match = f"{re.escape(str(npy))} is truncated or corrupt"
    elif damage == "other ids":  # intact, its length right, its ids not
        np.save(npy, good[1][::-1].copy())
        match = "do not hold the ids enwik8.vocab.json describes"
    elif damage == "wrong length":
        np.save(npy, good[1][:5])
        match = f"{re.escape(str(npy))} holds \\(5,\\) uint8, not the {len(good[1]):,} uint8 ids"
    elif damage == "vocab file":
        meta_file.write_text(json.dumps(meta)[:-20])
        match = f"{re.escape(str(meta_file))} is damaged"
    else:  # a cache of another enwik8 (here: the real file's checks)
        meta_file.write_text(json.dumps(dict(meta, source_md5="a1fa5ffddb56f4953e226637dabbb36a")))
        match = "was built from another file than enwik8"
    with pytest.warns(UserWarning, match=f"{match}.*rebuilding the enwik8 cache"):
        c = load_enwik8(d, source=src, opener=never_called)  # from the checked enwik8.zip
    assert all(np.array_equal(a, b) for a, b in zip((c.train, c.valid, c.test), good))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # repaired: read from the cache again, silently
        assert isinstance(load_enwik8(d, source=src, opener=never_called).valid, np.memmap)


# ---------------------------------------------------------------- bytes in and out


def test_encode_and_decode_bytes():
    _, symbols = txl_minimal.enwik8.prepare(fake_text())
    ids = encode_bytes("Caf\u00e9 [[\u65e5\u672c]]", symbols)
    assert ids.dtype == np.uint8 and len(ids) == len("Caf\u00e9 [[\u65e5\u672c]]".encode())
    assert [symbols[i] for i in ids[:3]] == ["67", "97", "102"]
    for as_type in (list, np.asarray, torch.as_tensor):
        assert decode_bytes(as_type(ids), symbols) == "Caf\u00e9 [[\u65e5\u672c]]"
    cut = encode_bytes("\u00e9", symbols)[:1]  # half of a two-byte character
    assert decode_bytes(cut, symbols) == "\ufffd"
    with pytest.raises(ValueError, match=r"the byte 10 of the character '\\n' \(byte 3 of its UTF-8\) .* "
                                         r"drops every newline.*Fix: write it on one line \(a space for each"):
        encode_bytes("the\nend", symbols)
    for given in (b"the\nend", bytearray(b"the\nend")):  # bytes are taken as they are
        with pytest.raises(ValueError, match=r"the byte 10 of the character '\\n' \(byte 3"):
            encode_bytes(given, symbols)
    assert np.array_equal(encode_bytes(b"Caf\xc3\xa9", symbols), encode_bytes("Caf\u00e9", symbols))
    with pytest.raises(ValueError, match="the byte 226 of the character '\u20ac'.*Fix: leave '\u20ac' out"):
        encode_bytes("the \u20ac", [s for s in symbols if s != "226"])  # the euro sign's first byte missing
    with pytest.raises(ValueError, match="ids must lie in"):
        decode_bytes([len(symbols)], symbols)
    with pytest.raises(ValueError, match="not a byte vocabulary.*Fix"):
        encode_bytes("the", ("<unk>", "the"))


def test_a_byte_corpus_is_scored_in_bpc():
    assert (score_name("byte"), score_of(np.log(2), "byte")) == ("bpc", pytest.approx(1.0))
    with pytest.raises(ValueError, match="'character', 'byte' or 'word'"):
        score_name("bytes")


def test_generate_text_reads_and_writes_utf8_bytes(tiny_model):
    _, symbols = txl_minimal.enwik8.prepare(fake_text())
    model = tiny_model(vocab_size=len(symbols))
    model.unit, model.vocab = "byte", symbols  # as a checkpoint of an enwik8 run sets them
    prompt = "Caf\u00e9 \u2014 "
    out = generate_text(model, prompt, 30, generator=torch.Generator().manual_seed(0))
    ids = model.generate(torch.tensor([symbols.index(str(b)) for b in prompt.encode()]), 30,
                         generator=torch.Generator().manual_seed(0))
    assert out == bytes(int(symbols[i]) for i in ids).decode("utf-8", "replace")  # spelled independently
    assert out.startswith(prompt) and len(out.encode("utf-8", "replace")) >= len(prompt.encode())
    with pytest.raises(ValueError, match="generate_text: the prompt: the byte 10 of the character '\\\\n'"):
        generate_text(model, "the\nthe", 5)
    model.vocab = None
    with pytest.raises(ValueError, match="byte model, but its vocabulary is unknown"):
        generate_text(model, "the", 5)


# ---------------------------------------------------------------- train and evaluate, by name


@pytest.fixture
def fake_in_data_dir(tmp_path, monkeypatch):
    """The fake, placed in $TXL_DATA_DIR as enwik8.zip, and ENWIK8 expecting it (load_corpus('enwik8'))."""
    src, zpath, text = fake_enwik8(tmp_path)
    d = tmp_path / "data"
    d.mkdir()
    (d / "enwik8.zip").write_bytes(zpath.read_bytes())
    monkeypatch.setattr(txl_minimal.enwik8, "ENWIK8", src)
    monkeypatch.setenv("TXL_DATA_DIR", str(d))
    return d


def test_train_then_evaluate_through_the_command_line(fake_in_data_dir, tmp_path, capsys):
    corpus = load_corpus("enwik8")
    n = corpus.vocab_size
    run = tmp_path / "run"
    small = ["--corpus", "enwik8", "--max-steps", "2", "--no-progress", "--set", *TINY_SET, "batch_size=2",
             "tgt_len=8", "mem_len=8", "eval_interval=2", "amp=off"]
    with pytest.raises(SystemExit):  # cpu-tiny's 27 symbols: the fix names enwik8's count
        train_main(["--out", str(tmp_path / "no"), *small])
    assert f"enwik8 has {n:,} symbols. Fix: --set vocab_size={n}" in capsys.readouterr().err
    cpu_precision.cache_clear()
    train_main(["--out", str(run), *small, f"vocab_size={n}"])
    assert re.search(r"^step 2: train bpc \d\.\d{3}, valid bpc \d\.\d{3}$", capsys.readouterr().out, re.M)

    model = load(run)
    assert (model.unit, model.vocab) == ("byte", corpus.vocab)  # the checkpoint holds the symbols
    assert generate_text(model, "Caf\u00e9", 8, temperature=0).startswith("Caf\u00e9")

    evaluate_main([str(run), "--split", "test", "--max-predictions", "100", "--no-progress"])  # its own corpus
    out = capsys.readouterr().out
    expected = evaluate(model, corpus.test, max_tokens=100)["bpc"]
    assert float(re.search(r"on enwik8 test: bpc (\d+\.\d+) over 100 predictions", out).group(1)) \
        == pytest.approx(expected, abs=6e-5)

    with pytest.raises(SystemExit):  # an enwik8 model on text8-mini's characters
        evaluate_main([str(run), "--corpus", "text8-mini", "--no-progress"])
    assert f"is a byte model ({n} bytes) but text8-mini holds 27 characters" in capsys.readouterr().err


def test_a_character_model_is_refused_on_enwik8(fake_in_data_dir, tmp_path, capsys):
    run = tmp_path / "chars"
    train(tiny_cfg(vocab_size=256), tiny_train_cfg(run, max_steps=2, eval_interval=2),
          synthetic_corpus("the cat sat "), progress=False)
    with pytest.raises(SystemExit):  # vocab_size 256 would fit the ids: only the unit tells them apart
        evaluate_main([str(run), "--corpus", "enwik8", "--no-progress"])
    n = load_corpus("enwik8").vocab_size
    assert f"is a character model (27 characters) but enwik8 holds {n} bytes" in capsys.readouterr().err


def test_a_byte_corpus_in_python_trains_and_generates(tmp_path):
    """train() on a Corpus of unit "byte" built in Python: the returned model knows its symbols."""
    splits, symbols = txl_minimal.enwik8.prepare(fake_text())
    corpus = Corpus("my-bytes", *splits, vocab=symbols, unit="byte")
    res = train(tiny_cfg(vocab_size=len(symbols)), tiny_train_cfg(tmp_path / "run", max_steps=2, eval_interval=2),
                corpus, progress=False)
    assert (res.model.unit, res.model.vocab) == ("byte", symbols)
    assert generate_text(res.model, "[[", 4, temperature=0).startswith("[[")
