"""Transformer-XL in one file (Dai et al., ACL 2019, arXiv:1901.02860).

Read top to bottom, this file follows Section 3 of the paper:

  3.2  segment-level recurrence      -> attention_mask, update_memory (read_segments: evaluate.py)
  3.3  relative positional encoding  -> sinusoid_table, rel_shift, RelMultiHeadAttn
  3.3  (its end) the N-layer model   -> DecoderLayer, TransformerXL (+ generate)

The relative attention score between query i and key j:

  A^rel_ij = E_xi^T Wq^T Wk,E E_xj     (a) content-based addressing
           + E_xi^T Wq^T Wk,R R_{i-j}   (b) content-dependent positional bias
           + u^T Wk,E E_xj              (c) global content bias
           + v^T Wk,R R_{i-j}           (d) global positional bias

Also here: the vanilla baseline, ``attn_type="abs"`` (and ``"abs_far"``, the authors' variant
that gives the memory farther positions); Shaw et al. and adaptive span are in ``variants.py``;
the word-level embedding and softmax (``cutoffs``: adaptive input and softmax) in ``adaptive.py``.
Only torch is needed (the package adds ``validation.py``'s clear errors). Names are the authors':
``r_w_bias`` is u, ``r_r_bias`` is v (``checkpoint.load_official_state_dict`` reads their weights).
Shapes are batch first: tokens (B, T), states (B, T, d_model), scores (B, H, T, klen).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field, fields, replace
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

if __package__ == "txl_minimal":  # clear errors (validation.py), fast paths (fast.py), word-level softmax
    from txl_minimal import adaptive, fast, validation
    from txl_minimal.fast import Dropout  # nn.Dropout with cheaper random numbers on a CPU
else:  # this file copied alone: the same model, without the checks, the fast paths and cutoffs
    adaptive = fast = validation = None
    Dropout = nn.Dropout


@dataclass
class TXLConfig:
    """Hyper-parameters; the names are the authors' (their ``train.py`` flags)."""

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
    tie_weights: bool = True  # the softmax weight is the input embedding (per cluster with cutoffs)
    attn_type: str = "rel"  # "rel" (Transformer-XL), "abs" (vanilla), "abs_far", "shaw" (variants.py)
    untie_r: bool = False  # one (u, v) pair per layer instead of shared
    shaw_max_dist: int = 64  # "shaw": largest distance with its own learned vector
    adaptive_span: bool = False  # variants.py: learn a span z per head (Sukhbaatar et al., 2019)
    span_ramp: int = 32  # R: width of the soft mask's linear ramp
    span_init: float = 0.5  # initial z as a fraction of the largest span, tgt_len + mem_len
    span_loss_coeff: float = 2e-6  # lambda of the L1 penalty on spans (per token of span)
    # Words (adaptive.py): adaptive input and softmax over frequency-sorted clusters of the vocabulary
    cutoffs: list = field(default_factory=list)  # cluster starts, e.g. [20000, 40000, 200000]; []: one softmax
    div_val: int = 1  # cluster i's vectors have width d_embed // div_val**i
    d_embed: Optional[int] = None  # embedding width (None: d_model); else projected to d_model
    tie_projs: Optional[list] = None  # per cluster (len(cutoffs) + 1 bools): share the input's projection (None: none)

    def __post_init__(self) -> None:
        if validation is not None:  # a ValueError naming the first impossible field
            validation.check_config(self)
        self.cutoffs = list(self.cutoffs)  # a tuple would not compare equal to a saved list
        self.tie_projs = None if self.tie_projs is None else list(self.tie_projs)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class TXLOutput:
    """What ``TransformerXL.forward`` returns for a segment of B rows and T tokens.

    logits: (B, T, vocab_size) next-token log-probabilities in nats, up to a constant per row (with
            ``cutoffs``: exactly, from the adaptive softmax; None when it trains on targets, which
            need only the targets' log-probabilities: ``nll``).
    mems:   n_layer tensors (B, <=mem_len, d_model): what entered each layer, detached, for the next segment;
            in the parameters' dtype, also under autocast (so either state reads them).
    loss:   scalar mean NLL in nats (+ the adaptive-span penalty) if targets are given; bpc = loss / ln 2.
    nll:    (B, T) NLL of every target, in nats (-ln p).
    attn:   per layer (B, n_head, T, mlen + T) attention probabilities, rows sum to 1 (``return_attn``).
    terms:  per layer {"a", "b", "c", "d"}: the score terms before the 1/sqrt(d_head) scaling,
            (B, n_head, T, mlen + T), NaN where masked (``return_terms``).
    """

    logits: Optional[torch.Tensor]
    mems: list[torch.Tensor]
    loss: Optional[torch.Tensor] = None
    nll: Optional[torch.Tensor] = None
    attn: Optional[list[torch.Tensor]] = None
    terms: Optional[list[dict[str, torch.Tensor]]] = None


