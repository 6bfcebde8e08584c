"""Where does each head look? Attention over [memory o segment], as in the paper's appendix.

Dai et al. (2019), Appendix D, visualise a trained Transformer-XL: the average
attention of every head on every relative distance over the memory, the attention
matrices of the heads that reach farthest, and the four terms (a)-(d) of the score.
These helpers extract the same quantities from any trained ``TransformerXL``
(any size, any checkpoint), so they work on a coursework model as on the shipped one.

  read_with_memory         read a text segment by segment; keep the attention of the last ones
  SegmentAttention         what one segment attended to: probabilities, terms, mask, key tokens
  attention_by_distance    average attention on each relative distance i - j (heads x distance)
  mean_attention_distance  attention-weighted mean distance of each head (query_distance: per query)
  mean_by_token            a per-query number grouped by the query's character
  attention_by_token_pair  which characters a head looks at, for each character it reads
  attention_mass_beyond    share of attention on keys at least ``min_dist`` tokens back
  memory_share             share of attention on the memory keys
  normalized_entropy       entropy / log(number of visible keys): 1 uniform, 0 one key
  row_overlap              how much the queries share their focus (1 same keys, 0 disjoint)
  farthest_heads           heads ranked by a per-head score, largest first
  term_attention_by_distance   softmax of one score term alone, averaged by distance
  profile_entropy, log_correlation   compare by-distance profiles (flatness, shape)
  best_key_window          the window of keys holding most of some queries' attention
  top_keys, char_labels, context_snippet   text to put next to the numbers
  query_breakdown          one query's attention over the keys and its terms (a)-(d) (notebook 05's explorer)

Shapes: attention probabilities are ``(..., qlen, klen)`` with klen = mlen + qlen,
query i sitting at key index mlen + i, so the distance of key j is mlen + i - j
(``analysis.distance_matrix``). Masks are boolean ``(qlen, klen)``, True = hidden.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional
from collections.abc import Sequence

import numpy as np
import torch

from .. import provenance, validation
from ..data import VOCAB, as_ids
from ..evaluate import read_segments
from ..model import TransformerXL, attention_mask
from ..validation import as_int, count, index
from .analysis import distance_matrix, scores_to_probs

SPACE = "\u2423"  # "open box", how the tick labels show a space


# ----------------------------------------------------------------------------- extraction

@dataclass
class SegmentAttention:
    """The attention of one segment read with memory (batch element 0), as ``read_with_memory`` keeps it.

    Its properties ``qlen``, ``klen``, ``mlen`` (= klen - qlen) and ``query_ids`` give the lengths and
    the queries' tokens; ``distances()`` the (qlen, klen) distance of every key from every query.

    Attributes:
        attn: (n_layer, n_head, qlen, klen) probabilities over [memory o segment].
        mask: (qlen, klen) bool, True where query i may not see key j.
        key_ids: (klen,) token ids read at each key position (the queries are the last qlen).
        start: index in the text of the segment's first token (key 0 is at start - mlen).
        terms: per layer a dict "a", "b", "c", "d" of (n_head, qlen, klen) unscaled
            score terms, NaN where masked (None unless asked for).

    Examples:
        >>> from txl_minimal.tutorial.attention_maps import read_with_memory
        >>> seg = read_with_memory(load_pretrained("txl-tiny"), encode("the cat sat on the mat " * 8),
        ...                        tgt_len=32, mem_len=32)[-1]
        >>> seg.qlen, seg.mlen, tuple(seg.attn.shape), decode(seg.query_ids[:7])
        (32, 32, (4, 4, 32, 64), 'n the m')
    """

    attn: torch.Tensor
    mask: torch.Tensor
    key_ids: torch.Tensor
    start: int
    terms: Optional[list[dict[str, torch.Tensor]]] = None

    @property
    def qlen(self) -> int:
        return self.attn.size(-2)

    @property
    def klen(self) -> int:
        return self.attn.size(-1)

    @property
    def mlen(self) -> int:
        return self.klen - self.qlen

    @property
    def query_ids(self) -> torch.Tensor:
        return self.key_ids[self.mlen:]

    def distances(self) -> torch.Tensor:
        """(qlen, klen) long: the distance mlen + i - j in tokens (negative = future)."""
        return distance_matrix(self.qlen, self.klen)


def _left_pad(x: torch.Tensor, klen: int, value: float) -> torch.Tensor:
    """Pad the key axis on the left to ``klen``: with adaptive span a layer drops the
    memory no head can reach, so its attention covers only the last keys."""
    return torch.nn.functional.pad(x, (klen - x.size(-1), 0), value=value)


@torch.no_grad()
def read_with_memory(model: TransformerXL, ids, tgt_len: int, mem_len: int,
                     clamp_len: Optional[int] = None, same_length: Optional[bool] = None,
                     n_keep: int = 1, terms: bool = False) -> list[SegmentAttention]:
    """Read a text in segments with memory and keep the attention of the last ``n_keep`` full segments.

    ``model`` reads ``ids`` (a 1-D text of ids) in segments of ``tgt_len`` with a memory of
    ``mem_len`` (``clamp_len``, ``same_length``: as ``model.lengths``; None keeps the model's). The
    segments before the kept ones only fill the memory: give at least ``ceil(mem_len / tgt_len) +
    n_keep`` segments of text for a full memory. ``terms=True`` also keeps the four score terms.
    The model's lengths and train/eval mode are restored afterwards; runs in eval mode (no
    dropout). With adaptive span, memory a layer drops gets probability 0 (terms NaN).

    Returns:
        A list of ``n_keep`` ``SegmentAttention``, oldest first: each segment's attention over
        [memory o segment], its mask and its tokens.

    Examples:
        >>> from txl_minimal.tutorial.attention_maps import read_with_memory
        >>> valid = load_corpus("text8-mini").valid[:1024]
        >>> segs = read_with_memory(load_pretrained("txl-tiny"), valid, tgt_len=64, mem_len=64, n_keep=2)
        >>> len(segs), tuple(segs[-1].attn.shape), segs[-1].start          # (layers, heads, queries, keys)
        (2, (4, 4, 64, 128), 960)
        >>> read_with_memory(load_pretrained("txl-tiny"), valid[:100], tgt_len=64, mem_len=64, n_keep=2)
        Traceback (most recent call last):
        ValueError: 100 tokens make 1 segments of 64; n_keep=2 must be between 1 and that
    """
    caller = "read_with_memory"
    tgt_len, n_keep = (count(v, name, caller) for name, v in (("tgt_len", tgt_len), ("n_keep", n_keep)))
    mem_len = count(mem_len, "mem_len", caller, 0)
    ids = as_ids(ids)
    if ids.dim() != 1:
        raise ValueError(f"ids must be 1-D (one text), got shape {tuple(ids.shape)}")
    n_seg = len(ids) // tgt_len
    if not 1 <= n_keep <= n_seg:
        raise ValueError(f"{len(ids)} tokens make {n_seg} segments of {tgt_len}; n_keep={n_keep} "
                         "must be between 1 and that")
    tokens = ids[None, :n_seg * tgt_len].to(next(model.parameters()).device)
    kept = []
    for start, out in read_segments(model, tokens, tgt_len=tgt_len, mem_len=mem_len, clamp_len=clamp_len,
                                    same_length=same_length, attn_last=n_keep, terms=terms):
        if out.attn is None:
            continue  # an earlier segment: it only fills the memory
        mlen = min(start, model.cfg.mem_len)
        klen = mlen + tgt_len
        kept.append(SegmentAttention(
            attn=torch.stack([_left_pad(a[0], klen, 0.0) for a in out.attn]).float().cpu(),
            mask=attention_mask(tgt_len, mlen, model.cfg.same_length, model.cfg.mem_len),
            key_ids=ids[start - mlen:start + tgt_len].clone(), start=start,
            terms=[{k: _left_pad(t[0], klen, float("nan")).float().cpu() for k, t in d.items()}
                   for d in out.terms] if terms else None))
    return kept


# ----------------------------------------------------------------------------- statistics

def _attention(attn, caller: str, name: str = "attn") -> torch.Tensor:
    """``attn`` as a tensor of probabilities (..., qlen, klen), klen >= qlen >= 1 (the queries are the last
    keys), or a ValueError saying what it is (not torch's or Python's words from inside)."""
    attn = validation.tensor_of(attn, name, caller, tuple(range(2, 9)), "(..., qlen, klen)",
                                "a SegmentAttention's attn, e.g. read_with_memory(...)[-1].attn")
    if attn.size(-1) < attn.size(-2) or not attn.is_floating_point():
        raise ValueError(f"{caller}: {name} must be probabilities (..., qlen, klen) over [memory o segment], klen >= "
                         f"qlen; got {tuple(attn.shape)} {attn.dtype}")
    return attn


def _visible(qlen: int, klen: int, mask: Optional[torch.Tensor], device=None, caller: str = "") -> torch.Tensor:
    """(qlen, klen) bool: pairs a query can see (not masked, not in the future)."""
    vis = distance_matrix(qlen, klen).to(device) >= 0
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape[-2:] != (qlen, klen):
            raise ValueError(f"{caller}: mask must be a bool tensor (qlen, klen) = ({qlen}, {klen}), True = hidden; "
                             f"got {getattr(mask, 'shape', type(mask).__name__)} {getattr(mask, 'dtype', '')}. "
                             "Fix: the SegmentAttention's mask")
        vis = vis & ~mask.to(device)
    return vis


def attention_by_distance(attn: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Average attention on each relative distance: the paper's heads x distance map.

    ``attn``: (..., qlen, klen) probabilities; ``mask``: (qlen, klen), True = hidden (default:
    only the future is hidden). Entry k of the result is the mean, over the queries
    that can see a key at distance k, of the probability they put on that key.
    With ``same_length`` every query sees the same distances and the result sums to 1 over k.

    Returns:
        (..., D), D = 1 + the largest visible distance; NaN where no query sees that distance.

    Examples:
        >>> import torch
        >>> from txl_minimal.tutorial.attention_maps import attention_by_distance
        >>> attention_by_distance(torch.eye(3)[None])                  # every query on itself: distance 0
        tensor([[1., 0., 0.]])
    """
    attn = _attention(attn, "attention_by_distance")
    qlen, klen = attn.shape[-2:]
    vis = _visible(qlen, klen, mask, attn.device, "attention_by_distance")
    if not vis.any():
        raise ValueError("attention_by_distance: the mask hides every key from every query: no distance to average")
    dist = distance_matrix(qlen, klen).to(attn.device).clamp(min=0)
    D = int(dist[vis].max()) + 1
    index = dist.flatten().expand(*attn.shape[:-2], qlen * klen)
    total = attn.new_zeros(*attn.shape[:-2], klen)
    total.scatter_add_(-1, index, (attn * vis).flatten(-2))
    count = torch.bincount(dist[vis].flatten(), minlength=klen).to(attn.dtype)
    out = total / count
    out[..., count == 0] = float("nan")
    return out[..., :D]


