"""Adaptive input (Baevski & Auli, 2019) and the projected adaptive softmax (Grave et al., 2017).

The paper's word-level models (WikiText-103, One Billion Word) use both, tied. The vocabulary,
sorted by frequency, is cut at ``cutoffs`` into clusters: the head [0, c_1) holds the frequent
words, tail cluster i (1..n) holds [c_i, c_{i+1}) with c_{n+1} = n_token. With WikiText-103's
cutoffs [20000, 40000, 200000] the head's 20,000 words cover most of the text.

  softmax  The head scores its words and one logit per tail cluster (``cluster_weight``,
           ``cluster_bias``); a tail word's probability is its cluster's head probability
           times its own within the cluster:  log p(w) = log p_head(cluster i) + log p_i(w).
           Training needs only the targets' clusters, so most positions skip every tail.
  div_val  cluster i's vectors have width d_embed // div_val**i (rare words get fewer
           dimensions); a projection (d_proj, d_emb_i) maps between that width and d_model.
  ties     ``tie_weight``: cluster i's output weight is its input embedding (as the plain tied
           softmax); ``tie_projs[i]``: output projection i is the input's projection i.

Names, shapes and the parameters created are the authors' (``pytorch/mem_transformer.py``,
``utils/proj_adaptive_softmax.py``), so their checkpoints load by name: with ``div_val == 1``
one embedding and one output layer for the whole vocabulary, sliced per cluster, and
projections only where d_embed != d_proj; with ``div_val > 1`` one embedding, output layer and
projection per cluster (a projection even where its width equals d_proj). Needs torch only.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

PROJ_INIT_STD = 0.01  # the authors' proj_init_std (their init_std, 0.02, is the model's)


def cluster_bounds(n_token: int, cutoffs: list[int]) -> list[tuple[int, int]]:
    """[start, end) of every cluster, the head first: cutoffs [2, 5], n_token 9 -> (0,2), (2,5), (5,9)."""
    ends = [0, *cutoffs, n_token]
    return list(zip(ends[:-1], ends[1:]))


def cluster_rows(ids: torch.Tensor, bounds: list[tuple[int, int]]) -> list[torch.Tensor]:
    """Per cluster, the positions of the flat ``ids`` that fall in it (every position once)."""
    return [((ids >= lo) & (ids < hi)).nonzero().squeeze(1) for lo, hi in bounds]


def _logits(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, proj) -> torch.Tensor:
    """h (..., d_proj) through the projection (d_proj, d_emb_i), if any, then the cluster's words."""
    return F.linear(h if proj is None else F.linear(h, proj.t()), weight, bias)


def _log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """Log-softmax over the last axis, at least in float32 (bf16/fp16 logits under autocast)."""
    return F.log_softmax(logits if logits.dtype == torch.float64 else logits.float(), dim=-1)


class AdaptiveEmbedding(nn.Module):
    """Token ids (...) -> vectors (..., d_proj): cluster i's table has width d_embed // div_val**i
    and its projection ``emb_projs[i]`` (d_proj, d_emb_i) brings it to d_proj. Unscaled: the model
    multiplies by sqrt(d_model), as it does the plain embedding (the authors' emb_scale).
    The vectors come out in the tables' dtype, as ``nn.Embedding``'s do, also under autocast (whose
    bf16 projection would otherwise make the first layer's input, and so its memory, bf16)."""

    def __init__(self, n_token: int, d_embed: int, d_proj: int, cutoffs: list[int], div_val: int = 1):
        super().__init__()
        self.d_embed, self.d_proj, self.div_val = d_embed, d_proj, div_val
        self.bounds = cluster_bounds(n_token, cutoffs)
        self.emb_layers = nn.ModuleList()
        self.emb_projs = nn.ParameterList()
        if div_val == 1:  # one table; a projection only if its width is not d_proj
            self.emb_layers.append(nn.Embedding(n_token, d_embed))
            if d_proj != d_embed:
                self.emb_projs.append(nn.Parameter(torch.empty(d_proj, d_embed)))
        else:
            for i, (lo, hi) in enumerate(self.bounds):
                d_emb_i = d_embed // div_val ** i
                self.emb_layers.append(nn.Embedding(hi - lo, d_emb_i))
                self.emb_projs.append(nn.Parameter(torch.empty(d_proj, d_emb_i)))
        for proj in self.emb_projs:
            nn.init.normal_(proj, 0.0, PROJ_INIT_STD)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        dtype = self.emb_layers[0].weight.dtype
        if self.div_val == 1:
            emb = self.emb_layers[0](tokens)
            return F.linear(emb, self.emb_projs[0]).to(dtype) if len(self.emb_projs) else emb
        flat = tokens.reshape(-1)
        rows = cluster_rows(flat, self.bounds)
        pieces = [F.linear(table(flat[r] - lo), proj)  # looked up in its cluster's table, projected
                  for r, (lo, _), table, proj in zip(rows, self.bounds, self.emb_layers, self.emb_projs)]
        emb = torch.cat(pieces).to(dtype)  # in cluster order: put every row back at its position
        emb = torch.zeros_like(emb).index_copy(0, torch.cat(rows), emb)
        return emb.view(*tokens.shape, self.d_proj)


