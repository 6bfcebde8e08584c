"""Small, tested helpers behind the tutorial notebooks (any checkpoint, any size).

Section 3.3 (the relative attention score):
  abs_score_terms      the four terms of the vanilla score, from raw tensors
  staged_score_terms, shift_sensitivity   the score after each change of the paper
  head_weights         W_q, W_k,E, W_v, W_k,R, u, v of one head of a model
  rel_score_terms      the four terms of A^rel, pair by pair (no rel-shift)
  diagonal_spread, column_spread, row_spread   "depends only on i - j" / "same for every query"
  distance_matrix, position_bias   mlen + i - j, and term (d) of every head as a curve
  attention_on_repeat  why absolute positions cannot tell memory from segment
  naive_rel_shift, rel_shift_stages the gather that rel_shift replaces, and its steps

Section 3.2 (segment-level recurrence):
  segment_band_mask    which keys a query sees when the text is read in segments
  dependency_reach     which inputs can reach which outputs through N layers
  token_embeddings, band_forward    the recurrent model as one masked forward pass
  segmentwise_forward  the recurrent model as it really runs, segment by segment
  input_influence, influence_span   gradient-based dependency of one output
  capture_layer_inputs, previous_segment_grads   the stop-gradient SG(.)
  bpc_vs_memory        evaluation bpc as the memory grows (calls evaluate.evaluate)

  source_lines         the lines of a function that implement an equation, to print
"""
from __future__ import annotations

import contextlib
import inspect
import math
import time
from typing import Optional
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from tqdm import tqdm

from .. import validation
from ..data import as_ids
from ..evaluate import evaluate as evaluate_segments, read_segments
from ..model import TransformerXL, sinusoid_table
from ..validation import count, index


def _layer(model: TransformerXL, layer, caller: str) -> int:
    """``layer`` as an index of ``model``'s layers (0 .. n_layer - 1), or a ValueError naming the range."""
    return index(layer, "layer", model.cfg.n_layer, caller, "layers in the model")


def _matrix(m, caller: str, name: str = "m") -> torch.Tensor:
    """``m`` as a 2-D float tensor with rows and columns (a list or array too), or a ValueError saying its shape."""
    m = validation.tensor_of(m, name, caller, (2,), "(rows, columns)")
    return m if m.is_floating_point() else m.double()  # (integers hold no NaN or inf to mask with)


def _broadcasts(shape: torch.Size, onto: torch.Size) -> bool:
    """Whether a tensor of ``shape`` broadcasts onto one of shape ``onto`` (a (klen,) mask onto (qlen, klen))."""
    try:
        return torch.broadcast_shapes(shape, onto) == onto
    except RuntimeError:
        return False


def _square_side(n: int, caller: str) -> None:
    """A ValueError when an (n, n) int64 matrix would not fit in this machine's memory (said, not torch's)."""
    validation.fits(8 * n * n, f"an ({n:,}, {n:,}) matrix", caller, "a smaller n (a figure shows a few hundred)")

# ----------------------------------------------------------------------------
# 3.3 The score, term by term
# ----------------------------------------------------------------------------


def abs_score_terms(e_q: torch.Tensor, u_q: torch.Tensor, e_k: torch.Tensor, u_k: torch.Tensor,
                    w_q: torch.Tensor, w_k: torch.Tensor) -> dict[str, torch.Tensor]:
    """The four terms of A^abs_ij = (E_xi + U_i)^T W_q^T W_k (E_xj + U_j).

    e_q, u_q: (T_q, d) word and position embeddings of the queries; e_k, u_k:
    (T_k, d) those of the keys; w_q, w_k: (d_head, d). Returns a dict of
    (T_q, T_k) matrices: "a" E^T Wq^T Wk E, "b" E^T Wq^T Wk U, "c" U^T Wq^T Wk E,
    "d" U^T Wq^T Wk U. Their sum is the full score.
    """
    _check_score_inputs("abs_score_terms", e_q=e_q, u_q=u_q, e_k=e_k, u_k=u_k, w_q=w_q, w_k=w_k)
    qe, qu = e_q @ w_q.T, u_q @ w_q.T
    ke, ku = e_k @ w_k.T, u_k @ w_k.T
    return {"a": qe @ ke.T, "b": qe @ ku.T, "c": qu @ ke.T, "d": qu @ ku.T}


