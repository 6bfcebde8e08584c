"""Worked answers to the notebooks' exercises, one function per exercise (``exercises``
checks them; ``tests/test_exercises.py`` runs every one through its checker).

Try the exercise before reading its answer: each is a few lines.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from txl_minimal.tutorial import memory_gain


# -- 00 · Build Transformer-XL yourself --------------------------------------------------

def mask(qlen: int, mlen: int, mem_len: int, same_length: bool) -> torch.Tensor:
    """Notebook 00's exercise 1: the mask with ``same_length``, True where query i must not see key j.

    Query i sits at key index ``mlen`` + i of [memory o segment] (``qlen`` queries): it must not
    see the future, and with ``same_length`` any key more than ``mem_len`` - 1 back (as if each
    query had exactly ``mem_len`` keys, itself included; mem_len 0: the plain causal mask).

    Returns:
        Bool (qlen, mlen + qlen), as ``model.attention_mask``.

    Examples:
        >>> from txl_minimal.tutorial import solutions
        >>> solutions.mask(2, 3, 3, True).int()                       # each query sees its 3 latest keys
        tensor([[1, 0, 0, 0, 1],
                [1, 1, 0, 0, 0]], dtype=torch.int32)
    """
    i = torch.arange(qlen)[:, None] + mlen  # each query's own key index
    j = torch.arange(mlen + qlen)[None, :]
    hidden = j > i
    if same_length and mem_len > 0:
        hidden |= j <= i - mem_len
    return hidden


def rel_shift_prediction() -> list:
    """Pad: rows [0 1 2 3], [0 4 5 6], [0 7 8 9]; read the 12 numbers as four rows of three:
    [0 1 2], [3 0 4], [5 6 0], [7 8 9]; drop the first; read back as 3 x 3. The visible entries
    (j <= i) are x's columns of distance i - j; the hidden ones hold a pad zero and x[1, 0]."""
    return [[3, 0, 4], [5, 6, 0], [7, 8, 9]]


def rel_shift(x: torch.Tensor) -> torch.Tensor:
    """The rel-shift as an explicit gather: scores against R_{klen-1} .. R_0 become scores against R_{mlen+i-j}.

    Entry (i, j) of ``x`` (..., qlen, klen) takes column klen - 1 - (mlen + i - j), the column of
    distance mlen + i - j (future entries: any column, the mask hides them).

    Returns:
        (..., qlen, klen), equal to ``model.rel_shift(x)`` wherever a query may see the key.

    Examples:
        >>> import torch
        >>> from txl_minimal.tutorial import solutions
        >>> solutions.rel_shift(torch.tensor([[1, 2, 3], [4, 5, 6]]))    # qlen 2, a memory of 1
        tensor([[2, 3, 3],
                [4, 5, 6]])
    """
    qlen, klen = x.shape[-2:]
    mlen = klen - qlen
    i, j = torch.arange(qlen)[:, None], torch.arange(klen)[None, :]
    column = (klen - 1 - (mlen + i - j)).clamp(0, klen - 1)
    return torch.gather(x, -1, column.expand(*x.shape[:-2], qlen, klen))


def reach(n_layer: int, seg_len: int, mem_len: int, i: int) -> int:
    """The top layer sees its segment up to i and the mem_len positions before the segment:
    i + M back. The earliest state it reaches sits at position q = (-M) mod L of its own
    segment, and from there each lower layer reaches q + M further. With M = L (q = 0)
    this is N x M (+ i): the paper's O(N x L) when M = L."""
    if mem_len == 0:
        return i
    q = -mem_len % seg_len
    return i + mem_len + (n_layer - 1) * (q + mem_len)


def rel_shift_by_padding(x: torch.Tensor) -> torch.Tensor:
    """For comparison, the authors' code's trick: pad, read with the other shape, drop a row (the
    paper's Appendix B reaches the same result by left-shifting the rows of q's product with the
    distances, and one row for v)."""
    *lead, qlen, klen = x.shape
    return F.pad(x, (1, 0)).view(*lead, klen + 1, qlen)[..., 1:, :].reshape(*lead, qlen, klen)


