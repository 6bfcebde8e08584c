"""txl_minimal.text8, through txl_minimal.data: vocabulary, splits, the text8 download/cache path
(with a small fake text8 served from tmp_path, never the network), text8-mini and load_corpus.
The batch iterator is tested in test_batching.py."""

import glob
import gzip
import hashlib
import http.client
import importlib.util
import io
import os
import re
import urllib.error
import urllib.request
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import txl_minimal.corpora
import txl_minimal.data
from txl_minimal.data import (MINI_PATH, REPO_DATA, VOCAB, VOCAB_SIZE, Corpus, CorpusError, Text8Source,
                              decode, encode, load_corpus, load_text8, load_text8_mini, split_corpus, text8_dir)


pytestmark = pytest.mark.usefixtures("no_network")  # (tests/conftest.py: file:// URLs only)


# ---------------------------------------------------------------- vocabulary and splits


def test_encode_decode_round_trip():
    text = " the quick brown fox jumps over the lazy dog"
    ids = encode(text)
    assert ids.dtype == np.uint8 and ids.max() < VOCAB_SIZE == 27
    assert list(encode(" az")) == [0, 1, 26]
    assert decode(ids) == text
    assert decode(torch.from_numpy(ids).long()) == text == decode(ids.tolist())


@pytest.mark.parametrize("bad", ["A", "7", "é", "\n"])
def test_encode_rejects_other_characters(bad):
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        encode("ok " + bad)


def test_decode_rejects_out_of_range_ids():
    with pytest.raises(ValueError):
        decode([0, 27])


def test_split_is_prep_text8s():
    train, valid, test = split_corpus(np.zeros(100_000_000, dtype=np.uint8))
    assert (len(train), len(valid), len(test)) == (90_000_000, 5_000_000, 5_000_000)
    ids = np.arange(1000)
    train, valid, test = split_corpus(ids)
    assert np.array_equal(np.concatenate([train, valid, test]), ids)  # order kept: valid, then test
    assert (len(valid), len(test)) == (50, 50)


# ---------------------------------------------------------------- text8 download and cache


def fake_text8(tmp_path: Path, n: int = 20_000):
    """A small random "text8" zipped like the real one, and a Text8Source that expects it."""
    rng = np.random.default_rng(0)
    text = decode(rng.integers(0, VOCAB_SIZE, n)).encode()
    zpath = tmp_path / "server" / "text8.zip"
    zpath.parent.mkdir()
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("text8", text)
    src = Text8Source(url=zpath.as_uri(), zip_bytes=zpath.stat().st_size,
                      zip_sha256=hashlib.sha256(zpath.read_bytes()).hexdigest(),
                      text_bytes=n, text_md5=hashlib.md5(text).hexdigest())
    return src, zpath, text


def never_called(url, timeout=None):
    raise AssertionError("must not download again")


def files(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()} if d.exists() else set()


def test_download_verify_cache_and_no_second_fetch(tmp_path):
    src, _, text = fake_text8(tmp_path)
    d = tmp_path / "data"
    c = load_text8(d, source=src, progress=False)
    assert (len(c.train), len(c.valid), len(c.test)) == (18_000, 1_000, 1_000)
    assert decode(np.concatenate([c.train, c.valid, c.test])) == text.decode()
    assert files(d) == {"text8.zip", "text8.train.npy", "text8.valid.npy", "text8.test.npy",
                        "text8.vocab.txt"}  # no *.part left over
    assert (d / "text8.vocab.txt").read_text() == VOCAB
    again = load_text8(d, source=src, opener=never_called)  # from the cache, memory-mapped
    assert isinstance(again.train, np.memmap) and np.array_equal(again.test, c.test)
    for p in d.glob("*.npy"):  # cache gone, text8.zip still there: rebuilt without fetching
        p.unlink()
    assert np.array_equal(load_text8(d, source=src, opener=never_called).valid, c.valid)


def test_zip_checksum_mismatch_only_warns_when_content_is_right(tmp_path):
    src, _, _ = fake_text8(tmp_path)
    src = Text8Source(**{**src.__dict__, "zip_sha256": "f" * 64})  # e.g. a re-zipped mirror
    with pytest.warns(UserWarning, match="SHA-256"):
        c = load_text8(tmp_path / "data", source=src, progress=False)
    assert len(c.train) == 18_000