def _check_score_inputs(caller: str, **tensors) -> None:
    """The score terms' inputs: 2-D tensors, embeddings (T, d) and weights (d_head, d) of one width d, the
    weights of one d_head; else a ValueError naming the first that is not (not a matmul's shapes)."""
    for name, t in tensors.items():
        validation.tensor_of(t, name, caller, (2,), "(T, d) for embeddings, (d_head, d) for weights",
                             "analysis.head_weights gives the weights, layer inputs or embeddings the rest")
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{caller}: {name} must be a tensor, got {validation.a_kind(t)}. Fix: "
                             "torch.as_tensor(...)")
    d = {name: t.size(-1) for name, t in tensors.items()}
    heads = {name: t.size(0) for name, t in tensors.items() if name.startswith("w_")}
    if len(set(d.values())) > 1 or len(set(heads.values())) > 1:
        shapes = ", ".join(f"{name} {tuple(t.shape)}" for name, t in tensors.items())
        raise ValueError(f"{caller}: the inputs must share their last width d (and the weights their d_head); got "
                         f"{shapes}. Fix: the embeddings and weights of one model and head")


def head_weights(model: TransformerXL, layer: int, head: int) -> dict[str, torch.Tensor]:
    """The projections of one head, named as in the paper.

    Returns "w_q", "w_kE", "w_v" (d_head, d_model) from ``qkv_net`` and, for
    attn_type "rel", "w_kR" (d_head, d_model) from ``r_net`` and the global
    biases "u", "v" (d_head,) (shared across layers unless ``untie_r``).
    """
    cfg = model.cfg
    layer = _layer(model, layer, "head_weights")
    head = index(head, "head", cfg.n_head, "head_weights", "heads in a layer")  # -1 would give empty rows
    att = model.layers[layer].dec_attn
    D, hd = cfg.d_head, cfg.n_head * cfg.d_head
    rows = slice(head * D, (head + 1) * D)
    w_q, w_k, w_v = att.qkv_net.weight.split(hd, dim=0)
    out = {"w_q": w_q[rows], "w_kE": w_k[rows], "w_v": w_v[rows]}
    if cfg.attn_type == "rel":
        u, v = model.uv(layer)
        out.update(w_kR=att.r_net.weight[rows], u=u[head], v=v[head])
    return out


