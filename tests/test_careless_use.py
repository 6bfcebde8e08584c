"""Nothing a student does loses a run, damages a shipped file, or silently computes the wrong
thing (issue 33): each case a careless student or a coursework user hit, with the behaviour it
gets now. Groups: work kept, wrong numbers refused, settings the package offers, sentences
instead of tracebacks, and what was right already (kept so by a test each)."""
from __future__ import annotations

import builtins
import csv
import errno
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from tiny import FOX, ROOT, synthetic_corpus, tiny_cfg, tiny_train_cfg
from txl_minimal import checkpoint, command_line, data, pretrained
from txl_minimal.checkpoint import load, load_checkpoint, save_checkpoint
from txl_minimal.data import Corpus, CorpusError, decode, encode, generate_text, load_text8, load_text8_mini_words
from txl_minimal.evaluate import (evaluate, evaluate_checkpoint, main as evaluate_main, read_segments,
                                  sliding_window_eval)
from txl_minimal.model import TransformerXL, TXLConfig
from txl_minimal.devices import LossMeter
from txl_minimal.train import CSVLog, LOCK, TrainConfig, lr_at, main as train_main, train
from txl_minimal.tutorial import exercises, solutions
from txl_minimal.utils import MANIFEST, WriteError, file_sha256

TINY_SET = ["d_model=16", "d_head=8", "d_inner=32", "eval_tokens=64"]
ENV = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TXL_CORPUS="text8-mini")


def cli_error(cli, argv: list[str], capsys, code: int = 2) -> str:
    """What a command printed on stderr when it stopped with exit status ``code`` (2: argparse)."""
    with pytest.raises(SystemExit) as exit_:
        cli(argv)
    if code == 2:
        assert exit_.value.code == 2
        return capsys.readouterr().err
    assert exit_.value.code not in (0, 2, None)
    return str(exit_.value.code)  # sys.exit("error: ...") prints its text and exits 1


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def steps_in(log: Path) -> list[int]:
    return [int(r["step"]) for r in csv.DictReader(open(log))]


