"""amp="auto" and attention="auto": chosen by measurement, once per run, by rank 0 for every DDP
rank, recorded in the checkpoint and kept by a resume; and a resume's loading on any device."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import txl_minimal.devices as devices
import txl_minimal.train as train_py
from txl_minimal.checkpoint import load_checkpoint
from txl_minimal.train import choose_precision, cpu_precision, time_training_step, train

from tiny import ROOT, synthetic_corpus, tiny_cfg, tiny_train_cfg


@pytest.fixture(autouse=True)
def fresh_measurements():
    cpu_precision.cache_clear()  # measured once per process and size: start each test without one
    yield
    cpu_precision.cache_clear()


def test_a_run_records_its_choice_and_a_resume_keeps_it(tmp_path, monkeypatch, capsys):
    corpus = synthetic_corpus("abc def ")
    monkeypatch.setattr(devices, "bf16_speedup", lambda *a, **k: 2.5)  # a CPU with fast bf16
    cfg = tiny_train_cfg(tmp_path, amp="auto", max_steps=4, eval_interval=2)
    train(tiny_cfg(), cfg, corpus, stop_at=2, progress=False)
    choice = load_checkpoint(tmp_path / "ckpt.pt")["choice"]
    assert (choice["amp"], choice["fast_attn"]) == ("bf16", True) and "2.50x fp32" in choice["reason"]
    capsys.readouterr()
    # resumed where bf16 would now measure slower: the run goes on as it started, measuring nothing
    cpu_precision.cache_clear()
    monkeypatch.setattr(devices, "bf16_speedup", lambda *a, **k: pytest.fail("measured again on resume"))
    res = train(tiny_cfg(), cfg, corpus, resume=True, progress=False)
    assert res.step == 4 and load_checkpoint(tmp_path / "ckpt.pt")["choice"] == choice
    assert "as when this run started" in capsys.readouterr().out
    # a choice named on resume wins over the recorded one
    res = train(tiny_cfg(), tiny_train_cfg(tmp_path, amp="off", attention="explicit", max_steps=6,
                                          eval_interval=2), corpus, resume=True, progress=False)
    again = load_checkpoint(tmp_path / "ckpt.pt")["choice"]
    assert (again["amp"], again["fast_attn"], res.model.fast_attn) == ("off", False, False)


def test_resume_with_fp16_of_a_run_saved_without_loss_scaling(tmp_path, capsys):
    """Issue 33: a run saved with amp off (an empty GradScaler state), resumed with fp16: the loss
    scale starts afresh instead of 'The source state dict is empty'; and back again."""
    corpus = synthetic_corpus("abc def ")
    train(tiny_cfg(), tiny_train_cfg(tmp_path, max_steps=6, eval_interval=2), corpus, stop_at=2, progress=False)
    res = train(tiny_cfg(), tiny_train_cfg(tmp_path, amp="fp16", max_steps=6, eval_interval=2), corpus,
                resume=True, stop_at=4, progress=False)
    assert res.step == 4 and "loss scale starts afresh" in capsys.readouterr().out
    assert load_checkpoint(tmp_path / "ckpt.pt")["scaler"]  # fp16: a scale was saved
    res = train(tiny_cfg(), tiny_train_cfg(tmp_path, max_steps=6, eval_interval=2), corpus, resume=True,
                progress=False)
    assert res.step == 6 and "saved with fp16 loss scaling" in capsys.readouterr().out


def test_resume_loads_the_checkpoint_on_the_cpu(tmp_path, monkeypatch):
    """On a GPU the checkpoint was loaded with map_location=<the GPU>, so the CPU generator's state
    arrived as a CUDA tensor: 'RNG state must be a torch.ByteTensor' on every GPU resume. It is read
    on the CPU now, and each part moves its own state where it lives."""
    corpus = synthetic_corpus("abc def ")
    cfg = tiny_train_cfg(tmp_path, max_steps=4, eval_interval=2)
    train(tiny_cfg(), cfg, corpus, stop_at=2, progress=False)
    seen = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: seen.append(k.get("map_location")) or real_load(*a, **k))
    assert train(tiny_cfg(), cfg, corpus, resume=True, progress=False).step == 4
    assert seen and all(str(where) == "cpu" for where in seen)


def test_the_gpu_measurement_picks_the_fastest_step(monkeypatch, capsys):
    """On a GPU "auto" times real training steps (a matmul alone said bf16; steps of a small model on
    an H100 said fp32). The choosing is the same code on any device: here with made-up timings."""
    timings = {("bf16", True): 17.5e-3, ("bf16", False): 17.1e-3, ("off", True): 13.4e-3, ("off", False): 12.1e-3}
    monkeypatch.setattr(devices, "time_training_step", lambda cfg, b, d, amp, fast: timings[amp, fast])
    monkeypatch.setattr(devices, "_low_precision", lambda device: "bf16")
    monkeypatch.setattr(devices, "_device_name", lambda device: "a GPU")
    model_cfg, cfg = train_py.preset("cpu-tiny", device="cpu")
    choice = choose_precision(cfg, model_cfg, torch.device("cuda"))  # (nothing runs on it: timings are made up)
    assert (choice["amp"], choice["fast_attn"]) == ("off", False)
    line = capsys.readouterr().out.strip()
    assert "fp32 explicit 12.1 ms" in line and "bf16 fast 17.5 ms" in line and line.endswith("chooses)")
    # a precision named by the user is kept; only the attention path is measured
    choice = choose_precision(train_py.replace(cfg, amp="bf16"), model_cfg, torch.device("cuda"))
    assert (choice["amp"], choice["fast_attn"]) == ("bf16", False)

    def out_of_memory(cfg, b, d, amp, fast):
        if amp == "off":
            raise torch.cuda.OutOfMemoryError("fp32 does not fit")
        return timings[amp, fast]
    monkeypatch.setattr(devices, "time_training_step", out_of_memory)
    assert choose_precision(cfg, model_cfg, torch.device("cuda"))["amp"] == "bf16"


def test_time_training_step_runs_a_real_step():
    cfg = tiny_cfg(dropout=0.0, dropatt=0.0)
    for amp in ("off", "bf16"):
        for fast_attn in (True, False):
            assert 0 < time_training_step(cfg, 2, torch.device("cpu"), amp, fast_attn, steps=2) < 10


WORKER = textwrap.dedent("""
    import json, os, sys
    import torch.distributed as dist
    import txl_minimal.devices as devices
    import txl_minimal.train as train_py
    rank = int(os.environ["RANK"])
    # each rank's own measurement disagrees: rank 0 would pick bf16, rank 1 fp32
    devices.bf16_speedup = lambda *a, **k: 2.0 if rank == 0 else 0.5
    dist.init_process_group("gloo")
    model_cfg, cfg = train_py.preset("cpu-tiny", device="cpu")
    choice = train_py.choose_once(cfg, model_cfg, train_py.torch.device("cpu"), None, rank, 2)
    open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w").write(json.dumps(choice))
    sys.stdout.flush()
    dist.barrier()  # both ranks have their choice
    # no destroy_process_group: on torch 2.3's gloo it hung now and then (1 launch in 16 here, and
    # CI's test-min; pytorch/pytorch#75097), and this test is about the broadcast, not the teardown
    os._exit(0)
""")


def test_ddp_ranks_share_rank_0s_choice(tmp_path):
    """A precision chosen by measurement is the same on every rank: decided once and sent."""
    (tmp_path / "worker.py").write_text(WORKER)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(tmp_path / "worker.py"), str(tmp_path)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    choices = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert choices[0] == choices[1] and choices[0]["amp"] == "bf16"
    assert proc.stdout.count("amp='auto'") == 1  # measured (and said) once, by rank 0


def test_measuring_leaves_the_callers_random_state_alone():
    """Notebook 04 measures a few steps before it trains and samples: its numbers must not move."""
    torch.manual_seed(3)
    before = torch.get_rng_state()
    time_training_step(tiny_cfg(), 2, torch.device("cpu"), "off", True, steps=1)
    assert torch.equal(torch.get_rng_state(), before)
