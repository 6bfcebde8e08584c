"""Tests of txl_minimal.ablation and scripts/ablation.py (fast: a tiny model, 3 steps)."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

from txl_minimal.ablation import (ABLATION_DIR, attention_flops_per_token, contexts, load_results,
                                  model_config, read_log, results_table, variants)
from txl_minimal.model import TransformerXL, TXLConfig

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("ablation_script", ROOT / "scripts" / "ablation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# FLOPs ---------------------------------------------------------------------------------
# Hand example: 1 layer, 2 heads, d_head 4, segment L = 2, memory M = 4, "rel":
# one (query, key) pair in one head costs 6 * d_head = 24 FLOPs (q.k, p.v, position term).
KW = dict(n_layer=1, n_head=2, d_head=4, tgt_len=2, mem_len=4, attn_type="rel")


def test_flops_fixed_span_by_hand():
    # computed: each of the 2 queries meets all 6 keys, in 2 heads: 2 * 6 * 24 per token
    assert attention_flops_per_token(**KW) == 2 * 6 * 24 == 288
    # causal: query 0 sees 5 keys (distances 0..4), query 1 sees 6: mean 5.5
    assert attention_flops_per_token(**KW, count="causal") == 2 * 5.5 * 24 == 264
    # "abs" has no positional term: 4 * d_head per pair
    assert attention_flops_per_token(**{**KW, "attn_type": "abs"}) == 2 * 6 * 16


def test_flops_adaptive_span_by_hand():
    spans, R = [[0.5, 1.0]], 1
    # reach ceil(z + R) = 2 for both heads: memory trimmed to 2 keys, 2 + 2 keys per query
    assert attention_flops_per_token(**KW, spans=spans, span_ramp=R) == 2 * 4 * 24 == 192
    # causal: min(M + i + 1, 2) = 2 keys for both queries and both heads
    assert attention_flops_per_token(**KW, spans=spans, span_ramp=R, count="causal") == 2 * 2 * 24
    # a head that reaches past the memory keeps all of it
    assert attention_flops_per_token(**KW, spans=[[0.5, 10.0]], span_ramp=R) == 288
    # per head: 2 keys for head 0; head 1 reaches 11 > 6 available: 5.5 on average
    assert attention_flops_per_token(**KW, spans=[[0.5, 10.0]], span_ramp=R, count="causal") == (2 + 5.5) * 24


def test_flops_computed_count_matches_the_trimmed_memory_of_the_model():
    cfg = TXLConfig(n_layer=2, n_head=2, d_model=16, d_head=8, d_inner=32, tgt_len=6, mem_len=12,
                    adaptive_span=True, span_ramp=2)
    model = TransformerXL(cfg)
    with torch.no_grad():
        model.layers[0].dec_attn.span_frac.copy_(torch.tensor([0.05, 0.1]))
        model.layers[1].dec_attn.span_frac.copy_(torch.tensor([0.3, 0.6]))
    spans = [[float(z) for z in layer.dec_attn.spans().detach()] for layer in model.layers]
    mem = torch.zeros(1, 12, 16)
    keys = [6 + layer.dec_attn.trim_memory(mem).size(1) for layer in model.layers]
    assert keys == [6 + 4, 6 + 12]  # ceil(0.1 * 18 + 2) = 4; ceil(0.6 * 18 + 2) = 13 > 12
    expected = sum(2 * 6 * k for k in keys) * 6 * 8 / 6
    got = attention_flops_per_token(2, 2, 8, 6, 12, "rel", spans=spans, span_ramp=2)
    assert math.isclose(got, expected)


def test_flops_bad_arguments():
    with pytest.raises(ValueError, match="count"):
        attention_flops_per_token(**KW, count="all")
    with pytest.raises(ValueError, match="span_ramp"):
        attention_flops_per_token(**KW, spans=[[1.0, 1.0]])
    with pytest.raises(ValueError, match="n_head"):
        attention_flops_per_token(**KW, spans=[[1.0]], span_ramp=1)


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
        assert not (tmp_path / name / "ckpt.pt").exists()  # the weights are not kept
    span = results["runs"]["rel_mem96_span"]
    cfg = span["model_config"]
    assert len(span["spans"]) == cfg["n_layer"] and all(len(row) == cfg["n_head"] for row in span["spans"])
    assert all(0 <= z <= cfg["tgt_len"] + cfg["mem_len"] for row in span["spans"] for z in row)
    assert span["contexts"]["long_ctx"]["mem_len"] == 4 * cfg["mem_len"]
    assert results["runs"]["abs_nomem"]["contexts"]["long_ctx"] == dict(tgt_len=32, mem_len=0)
    assert "abs, no memory" in results_table(results)
    json.dumps(results)  # plain JSON types only


def test_shipped_results_are_complete():
    path = ABLATION_DIR / "results.json"
    if not path.exists():
        pytest.skip("no shipped ablation results yet")
    results = load_results(path)
    assert not results["meta"]["tiny"]
    assert [v.name for v in variants()] == list(results["runs"])
    for r in results["runs"].values():
        assert (ABLATION_DIR / r["log"]).exists()
        assert r["steps"] == results["meta"]["steps"]
    assert not list(ABLATION_DIR.glob("**/*.pt"))  # logs and numbers only