@pytest.fixture
def read_only(monkeypatch):
    """``read_only(folder)``: from now on every write inside ``folder`` fails with EROFS, as on a
    read-only file system (root ignores permission bits, so chmod cannot stand in for one)."""
    folders: list[str] = []

    def inside(path) -> bool:
        if isinstance(path, int):
            return False
        p = os.path.abspath(os.fsdecode(os.fspath(path)))
        return any(p == f or p.startswith(f + os.sep) for f in folders)

    def refuse(path):
        raise OSError(errno.EROFS, "Read-only file system", os.fsdecode(os.fspath(path)))

    real = dict(open=io.open, os_open=os.open, mkdir=os.mkdir, replace=os.replace, rename=os.rename,
                unlink=os.unlink, link=os.link, chmod=os.chmod)

    def fake_open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, bytes, os.PathLike)) and inside(file) and set(mode) & set("wax+"):
            refuse(file)
        return real["open"](file, mode, *args, **kwargs)

    def fake_os_open(path, flags, *args, **kwargs):
        if inside(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            refuse(path)
        return real["os_open"](path, flags, *args, **kwargs)

    def guard(name, *which):
        def fake(*args, **kwargs):
            if any(inside(args[i]) for i in which) and not (name == "mkdir" and os.path.isdir(args[0])):
                refuse(args[which[-1]])
            return real[name](*args, **kwargs)
        return fake

    monkeypatch.setattr(io, "open", fake_open)
    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(os, "open", fake_os_open)
    monkeypatch.setattr(os, "mkdir", guard("mkdir", 0))
    for name in ("replace", "rename", "link"):
        monkeypatch.setattr(os, name, guard(name, 0, 1))
    monkeypatch.setattr(os, "unlink", guard("unlink", 0))
    monkeypatch.setattr(os, "chmod", guard("chmod", 0))
    return lambda folder: folders.append(os.path.abspath(folder))


@pytest.fixture
def full_disk(monkeypatch):
    """``full_disk.append(pattern)``: temp files whose name contains ``pattern`` are written to /dev/full,
    so that writing them fails with ENOSPC as on a full disk (torch's own chain of errors included)."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    patterns: list[str] = []
    real = tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        fd, name = real(*args, **kwargs)
        if any(p in os.path.basename(name) for p in patterns):
            os.close(fd)
            fd = os.open("/dev/full", os.O_WRONLY)
        return fd, name

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    return patterns


# 1. Work kept ----------------------------------------------------------------------------------

def test_a_resumed_log_holds_its_rows_before_the_first_new_one(tmp_path):
    """CSVLog used to reopen log.csv with "w" and keep the old rows in memory until its first
    row: a run killed in between left a 0-byte log. Now the kept rows are on disk at once."""
    corpus = synthetic_corpus("the cat sat ")
    train(tiny_cfg(), tiny_train_cfg(tmp_path, max_steps=12, eval_interval=3), corpus, stop_at=6, progress=False)
    before = (tmp_path / "log.csv").read_text()
    log = CSVLog(tmp_path / "log.csv", resume=True, step=6)  # as a resume opens it; nothing written yet
    try:
        assert (tmp_path / "log.csv").read_text() == before and steps_in(tmp_path / "log.csv") == [2, 3, 4, 6]
    finally:
        log.close()
    # no temp file left
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "best.pt") == ["ckpt.pt", "log.csv"]


def test_kill_9_of_a_resumed_run_keeps_the_log_and_leaves_no_lock_or_temp_file(tmp_path, monkeypatch, capsys):
    """The issue's recipe: a run to step 40 logging every 10 steps, resumed with intervals of 500,
    killed (SIGKILL) once the resumed process has rewritten its log; then resumed again."""
    monkeypatch.setenv("TXL_CORPUS", "text8-mini")
    out, log = tmp_path / "run", tmp_path / "run" / "log.csv"
    argv = ["--out", str(out), "--no-progress", "--max-steps", "2000", "--set", *TINY_SET, "amp=off"]
    train_main([*argv, "eval_interval=10", "log_interval=10", "--stop-at", "40"])
    assert steps_in(log) == [10, 20, 30, 40]
    seen = os.stat(log)
    p = subprocess.Popen([sys.executable, "-m", "txl_minimal.train", "--threads", "1", *argv,
                          "eval_interval=500", "log_interval=500", "--resume"], env=ENV, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:  # the resumed run has (re)opened its log: a new file, or a truncated one
        now = os.stat(log)
        if (now.st_ino, now.st_size, now.st_mtime_ns) != (seen.st_ino, seen.st_size, seen.st_mtime_ns):
            break
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=60)
    assert steps_in(log) == [10, 20, 30, 40]  # used to be 0 bytes: rows 10-40 lost
    assert (out / LOCK).exists()  # a killed process cannot remove its lock: the next run takes it over
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train_main([*argv, "eval_interval=10", "log_interval=10", "--resume", "--stop-at", "50"])
    assert "taking over the lock of pid" in capsys.readouterr().err
    assert not [w for w in caught if "log.csv" in str(w.message)]  # not "empty: the log starts at step 40"
    assert steps_in(log) == [10, 20, 30, 40, 50]
    # no lock, no temp file
    assert sorted(q.name for q in out.iterdir() if q.name != "best.pt") == ["ckpt.pt", "log.csv"]


@pytest.fixture
def shipped_copy(tmp_path, monkeypatch):
    """The shipped folder's txl-tiny files and manifest, copied and used; txl-tiny's NAME.json
    evaluations cut to a few predictions (the real ones take minutes)."""
    folder = tmp_path / "pretrained"
    folder.mkdir()
    for name in ("txl-tiny.safetensors", "txl-tiny.log.csv", "txl-tiny.json", MANIFEST):
        shutil.copy(pretrained.PRETRAINED_DIR / name, folder / name)
    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text(json.dumps({k: v for k, v in manifest.items() if (folder / k).exists()}))
    monkeypatch.setattr(pretrained, "PRETRAINED_DIR", folder)
    monkeypatch.setattr(checkpoint, "PRETRAINED_DIR", folder)
    monkeypatch.setitem(pretrained.EVALUATIONS, "txl-tiny", [("train_memory", "segments", dict(max_tokens=20))])
    return folder


@pytest.fixture(scope="module")
def char_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("char_run")
    train(tiny_cfg(), tiny_train_cfg(out, max_steps=4, eval_interval=2), synthetic_corpus("the cat sat "),
          progress=False)
    return out


def test_a_failed_ship_changes_no_shipped_file(shipped_copy, char_run, tmp_path, capsys, full_disk):
    """--ship used to overwrite NAME.pt, then fail on the missing log.csv: every later load said
    the file was damaged. Everything is checked first; then all files change together or none."""
    from txl_minimal.pretrained import main as pretrained_main
    before = snapshot(shipped_copy)
    run = tmp_path / "run"
    shutil.copytree(char_run, run)
    (run / "log.csv").unlink()
    err = cli_error(pretrained_main, ["--ship", str(run), "--name", "txl-tiny", "--no-progress", "--new-shape"], capsys)
    assert "has no log.csv" in err and "nothing was changed" in err and "Errno" not in err
    assert snapshot(shipped_copy) == before
    assert pretrained.load_pretrained("txl-tiny").cfg.d_model == 128  # still the shipped model

    shutil.copy(char_run / "log.csv", run / "log.csv")
    full_disk.append("txl-tiny.json")  # the third of four files cannot be written
    with pytest.raises(WriteError, match="no space left.*txl-tiny.json.*none of txl-tiny.safetensors, "
                                         "txl-tiny.log.csv, txl-tiny.json, MANIFEST.json was changed"):
        pretrained.ship(run, "txl-tiny", new_shape=True)  # (a tiny run of another shape than txl-tiny's)
    assert snapshot(shipped_copy) == before  # the .pt and log staged before it were not renamed

    full_disk.clear()  # room on the disk again
    pretrained_main(["--ship", str(run), "--name", "txl-tiny", "--no-progress", "--new-shape"])
    manifest = json.loads((shipped_copy / MANIFEST).read_text())
    for name in ("txl-tiny.safetensors", "txl-tiny.log.csv", "txl-tiny.json"):
        assert manifest[name] == dict(bytes=(shipped_copy / name).stat().st_size,
                                      sha256=file_sha256(shipped_copy / name)), name
    assert pretrained.load_pretrained("txl-tiny").cfg.d_model == 16 and pretrained.pretrained_summary("txl-tiny")
    assert sorted(p.name for p in shipped_copy.iterdir()) == sorted(before)  # nothing staged left behind


def test_files_written_together_are_put_back_when_a_rename_fails(tmp_path, monkeypatch):
    from txl_minimal.utils import replace_together
    paths = [tmp_path / name for name in ("a.pt", "a.log.csv", "a.json", "new.json")]
    for p in paths[:3]:
        p.write_text(f"old {p.name}")
    real, calls = os.replace, []

    def third_fails(src, dst):
        calls.append(dst)
        if len(calls) == 3:
            raise OSError(errno.EIO, "Input/output error", str(dst))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", third_fails)
    with pytest.raises(OSError, match="Input/output error"):
        replace_together({p: f"new {p.name}".encode() for p in paths})
    assert [p.read_text() for p in paths[:3]] == [f"old {p.name}" for p in paths[:3]]  # the two renamed: put back
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths[:3])  # nothing staged left
    monkeypatch.setattr(os, "replace", real)
    replace_together({p: f"new {p.name}".encode() for p in paths})
    assert [p.read_text() for p in paths] == [f"new {p.name}" for p in paths]


def test_shipping_refuses_a_word_model(shipped_copy, word_run, capsys):
    from txl_minimal.pretrained import main as pretrained_main
    before = snapshot(shipped_copy)
    err = cli_error(pretrained_main, ["--ship", str(word_run), "--name", "txl-tiny", "--no-progress"], capsys)
    assert "not a character model" in err and "10,001 words" in err
    assert snapshot(shipped_copy) == before


def test_overwrite_deletes_nothing_until_the_new_run_passes_its_checks(char_run, tmp_path, capsys, monkeypatch):
    """--overwrite used to delete the old run first: a new run refused on its vocabulary (or a
    device) left the folder empty."""
    monkeypatch.delenv("TXL_CORPUS", raising=False)  # (make test's text8-mini would replace the word corpus)
    out = tmp_path / "run"
    shutil.copytree(char_run, out)
    before = snapshot(out)
    err = cli_error(train_main, ["--out", str(out), "--overwrite", "--corpus", "text8-mini-words",
                                 "--max-steps", "2", "--no-progress", "--set", *TINY_SET], capsys)
    assert "Fix: --set vocab_size=10001" in err
    assert snapshot(out) == before
    err = cli_error(train_main, ["--out", str(out), "--overwrite", "--device", "mps", "--no-progress"], capsys)
    assert "TrainConfig.device" in err and "Traceback" not in err
    assert snapshot(out) == before
    train_main(["--out", str(out), "--overwrite", "--max-steps", "2", "--no-progress", "--set", *TINY_SET,
                "eval_interval=2", "log_interval=1"])  # a run that passes its checks replaces the old one
    assert steps_in(out / "log.csv") == [1, 2] and load_checkpoint(out / "ckpt.pt")["model_config"]["d_model"] == 16


def test_full_disk_while_saving_a_checkpoint_keeps_the_last_one(char_run, tmp_path, capsys, full_disk, monkeypatch):
    out = tmp_path / "run"
    shutil.copytree(char_run, out)
    before = (out / "ckpt.pt").read_bytes()
    full_disk.append("ckpt.pt.")
    with pytest.raises(WriteError) as err:
        train(tiny_cfg(), tiny_train_cfg(out, max_steps=6, eval_interval=2), synthetic_corpus("the cat sat "),
              resume=True, progress=False)
    message = str(err.value)
    assert f"no space left on the disk holding {out} for the checkpoint of step 6" in message
    assert "The last checkpoint (step 4) is intact" in message and "--resume" in message
    assert err.value.__suppress_context__ and err.value.errno == errno.ENOSPC  # no 37-line chain
    assert (out / "ckpt.pt").read_bytes() == before
    # no temp file, no lock
    assert sorted(p.name for p in out.iterdir() if p.name != "best.pt") == ["ckpt.pt", "log.csv"]
    monkeypatch.setenv("TXL_CORPUS", "text8-mini")
    argv = ["--out", str(tmp_path / "cli"), "--max-steps", "2", "--no-progress", "--set", *TINY_SET, "eval_interval=2"]
    said = cli_error(train_main, argv, capsys, code=1)
    assert said.startswith("error: no space left") and "No checkpoint was saved before this one" in said


def test_a_read_only_out_folder_gets_a_sentence(tmp_path, capsys, read_only):
    read_only(tmp_path / "ro")
    for out in (tmp_path / "ro", tmp_path / "ro" / "run"):
        said = cli_error(train_main, ["--out", str(out), "--max-steps", "1", "--no-progress"], capsys, code=1)
        assert said.startswith(f"error: cannot write in --out {out} (Read-only file system)") and "Fix" in said


def test_full_disk_while_saving_best_pt_says_resume(char_run, tmp_path, full_disk):
    """It said "run again", which is then refused (the folder holds a run): --resume is what goes on."""
    out = tmp_path / "run"
    shutil.copytree(char_run, out)
    before = snapshot(out)
    full_disk.append("best.pt.")
    resume = lambda: train(tiny_cfg(), tiny_train_cfg(out, max_steps=6, eval_interval=2),  # noqa: E731
                           synthetic_corpus("the cat sat "), resume=True, progress=False)
    with pytest.raises(WriteError) as err:
        resume()
    message = str(err.value)
    assert message.startswith(f"no space left on the disk holding {out} for best.pt of step 6 (a new best valid "
                              "bpc). Kept: best.pt of step 4. The last checkpoint (step 4) is intact")
    assert message.endswith("then run the same command with --resume") and "run again" not in message
    assert {k: v for k, v in snapshot(out).items() if k != "log.csv"} == {k: v for k, v in before.items()
                                                                          if k != "log.csv"}
    full_disk.clear()  # room again: the advice works
    assert resume().best_step == 6 and load_checkpoint(out / "best.pt")["step"] == 6


def test_full_disk_while_writing_a_log_row_says_resume(char_run, tmp_path, monkeypatch):
    out = tmp_path / "run"
    shutil.copytree(char_run, out)

    real = csv.DictWriter.writerow

    def no_space_at_step_6(self, row):
        if row.get("step") == 6:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, row)
    monkeypatch.setattr(csv.DictWriter, "writerow", no_space_at_step_6)
    with pytest.raises(WriteError, match=r"no space left on the disk holding .* for log.csv: its row of step 6\. "
                                         r"The last checkpoint \(step 4\) is intact.*with --resume$"):
        train(tiny_cfg(), tiny_train_cfg(out, max_steps=6, eval_interval=2), synthetic_corpus("the cat sat "),
              resume=True, progress=False)


# 2. Read-only data folders ---------------------------------------------------------------------

def test_a_read_only_data_folder(tmp_path, monkeypatch, capsys, read_only, no_network):
    from test_files import fake_text8
    src, text = fake_text8(tmp_path / "data")
    read_only(tmp_path / "data")
    with pytest.warns(UserWarning, match=r"could not write its cache in .*data/ \(Read-only file system\): "
                                         "using it from memory.*Fix"):
        corpus = load_text8(tmp_path / "data", source=src, opener=None, progress=False)
    assert decode(np.concatenate([corpus.train, corpus.valid, corpus.test])) == text.decode()
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["text8.zip"]

    read_only(tmp_path / "empty")
    monkeypatch.setenv("TXL_DATA_DIR", str(tmp_path / "empty"))
    with pytest.raises(CorpusError, match=r"cannot download .*text8.zip into .*empty/ \(Read-only file system\)"
                                          ".*TXL_DATA_DIR"):
        data.load_corpus("text8")
    assert data.load_corpus("auto").name == "text8-mini"  # as "auto" promises
    assert "cannot download" in capsys.readouterr().out
    with pytest.raises(CorpusError, match="cannot download .*wikitext-2-v1.zip into"):
        data.load_corpus("wt2")


def test_a_read_only_wikitext_folder_is_used_from_memory(tmp_path, read_only, no_network):
    from test_words import fake_wikitext
    src, zpath, _ = fake_wikitext(tmp_path)
    (tmp_path / "data").mkdir()
    shutil.copy(zpath, tmp_path / "data" / zpath.name)
    read_only(tmp_path / "data")
    with pytest.warns(UserWarning, match="wt2: could not write its cache.*using it from memory"):
        corpus = data.load_wikitext("wt2", tmp_path / "data", source=src, progress=False)
    assert corpus.unit == "word" and corpus.vocab[:2] == ("<eos>", "game") and len(corpus.test) == 9


# 3. A wrong number without a word ---------------------------------------------------------------

def test_resume_with_a_new_lr_follows_it(tmp_path, monkeypatch):
    """--resume --set lr=... used to be recorded in the log and checkpoint while the optimiser kept
    the checkpoint's schedule (the scheduler's base_lrs come back with it)."""
    corpus = synthetic_corpus("the cat sat ")
    train(tiny_cfg(), tiny_train_cfg(tmp_path, max_steps=12, eval_interval=3), corpus, stop_at=6, progress=False)
    used = []
    real_step = torch.optim.Adam.step

    def step(self, *args, **kwargs):
        used.append(self.param_groups[0]["lr"])
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", step)
    lower = tiny_train_cfg(tmp_path, max_steps=12, eval_interval=3, lr=1e-4, min_lr=1e-5, warmup_steps=2)
    train(tiny_cfg(), lower, corpus, resume=True, progress=False)
    assert used == pytest.approx([lr_at(s, lower) for s in range(7, 13)], rel=1e-12)  # was 3e-3's schedule
    rows = list(csv.DictReader(open(tmp_path / "log.csv")))
    assert [float(r["lr"]) for r in rows if int(r["step"]) > 6] == pytest.approx(
        [lr_at(s, lower) for s in (8, 9, 10, 12)], rel=1e-5)
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert ckpt["train_config"]["lr"] == 1e-4 and ckpt["scheduler"]["base_lrs"] == [1e-4]


@pytest.mark.parametrize("change, refused", [
    (dict(seed=1), "seed=0, this run 1: a resume restores the random state"),
    (dict(batch_size=2), "batch_size=4, this run 2: the memory and data position"),
])
def test_resume_refuses_a_setting_it_cannot_honour_and_lists_what_may_change(tmp_path, change, refused):
    corpus = synthetic_corpus("the cat sat ")
    train(tiny_cfg(), tiny_train_cfg(tmp_path, max_steps=4, eval_interval=2), corpus, stop_at=2, progress=False)
    with pytest.raises(ValueError, match=f"{refused}.*On --resume only these settings may change: lr, min_lr"):
        train(tiny_cfg(), tiny_train_cfg(tmp_path, max_steps=4, eval_interval=2, **change), corpus, resume=True,
              progress=False)
    with pytest.raises(ValueError, match="dropout 0.1 there vs 0.2 here.*On --resume only these settings may "
                                         "change: .*eval_interval.*the model's may not"):
        train(tiny_cfg(dropout=0.2), tiny_train_cfg(tmp_path, max_steps=4, eval_interval=2), corpus, resume=True,
              progress=False)


@pytest.fixture(scope="module")
def word_run(tmp_path_factory):
    """A 2-step word model on text8-mini-words (10,001 words), as `train --corpus text8-mini-words`."""
    out = tmp_path_factory.mktemp("word_run")
    res = train(tiny_cfg(vocab_size=10_001), tiny_train_cfg(out, max_steps=2, eval_interval=2, eval_tokens=32),
                load_text8_mini_words(), progress=False)
    assert res.model.unit == "word"
    return out


def test_a_word_model_is_not_scored_on_characters(word_run, tmp_path, capsys, monkeypatch):
    """It used to print "bpc 10.7985": character ids read as word ids (10,001 >= 27 passed the size check)."""
    monkeypatch.delenv("TXL_CORPUS", raising=False)
    err = cli_error(evaluate_main, [str(word_run), "--corpus", "text8-mini", "--max-predictions", "20",
                                    "--no-progress"], capsys)
    assert "is a word model (10,001 words) but text8-mini holds 27 characters" in err
    assert "Fix: drop --corpus text8-mini (the checkpoint was trained on text8-mini-words)" in err
    monkeypatch.setenv("TXL_CORPUS", "text8-mini")
    err = cli_error(evaluate_main, [str(word_run), "--max-predictions", "20", "--no-progress"], capsys)
    assert "is a word model" in err and "$TXL_CORPUS=text8-mini overrides the checkpoint's corpus" in err
    assert "unset TXL_CORPUS" in err
    # a checkpoint saved before checkpoints held their vocabulary: its corpus's name tells the unit
    ckpt = load_checkpoint(word_run / "ckpt.pt")
    del ckpt["vocab"]
    save_checkpoint(ckpt, tmp_path / "old.pt")
    with pytest.raises(ValueError, match=r"is a word model \(words\) but text8-mini holds 27 characters"):
        evaluate_checkpoint(tmp_path / "old.pt")
    monkeypatch.delenv("TXL_CORPUS")
    assert evaluate_checkpoint(word_run, max_predictions=20)["unit"] == "word"  # its own corpus: fine


def test_a_character_model_is_not_scored_on_words_and_says_which_setting_chose_them(char_run, monkeypatch):
    monkeypatch.setenv("TXL_CORPUS", "text8-mini-words")
    with pytest.raises(ValueError, match=r"is a character model \(27 characters\) but text8-mini-words holds "
                                         r"10,001 words.*\$TXL_CORPUS=text8-mini-words overrides --corpus "
                                         "text8-mini: unset it"):
        evaluate_checkpoint(char_run, corpus="text8-mini")
    monkeypatch.setenv("TXL_CORPUS", "nope")
    with pytest.raises(ValueError, match=r"unknown corpus 'nope'.*\$TXL_CORPUS=nope overrides"):
        evaluate_checkpoint(char_run)


def test_a_finished_word_run_reports_perplexity(word_run, tmp_path):
    shutil.copytree(word_run, tmp_path / "run")
    res = train(tiny_cfg(vocab_size=10_001), tiny_train_cfg(tmp_path / "run", max_steps=2, eval_interval=2,
                                                           eval_tokens=32), load_text8_mini_words(), resume=True,
                progress=False)
    assert res.complete and res.unit == "word" and res.score()[0] == "ppl"  # was ("bpc", ...)


def test_generate_text_reads_words_for_a_word_model(word_run):
    model = load(word_run / "ckpt.pt")
    assert model.unit == "word" and len(model.vocab) == 10_001 and model.vocab[0] == "<unk>"
    text = generate_text(model, "the king ", 5, temperature=0)
    words = text.split()
    assert text.startswith("the king ") and len(words) == 7 and set(words) <= set(model.vocab)
    assert text == generate_text(model, "the king", 5, temperature=0)  # the trailing space is optional
    assert generate_text(model, "the qwxzv", 1, temperature=0).startswith("the qwxzv ")  # <unk> read, not refused
    for empty in ("", "   "):  # a word model reads no word in either
        with pytest.raises(ValueError, match="generate_text got an empty prompt.*one word.*Fix"):
            generate_text(model, empty, 3)
    ckpt = load_checkpoint(word_run / "ckpt.pt")
    del ckpt["vocab"]
    old = checkpoint.model_from_checkpoint(ckpt)  # unit from the corpus's name, symbols unknown
    with pytest.raises(ValueError, match="word model, but its vocabulary is unknown.*model.generate"):
        generate_text(old, "the king ", 3)
    bare = TransformerXL(TXLConfig(**ckpt["model_config"])).eval()  # built in Python: says nothing
    with pytest.raises(ValueError, match="27 characters of VOCAB, but this model has vocab_size 10,001"):
        generate_text(bare, "the king ", 3)


def test_train_result_and_save_keep_the_unit(tmp_path):
    res = train(tiny_cfg(), tiny_train_cfg(tmp_path / "run", max_steps=1, eval_interval=1),
                synthetic_corpus("abc def "), progress=False)
    assert (res.model.unit, "".join(res.model.vocab)) == ("character", data.VOCAB)
    checkpoint.save(res.model, tmp_path / "m.pt")
    assert load_checkpoint(tmp_path / "m.pt")["vocab"] == dict(unit="character", symbols=list(data.VOCAB))
    assert pretrained.load_pretrained("txl-tiny").unit == "character"  # shipped before: from its corpus


# 4. Devices ------------------------------------------------------------------------------------

@pytest.mark.parametrize("device, said", [
    ("gpu", "--device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'gpu'"),
    ("xpu", "--device 'xpu': this package runs on a CPU or a CUDA GPU"),
    ("cuda", "--device is 'cuda', but torch sees 0 GPU(s)"),
    ("cuda:3", "--device is 'cuda:3', but torch sees 0 GPU(s)"),
    ("mps", "--device 'mps': this package runs on a CPU or a CUDA GPU"),
])
def test_evaluate_on_a_device_this_machine_lacks(device, said, capsys):
    if torch.cuda.is_available() and device.startswith("cuda"):
        pytest.skip("this machine has a GPU")
    said = said.replace("--device", "device")
    err = cli_error(evaluate_main, ["txl-tiny", "--device", device, "--max-predictions", "5", "--no-progress"],
                    capsys)
    assert said in err and "Traceback" not in err and ("Fix" in err or device == "gpu")
    if device != "gpu":
        for call in (lambda: pretrained.load_pretrained("txl-tiny", device),
                     lambda: load_checkpoint(pretrained.PRETRAINED_DIR / "txl-tiny.safetensors", map_location=device)):
            with pytest.raises(ValueError, match="device") as e:  # not "checkpoint ... is corrupt"
                call()
            assert "corrupt" not in str(e.value)


@pytest.mark.parametrize("device", ["mps", "meta", "cuda:7"])
def test_train_on_a_device_it_cannot_use(device, tmp_path, capsys):
    err = cli_error(train_main, ["--out", str(tmp_path / "run"), "--device", device, "--no-progress"], capsys)
    assert "TrainConfig.device" in err and "Fix" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


# 5. Sentences instead of tracebacks ------------------------------------------------------------

@pytest.mark.parametrize("call, said", [
    (lambda m, ids: evaluate(m, ids[None]), r"evaluate reads one stream of token ids \(1-D\), got shape \(1, 200\)"),
    (lambda m, ids: evaluate(m, ids.view(2, 100)), r"got shape \(2, 100\).*Fix"),
    (lambda m, ids: evaluate(m, ids.numpy().reshape(2, 100)), r"got shape \(2, 100\)"),
    (lambda m, ids: evaluate(m, ids, tgt_len=0), "evaluate: tgt_len must be a positive integer, got 0"),
    (lambda m, ids: sliding_window_eval(m, ids[None], 8), r"sliding_window_eval reads one stream.*\(1, 200\)"),
    (lambda m, ids: list(read_segments(m, ids)), r"read_segments reads token ids of shape \(batch, seq\), got "
                                                  r"\(200,\).*tokens\[None\]"),
])
def test_evaluation_inputs_of_the_wrong_shape(tiny_model, call, said):
    with pytest.raises(ValueError, match=said):
        call(tiny_model(), torch.randint(0, 27, (200,)))


@pytest.mark.parametrize("kwargs, said", [
    (dict(temperature=float("nan")), "temperature must be a finite number >= 0"),
    (dict(temperature=float("inf")), "temperature must be a finite number >= 0"),
    (dict(temperature=None), "temperature must be a number >= 0"),
    (dict(temperature=True), "temperature must be a number >= 0"),
    (dict(temperature="0.8"), "temperature must be a number >= 0"),
    (dict(top_k=2.5), "top_k must be a positive integer or None \\(no limit\\), got 2.5"),
    (dict(top_k=True), "top_k must be a positive integer or None \\(no limit\\), got True"),
    (dict(top_k=0), "top_k must be a positive integer"),
])
def test_generate_refuses_bad_sampling_settings(tiny_model, kwargs, said):
    with pytest.raises(ValueError, match=said):
        tiny_model().generate(torch.tensor([1, 2, 3]), 4, **kwargs)


def test_generate_with_extreme_temperatures_and_odd_prompts(tiny_model):
    model = tiny_model(dtype=torch.float32)
    prompt = torch.tensor([20, 8, 5, 0])
    g = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    greedy = model.generate(prompt, 12, temperature=0)
    assert model.generate(prompt, 12, temperature=1e-45, generator=g()).equal(greedy)  # used to be NaN
    for t in (1e39, 1e300):  # (inf in float32) with top_k: used to be NaN too; now uniform over the top 3
        out = model.generate(prompt, 12, temperature=t, top_k=3, generator=g())
        assert out.shape == (16,) and out.min() >= 0 and out.max() < 27
    out = model.generate(prompt, np.int64(3), top_k=np.int64(2), temperature=np.float32(0.5), generator=g())
    assert out.shape == (7,)  # NumPy numbers are numbers
    with pytest.raises(ValueError, match=r"shape \(T,\) or \(batch, T\), got shape \(\).*torch.tensor\(\[id\]\)"):
        model.generate(torch.tensor(5), 3)
    with pytest.raises(ValueError, match=r"got shape \(1, 2, 3\)"):
        model.generate(torch.zeros(1, 2, 3, dtype=torch.long), 3)


def test_numpy_integers_are_integers(tmp_path, tiny_model):
    cfg = TXLConfig(vocab_size=np.int64(27), n_layer=np.int32(1), n_head=2, d_model=np.int64(16), d_head=8,
                    d_inner=32, tgt_len=np.int64(8), mem_len=np.int64(8), cutoffs=[])
    assert type(cfg.d_model) is int and type(cfg.tgt_len) is int
    train_cfg = tiny_train_cfg(tmp_path, batch_size=np.int64(4), max_steps=np.int64(2), eval_interval=np.int64(2),
                               lr=np.float32(3e-3))
    assert type(train_cfg.batch_size) is int and type(train_cfg.lr) is float
    train(cfg, train_cfg, synthetic_corpus("abc def "), stop_at=np.int64(2), progress=False)
    assert load_checkpoint(tmp_path / "ckpt.pt")["train_config"]["batch_size"] == 4  # weights_only loads it
    ids = torch.randint(0, 27, (100,))
    model = tiny_model()
    assert evaluate(model, ids, batch_size=np.int64(2), max_tokens=np.int64(50))["tokens"] == 50
    assert sliding_window_eval(model, ids, np.int64(8), max_predictions=np.int64(20))["tokens"] == 20
    with pytest.raises(ValueError, match="TXLConfig.d_model must be an integer >= 1, got True"):
        TXLConfig(d_model=True)


def test_a_run_folder_with_a_log_but_no_checkpoint(tmp_path, capsys):
    """A crash before the first checkpoint: --resume said "drop --resume", dropping it said "use
    --resume". Both say --overwrite now; a header-only log (no rows) is no run at all."""
    out = tmp_path / "run"
    out.mkdir()
    shutil.copy(ROOT / "txl_minimal" / "pretrained" / "txl-tiny.log.csv", out / "log.csv")
    argv = ["--out", str(out), "--max-steps", "2", "--no-progress", "--set", *TINY_SET, "eval_interval=2"]
    for extra in ([], ["--resume"]):
        err = cli_error(train_main, [*argv, *extra], capsys)
        assert "log.csv but no ckpt.pt" in err and "Fix: --overwrite" in err and "drop --resume" not in err
    err = cli_error(evaluate_main, [str(out), "--no-progress"], capsys)
    assert "log.csv but no ckpt.pt" in err and "no model to evaluate" in err
    (out / "log.csv").write_text("step,tokens,wall_time_s,lr,train_loss,train_bpc,valid_bpc\n")
    train_main(argv)  # a header alone: a run that failed at once; training there just starts
    assert steps_in(out / "log.csv")[-1] == 2 and load_checkpoint(out / "ckpt.pt")["step"] == 2


