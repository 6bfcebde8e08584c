"""Analytical FLOP counts: attention per predicted token, and a whole training step.

Both are built on the same two pieces: ``attention_pairs`` (how many (query, key)
pairs one segment scores) and ``pair_flops`` (what one pair costs in one head).
A multiply-add counts as 2 FLOPs; elementwise work (softmax, masks, LayerNorm,
``rel_shift`` copies) is not counted.

  attention_flops_per_token  the attention scores and weighted sum per predicted
                             token, with adaptive-span memory trimming (the ablation,
                             scripts/ablation.py)
  train_step_flops           every matmul of one training step (benchmarks/bench.py),
                             by TRAIN_STEP_FORMULA
"""
from __future__ import annotations

import math
from typing import Optional
from collections.abc import Sequence

from txl_minimal import validation
from txl_minimal.model import TXLConfig

# Recorded verbatim in the benchmark's result files: change it only with the count.
TRAIN_STEP_FORMULA = ("train step = 3 x forward (backward = 2 x forward); forward per layer = "
                      "2*B*K*d*3hd (qkv on [mem o segment]) + 2*K*d*hd (r_net) + 3*2*B*H*T*K*dh "
                      "(q.k, (q+v).R, p.v) + 2*B*T*hd*d (o_net) + 2*B*T*2*d*d_inner (FF); "
                      "+ 2*B*T*d*V (tied softmax); K = mem_len + T; masked entries counted; "
                      "elementwise ops not counted")


def pair_flops(d_head: int, attn_type: str = "rel") -> int:
    """FLOPs of one (query, key) pair in one head: 2 d_head for q.k, 2 d_head for
    p.v, and 2 d_head more for the positional term (b)+(d) of "rel" / (b) of "shaw"."""
    d_head = validation.count(d_head, "d_head", "pair_flops")
    return (6 if attn_type in ("rel", "shaw") else 4) * d_head


def _check_lengths(caller: str, n_layer, n_head, tgt_len, mem_len) -> None:
    """A ValueError naming the first of the sizes that is not a count (mem_len may be 0): a FLOP count of
    tgt_len 0 would divide by zero, of -1 be a negative number."""
    for name, value in (("n_layer", n_layer), ("n_head", n_head), ("tgt_len", tgt_len)):
        validation.count(value, name, caller)
    validation.count(mem_len, "mem_len", caller, 0)


def attention_pairs(n_layer: int, n_head: int, tgt_len: int, mem_len: int,
                    spans: Optional[Sequence[Sequence[float]]] = None, span_ramp: Optional[int] = None,
                    count: str = "computed") -> int:
    """(query, key) pairs of one segment of one sequence, summed over layers and heads.

    count="computed": what the code multiplies. Every query of the segment meets
    every key of [memory o segment], masked future keys included; with ``spans``
    (per layer, per head, in tokens) the memory of a layer is first trimmed to the
    reach of its longest head, ceil(max z + R) keys (``RelMultiHeadAttn.trim_memory``).
    count="causal": only the pairs that can get weight: query i of the segment sees
    distances x = 0 .. mem_len + i, and a head with span z only those with
    m_z(x) > 0, i.e. x < z + R: min(mem_len + i + 1, ceil(z + R)) keys.
    """
    _check_lengths("attention_pairs", n_layer, n_head, tgt_len, mem_len)
    if count not in ("computed", "causal"):
        raise ValueError(f"count must be 'computed' or 'causal', got {count!r}")
    if spans is not None and span_ramp is None:
        raise ValueError("spans need span_ramp (R)")
    if spans is not None and len(spans) != n_layer:
        raise ValueError(f"spans must hold n_layer={n_layer} rows, got {len(spans)}")
    total = 0
    for layer in range(n_layer):
        heads = [None] * n_head if spans is None else [float(z) for z in spans[layer]]
        if len(heads) != n_head:
            raise ValueError(f"spans[{layer}] must hold n_head={n_head} values, got {len(heads)}")
        reach = [math.inf if z is None else math.ceil(z + span_ramp) for z in heads]
        if count == "computed":
            mem = mem_len if spans is None else min(mem_len, max(reach))
            total += n_head * tgt_len * (mem + tgt_len)
        else:
            total += sum(min(mem_len + i + 1, r) for r in reach for i in range(tgt_len))
    return total