def test_user_placed_unzipped_text8_is_used(tmp_path):
    src, _, text = fake_text8(tmp_path)
    d = tmp_path / "data"
    d.mkdir()
    (d / "text8").write_bytes(text)
    c = load_text8(d, source=src, opener=never_called)
    assert decode(c.test) == text[-1000:].decode()


@pytest.mark.parametrize("corrupt", ["checksum", "truncated", "not_a_zip"])
def test_bad_download_raises_and_leaves_nothing(tmp_path, corrupt):
    src, zpath, _ = fake_text8(tmp_path)
    if corrupt == "checksum":
        src = Text8Source(**{**src.__dict__, "text_md5": "0" * 32})
        match = "MD5"
    elif corrupt == "truncated":
        zpath.write_bytes(zpath.read_bytes()[:-100])
        match = "not a valid zip"
    else:
        zpath.write_bytes(b"<html>404 Not Found</html>")
        match = "not a valid zip"
    d = tmp_path / "data"
    with pytest.raises(CorpusError, match=match) as e:
        load_text8(d, source=src, progress=False)
    assert "text8-mini" in str(e.value) and str(d) in str(e.value)  # says how to fix it
    assert "delete or replace" not in str(e.value)  # the bad download is already gone
    assert files(d) == set()


def test_cut_connection_is_reported(tmp_path):
    src, zpath, _ = fake_text8(tmp_path)

    class Cut(io.BytesIO):  # promises more bytes than it delivers
        headers = {"Content-Length": str(zpath.stat().st_size + 1000)}

    d = tmp_path / "data"
    with pytest.raises(CorpusError, match="stopped after"):
        load_text8(d, source=src, opener=lambda url, timeout: Cut(zpath.read_bytes()),
                   progress=False)
    assert files(d) == set()


def test_body_cut_mid_stream_is_clear(tmp_path):
    """http.client raises IncompleteRead (not an OSError) when the server closes early."""
    src, zpath, _ = fake_text8(tmp_path)
    body = zpath.read_bytes()

    class Truncated(io.BytesIO):
        headers = {"Content-Length": str(len(body))}
        calls = 0

        def read(self, n=-1):
            self.calls += 1
            if self.calls > 1:  # the first chunk arrives, then the connection drops
                raise http.client.IncompleteRead(b"", len(body) - 100)
            return super().read(100)

    d = tmp_path / "data"
    with pytest.raises(CorpusError, match="could not download") as e:
        load_text8(d, source=src, opener=lambda url, timeout: Truncated(body), progress=False)
    assert "IncompleteRead" in str(e.value) and "TXL_CORPUS=text8-mini" in str(e.value)
    assert files(d) == set()  # the partial .part file is gone


@pytest.mark.parametrize("placed", ["text8", "text8.zip"])
def test_bad_hand_placed_file_says_to_remove_it(tmp_path, placed):
    """A bad local file would be read again on every call (text8 even before a good
    text8.zip), so the fix must name it; the user's file is not deleted for them."""
    src, zpath, text = fake_text8(tmp_path)
    d = tmp_path / "data"
    d.mkdir()
    bad = d / placed
    bad.write_bytes(text[:-10] if placed == "text8" else zpath.read_bytes()[:-100])
    with pytest.raises(CorpusError, match="MD5" if placed == "text8" else "not a valid zip") as e:
        load_text8(d, source=src, opener=never_called)
    assert f"delete or replace {bad}," in str(e.value)
    assert files(d) == {placed}


def test_network_error_is_clear(tmp_path):
    def offline(url, timeout=None):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    d = tmp_path / "data"
    with pytest.raises(CorpusError, match="could not download") as e:
        load_text8(d, opener=offline, progress=False)
    assert "TXL_CORPUS=text8-mini" in str(e.value) and "text8.zip" in str(e.value)
    assert files(d) == set()


@pytest.mark.parametrize("name, corpus", [("text8", "text8"), ("text8.zip", "text8"), ("enwik8", "enwik8"),
                                          ("wikitext-2-v1.zip", "wt2")])
