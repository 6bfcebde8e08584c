"""Tests of txl_minimal.tutorial.ablation and scripts/ablation.py (fast: a tiny model, 3 steps).
The FLOP counts are tested in test_flops.py."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

from txl_minimal.model import TransformerXL, TXLConfig
from txl_minimal.tutorial.ablation import (RESULTS_DIR, contexts, later_half_bpc, load_results, model_config, read_log,
                                           results_table, variants)

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("ablation_script", ROOT / "scripts" / "ablation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# adaptive span ------------------------------------------------------------------------
def test_spans_in_tokens_do_not_change_with_evaluation_lengths():
    """z is a fraction of the TRAINING largest span; set_lengths must not rescale it."""
    model = TransformerXL(TXLConfig(n_layer=1, n_head=2, d_model=16, d_head=8, d_inner=32,
                                    tgt_len=8, mem_len=8, adaptive_span=True))
    before = model.layers[0].dec_attn.spans().detach().clone()
    model.set_lengths(tgt_len=4, mem_len=56)
    torch.testing.assert_close(model.layers[0].dec_attn.spans().detach(), before)


# variants and contexts ----------------------------------------------------------------
def test_variants_cover_the_grid_and_the_span_pair():
    vs = variants()
    grid = {(model_config(v).attn_type, model_config(v).mem_len > 0) for v in vs if v.group == "encoding"}
    assert grid == {(a, m) for a in ("rel", "shaw", "abs") for m in (True, False)}
    fixed, span = (model_config(v) for v in vs if v.group == "span")
    assert not fixed.adaptive_span and span.adaptive_span
    differ = {k for k, v in fixed.to_dict().items() if span.to_dict()[k] != v}
    assert differ <= {"adaptive_span", "span_ramp", "span_init", "span_loss_coeff"}
    assert variants(span_loss_coeff=1e-3)[-1].overrides["span_loss_coeff"] == 1e-3


def test_longer_context_per_variant():
    mem = contexts(TXLConfig(tgt_len=32, mem_len=32))
    assert mem["train"] == dict(tgt_len=32, mem_len=32) and mem["long"] == dict(tgt_len=32, mem_len=128)
    nomem = contexts(TXLConfig(tgt_len=32, mem_len=0))
    assert nomem["train"] == dict(tgt_len=32, mem_len=0) and nomem["long"] == dict(tgt_len=128, mem_len=0)


# the script ---------------------------------------------------------------------------
def test_script_smoke_run_writes_well_formed_results(tmp_path, capsys):
    only = ["rel_mem", "abs_nomem", "rel_mem96_span"]
    _script().main(["--steps", "3", "--tiny", "--threads", "1", "--out", str(tmp_path), "--only", *only])
    assert "3 runs in" in capsys.readouterr().out
    results = load_results(tmp_path / "results.json")
    assert results["meta"]["steps"] == 3 and results["meta"]["tiny"]
    assert list(results["runs"]) == only
    for name, r in results["runs"].items():
        assert r["steps"] == 3
        for ctx in ("train_ctx", "long_ctx"):
            assert 3.0 < r["test_bpc"][ctx] < 6.0  # ~log2(27) = 4.75 after 3 steps
            assert r["attn_flops_per_token"][ctx]["computed"] >= r["attn_flops_per_token"][ctx]["causal"] > 0
        rows = read_log(tmp_path / r["log"])
        assert rows[-1]["step"] == 3 and rows[-1]["valid_bpc"] is not None
        assert not any((tmp_path / name / f).exists() for f in ("ckpt.pt", "best.pt"))  # the weights are not kept
    span = results["runs"]["rel_mem96_span"]
    cfg = span["model_config"]
    assert len(span["spans"]) == cfg["n_layer"] and all(len(row) == cfg["n_head"] for row in span["spans"])
    assert all(0 <= z <= cfg["tgt_len"] + cfg["mem_len"] for row in span["spans"] for z in row)
    assert span["contexts"]["long_ctx"]["mem_len"] == 4 * cfg["mem_len"]
    assert results["runs"]["abs_nomem"]["contexts"]["long_ctx"] == dict(tgt_len=32, mem_len=0)
    assert "abs, no memory" in results_table(results)
    json.dumps(results)  # plain JSON types only


def test_every_seed_is_trained_and_the_mean_and_spread_are_theirs(tmp_path):
    _script().main(["--steps", "2", "--tiny", "--threads", "1", "--out", str(tmp_path), "--only", "abs_far_mem",
                    "--seeds", "2"])
    r = load_results(tmp_path / "results.json")["runs"]["abs_far_mem"]
    assert r["seeds"] == [0, 1] and r["logs"] == ["abs_far_mem/log.csv", "abs_far_mem/seed1/log.csv"]
    assert all(read_log(tmp_path / log)[-1]["step"] == 2 for log in r["logs"])
    for ctx in ("train_ctx", "long_ctx"):
        a, b = r["test_bpc_seeds"][ctx]
        assert a != b                                        # another seed, another model
        assert r["test_bpc"][ctx] == pytest.approx((a + b) / 2, abs=1e-4)
        assert r["test_bpc_sd"][ctx] == pytest.approx(abs(a - b) / 2 ** 0.5, abs=1e-4)
    assert r["model_config"]["attn_type"] == "abs_far" and r["group"] == "abs_far"


def test_shipped_results_are_complete():
    path = RESULTS_DIR / "results.json"
    if not path.exists():
        pytest.skip("no shipped ablation results yet")
    results = load_results(path)
    assert not results["meta"]["tiny"]
    assert [v.name for v in variants()] == list(results["runs"])
    for r in results["runs"].values():
        assert (RESULTS_DIR / r["log"]).exists()
        assert r["steps"] == results["meta"]["steps"]
        assert r["seeds"] == results["meta"]["seeds"] and len(r["seeds"]) >= 3   # >= 3 seeds per run
        assert all((RESULTS_DIR / log).exists() for log in r["logs"])
    assert not list(RESULTS_DIR.glob("**/*.pt"))  # logs and numbers only


def test_results_live_beside_the_package_not_in_it():
    assert RESULTS_DIR == ROOT / "results" / "ablation"


def test_missing_results_name_the_path_and_the_command_that_makes_them(tmp_path):
    path = tmp_path / "results.json"
    with pytest.raises(FileNotFoundError, match="python scripts/ablation.py --out") as err:
        load_results(path)
    assert str(path) in str(err.value)


def test_only_keeps_the_other_variants_and_the_half_loss_run_is_scored_on_later_halves(tmp_path):
    _script().main(["--steps", "2", "--tiny", "--threads", "1", "--out", str(tmp_path), "--only", "rel_mem",
                    "--seeds", "1"])
    _script().main(["--steps", "2", "--tiny", "--threads", "1", "--out", str(tmp_path), "--only", "abs_nomem_half",
                    "--seeds", "1"])
    runs = load_results(tmp_path / "results.json")["runs"]
    assert list(runs) == ["rel_mem", "abs_nomem_half"]  # the first run kept, in variants()' order
    half = runs["abs_nomem_half"]
    assert half["train_config"]["loss_positions"] == "half" and half["group"] == "half_loss"
    assert runs["rel_mem"]["train_config"]["loss_positions"] == "full"
    assert 3.0 < half["test_bpc"]["later_half"] < 6.0 and "later_half" not in runs["rel_mem"]["test_bpc"]


def test_later_half_bpc_scores_every_target_once_with_at_least_half_a_segment_of_context():
    torch.manual_seed(0)
    model = TransformerXL(TXLConfig(n_layer=1, n_head=2, d_model=16, d_head=8, d_inner=32, dropout=0.0,
                                    tgt_len=8, mem_len=0, attn_type="abs"))
    ids = torch.randint(0, 27, (45,))
    nll = []  # by hand: target t (t >= 5) predicted from the window of 8 that ends at or after it
    for start in range(0, len(ids) - 8, 4):
        out = model(ids[start:start + 8][None], None, targets=ids[start + 1:start + 9][None])
        nll += out.nll[0, 4:].tolist()
    assert len(nll) == 40  # targets 5 .. 44: every one once
    expected = sum(nll) / len(nll) / math.log(2)
    assert later_half_bpc(model, ids, 8, batch_size=3) == pytest.approx(expected, rel=1e-6)