def attention_flops_per_token(n_layer: int, n_head: int, d_head: int, tgt_len: int, mem_len: int,
                              attn_type: str = "rel", spans: Optional[Sequence[Sequence[float]]] = None,
                              span_ramp: Optional[int] = None, count: str = "computed") -> float:
    """Attention FLOPs per predicted token: the scores and the weighted sum, no
    projections; ``attention_pairs`` (see there for ``count`` and ``spans``) times
    ``pair_flops``, over the segment's ``tgt_len`` predictions."""
    _check_lengths("attention_flops_per_token", n_layer, n_head, tgt_len, mem_len)
    pairs = attention_pairs(n_layer, n_head, tgt_len, mem_len, spans, span_ramp, count)
    return pairs * pair_flops(d_head, attn_type) / tgt_len


def train_step_flops(cfg: TXLConfig, batch: int) -> float:
    """FLOPs of one training step of ``batch`` sequences with a full memory, by
    TRAIN_STEP_FORMULA: every matmul, masked entries included, spans not trimmed.
    attn_type "rel" as the formula says; "abs" (the vanilla model) the same without the
    relative encoding's two products, r_net (W_k,R R) and (q+v).R: 2 d_head per pair less.
    Other encodings ("shaw", "abs_far", ...) are not counted."""
    validation.check_config_type(cfg, "train_step_flops")
    batch = validation.count(batch, "batch", "train_step_flops")
    if cfg.attn_type not in ("rel", "abs"):
        raise ValueError(f"train_step_flops counts attn_type='rel' or 'abs' only, got {cfg.attn_type!r}")
    rel = cfg.attn_type == "rel"
    B, T, K = batch, cfg.tgt_len, cfg.mem_len + cfg.tgt_len
    d, hd = cfg.d_model, cfg.n_head * cfg.d_head
    # per layer: qkv on [mem o segment], r_net (no batch dimension), o_net, feed-forward
    matmuls = (2 * B * K * d * 3 * hd + (2 * K * d * hd if rel else 0) + 2 * B * T * hd * d
               + 2 * B * T * 2 * d * cfg.d_inner)
    # q.k, (q+v).R (relative only), p.v: every query against all K keys, in every layer and head
    attention = B * attention_pairs(cfg.n_layer, cfg.n_head, T, cfg.mem_len) * pair_flops(cfg.d_head, cfg.attn_type)
    return 3.0 * (cfg.n_layer * matmuls + attention + 2 * B * T * d * cfg.vocab_size)


def softmax_flops(n_token: int, d_model: int, cutoffs: Sequence[int] = (), div_val: int = 1,
                  d_embed: Optional[int] = None, fractions: Optional[Sequence[float]] = None) -> dict:
    """FLOPs per token of the output layer (``adaptive.ProjectedAdaptiveLogSoftmax``; no cutoffs:
    the plain softmax, 2 d V). "all": every cluster, as ``log_prob`` (evaluation) computes them;
    "train": the head plus tail i for the fraction ``fractions[i]`` of targets that fall in it,
    as ``nll`` computes them (fractions: one per cluster, the head's first). A cluster's cost is
    its projection (d_model x its width, where there is one) plus its rows x its width; the
    head's rows include one per tail cluster."""
    for name, value in (("n_token", n_token), ("d_model", d_model), ("div_val", div_val)):
        validation.count(value, name, "softmax_flops")
    validation.counts("softmax_flops", 1, d_embed=d_embed)
    d_embed = d_embed or d_model
    ends = [0, *cutoffs, n_token]
    costs = []
    for i, (lo, hi) in enumerate(zip(ends[:-1], ends[1:])):
        width = d_embed // div_val ** i
        proj = d_model * width if (div_val > 1 or width != d_model) else 0
        rows = hi - lo + (len(cutoffs) if i == 0 else 0)
        costs.append(2 * (proj + rows * width))
    out = dict(all=sum(costs), clusters=costs)
    if fractions is not None:
        out["train"] = costs[0] + sum(f * c for f, c in zip(fractions[1:], costs[1:]))
    return out