def test_a_resume_without_its_log_says_where_the_new_log_starts(char_run, tmp_path):
    shutil.copytree(char_run, tmp_path / "run")
    (tmp_path / "run" / "log.csv").unlink()
    with pytest.warns(UserWarning, match="log.csv is missing: the resumed run's log starts at step 4"):
        train(tiny_cfg(), tiny_train_cfg(tmp_path / "run", max_steps=6, eval_interval=2),
              synthetic_corpus("the cat sat "), resume=True, progress=False)
    assert steps_in(tmp_path / "run" / "log.csv") == [6]


def test_the_batch_iterator_refuses_a_batch_of_streams():
    with pytest.raises(ValueError, match=r"LMOrderedIterator reads one stream.*\(1, 500\)"):
        data.LMOrderedIterator(torch.zeros(1, 500, dtype=torch.long), batch_size=2, tgt_len=8)


def test_pretrained_table_on_a_full_disk_is_one_line(monkeypatch, capsys):
    from txl_minimal.pretrained import main as pretrained_main

    def full(**kwargs):
        raise WriteError("no space left on the disk holding pretrained while writing table.json", errno.ENOSPC)
    monkeypatch.setattr(pretrained, "paired_table", full)
    said = cli_error(pretrained_main, ["--table", "--no-progress"], capsys, code=1)
    assert said == "error: no space left on the disk holding pretrained while writing table.json"


