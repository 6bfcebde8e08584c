"""A deliberately naive Transformer-XL, one query and one key at a time: what the tests compare the model with.

It uses the weights of a ``TransformerXL`` but none of its tricks (no rel-shift,
no batched masks, no memory tensors): position t of layer n attends to every
key j that ``visible(t, j)`` allows, with R_{t-j} built for that one distance.
The tests (tests/test_model.py, test_adaptive.py, test_analysis.py) compare the real
model against it; a course can too (``from txl_minimal.reference import naive_forward``).
With ``cutoffs`` (the word-level model, adaptive.py) the embedding and the softmax come
from ``naive_embedding`` and ``naive_log_probs``: a token looked up in its cluster's table,
each word's probability computed by hand, both read from a state dict with the authors'
names, which ``authors_word_tensors`` makes from the authors' rules (MemTransformerLM,
ProjectedAdaptiveLogSoftmax), independently of adaptive.py. Slow on purpose: a few dozen
positions of a tiny model.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Optional

import torch
import torch.nn.functional as F

from txl_minimal.model import TransformerXL, sinusoid_table

__all__ = ["segment_visibility", "naive_forward", "authors_word_tensors", "naive_embedding", "naive_log_probs"]


def segment_visibility(seg_len: int, mem_len: int) -> Callable[[int, int], bool]:
    """The keys query t sees when a text is read in segments of ``seg_len`` with a memory of ``mem_len``.

    The last ``mem_len`` positions before its segment, then its segment up to t (positions count
    from the start of the text): what ``naive_forward`` lets each query attend to.

    Returns:
        ``visible(t, j)`` -> True where query t sees key j.

    Examples:
        >>> from txl_minimal.reference import segment_visibility
        >>> visible = segment_visibility(seg_len=4, mem_len=2)
        >>> [j for j in range(8) if visible(5, j)]          # query 5: memory 2, 3 and its segment 4, 5
        [2, 3, 4, 5]
    """
    def visible(t: int, j: int) -> bool:
        start = (t // seg_len) * seg_len
        return max(0, start - mem_len) <= j <= t
    return visible


def naive_forward(model: TransformerXL, tokens: torch.Tensor, visible: Callable[[int, int], bool],
                  words: Optional[dict[str, torch.Tensor]] = None) -> torch.Tensor:
    """The logits of ``model`` for a whole text, computed key by key, with the keys ``visible`` allows.

    ``model``: a ``TransformerXL`` with ``attn_type="rel"`` in eval mode (any depth, memory length,
    pre_lnorm, untie_r, clamp_len); ``tokens`` (B, N) ids; ``visible(t, j)``: which keys query t
    sees (``segment_visibility`` for segments with memory). A model with cutoffs reads its
    embedding and softmax from ``words`` (the authors' names; default: its own state dict, whose
    names for them are the authors').

    Returns:
        (B, N, vocab_size): the logits of every position (with cutoffs: log-probabilities), which the
        model gives reading ``tokens`` in segments with its memory.

    Examples:
        >>> import torch
        >>> from txl_minimal.reference import naive_forward, segment_visibility
        >>> model = TransformerXL(TXLConfig(n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32,
        ...                                 tgt_len=4, mem_len=4)).eval()
        >>> x = as_ids(encode("the cat sat"))[None]                      # (1, 11)
        >>> naive = naive_forward(model, x[:, :8], segment_visibility(4, 4))
        >>> out = model(x[:, :4])                                        # the same two segments, with memory
        >>> out2 = model(x[:, 4:8], out.mems)
        >>> torch.allclose(naive, torch.cat([out.logits, out2.logits], 1), atol=1e-5)
        True
    """
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
    """Random word-level tensors named, shaped and tied as the authors' MemTransformerLM has them for ``cfg``.

    The ``word_emb.*`` and ``crit.*`` entries of their state dict for a ``TXLConfig`` with
    ``cutoffs`` (div_val, d_embed, tie_weights, tie_projs), drawn from ``generator`` in ``dtype``
    (scale 0.3); a tied pair holds equal tensors, as their state dict does.

    Returns:
        {name: tensor}: what ``load_official_state_dict`` reads, and ``naive_embedding`` and
        ``naive_log_probs`` compute from.

    Examples:
        >>> import torch
        >>> from txl_minimal.reference import authors_word_tensors
        >>> cfg = TXLConfig(vocab_size=10, d_model=8, n_head=2, d_head=4, cutoffs=[4], div_val=2)
        >>> sd = authors_word_tensors(cfg, torch.Generator().manual_seed(0))
        >>> sorted(sd)[:3], tuple(sd["word_emb.emb_layers.1.weight"].shape)
        (['crit.cluster_bias', 'crit.cluster_weight', 'crit.out_layers.0.bias'], (6, 4))
    """
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
    """The adaptive input by hand: each token's row of its cluster's table, projected, times sqrt(d_model).

    ``sd``: word-level tensors with the authors' names (``authors_word_tensors``), ``cfg`` the
    TXLConfig they were made for, ``tokens`` (B, N) ids.

    Returns:
        (B, N, d_model): the embedding of every token, one at a time (a projection where the cluster has one).

    Examples:
        >>> import torch
        >>> from txl_minimal.reference import authors_word_tensors, naive_embedding
        >>> cfg = TXLConfig(vocab_size=10, d_model=8, n_head=2, d_head=4, cutoffs=[4], div_val=2)
        >>> sd = authors_word_tensors(cfg, torch.Generator().manual_seed(0))
        >>> naive_embedding(sd, cfg, torch.tensor([[1, 7]])).shape
        torch.Size([1, 2, 8])
    """
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
    """The adaptive softmax by hand: log p(w) of every word, one position at a time.

    p(head word) = its share of the head's softmax; p(tail word of cluster i) = the head's
    probability of cluster i times the word's share of cluster i's own softmax. ``sd``: tensors
    with the authors' names (``authors_word_tensors``) for ``cfg``; ``h`` (..., d_model): the last
    layer's states.

    Returns:
        (..., vocab_size): log-probabilities; each row's exponentials sum to 1.

    Examples:
        >>> import torch
        >>> from txl_minimal.reference import authors_word_tensors, naive_log_probs
        >>> cfg = TXLConfig(vocab_size=10, d_model=8, n_head=2, d_head=4, cutoffs=[4], div_val=2)
        >>> sd = authors_word_tensors(cfg, torch.Generator().manual_seed(0))
        >>> logp = naive_log_probs(sd, cfg, torch.randn(3, 8, dtype=torch.float64))
        >>> logp.shape, torch.allclose(logp.exp().sum(-1), torch.ones(3, dtype=torch.float64))
        (torch.Size([3, 10]), True)
    """
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
