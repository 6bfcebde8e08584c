"""Tests of txl_minimal.train: schedule, presets, DDP, learning, the command line (resume and best.pt:
test_run_folder.py)."""
from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from types import SimpleNamespace

from txl_minimal.checkpoint import load_checkpoint
from txl_minimal.data import Corpus, load_corpus
from txl_minimal.model import TransformerXL
from txl_minimal.train import (PRESETS, cpu_precision, TrainConfig, lr_at, main, preset, sized_to_corpus,
                               train, training_loss)

from tiny import ROOT, synthetic_corpus, tiny_cfg, tiny_train_cfg, weights as _weights


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
    assert (base.n_layer, base.d_model, base.tgt_len, base_train.batch_size, base_train.lr) == \
        (12, 512, 512, 22, 2.5e-4)
    assert (base_train.eval_tgt_len, base_train.eval_mem_len, base_train.eval_clamp_len) == (80, 2100, 820)
    with pytest.raises(ValueError, match="cpu-tiny"):
        preset("nope")
    with pytest.raises(ValueError, match="unknown setting 'n_layers'"):
        preset("cpu-tiny", n_layers=3)


def test_wt103_preset_is_the_papers_base_model_and_trains_a_step(tmp_path):
    """The WikiText-103 preset (no GPU here, no WikiText-103 either): the authors' base model,
    151M parameters counted on the meta device, and two steps of its training settings (batch
    of 2) with its four clusters and ties kept, on a small body, a 300-word fake vocabulary and
    a Zipf-distributed slice, then its evaluation lengths (64 / 640 / clamp 400, same_length)."""
    cfg, train_cfg = preset("wt103-base")
    assert (cfg.n_layer, cfg.d_model, cfg.n_head, cfg.d_head, cfg.d_inner) == (16, 410, 10, 41, 2100)
    assert (cfg.tgt_len, cfg.mem_len, cfg.cutoffs, cfg.div_val, cfg.d_embed) == \
        (150, 150, [20000, 40000, 200000], 1, None)
    assert (cfg.tie_weights, cfg.tie_projs, cfg.vocab_size) == (True, [False, True, True, True], 267_735)
    assert (train_cfg.corpus, train_cfg.batch_size, train_cfg.lr, train_cfg.max_steps) == ("wt103", 60, 2.5e-4, 200_000)
    assert (train_cfg.eval_tgt_len, train_cfg.eval_mem_len, train_cfg.eval_clamp_len, train_cfg.eval_same_length) == (
        64, 640, 400, True)
    with torch.device("meta"):  # shapes only: no 600 MB of weights
        assert TransformerXL(cfg).num_params() == 151_107_538  # the paper's "151M"

    V = 300
    small = dict(vocab_size=V, cutoffs=[20, 40, 200], n_layer=2, n_head=2, d_model=16, d_head=8, d_inner=32,
                 tgt_len=8, mem_len=8, d_embed=32)  # d_embed != d_model: the projections and tie_projs matter
    cfg, train_cfg = preset("wt103-base", **small, batch_size=2, max_steps=2, eval_interval=2,
                            out=str(tmp_path), device="cpu")
    g = torch.Generator().manual_seed(0)
    zipf = 1.0 / torch.arange(1, V + 1)
    ids = torch.multinomial(zipf, 4 * 2 * 9 + 300, replacement=True, generator=g).int().numpy()
    corpus = Corpus("wt103-slice", ids[:72], ids[72:200], ids[200:], vocab=tuple(map(str, range(V))))
    res = train(cfg, train_cfg, corpus=corpus, progress=False)
    assert res.step == 2 and math.isfinite(res.train_bpc) and math.isfinite(res.valid_bpc)
    model = res.model
    assert model.crit.out_projs[1] is model.word_emb.emb_projs[0] and model.crit.out_projs[0] is not None
    assert model.crit.out_layers[0].weight is model.word_emb.emb_layers[0].weight


# ----------------------------------------------------------------------------- training

