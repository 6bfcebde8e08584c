"""Tests of txl_minimal.flops: the attention count of the ablation and the training-step
count of the benchmark, each pinned to a value computed by hand."""
from __future__ import annotations

import math

import pytest
import torch

from txl_minimal.flops import (TRAIN_STEP_FORMULA, attention_flops_per_token, attention_pairs, pair_flops,
                               train_step_flops)
from txl_minimal.model import TransformerXL, TXLConfig

torch.set_num_threads(1)


# attention per predicted token (the ablation) ---------------------------------------------
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


def test_pair_cost_per_encoding():
    assert pair_flops(4, "rel") == pair_flops(4, "shaw") == 24 and pair_flops(4, "abs") == 16
    # the pairs of the hand example: 2 queries x 6 keys x 2 heads (computed), 2 x 5.5 x 2 (causal)
    assert attention_pairs(1, 2, 2, 4) == 24 and attention_pairs(1, 2, 2, 4, count="causal") == 22


# a whole training step (the benchmark) ----------------------------------------------------
def test_train_step_flops_by_hand():
    # the hand example above as a model: d_model 8, d_inner 16, 27 characters, batch B = 1;
    # K = M + L = 6 keys, hd = 2 heads x 4 = 8
    cfg = TXLConfig(n_layer=1, n_head=2, d_model=8, d_head=4, d_inner=16, tgt_len=2, mem_len=4)
    qkv, r_net, attn = 2 * 6 * 8 * 24, 2 * 6 * 8 * 8, 6 * 2 * 2 * 6 * 4  # 2304, 768, 576
    o_net, ff, softmax = 2 * 2 * 8 * 8, 2 * 2 * 2 * 8 * 16, 2 * 2 * 8 * 27  # 256, 1024, 864
    assert train_step_flops(cfg, batch=1) == 3 * (qkv + r_net + attn + o_net + ff + softmax) == 17376
    # its attention products are the "computed" attention count of every predicted token
    assert attn == 2 * attention_flops_per_token(**KW)
    # linear in the batch except r_net, which has no batch dimension
    assert train_step_flops(cfg, batch=3) == 3 * (3 * (qkv + attn + o_net + ff + softmax) + r_net)
    assert "3*2*B*H*T*K*dh" in TRAIN_STEP_FORMULA


def test_train_step_flops_reproduce_the_recorded_benchmark():
    """benchmarks/results-cpu.json: 58.5 GFLOP per step at mem_len 128, 102.6 at 512."""
    model = dict(n_layer=4, d_model=256, n_head=4, d_head=64, d_inner=1024)  # bench.MODEL
    assert train_step_flops(TXLConfig(**model, tgt_len=128, mem_len=128), 16) == 58_469_646_336
    assert train_step_flops(TXLConfig(**model, tgt_len=128, mem_len=512), 16) == 102_560_169_984


def test_train_step_flops_of_the_vanilla_model_by_hand():
    """The hand example as a vanilla model: no W_k,R R and no (q+v).R, so 4 d_head per pair
    (notebook 04's "Why?" compares the two this way)."""
    cfg = TXLConfig(n_layer=1, n_head=2, d_model=8, d_head=4, d_inner=16, tgt_len=2, mem_len=4, attn_type="abs")
    qkv, attn = 2 * 6 * 8 * 24, 4 * 2 * 2 * 6 * 4  # 2304; q.k and p.v only: 384
    o_net, ff, softmax = 2 * 2 * 8 * 8, 2 * 2 * 2 * 8 * 16, 2 * 2 * 8 * 27  # 256, 1024, 864
    assert train_step_flops(cfg, batch=1) == 3 * (qkv + attn + o_net + ff + softmax) == 14496
    assert attn == 2 * attention_flops_per_token(**{**KW, "attn_type": "abs"})
    rel = TXLConfig(**{**cfg.to_dict(), "attn_type": "rel"})
    # what the relative encoding adds: r_net (2 K d hd) and a third pair product (2 d_head per pair)
    assert train_step_flops(rel, 1) - train_step_flops(cfg, 1) == 3 * (2 * 6 * 8 * 8 + 2 * 2 * 2 * 6 * 4)


def test_train_step_flops_only_for_the_encodings_it_counts():
    for attn_type in ("shaw", "abs_far"):
        with pytest.raises(ValueError, match="'rel' or 'abs'"):
            train_step_flops(TXLConfig(attn_type=attn_type), 1)
