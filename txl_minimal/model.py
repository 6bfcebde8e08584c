"""Transformer-XL in one file (Dai et al., ACL 2019, arXiv:1901.02860).

Read top to bottom, this file follows Section 3 of the paper:

  3.2  segment-level recurrence   -> TransformerXL.forward / _update_mems
  3.3  relative positional encoding -> sinusoid_table, rel_shift, RelMultiHeadAttn
  3.4  the full model              -> DecoderLayer, TransformerXL

Equation (the relative attention score between query i and key j):

  A^rel_ij = E_xi^T Wq^T Wk,E E_xj     (a) content-based addressing
           + E_xi^T Wq^T Wk,R R_{i-j}   (b) content-dependent positional bias
           + u^T Wk,E E_xj              (c) global content bias
           + v^T Wk,R R_{i-j}           (d) global positional bias

The parameter names follow the authors' PyTorch code so that their checkpoints
load (see ``official_state_dict``): ``r_w_bias`` is u, ``r_r_bias`` is v.
Tensors are batch first: tokens (B, T), hidden states (B, T, d_model),
attention scores (B, n_head, T_query, T_key).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

ATTN_TYPES = ("rel", "abs", "shaw")


@dataclass
class TXLConfig:
    """Hyper-parameters; the names are the authors' (``train.py`` flags)."""

    vocab_size: int = 27
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    d_head: int = 32
    d_inner: int = 512
    dropout: float = 0.1
    dropatt: float = 0.0
    tgt_len: int = 128  # segment length L
    mem_len: int = 128  # memory length M (0: no recurrence)
    clamp_len: int = 0  # relative distances above this share one encoding (0: off)
    same_length: bool = False  # every query sees the same number of keys
    pre_lnorm: bool = False
    tie_weights: bool = True
    attn_type: str = "rel"  # "rel" (Transformer-XL), "abs" (vanilla), "shaw"
    untie_r: bool = False  # one (u, v) pair per layer instead of shared
    shaw_max_dist: int = 64  # largest distance with its own learned vector ("shaw")
    adaptive_span: bool = False  # learn a span z per head (Sukhbaatar et al., 2019)
    span_ramp: int = 32  # R: width of the soft mask's linear ramp
    span_init: float = 0.5  # initial z as a fraction of the largest span, tgt_len + mem_len
    span_loss_coeff: float = 2e-6  # lambda of the L1 penalty on spans (per token of span)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first impossible field."""
        for name in ("vocab_size", "n_layer", "n_head", "d_model", "d_head", "d_inner",
                     "tgt_len", "shaw_max_dist", "span_ramp"):
            value = getattr(self, name)
            if not _is_int(value) or value <= 0:
                raise ValueError(f"TXLConfig.{name} must be a positive integer, got {value!r}")
        for name in ("mem_len", "clamp_len"):
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise ValueError(f"TXLConfig.{name} must be an integer >= 0, got {value!r}")
        if self.d_model % 2:  # R has d_model / 2 sines and as many cosines
            raise ValueError(f"TXLConfig.d_model must be even (sinusoid pairs), got {self.d_model}")
        for name in ("dropout", "dropatt"):
            value = getattr(self, name)
            if not _is_number(value) or not 0.0 <= value < 1.0:
                raise ValueError(f"TXLConfig.{name} must be in [0, 1), got {value!r}")
        if self.attn_type not in ATTN_TYPES:
            raise ValueError(f"TXLConfig.attn_type must be one of {ATTN_TYPES}, got {self.attn_type!r}")
        if not _is_number(self.span_init) or not 0.0 <= self.span_init <= 1.0:
            raise ValueError(f"TXLConfig.span_init must be in [0, 1], got {self.span_init!r}")
        if self.adaptive_span and self.attn_type != "rel":
            raise ValueError("TXLConfig.adaptive_span needs attn_type='rel'")

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # True is an int to Python


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class TXLOutput:
    """What ``TransformerXL.forward`` returns."""

    logits: torch.Tensor  # (B, T, vocab_size)
    mems: list[torch.Tensor]  # n_layer tensors (B, <=mem_len, d_model), detached
    loss: Optional[torch.Tensor] = None  # mean NLL in nats, when targets are given
    nll: Optional[torch.Tensor] = None  # (B, T) per-token NLL in nats
    attn: Optional[list[torch.Tensor]] = None  # per layer (B, H, T, mlen+T) probabilities
    terms: Optional[list[dict[str, torch.Tensor]]] = field(default=None)  # per layer a, b, c, d


