"""A deliberately naive Transformer-XL, one query and one key at a time.

It uses the weights of a ``TransformerXL`` but none of its tricks (no rel-shift,
no batched masks, no memory tensors): position t of layer n attends to every
key j that ``visible(t, j)`` allows, with R_{t-j} built for that one distance.
The tests compare the real model against it.
"""
from __future__ import annotations

import math
from typing import Callable

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


def naive_forward(model: TransformerXL, tokens: torch.Tensor,
                  visible: Callable[[int, int], bool]) -> torch.Tensor:
    """Logits (B, N, V) for the whole sequence, computed key by key."""
    cfg = model.cfg
    assert cfg.attn_type == "rel" and not model.training
    B, N = tokens.shape
    H, D = cfg.n_head, cfg.d_head
    h = model.word_emb(tokens) * math.sqrt(cfg.d_model)

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
    weight = model.word_emb.weight if model.out_weight is None else model.out_weight
    return F.linear(h, weight, model.out_bias)