def test_evaluating_a_log_says_it_is_a_log(char_run, capsys):
    err = cli_error(evaluate_main, [str(char_run / "log.csv"), "--no-progress"], capsys)
    assert "is a training log (log.csv), not a checkpoint" in err and "ckpt.pt" in err and "corrupt" not in err


def test_an_exercise_checker_given_a_result_instead_of_a_function(capsys):
    assert exercises.check_mask(solutions.mask(4, 3, 3, False)) is False
    out = capsys.readouterr().out
    assert "pass the function itself, check_mask(your_function), not what it returns (got a Tensor)" in out
    assert "not callable" not in out


# 6. Kept right: a test each ----------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["rel", "abs", "abs_far", "shaw", "adaptive_span"])
@pytest.mark.parametrize("mem_len", [8, 0])
@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_mixed_precision_training_on_a_cpu(kind, mem_len, amp, tmp_path):
    overrides = dict(adaptive_span=True) if kind == "adaptive_span" else dict(attn_type=kind)
    res = train(tiny_cfg(mem_len=mem_len, **overrides), tiny_train_cfg(tmp_path, amp=amp, max_steps=3,
                                                                       eval_interval=3),
                synthetic_corpus("abc def "), progress=False)
    assert math.isfinite(res.train_bpc) and math.isfinite(res.valid_bpc) and res.valid_bpc < 6