def staged_score_terms(stage: int, e_q: torch.Tensor, e_k: torch.Tensor, pos_q: torch.Tensor,
                       pos_k: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor,
                       inv_freq: torch.Tensor, w_kR: Optional[torch.Tensor] = None,
                       u: Optional[torch.Tensor] = None, v: Optional[torch.Tensor] = None,
                       clamp_len: int = 0) -> dict[str, torch.Tensor]:
    """The four score terms after the first ``stage`` changes of Sec. 3.3.

    stage 0  vanilla: (E_xi + U_i)^T W_q^T W_k (E_xj + U_j)        (``abs_score_terms``)
    stage 1  U_j -> R_{i-j} in (b) and (d)                         (U_i still there)
    stage 2  U_i^T W_q^T -> u in (c) and v in (d)                  (needs u, v)
    stage 3  W_k -> W_k,E for content, W_k,R for R_{i-j}: A^rel    (needs w_kR)

    e_q (T_q, d), e_k (T_k, d): word embeddings / layer inputs; pos_q (T_q,),
    pos_k (T_k,): absolute positions (U_i = sinusoid of pos_q; i - j = pos_q - pos_k);
    w_q, w_k: (d_head, d). Returns (T_q, T_k) matrices "a", "b", "c", "d".
    """
    stage = count(stage, "stage", "staged_score_terms", 0, 3, " (the changes of Sec. 3.3 made so far)")
    clamp_len = count(clamp_len, "clamp_len", "staged_score_terms", 0)
    _check_score_inputs("staged_score_terms", e_q=e_q, e_k=e_k, w_q=w_q, w_k=w_k)
    for name, p in (("pos_q", pos_q), ("pos_k", pos_k)):
        if not isinstance(p, torch.Tensor) or p.dim() != 1 or len(p) != (e_q if name == "pos_q" else e_k).size(0):
            raise ValueError(f"staged_score_terms: {name} must be a 1-D tensor of one position per "
                             f"{'query' if name == 'pos_q' else 'key'}, got {getattr(p, 'shape', type(p).__name__)}")

    def table(p: torch.Tensor) -> torch.Tensor:
        return sinusoid_table(p.to(inv_freq.dtype), inv_freq).to(e_q.dtype)

    if stage == 0:
        return abs_score_terms(e_q, table(pos_q), e_k, table(pos_k), w_q, w_k)
    if stage >= 2 and (u is None or v is None):
        raise ValueError("stages 2 and 3 need the global biases u and v")
    if stage == 3 and w_kR is None:
        raise ValueError("stage 3 needs w_kR")
    tq, tk = e_q.size(0), e_k.size(0)
    dist = pos_q[:, None] - pos_k[None, :]                      # i - j
    if clamp_len > 0:
        dist = dist.clamp(max=clamp_len)
    R = table(dist.flatten()).view(tq, tk, -1)                   # R_{i-j}: (T_q, T_k, d)
    r = R @ (w_kR if stage == 3 else w_k).T                      # W_k(,R) R_{i-j}
    q, k = e_q @ w_q.T, e_k @ w_k.T                              # W_q E_xi, W_k(,E) E_xj
    terms = {"a": q @ k.T, "b": torch.einsum("ih,ijh->ij", q, r)}
    if stage == 1:
        qu = table(pos_q) @ w_q.T                                # W_q U_i: absolute query position
        terms["c"] = qu @ k.T
        terms["d"] = torch.einsum("ih,ijh->ij", qu, r)
    else:
        terms["c"] = (k @ u)[None, :].expand(tq, tk)             # u^T W_k,E E_xj
        terms["d"] = r @ v                                       # v^T W_k,R R_{i-j}
    return terms


def shift_sensitivity(stage: int, shift: int, e_q: torch.Tensor, e_k: torch.Tensor,
                      pos_q: torch.Tensor, pos_k: torch.Tensor, **weights) -> dict[str, float]:
    """max |change| of each term of ``staged_score_terms`` when the same text is
    moved ``shift`` positions later (e.g. into the next segment). 0 = that term
    does not care about absolute positions."""
    shift = count(shift, "shift", "shift_sensitivity", 0)
    before = staged_score_terms(stage, e_q, e_k, pos_q, pos_k, **weights)
    after = staged_score_terms(stage, e_q, e_k, pos_q + shift, pos_k + shift, **weights)
    return {n: float((after[n] - before[n]).abs().max()) for n in before}


def rel_score_terms(e_q: torch.Tensor, e_k: torch.Tensor, w_q: torch.Tensor, w_kE: torch.Tensor,
                    w_kR: torch.Tensor, u: torch.Tensor, v: torch.Tensor, inv_freq: torch.Tensor,
                    clamp_len: int = 0) -> dict[str, torch.Tensor]:
    """The four terms of A^rel_ij for one head, computed pair by pair with R_{i-j}
    built per pair (no rel-shift): the paper's equation, literally.

    e_q: (T_q, d) layer inputs of the queries (the segment); e_k: (T_k, d) those
    of the keys ([memory o segment], T_k >= T_q, the queries are its last T_q
    rows, so query i sits at key index T_k - T_q + i). Entries with j > i (the
    future) are NaN, as in ``TXLOutput.terms``. Unscaled (no 1/sqrt(d_head)).
    """
    _check_score_inputs("rel_score_terms", e_q=e_q, e_k=e_k, w_q=w_q, w_kE=w_kE, w_kR=w_kR)
    tq, tk = e_q.size(0), e_k.size(0)
    if tk < tq:
        raise ValueError(f"rel_score_terms: e_k ({tk} keys) must hold at least the {tq} queries (they are its last "
                         "rows: [memory o segment])")
    pos_q, pos_k = torch.arange(tq) + (tk - tq), torch.arange(tk)
    terms = staged_score_terms(3, e_q, e_k, pos_q, pos_k, w_q, w_kE, inv_freq, w_kR=w_kR,
                               u=u, v=v, clamp_len=clamp_len)
    future = pos_k[None, :] > pos_q[:, None]
    return {n: t.masked_fill(future, float("nan")) for n, t in terms.items()}