def query_distance(attn: torch.Tensor) -> torch.Tensor:
    """(..., qlen) how far back each query looks: sum_j p_ij max(0, mlen + i - j), mlen = klen - qlen."""
    attn = _attention(attn, "query_distance")
    qlen, klen = attn.shape[-2:]
    dist = distance_matrix(qlen, klen).to(attn.device).clamp(min=0).to(attn.dtype)
    return (attn * dist).sum(-1)


def mean_attention_distance(attn: torch.Tensor) -> torch.Tensor:
    """Each head's attention-weighted distance sum_j p_ij max(0, mlen + i - j), averaged over its queries.

    ``attn``: (..., qlen, klen) probabilities over [memory o segment]; query i is key klen - qlen + i.

    Returns:
        (...,): the mean distance, in tokens.

    Examples:
        >>> import torch
        >>> from txl_minimal.tutorial.attention_maps import mean_attention_distance
        >>> first_key = torch.zeros(1, 3, 3)
        >>> first_key[..., 0] = 1                                       # queries 0, 1, 2 all on key 0
        >>> mean_attention_distance(first_key)
        tensor([1.])
    """
    return query_distance(_attention(attn, "mean_attention_distance")).mean(-1)


def mean_by_token(values: torch.Tensor, ids: torch.Tensor, n_tokens: int,
                  min_count: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Group per-query ``values`` by the query's token: (mean (n_tokens,), count (n_tokens,)).

    values, ids: the same shape (e.g. (segments, qlen) from ``query_distance`` of one head
    and ``SegmentAttention.query_ids``). Means of tokens seen fewer than ``min_count``
    times are NaN. Shows whether a head's reach depends on the character it reads.
    """
    n_tokens = validation.count(n_tokens, "n_tokens", "mean_by_token")  # (count is this function's result)
    min_count = validation.count(min_count, "min_count", "mean_by_token", 0)
    values = validation.tensor_of(values, "values", "mean_by_token", tuple(range(1, 9)), "(..., qlen)")
    ids = _ids_below(ids, n_tokens, "mean_by_token", "ids")
    if values.shape != ids.shape:
        raise ValueError(f"values {tuple(values.shape)} and ids {tuple(ids.shape)} must have one shape")
    ids = ids.flatten().long()
    count = torch.bincount(ids, minlength=n_tokens)[:n_tokens]
    total = torch.zeros(n_tokens, dtype=torch.float64).index_add_(0, ids, values.flatten().double())
    mean = (total / count.clamp(min=1)).to(values.dtype)
    mean[count < max(1, min_count)] = float("nan")
    return mean, count


def _ids_below(ids, n_tokens: int, caller: str, name: str) -> torch.Tensor:
    """``ids`` as an integer tensor of ids in [0, n_tokens) (``validation.integer_ids``), or a ValueError."""
    ids = validation.integer_ids(ids, f"{caller}: {name}")
    ids = ids if isinstance(ids, torch.Tensor) else torch.from_numpy(np.asarray(ids, dtype=np.int64))
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n_tokens):
        raise ValueError(f"{caller}: {name} must lie in [0, {n_tokens}) (n_tokens), got {int(ids.min())}.."
                         f"{int(ids.max())}. Fix: n_tokens = the vocabulary's size (model.cfg.vocab_size)")
    return ids


def attention_mass_beyond(attn: torch.Tensor, min_dist: int) -> torch.Tensor:
    """(...,) share of each query's attention on keys at distance >= ``min_dist``,
    averaged over queries. With ``min_dist = tgt_len`` every such key is in the memory."""
    attn, min_dist = _attention(attn, "attention_mass_beyond"), count(min_dist, "min_dist", "attention_mass_beyond", 0)
    qlen, klen = attn.shape[-2:]
    far = distance_matrix(qlen, klen).to(attn.device) >= min_dist
    return (attn * far).sum(-1).mean(-1)


def memory_share(attn: torch.Tensor) -> torch.Tensor:
    """The share of attention on the memory keys (the first klen - qlen), averaged over the queries.

    ``attn``: (..., qlen, klen) probabilities over [memory o segment].

    Returns:
        (...,): between 0 (the segment only) and 1 (the memory only).

    Examples:
        >>> import torch
        >>> from txl_minimal.tutorial.attention_maps import memory_share
        >>> memory_share(torch.full((1, 2, 4), 0.25))                   # 2 queries, even over 2 memory + 2 keys
        tensor([0.5000])
    """
    attn = _attention(attn, "memory_share")
    qlen, klen = attn.shape[-2:]
    return attn[..., : klen - qlen].sum(-1).mean(-1)


def normalized_entropy(attn: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Each query's entropy divided by the log of the number of keys it sees, averaged over the queries.

    1 = uniform over everything visible, 0 = a single key; queries that see only one key are left
    out. ``attn``: (..., qlen, klen) probabilities; ``mask``: (qlen, klen), True = hidden (default:
    only the future is hidden).

    Returns:
        (...,): the mean normalised entropy.

    Examples:
        >>> import torch
        >>> from txl_minimal.tutorial.attention_maps import normalized_entropy
        >>> normalized_entropy(torch.tensor([[[1.0, 0.0], [0.5, 0.5]]]))  # query 1: even over its 2 keys
        tensor([1.])
    """
    attn = _attention(attn, "normalized_entropy")
    qlen, klen = attn.shape[-2:]
    n_vis = _visible(qlen, klen, mask, attn.device, "normalized_entropy").sum(-1)
    ent = -(attn * attn.clamp_min(1e-30).log()).sum(-1)
    ok = n_vis > 1
    return (ent[..., ok] / n_vis[ok].to(attn.dtype).log()).mean(-1)


def attention_by_token_pair(attn: torch.Tensor, query_ids: torch.Tensor, key_ids: torch.Tensor,
                            n_tokens: int, keep: Optional[torch.Tensor] = None,
                            min_count: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """What a head looks at, by character: (share (n_tokens, n_tokens), count (n_tokens,)).

    attn: (S, qlen, klen) one head over S segments; query_ids (S, qlen); key_ids (S, klen);
    keep: (qlen, klen) bool, the keys to count (e.g. distance >= tgt_len: memory only).
    share[a, b] = the attention a query reading token a puts on kept keys reading token b,
    averaged over the queries reading a (NaN for tokens read fewer than ``min_count``
    times). Row a sums to the share of attention on kept keys.
    """
    caller = "attention_by_token_pair"
    n_tokens, min_count = validation.count(n_tokens, "n_tokens", caller), validation.count(min_count, "min_count",
                                                                                             caller, 0)
    attn = _attention(attn, caller)
    query_ids, key_ids = _ids_below(query_ids, n_tokens, caller, "query_ids"), _ids_below(key_ids, n_tokens, caller,
                                                                                         "key_ids")
    if attn.dim() != 3 or query_ids.shape != attn.shape[:2] or key_ids.shape != (attn.size(0), attn.size(2)):
        raise ValueError(f"{caller}: attn (S, qlen, klen), query_ids (S, qlen) and key_ids (S, klen) must agree; got "
                         f"{tuple(attn.shape)}, {tuple(query_ids.shape)}, {tuple(key_ids.shape)}")
    if keep is not None:
        attn = attn * keep
    onehot = torch.nn.functional.one_hot(key_ids.long(), n_tokens).to(attn.dtype)  # (S, klen, V)
    per_query = attn @ onehot  # (S, qlen, V): mass on each key token
    q = query_ids.flatten().long()
    count = torch.bincount(q, minlength=n_tokens)[:n_tokens]
    total = torch.zeros(n_tokens, n_tokens, dtype=torch.float64).index_add_(
        0, q, per_query.reshape(-1, n_tokens).double())
    share = (total / count.clamp(min=1)[:, None]).to(attn.dtype)
    share[count < max(1, min_count)] = float("nan")
    return share, count


def row_overlap(attn: torch.Tensor) -> torch.Tensor:
    """(...,) how much the queries share their focus: the mean, over pairs of distinct
    queries, of sum_j min(p_ij, p_i'j) (= 1 - total variation distance). 1 = every
    query attends the same keys in the same way; 0 = no two queries share a key.
    Separates the paper's "sparse, shared" heads from its "target-specific" ones."""
    attn = _attention(attn, "row_overlap")
    n = attn.size(-2)
    if n < 2:
        raise ValueError("row_overlap needs at least two queries")
    p = attn.double()
    tv = 0.5 * torch.cdist(p, p, p=1.0)  # (..., n, n), 0 on the diagonal
    off_diagonal = (1.0 - tv).sum((-1, -2)) - n  # drop the n pairs (i, i), overlap 1 each
    return (off_diagonal / (n * (n - 1))).to(attn.dtype)


def farthest_heads(score: torch.Tensor, k: int = 3) -> list[tuple[int, int]]:
    """The ``k`` (layer, head) pairs with the largest ``score`` (n_layer, n_head),
    largest first; ties keep the lower layer/head first."""
    score = validation.tensor_of(score, "score", "farthest_heads", (2,), "(n_layer, n_head)",
                                 "one number per head, e.g. mean_attention_distance(seg.attn)")
    k = count(k, "k", "farthest_heads")
    n_head = score.size(-1)
    order = torch.argsort(score.flatten(), descending=True, stable=True)[:k]
    return [(int(i) // n_head, int(i) % n_head) for i in order]


def term_attention_by_distance(terms: dict[str, torch.Tensor], d_head: int,
                               mask: Optional[torch.Tensor] = None,
                               names: Sequence[str] = ("a", "b", "d")) -> dict[str, torch.Tensor]:
    """The paper's per-term view: softmax over the visible keys of ONE term alone
    (scaled by 1/sqrt(d_head)), averaged by distance. terms: (..., qlen, klen) with
    NaN where masked, as ``TXLOutput.terms``. Returns name -> (..., D)."""
    validation.has_keys(terms, names, "terms", "term_attention_by_distance",
                        "a SegmentAttention's terms[layer] (read_with_memory(..., terms=True))")
    d_head = count(d_head, "d_head", "term_attention_by_distance")
    return {n: attention_by_distance(scores_to_probs({n: terms[n]}, d_head), mask) for n in names}


def profile_entropy(profile: torch.Tensor) -> torch.Tensor:
    """(...,) entropy of a by-distance profile (..., D) over its D distances, divided by
    log D: 1 = flat over all distances, 0 = one distance only. NaN entries are skipped."""
    profile = validation.tensor_of(profile, "profile", "profile_entropy", tuple(range(1, 9)), "(..., D)")
    if profile.size(-1) < 2:
        raise ValueError("profile_entropy: a profile of one distance has no spread to measure (log D = 0). Fix: "
                         "a profile over D >= 2 distances, e.g. attention_by_distance(seg.attn)")
    p = profile.nan_to_num(0.0)
    p = p / p.sum(-1, keepdim=True)
    ent = -(p * p.clamp_min(1e-30).log()).sum(-1)
    return ent / math.log(profile.size(-1))


def log_correlation(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(...,) Pearson correlation of log x and log y along the last axis: how alike two
    by-distance profiles are in shape, small values weighing as much as large ones."""
    x, y = (validation.tensor_of(v, name, "log_correlation", tuple(range(1, 9)), "(..., D)")
            for name, v in (("x", x), ("y", y)))
    if x.shape != y.shape or x.size(-1) < 2:
        raise ValueError(f"log_correlation: x and y must be profiles of one shape over at least 2 distances, got "
                         f"{tuple(x.shape)} and {tuple(y.shape)}")
    lx, ly = x.clamp_min(1e-30).log(), y.clamp_min(1e-30).log()
    lx, ly = lx - lx.mean(-1, keepdim=True), ly - ly.mean(-1, keepdim=True)
    return (lx * ly).sum(-1) / (lx.norm(dim=-1) * ly.norm(dim=-1))


def best_key_window(attn: torch.Tensor, queries: Sequence[int] | slice, width: int) -> int:
    """First key index of the ``width`` consecutive keys that hold the most attention
    of the given queries. attn: (qlen, klen) for one head."""
    attn = validation.tensor_of(attn, "attn", "best_key_window", (2,), "(qlen, klen) for one head")
    klen, qlen = attn.size(-1), attn.size(0)
    if as_int(width) is None or not 1 <= width <= klen:
        raise ValueError(f"width must be in [1, {klen}], got {width}")
    rows = range(qlen)[queries] if isinstance(queries, slice) else None
    if rows is None:
        try:
            rows = [index(q, "queries[...]", qlen, "best_key_window", "queries in attn") for q in queries]
        except TypeError:
            raise ValueError(f"best_key_window: queries must be a slice or a list of query indices, got "
                             f"{queries!r}") from None
    if len(rows) == 0:
        raise ValueError(f"best_key_window: queries {queries!r} select none of the {qlen} queries")
    col = attn[list(rows)].sum(0)
    csum = torch.cat([col.new_zeros(1), col.cumsum(0)])
    sums = csum[width:] - csum[:-width]  # sums[s] = col[s:s+width].sum()
    return int(torch.argmax(sums))  # first maximum


# ----------------------------------------------------------------------------- text

def symbols_of(ids, vocab: Optional[Sequence[str]], caller: str) -> list[str]:
    """The symbol of each id: of ``vocab`` (a model's or a corpus's, ``model.vocab``, ``corpus.vocab``), else of
    the corpus the ids were taken from (a view of its split: provenance.corpus_of), else of text8's 27
    characters; ids past that vocabulary are a ValueError saying to pass ``vocab=``."""
    if vocab is None:
        origin = provenance.corpus_of(ids) if isinstance(ids, np.ndarray) else None
        vocab = VOCAB if origin is None else origin.vocab
    flat = as_ids(ids).flatten().tolist()
    if flat and not 0 <= min(flat) <= max(flat) < len(vocab):
        which = "text8's 27 characters" if vocab is VOCAB else f"the vocabulary given ({len(vocab):,} symbols)"
        raise ValueError(f"{caller}: ids {min(flat)}..{max(flat)} are not ids of {which}: they come from another "
                         "vocabulary. Fix: pass the model's or corpus's own, vocab=model.vocab (or corpus.vocab)")
    return [vocab[i] for i in flat]


def char_labels(ids, space: str = SPACE, vocab: Optional[Sequence[str]] = None) -> list[str]:
    """One tick label per token: its symbol (``vocab``'s: a model of your own text's ``model.vocab``;
    default text8's characters, or the ids' corpus's), a space shown as ``space``."""
    return [space if c == " " else c for c in symbols_of(ids, vocab, "char_labels")]


def context_snippet(ids, pos: int, width: int = 8, vocab: Optional[Sequence[str]] = None) -> str:
    """The text around token ``pos`` with that token in brackets: 'the br[i]tish' (``vocab``: as
    ``char_labels``)."""
    text = symbols_of(ids, vocab, "context_snippet")
    pos = index(pos, "pos", len(text), "context_snippet", "tokens in ids")
    width = count(width, "width", "context_snippet", 0)
    lo, hi = max(0, pos - width), min(len(text), pos + width + 1)
    return "".join(text[lo:pos]) + "[" + "".join(text[pos:pos + 1]) + "]" + "".join(text[pos + 1:hi])


def top_keys(seg: SegmentAttention, layer: int, head: int, query: int,
             k: int = 5) -> list[tuple[int, int, float]]:
    """The ``k`` keys query ``query`` attends most in one head: (key index, distance, prob),
    most attended first; equal probabilities (e.g. the same character beyond ``clamp_len``,
    an exact tie) go to the nearer key first, so the order does not depend on the backend."""
    layer, head, query = _seg_indices(seg, layer, head, query, "top_keys")
    k = count(k, "k", "top_keys")
    row = seg.attn[layer, head, query].tolist()
    dist = [seg.mlen + query - j for j in range(len(row))]
    keys = sorted(range(len(row)), key=lambda j: (-row[j], dist[j]))[:k]
    return [(j, dist[j], row[j]) for j in keys]


__all__ = ["SPACE", "SegmentAttention", "read_with_memory", "attention_by_distance",
           "query_distance", "mean_attention_distance", "mean_by_token", "attention_by_token_pair",
           "attention_mass_beyond", "memory_share", "normalized_entropy", "row_overlap",
           "farthest_heads", "term_attention_by_distance", "profile_entropy", "log_correlation",
           "best_key_window", "char_labels", "context_snippet", "top_keys"]


def _seg_indices(seg, layer, head, query, caller: str) -> tuple[int, int, int]:
    """(layer, head, query) as indices into ``seg``'s attention (n_layer, n_head, qlen, klen), or a ValueError
    naming the range ("query must be in [0, ...]"); ``seg`` must be a SegmentAttention."""
    if not isinstance(seg, SegmentAttention):
        raise ValueError(f"{caller}: seg must be a SegmentAttention, got {validation.a_kind(seg)}. Fix: one of "
                         "read_with_memory(...)'s results, e.g. read_with_memory(model, ids, 64, 64)[-1]")
    n_layer, n_head, qlen = seg.attn.shape[:3]
    if as_int(query) is None or not 0 <= query < qlen:  # (the sentence notebook 05's explorer was written with)
        raise ValueError(f"query must be in [0, {qlen - 1}], got {query!r}")
    return (index(layer, "layer", n_layer, caller, "layers in seg.attn"),
            index(head, "head", n_head, caller, "heads in seg.attn"), as_int(query))


def query_breakdown(seg: SegmentAttention, layer: int, head: int, query: int) -> dict[str, torch.Tensor]:
    """One query's view of [memory o segment]: "p" its attention (klen,), "a".."d" the unscaled
    score terms (klen,), NaN where hidden, and "distance" (klen,) how far back each key is.
    ``seg`` must have been read with ``terms=True``. softmax((a + b + c + d) / sqrt(d_head))
    over the visible keys is "p" (tests/test_attention_maps.py checks it)."""
    layer, head, query = _seg_indices(seg, layer, head, query, "query_breakdown")
    if seg.terms is None:
        raise ValueError("query_breakdown needs the score terms: read with read_with_memory(..., terms=True)")
    out = {name: t[head, query] for name, t in seg.terms[layer].items()}
    out["p"] = seg.attn[layer, head, query]
    out["distance"] = seg.distances()[query]
    return out
