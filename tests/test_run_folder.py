"""Tests of txl_minimal.run_folder, through ``train`` and its command line: a run in --out is never
replaced silently, one training at a time (train.lock), resume (bit-exact, what it may change, a
finished run, a damaged log), best.pt, and Ctrl-C."""
from __future__ import annotations

import csv
import json
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tiny import (DAMAGES, FOX, ROOT, TINY_SET, cli_error, damage, overfitting_cfg, overfitting_corpus,
                  synthetic_corpus, tiny_cfg, tiny_train_cfg, weights as _weights)
import txl_minimal.train as train_py
from txl_minimal.checkpoint import load_checkpoint, state_sha256, weights_sha256
from txl_minimal.devices import LossMeter
from txl_minimal.evaluate import evaluate
from txl_minimal.run_folder import Stop, TrainingDiverged, _unlogged
from txl_minimal.train import LOCK, RUN_FILES, lr_at, main as train_main, train

ENV = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TXL_CORPUS="text8-mini")


def snapshot(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def without_times(log: Path) -> list[dict]:
    """A log.csv's rows without their wall_time_s (the one column a resumed run cannot share)."""
    return [{k: v for k, v in r.items() if k != "wall_time_s"} for r in csv.DictReader(open(log))]


def steps_logged(out: Path) -> list[int]:
    return [int(r["step"]) for r in csv.DictReader(open(out / "log.csv"))]


def wait_for_rows(log: Path, rows: int, seconds: float = 120) -> None:
    """Wait until a training in another process has written more than ``rows`` rows to its log.csv."""
    deadline = time.time() + seconds
    while not (log.exists() and len(log.read_text().splitlines()) > rows) and time.time() < deadline:
        time.sleep(0.05)


def cli(out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "txl_minimal.train", "--out", str(out), "--no-progress", "--threads", "1",
            "--corpus", "text8-mini", *args]


# 1. a run in --out is never replaced silently; a killed run's leftovers go -----------------------

def test_training_into_a_used_out_dir_is_refused_before_anything_is_written(tmp_path, capsys):
    corpus = synthetic_corpus("abc def ")
    cfg = tiny_train_cfg(tmp_path, max_steps=2, eval_interval=2)
    train(tiny_cfg(), cfg, corpus, progress=False)
    before = snapshot(tmp_path)
    with pytest.raises(FileExistsError, match=r"holds a run \(ckpt.pt, log.csv, best.pt\).*--resume.*--overwrite"):
        train(tiny_cfg(), cfg, corpus, progress=False)
    assert snapshot(tmp_path) == before  # nothing lost
    err = cli_error(train_main, ["--out", str(tmp_path), "--max-steps", "2", "--no-progress"], capsys)
    assert "already holds a run" in err and "--overwrite" in err and "Traceback" not in err
    assert snapshot(tmp_path) == before

    for name in ("ckpt.pt", "best.pt"):  # a log alone is a run too (scripts/ablation.py deletes the weights)
        (tmp_path / name).unlink()
    with pytest.raises(FileExistsError, match=r"holds a run's log.csv but no ckpt.pt.*Fix: --overwrite"):
        train(tiny_cfg(), cfg, corpus, progress=False)
    with pytest.raises(ValueError, match="choose one"):
        train(tiny_cfg(), cfg, corpus, progress=False, resume=True, overwrite=True)
    err = cli_error(train_main, ["--out", str(tmp_path), "--resume", "--overwrite"], capsys)
    assert "--overwrite: not allowed with argument --resume" in err

    res = train(tiny_cfg(), tiny_train_cfg(tmp_path, max_steps=4, eval_interval=4, log_interval=4), corpus,
                progress=False, overwrite=True)  # opting in replaces the run
    assert res.step == 4 and [r["step"] for r in csv.DictReader(open(tmp_path / "log.csv"))] == ["4"]
    train_main(["--out", str(tmp_path), "--max-steps", "2", "--no-progress", "--overwrite", "--set", *TINY_SET])
    assert load_checkpoint(tmp_path / "ckpt.pt")["step"] == 2


def test_orphan_checkpoint_temp_files_are_removed_by_the_next_run(tmp_path):
    tmp_path.joinpath("ckpt.pt.abc123.tmp").write_bytes(b"half a checkpoint")  # a write killed mid-way
    tmp_path.joinpath("best.pt.abc124.tmp").write_bytes(b"half a best checkpoint")
    train(tiny_cfg(), tiny_train_cfg(tmp_path, max_steps=2, eval_interval=2), synthetic_corpus("abc def "),
          progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "ckpt.pt", "log.csv"]
    tmp_path.joinpath("ckpt.pt.def456.tmp").write_bytes(b"")
    tmp_path.joinpath("best.pt.def457.tmp").write_bytes(b"")
    train(tiny_cfg(), tiny_train_cfg(tmp_path, max_steps=3, eval_interval=3), synthetic_corpus("abc def "),
          resume=True, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "ckpt.pt", "log.csv"]


# 2. --out: a folder, one training at a time ------------------------------------------------------

def test_out_naming_a_file_says_it_must_be_a_folder(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    for out in (tmp_path / "notes.txt", tmp_path / "notes.txt" / "run"):
        err = cli_error(train_main, ["--out", str(out), "--max-steps", "1", "--no-progress", "--set", *TINY_SET],
                        capsys)
        assert "--out must be a folder" in err and "Errno" not in err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_live_lock_refuses_and_a_dead_ones_is_taken_over(tmp_path, capsys):
    corpus, cfg = synthetic_corpus("abc def "), tiny_train_cfg(tmp_path, max_steps=2, eval_interval=2)
    lock = tmp_path / LOCK
    lock.write_text(json.dumps(dict(pid=os.getpid(), host=os.uname().nodename, started="2026-11-24 21:00:00 UTC")))
    with pytest.raises(FileExistsError, match=f"in use by another training \\(pid {os.getpid()} .*started "
                                              "2026-11-24 21:00:00 UTC.*another --out.*delete"):
        train(tiny_cfg(), cfg, corpus, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK]  # another's lock is left alone
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(json.dumps(dict(pid=dead.pid, host=os.uname().nodename, started="2026-11-24 21:00:00 UTC")))
    train(tiny_cfg(), cfg, corpus, progress=False)
    assert f"taking over the lock of pid {dead.pid}" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "ckpt.pt", "log.csv"]  # released at the end


def test_two_trainings_started_together_into_one_out(tmp_path):
    runs = {steps: subprocess.Popen(cli(tmp_path, "--max-steps", str(steps), "--set", *TINY_SET, "log_interval=4",
                                        "eval_interval=200"), env=ENV, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for steps in (400, 300)}
    done = {steps: (p.wait(timeout=300), p.stderr.read()) for steps, p in runs.items()}
    winners = [steps for steps, (rc, _) in done.items() if rc == 0]
    assert len(winners) == 1, done
    loser_rc, loser_err = done[({400, 300} - set(winners)).pop()]
    assert loser_rc == 2 and ("in use by another training (pid" in loser_err or "already holds a run" in loser_err)
    assert "Traceback" not in loser_err
    rows = list(csv.DictReader(open(tmp_path / "log.csv")))
    assert [int(r["step"]) for r in rows] == list(range(4, winners[0] + 1, 4))  # one run's rows only
    assert load_checkpoint(tmp_path / "ckpt.pt")["step"] == winners[0]
    assert not (tmp_path / LOCK).exists()


# 3. resume: bit-exact, refused where it cannot be, a finished run, a damaged log -----------------

def test_resume_is_bit_exact(tmp_path):
    # 12 steps over 5-segment passes: the run crosses two memory resets, and the
    # interruption at step 7 falls mid-pass (position and memory must be restored).
    corpus = synthetic_corpus("the quick brown fox jumps over the lazy dog ")
    straight = train(tiny_cfg(), tiny_train_cfg(tmp_path / "a"), corpus, progress=False)
    first = train(tiny_cfg(), tiny_train_cfg(tmp_path / "b"), corpus, stop_at=7, progress=False)
    assert first.step == 7
    ckpt = load_checkpoint(tmp_path / "b" / "ckpt.pt")
    assert ckpt["data"] == dict(epoch=1, segment=2) and ckpt["mems"] is not None
    resumed = train(tiny_cfg(), tiny_train_cfg(tmp_path / "b"), corpus, resume=True, progress=False)
    assert resumed.step == 12
    a, b = _weights(straight.model), _weights(resumed.model)
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed run differs from the uninterrupted one"
    # without the restored state the run really does differ (so the test can fail)
    fresh = train(tiny_cfg(), tiny_train_cfg(tmp_path / "c", seed=1), corpus, progress=False)
    assert not all(torch.equal(a[k], v) for k, v in _weights(fresh.model).items())
    # the log was continued, not restarted, and records the lr actually used; stop_at's extra row (7)
    # gave way to the uninterrupted run's rows: the resumed log is the straight one's (but its times)
    rows = list(csv.DictReader(open(tmp_path / "b" / "log.csv")))
    assert [int(r["step"]) for r in rows] == [2, 4, 6, 8, 10, 12]
    assert without_times(tmp_path / "b" / "log.csv") == without_times(tmp_path / "a" / "log.csv")
    cfg = tiny_train_cfg(tmp_path)
    assert all(float(r["lr"]) == pytest.approx(lr_at(int(r["step"]), cfg), rel=1e-5) for r in rows)


def test_resume_with_other_config_fails_clearly(tmp_path):
    corpus = synthetic_corpus("abc def ")
    train(tiny_cfg(), tiny_train_cfg(tmp_path, max_steps=2, eval_interval=2), corpus, progress=False)
    with pytest.raises(ValueError, match=r"n_layer 2 there vs 3 here.*Fix"):
        train(tiny_cfg(n_layer=3), tiny_train_cfg(tmp_path, max_steps=4), corpus, resume=True, progress=False)
    with pytest.raises(ValueError) as err:
        load_checkpoint(tmp_path / "ckpt.pt", tiny_cfg(d_model=32, mem_len=4))
    assert "d_model" in str(err.value) and "mem_len" in str(err.value) and "n_head" not in str(err.value)
    with pytest.raises(FileNotFoundError, match="drop --resume"):
        train(tiny_cfg(), tiny_train_cfg(tmp_path / "none"), corpus, resume=True, progress=False)


def test_resume_of_a_finished_run_says_so_and_changes_nothing(run_dir, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(run_dir, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    res = train(tiny_cfg(), tiny_train_cfg(out, max_steps=6, eval_interval=3), synthetic_corpus("the cat sat "),
                resume=True, progress=False)
    said = capsys.readouterr().out
    assert res.complete and res.step == 6
    assert res.valid_bpc == float(list(csv.DictReader(open(out / "log.csv")))[-1]["valid_bpc"])
    assert "holds a complete run: step 6 of max_steps 6" in said and "--max-steps 12" in said and "nan" not in said
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_resume_of_a_finished_run_on_the_command_line_exits_0(tmp_path, capsys):
    argv = ["--out", str(tmp_path), "--max-steps", "4", "--no-progress", "--set", *TINY_SET, "eval_interval=2"]
    train_main(argv)
    capsys.readouterr()
    train_main([*argv, "--resume"])  # returns: exit status 0
    out = capsys.readouterr().out
    assert "holds a complete run: step 4 of max_steps 4" in out and "nan" not in out and "tokens/s" not in out
    argv[argv.index("4")] = "8"
    train_main([*argv, "--resume", "--stop-at", "3"])
    assert "is at step 4, already past --stop-at 3; nothing to train" in capsys.readouterr().out
    train_main([*argv, "--resume", "--stop-at", "4"])
    assert "is at step 4, already at --stop-at 4; nothing to train" in capsys.readouterr().out
    train_main([*argv, "--resume"])  # the advice works: on to step 8
    assert load_checkpoint(tmp_path / "ckpt.pt")["step"] == 8


@pytest.mark.parametrize("how", DAMAGES)
def test_damaged_log_on_resume(run_dir, tmp_path, how):
    out = tmp_path / "run"
    shutil.copytree(run_dir, out)
    log, ckpt = out / "log.csv", (out / "ckpt.pt").read_bytes()
    rows = log.read_text().splitlines()
    damage(log, how, (ROOT / "results" / "long_range.json").read_bytes())
    if how == "truncated":  # a kill mid-write: the last line cut short
        log.write_text("\n".join(rows[:3]) + "\n" + rows[3][:10])
    resume = lambda: train(tiny_cfg(), tiny_train_cfg(out, max_steps=9, eval_interval=3),  # noqa: E731
                           synthetic_corpus("the cat sat "), resume=True, progress=False)
    if how in ("random bytes", "wrong content"):
        before = log.read_bytes()
        with pytest.raises(ValueError, match=f"{re.escape(str(log))} is damaged.*Fix: restore.*move it aside"):
            resume()
        assert log.read_bytes() == before and (out / "ckpt.pt").read_bytes() == ckpt  # nothing written
    else:
        with pytest.warns(UserWarning, match="cut short" if how == "truncated" else "is empty"):
            resume()
        steps = [int(r["step"]) for r in csv.DictReader(open(log))]
        assert steps == ([2, 3] if how == "truncated" else []) + [8, 9]  # rows 4, 6 were lost with the file


# 4. best.pt --------------------------------------------------------------------------------------

def periodic_valid(out) -> dict[int, float]:
    return {int(r["step"]): float(r["valid_bpc"]) for r in csv.DictReader(open(out / "log.csv")) if r["valid_bpc"]}


def test_best_checkpoint_holds_the_lowest_periodic_valid_bpc(tmp_path):
    corpus = overfitting_corpus()
    res = train(tiny_cfg(), overfitting_cfg(tmp_path / "run"), corpus, progress=False)
    valid = periodic_valid(tmp_path / "run")
    best_step = min(valid, key=valid.get)
    assert list(valid) == [4, 8, 12, 16] and best_step < 16  # the premise: valid bpc rose after its best
    best = load_checkpoint(tmp_path / "run" / "best.pt")
    assert (best["step"], res.best_step) == (best_step, best_step)
    assert best["valid_bpc"] == res.best_valid_bpc == pytest.approx(valid[best_step], abs=1e-5)
    assert res.score("best") == ("bpc", res.best_valid_bpc) and res.best_valid_bpc < res.valid_bpc
    assert load_checkpoint(tmp_path / "run" / "ckpt.pt")["best"] == dict(step=best_step, valid_bpc=best["valid_bpc"])
    # the weights are those of that step: a run stopped there holds the same ones as its last state
    stopped = train(tiny_cfg(), overfitting_cfg(tmp_path / "stopped"), corpus, stop_at=best_step, progress=False)
    assert weights_sha256(best["model"]) == weights_sha256(stopped.model.state_dict())
    assert weights_sha256(best["model"]) != weights_sha256(res.model.state_dict())  # not the last state
    model = res.best_model()
    assert weights_sha256(model.state_dict()) == weights_sha256(best["model"]) and not model.training
    cfg = overfitting_cfg(tmp_path)  # the periodic evaluation's settings give its bpc back
    again = evaluate(model, corpus.valid, cfg.eval_batch_size, max_tokens=cfg.eval_tokens)["bpc"]
    assert again == pytest.approx(best["valid_bpc"], rel=1e-6)
    assert best["train_config"]["corpus"] == "synthetic" and "optimizer" not in best


def test_best_checkpoint_survives_a_resume_bit_exactly(tmp_path):
    """Stopped after its best periodic step (8) and resumed, a run must end with the best.pt of an
    uninterrupted one: the best so far is kept in ckpt.pt (without it step 12, 4.68, would replace
    step 8's 4.63), and stop_at's extra evaluation does not compete (step 9 scores 4.62, lower)."""
    corpus = overfitting_corpus()
    straight = train(tiny_cfg(), overfitting_cfg(tmp_path / "a"), corpus, progress=False)
    first = train(tiny_cfg(), overfitting_cfg(tmp_path / "b"), corpus, stop_at=9, progress=False)
    assert first.valid_bpc < straight.best_valid_bpc  # the premise: the extra evaluation is lower
    assert first.best_step == straight.best_step == 8
    resumed = train(tiny_cfg(), overfitting_cfg(tmp_path / "b"), corpus, resume=True, progress=False)
    a, b = load_checkpoint(tmp_path / "a" / "best.pt"), load_checkpoint(tmp_path / "b" / "best.pt")
    assert (a["step"], a["valid_bpc"]) == (b["step"], b["valid_bpc"]) == (8, straight.best_valid_bpc)
    assert weights_sha256(a["model"]) == weights_sha256(b["model"])
    assert (resumed.best_step, resumed.best_valid_bpc) == (8, straight.best_valid_bpc)
    done = train(tiny_cfg(), overfitting_cfg(tmp_path / "b"), corpus, resume=True, progress=False)
    assert done.complete and (done.best_step, done.best_valid_bpc) == (8, straight.best_valid_bpc)


def test_best_checkpoint_is_part_of_the_run_in_out(tmp_path):
    """best.pt alone is a run (refused without --overwrite: with no ckpt.pt, --resume cannot continue it, and
    the refusal used to advise it); --overwrite removes it, so a new run that has not evaluated yet leaves no
    best.pt of the old one behind."""
    assert "best.pt" in RUN_FILES
    corpus, out = overfitting_corpus(), tmp_path / "run"
    train(tiny_cfg(), overfitting_cfg(out), corpus, progress=False)
    for name in ("ckpt.pt", "log.csv"):
        (out / name).unlink()
    with pytest.raises(FileExistsError, match=r"holds a run's best.pt but no ckpt.pt .*cannot be resumed\. Fix: "
                                              r"--overwrite"):
        train(tiny_cfg(), overfitting_cfg(out), corpus, progress=False)
    res = train(tiny_cfg(), overfitting_cfg(out), corpus, stop_at=3, overwrite=True, progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["ckpt.pt", "log.csv"]  # no periodic evaluation yet
    assert res.best_step == 0 and math.isnan(res.best_valid_bpc)
    with pytest.raises(FileNotFoundError, match="no .*best.pt.*Fix: use result.model"):
        res.best_model()


# 5. Ctrl-C saves the step; resume ends bit-exactly where an uninterrupted run does ---------------

def default_stop_signals() -> None:
    """In a child about to start: Ctrl-C's and a closed terminal's default handling. A suite started in
    the background (cmd &) inherits an ignored SIGINT, one started by nohup an ignored SIGHUP, and
    training keeps ignoring an ignored signal on purpose: a terminal's process has neither ignored."""
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def test_ctrl_c_saves_a_resumable_checkpoint_and_resume_is_bit_exact(tmp_path, monkeypatch):
    steps, args = 600, ["--set", *TINY_SET, "dropout=0.1", "log_interval=5", "eval_interval=200"]
    out = tmp_path / "interrupted"
    # (a test run started in the background inherits an ignored SIGINT, which training keeps
    # ignoring on purpose: give the child the default handler, as a terminal's process has)
    p = subprocess.Popen(cli(out, "--max-steps", str(steps), *args), env=ENV, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=default_stop_signals)
    wait_for_rows(out / "log.csv", 3)
    p.send_signal(signal.SIGINT)  # as Ctrl-C in the terminal does
    rc, err = p.wait(timeout=120), p.stderr.read()
    assert rc == 130, err
    step = int(re.search(r"training interrupted at step (\d+): \S*ckpt.pt holds that step", err).group(1))
    assert 0 < step < steps and "Traceback" not in err and "KeyboardInterrupt" not in err
    assert re.search(r"python -m txl_minimal.train .*--max-steps 600 .*--resume$", err.strip())
    assert load_checkpoint(out / "ckpt.pt")["step"] == step and not (out / LOCK).exists()

    resumed = subprocess.run(cli(out, "--max-steps", str(steps), *args, "--resume"), env=ENV,
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    monkeypatch.setenv("TXL_CORPUS", "text8-mini")
    train_main(cli(tmp_path / "straight", "--max-steps", str(steps), *args)[3:])  # in this process: one start-up less
    a, b = load_checkpoint(out / "ckpt.pt"), load_checkpoint(tmp_path / "straight" / "ckpt.pt")
    assert a["step"] == b["step"] == steps and a["model_config"]["dropout"] == 0.1
    for key in ("model", "optimizer"):
        assert state_sha256({key: a[key]}) == state_sha256({key: b[key]}), key  # bit-exact
    assert all(torch.equal(x, y) for x, y in zip(a["mems"], b["mems"]))
    # the log too: the row after the interruption averages the steps before it as well (it used to
    # average only those since the restart)
    assert without_times(out / "log.csv") == without_times(tmp_path / "straight" / "log.csv")


LONG_RUN = ["--max-steps", "3000", "--set", *TINY_SET, "log_interval=5", "eval_interval=1000"]


def test_sigterm_saves_the_step_as_ctrl_c_does(tmp_path):
    """A batch scheduler's pre-emption, `docker stop` and a lost Colab runtime send SIGTERM: it used to
    end the process at once, losing every step since the last checkpoint."""
    out = tmp_path / "run"
    p = subprocess.Popen(cli(out, *LONG_RUN), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_rows(out / "log.csv", 3)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 128 + signal.SIGTERM, err  # the status of a process the signal ended
    step = int(re.search(r"training interrupted at step (\d+) by SIGTERM: \S*ckpt.pt holds that step", err).group(1))
    assert "Traceback" not in err and re.search(r"python -m txl_minimal.train .*--max-steps 3000 .*--resume$",
                                                err.strip())
    assert load_checkpoint(out / "ckpt.pt")["step"] == step >= steps_logged(out)[-1] and not (out / LOCK).exists()


def test_a_closed_terminal_saves_the_step(tmp_path):
    """Closing the terminal sends SIGHUP, and from then on every write to it fails (EIO): the run used to
    end at once. Now it saves the step it stops at, saying nothing more, with SIGHUP's status."""
    pty, termios, fcntl = (pytest.importorskip(m) for m in ("pty", "termios", "fcntl"))
    out, (terminal, its_end) = tmp_path / "run", pty.openpty()
    p = subprocess.Popen(cli(out, *LONG_RUN), env=ENV, stdin=its_end, stdout=its_end,
                         stderr=its_end, start_new_session=True,  # the terminal's session, as a shell's child
                         preexec_fn=lambda: (default_stop_signals(), fcntl.ioctl(0, termios.TIOCSCTTY, 0)))
    os.close(its_end)
    log, deadline = out / "log.csv", time.time() + 120
    while not (log.exists() and len(log.read_text().splitlines()) > 3) and time.time() < deadline:
        if select.select([terminal], [], [], 0.05)[0]:
            os.read(terminal, 1 << 16)  # what the terminal shows
    os.close(terminal)  # the window closes
    assert p.wait(timeout=120) == 128 + signal.SIGHUP
    assert load_checkpoint(out / "ckpt.pt")["step"] >= steps_logged(out)[-1] and not (out / LOCK).exists()


def test_a_second_ctrl_c_stops_at_once_in_one_line(tmp_path, monkeypatch, capsys):
    """It printed a 20-line traceback (KeyboardInterrupt) and did not say what was kept."""
    monkeypatch.setenv("TXL_CORPUS", "text8-mini")
    argv = ["--out", str(tmp_path), "--no-progress", "--max-steps", "8", "--set", *TINY_SET, "eval_interval=4",
            "warmup_steps=1"]
    train_main([*argv, "--stop-at", "4"])
    before = (tmp_path / "ckpt.pt").read_bytes()
    real_add = LossMeter.add

    def add_and_press_ctrl_c_twice(self, nll):
        real_add(self, nll)
        os.kill(os.getpid(), signal.SIGINT)  # the first: finish this step and save it
        deadline = time.time() + 30
        while not Stop.requested and time.time() < deadline:  # (its handler has run)
            pass
        assert Stop.requested, "the first SIGINT never reached train's handler"
        os.kill(os.getpid(), signal.SIGINT)  # the second, before the save: stop at once

    monkeypatch.setattr(LossMeter, "add", add_and_press_ctrl_c_twice)
    capsys.readouterr()
    # a suite started in the background (cmd &, nohup, some CI runners) inherits an ignored SIGINT, which
    # training keeps ignoring: give this process Ctrl-C's usual handler, as a terminal's python has
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(SystemExit) as stopped:
            train_main([*argv, "--resume"])
        handler_after = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)
    err = capsys.readouterr().err
    assert stopped.value.code == 130 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"training stopped at once by a second Ctrl-C: no checkpoint of the step in progress was written; "
        f"{tmp_path}/ckpt.pt holds step 4, the last checkpoint: --resume continues from it.")
    assert (tmp_path / "ckpt.pt").read_bytes() == before and not (tmp_path / LOCK).exists()
    assert handler_after is signal.default_int_handler  # the handler put back


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def test_ctrl_c_and_divergence_under_torchrun(tmp_path):
    """Ctrl-C under torchrun (2 processes, gloo) gave three tracebacks and no checkpoint: now every rank
    stops at the same step, rank 0 saves it once and one message says how to resume (torchrun itself
    still prints its own SignalException: torch's launcher, not this package). Resumed with lr=1e9,
    both ranks stop at the first NaN, with one message, and the checkpoint stays the finite one."""
    out = tmp_path / "ddp"
    args = ["--max-steps", "3000", "--set", *TINY_SET, "log_interval=5", "eval_interval=1000", "amp=off"]
    p = subprocess.Popen([*TORCHRUN, *cli(out, *args)[1:]], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=default_stop_signals)
    wait_for_rows(out / "log.csv", 3)
    os.killpg(p.pid, signal.SIGINT)  # as Ctrl-C in a terminal: to torchrun and to both ranks
    _, err = p.communicate(timeout=180)
    assert err.count("training interrupted at step") == 1 and err.count("finishing this step") == 1, err
    step = int(re.search(r"training interrupted at step (\d+): \S*ckpt.pt holds that step", err).group(1))
    # the launcher's own options, --standalone among them (it was dropped, and the line failed without it)
    assert re.search(r"^  torchrun --standalone --nproc_per_node 2 -m txl_minimal.train .*--resume$", err, re.M)
    assert "txl_minimal/" not in err and "KeyboardInterrupt" not in err, err  # no rank's traceback
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["step"] == step and len(ckpt["rng"]) == 2 and not (out / LOCK).exists()

    before = (out / "ckpt.pt").read_bytes()
    p = subprocess.run([*TORCHRUN, *cli(out, *args, "lr=1e9", "--resume")[1:]], cwd=ROOT, env=ENV,
                       capture_output=True, text=True, timeout=180)
    assert p.returncode != 0 and p.stderr.count("training diverged at step") == 1, p.stderr[-3000:]
    assert f"ckpt.pt still holds step {step}" in p.stderr and "txl_minimal/" not in p.stderr
    assert (out / "ckpt.pt").read_bytes() == before


# 6. a diverging run: stopped, its last finite state kept ------------------------------------------

def test_a_diverging_run_stops_and_keeps_its_last_finite_checkpoints(tmp_path, monkeypatch, capsys):
    """Resumed with lr=1e9 a run printed "nan" and exited 0, having written a NaN ckpt.pt over the
    finite one (and a third call was refused: the checkpoint held NaN)."""
    corpus = synthetic_corpus(FOX)
    train(tiny_cfg(), tiny_train_cfg(tmp_path, max_steps=4, eval_interval=4), corpus, progress=False)
    before = snapshot(tmp_path)
    with pytest.raises(TrainingDiverged, match=r"^training diverged at step 6: the training loss became nan .*"
                                               r"ckpt.pt still holds step 4, the last finite state. Fix: .*"
                                               r"--resume --set lr=1e\+08"):
        train(tiny_cfg(), tiny_train_cfg(tmp_path, max_steps=12, lr=1e9), corpus, resume=True, progress=False)
    after = snapshot(tmp_path)
    assert after.pop("log.csv").startswith(before.pop("log.csv")) and after == before  # ckpt.pt, best.pt kept
    res = train(tiny_cfg(), tiny_train_cfg(tmp_path, max_steps=12), corpus, resume=True, progress=False)
    assert res.step == 12 and math.isfinite(res.valid_bpc)  # the advice works

    monkeypatch.setenv("TXL_CORPUS", "text8-mini")
    argv = ["--out", str(tmp_path / "cli"), "--no-progress", "--max-steps", "40", "--set", *TINY_SET,
            "eval_interval=10", "warmup_steps=4"]
    train_main([*argv, "--stop-at", "10"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        train_main([*argv, "lr=1e9", "--resume"])
    err = capsys.readouterr().err
    assert stopped.value.code == 1 and "Traceback" not in err
    assert re.search(r"^error: training diverged at step \d+: .*ckpt.pt still holds step 10", err, re.M)
    assert load_checkpoint(tmp_path / "cli" / "ckpt.pt")["step"] == 10


def test_a_state_holding_nan_is_never_saved(tmp_path, monkeypatch):
    """Between log rows the loss is not read (that would make a GPU wait at every step): a stop there
    checks the weights, Adam's state and the memory before it saves."""
    corpus = synthetic_corpus(FOX)
    cfg = tiny_train_cfg(tmp_path, max_steps=40, eval_interval=4, log_interval=100)
    train(tiny_cfg(), cfg, corpus, stop_at=4, progress=False)
    before = snapshot(tmp_path)
    real_add = LossMeter.add

    def add_then_ctrl_c(self, nll):  # Ctrl-C at the third step after the resume, no row read since
        real_add(self, nll)
        Stop.requested = len(self.steps) == 3

    monkeypatch.setattr(LossMeter, "add", add_then_ctrl_c)
    with pytest.raises(TrainingDiverged, match=r"at step 7: NaN or inf in the weights .*ckpt.pt still holds step 4"):
        train(tiny_cfg(), replace(cfg, lr=1e9), corpus, resume=True, progress=False)
    assert snapshot(tmp_path) == before


def test_a_nan_evaluation_of_finite_weights_is_said_and_not_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(train_py, "_valid_bpc", lambda *args: float("nan"))
    with pytest.warns(UserWarning, match="evaluation at step 4 gave valid bpc nan although the weights are finite"):
        res = train(tiny_cfg(), tiny_train_cfg(tmp_path, max_steps=4), synthetic_corpus(FOX), progress=False)
    assert res.best_step == 0 and not (tmp_path / "best.pt").exists() and (tmp_path / "ckpt.pt").exists()


def test_the_losses_since_the_last_row_resume_with_any_number_of_processes():
    """ckpt.pt keeps each rank's losses since the last log row; resumed by as many processes each rank
    takes its own, by another number the whole batch's mean of each step (the row's mean is the same)."""
    saved = {"unlogged_nll": [[1.0, 2.0], [3.0, 6.0]]}  # two ranks, two steps since the row
    assert [_unlogged(saved, rank, 2) for rank in (0, 1)] == [[1.0, 2.0], [3.0, 6.0]]
    assert _unlogged(saved, 0, 1) == [2.0, 4.0] and _unlogged(saved, 3, 4) == [2.0, 4.0]
    assert _unlogged({}, 0, 1) == [] and _unlogged({"unlogged_nll": [[], []]}, 0, 1) == []