def diagonal_spread(m: torch.Tensor) -> float:
    """max over diagonals (fixed i - j) of (max - min) of the non-NaN entries.

    0 means the matrix depends only on i - j (it is Toeplitz where defined).
    """
    m = _matrix(m, "diagonal_spread").detach()
    worst = 0.0
    for off in range(-(m.size(0) - 1), m.size(1)):
        diag = m.diagonal(off)
        diag = diag[~torch.isnan(diag)]
        if diag.numel() > 1:
            worst = max(worst, float(diag.max() - diag.min()))
    return worst


def column_spread(m: torch.Tensor) -> float:
    """max over columns (fixed key j) of (max - min) of the non-NaN entries.

    0 means every query i gives key j the same value.
    """
    m = _matrix(m, "column_spread").detach()
    lo = m.nan_to_num(nan=float("inf")).min(0).values
    hi = m.nan_to_num(nan=float("-inf")).max(0).values
    ok = torch.isfinite(lo) & torch.isfinite(hi)
    return float((hi - lo)[ok].max()) if ok.any() else 0.0


def row_spread(m: torch.Tensor, where: Optional[torch.Tensor] = None) -> float:
    """max over rows (fixed query i) of (max - min) of the non-NaN entries selected by
    the boolean ``where`` (default: all). 0 means the row is constant there."""
    m = _matrix(m, "row_spread").detach()
    if where is not None and (not isinstance(where, torch.Tensor) or where.dtype != torch.bool
                              or not _broadcasts(where.shape, m.shape)):
        raise ValueError(f"row_spread: where must be a bool tensor of m's shape {tuple(m.shape)}, got "
                         f"{getattr(where, 'shape', type(where).__name__)} {getattr(where, 'dtype', '')}")
    keep = ~torch.isnan(m) if where is None else (~torch.isnan(m) & where)
    lo = m.masked_fill(~keep, float("inf")).min(-1).values
    hi = m.masked_fill(~keep, float("-inf")).max(-1).values
    ok = keep.sum(-1) > 0
    return float((hi - lo)[ok].max()) if ok.any() else 0.0


def distance_matrix(qlen: int, klen: int) -> torch.Tensor:
    """(qlen, klen) long: the distance mlen + i - j from query i (key mlen + i, mlen = klen - qlen) to key j."""
    qlen, klen = (count(v, name, "distance_matrix") for name, v in (("qlen", qlen), ("klen", klen)))
    if klen < qlen:
        raise ValueError(f"distance_matrix: klen={klen} must be at least qlen={qlen} (the queries are the last "
                         "qlen keys: [memory o segment])")
    validation.fits(8 * qlen * klen, f"a ({qlen:,}, {klen:,}) matrix", "distance_matrix", "smaller lengths")
    return torch.arange(qlen)[:, None] + (klen - qlen) - torch.arange(klen)[None, :]


@torch.no_grad()
def position_bias(model: TransformerXL, layer: int, max_dist: int) -> torch.Tensor:
    """(n_head, max_dist + 1): term (d) = v^T W_k,R R_k of every head for distances k = 0..max_dist.

    Term (d) depends on nothing else, so this curve IS term (d) (``attn_type="rel"``).
    """
    cfg = model.cfg
    if cfg.attn_type != "rel":
        raise ValueError("position_bias needs attn_type='rel'")
    layer, max_dist = _layer(model, layer, "position_bias"), count(max_dist, "max_dist", "position_bias", 0)
    validation.fits(4 * (max_dist + 1) * cfg.d_model, f"R for {max_dist + 1:,} distances", "position_bias",
                    "a smaller max_dist")
    v = model.uv(layer)[1]
    R = model.relative_encoding(max_dist + 1).flip(0)  # R_0, ..., R_max_dist
    r = model.layers[layer].dec_attn.r_net(R.to(v.dtype)).view(-1, cfg.n_head, cfg.d_head)
    return torch.einsum("khd,hd->hk", r, v)