# --------------------------------------------------------------------------
# 3.3 Relative positional encoding
# --------------------------------------------------------------------------

def sinusoid_table(pos_seq: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """R: one row per position, all sines then all cosines (the authors' layout)."""
    angles = torch.outer(pos_seq, inv_freq)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class PositionalEmbedding(nn.Module):
    """The fixed sinusoids of Vaswani et al.; Transformer-XL feeds it distances."""

    def __init__(self, d_model: int):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0.0, d_model, 2.0) / d_model))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, pos_seq: torch.Tensor) -> torch.Tensor:
        return sinusoid_table(pos_seq.to(self.inv_freq.dtype), self.inv_freq)


def rel_shift(x: torch.Tensor) -> torch.Tensor:
    """Turn scores against R_{klen-1}..R_0 (columns) into scores against R_{i-j}.

    Row i of ``x`` holds (q_i + v) . W_kR R_r for r = klen-1, ..., 0. The key j
    needs distance mlen + i - j, i.e. column j + qlen - 1 - i: every row must
    slide left by (qlen - 1 - i). Padding one zero column, reading the buffer
    with the other shape and dropping the first row does exactly that in O(1)
    copies (the paper's Appendix B). Entries above the causal diagonal become
    garbage; the mask removes them.
    """
    *lead, qlen, klen = x.shape
    padded = F.pad(x, (1, 0))  # (..., qlen, klen + 1)
    padded = padded.view(*lead, klen + 1, qlen)
    return padded[..., 1:, :].reshape(*lead, qlen, klen)


def attention_mask(qlen: int, mlen: int, same_length: bool, mem_len: int,
                   device: torch.device | None = None) -> torch.Tensor:
    """Bool (qlen, mlen+qlen), True where query i must NOT see key j.

    Query i sits at key index mlen + i: keys after it are the future. With
    ``same_length`` each query sees the last ``mem_len`` keys including itself
    (the authors' evaluation setting), so early and late queries get the same
    context; with ``mem_len == 0`` it falls back to the plain causal mask
    (the authors' code masks every key there and returns NaN).
    """
    klen = mlen + qlen
    ones = torch.ones(qlen, klen, dtype=torch.bool, device=device)
    mask = torch.triu(ones, diagonal=1 + mlen)
    if same_length and mem_len > 0:
        mask = mask | torch.tril(ones, diagonal=mlen - mem_len)
    return mask


def span_mask(dist: torch.Tensor, z: torch.Tensor, ramp: int) -> torch.Tensor:
    """Adaptive span's soft mask m_z(x) = clamp((R + z - x) / R, 0, 1).

    dist: distances x (any shape); z: spans (n_head,). Returns (n_head, *dist.shape):
    1 up to distance z, 0 beyond z + R, linear in between (so z gets a gradient).
    """
    z = z.view(-1, *([1] * dist.dim()))
    return ((ramp + z - dist) / ramp).clamp(0.0, 1.0)


# --------------------------------------------------------------------------
# 3.3 + 3.4 Relative multi-head attention
# --------------------------------------------------------------------------