def test_a_folder_where_a_corpus_file_goes_is_named_with_the_fix(tmp_path, monkeypatch, capsys, name, corpus):
    """unzip text8.zip -d text8 leaves data/text8/text8: load_corpus and train --corpus text8 raised
    IsADirectoryError (the doctor crashed on it: test_doctor.py)."""
    from txl_minimal.train import main as train_main
    monkeypatch.delenv("TXL_CORPUS", raising=False)
    monkeypatch.setenv("TXL_DATA_DIR", str(tmp_path))
    (tmp_path / name).mkdir()
    if name == corpus:  # the unzipped text one level too deep
        (tmp_path / name / name).write_text("the text")
        fix = f"move the {name} it holds into its place: mv {tmp_path / name / name} {tmp_path / name}.moved"
    else:
        fix = "move the folder out of the way (or delete it)"
    with pytest.raises(CorpusError, match=rf"{name} is a folder, not the .*\. Fix: {re.escape(fix)}"):
        load_corpus(corpus, download=False)
    with pytest.raises(SystemExit) as exited:
        train_main(["--corpus", corpus, "--out", str(tmp_path / "run"), "--max-steps", "1", "--no-progress", "--set",
                    "warmup_steps=1"])
    assert exited.value.code == 2 and f"{name} is a folder, not the" in capsys.readouterr().err
    if corpus == "text8":  # "auto" falls back to text8-mini, saying why in one line
        assert load_corpus("auto", download=False).name == "text8-mini"
        assert "is a folder" in capsys.readouterr().out


def test_missing_text8_without_download(tmp_path):
    with pytest.raises(CorpusError, match="download=False"):
        load_text8(tmp_path, download=False)


def test_auto_falls_back_to_mini_in_one_line(tmp_path, capsys):
    c = load_corpus("auto", data_dir=tmp_path, download=False)
    assert c.name == "text8-mini"
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "text8-mini" in out


def test_env_vars_choose_corpus_and_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TXL_CORPUS", "text8-mini")
    assert load_corpus("text8").name == "text8-mini"
    monkeypatch.setenv("TXL_CORPUS", "text8")
    monkeypatch.setenv("TXL_DATA_DIR", str(tmp_path))
    with pytest.raises(CorpusError, match=str(tmp_path)):
        load_corpus("auto", download=False)
    monkeypatch.delenv("TXL_CORPUS")
    with pytest.raises(ValueError, match="unknown corpus"):
        load_corpus("text9")


@pytest.mark.parametrize("split", ["train", "valid", "test"])
def test_truncated_cache_is_named_and_rebuilt(tmp_path, split):
    """A .npy cut short (a full disk, a killed copy) used to crash inside numpy."""
    src, _, _ = fake_text8(tmp_path)
    d = tmp_path / "data"
    c = load_text8(d, source=src, progress=False)
    good = {s: np.array(getattr(c, s)) for s in ("train", "valid", "test")}  # copies: memmaps see damage
    bad = d / f"text8.{split}.npy"
    bad.write_bytes(bad.read_bytes()[:-100])
    with pytest.warns(UserWarning, match=f"{re.escape(str(bad))} is truncated or corrupt.*rebuilding"):
        c = load_text8(d, source=src, opener=never_called)  # from the verified text8.zip
    assert all(np.array_equal(getattr(c, s), a) for s, a in good.items())
    np.save(bad, np.zeros(5, dtype=np.uint8))  # intact, but not this split's length
    with pytest.warns(UserWarning, match=f"{re.escape(str(bad))} holds \\(5,\\) uint8, not the"):
        assert np.array_equal(getattr(load_text8(d, source=src, opener=never_called), split), good[split])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # repaired: read from the cache again, silently
        assert isinstance(load_text8(d, source=src, opener=never_called).train, np.memmap)