def scores_to_probs(terms: dict[str, torch.Tensor], d_head: int) -> torch.Tensor:
    """softmax_j((a+b+c+d) / sqrt(d_head)) with NaN (masked) entries excluded."""
    validation.nonempty(terms, "terms", "scores_to_probs", "a dict of score terms, e.g. {'a': a, 'b': b}")
    d_head = count(d_head, "d_head", "scores_to_probs")
    score = sum(terms.values()) / math.sqrt(d_head)
    return torch.softmax(score.nan_to_num(nan=float("-inf")), dim=-1)


@torch.no_grad()
def attention_on_repeat(model: TransformerXL, segment: torch.Tensor, layer: int = 0) -> torch.Tensor:
    """Attention probabilities (n_head, L, 2L) of ``layer`` when the segment
    (1, L) is read twice in a row, the first copy serving as memory.

    Key j (memory) and key L + j (current segment) hold the same token: an
    absolute-position model gives them identical layer-0 keys. The model's
    ``mem_len`` is set to L for the call and restored afterwards.
    """
    segment = validation.integer_ids(segment, "attention_on_repeat: segment", dims=2)
    layer = _layer(model, layer, "attention_on_repeat")
    if not isinstance(segment, torch.Tensor):
        segment = torch.from_numpy(segment.astype("int64"))
    L = segment.size(1)
    if L == 0:
        raise ValueError("attention_on_repeat: segment is empty (shape (1, 0)). Fix: a segment of token ids, (1, L)")
    twice = torch.cat([segment, segment], dim=1)
    *_, (_, second) = read_segments(model, twice, tgt_len=L, mem_len=L, attn_last=1)
    return second.attn[layer][0]


# ----------------------------------------------------------------------------
# 3.3 The rel-shift trick
# ----------------------------------------------------------------------------


def naive_rel_shift(x: torch.Tensor) -> torch.Tensor:
    """What ``rel_shift`` computes, written as a gather: out[i, j] = x[i, j + qlen - 1 - i].

    x[..., i, c] scores query i against R_{klen-1-c}; out[..., i, j] scores it
    against R_{mlen+i-j}, the distance to key j. Entries with j > mlen + i
    (the future) are NaN.
    """
    validation.check_shift_input(x, "naive_rel_shift")
    *lead, qlen, klen = x.shape
    mlen = klen - qlen
    out = torch.full_like(x, float("nan"))
    for i in range(qlen):
        for j in range(mlen + i + 1):
            out[..., i, j] = x[..., i, j + qlen - 1 - i]
    return out