def relative_encoding(klen: int, clamp_len: int, d_model: int) -> torch.Tensor:
    """Distances klen-1 .. 0, capped at clamp_len (if > 0), through the sinusoids of notebook 00's section 1
    (all sines first). With klen = 10, clamp_len = 4 the first six rows are all R_4."""
    dist = torch.arange(klen - 1, -1, -1.0)
    if clamp_len > 0:
        dist = dist.clamp(max=clamp_len)
    omega = 1.0 / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    angles = dist[:, None] * omega[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def attention_layer(att, h: torch.Tensor, mem: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor,
                    u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Notebook 00's ``my_attention`` with the distances and the mask given: LayerNorm(h + W_o attention).

    ``att`` holds the layer's modules (``qkv_net``: W_q, W_k,E, W_v; ``r_net``: W_k,R; ``o_net``: W_o;
    ``layer_norm``; ``n_head``, ``d_head``, ``cfg``), ``h`` (B, qlen, d) the segment, ``mem`` (B, mlen, d)
    the memory, ``pos`` R_{klen-1} .. R_0, ``mask`` True = hidden, ``u`` and ``v`` the biases
    (``check_attention_layer`` says more). (a) + (c) is (q_i + u)^T k_j, (b) + (d) the rel-shifted
    (q_i + v)^T W_k,R R; both scaled by 1/sqrt(d_head), masked, softmaxed over the keys of h~ =
    [mem o h]. With ``pre_lnorm`` the LayerNorm comes first, on h~, and the output is h + W_o attention.

    Returns:
        (B, qlen, d_model): the layer's output, as ``RelMultiHeadAttn.forward``'s first result.

    Examples:
        >>> from txl_minimal.tutorial import solutions
        >>> from txl_minimal.tutorial.exercises import check_attention_layer
        >>> check_attention_layer(solutions.attention_layer)
        check_attention_layer: right
        True
    """
    B, qlen, _ = h.shape
    H, D = att.n_head, att.d_head
    h_tilde = torch.cat([mem, h], dim=1)                                  # [SG(m) o h]: keys and values
    x = att.layer_norm(h_tilde) if att.cfg.pre_lnorm else h_tilde
    q, k, val = att.qkv_net(x).chunk(3, dim=-1)
    q, k, val = (t.view(B, t.size(1), H, D).transpose(1, 2) for t in (q[:, -qlen:], k, val))  # (B, H, len, D)
    r = att.r_net(pos).view(-1, H, D).transpose(0, 1)                      # W_k,R R: (H, klen, D)
    ac = (q + u[:, None]) @ k.transpose(-1, -2)                            # (a) + (c)
    bd = rel_shift_by_padding((q + v[:, None]) @ r.transpose(-1, -2))      # (b) + (d)
    prob = ((ac + bd) / math.sqrt(D)).masked_fill(mask, float("-inf")).softmax(-1)
    out = att.o_net((prob @ val).transpose(1, 2).reshape(B, qlen, H * D))
    return h + out if att.cfg.pre_lnorm else att.layer_norm(h + out)     # the residual, then the LayerNorm


# -- 01 · Context fragmentation ----------------------------------------------------------

def sliding_cost(n_pred: int, context: int) -> int:
    """The first window scores its own positions (min(n_pred, context) computed); every later
    prediction needs a window of ``context`` positions of its own."""
    return min(n_pred, context) + max(0, n_pred - context) * context


def context_range(seg_len: int, mem_len: int) -> tuple[int, int]:
    """Query i sees the memory and keys 0..i of its segment: mem_len + 1 up to mem_len + seg_len."""
    return mem_len + 1, mem_len + seg_len


# -- 02 · Relative attention --------------------------------------------------------------

def shaw_score(q: torch.Tensor, table: torch.Tensor, klen: int) -> torch.Tensor:
    """Score every query against the table row of every distance klen-1 .. 0 (clipped at the
    table's last row), then rel-shift, as for Transformer-XL's (b) + (d)."""
    dist = torch.arange(klen - 1, -1, -1).clamp(max=table.size(0) - 1)
    return rel_shift_by_padding(q @ table[dist].T)


def shaw_far_keys() -> int:
    """The last query sees distances 255 .. 0; every distance from D = 32 on reads the table's
    last row, so keys at distances 32 .. 255 all score like the oldest: 224 of them."""
    return 256 - 32


def distinct_position_bias() -> int:
    """(d) depends on the distance alone, and the queries see distances 0 .. 255 (query 127,
    key 0): one value per distance, 256."""
    return 128 + 128


def position_bias(model, layer: int, max_dist: int) -> torch.Tensor:
    """(d) = v^T W_k,R R_k: the layer's W_k,R applied to R_0 .. R_max_dist, dotted with v per head."""
    cfg = model.cfg
    R = model.pos_emb(torch.arange(max_dist + 1.0))                        # R_0 .. R_max_dist
    r = model.layers[layer].dec_attn.r_net(R).view(max_dist + 1, cfg.n_head, cfg.d_head)
    v = model.uv(layer)[1]                                                  # (n_head, d_head)
    return (r * v).sum(-1).T


def query_position_curve(model, layer: int, h: torch.Tensor, max_dist: int) -> torch.Tensor:
    """(b) + (d) = (q + v)^T W_k,R R_k: (b) and (d) share W_k,R R_k, so the query's own q joins v, and with
    q fixed the sum depends on the distance alone. q = W_q h is the first third of qkv_net, split by head."""
    att = model.layers[layer].dec_attn
    q = att.qkv_net(h).chunk(3)[0].view(att.n_head, att.d_head)               # W_q h, one row per head
    R = model.pos_emb(torch.arange(max_dist + 1.0))                           # R_0 .. R_max_dist
    r = att.r_net(R).view(max_dist + 1, att.n_head, att.d_head)               # W_k,R R_k
    return ((q + model.uv(layer)[1]) * r).sum(-1).T                           # (n_head, max_dist + 1)


# -- 03 · Segment-level recurrence --------------------------------------------------------

def memory_shape(batch: int, seg_len: int, mem_len: int, d_model: int, n_segments: int) -> tuple[int, int, int]:
    """The memory keeps the last mem_len states that entered the layer: after n segments
    that is all n x seg_len of them until it is full."""
    return batch, min(mem_len, n_segments * seg_len), d_model


# -- 04 · Training on text8 ---------------------------------------------------------------

# Exercise 1's prediction (W = 100, S = 500, cosine to 0), as fractions of the peak: step 50 is halfway up
# the warm-up, 50/100; step 300 is halfway down the decay, (1 + cos(pi/2))/2; step 400, (1 + cos(3 pi/4))/2.
LR_PREDICTION = [0.5, 0.5, (1 + math.cos(3 * math.pi / 4)) / 2]  # 0.146


def lr(step: int, lr: float, warmup_steps: int, max_steps: int, min_lr: float) -> float:
    """Linear warm-up to lr over warmup_steps, then half a cosine down to min_lr at max_steps."""
    if step <= warmup_steps:
        return lr * step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))