class RelMultiHeadAttn(nn.Module):
    """Multi-head attention over [SG(memory) o segment] with the score above.

    ``attn_type`` chooses the positional part of the score:
      "rel"  (b)+(d) with sinusoidal R and the global biases u, v (+ (c))
      "shaw" (b) only, with a learned table per distance (Shaw et al., 2018)
      "abs"  none: positions were added to the input embedding (vanilla)
    """

    def __init__(self, cfg: TXLConfig):
        super().__init__()
        self.cfg = cfg
        self.n_head, self.d_head = cfg.n_head, cfg.d_head
        self.scale = 1.0 / math.sqrt(cfg.d_head)
        hd = cfg.n_head * cfg.d_head
        # rows: W_q, then W_k,E, then W_v (head-major within each), as the authors
        self.qkv_net = nn.Linear(cfg.d_model, 3 * hd, bias=False)
        self.o_net = nn.Linear(hd, cfg.d_model, bias=False)
        self.layer_norm = nn.LayerNorm(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.dropatt = nn.Dropout(cfg.dropatt)
        if cfg.attn_type == "rel":
            self.r_net = nn.Linear(cfg.d_model, hd, bias=False)  # W_k,R
            if cfg.untie_r:
                self.r_w_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))  # u
                self.r_r_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))  # v
        elif cfg.attn_type == "shaw":
            self.r_emb = nn.Parameter(torch.zeros(cfg.shaw_max_dist + 1, cfg.d_head))
        if cfg.adaptive_span:  # z, stored as a fraction of the largest span
            self.span_frac = nn.Parameter(torch.full((cfg.n_head,), cfg.span_init))
        # the largest span at construction (training) time: set_lengths must not rescale z
        self.max_span = cfg.tgt_len + cfg.mem_len

    def spans(self) -> torch.Tensor:
        """z per head in tokens (adaptive span only)."""
        return self.span_frac.clamp(0.0, 1.0) * self.max_span

    def trim_memory(self, mem: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """Drop memory that every head's span mask zeroes: beyond max(z) + R."""
        if mem is None or not self.cfg.adaptive_span:
            return mem
        keep = int(math.ceil(float(self.spans().detach().max()) + self.cfg.span_ramp))
        return mem[:, max(0, mem.size(1) - keep):]

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, H*D) -> (B, H, T, D)."""
        B, T, _ = x.shape
        return x.view(B, T, self.n_head, self.d_head).transpose(1, 2)

    def forward(self, h: torch.Tensor, mem: Optional[torch.Tensor], pos: torch.Tensor,
                mask: torch.Tensor, u: Optional[torch.Tensor], v: Optional[torch.Tensor],
                fast: bool = True, return_attn: bool = False, return_terms: bool = False):
        """h: (B, qlen, d_model) segment; mem: (B, mlen, d_model) or None.

        pos: "rel" -> R (klen, d_model); "shaw" -> distances (klen,) long;
        "abs" -> unused. Returns (output, attention probs or None, terms or None).
        """
        qlen = h.size(1)
        mem = self.trim_memory(mem)  # adaptive span: keys no head can reach cost nothing
        klen = qlen + (0 if mem is None else mem.size(1))
        pos, mask = pos[-klen:] if pos is not None else None, mask[:, -klen:]
        # h~ = [SG(m) o h]: memory was detached when it was stored.
        cat = h if mem is None or mem.size(1) == 0 else torch.cat([mem, h], dim=1)
        x = self.layer_norm(cat) if self.cfg.pre_lnorm else cat
        q, k, val = self.qkv_net(x).chunk(3, dim=-1)
        q, k, val = self._heads(q[:, -qlen:]), self._heads(k), self._heads(val)  # queries: segment only

        attn_type = self.cfg.attn_type
        if attn_type == "rel":
            u = self.r_w_bias if self.cfg.untie_r else u
            v = self.r_r_bias if self.cfg.untie_r else v
            r = self.r_net(pos).view(-1, self.n_head, self.d_head).transpose(0, 1)  # (H, klen, D) W_k,R R
            q_c = q + u[:, None]  # (q_i + u): (a) + (c) in one product
            pos_score = rel_shift((q + v[:, None]) @ r.transpose(-1, -2))  # (b) + (d)
        elif attn_type == "shaw":
            r = self.r_emb[pos]  # (klen, D), shared by the heads as in Shaw et al.
            q_c = q
            pos_score = rel_shift(q @ r.transpose(-1, -2))  # (b) only
        else:
            q_c, pos_score = q, None

        terms = None
        if return_terms:
            terms = self._score_terms(q, k, r if attn_type != "abs" else None, u, v, mask)

        dropatt = self.cfg.dropatt if self.training else 0.0
        if fast and not return_attn and not self.cfg.adaptive_span:
            # The same score, by PyTorch's fused kernel: (q+u).k * scale + bias.
            if pos_score is None:
                bias = mask.logical_not()  # bool: True = may attend
            else:
                bias = (pos_score * self.scale).to(q_c.dtype)
                bias = bias.masked_fill(mask, _mask_value(bias.dtype))
            out = F.scaled_dot_product_attention(q_c, k, val, attn_mask=bias,
                                                 dropout_p=dropatt, scale=self.scale)
            prob = None
        else:
            score = q_c @ k.transpose(-1, -2)  # (a) + (c)
            if pos_score is not None:
                score = score + pos_score  # + (b) + (d)
            score = (score * self.scale).masked_fill(mask, _mask_value(score.dtype))
            prob = F.softmax(score.float(), dim=-1).to(val.dtype)
            if self.cfg.adaptive_span:  # a_ij <- m_z(i-j) a_ij / sum_j m_z(i-j) a_ij
                query_at = torch.arange(qlen, device=h.device)[:, None] + (klen - qlen)
                dist = query_at - torch.arange(klen, device=h.device)  # x = i - j
                prob = prob * span_mask(dist.to(prob.dtype), self.spans().to(prob.dtype), self.cfg.span_ramp)
                prob = prob / (prob.sum(-1, keepdim=True) + 1e-8)
            out = self.dropatt(prob) @ val

        B = h.size(0)
        out = self.drop(self.o_net(out.transpose(1, 2).reshape(B, qlen, -1)))
        out = h + out if self.cfg.pre_lnorm else self.layer_norm(h + out)
        return out, (prob if return_attn else None), terms

    def _score_terms(self, q, k, r, u, v, mask) -> dict[str, torch.Tensor]:
        """The four terms separately (unscaled); masked entries are NaN."""
        nan = torch.tensor(float("nan"), dtype=q.dtype, device=q.device)
        terms = {"a": q @ k.transpose(-1, -2)}
        if r is not None:
            terms["b"] = rel_shift(q @ r.transpose(-1, -2))
        if self.cfg.attn_type == "rel":
            terms["c"] = (u[:, None] @ k.transpose(-1, -2)).expand_as(terms["a"])
            terms["d"] = rel_shift((v[:, None] @ r.transpose(-1, -2)).expand(*terms["a"].shape[:3], -1))
        return {name: t.masked_fill(mask, nan) for name, t in terms.items()}


def _mask_value(dtype: torch.dtype) -> float:
    """A large negative score that stays finite in fp16/bf16 (no inf - inf = NaN)."""
    return torch.finfo(dtype).min


class PositionwiseFF(nn.Module):
    """FF(x) = W2 ReLU(W1 x + b1) + b2, with the residual and LayerNorm."""

    def __init__(self, cfg: TXLConfig):
        super().__init__()
        self.pre_lnorm = cfg.pre_lnorm
        self.CoreNet = nn.Sequential(  # the authors' name, so indices 0 and 3 match
            nn.Linear(cfg.d_model, cfg.d_inner), nn.ReLU(inplace=True), nn.Dropout(cfg.dropout),
            nn.Linear(cfg.d_inner, cfg.d_model), nn.Dropout(cfg.dropout))
        self.layer_norm = nn.LayerNorm(cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_lnorm:
            return x + self.CoreNet(self.layer_norm(x))
        return self.layer_norm(x + self.CoreNet(x))


class DecoderLayer(nn.Module):
    """One layer n: h^n = FF(LayerNorm(h^{n-1} + RelAttn([SG(m^{n-1}) o h^{n-1}])))."""

    def __init__(self, cfg: TXLConfig):
        super().__init__()
        self.dec_attn = RelMultiHeadAttn(cfg)
        self.pos_ff = PositionwiseFF(cfg)

    def forward(self, h, mem, pos, mask, u, v, **kw):
        h, prob, terms = self.dec_attn(h, mem, pos, mask, u, v, **kw)
        return self.pos_ff(h), prob, terms


# --------------------------------------------------------------------------
# 3.2 + 3.4 The model: embeddings, layers with memory, tied softmax
# --------------------------------------------------------------------------

class TransformerXL(nn.Module):
    """Character/word LM with segment-level recurrence (Dai et al., 2019)."""

    def __init__(self, cfg: TXLConfig):
        super().__init__()
        self.cfg = replace(cfg)  # our own copy: set_lengths must not change another model's config
        cfg = self.cfg
        self.word_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.emb_scale = math.sqrt(cfg.d_model)  # the authors scale by sqrt(d_model)
        self.pos_emb = PositionalEmbedding(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layer))
        if cfg.attn_type == "rel" and not cfg.untie_r:
            self.r_w_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))  # u
            self.r_r_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))  # v
        else:
            self.r_w_bias = self.r_r_bias = None
        self.out_bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.out_weight = None if cfg.tie_weights else nn.Parameter(torch.zeros(cfg.vocab_size, cfg.d_model))
        self.fast_attn = True  # scaled_dot_product_attention unless introspecting
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        """The authors' init: N(0, 0.02) weights, zero biases, LayerNorm gain N(1, 0.02)."""
        std = 0.02
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, std)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.normal_(m.weight, 1.0, std)
            nn.init.zeros_(m.bias)
        for name in ("r_w_bias", "r_r_bias", "r_emb", "out_weight"):
            p = getattr(m, name, None)
            if isinstance(p, nn.Parameter):
                nn.init.normal_(p, 0.0, std)

    def set_lengths(self, tgt_len: Optional[int] = None, mem_len: Optional[int] = None,
                    clamp_len: Optional[int] = None, same_length: Optional[bool] = None) -> None:
        """Change the evaluation-time lengths in place; no new parameters needed.

        Invalid values raise ``ValueError`` and leave the model as it was.
        """
        changes = {name: value for name, value in (("tgt_len", tgt_len), ("mem_len", mem_len),
                                                   ("clamp_len", clamp_len), ("same_length", same_length))
                   if value is not None}
        replace(self.cfg, **changes)  # validates a copy first
        for name, value in changes.items():  # every layer shares self.cfg: update it in place
            setattr(self.cfg, name, value)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # -- memory -----------------------------------------------------------
    def _update_mems(self, hids: list[torch.Tensor], mems: Optional[list[torch.Tensor]]) -> list[torch.Tensor]:
        """m^n_{tau+1} = SG(last mem_len of [m^n_tau o h^n_tau]) for every layer input."""
        mem_len = self.cfg.mem_len
        if mem_len == 0:
            return [h.new_empty(h.size(0), 0, h.size(2)) for h in hids]
        with torch.no_grad():
            new = []
            for i, h in enumerate(hids):
                cat = h if mems is None else torch.cat([mems[i], h], dim=1)
                new.append(cat[:, -mem_len:].detach())
        return new

    def _check_inputs(self, tokens: torch.Tensor, mems, targets) -> None:
        if tokens.dim() != 2 or tokens.dtype not in (torch.long, torch.int, torch.int16, torch.uint8):
            raise ValueError(f"tokens must be an integer tensor of shape (batch, seq); got "
                             f"{tuple(tokens.shape)} {tokens.dtype}")
        if tokens.numel() == 0:
            raise ValueError(f"tokens must hold at least one token per row; got shape {tuple(tokens.shape)}")
        if targets is not None and targets.shape != tokens.shape:
            raise ValueError(f"targets shape {tuple(targets.shape)} != tokens shape {tuple(tokens.shape)}")
        for what, ids in (("token", tokens), ("target", targets)):
            if ids is None:
                continue
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0 or hi >= self.cfg.vocab_size:
                raise ValueError(f"{what} ids must be in [0, {self.cfg.vocab_size - 1}] (vocab_size); "
                                 f"got min {lo}, max {hi}. Encode text with txl_minimal.data.encode.")
        if mems is not None and len(mems) > 0:
            if len(mems) != self.cfg.n_layer:
                raise ValueError(f"mems must hold n_layer={self.cfg.n_layer} tensors, got {len(mems)}")
            if mems[0].size(0) != tokens.size(0):
                raise ValueError(f"mems batch {mems[0].size(0)} != tokens batch {tokens.size(0)}: "
                                 "reset mems (pass None) when the batch size changes")

    # -- forward ----------------------------------------------------------
    def forward(self, tokens: torch.Tensor, mems: Optional[list[torch.Tensor]] = None,
                targets: Optional[torch.Tensor] = None, return_attn: bool = False,
                return_terms: bool = False) -> TXLOutput:
        """Run one segment. tokens (B, T) ids; mems from the previous segment or None."""
        cfg = self.cfg
        self._check_inputs(tokens, mems, targets)
        if mems is not None and (len(mems) == 0 or mems[0].size(1) == 0):
            mems = None
        B, qlen = tokens.shape
        mlen = 0 if mems is None else mems[0].size(1)
        klen = mlen + qlen

        x = self.word_emb(tokens.long()) * self.emb_scale
        if cfg.attn_type == "abs":
            # Vanilla: U_{1:L} added to the input; the same positions for every
            # segment, so memory states carry positions that clash (Sec. 3.3).
            x = x + self.pos_emb(torch.arange(qlen, device=x.device))
            pos = None
        elif cfg.attn_type == "rel":
            dist = torch.arange(klen - 1, -1, -1.0, device=x.device)  # i - j for j = 0..klen-1
            if cfg.clamp_len > 0:
                dist = dist.clamp(max=cfg.clamp_len)
            pos = self.drop(self.pos_emb(dist).to(x.dtype))  # R, (klen, d_model)
        else:
            pos = torch.arange(klen - 1, -1, -1, device=x.device).clamp(max=cfg.shaw_max_dist)
        h = self.drop(x)
        mask = attention_mask(qlen, mlen, cfg.same_length, cfg.mem_len, device=x.device)

        hids, attn, terms = [], [], []
        fast = self.fast_attn
        for i, layer in enumerate(self.layers):
            hids.append(h)  # layer i's memory is made of what entered layer i
            h, prob, t = layer(h, None if mems is None else mems[i], pos, mask,
                               self.r_w_bias, self.r_r_bias, fast=fast,
                               return_attn=return_attn, return_terms=return_terms)
            attn.append(prob)
            terms.append(t)
        h = self.drop(h)

        weight = self.word_emb.weight if self.out_weight is None else self.out_weight
        logits = F.linear(h, weight, self.out_bias)
        out = TXLOutput(logits=logits, mems=self._update_mems(hids, mems),
                        attn=attn if return_attn else None,
                        terms=terms if return_terms else None)
        if targets is not None:
            out.nll = F.cross_entropy(logits.float().flatten(0, 1), targets.long().flatten(),
                                      reduction="none").view(B, qlen)
            out.loss = out.nll.mean()
            if cfg.adaptive_span:  # L1 penalty: lambda * sum over layers of the mean span
                out.loss = out.loss + cfg.span_loss_coeff * sum(
                    layer.dec_attn.spans().mean() for layer in self.layers)
        return out

    # -- generation -------------------------------------------------------
    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, n_new: int, temperature: float = 1.0,
                 top_k: Optional[int] = None, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """Sample ``n_new`` tokens after ``prompt`` (B, T) or (T,).

        Transformer-XL reads each new token once and keeps the past as memory;
        a model without memory (``mem_len == 0``) recomputes its last
        ``tgt_len`` tokens every step, as the vanilla model must.
        ``temperature == 0`` is greedy decoding.
        """
        if n_new < 0:
            raise ValueError(f"n_new must be >= 0, got {n_new}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
        if top_k is not None and top_k <= 0:
            raise ValueError(f"top_k must be positive or None, got {top_k}")
        squeeze = prompt.dim() == 1
        seq = (prompt[None] if squeeze else prompt).long()
        if seq.size(1) == 0:
            raise ValueError("prompt must hold at least one token")
        was_training = self.training
        self.eval()
        L, recurrent = self.cfg.tgt_len, self.cfg.mem_len > 0
        mems, logits = None, None
        if recurrent:  # read the prompt segment by segment
            for s in range(0, seq.size(1), L):
                out = self(seq[:, s:s + L], mems)
                mems, logits = out.mems, out.logits[:, -1]
        for step in range(n_new):
            if not recurrent:
                logits = self(seq[:, -L:]).logits[:, -1]
            nxt = _sample(logits, temperature, top_k, generator)
            seq = torch.cat([seq, nxt], dim=1)
            if recurrent and step < n_new - 1:
                out = self(nxt, mems)
                mems, logits = out.mems, out.logits[:, -1]
        self.train(was_training)
        return seq[0] if squeeze else seq

    # -- interop with the authors' MemTransformerLM -------------------------
    def official_state_dict(self) -> dict[str, torch.Tensor]:
        """Our weights under the names/shapes of the authors' PyTorch code
        (attn_type 0, div_val 1, no adaptive softmax)."""
        if self.cfg.attn_type != "rel":
            raise ValueError("only attn_type='rel' has an official counterpart")
        sd = {_to_official(k): t.detach().clone() for k, t in self.state_dict().items()}
        if self.cfg.tie_weights:  # the authors store the tied softmax weight twice
            sd["crit.out_layers.0.weight"] = sd["word_emb.emb_layers.0.weight"].clone()
        return sd

    def load_official_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        """Load weights saved by the authors' ``MemTransformerLM``."""
        if self.cfg.attn_type != "rel":
            raise ValueError("only attn_type='rel' has an official counterpart")
        ours = {}
        for k, t in sd.items():
            name = _from_official(k)
            if name is not None:
                ours[name] = t
        if self.cfg.tie_weights:  # the authors store the tied weight twice: it must be the embedding
            out = ours.pop("out_weight", None)
            if out is not None and not torch.equal(out, ours.get("word_emb.weight", out)):
                raise ValueError("crit.out_layers.0.weight differs from the input embedding: the checkpoint "
                                 "has an untied softmax. Build the model with TXLConfig(tie_weights=False).")
        missing, unexpected = self.load_state_dict(ours, strict=False)
        if missing or unexpected:
            raise ValueError(f"official state dict does not fit this config: missing {missing}, "
                             f"unexpected {unexpected}")


def _to_official(name: str) -> str:
    if name == "word_emb.weight":
        return "word_emb.emb_layers.0.weight"
    if name == "out_bias":
        return "crit.out_layers.0.bias"
    if name == "out_weight":
        return "crit.out_layers.0.weight"
    return name


def _from_official(name: str) -> Optional[str]:
    table = {"word_emb.emb_layers.0.weight": "word_emb.weight",
             "crit.out_layers.0.bias": "out_bias", "crit.out_layers.0.weight": "out_weight"}
    return table.get(name, name)


def _sample(logits: torch.Tensor, temperature: float, top_k: Optional[int],
            generator: Optional[torch.Generator]) -> torch.Tensor:
    """Next token (B, 1) from logits (B, V): greedy at temperature 0."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, -1), 1, generator=generator)