# -- 3.2 Segment-level recurrence with state reuse ---------------------------------------------------

def attention_mask(qlen: int, mlen: int, same_length: bool, mem_len: int,
                   device: torch.device | None = None) -> torch.Tensor:
    """Bool (qlen, mlen+qlen), True where query i (key index mlen + i) must NOT see key j: the
    future; with ``same_length`` also keys beyond the last ``mem_len`` (the authors' evaluation
    setting; with ``mem_len == 0`` their code masks every key and returns NaN, this one does not)."""
    ones = torch.ones(qlen, mlen + qlen, dtype=torch.bool, device=device)
    mask = torch.triu(ones, diagonal=1 + mlen)
    if same_length and mem_len > 0:
        mask = mask | torch.tril(ones, diagonal=mlen - mem_len)
    return mask


def update_memory(hids: list[torch.Tensor], mems: Optional[list[torch.Tensor]],
                  mem_len: int) -> list[torch.Tensor]:
    """m^n_{tau+1} = SG(last mem_len of [m^n_tau o h^n_tau]) for every layer input h^n."""
    if mem_len == 0:
        return [h.new_empty(h.size(0), 0, h.size(2)) for h in hids]
    with torch.no_grad():
        if mems is not None and hids[0].size(1) < mem_len:  # (a segment of >= mem_len needs no cat)
            hids = [torch.cat([m, h], dim=1) for m, h in zip(mems, hids)]
        return [h[:, -mem_len:].detach() for h in hids]  # SG: no gradient flows into the memory


# -- 3.3 Relative positional encodings -------------------------------------------------------------

def sinusoid_table(pos_seq: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """R: one row per position, all sines then all cosines (the authors' layout)."""
    angles = torch.outer(pos_seq, inv_freq)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class PositionalEmbedding(nn.Module):
    """The fixed sinusoids of Vaswani et al.; Transformer-XL feeds it distances."""

    def __init__(self, d_model: int):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0.0, d_model, 2.0) / d_model)))

    def forward(self, pos_seq: torch.Tensor) -> torch.Tensor:
        return sinusoid_table(pos_seq.to(self.inv_freq.dtype), self.inv_freq)


def rel_shift(x: torch.Tensor) -> torch.Tensor:
    """Turn scores against R_{klen-1}..R_0 (columns) into scores against R_{i-j}.

    Row i holds (q_i + v) . W_kR R_r for r = klen-1..0; key j needs r = mlen + i - j, column
    j + qlen - 1 - i, so row i slides left by qlen - 1 - i. Padding a zero column, reading the
    buffer with the other shape and dropping the first row does that (the authors' code; Appendix B
    shifts row by row); entries above the causal diagonal become garbage that the mask removes."""
    *lead, qlen, klen = x.shape
    padded = F.pad(x, (1, 0))  # (..., qlen, klen + 1)
    padded = padded.view(*lead, klen + 1, qlen)
    return padded[..., 1:, :].reshape(*lead, qlen, klen)