def param_count(cfg) -> int:
    """Embedding (tied with the softmax) + softmax bias + per layer: W_q, W_k,E, W_v, the output
    projection, W_k,R (relative only), two LayerNorms and the feed-forward net; + u and v."""
    hd, d = cfg.n_head * cfg.d_head, cfg.d_model
    rel = cfg.attn_type == "rel"
    attention = 3 * d * hd + hd * d + (d * hd if rel else 0) + 2 * d
    feed_forward = d * cfg.d_inner + cfg.d_inner + cfg.d_inner * d + d + 2 * d
    return cfg.vocab_size * d + cfg.vocab_size + cfg.n_layer * (attention + feed_forward) + (2 * hd if rel else 0)


# -- 05 · Attention over memory -----------------------------------------------------------

# Exercise 1's prediction: query i (0 .. L-1) sees M + i + 1 keys, at distances 0 .. M + i, so even
# attention has mean distance (M + i) / 2; the mean over i is (M + (L - 1) / 2) / 2 with M = 512, L = 128.
UNIFORM_DISTANCE = (512 + (128 - 1) / 2) / 2  # 287.75


def mean_distance(attn: torch.Tensor) -> torch.Tensor:
    """Key j is (klen - qlen + i) - j back from query i; weight by p_ij, sum over j, average over i."""
    qlen, klen = attn.shape[-2:]
    dist = (torch.arange(qlen)[:, None] + klen - qlen - torch.arange(klen)[None, :]).clamp(min=0)
    return (attn * dist).sum(-1).mean(-1)


# Exercise 1 (b), the bug: the given function counts key j as i - j back, as if there were no
# memory; query i is key klen - qlen + i, so key j is klen - qlen + i - j back: `mean_distance` above.

# Exercise 2's predictions (M = 512 keys): even weight on the 16 nearest, log 16 / log 512; half on
# the key just before the query and half spread over the other 511: (log 2 + log(511) / 2) / log 512.
ENTROPY_PREDICTION = [math.log(16) / math.log(512), (math.log(2) + math.log(511) / 2) / math.log(512)]


def entropy(attn: torch.Tensor) -> torch.Tensor:
    """-sum p log p per query, over log(number of visible keys); query i sees klen - qlen + i + 1."""
    qlen, klen = attn.shape[-2:]
    n_seen = torch.arange(qlen) + klen - qlen + 1
    h = -(attn * attn.clamp_min(1e-30).log()).sum(-1)
    keep = n_seen > 1
    return (h[..., keep] / n_seen[keep].log()).mean(-1)