def test_progress_leaves_tqdm_disable_in_force(tmp_path, monkeypatch):
    """progress=True asks for the bar without forcing it on: TQDM_DISABLE=1 (the notebooks'
    test environment) still hides it; progress=False always does."""
    import txl_minimal.train as train_module
    asked, real = [], train_module.tqdm

    def recording_tqdm(*args, **kwargs):
        asked.append(kwargs)
        return real(*args, **{**kwargs, "disable": True})

    monkeypatch.setattr(train_module, "tqdm", recording_tqdm)
    corpus = synthetic_corpus("abc def ")
    for name, progress in (("on", True), ("off", False)):
        train(tiny_cfg(), tiny_train_cfg(tmp_path / name, max_steps=2, eval_interval=2), corpus, progress=progress)
    assert "disable" not in asked[0] and asked[1]["disable"] is True


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


def test_training_learns_a_repeated_string(tmp_path):
    corpus = synthetic_corpus("the quick brown fox jumps over the lazy dog ", n_train=4000)
    cfg = tiny_cfg(dropout=0.0, dropatt=0.0, d_model=32, d_head=16, d_inner=64, tgt_len=16, mem_len=16)
    res = train(cfg, tiny_train_cfg(tmp_path, batch_size=8, lr=5e-3, warmup_steps=10, max_steps=100,
                                   eval_interval=100, eval_tokens=None), corpus, progress=False)
    assert res.valid_bpc < 1.0  # 4.75 bpc at the start; the string is 44 characters long


def test_half_loss_trains_only_the_later_half_of_each_segment():
    """loss_positions="half" (the paper's Table 6 "half loss"): the first T // 2 targets get no gradient."""
    torch.manual_seed(0)
    model = TransformerXL(tiny_cfg(dropout=0.0, dropatt=0.0, attn_type="abs", mem_len=0, tgt_len=8))
    x = torch.randint(0, 27, (2, 8))
    y = torch.randint(0, 27, (2, 8))

    def grads(targets, positions):
        model.zero_grad()
        training_loss(model(x, None, targets=targets), positions).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    early, late = y.clone(), y.clone()
    early[:, :4] = (y[:, :4] + 1) % 27   # other targets in the first half
    late[:, 4:] = (y[:, 4:] + 1) % 27    # ... or in the second
    half = grads(y, "half")
    assert torch.equal(half, grads(early, "half"))
    assert not torch.allclose(half, grads(late, "half"))
    assert not torch.allclose(grads(y, "full"), grads(early, "full"))
    out = model(x, None, targets=y)
    assert torch.allclose(training_loss(out, "half"), out.nll[:, 4:].mean())
    with pytest.raises(ValueError, match="loss_positions must be one of"):
        TrainConfig(loss_positions="quarter")


def test_bf16_autocast_on_cpu(tmp_path):
    corpus = synthetic_corpus("abc def ")
    res = train(tiny_cfg(), tiny_train_cfg(tmp_path, amp="bf16", max_steps=3, eval_interval=3), corpus,
                progress=False)
    assert math.isfinite(res.train_bpc) and math.isfinite(res.valid_bpc)


