"""A deliberately naive Transformer-XL, one query and one key at a time.

It uses the weights of a ``TransformerXL`` but none of its tricks (no rel-shift,
no batched masks, no memory tensors): position t of layer n attends to every
key j that ``visible(t, j)`` allows, with R_{t-j} built for that one distance.
The tests compare the real model against it. With ``cutoffs`` (the word-level model,
adaptive.py) the embedding and the softmax come from ``naive_embedding`` and
``naive_log_probs``: a token looked up in its cluster's table, each word's probability
computed by hand, both read from a state dict with the authors' names, which
``authors_word_tensors`` makes from the authors' rules (MemTransformerLM,
ProjectedAdaptiveLogSoftmax), independently of adaptive.py.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Optional

import torch
import torch.nn.functional as F

from txl_minimal.model import TransformerXL, sinusoid_table


def segment_visibility(seg_len: int, mem_len: int) -> Callable[[int, int], bool]:
    """Keys that query t sees when the sequence is read in segments with memory:
    the last ``mem_len`` positions before its segment, then its segment up to t."""
    def visible(t: int, j: int) -> bool:
        start = (t // seg_len) * seg_len
        return max(0, start - mem_len) <= j <= t
    return visible


def naive_forward(model: TransformerXL, tokens: torch.Tensor, visible: Callable[[int, int], bool],
                  words: Optional[dict[str, torch.Tensor]] = None) -> torch.Tensor:
    """Logits (B, N, V) for the whole sequence, computed key by key. A model with cutoffs
    reads its embedding and softmax from ``words`` (authors' names; default: its own
    state dict, whose names for them are the authors') and returns log-probabilities."""
    cfg = model.cfg
    assert cfg.attn_type == "rel" and not model.training
    B, N = tokens.shape
    H, D = cfg.n_head, cfg.d_head
    adaptive = model.crit is not None
    words = model.state_dict() if words is None else words
    h = naive_embedding(words, cfg, tokens) if adaptive else model.word_emb(tokens) * math.sqrt(cfg.d_model)

    def R(dist: int) -> torch.Tensor:
        if cfg.clamp_len > 0:
            dist = min(dist, cfg.clamp_len)
        return sinusoid_table(torch.tensor([float(dist)]), model.pos_emb.inv_freq)[0]

    for n, layer in enumerate(model.layers):
        att = layer.dec_attn
        u, v = model.uv(n)  # the global biases: shared, or per layer with untie_r
        Wq, Wk, Wv = att.qkv_net.weight.chunk(3, dim=0)
        x = att.layer_norm(h) if cfg.pre_lnorm else h
        out = torch.zeros_like(h)
        for t in range(N):
            q = (x[:, t] @ Wq.T).view(B, H, D)
            keys = [j for j in range(N) if visible(t, j)]
            scores, values = [], []
            for j in keys:
                k = (x[:, j] @ Wk.T).view(B, H, D)
                r = (att.r_net.weight @ R(t - j)).view(H, D)
                a = (q * k).sum(-1)      # (a) content
                b = (q * r).sum(-1)      # (b) content-dependent position
                c = (u * k).sum(-1)      # (c) global content bias
                d = (v * r).sum(-1)      # (d) global position bias
                scores.append((a + b + c + d) / math.sqrt(D))
                values.append((x[:, j] @ Wv.T).view(B, H, D))
            p = torch.softmax(torch.stack(scores, -1), -1)          # (B, H, keys)
            vec = (p[..., None] * torch.stack(values, 2)).sum(2)    # (B, H, D)
            out[:, t] = att.o_net(vec.reshape(B, H * D))
        h = h + out if cfg.pre_lnorm else att.layer_norm(h + out)
        h = layer.pos_ff(h)
    if adaptive:
        return naive_log_probs(words, cfg, h)
    weight = model.word_emb.weight if model.out_weight is None else model.out_weight
    return F.linear(h, weight, model.out_bias)


# -- the word-level layers, from the authors' names ------------------------------------------------

def _clusters(cfg) -> list[tuple[int, int]]:
    ends = [0, *cfg.cutoffs, cfg.vocab_size]
    return list(zip(ends[:-1], ends[1:]))


def _cluster_of(word: int, cfg) -> int:
    return sum(word >= c for c in cfg.cutoffs)


def authors_word_tensors(cfg, generator: torch.Generator, dtype=torch.float64) -> dict[str, torch.Tensor]:
    """Random word_emb.* and crit.* tensors with the names, shapes and ties of the authors'
    MemTransformerLM for ``cfg`` (a tied pair holds equal tensors, as their state dict does)."""
    d_embed, d_proj, n = cfg.d_embed or cfg.d_model, cfg.d_model, len(cfg.cutoffs)
    tie_projs = cfg.tie_projs or [False] * (n + 1)

    def rand(*shape):
        return torch.randn(*shape, generator=generator, dtype=dtype) * 0.3

    sd = {}
    if cfg.div_val == 1:  # one table and one output layer; projections only where widths differ
        sd["word_emb.emb_layers.0.weight"] = rand(cfg.vocab_size, d_embed)
        sd["crit.out_layers.0.weight"] = rand(cfg.vocab_size, d_embed)
        sd["crit.out_layers.0.bias"] = rand(cfg.vocab_size)
        if d_proj != d_embed:
            sd["word_emb.emb_projs.0"] = rand(d_proj, d_embed)
            for i in range(n + 1):
                sd[f"crit.out_projs.{i}"] = sd["word_emb.emb_projs.0"] if tie_projs[i] else rand(d_proj, d_embed)
    else:  # a table, output layer and projection per cluster, width d_embed // div_val**i
        for i, (lo, hi) in enumerate(_clusters(cfg)):
            d_i = d_embed // cfg.div_val ** i
            sd[f"word_emb.emb_layers.{i}.weight"] = rand(hi - lo, d_i)
            sd[f"word_emb.emb_projs.{i}"] = rand(d_proj, d_i)
            sd[f"crit.out_layers.{i}.weight"] = rand(hi - lo, d_i)
            sd[f"crit.out_layers.{i}.bias"] = rand(hi - lo)
            sd[f"crit.out_projs.{i}"] = sd[f"word_emb.emb_projs.{i}"] if tie_projs[i] else rand(d_proj, d_i)
    if cfg.tie_weights:
        for name in [k for k in sd if k.startswith("crit.out_layers.") and k.endswith(".weight")]:
            sd[name] = sd[name.replace("crit.out_layers", "word_emb.emb_layers")]
    if n:
        sd["crit.cluster_weight"] = rand(n, d_embed)
        sd["crit.cluster_bias"] = rand(n)
    return {k: v.clone() for k, v in sd.items()}


def naive_embedding(sd: dict[str, torch.Tensor], cfg, tokens: torch.Tensor) -> torch.Tensor:
    """(B, N) ids -> (B, N, d_model): each token's row of its cluster's table, projected to
    d_model (if that cluster has a projection), times sqrt(d_model)."""
    out = torch.zeros(*tokens.shape, cfg.d_model, dtype=sd["word_emb.emb_layers.0.weight"].dtype)
    for b in range(tokens.size(0)):
        for t in range(tokens.size(1)):
            word = int(tokens[b, t])
            i = 0 if cfg.div_val == 1 else _cluster_of(word, cfg)
            row = sd[f"word_emb.emb_layers.{i}.weight"][word - _clusters(cfg)[i][0]]
            proj = sd.get(f"word_emb.emb_projs.{i}")
            out[b, t] = row if proj is None else proj @ row
    return out * math.sqrt(cfg.d_model)


def naive_log_probs(sd: dict[str, torch.Tensor], cfg, h: torch.Tensor) -> torch.Tensor:
    """(..., d_model) -> (..., V): log p(w) for every word, by hand, one position at a time.
    p(head word) = its share of the head's softmax; p(tail word of cluster i) = the head's
    probability of cluster i times the word's share of cluster i's own softmax."""
    n = len(cfg.cutoffs)
    flat = h.reshape(-1, h.size(-1))
    out = torch.empty(flat.size(0), cfg.vocab_size, dtype=flat.dtype)

    def softmax(z):
        e = torch.exp(z - z.max())
        return e / e.sum()

    def cluster_scores(x, i):  # x through cluster i's output projection, then its words' logits
        lo, hi = _clusters(cfg)[i]
        j = 0 if cfg.div_val == 1 else i
        weight, bias = sd[f"crit.out_layers.{j}.weight"], sd[f"crit.out_layers.{j}.bias"]
        if cfg.div_val == 1:
            weight, bias = weight[lo:hi], bias[lo:hi]
        proj = sd.get(f"crit.out_projs.{i}")
        z = x if proj is None else x @ proj
        return z, weight @ z + bias

    for p, x in enumerate(flat):
        z, head_words = cluster_scores(x, 0)
        head_clusters = sd["crit.cluster_weight"] @ z + sd["crit.cluster_bias"] if n else z[:0]
        head = softmax(torch.cat([head_words, head_clusters]))
        c0 = _clusters(cfg)[0][1]
        out[p, :c0] = head[:c0]
        for i in range(1, n + 1):
            lo, hi = _clusters(cfg)[i]
            # the authors keep tail cluster i's logit in row n - i of cluster_weight
            out[p, lo:hi] = head[c0 + n - i] * softmax(cluster_scores(x, i)[1])
    return out.log().view(*h.shape[:-1], cfg.vocab_size)
