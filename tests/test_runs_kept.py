"""A run in --out is kept until its replacement has something to replace it with (--overwrite moves it
aside, into OUT/replaced/), advice that goes somewhere (no loop between --resume and its refusals; torchrun's
own options in the resume line), Ctrl-C in every command line said in one line, and a checkpoint named
for what it holds (a text file, a renamed safetensors file, weights that do not fit their config)."""
from __future__ import annotations

import os
import shutil
import signal
import string
import time

import pytest
import torch

from tiny import FOX, ROOT, TINY_SET, cli_error, synthetic_corpus, tiny_cfg, tiny_train_cfg
import txl_minimal.doctor as doctor_mod
import txl_minimal.evaluate as evaluate_mod
import txl_minimal.generate as generate_mod
import txl_minimal.pretrained as pretrained_mod
import txl_minimal.train as train_py
from txl_minimal import load, load_pretrained, save
from txl_minimal.checkpoint import load_checkpoint, save_checkpoint, weights_sha256
from txl_minimal.data import load_corpus
from txl_minimal.evaluate import main as evaluate_main
from txl_minimal.run_checkpoints import REPLACED, TrainingDiverged
from txl_minimal.run_signals import launcher_options
from txl_minimal.tasks import load_recall_model
from txl_minimal.train import main as train_main, train