def test_truncated_cache_without_a_source_falls_back_under_auto(tmp_path, capsys):
    src, _, _ = fake_text8(tmp_path)
    d = tmp_path / "data"
    load_text8(d, source=src, progress=False)
    (d / "text8.zip").unlink()
    (d / "text8.train.npy").write_bytes(b"")
    with pytest.warns(UserWarning, match="text8.train.npy is truncated or corrupt"):
        assert load_corpus("auto", data_dir=d, download=False).name == "text8-mini"
    assert "using text8-mini instead" in capsys.readouterr().out


def test_leftover_part_files_are_removed_by_the_next_download(tmp_path):
    """A download or cache write killed mid-way leaves its temp file (the process never
    reached its clean-up); the next attempt removes it. Unrelated files stay."""
    src, _, _ = fake_text8(tmp_path)
    d = tmp_path / "data"
    d.mkdir()
    for name in ("text8.zip.k2j4h1.part", "text8.train.npy.x9y8z7.part", "notes.part"):
        (d / name).write_bytes(b"half a file")
    load_text8(d, source=src, progress=False)
    assert files(d) == {"text8.zip", "text8.train.npy", "text8.valid.npy", "text8.test.npy",
                        "text8.vocab.txt", "notes.part"}


# ---------------------------------------------------------------- text8-mini


def test_mini_corpus_loads():
    c = load_text8_mini()
    assert isinstance(c, Corpus) and c.vocab == VOCAB and c.vocab_size == 27
    n = len(c.train) + len(c.valid) + len(c.test)
    assert 3_000_000 < n < 3_200_000
    assert len(c.valid) == len(c.test) == round(n * 0.05)
    assert decode(c.train[:36]) == " anarchism is a political philosophy"
    assert all(a.dtype == np.uint8 and a.max() < 27 for a in (c.train, c.valid, c.test))


def test_mini_ships_inside_the_package():
    """MINI_PATH lies in the package and pyproject's package-data takes it into wheels."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    package = Path(txl_minimal.data.__file__).parent
    rel = MINI_PATH.relative_to(package).as_posix()
    pyproject = tomllib.loads((package.parent / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["txl_minimal"]
    assert MINI_PATH.is_file() and any(Path(rel).match(p) for p in patterns), (rel, patterns)


def test_text8_goes_to_a_writable_folder(tmp_path, monkeypatch):
    """Source checkout: data/text8/; installed package: $TXL_DATA_DIR, else the user cache."""
    assert text8_dir() == REPO_DATA / "text8"  # these tests run from a checkout
    monkeypatch.setattr(txl_minimal.corpora, "REPO_DATA", tmp_path / "site-packages" / "data")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert text8_dir() == tmp_path / "cache" / "txl_minimal" / "text8"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert text8_dir() == tmp_path / "home" / ".cache" / "txl_minimal" / "text8"
    monkeypatch.setenv("TXL_DATA_DIR", str(tmp_path / "mine"))
    assert text8_dir() == tmp_path / "mine" and text8_dir(tmp_path / "arg") == tmp_path / "arg"


def find_fixture():
    """The gensim test file (or wheel) if this machine has it; see data/README.md."""
    name = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    candidates = [os.environ.get("TXL_GENSIM_FIXTURE", ""), str(REPO_DATA / "cache" / name),
                  f"/tmp/gensim/{name}", *sorted(glob.glob(str(REPO_DATA / "cache" / "gensim-*.whl"))),
                  *sorted(glob.glob("/tmp/gensim/gensim-*.whl"))]
    return next((p for p in candidates if p and Path(p).is_file()), None)


def test_mini_rebuilds_identically():
    fixture = find_fixture()
    if fixture is None:
        pytest.skip("gensim's enwiki fixture not found; set TXL_GENSIM_FIXTURE to the .bz2 or "
                    "to a wheel from `pip download --no-deps gensim`")
    spec = importlib.util.spec_from_file_location("build", REPO_DATA / "build_text8_mini.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    text = build.build_text(build.read_source(fixture))  # checks TEXT_SHA256 itself
    assert text.encode() == gzip.decompress(MINI_PATH.read_bytes())
    gz = build.compress(text)
    if gz != MINI_PATH.read_bytes():
        pytest.xfail("same text, different gzip bytes: this zlib compresses differently")
    assert hashlib.sha256(gz).hexdigest() == build.GZ_SHA256