def test_compiled_training_resumes_bit_exactly(tmp_path, monkeypatch):
    """--compile (torch.compile of each segment, here with the eager backend: no C++ compiler
    needed, the same wrapper and graph) interrupted and resumed ends where a straight run does."""
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real(fn, backend="eager"))
    corpus = synthetic_corpus("the quick brown fox ")
    straight = train(tiny_cfg(), tiny_train_cfg(tmp_path / "a", compile=True), corpus, progress=False)
    train(tiny_cfg(), tiny_train_cfg(tmp_path / "b", compile=True), corpus, stop_at=7, progress=False)
    resumed = train(tiny_cfg(), tiny_train_cfg(tmp_path / "b", compile=True), corpus, resume=True, progress=False)
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert resumed.step == 12 and all(torch.equal(a[k], b[k]) for k in a)


def _not_callable(*args):
    raise TypeError("'Tensor' object is not callable")


class _Hostile:
    """An answer whose every conversion raises: ``__float__`` and ``__index__`` (or ``__eq__`` and ``__bool__``,
    ``__repr__``, ``__array__``)."""

    def __init__(self, what: str = "float"):
        self.what = what

    def __float__(self):
        if self.what == "float":
            raise RuntimeError("no float")
        return 1.0

    __index__ = __float__

    def __eq__(self, other):
        if self.what == "eq":
            raise RuntimeError("no eq")
        return False

    def __bool__(self):
        if self.what == "eq":
            raise RuntimeError("no bool")
        return True

    __hash__ = object.__hash__

    def __repr__(self):
        if self.what == "repr":
            raise RuntimeError("no repr")
        return f"_Hostile({self.what!r})"

    def __array__(self, *args, **kwargs):
        if self.what == "array":
            raise RuntimeError("no array")
        return np.array(float(self))