def rel_shift_stages(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """The three steps of ``rel_shift`` for a 2-D (qlen, klen) matrix.

    "padded" (qlen, klen+1): one zero column on the left; "viewed" (klen+1, qlen):
    the same memory read with the other shape; "shifted" (qlen, klen): rows
    1.. of "viewed" read back as (qlen, klen) -- equal to ``rel_shift(x)``.
    """
    validation.check_shift_input(x, "rel_shift_stages", dims=(2,))
    qlen, klen = x.shape
    padded = F.pad(x, (1, 0))
    viewed = padded.reshape(klen + 1, qlen)
    shifted = viewed[1:].reshape(qlen, klen)
    return {"input": x, "padded": padded, "viewed": viewed, "shifted": shifted}


# ----------------------------------------------------------------------------
# 3.2 Segment-level recurrence: which inputs can reach which outputs
# ----------------------------------------------------------------------------


def segment_band_mask(n: int, seg_len: int, mem_len: int, same_length: bool = False,
                      device: torch.device | str | None = None) -> torch.Tensor:
    """Bool (n, n), True where position t must NOT see position j when a text of n
    tokens is read in segments of ``seg_len`` with a memory of ``mem_len``.

    Query t sees the last ``mem_len`` positions before its segment and its own
    segment up to t (with ``same_length``: only the last ``mem_len`` of those).
    """
    n, seg_len = (count(v, name, "segment_band_mask") for name, v in (("n", n), ("seg_len", seg_len)))
    mem_len = count(mem_len, "mem_len", "segment_band_mask", 0)
    same_length = validation.flag(same_length, "same_length", "segment_band_mask")
    _square_side(n, "segment_band_mask")
    t = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    start = (t // seg_len) * seg_len
    lo = (start - mem_len).clamp(min=0)
    if same_length and mem_len > 0:
        lo = torch.maximum(lo, t - mem_len + 1)
    return ~((j >= lo) & (j <= t))


def dependency_reach(n: int, seg_len: int, mem_len: int, n_layer: int) -> torch.Tensor:
    """Bool (n, n): [t, s] True when input token s can influence output t after
    ``n_layer`` layers (boolean product of the per-layer visibility).

    Each layer mixes positions only through attention (the feed-forward and the
    residual are position-wise), so the reach of N layers is V^N with V the
    visibility of one layer.
    """
    n, seg_len = (count(v, name, "dependency_reach") for name, v in (("n", n), ("seg_len", seg_len)))
    mem_len, n_layer = (count(v, name, "dependency_reach", 0) for name, v in (("mem_len", mem_len),
                                                                                ("n_layer", n_layer)))
    _square_side(n, "dependency_reach")
    visible = (~segment_band_mask(n, seg_len, mem_len)).to(torch.int64)
    reach = torch.eye(n, dtype=torch.int64)
    for _ in range(n_layer):
        wider = ((visible @ reach) > 0).to(torch.int64)
        if torch.equal(wider, reach):  # nothing more to reach: more layers change nothing (a huge n_layer ends)
            break
        reach = wider
    return reach.bool()


def token_embeddings(model: TransformerXL, tokens: torch.Tensor) -> torch.Tensor:
    """E_x scaled as the model does (B, N, d_model); pass it to ``band_forward``."""
    tokens, _ = validation.check_inputs(model, tokens, None, None)  # (B, N) integer ids of its vocabulary
    return model.word_emb(tokens.long()) * model.emb_scale


def band_forward(model: TransformerXL, embeddings: torch.Tensor, seg_len: int,
                 mem_len: Optional[int] = None) -> torch.Tensor:
    """Logits (B, N, V) of the whole sequence in ONE pass, each position seeing
    exactly what it would see when read segment by segment with memory.

    This is the recurrent model without the stop-gradient: positions of earlier
    segments are recomputed, not cached, so autograd sees every path. Uses the
    model's own layers (eval mode; dropout would break the equivalence).
    ``mem_len`` defaults to ``model.cfg.mem_len``.
    """
    cfg = model.cfg
    if cfg.attn_type == "abs_far":
        raise ValueError("band_forward has no one-pass form for attn_type='abs_far': layer 0's memory gets "
                         "positions that depend on the segment reading it. Use segmentwise_forward.")
    seg_len = count(seg_len, "seg_len", "band_forward")
    mem_len = cfg.mem_len if mem_len is None else count(mem_len, "mem_len", "band_forward", 0)
    embeddings = validation.tensor_of(embeddings, "embeddings", "band_forward", (3,), "(batch, N, d_model)",
                                      "token_embeddings(model, tokens)")
    if embeddings.size(-1) != cfg.d_model or not embeddings.is_floating_point():
        raise ValueError(f"band_forward: embeddings must be (batch, N, d_model={cfg.d_model}) floats, got "
                         f"{tuple(embeddings.shape)} {embeddings.dtype}. Fix: token_embeddings(model, tokens)")
    n, x = embeddings.size(1), embeddings
    if cfg.attn_type == "abs":  # every segment restarts at U_0
        x = x + model.pos_emb(torch.arange(n, device=x.device) % seg_len).to(x.dtype)
    pos = None if cfg.attn_type == "abs" else model.relative_encoding(n).to(x.dtype)
    mask = segment_band_mask(n, seg_len, mem_len, cfg.same_length, device=x.device)
    for i, layer in enumerate(model.layers):
        x, _ = layer(x, None, pos, mask, *model.uv(i), return_attn=True)  # the explicit path
    return model.output_logits(x)


def segmentwise_forward(model: TransformerXL, tokens: torch.Tensor, seg_len: int) -> torch.Tensor:
    """Logits (B, N, V) computed as the model really runs: segment by segment,
    carrying ``mems`` (``model.cfg.mem_len`` of them) from one to the next."""
    return torch.cat([out.logits for _, out in read_segments(model, tokens, tgt_len=seg_len)], dim=1)


def input_influence(model: TransformerXL, tokens: torch.Tensor, position: int, seg_len: int,
                    mem_len: Optional[int] = None, seed: int = 0) -> torch.Tensor:
    """(N,) size of d logit_position / d E_{x_s} for every input position s.

    Differentiates a fixed random projection of the output logits at
    ``position`` through ``band_forward`` (so through every segment, which the
    stop-gradient would hide). An entry is exactly 0 when no attention path
    links s to ``position`` (masked probabilities are exactly 0).
    """
    emb = token_embeddings(model, tokens).detach().requires_grad_(True)
    position = index(position, "position", emb.size(1), "input_influence", "tokens in each row")
    logits = band_forward(model, emb, seg_len, mem_len)
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(logits.size(-1), generator=g).to(logits)
    (logits[:, position] @ w).sum().backward()
    return emb.grad.norm(dim=-1).sum(0)


def influence_span(influence: torch.Tensor, position: int) -> int:
    """How far back the dependency reaches: ``position - earliest s`` with a
    non-zero influence (0 when only the position itself matters)."""
    influence = validation.tensor_of(influence, "influence", "influence_span", (1,), "(N,)", "input_influence(...)")
    position = index(position, "position", len(influence), "influence_span", "positions in influence")
    nz = torch.nonzero(influence[: position + 1] != 0).flatten()
    return int(position - nz.min()) if nz.numel() else 0


# ----------------------------------------------------------------------------
# 3.2 The stop-gradient SG(.)
# ----------------------------------------------------------------------------


@contextlib.contextmanager
def capture_layer_inputs(model: TransformerXL) -> Iterator[list[torch.Tensor]]:
    """Record h^{n-1}, the input of every layer n, during the forward passes run
    inside the ``with`` block (what the memory of that layer is made of). The
    tensors keep their autograd graph."""
    captured: list[torch.Tensor] = []
    hooks = [layer.register_forward_pre_hook(lambda m, args: captured.append(args[0]))
             for layer in model.layers]
    try:
        yield captured
    finally:
        for h in hooks:
            h.remove()


def previous_segment_grads(model: TransformerXL, seg1: torch.Tensor, seg2: torch.Tensor,
                           targets2: torch.Tensor, stop_gradient: bool = True
                           ) -> list[Optional[torch.Tensor]]:
    """d loss(segment 2) / d h^{n-1}_tau for every layer n: the gradient that reaches
    the previous segment's hidden states.

    ``stop_gradient=True`` runs the model as it is (memory detached: every entry
    is None). ``False`` builds the memory from the same hidden states without
    detaching them -- what training would do without SG(.).
    """
    validation.flag(stop_gradient, "stop_gradient", "previous_segment_grads")
    with capture_layer_inputs(model) as hidden1:
        out1 = model(seg1)
    mem_len = model.cfg.mem_len
    mems = out1.mems if stop_gradient else [h[:, -mem_len:] for h in hidden1]
    out2 = model(seg2, mems, targets=targets2)
    return list(torch.autograd.grad(out2.loss, hidden1, allow_unused=True))


# ----------------------------------------------------------------------------
# Evaluation with a longer memory
# ----------------------------------------------------------------------------


def bpc_vs_memory(model: TransformerXL, data, mem_lens: Sequence[int],
                  evaluate: Optional[Callable[..., dict]] = None, **eval_kwargs) -> list[float]:
    """bpc of ``data`` for each evaluation memory length in ``mem_lens``.

    Calls ``evaluate(model, data, mem_len=m, **eval_kwargs)`` (default:
    ``txl_minimal.evaluate.evaluate``, which restores the model's lengths).
    """
    if isinstance(mem_lens, (str, bytes)) or not hasattr(mem_lens, "__iter__"):
        raise ValueError(f"bpc_vs_memory: mem_lens must be memory lengths, e.g. [0, 64, 256], got {mem_lens!r}")
    evaluate = evaluate or evaluate_segments
    # each length checked as it comes: mem_lens may be a progress bar (tqdm), read once, as the evaluations run
    return [float(evaluate(model, data, mem_len=count(m, "mem_lens[...]", "bpc_vs_memory", 0), **eval_kwargs)["bpc"])
            for m in mem_lens]


# ----------------------------------------------------------------------------
# 3.1 Context fragmentation and the cost of the vanilla evaluation (notebook 01)
# ----------------------------------------------------------------------------


@torch.no_grad()
def segment_position_nll(model: TransformerXL, data, tgt_len: Optional[int] = None,
                         mem_len: Optional[int] = None) -> torch.Tensor:
    """NLL (nats) of every prediction, as a (n_segments, tgt_len) matrix: row k,
    column i is the prediction made at position i of segment k.

    ``data`` (token ids) is read as ONE stream, in segments of ``tgt_len``, with
    the memory carried from segment to segment as in ``train.evaluate``;
    ``mem_len=0`` starts every segment from scratch (the vanilla evaluation
    whose first positions have no context). Only full segments are scored.
    Lengths left as None keep the model's; they are restored afterwards.
    """
    ids = as_ids(validation.integer_ids(data, "segment_position_nll: data", dims=1))  # (2 rows: not "2 tokens")
    L = model.cfg.tgt_len if tgt_len is None else count(tgt_len, "tgt_len", "segment_position_nll")
    n_seg = (len(ids) - 1) // L
    if n_seg < 1:
        raise ValueError(f"segment_position_nll needs more than tgt_len={L} tokens, got {len(ids)}")
    ids = ids[: n_seg * L + 1].to(next(model.parameters()).device)
    segments = read_segments(model, ids[None, :-1], ids[None, 1:], tgt_len=L, mem_len=mem_len)
    return torch.stack([out.nll[0] for _, out in segments]).cpu()


def throughput(runs: dict, repeats: int = 3, progress: bool = False) -> dict:
    """Predictions per second of named runs: ``{name: (fn, n_predictions)}`` ->
    ``{name: n_predictions / fastest time of fn()}``.

    The runs are interleaved (a, b, ..., a, b, ...) ``repeats`` times and the
    fastest time of each is kept, so a slow spell on a shared machine slows
    every run rather than one of them, and ratios between runs stay meaningful.
    ``progress``: a bar on stderr, one tick per timed run (outside the timed region).
    """
    repeats = count(repeats, "repeats", "throughput")
    validation.nonempty(runs, "runs", "throughput", "{name: (function, predictions it makes)}")
    for name, run in runs.items():
        if not (isinstance(run, tuple) and len(run) == 2 and callable(run[0])):
            raise ValueError(f"throughput: runs[{name!r}] must be (a function, the predictions it makes), got {run!r}")
    best = {name: math.inf for name in runs}
    quiet = {} if progress else {"disable": True}  # with progress, TQDM_DISABLE=1 still silences it (tests)
    with tqdm(total=repeats * len(runs), desc="timing", leave=False, **quiet) as bar:
        for _ in range(repeats):
            for name, (fn, _n) in runs.items():
                t0 = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - t0)
                bar.update(1)
    return {name: n / max(best[name], 1e-12) for name, (_fn, n) in runs.items()}


def source_lines(obj, patterns: Sequence[str]) -> list[tuple[int, str]]:
    """(line number in its file, line) of every source line of ``obj`` (a function,
    method or class) that contains one of ``patterns``: to print the code that
    implements an equation next to it."""
    if isinstance(patterns, str) or not all(isinstance(p, str) for p in patterns or [None]):
        raise ValueError(f"source_lines: patterns must be a list of strings, e.g. ['rel_shift('], got {patterns!r}")
    try:
        lines, start = inspect.getsourcelines(obj)
    except (TypeError, OSError) as e:  # not a function or class, or one without a source file
        raise ValueError(f"source_lines reads the source of a function, method or class, got {obj!r} ({e})") from None
    return [(start + k, line.rstrip()) for k, line in enumerate(lines) if any(p in line for p in patterns)]
