"""benchmarks/gpu_compare.py on a CPU: its quick mode runs end to end and writes the JSON a GPU
run would (the numbers themselves come from a GPU: benchmarks/README.md)."""
from __future__ import annotations

import importlib.util
import json

import pytest

from tiny import ROOT

spec = importlib.util.spec_from_file_location("gpu_compare", ROOT / "benchmarks" / "gpu_compare.py")
gpu_compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_compare)


def test_quick_mode_on_the_cpu_writes_every_key(tmp_path, capsys):
    out = tmp_path / "gpu.json"
    gpu_compare.main(["--quick", "--device", "cpu", "--base-tree", str(ROOT), "--shapes", "tiny", "--threads", "1",
                      "--levers", "read-each-step", "--kernels", "--json", str(out)])
    res = json.loads(out.read_text())
    assert {"gpu", "device", "torch", "base", "commits", "date", "settings", "levers", "matmul_peak_tflops",
            "train_flops_per_step", "runtime_s", "results"} <= set(res)
    assert res["gpu"] is None and res["device"] == "cpu" and set(res["matmul_peak_tflops"]) == {"fp32", "tf32", "bf16"}
    rows = {(r["mode"], r["variant"]): r for r in res["results"]}
    assert set(rows) == {(m, v) for m in ("train", "eval") for v in ("base", "default", "read-each-step")}
    for (_, variant), r in rows.items():
        assert r["error"] is None, r.get("traceback")
        assert {"shape", "precision", "tree", "unit", "rates", "median", "peak_mib"} <= set(r)
        assert r["tree"] == ("base" if variant == "base" else "head")
    train = rows["train", "default"]
    assert train["median"] > 0 and train["unit"] == "tokens/s" and 0 < min(train["mfu"]) < 1
    assert "vs_base" in train and "vs_default" in rows["train", "read-each-step"]
    # operators per batch-1 evaluation segment; no value read back per segment
    assert rows["eval", "default"]["ops_per_segment"] > 10 and rows["eval", "default"]["reads_per_segment"] == 0
    printed = capsys.readouterr().out
    assert "read-each-step" in printed and "tokens/s" in printed and "predictions/s" in printed


def test_the_gpu_plan_covers_every_shape_precision_and_lever(capsys):
    gpu_compare.main(["--plan"])
    lines = capsys.readouterr().out.splitlines()
    jobs = [line.split() for line in lines[:-1]]
    assert {j[2] for j in jobs} == {"4L-d256", "gpu-small", "paper-base", "wt103-base"}
    assert {j[3] for j in jobs} == {"fp32", "tf32", "bf16"}
    assert {j[5] for j in jobs} == {"base", "default", *gpu_compare.LEVERS}
    assert all(j[3] == "bf16" for j in jobs if j[5] not in ("base", "default"))  # levers: in bf16 only
    assert lines[-1].startswith(f"{len(jobs)} jobs x 3 repetitions")


def test_training_flops_count_the_adaptive_softmax_actually_run():
    """wt103-base: the adaptive softmax's FLOPs, not those of a full 267,735-word softmax, so that its
    MFU counts no FLOPs never computed."""
    model, batch = gpu_compare.shape_config("wt103-base", quick=False)
    full = dict(model, cutoffs=[], tie_projs=None)
    adaptive, plain = gpu_compare.train_flops(model, batch), gpu_compare.train_flops(full, batch)
    tokens, d, V = batch * model["tgt_len"], model["d_model"], model["vocab_size"]
    softmax = 3 * 2 * tokens * d * V  # the full softmax's share of a step
    # uniform targets fall in the head (20,000 words + 3 cluster rows) 7.5% of the time, and in
    # the tails by their sizes: 0.075 x 20,000 + 0.598 x 160,000 + 0.253 x 67,735 rows on average
    head, tails = 20_003, 20_000 ** 2 / V + 160_000 ** 2 / V + 67_735 ** 2 / V
    assert adaptive == pytest.approx(plain - softmax + 3 * 2 * tokens * d * (head + tails), rel=1e-9)
    chars, batch = gpu_compare.shape_config("4L-d256", quick=False)
    from txl_minimal.flops import train_step_flops
    from txl_minimal.model import TXLConfig
    assert gpu_compare.train_flops(chars, batch) == train_step_flops(TXLConfig(**chars), batch)


def test_unknown_levers_and_shapes_are_refused(capsys):
    with pytest.raises(SystemExit):
        gpu_compare.main(["--plan", "--levers", "turbo"])
    assert "unknown lever(s) ['turbo']" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="unknown shape 'huge'"):
        gpu_compare.main(["--plan", "--shapes", "huge"])