class _HostileList(list):
    def __len__(self):
        raise RuntimeError("no len")

    def __iter__(self):
        raise RuntimeError("no iter")


def _nested(depth: int) -> list:
    x = 1
    for _ in range(depth):
        x = [x]
    return x


def _recurses(*args):
    return _recurses(*args)


# Wrong answers of every kind a checker may get: each must be called wrong (or not attempted),
# with a line saying why, and never crash the checker.
WRONG_KINDS = {
    "a string": lambda *a: "42", "a dict": lambda *a: {"x": 1}, "a list": lambda *a: [1, 2],
    "a set": lambda *a: {1, 2}, "an object": lambda *a: object(), "a generator": lambda *a: (i for i in range(3)),
    "a function": lambda *a: (lambda: 0), "NaN": lambda *a: float("nan"), "inf": lambda *a: float("inf"),
    "-1": lambda *a: -1, "0": lambda *a: 0, "True": lambda *a: True, "a huge int": lambda *a: 10 ** 40,
    "a complex number": lambda *a: 1 + 2j, "an empty tensor": lambda *a: torch.empty(0),
    "a complex tensor": lambda *a: torch.ones(3, dtype=torch.cfloat),
    "a NaN tensor": lambda *a: torch.full((4, 4), float("nan")),
    "a 0-d tensor": lambda *a: torch.tensor(3.5), "an object array": lambda *a: np.array([object(), 1], dtype=object),
    "a string array": lambda *a: np.array(["a", "b"]), "ValueError": lambda *a: int("x"),
    "RuntimeError": lambda *a: torch.ones(2) @ torch.ones(3), "ZeroDivisionError": lambda *a: 1 / 0,
    "too few arguments": lambda: 0, "not callable (TypeError)": _not_callable,
    "a tensor instead of a function": torch.ones(3),
    # hostile answers, from HOSTILE_FROM (issue 48: OverflowError, RecursionError, the answer's own errors escaped)
    "10**400": lambda *a: 10 ** 400, "-10**400 in a list": lambda *a: [-10 ** 400] * 3,
    "10**400 in an object array": lambda *a: np.array([10 ** 400], dtype=object), "-inf": lambda *a: -math.inf,
    "complex numbers": lambda *a: [1j, 2j, 3j], "a complex array": lambda *a: np.array([1j, 2j]),
    "__float__ raises": lambda *a: _Hostile(), "__float__ raises, in a list": lambda *a: [_Hostile()] * 3,
    "__eq__ and __bool__ raise": lambda *a: _Hostile("eq"), "__repr__ raises": lambda *a: _Hostile("repr"),
    "__iter__ and __len__ raise": lambda *a: _HostileList(), "__array__ raises": lambda *a: _Hostile("array"),
    "lists nested 5,000 deep": lambda *a: _nested(5000), "a longdouble": lambda *a: np.longdouble(1e300) ** 2,
    "a datetime64": lambda *a: np.datetime64("2020-01-01"), "tensors of two lengths": lambda *a: [torch.ones(2),
                                                                                                   torch.ones(3)],
    "a function that recurses": _recurses, "bytes": lambda *a: b"\x00\x01", "a slice": lambda *a: slice(1, 2),
    "a type": lambda *a: int, "a module": lambda *a: np,
}
HOSTILE_FROM = list(WRONG_KINDS).index("10**400")