class RelMultiHeadAttn(nn.Module):
    """Multi-head attention over [SG(memory) o segment] with the score A^rel above. The vanilla
    model uses it without the positional score; variants override ``positional_score``/``reweight``."""

    fused = True  # PyTorch's fused kernel computes the same when no probabilities are asked for
    flex = False  # FlexAttention instead (fast.py; TransformerXL.flex_attn sets it)

    def __init__(self, cfg: TXLConfig):
        super().__init__()
        self.cfg, self.n_head, self.d_head = cfg, cfg.n_head, cfg.d_head
        self.scale = 1.0 / math.sqrt(cfg.d_head)
        hd = cfg.n_head * cfg.d_head
        self.qkv_net = nn.Linear(cfg.d_model, 3 * hd, bias=False)  # rows: W_q, W_k,E, W_v
        self.o_net = nn.Linear(hd, cfg.d_model, bias=False)
        self.layer_norm = nn.LayerNorm(cfg.d_model)
        self.drop = Dropout(cfg.dropout)
        self.dropatt = Dropout(cfg.dropatt)
        self.fast = fast is not None  # fast.py's paths (TransformerXL.fast_attn sets it)
        if cfg.attn_type == "rel":
            self.r_net = nn.Linear(cfg.d_model, hd, bias=False)  # W_k,R
            if cfg.untie_r:
                self.r_w_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))  # u
                self.r_r_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))  # v

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, H*D) -> (B, H, T, D)
        return x.view(x.size(0), x.size(1), self.n_head, self.d_head).transpose(1, 2)

    def project(self, h: torch.Tensor, mem: Optional[torch.Tensor]):
        """q = W_q h, k = W_k,E h~, v = W_v h~ over h~ = [SG(m) o h], each (B, H, T, d_head)."""
        cat = h if mem is None else torch.cat([mem, h], dim=1)  # memory was detached when stored
        x = self.layer_norm(cat) if self.cfg.pre_lnorm else cat
        q, k, val = self.qkv_net(x).chunk(3, dim=-1)
        q = q[:, -h.size(1):]  # queries: the segment only; keys and values: memory too
        return self._heads(q), self._heads(k), self._heads(val)

    def positional_score(self, q: torch.Tensor, pos: Optional[torch.Tensor],
                         v: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """(b) + (d) = (q_i + v)^T W_k,R R_{i-j} for all (i, j); pos: R_{klen-1..0} or None (vanilla)."""
        if pos is None:
            return None
        r = self.r_net(pos).view(-1, self.n_head, self.d_head).transpose(0, 1)  # W_k,R R: (H, klen, D)
        q_v = q if v is None else q + v[:, None]
        return rel_shift(q_v @ r.transpose(-1, -2))

    def reweight(self, prob: torch.Tensor) -> torch.Tensor:  # adaptive span (variants.py) re-weights here
        return prob

    def forward(self, h: torch.Tensor, mem: Optional[torch.Tensor], pos: Optional[torch.Tensor],
                mask: torch.Tensor, u: Optional[torch.Tensor], v: Optional[torch.Tensor],
                return_attn: bool = False) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """h (B, qlen, d_model), mem (B, mlen, d_model) or None -> (output like h, probabilities or None)."""
        B, qlen = h.shape[:2]
        if fast is not None and fast.reusing(self):  # evaluation: the memory's k, v from the last segment
            q, k, val = fast.project_reusing_memory(self, h, mem)
        elif fast is not None and fast.active(self):  # no queries for the memory's rows
            q, k, val = fast.project(self, h, mem)
        else:
            q, k, val = self.project(h, mem)
        q_u = q if u is None else q + u[:, None]  # (q_i + u): (a) and (c) in one product
        if self.fused and not return_attn:  # the same numbers, faster (fast.py)
            out, prob = self._fused(q, q_u, k, val, pos, mask, v), None
        else:
            pos_score = self.positional_score(q, pos, v)  # (b) + (d)
            score = q_u @ k.transpose(-1, -2)  # (a) + (c)
            if pos_score is not None:
                score = score + pos_score  # + (b) + (d)
            score = (score * self.scale).masked_fill(mask, torch.finfo(score.dtype).min)
            prob = F.softmax(score.float(), dim=-1).to(val.dtype)
            prob = self.reweight(prob)
            out = self.dropatt(prob) @ val  # sum_j a_ij W_v h~_j
        out = self.drop(self.o_net(out.transpose(1, 2).reshape(B, qlen, -1)))
        out = h + out if self.cfg.pre_lnorm else self.layer_norm(h + out)
        return out, prob

    def _fused(self, q, q_u, k, val, pos, mask, v) -> torch.Tensor:
        """The same by ``fast.relative_attention`` or ``scaled_dot_product_attention``: (b)+(d) and
        the mask (lowest finite value, as -inf gives NaN in bf16) are the bias of the scores."""
        own = type(self).positional_score is RelMultiHeadAttn.positional_score  # not a variant's (Shaw)
        if self.flex and pos is not None and own and not (self.training and self.cfg.dropatt > 0):
            return fast.attend_flex(self, q, q_u, k, val, pos, mask, v)  # (it drops no attention weights)
        if fast is not None and fast.active(self) and pos is not None and own:
            return fast.attend(self, q, q_u, k, val, pos, mask, v)
        pos_score = self.positional_score(q, pos, v)
        if pos_score is None:
            bias = mask.logical_not()  # bool: True = may attend
        else:
            bias = (pos_score * self.scale).to(q_u.dtype)
            bias = bias.masked_fill(mask, torch.finfo(bias.dtype).min)
        dropatt = self.cfg.dropatt if self.training else 0.0
        return F.scaled_dot_product_attention(q_u, k, val, attn_mask=bias, dropout_p=dropatt, scale=self.scale)

    def score_terms(self, h, mem, pos, mask, u, v) -> dict[str, torch.Tensor]:
        """The terms (a)-(d) separately, unscaled, NaN where masked (to look at them)."""
        q, k, _ = self.project(h, mem)
        terms = {"a": q @ k.transpose(-1, -2)}
        if pos is not None:
            terms["b"] = self.positional_score(q, pos, None)
        if u is not None:  # (c) and (d) do not depend on the query: one row per head, broadcast
            r = self.r_net(pos).view(-1, self.n_head, self.d_head).transpose(0, 1)
            terms["c"] = (u[:, None] @ k.transpose(-1, -2)).expand_as(terms["a"])
            terms["d"] = rel_shift((v[:, None] @ r.transpose(-1, -2)).expand_as(terms["a"]))
        return {name: t.masked_fill(mask, float("nan")) for name, t in terms.items()}


# Attention classes by name; variants.py adds "shaw" and "span".
ATTENTION = {"rel": RelMultiHeadAttn, "abs": RelMultiHeadAttn, "abs_far": RelMultiHeadAttn}


# -- The N-layer model (end of 3.3) ----------------------------------------------------------------

class PositionwiseFF(nn.Module):
    """FF(x) = W2 ReLU(W1 x + b1) + b2, with the residual and LayerNorm."""

    def __init__(self, cfg: TXLConfig):
        super().__init__()
        self.pre_lnorm = cfg.pre_lnorm
        self.CoreNet = nn.Sequential(  # the authors' name, so indices 0 and 3 match
            nn.Linear(cfg.d_model, cfg.d_inner), nn.ReLU(), Dropout(cfg.dropout),
            nn.Linear(cfg.d_inner, cfg.d_model), Dropout(cfg.dropout))
        self.layer_norm = nn.LayerNorm(cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_lnorm:
            return x + self.CoreNet(self.layer_norm(x))
        return self.layer_norm(x + self.CoreNet(x))


class DecoderLayer(nn.Module):
    """One layer n: h^n = FF(LayerNorm(h^{n-1} + RelAttn([SG(m^{n-1}) o h^{n-1}])))."""

    def __init__(self, cfg: TXLConfig):
        super().__init__()
        name = "span" if cfg.adaptive_span else cfg.attn_type
        if name not in ATTENTION:
            raise ValueError(f"attention {name!r} is in txl_minimal/variants.py: import it first")
        self.dec_attn = ATTENTION[name](cfg)
        self.pos_ff = PositionwiseFF(cfg)

    def forward(self, h, mem, pos, mask, u, v, return_attn: bool = False):
        h, prob = self.dec_attn(h, mem, pos, mask, u, v, return_attn)
        return self.pos_ff(h), prob


class TransformerXL(nn.Module):
    """Character/word LM with segment-level recurrence. ``out = model(tokens, mems, targets,
    return_attn=False, return_terms=False)`` runs one segment and returns a ``TXLOutput``:
      tokens   (B, T) integer ids in [0, vocab_size); text: ``txl_minimal.encode``
      mems     the previous segment's ``out.mems`` (None: empty); pass ``out.mems`` to the next
      targets  (B, T) integer ids to score (None: no loss); return_attn, return_terms: see TXLOutput
    """

    def __init__(self, cfg: TXLConfig):
        super().__init__()
        self.cfg = cfg = replace(cfg)  # our own copy: set_lengths must not change another model's
        self.crit = None  # with cutoffs: the adaptive softmax (adaptive.py), tied to the adaptive input
        words = bool(cfg.cutoffs) or cfg.d_embed not in (None, cfg.d_model)
        if words and adaptive is None:
            raise ValueError("cutoffs and d_embed need txl_minimal/adaptive.py: import the model from the package")
        clusters = (cfg.vocab_size, cfg.d_embed or cfg.d_model, cfg.d_model, cfg.cutoffs, cfg.div_val)
        self.word_emb = adaptive.AdaptiveEmbedding(*clusters) if words else nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.emb_scale = math.sqrt(cfg.d_model)  # the authors scale by sqrt(d_model)
        self.pos_emb = PositionalEmbedding(cfg.d_model)
        self.drop = Dropout(cfg.dropout)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layer))
        self.r_w_bias = self.r_r_bias = None
        if cfg.attn_type == "rel" and not cfg.untie_r:
            self.r_w_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))  # u
            self.r_r_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))  # v
        if words:
            self.crit = adaptive.ProjectedAdaptiveLogSoftmax(*clusters)
            adaptive.tie(self.word_emb, self.crit, cfg.tie_weights, cfg.tie_projs or [])
        else:
            self.out_bias = nn.Parameter(torch.zeros(cfg.vocab_size))
            self.out_weight = None if cfg.tie_weights else nn.Parameter(torch.zeros(cfg.vocab_size, cfg.d_model))
        self.fast_attn = True  # fast.py's paths (same numbers) unless probabilities are asked for
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        """The authors' init: N(0, 0.02) weights, zero biases, LayerNorm gain N(1, 0.02)."""
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.normal_(m.weight, 1.0, 0.02)
            nn.init.zeros_(m.bias)
        for name in ("r_w_bias", "r_r_bias", "r_emb", "out_weight"):  # r_emb: variants.ShawAttn
            if isinstance(getattr(m, name, None), nn.Parameter):
                nn.init.normal_(getattr(m, name), 0.0, 0.02)

    def set_lengths(self, tgt_len: Optional[int] = None, mem_len: Optional[int] = None,
                    clamp_len: Optional[int] = None, same_length: Optional[bool] = None) -> None:
        """Change lengths in place (None keeps one); a bad value raises ``ValueError``, changing nothing."""
        lengths = dict(tgt_len=tgt_len, mem_len=mem_len, clamp_len=clamp_len, same_length=same_length)
        checked = replace(self.cfg, **{k: v for k, v in lengths.items() if v is not None})  # validates a copy
        self.cfg.__dict__.update(checked.__dict__)  # in place: every layer shares self.cfg

    def train(self, mode: bool = True) -> TransformerXL:
        """``nn.Module.train``; entering eval mode also forgets what an earlier evaluation kept
        (fast.py: the weights may have been updated since)."""
        if fast is not None and not mode:
            fast.forget(self)
        return super().train(mode)

    @contextlib.contextmanager
    def lengths(self, tgt_len: Optional[int] = None, mem_len: Optional[int] = None,
                clamp_len: Optional[int] = None, same_length: Optional[bool] = None):
        """``with model.lengths(mem_len=512):`` in eval mode; lengths and mode come back on exit."""
        cfg, was_training = self.cfg, self.training
        saved = (cfg.tgt_len, cfg.mem_len, cfg.clamp_len, cfg.same_length)  # only these come back
        self.set_lengths(tgt_len, mem_len, clamp_len, same_length)
        self.eval()
        try:
            yield self
        finally:
            self.set_lengths(*saved)
            self.train(was_training)

    @property
    def fast_attn(self) -> bool:
        """True: the fused attention and cheaper dropout of fast.py; False: the explicit code above."""
        return self._fast

    @fast_attn.setter
    def fast_attn(self, on: bool) -> None:
        self._fast = bool(on) and fast is not None
        for m in self.modules():
            if m is not self and hasattr(m, "fast"):
                m.fast = self._fast

    @property
    def flex_attn(self) -> bool:
        """True: the relative attention through FlexAttention (fast.py's ``attend_flex``: torch >= 2.5;
        fast only under ``torch.compile``); False (the default): the paths above."""
        return any(getattr(m, "flex", False) for m in self.modules())

    @flex_attn.setter
    def flex_attn(self, on: bool) -> None:
        if on and (fast is None or not fast.flex_available()):
            raise ValueError(f"flex_attn needs torch.nn.attention.flex_attention (torch >= 2.5), not in torch "
                             f"{torch.__version__}. Fix: upgrade torch, or leave flex_attn off")
        for m in self.modules():
            if isinstance(m, RelMultiHeadAttn):
                m.flex = bool(on)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def uv(self, layer: int) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """The global biases (u, v) of ``layer``: shared, or its own with ``untie_r``."""
        att = self.layers[layer].dec_attn
        return (att.r_w_bias, att.r_r_bias) if self.cfg.untie_r else (self.r_w_bias, self.r_r_bias)

    def relative_encoding(self, klen: int) -> torch.Tensor:
        """R_{klen-1}, ..., R_0: key j's distance to the last query (above clamp_len: R_clamp_len)."""
        dist = torch.arange(klen - 1, -1, -1.0, device=self.pos_emb.inv_freq.device)
        return self.pos_emb(dist.clamp(max=self.cfg.clamp_len) if self.cfg.clamp_len > 0 else dist)

    def output_logits(self, h: torch.Tensor) -> torch.Tensor:
        """The softmax layer's logits (its weight is the input embedding unless untied); with
        cutoffs, the adaptive softmax's log-probabilities (normalised logits)."""
        if self.crit is not None:
            return self.crit.log_prob(h)
        return F.linear(h, self.word_emb.weight if self.out_weight is None else self.out_weight, self.out_bias)

    def forward(self, tokens: torch.Tensor, mems: Optional[list[torch.Tensor]] = None,
                targets: Optional[torch.Tensor] = None, return_attn: bool = False,
                return_terms: bool = False) -> TXLOutput:
        """Run one segment (see the class docstring); returns a ``TXLOutput``."""
        if validation is not None:  # clear errors; once per call, outside what train.py may compile
            validation.check_inputs(self, tokens, mems, targets)
        return self.segment(tokens, mems, targets, return_attn, return_terms)

    def segment(self, tokens: torch.Tensor, mems: Optional[list[torch.Tensor]] = None,
                targets: Optional[torch.Tensor] = None, return_attn: bool = False,
                return_terms: bool = False) -> TXLOutput:
        """``forward`` without the input checks (``torch.compile`` traces this without a break)."""
        cfg = self.cfg
        mems = None if not mems or mems[0].size(1) == 0 else mems
        B, qlen = tokens.shape
        mlen = 0 if mems is None else mems[0].size(1)
        x = self.word_emb(tokens.long()) * self.emb_scale
        pos, read_mems = None, mems
        if cfg.attn_type == "abs":  # vanilla: U_0..U_{L-1} added to the input, the same in every segment
            x = x + self.pos_emb(torch.arange(qlen, device=x.device))  # (so the memory's repeat, Sec. 3.3)
        elif cfg.attn_type == "abs_far":  # the authors' attn_type 2: U counts back from the last key, and
            U = self.pos_emb(torch.arange(mlen + qlen - 1, -1, -1.0, device=x.device)).to(x.dtype)
            x = x + U[mlen:]
            if mems is not None:  # layer 0 reads its memory with its own, farther positions added
                read_mems = [mems[0] + U[:mlen]] + mems[1:]
        else:  # R, shared by the layers
            klen = mlen + qlen
            pos = self.drop(self._kept("R", (klen, cfg.clamp_len, x.dtype, x.device),
                                       lambda: self.relative_encoding(klen).to(x.dtype)))
        h = self.drop(x)
        mask = self._kept("mask", (qlen, mlen, cfg.same_length, cfg.mem_len, x.device),
                          lambda: attention_mask(qlen, mlen, cfg.same_length, cfg.mem_len, device=x.device))
        hids, attn, terms = [], [], []
        for i, layer in enumerate(self.layers):
            hids.append(h)  # layer i's memory is made of what entered layer i
            mem, (u, v) = None if mems is None else read_mems[i], self.uv(i)
            if return_terms:
                terms.append(layer.dec_attn.score_terms(h, mem, pos, mask, u, v))
            h, prob = layer(h, mem, pos, mask, u, v, return_attn or not self.fast_attn)
            attn.append(prob)
        h = self.drop(h)
        # training on targets with the adaptive softmax: only the targets' clusters, not every word's
        per_target = self.crit is not None and self.training and targets is not None
        on = fast is not None and fast.active(self)
        new_mems = fast.next_memory(self, hids, mems, cfg.mem_len) if on else None  # (one cat fewer)
        out = TXLOutput(logits=None if per_target else self.output_logits(h),
                        mems=update_memory(hids, mems, cfg.mem_len) if new_mems is None else new_mems,
                        attn=attn if return_attn else None, terms=terms if return_terms else None)
        if on:  # evaluation: the new memory's keys and values, for the next segment
            fast.remember_memory_kv(self, out.mems)
        if targets is not None:
            if per_target:
                out.nll = self.crit.nll(h, targets.long()).float()
            else:
                out.nll = F.cross_entropy(out.logits.float().flatten(0, 1), targets.long().flatten(),
                                          reduction="none").view(B, qlen)
            out.loss = out.nll.mean()
            if cfg.adaptive_span:  # variants.SpanAttn: the L1 penalty on the spans
                out.loss = out.loss + cfg.span_loss_coeff * sum(l.dec_attn.spans().mean() for l in self.layers)
        return out

    def _kept(self, name: str, key: tuple, make):
        """``make()``; in an evaluation with the fast paths, the value made for the same ``key`` in an
        earlier segment (R and the mask are the same in every segment of a length: fast.kept)."""
        return make() if fast is None else fast.kept(self, name, key, make)

    @torch.no_grad()
    def generate(self, prompt, n_new: int, temperature: float = 1.0, top_k: Optional[int] = None,
                 generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """The prompt's token ids ((B, T) or (T,), a tensor or a list of ints) followed by ``n_new``
        sampled ids; ``temperature == 0`` is greedy. With memory each new token is read once;
        without (the vanilla model) the last ``tgt_len`` are recomputed per step. For text, see
        ``txl_minimal.generate_text`` (in data.py: it encodes the prompt and decodes the result)."""
        if isinstance(prompt, str):  # text is encoded where text lives, not in the model
            raise ValueError(f"generate takes token ids, not text (got {prompt!r}). Fix: "
                             "txl_minimal.generate_text(model, text, n_new), or pass token ids: "
                             "model.generate(torch.tensor([8, 9]), n_new)")
        if validation is not None:  # clear errors for bad arguments
            prompt, n_new, temperature, top_k = validation.check_generate(prompt, n_new, temperature, top_k)
        seq = torch.as_tensor(prompt, device=self.pos_emb.inv_freq.device).long()
        squeeze = seq.dim() == 1
        seq = seq[None] if squeeze else seq
        L, recurrent = self.cfg.tgt_len, self.cfg.mem_len > 0
        unread, mems = (seq if recurrent else seq[:, -L:]), None
        with self.lengths():  # eval mode, restored afterwards
            for _ in range(n_new):
                for segment in unread.split(L, dim=1):  # the prompt: segment by segment
                    out = self(segment, mems)
                    mems = out.mems  # (empty without memory)
                logits = out.logits[:, -1].float()
                if top_k is not None:  # only the k most likely tokens may be drawn
                    kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                if temperature == 0:  # greedy
                    nxt = logits.argmax(-1, keepdim=True)
                else:
                    # (logit - max) / T in float64 lies in [-inf, 0] for any T > 0: no NaN from a T
                    # of 1e-45 (inf) or 1e39 (inf in float32, and -inf / inf after top_k)
                    scaled = (logits - logits.max(-1, keepdim=True).values).double() / temperature
                    nxt = torch.multinomial(F.softmax(scaled, -1), 1, generator=generator)
                seq = torch.cat([seq, nxt], dim=1)
                unread = nxt if recurrent else seq[:, -L:]  # with memory each token is read once
        return seq[0] if squeeze else seq