class ProjectedAdaptiveLogSoftmax(nn.Module):
    """Hidden states (..., d_proj) -> log-probabilities over the vocabulary: ``log_prob`` gives
    all of them, ``nll`` only the targets' (the cheap one: a tail is computed only for the
    positions whose target lies in it). Without cutoffs: one (projected) softmax."""

    def __init__(self, n_token: int, d_embed: int, d_proj: int, cutoffs: list[int], div_val: int = 1):
        super().__init__()
        self.div_val = div_val
        self.bounds = cluster_bounds(n_token, cutoffs)
        self.n_clusters = len(cutoffs)  # the tail clusters
        if self.n_clusters:  # the head's logits for "the word is in tail cluster i"
            self.cluster_weight = nn.Parameter(torch.empty(self.n_clusters, d_embed))
            self.cluster_bias = nn.Parameter(torch.zeros(self.n_clusters))
            nn.init.normal_(self.cluster_weight, 0.0, 0.02)
        self.out_layers = nn.ModuleList()
        self.out_projs = nn.ParameterList()
        if div_val == 1:  # one output layer split per cluster; a projection per cluster if widths differ
            self.out_layers.append(nn.Linear(d_embed, n_token))
            for _ in self.bounds:
                self.out_projs.append(nn.Parameter(torch.empty(d_proj, d_embed)) if d_proj != d_embed else None)
        else:
            for i, (lo, hi) in enumerate(self.bounds):
                d_emb_i = d_embed // div_val ** i
                self.out_layers.append(nn.Linear(d_emb_i, hi - lo))
                self.out_projs.append(nn.Parameter(torch.empty(d_proj, d_emb_i)))
        for proj in self.out_projs:
            if proj is not None:
                nn.init.normal_(proj, 0.0, PROJ_INIT_STD)

    def clusters(self) -> list[tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]]:
        """(weight, bias, projection or None) of every cluster; the head's weight and bias end
        with the n_clusters rows that score "the word is in tail cluster i"."""
        if self.div_val == 1:  # split once: a slice per cluster would give each a vocabulary-sized gradient
            sizes = [hi - lo for lo, hi in self.bounds]
            layer = self.out_layers[0]
            params = list(zip(layer.weight.split(sizes), layer.bias.split(sizes)))
        else:
            params = [(layer.weight, layer.bias) for layer in self.out_layers]
        if self.n_clusters:
            params[0] = (torch.cat([params[0][0], self.cluster_weight]), torch.cat([params[0][1], self.cluster_bias]))
        return [(w, b, proj) for (w, b), proj in zip(params, self.out_projs)]

    def log_prob(self, h: torch.Tensor) -> torch.Tensor:
        """(..., d_proj) -> (..., n_token): log p(w) for every word; they sum to 1 in probability."""
        clusters = self.clusters()
        head = _log_softmax(_logits(h, *clusters[0]))
        if not self.n_clusters:
            return head
        parts = [head[..., :self.bounds[0][1]]]
        for i in range(1, self.n_clusters + 1):
            # the authors' layout: tail cluster i's logit is the head's i-th column from the end
            parts.append(head[..., -i, None] + _log_softmax(_logits(h, *clusters[i])))
        return torch.cat(parts, dim=-1)

    def nll(self, h: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """-log p(target) for hidden states (..., d_proj) and targets (...): ``log_prob`` at the
        targets, computing each tail only for the positions whose target falls in it."""
        flat_h, flat_t = h.reshape(-1, h.size(-1)), target.reshape(-1)
        clusters = self.clusters()
        head = _log_softmax(_logits(flat_h, *clusters[0]))  # every position needs the head
        rows = cluster_rows(flat_t, self.bounds)
        picked = [head[rows[0], flat_t[rows[0]]]]  # head words: read off the head
        for i in range(1, self.n_clusters + 1):
            r, lo = rows[i], self.bounds[i][0]
            tail = _log_softmax(_logits(flat_h[r], *clusters[i]))
            picked.append(head[r, -i] + tail.gather(1, (flat_t[r] - lo)[:, None]).squeeze(1))
        logp = torch.cat(picked)
        logp = torch.zeros_like(logp).index_copy(0, torch.cat(rows), logp)  # back in position order
        return -logp.view(target.shape)


def tie(emb: AdaptiveEmbedding, crit: ProjectedAdaptiveLogSoftmax, tie_weight: bool,
        tie_projs: list[bool]) -> None:
    """Share parameters between input and output as the authors' model does: each output
    layer's weight is its cluster's embedding table (``tie_weight``); output projection i is
    the input's (``tie_projs[i]``; with div_val 1 the input has one projection, if any)."""
    if tie_weight:
        for layer, table in zip(crit.out_layers, emb.emb_layers):
            layer.weight = table.weight
    for i, tied in enumerate(tie_projs):
        if tied and crit.div_val == 1 and len(emb.emb_projs):
            crit.out_projs[i] = emb.emb_projs[0]
        elif tied and crit.div_val != 1:
            crit.out_projs[i] = emb.emb_projs[i]


def _clusters(cfg) -> tuple:
    return cfg.vocab_size, cfg.d_embed or cfg.d_model, cfg.d_model, cfg.cutoffs, cfg.div_val


def input_layer(cfg) -> AdaptiveEmbedding:
    """The adaptive input of a word-level ``TXLConfig``: its cutoffs and div_val, d_embed projected to d_model."""
    return AdaptiveEmbedding(*_clusters(cfg))


def output_layer(cfg, emb: AdaptiveEmbedding) -> ProjectedAdaptiveLogSoftmax:
    """The adaptive softmax of ``cfg``, tied to the input ``emb`` as ``cfg.tie_weights`` and ``tie_projs`` say.
    The model builds it after its layers, as the authors' does (their random draws, in their order)."""
    crit = ProjectedAdaptiveLogSoftmax(*_clusters(cfg))
    tie(emb, crit, cfg.tie_weights, cfg.tie_projs or [])
    return crit