@pytest.mark.parametrize("check", sorted({getattr(exercises, n) for n in dir(exercises) if n.startswith("check_")},
                                         key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_every_checker_survives_every_kind_of_wrong_answer(check, capsys):
    """A checker never raises in a notebook (a wrong answer is said in a line); in grading mode it raises
    AssertionError with that line and nothing else. The answers are functions: a prediction checker calls one
    without arguments, as it takes them."""
    assert len(WRONG_KINDS) == 47
    for k, (kind, answer) in enumerate(WRONG_KINDS.items()):
        assert check(answer) is False, kind
        out = capsys.readouterr().out
        assert "not yet" in out and "Traceback" not in out, (kind, out)
        if k >= HOSTILE_FROM:  # (each call builds the checker's cases: the hostile kinds alone, also when grading)
            with pytest.raises(AssertionError, match="not yet"):
                check(answer, raises=True)


def test_generation_with_long_empty_and_out_of_alphabet_prompts(tiny_model):
    model = tiny_model(dtype=torch.float32, tgt_len=6, mem_len=6)
    long = "the history of the city " * 20  # 480 characters: 80 segments of memory
    text = generate_text(model, long, 10, temperature=0)
    assert text.startswith(long) and len(text) == len(long) + 10
    with pytest.raises(ValueError, match="generate_text got an empty prompt.*Fix") as e:
        generate_text(model, "", 5)
    assert "torch.int64" not in str(e.value)
    assert generate_text(model, " ", 2, temperature=0).startswith(" ")  # a space is a character
    with pytest.raises(ValueError, match=r"character 'É' at position 4 is not in VOCAB"):
        generate_text(model, "the É", 5)
    assert encode("the ").tolist() == [20, 8, 5, 0]


# 7. Issue 41: stopped runs, every setting used or refused -----------------------------------------

def _ids(n: int) -> np.ndarray:
    return encode((FOX * (n // len(FOX) + 1))[:n])


@pytest.mark.parametrize("splits, tgt_len, said", [
    ((12000, 0, 500), 8, "the valid split of mine holds 0 characters: its evaluation needs at least 2"),
    ((12000, 1, 500), 8, "the valid split of mine holds 1 character: its evaluation needs at least 2"),
    ((13000, 500, 500), 1024, "the train split of mine holds 13,000 characters, too few for one training segment "
                              "in each batch column: batch_size 16 x (tgt_len 1,024 + 1) = 16,400. Fix: a smaller "
                              "batch_size (at most 12 for tgt_len 1,024), or a smaller tgt_len (at most 811 for "
                              "batch_size 16), or a longer train split"),
])
def test_splits_too_short_are_refused_before_the_first_step(tmp_path, splits, tgt_len, said):
    """An empty valid split was found at the first evaluation (the steps before it lost, a log left that made
    a re-run refuse); a train split too short for a segment per column gave a bare StopIteration."""
    ids = _ids(sum(splits))
    corpus = Corpus("mine", ids[:splits[0]], ids[splits[0]:splits[0] + splits[1]], ids[splits[0] + splits[1]:])
    with pytest.raises(ValueError, match=re.escape(said)):
        train(tiny_cfg(tgt_len=tgt_len, mem_len=0), tiny_train_cfg(tmp_path / "run", batch_size=16), corpus,
              progress=False)
    assert not (tmp_path / "run").exists()  # nothing written


@pytest.mark.parametrize("flags, said", [
    (["--batch-size", "100000"], "the train split of text8-mini holds 2,759,702 characters, too few for one training "
                                 "segment in each batch column: batch_size 100,000 x (tgt_len 32 + 1)"),
    (["--set", "tgt_len=200000"], "batch_size 16 x (tgt_len 200,000 + 1) = 3,200,016. Fix: a smaller batch_size "
                                  "(at most 13 for tgt_len 200,000)"),
])
def test_a_training_split_too_short_on_the_command_line(tmp_path, capsys, monkeypatch, flags, said):
    monkeypatch.setenv("TXL_CORPUS", "text8-mini")
    err = cli_error(train_main, ["--out", str(tmp_path / "run"), "--no-progress", "--max-steps", "5", *flags,
                                 "--set", "d_model=16", "d_head=8", "d_inner=32", "warmup_steps=1", "amp=off"],
                    capsys)
    assert said in err and "StopIteration" not in err and not (tmp_path / "run").exists()


def test_repeated_flags_add_up_or_are_refused(tmp_path, capsys, monkeypatch):
    """`--set eval_interval=10 --set amp=off` ran with eval_interval 500: argparse kept the last --set."""
    monkeypatch.setenv("TXL_CORPUS", "text8-mini")
    out = tmp_path / "run"
    train_main(["--out", str(out), "--max-steps", "2", "--no-progress", "--set", *TINY_SET, "--set",
                "eval_interval=1", "--set", "log_interval=1", "warmup_steps=1"])
    assert load_checkpoint(out / "ckpt.pt")["train_config"]["eval_interval"] == 1
    assert steps_in(out / "log.csv") == [1, 2]
    argv = ["--out", str(tmp_path / "other"), "--no-progress", "--set", *TINY_SET]
    err = cli_error(train_main, [*argv, "--max-steps", "2", "--set", "max_steps=3"], capsys)
    assert "max_steps is set twice, by --max-steps 2 and by --set max_steps=3: which one? Fix: give it once" in err
    err = cli_error(train_main, [*argv, "--set", "lr=0.1", "--set", "lr=0.2"], capsys)
    assert "lr is set twice, by --set lr=0.1 and by --set lr=0.2" in err
    err = cli_error(train_main, [*argv, "--max-steps", "2", "--max-steps", "3"], capsys)
    assert "--max-steps is given twice, 2 and 3: which one?" in err
    train_main([*argv, "--max-steps", "1", "--max-steps", "1", "--set", "lr=0.1", "lr=0.1", "warmup_steps=1"])  # alike
    err = cli_error(evaluate_main, ["txl-tiny", "--tgt-len", "5", "--tgt-len", "6"], capsys)
    assert "--tgt-len is given twice, 5 and 6" in err
    from txl_minimal.pretrained import main as pretrained_main
    err = cli_error(pretrained_main, ["--ship", "a", "--name", "txl", "--name", "vanilla"], capsys)
    assert "--name is given twice, 'txl' and 'vanilla'" in err


def test_a_warm_up_longer_than_the_run_is_said(tmp_path):
    """`--max-steps 20` with the preset's 100-step warm-up peaked at 0.2 x lr without a word."""
    corpus = synthetic_corpus(FOX)
    with pytest.warns(UserWarning, match=r"^warmup_steps 10 outlasts max_steps 4: the learning rate rises only to "
                                         r"0.4 x lr \(0.0012\) at the last step and never decays. Fix: .*"
                                         r"--set warmup_steps=1 \(TrainConfig.warmup_steps\)$") as said:
        train(tiny_cfg(), tiny_train_cfg(tmp_path / "a", warmup_steps=10, max_steps=4), corpus, progress=False)
    assert said[0].filename == __file__  # pointing at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a stop_at inside the warm-up is no such run: its schedule is max_steps'
        train(tiny_cfg(), tiny_train_cfg(tmp_path / "b", warmup_steps=4, max_steps=8), corpus, stop_at=2,
              progress=False)
    with command_line.one_line_warnings():  # the command line says it in one line
        assert warnings.formatwarning("said", UserWarning, "train.py", 1) == "warning: said\n"
    assert warnings.formatwarning("said", UserWarning, "train.py", 1).startswith("train.py:1: UserWarning")


def test_an_empty_out_or_path_is_refused(tmp_path, monkeypatch, capsys):
    """`--out ""` wrote ckpt.pt, best.pt and log.csv into the current folder; an empty checkpoint path
    was a raw IsADirectoryError (load_checkpoint) or read as no --ship at all ("unknown pretrained model None")."""
    monkeypatch.chdir(tmp_path)
    for out in ("", " "):
        with pytest.raises(ValueError, match="TrainConfig.out is .*would go into the current folder. Fix: name a "
                                             "folder"):
            TrainConfig(out=out)
    err = cli_error(train_main, ["--out", "", "--max-steps", "1", "--no-progress"], capsys)
    assert "would go into the current folder" in err
    for call in (lambda: load_checkpoint(""), lambda: load(""), lambda: evaluate_checkpoint("")):
        with pytest.raises(ValueError, match="is an empty path .*current folder"):
            call()
    with pytest.raises(ValueError, match="empty path"):
        checkpoint.save(TransformerXL(tiny_cfg()), "")
    from txl_minimal.pretrained import main as pretrained_main
    err = cli_error(pretrained_main, ["--ship", "", "--name", "txl-tiny"], capsys)
    assert "--ship is an empty path" in err and "None" not in err
    assert list(tmp_path.iterdir()) == []  # nothing written here


def test_evaluating_or_shipping_a_run_before_its_first_checkpoint_says_it_is_training(tmp_path, shipped_copy,
                                                                                       monkeypatch, capsys):
    """It said "the run stopped before its first checkpoint ... --overwrite" of a run still training."""
    out, seen = tmp_path / "run", []
    real_add = LossMeter.add

    def add_and_look(self, nll):  # during the first step of a real training, before any checkpoint
        real_add(self, nll)
        if not seen:
            for call in (lambda: evaluate_checkpoint(out), lambda: pretrained.ship(out, "txl-tiny")):
                with pytest.raises(FileNotFoundError) as err:
                    call()
                seen.append(str(err.value))

    monkeypatch.setattr(LossMeter, "add", add_and_look)
    train(tiny_cfg(), tiny_train_cfg(out, max_steps=4), synthetic_corpus(FOX), progress=False)
    running = f"{out}/ is being trained right now (pid {os.getpid()} on "
    assert seen[0].startswith(running) and "its first checkpoint comes at step 4, and has written no checkpoint yet" \
        in seen[0] and "Fix: wait for its first checkpoint" in seen[0] and "--overwrite" not in seen[0]
    assert seen[1].startswith(running) and "Fix: wait for it to end" in seen[1]
    # on the command line, with a row already in its log (the case that said "the run stopped")
    (out / "ckpt.pt").unlink()
    (out / "best.pt").unlink()
    (out / LOCK).write_text(json.dumps(dict(pid=os.getpid(), host=os.uname().nodename, started="2026-11-24 21:00:00",
                                            first_checkpoint=500)))
    err = cli_error(evaluate_main, [str(out), "--no-progress"], capsys)
    assert "is being trained right now" in err and "first checkpoint comes at step 500" in err
    assert "--overwrite" not in err
    (out / LOCK).unlink()  # a run that did stop: as before
    assert "the run stopped before its first checkpoint" in cli_error(evaluate_main, [str(out), "--no-progress"],
                                                                      capsys)


def test_the_train_and_evaluate_modules_are_callable(tmp_path):
    """`from txl_minimal import train` gives the module: train(...) said "'module' object is not callable"."""
    from txl_minimal import evaluate as evaluate_module, train as train_module
    res = train_module(tiny_cfg(), tiny_train_cfg(tmp_path, max_steps=2, eval_interval=2), synthetic_corpus(FOX),
                       progress=False)
    assert res.step == 2 and train_module.TrainConfig is TrainConfig and train_module.train is train
    ids = torch.as_tensor(_ids(40))
    assert evaluate_module(res.model, ids) == evaluate(res.model, ids)


# Issue 48, the runs' side: --ship of a run still training or of another shape; a full disk at the first checkpoint

def test_ship_refuses_a_run_still_training_and_says_one_that_stopped_early(shipped_copy, tmp_path, capsys):
    """--ship RUN while RUN was still training, after its first checkpoint, shipped its mid-run best.pt (step
    700 of 3,000) as txl-tiny without a word (before its first checkpoint it was refused)."""
    from txl_minimal.pretrained import main as pretrained_main
    run = tmp_path / "run"
    train(tiny_cfg(), tiny_train_cfg(run, max_steps=8, eval_interval=2), synthetic_corpus("the cat sat "),
          stop_at=4, progress=False)
    (run / LOCK).write_text(json.dumps(dict(pid=os.getpid(), host=os.uname().nodename, started="2026-12-01 10:00:00",
                                            first_checkpoint=2)))
    before = snapshot(shipped_copy)
    argv = ["--ship", str(run), "--name", "txl-tiny", "--no-progress", "--new-shape"]
    err = cli_error(pretrained_main, argv, capsys)
    assert f"{run}/ is being trained right now (pid {os.getpid()}" in err and "nothing was changed" in err
    assert re.search(r"best.pt is a state from the middle of the run \(step [24] of max_steps 8\)", err)
    assert snapshot(shipped_copy) == before
    (run / LOCK).unlink()  # a run that stopped at step 4 of 8: shipped, and said
    pretrained_main(argv)
    said = capsys.readouterr().out
    assert "(the run stopped at step 4 of max_steps 8, before its end)" in said
    assert "it replaces the shipped txl-tiny of step 5,000" in said


def test_ship_of_another_shape_over_a_shipped_model_is_refused_unless_asked(shipped_copy, char_run, capsys):
    """A 4-step cpu-tiny run shipped over the 5,000-step cpu-small txl-tiny, which the notebooks read as it
    is, without a word."""
    from txl_minimal.pretrained import main as pretrained_main
    before = snapshot(shipped_copy)
    err = cli_error(pretrained_main, ["--ship", str(char_run), "--name", "txl-tiny", "--no-progress"], capsys)
    assert "is not the shape of the shipped 'txl-tiny' (d_head 32 shipped, 8 here; d_inner 512 shipped, 32 here; " \
           "d_model 128 shipped, 16 here; mem_len 64 shipped, 8 here; n_head 4 shipped, 2 here; n_layer 4 shipped, 2 " \
           "here; tgt_len 64 shipped, 8 here)" in err and "--new-shape" in err and "nothing was changed" in err
    with pytest.raises(ValueError, match="not the shape of the shipped"):
        pretrained.ship(char_run, "txl-tiny")
    assert snapshot(shipped_copy) == before
    err = cli_error(pretrained_main, ["--update-json", "txl-tiny", "--new-shape"], capsys)
    assert "--new-shape goes with --ship" in err


@pytest.mark.parametrize("which", ["ckpt.pt.", "best.pt."])
def test_a_full_disk_at_the_first_checkpoint_advises_overwrite_which_works(which, tmp_path, full_disk, capsys,
                                                                           monkeypatch):
    """It advised "run the same command with --resume", which said "no checkpoint, drop --resume", which said
    "already holds a run ... --resume": a loop, where only --overwrite worked."""
    monkeypatch.setenv("TXL_CORPUS", "text8-mini")
    out = tmp_path / "run"
    argv = ["--out", str(out), "--max-steps", "4", "--no-progress", "--set", *TINY_SET, "eval_interval=2",
            "warmup_steps=1"]
    full_disk.append(which)
    said = cli_error(train_main, argv, capsys, code=1)
    assert "No checkpoint was saved before this one" in said and "--resume" not in said
    assert said.endswith("then run the same command with --overwrite (no checkpoint was saved, so there is nothing "
                         "to resume: the run starts afresh)")
    full_disk.clear()
    train_main([*argv, "--overwrite"])  # the advice works
    assert load_checkpoint(out / "ckpt.pt")["step"] == 4
