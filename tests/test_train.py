"""Tests of txl_minimal.train: schedule, resume, DDP, checkpoints, evaluation, learning."""
from __future__ import annotations

import csv
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from txl_minimal import load_pretrained
from txl_minimal.data import Corpus, encode, load_corpus
from txl_minimal.model import TransformerXL, TXLConfig
from txl_minimal.pretrained import PRETRAINED_DIR
from txl_minimal.train import (TrainConfig, evaluate, load_checkpoint, lr_at, main, preset,
                               save_checkpoint, sliding_window_eval, train)

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]


def tiny_cfg(**overrides) -> TXLConfig:
    base = dict(n_layer=2, n_head=2, d_model=16, d_head=8, d_inner=32, dropout=0.1, dropatt=0.1,
                tgt_len=8, mem_len=8)
    base.update(overrides)
    return TXLConfig(**base)


def tiny_train_cfg(out: Path, **overrides) -> TrainConfig:
    base = dict(batch_size=4, lr=3e-3, warmup_steps=3, max_steps=12, eval_interval=4, eval_tokens=64,
                eval_batch_size=2, log_interval=2, out=str(out))
    base.update(overrides)
    return TrainConfig(**base)


def synthetic_corpus(text: str, n_train: int = 4 * (8 * 5 + 1)) -> Corpus:
    """Repeated text; the default train split holds exactly 5 segments per column (tgt_len 8)."""
    ids = encode((text * (1 + 3 * n_train // len(text)))[: n_train + 400])
    return Corpus("synthetic", ids[:n_train], ids[n_train:n_train + 200], ids[n_train + 200:])


def random_model(attn_type: str = "rel", seed: int = 0, **kw) -> TransformerXL:
    torch.manual_seed(seed)
    model = TransformerXL(tiny_cfg(dropout=0.0, dropatt=0.0, attn_type=attn_type, **kw)).double().eval()
    with torch.no_grad():  # bigger weights than the init so the context matters
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


# ----------------------------------------------------------------------------- schedule

def test_lr_schedule_warmup_then_cosine():
    cfg = TrainConfig(lr=1e-3, min_lr=1e-4, warmup_steps=10, max_steps=110)
    assert [lr_at(s, cfg) for s in (1, 5, 10)] == pytest.approx([1e-4, 5e-4, 1e-3])
    assert lr_at(60, cfg) == pytest.approx((1e-3 + 1e-4) / 2)  # half way down the cosine
    assert lr_at(110, cfg) == pytest.approx(1e-4)  # ends at the floor
    after = [lr_at(s, cfg) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(after, after[1:]))
    assert lr_at(1, TrainConfig(lr=2.5e-4, warmup_steps=0, max_steps=100)) == pytest.approx(2.5e-4, rel=1e-3)


def test_presets():
    model_cfg, train_cfg = preset("cpu-small", attn_type="abs", mem_len=0, max_steps=7)
    assert (model_cfg.n_layer, model_cfg.d_model, model_cfg.n_head, model_cfg.d_head) == (4, 128, 4, 32)
    assert (model_cfg.attn_type, model_cfg.mem_len, train_cfg.max_steps, train_cfg.lr) == ("abs", 0, 7, 1e-3)
    base, base_train = preset("paper-base")
    assert (base.n_layer, base.d_model, base.tgt_len, base_train.batch_size, base_train.lr) == (12, 512, 512, 22, 2.5e-4)
    with pytest.raises(ValueError, match="cpu-tiny"):
        preset("nope")
    with pytest.raises(ValueError, match="unknown setting 'n_layers'"):
        preset("cpu-tiny", n_layers=3)


# ----------------------------------------------------------------------------- training

def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


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
    # the log was continued, not restarted, and records the lr actually used
    rows = list(csv.DictReader(open(tmp_path / "b" / "log.csv")))
    assert [int(r["step"]) for r in rows] == [2, 4, 6, 7, 8, 10, 12]
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


def test_checkpoint_records_the_corpus_really_read(tmp_path, monkeypatch):
    """$TXL_CORPUS overrides cfg.corpus; the checkpoint must name what was trained on,
    and resuming on other data must fail."""
    monkeypatch.setenv("TXL_CORPUS", "text8-mini")
    cfg = tiny_train_cfg(tmp_path, corpus="text8", max_steps=2, eval_interval=2)
    train(tiny_cfg(), cfg, progress=False)
    assert load_checkpoint(tmp_path / "ckpt.pt")["train_config"]["corpus"] == "text8-mini"
    assert train(tiny_cfg(), tiny_train_cfg(tmp_path, corpus="text8", max_steps=3, eval_interval=3),
                 resume=True, progress=False).step == 3
    with pytest.raises(ValueError, match=r"corpus='text8-mini', this run 'synthetic'.*Fix"):
        train(tiny_cfg(), tiny_train_cfg(tmp_path, max_steps=4), synthetic_corpus("abc def "),
              resume=True, progress=False)


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    save_checkpoint({"step": 1, "w": torch.ones(3)}, path)
    assert os.listdir(tmp_path) == ["ckpt.pt"]

    def broken_save(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint({"step": 2, "w": torch.zeros(3)}, path)
    assert os.listdir(tmp_path) == ["ckpt.pt"]  # no temp file left behind
    monkeypatch.undo()
    good = torch.load(path, weights_only=True)
    assert good["step"] == 1 and torch.equal(good["w"], torch.ones(3))


def test_training_learns_a_repeated_string(tmp_path):
    corpus = synthetic_corpus("the quick brown fox jumps over the lazy dog ", n_train=4000)
    cfg = tiny_cfg(dropout=0.0, dropatt=0.0, d_model=32, d_head=16, d_inner=64, tgt_len=16, mem_len=16)
    res = train(cfg, tiny_train_cfg(tmp_path, batch_size=8, lr=5e-3, warmup_steps=10, max_steps=100,
                                   eval_interval=100, eval_tokens=None), corpus, progress=False)
    assert res.valid_bpc < 1.0  # 4.75 bpc at the start; the string is 44 characters long


def test_bf16_autocast_on_cpu(tmp_path):
    corpus = synthetic_corpus("abc def ")
    res = train(tiny_cfg(), tiny_train_cfg(tmp_path, amp="bf16", max_steps=3, eval_interval=3), corpus,
                progress=False)
    assert math.isfinite(res.train_bpc) and math.isfinite(res.valid_bpc)


def test_ddp_two_cpu_processes_match_single_process(tmp_path):
    """torchrun, 2 ranks with gloo: each reads half the columns, gradients are averaged,
    so the result is single-process training on the full batch (up to float rounding).
    train() itself raises if the two ranks end with different weights."""
    settings = ["n_layer=1", "d_model=32", "d_head=16", "d_inner=64", "dropout=0.0", "tgt_len=16",
                "mem_len=16", "warmup_steps=1", "eval_interval=4", "eval_tokens=128", "log_interval=2"]
    args = ["--preset", "cpu-tiny", "--batch-size", "4", "--max-steps", "4", "--no-progress", "--set", *settings]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "txl_minimal.train", *args, "--out", str(tmp_path / "ddp")]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    ddp = load_checkpoint(tmp_path / "ddp" / "ckpt.pt")["model"]

    corpus = load_corpus("text8-mini")
    overrides = dict(s.split("=") for s in settings)
    overrides = {k: float(v) if "." in v else int(v) for k, v in overrides.items()}
    model_cfg, train_cfg = preset("cpu-tiny", batch_size=4, max_steps=4, out=str(tmp_path / "one"), **overrides)
    single = _weights(train(model_cfg, train_cfg, corpus, progress=False).model)
    # rank 0's two columns trained alone: what a DDP without gradient averaging would give
    quarter = len(corpus.train) // 4
    rank0 = Corpus("rank0", corpus.train[:2 * quarter], corpus.valid, corpus.test)
    half_cfg = preset("cpu-tiny", batch_size=2, max_steps=4, out=str(tmp_path / "half"), **overrides)
    half = _weights(train(*half_cfg, rank0, progress=False).model)

    def rel_diff(a, b):
        num = sum((a[k] - b[k]).norm() ** 2 for k in a) ** 0.5
        return float(num / sum(a[k].norm() ** 2 for k in a) ** 0.5)

    assert rel_diff(single, ddp) < 1e-5
    assert rel_diff(single, half) > 1e-3  # a rank training on its own columns would be caught


# ----------------------------------------------------------------------------- evaluation

def test_evaluate_scores_every_token_once():
    model = random_model()
    ids = torch.randint(0, 27, (103,))
    cfg_before = model.cfg.to_dict()
    res = evaluate(model, ids, batch_size=1, tgt_len=10, mem_len=7)
    assert res["tokens"] == 102
    assert model.cfg.to_dict() == cfg_before  # lengths restored

    # the manual loop: consecutive segments of 10 (the last one has 2), memory carried
    model.set_lengths(tgt_len=10, mem_len=7)
    mems, total = None, 0.0
    for s in range(0, 102, 10):
        e = min(s + 10, 102)
        out = model(ids[None, s:e], mems, targets=ids[None, s + 1:e + 1])
        total, mems = total + out.nll.sum().item(), out.mems
    model.set_lengths(tgt_len=8, mem_len=8)
    assert res["loss"] == pytest.approx(total / 102, rel=1e-6)
    assert res["bpc"] == pytest.approx(total / 102 / math.log(2), rel=1e-6)

    # batch_size columns: column b is the slice [26b, 26b + 27), scored on its own
    batched = evaluate(model, ids, batch_size=4, tgt_len=10, mem_len=7)
    assert batched["tokens"] == 102
    parts = [evaluate(model, ids[26 * b:26 * b + 27], tgt_len=10, mem_len=7) for b in range(4)]
    assert sum(p["tokens"] for p in parts) == 102
    assert batched["loss"] * 102 == pytest.approx(sum(p["loss"] * p["tokens"] for p in parts), rel=1e-6)

    assert evaluate(model, ids, max_tokens=50)["tokens"] == 50
    assert evaluate(model, ids.numpy().astype(np.uint8), batch_size=200)["tokens"] == 102


def test_sliding_window_matches_explicit_windows():
    model = random_model("abs", mem_len=0)
    ids = torch.randint(0, 27, (41,))
    context = 8
    res = sliding_window_eval(model, ids, context, batch_size=5)
    manual = []
    for t in range(1, 41):  # token t from the (at most) `context` tokens before it, last position only
        window = ids[max(0, t - context):t]
        manual.append(F.cross_entropy(model(window[None]).logits[0, -1], ids[t]).item())
    assert res["tokens"] == 40
    assert res["loss"] == pytest.approx(sum(manual) / 40, rel=1e-6)
    limited = sliding_window_eval(model, ids, context, max_predictions=20, batch_size=3)
    assert limited["tokens"] == 20 and limited["loss"] == pytest.approx(sum(manual[:20]) / 20, rel=1e-6)
    short = sliding_window_eval(model, ids[:5], context)  # shorter than one window
    assert short["tokens"] == 4 and short["loss"] == pytest.approx(sum(manual[:4]) / 4, rel=1e-6)
    assert model.cfg.mem_len == 0 and model.cfg.tgt_len == 8 and not model.training


# ----------------------------------------------------------------------------- command-line evaluation

def _printed_bpc(out: str) -> float:
    """The bpc in the line `python -m txl_minimal.train --evaluate` prints."""
    return float(re.search(r"bpc (\d+\.\d+) over", out).group(1))


def test_cli_evaluates_a_run_directory_or_checkpoint(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TXL_CORPUS", raising=False)
    run = tmp_path / "run"
    train(tiny_cfg(), tiny_train_cfg(run, max_steps=2, eval_interval=2), synthetic_corpus("abc def "),
          progress=False)
    ckpt = load_checkpoint(run / "ckpt.pt")
    torch.manual_seed(1)  # big random weights, so the memory length changes the bpc (by ~0.1)
    weights = {k: v + torch.randn_like(v) if v.is_floating_point() else v for k, v in ckpt["model"].items()}
    save_checkpoint(dict(ckpt, model=weights), run / "ckpt.pt")
    model = TransformerXL(tiny_cfg()).eval()
    model.load_state_dict(weights)
    test = load_corpus("text8-mini").test
    main(["--evaluate", str(run), "--corpus", "text8-mini", "--split", "test", "--eval-mem-len", "16",
          "--max-predictions", "300", "--no-progress"])
    out = capsys.readouterr().out
    assert "over 300 predictions" in out and "mem_len=16" in out and "tgt_len=8" in out
    expected = evaluate(model, test, batch_size=1, mem_len=16, max_tokens=300)["bpc"]
    assert _printed_bpc(out) == pytest.approx(expected, abs=6e-5)
    # the training mem_len (8) would give another number: --eval-mem-len really arrived
    assert _printed_bpc(out) != pytest.approx(evaluate(model, test, max_tokens=300)["bpc"], abs=0.05)

    main(["--evaluate", str(run / "ckpt.pt"), "--corpus", "text8-mini", "--sliding-window", "8",
          "--max-predictions", "50", "--no-progress"])
    out = capsys.readouterr().out
    expected = sliding_window_eval(model, load_corpus("text8-mini").valid, 8, max_predictions=50)["bpc"]
    assert "on text8-mini valid: " in out and _printed_bpc(out) == pytest.approx(expected, abs=6e-5)

    with pytest.raises(ValueError, match="names corpus 'synthetic'.*--corpus"):
        main(["--evaluate", str(run), "--no-progress"])
    with pytest.raises(FileNotFoundError, match="nothing to evaluate.*Fix"):
        main(["--evaluate", str(tmp_path / "nope")])


@pytest.mark.parametrize("argv, message", [
    (["--eval-mem-len", "16"], "add --evaluate"),
    (["--evaluate", "txl", "--sliding-window", "8", "--eval-mem-len", "16"], "drop --eval-mem-len"),
    (["--evaluate", "runs/x", "--update-json"], "--evaluate txl or vanilla"),
    (["--evaluate", "txl", "--update-json", "--split", "test"], "drop --split"),
])
def test_cli_rejects_evaluation_options_it_would_ignore(argv, message, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err


# ----------------------------------------------------------------------------- shipped models

def test_load_pretrained_rejects_unknown_names():
    with pytest.raises(ValueError, match="txl, vanilla"):
        load_pretrained("gpt")


@pytest.mark.skipif(not (PRETRAINED_DIR / "txl.pt").exists() or not (PRETRAINED_DIR / "vanilla.pt").exists(),
                    reason="shipped models not built yet")
def test_pretrained_models_load_offline_and_predict_text8(capsys):
    test = load_corpus("text8-mini").test
    txl, vanilla = load_pretrained("txl"), load_pretrained("vanilla")
    assert not txl.training and txl.cfg.attn_type == "rel" and txl.cfg.mem_len == 64
    assert not vanilla.training and vanilla.cfg.attn_type == "abs" and vanilla.cfg.mem_len == 0
    assert evaluate(txl, test, max_tokens=2000)["bpc"] < 2.5
    assert sliding_window_eval(vanilla, test, 64, max_predictions=500)["bpc"] < 2.5
    for name in ("txl", "vanilla"):
        assert (PRETRAINED_DIR / f"{name}.json").exists() and (PRETRAINED_DIR / f"{name}.log.csv").exists()
        assert (PRETRAINED_DIR / f"{name}.pt").stat().st_size < 20e6
    shipped = (PRETRAINED_DIR / "txl.json").read_bytes()
    main(["--evaluate", "txl", "--split", "test", "--max-predictions", "2000", "--no-progress"])
    assert _printed_bpc(capsys.readouterr().out) == pytest.approx(evaluate(txl, test, max_tokens=2000)["bpc"],
                                                                  abs=6e-5)
    assert (PRETRAINED_DIR / "txl.json").read_bytes() == shipped  # only --update-json rewrites it