def snapshot(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


# 2. --overwrite keeps the old run until the new one has a checkpoint -----------------------------

def test_overwrite_keeps_the_old_run_until_the_new_one_saves_a_checkpoint(tmp_path, capsys):
    """--overwrite deleted the old ckpt.pt and best.pt before step 1: a new run that diverged (or was killed)
    before its first checkpoint left only a NaN log.csv. Now the old run waits in OUT/replaced/, said."""
    corpus, out = synthetic_corpus(FOX), tmp_path / "run"
    train(tiny_cfg(), tiny_train_cfg(out, max_steps=4, eval_interval=4), corpus, progress=False)
    old = snapshot(out)
    diverging = tiny_train_cfg(out, max_steps=8, eval_interval=4, lr=1e9)
    with pytest.raises(TrainingDiverged, match=r"no checkpoint was saved before it; the run --overwrite replaced is "
                                               r"kept in \S*/replaced/ \(best.pt, ckpt.pt, log.csv\): to restore it"):
        train(tiny_cfg(), diverging, corpus, overwrite=True, progress=False)
    assert "--overwrite moved the run it replaces (ckpt.pt, log.csv, best.pt) into" in capsys.readouterr().err
    assert snapshot(out / REPLACED) == old and not (out / "ckpt.pt").exists()
    # whatever comes next says where it is
    with pytest.raises(FileExistsError, match=r"cannot be resumed.*Or: the run --overwrite replaced is kept in"):
        train(tiny_cfg(), tiny_train_cfg(out, max_steps=8, eval_interval=4), corpus, progress=False)
    with pytest.raises(FileNotFoundError, match=r"cannot be resumed.*Or: the run --overwrite replaced is kept in"):
        train(tiny_cfg(), tiny_train_cfg(out, max_steps=8, eval_interval=4), corpus, resume=True, progress=False)
    with pytest.raises(TrainingDiverged):  # a second --overwrite that fails too: still the run with weights
        train(tiny_cfg(), diverging, corpus, overwrite=True, progress=False)
    assert snapshot(out / REPLACED) == old
    (out / "log.csv").unlink()  # (killed before its first row): the folder is not taken for an empty one
    with pytest.raises(FileExistsError, match=r"holds no run of its own \(no ckpt.pt\), but the run --overwrite "
                                              r"replaced is kept in .*and --resume it. Or: --overwrite"):
        train(tiny_cfg(), tiny_train_cfg(out, max_steps=8, eval_interval=4), corpus, progress=False)
    for path in (out / REPLACED).iterdir():  # the advice works: its files back, resumed
        os.replace(path, out / path.name)
    (out / REPLACED).rmdir()
    res = train(tiny_cfg(), tiny_train_cfg(out, max_steps=8, eval_interval=4), corpus, resume=True, progress=False)
    assert res.step == 8
    train(tiny_cfg(), tiny_train_cfg(out, max_steps=2, eval_interval=2), corpus, overwrite=True, progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["best.pt", "ckpt.pt", "log.csv"]  # the new run's checkpoint:
    assert load_checkpoint(out / "ckpt.pt")["step"] == 2                              # the old one gone


def test_overwrite_of_a_log_without_weights_moves_nothing_aside(tmp_path):
    corpus, out = synthetic_corpus(FOX), tmp_path / "run"
    train(tiny_cfg(), tiny_train_cfg(out, max_steps=4, eval_interval=4), corpus, progress=False)
    for name in ("ckpt.pt", "best.pt"):
        (out / name).unlink()
    train(tiny_cfg(), tiny_train_cfg(out, max_steps=2, eval_interval=2), corpus, overwrite=True, progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["best.pt", "ckpt.pt", "log.csv"]


# 6. advice that goes somewhere -------------------------------------------------------------------

def test_a_run_whose_ckpt_pt_was_deleted_is_sent_to_overwrite_from_every_side(tmp_path, capsys, monkeypatch):
    """ckpt.pt deleted, best.pt left: --resume said "no checkpoint, drop --resume", which said "already holds
    a run ... --resume": a loop; only --overwrite worked, and nothing said so."""
    monkeypatch.setenv("TXL_CORPUS", "text8-mini")
    out = tmp_path / "run"
    argv = ["--out", str(out), "--max-steps", "4", "--no-progress", "--set", *TINY_SET, "eval_interval=2",
            "warmup_steps=1"]
    train_main(argv)
    (out / "ckpt.pt").unlink()
    for extra in (["--resume"], []):
        err = cli_error(train_main, [*argv, *extra], capsys)
        assert "holds a run's log.csv and best.pt but no ckpt.pt" in err and "cannot be resumed" in err, extra
        assert "Fix: --overwrite" in err and "copy it elsewhere first to keep it" in err, extra
        assert "drop --resume" not in err and "--resume to continue" not in err, extra
    train_main([*argv, "--overwrite"])  # the advice works
    assert load_checkpoint(out / "ckpt.pt")["step"] == 4 and not (out / REPLACED).exists()
    empty = tmp_path / "empty"
    err = cli_error(train_main, [*argv[:1], str(empty), *argv[2:], "--resume"], capsys)
    assert "holds no run to resume (no ckpt.pt). Fix: drop --resume" in err


def test_the_resume_line_under_torchrun_keeps_the_launchers_options():
    """It was rebuilt as `torchrun --nproc_per_node N`, dropping --standalone (without which torchrun waits
    for a rendezvous on port 29500) and any --nnodes or --rdzv-* the run was started with."""
    module_form = ["/usr/bin/python3", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
                   "txl_minimal.train", "--out", "runs/x"]
    assert launcher_options(module_form, 2) == ["--standalone", "--nproc_per_node", "2"]
    script_form = ["/venv/bin/python", "/venv/bin/torchrun", "--nnodes", "1", "--rdzv-backend=c10d",
                   "--nproc_per_node=4", "-m", "txl_minimal.train"]
    assert launcher_options(script_form, 4) == ["--nnodes", "1", "--rdzv-backend=c10d", "--nproc_per_node=4"]
    assert launcher_options(["bash"], 2) == ["--nproc_per_node", "2"]  # not a launcher's line: the count alone
    assert launcher_options([], 3) == ["--nproc_per_node", "3"]


# 5. Ctrl-C in every command line: one line, status 130 ------------------------------------------

@pytest.fixture
def ctrl_c():
    """A function that presses Ctrl-C where it is called. A suite started in the background (cmd &, nohup)
    inherits an ignored SIGINT: this process gets Ctrl-C's usual handler meanwhile, as a terminal's has."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)

    def press(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(10)  # (the KeyboardInterrupt comes first)
        raise AssertionError("Ctrl-C never arrived")

    yield press
    signal.signal(signal.SIGINT, previous)


def stopped(main, argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 130 and "Traceback" not in err and "KeyboardInterrupt" not in err, err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("where, argv", [
    ("evaluate", ["txl-tiny", "--no-progress"]),
    ("sliding_window_eval", ["vanilla-tiny", "--sliding-window", "64", "--no-progress"]),
])
def test_ctrl_c_during_an_evaluation_is_one_line(where, argv, ctrl_c, capsys, monkeypatch):
    monkeypatch.setattr(evaluate_mod, where, ctrl_c)
    assert stopped(evaluate_main, argv, capsys) == "stopped by Ctrl-C: nothing was written (an evaluation writes " \
                                                   "nothing)"


def test_ctrl_c_during_ship_or_update_json_changes_no_shipped_file(ctrl_c, capsys, monkeypatch, tmp_path):
    before = snapshot(pretrained_mod.PRETRAINED_DIR)
    monkeypatch.setattr(pretrained_mod, "_summary", ctrl_c)  # the evaluations, before anything is written
    run = tmp_path / "run"
    train(tiny_cfg(), tiny_train_cfg(run, max_steps=2, eval_interval=2), synthetic_corpus(FOX), progress=False)
    for argv in (["--ship", str(run), "--name", "txl-tiny", "--new-shape"], ["--update-json", "txl-tiny"]):
        assert stopped(pretrained_mod.main, [*argv, "--no-progress"], capsys) == \
            "stopped by Ctrl-C: no shipped file was changed"
    assert snapshot(pretrained_mod.PRETRAINED_DIR) == before


def test_ctrl_c_while_train_still_reads_a_large_file_is_one_line(ctrl_c, capsys, monkeypatch, tmp_path):
    text = tmp_path / "big.txt"
    text.write_text(FOX * 100)
    monkeypatch.setattr(train_py, "load_train_corpus", ctrl_c)
    out = tmp_path / "run"
    line = stopped(train_main, ["--corpus", str(text), "--out", str(out), "--no-progress"], capsys)
    assert line == "stopped by Ctrl-C before training began: nothing of a run was written" and not out.exists()


def test_ctrl_c_in_generate_doctor_and_a_script_is_one_line(ctrl_c, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(generate_mod, "generate_text", ctrl_c)
    assert "nothing was written" in stopped(generate_mod.main, ["txl-tiny", "--prompt", "the "], capsys)
    monkeypatch.setattr(doctor_mod, "report", ctrl_c)
    assert "stopped by Ctrl-C" in stopped(doctor_mod.main, ["--quick"], capsys)
    import importlib.util
    spec = importlib.util.spec_from_file_location("own_text_script", ROOT / "scripts" / "own_text.py")
    own_text = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(own_text)
    monkeypatch.setattr(own_text, "run", ctrl_c)
    line = stopped(own_text.main, ["--only", "text8-mini", "--mems", "0", "--out", str(tmp_path / "own")], capsys)
    assert line.startswith("stopped by Ctrl-C: results.json holds the runs finished")


# 7. a checkpoint named for what it holds; the right knob named; a file's size before its checks ---

def test_a_renamed_safetensors_or_torch_file_loads_by_its_content(tmp_path):
    """A .safetensors renamed .pt (or a .pt renamed .safetensors) was called "corrupt or incomplete"."""
    model = load_pretrained("txl-tiny")
    save(model, tmp_path / "model.safetensors")
    save(model, tmp_path / "model.pt")
    shutil.copy(tmp_path / "model.safetensors", tmp_path / "renamed.pt")
    shutil.copy(tmp_path / "model.pt", tmp_path / "renamed.safetensors")
    for name in ("renamed.pt", "renamed.safetensors"):
        assert weights_sha256(load(tmp_path / name).state_dict()) == weights_sha256(model.state_dict()), name
    shutil.copy(ROOT / "results" / "long_range" / "xl.safetensors", tmp_path / "xl.pt")  # the scripts' format too
    assert load_recall_model(tmp_path / "xl.pt").cfg.n_layer == 2
    (tmp_path / "u16.pt").write_bytes("hello\n".encode("utf-16"))
    with pytest.raises(ValueError, match=r"u16.pt is a text file \(it begins 'hello\\n'\), not a checkpoint"):
        load(tmp_path / "u16.pt")


def test_a_sliding_window_too_large_names_the_window_not_flags_it_refuses(capsys):
    """`--sliding-window 150000` was told to lower tgt_len, mem_len or batch_size, which --sliding-window refuses."""
    err = cli_error(evaluate_main, ["vanilla-tiny", "--sliding-window", "150000", "--no-progress"], capsys)
    assert "sliding_window_eval: windows of 150,000 tokens, 64 at a time, need" in err
    assert "Fix: a shorter context (--sliding-window C; the cost grows with its square, and this model's own " \
           "tgt_len is 64), or in Python fewer windows at a time (sliding_window_eval's batch_size)" in err
    assert "a smaller tgt_len" not in err and "mem_len or batch_size" not in err


def test_cutoffs_for_a_files_own_vocabulary_are_checked_against_it(tmp_path, monkeypatch):
    """--corpus f.txt --set cutoffs=[30] on a 41-symbol file was refused "below vocab_size=27": the preset's
    size, checked before the file's was applied."""
    monkeypatch.delenv("TXL_CORPUS", raising=False)
    symbols = string.ascii_lowercase + " .,;:!?ABCDEFG"  # 40, and the placeholder of id 0: 41
    text = tmp_path / "f.txt"
    text.write_text("".join(symbols[(i * 7) % len(symbols)] for i in range(20_000)))
    assert load_corpus(text).vocab_size == 41
    train_main(["--corpus", str(text), "--out", str(tmp_path / "run"), "--max-steps", "2", "--no-progress",
                "--set", "cutoffs=[30]", *TINY_SET, "warmup_steps=1"])
    cfg = load_checkpoint(tmp_path / "run" / "ckpt.pt")["model_config"]
    assert (cfg["vocab_size"], cfg["cutoffs"]) == (41, [30])


# 8. weights that do not fit the config saved with them: a sentence ------------------------------

def test_weights_that_do_not_fit_their_config_are_a_sentence_everywhere(tmp_path, capsys):
    """The model side refuses model.cfg = TXLConfig(n_layer=1, ...) now; a file written so before (or edited,
    checksums recomputed) was torch's state_dict RuntimeError at load, at evaluate and at --resume."""
    model = load_pretrained("txl-tiny")
    one_layer = dict(model.cfg.to_dict(), n_layer=1)
    save_checkpoint(dict(model=model.state_dict(), model_config=one_layer), tmp_path / "m.pt")
    with pytest.raises(ValueError, match=r"checkpoint \S*m.pt's weights do not fit the model_config saved with them "
                                         r"\(unexpected layers.1.\S+, .* \(\d+ in all\)\).*Fix: save the model again"):
        load(tmp_path / "m.pt")
    err = cli_error(evaluate_main, [str(tmp_path / "m.pt"), "--no-progress"], capsys)
    assert "weights do not fit the model_config" in err and "RuntimeError" not in err

    corpus, out = synthetic_corpus(FOX), tmp_path / "run"
    train(tiny_cfg(), tiny_train_cfg(out, max_steps=2, eval_interval=2), corpus, progress=False)
    ckpt = load_checkpoint(out / "ckpt.pt")
    ckpt["model"] = {k: (v[:1] if k == "out_bias" else v) for k, v in ckpt["model"].items()}
    save_checkpoint(ckpt, out / "ckpt.pt")
    with pytest.raises(ValueError, match=r"ckpt.pt's weights do not fit .*shapes: out_bias \(1,\) saved, \(27,\)"):
        train(tiny_cfg(), tiny_train_cfg(out, max_steps=4, eval_interval=2), corpus, resume=True, progress=False)
    assert torch.equal(load_checkpoint(out / "ckpt.pt")["model"]["out_bias"], ckpt["model"]["out_bias"])