# -- 06 · How much context is used? -------------------------------------------------------

def paired_gain(short, long) -> tuple[float, float]:
    """The gain per target, then its mean and the standard error of that mean."""
    diff = np.asarray(short, dtype=np.float64) - np.asarray(long, dtype=np.float64)
    return float(diff.mean()), float(diff.std(ddof=1) / math.sqrt(diff.size))


def relative_gain(losses: dict, r: float) -> dict:
    """Baseline b = the best short-context loss of the group per target; keep the hardest r of
    targets; count only improvements over b; compare perplexities."""
    base = np.min([np.asarray(v, dtype=np.float64)[0] for v in losses.values()], axis=0)
    hard = np.argsort(-base, kind="stable")[:max(1, math.ceil(r * base.size))]
    ref = math.exp(base[hard].mean())
    return {name: (ref - math.exp(np.minimum(base[hard], np.asarray(v, dtype=np.float64)[1, hard]).mean())) / ref
            for name, v in losses.items()}


# -- 07 · Ablations and adaptive span -----------------------------------------------------

# Exercise 1's prediction, z = 50, ρ = 20: 1 up to k = 50; (20 + 50 - 54) / 20 = 0.8; (20 + 50 - 66) / 20 = 0.2;
# 0 from k = 70 on.
SPAN_MASK_PREDICTION = [1.0, 0.8, 0.2, 0.0]  # at k = 30, 54, 66, 75


def span_mask(dist: torch.Tensor, z: torch.Tensor, ramp: int) -> torch.Tensor:
    """1 up to distance z, 0 beyond z + ρ, linear in between; one mask per head."""
    return ((ramp + z.view(-1, *[1] * dist.dim()) - dist) / ramp).clamp(0.0, 1.0)


def span_memory(spans: torch.Tensor, ramp: int, mem_len: int) -> int:
    """A head weights distance k only if k < z + ρ, and memory position k is at distance k from
    the segment's first query: the layer needs ceil(max z + ρ) - 1 positions (at most M); the checker
    also accepts ceil(max z + ρ), what ``SpanAttn.trim_memory`` keeps."""
    return min(mem_len, math.ceil(float(spans.max()) + ramp) - 1)


def adaptive_log_prob(head: torch.Tensor, tails: list) -> torch.Tensor:
    """Head words: read off the head. Tail cluster i: its cluster's log-probability (the head's
    i-th column from the end) plus the word's within the cluster: log p = log p_c + log p(w | c)."""
    n = len(tails)
    parts = [head[..., :head.size(-1) - n]]
    parts += [head[..., -i, None] + tail for i, tail in enumerate(tails, start=1)]
    return torch.cat(parts, dim=-1)


def adaptive_params(n_token: int, d: int, cutoffs: list, div_val: int) -> int:
    """Per cluster i of width d_i = d // div_val**i: its table (tied: shared with the output
    weight), an input and an output projection d x d_i, an output bias per word; plus the
    head's n cluster weights (d each) and biases."""
    ends, n = [0, *cutoffs, n_token], len(cutoffs)
    total = n * d + n
    for i, (lo, hi) in enumerate(zip(ends[:-1], ends[1:])):
        d_i = d // div_val ** i
        total += (hi - lo) * d_i + 2 * d * d_i + (hi - lo)
    return total


# -- 09 · Your own text -------------------------------------------------------------------

def memory_gain_prediction() -> tuple[float, str]:
    """Exercise 1 of notebook 09 as results/memory_by_position.json answers it: the share of the saving made at
    the segment's first 8 positions (the two texts' mean) and which text saves more past them."""
    results = memory_gain.load()
    shares = memory_gain.start_shares(results)
    return round((shares["code"] + shares["text8"]) / 2, 2), memory_gain.past_start_verdict(results)[0]


def gain_by_class(text: str, nll_without, nll_with) -> dict:
    """Entry t is the loss of predicting text[t + 1]: group the gains by that character's class."""
    gain = np.asarray(nll_without, dtype=np.float64) - np.asarray(nll_with, dtype=np.float64)
    predicted = text[1:len(gain) + 1]
    kinds = np.array(["name" if ch.isalnum() or ch == "_" else "space" if ch.isspace() else "other"
                      for ch in predicted])
    return {k: float(gain[kinds == k].mean()) if (kinds == k).any() else float("nan")
            for k in ("name", "space", "other")}