def test_ddp_two_cpu_processes_match_single_process(tmp_path):
    """torchrun, 2 ranks with gloo: each reads half the columns, gradients are averaged,
    so the result is single-process training on the full batch (up to float rounding).
    train() itself raises if the two ranks end with different weights. The DDP run is
    interrupted at step 2 and resumed with two processes, and its step-2 checkpoint with one:
    both end as the single process does. All in fp32: with amp="auto" each process measured,
    and where one picked bf16 and the other fp32 (an AMD EPYC with AVX512-BF16, in the whole
    suite) they differed by 0.0038."""
    settings = ["n_layer=1", "d_model=32", "d_head=16", "d_inner=64", "dropout=0.0", "tgt_len=16",
                "mem_len=16", "warmup_steps=1", "eval_interval=2", "eval_tokens=128", "log_interval=2",
                "amp=off"]
    args = ["--preset", "cpu-tiny", "--batch-size", "4", "--max-steps", "4", "--no-progress", "--set", *settings]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "txl_minimal.train", *args, "--out", str(tmp_path / "ddp")]
    for extra in (["--stop-at", "2"], ["--resume"]):
        if extra == ["--resume"]:
            shutil.copytree(tmp_path / "ddp", tmp_path / "ddp-one")  # its step-2 checkpoint, for one process
        proc = subprocess.run(cmd + extra, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    ddp = load_checkpoint(tmp_path / "ddp" / "ckpt.pt")["model"]
    assert load_checkpoint(tmp_path / "ddp" / "ckpt.pt")["step"] == 4

    corpus = load_corpus("text8-mini")
    overrides = dict(s.split("=") for s in settings)
    overrides = {k: v if k == "amp" else float(v) if "." in v else int(v) for k, v in overrides.items()}
    model_cfg, train_cfg = preset("cpu-tiny", batch_size=4, max_steps=4, out=str(tmp_path / "one"), **overrides)
    single = _weights(train(model_cfg, train_cfg, corpus, progress=False).model)
    one = _weights(train(model_cfg, replace(train_cfg, out=str(tmp_path / "ddp-one")), corpus, resume=True,
                         progress=False).model)  # the 2-process checkpoint resumed by one process
    # rank 0's two columns trained alone: what a DDP without gradient averaging would give
    quarter = len(corpus.train) // 4
    rank0 = Corpus("rank0", corpus.train[:2 * quarter], corpus.valid, corpus.test)
    half_cfg = preset("cpu-tiny", batch_size=2, max_steps=4, out=str(tmp_path / "half"), **overrides)
    half = _weights(train(*half_cfg, rank0, progress=False).model)

    def rel_diff(a, b):
        num = sum((a[k] - b[k]).norm() ** 2 for k in a) ** 0.5
        return float(num / sum(a[k].norm() ** 2 for k in a) ** 0.5)

    assert rel_diff(single, ddp) < 1e-5 and rel_diff(single, one) < 1e-5
    assert rel_diff(single, half) > 1e-3  # a rank training on its own columns would be caught


def test_cli_sets_any_field_with_set(tmp_path, capsys):
    """--set KEY=VALUE replaces the old one-field flags (--attn-type abs --mem-len 0 ...)."""
    cpu_precision.cache_clear()  # (measured once per process and size: another test may have)
    main(["--preset", "cpu-tiny", "--max-steps", "2", "--out", str(tmp_path), "--no-progress", "--set",
          "attn_type=abs", "mem_len=0", "d_model=16", "d_head=8", "d_inner=32", "eval_tokens=64", "lr=0.002"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("step 2: train bpc ")
    # on a CPU: measured and said once
    assert lines[1].startswith("step 2: train bpc ") and lines[0].startswith("amp='auto': ")
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert (ckpt["model_config"]["attn_type"], ckpt["model_config"]["mem_len"]) == ("abs", 0)
    assert (ckpt["train_config"]["lr"], ckpt["train_config"]["max_steps"]) == (0.002, 2)


def test_evaluation_lines_without_the_bar_and_no_bar_in_a_log_file(tmp_path, capfd):
    """--no-progress drops the bar only; where stderr is not a terminal (a log file, here
    pytest's capture) the command shows no bar either, so no carriage-return lines."""
    settings = ["--max-steps", "4", "--set", "d_model=16", "d_head=8", "d_inner=32", "eval_tokens=64",
                "eval_interval=2"]
    for flags in (["--no-progress"], []):
        main(["--out", str(tmp_path / str(len(flags))), *flags, *settings])
        out, err = capfd.readouterr()
        assert re.findall(r"^step (\d): train bpc \d\.\d{3}, valid bpc \d\.\d{3}$", out, re.M) == ["2", "4"]
        assert "\r" not in err
    train(tiny_cfg(), tiny_train_cfg(tmp_path / "quiet", max_steps=4), synthetic_corpus("abc def "), progress=False)
    assert capfd.readouterr() == ("", "")  # the library call stays silent (the notebooks use it)


# ----------------------------------------------------------------------------- a preset on a smaller corpus

def test_a_preset_on_a_smaller_corpus_than_its_own_is_shortened():
    mini = load_corpus("text8-mini")
    model_cfg, cfg = preset("gpu-small", corpus="text8-mini")
    sized, note = sized_to_corpus("gpu-small", model_cfg, cfg, mini)
    assert sized.max_steps == 8000 and sized == TrainConfig(**{**vars(cfg), "max_steps": 8000})
    assert note.startswith("gpu-small on text8-mini, not text8: its 20,000 steps of 32 x 256 would read the "
                           "2,759,702 training characters 59.4 times; shortened to max_steps 8,000 (23.7 passes")
    text8 = SimpleNamespace(name="text8", train=range(90_000_000), unit="character")  # its length alone
    assert sized_to_corpus("gpu-small", model_cfg, cfg, text8) == (cfg, None)  # its own corpus: as it is
    for name in ("cpu-tiny", "cpu-small", "cpu-base"):  # text8-mini is theirs
        assert sized_to_corpus(name, *preset(name), mini)[1] is None
    # a length that is not a multiple of eval_interval is rounded down to one: the run ends on an evaluation
    sized, _ = sized_to_corpus("gpu-small", model_cfg, cfg, mini, max_epochs=10)
    assert sized.max_steps == 2000  # 10 passes: 3,368 steps
    tiny = SimpleNamespace(name="text8-mini", train=range(20_000), unit="character")
    assert sized_to_corpus("gpu-small", model_cfg, cfg, tiny)[0].max_steps == 58  # fewer than eval_interval: as is


def test_the_command_line_shortens_a_fallback_and_says_so(tmp_path, monkeypatch, capsys):
    """$TXL_CORPUS gives a preset another corpus than its own: fewer steps, one line; --max-steps wins."""
    monkeypatch.setitem(PRESETS["cpu-tiny"]["train"], "corpus", "text8")  # as if cpu-tiny were text8's
    monkeypatch.setenv("TXL_CORPUS", "text8-mini")
    monkeypatch.setattr("txl_minimal.presets.FALLBACK_EPOCHS", 0.01)  # 0.01 passes: 53 steps of 16 x 32
    argv = ["--no-progress", "--set", "d_model=16", "d_head=8", "d_inner=32", "eval_tokens=64", "amp=off"]
    main(["--out", str(tmp_path / "a"), *argv])
    out = capsys.readouterr().out
    assert re.search(r"^cpu-tiny on text8-mini, not text8: its 2,000 steps of 16 x 32 would read .* shortened to "
                     r"max_steps 53 \(0.0 passes.*; --max-steps sets another$", out, re.M)
    assert load_checkpoint(tmp_path / "a" / "ckpt.pt")["step"] == 53
    assert re.search(r"^step 53: train bpc .* -> \S+ \(best.pt: valid bpc \d\.\d{4} at step 53\)$", out, re.M)
    main(["--out", str(tmp_path / "b"), "--max-steps", "60", *argv])
    out = capsys.readouterr().out
    assert "shortened" not in out and load_checkpoint(tmp_path / "b" / "ckpt.pt")["step"] == 60


def test_a_cli_resume_without_max_steps_goes_on_to_the_runs_own_end(tmp_path, capsys):
    """A run started with --max-steps 6 and resumed without it ends at 6 (its cosine schedule), not
    at the preset's 2,000 nor at a fallback's shortened length."""
    out = str(tmp_path / "r")
    small = ["--set", "d_model=16", "d_head=8", "d_inner=32", "eval_tokens=64", "eval_interval=2", "amp=off"]
    main(["--out", out, "--max-steps", "6", "--stop-at", "2", "--no-progress", *small])
    main(["--out", out, "--resume", "--no-progress", *small])
    ckpt = load_checkpoint(tmp_path / "r" / "ckpt.pt")
    assert (ckpt["step"], ckpt["train_config"]["max_steps"]) == (6, 6)
