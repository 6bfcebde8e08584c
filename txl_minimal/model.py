"""Transformer-XL in one file (Dai et al., ACL 2019, arXiv:1901.02860), read top to bottom as Section 3: 3.2
segment-level recurrence (attention_mask, update_memory), 3.3 relative positional encoding (sinusoid_table, rel_shift:
Appendix B, RelMultiHeadAttn), the N-layer model (DecoderLayer, TransformerXL). The score of query i for key j:

  A^rel_ij = E_xi^T Wq^T Wk,E E_xj     (a) content-based addressing
           + E_xi^T Wq^T Wk,R R_{i-j}   (b) content-dependent positional bias
           + u^T Wk,E E_xj              (c) global content bias
           + v^T Wk,R R_{i-j}           (d) global positional bias

In every layer E_x is that layer's input h~ = [SG(m) o h]: (a) + (c) = (q_i + u)^T k_j, (b) + (d) = (q_i + v)^T
W_k,R R_{i-j}, i and j positions in h~: the code's query i is key mlen + i (distance mlen + i - j). ``r_w_bias``
is u, ``r_r_bias`` v; ``attn_type="abs"`` with ``mem_len=0`` is the vanilla model. fast.py swaps in same-named
subclasses (the same numbers, faster); ``fast_attn = False`` or a function here replaced at run time runs this code.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

if __package__ == "txl_minimal":  # clear errors, words' softmax, controls.py's set_lengths, generate, return_terms
    from txl_minimal import adaptive, validation
    from txl_minimal.controls import AttentionControls, ModelControls
else:  # this file copied alone (torch only): the same model, without the checks, cutoffs and controls.py's methods
    adaptive, validation, AttentionControls, ModelControls = None, None, nn.Module, nn.Module


@dataclass(frozen=True)
class TXLConfig:
    """The model's hyper-parameters, named as the authors' ``train.py`` flags (L, M, N, d: the README's).

    Returns:
        A frozen config (``dataclasses.replace(cfg, mem_len=256)``: a changed copy); an impossible field: ValueError.
    Examples:
        >>> TXLConfig(mem_len=-1)
        Traceback (most recent call last):
        ValueError: TXLConfig.mem_len must be an integer >= 0, got -1
    """
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
    attn_type: str = "rel"  # "rel": Transformer-XL; "abs" (mem_len=0: vanilla), "abs_far": absolute; "shaw" (variants)
    untie_r: bool = False  # one (u, v) pair per layer instead of shared
    shaw_max_dist: int = 64  # "shaw": largest distance with its own learned vector
    adaptive_span: bool = False  # variants.py: learn a span z per head (Sukhbaatar et al., 2019)
    span_ramp: int = 32  # rho: width of the soft mask's linear ramp
    span_init: float = 0.5  # initial z as a fraction of the largest span, tgt_len + mem_len
    span_loss_coeff: float = 2e-6  # lambda of the L1 penalty on spans (per token of span)
    cutoffs: list = field(default_factory=list)  # words (adaptive.py): cluster starts, e.g. [20000, 40000]; []: none
    div_val: int = 1  # cluster i's vectors have width d_embed // div_val**i
    d_embed: Optional[int] = None  # embedding width (None: d_model); else projected to d_model
    tie_projs: Optional[list] = None  # per cluster (len(cutoffs) + 1 bools): share the input's projection (None: none)

    def __post_init__(self) -> None:
        if validation is not None:  # a ValueError naming the first impossible field; NumPy ints as ints
            validation.check_config(self)

    def to_dict(self) -> dict:
        """Every field by name, as a checkpoint stores it (``TXLConfig(**d)`` builds it again)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class TXLOutput:
    """What ``TransformerXL.forward`` returns for a segment of B rows and T tokens.

    Attributes:
        logits: (B, T, vocab_size) next-token logits in nats (words: log-probabilities, None training on targets).
        mems: n_layer tensors (B, <=mem_len, d_model), what entered each layer, detached: the next segment's memory.
        loss: the mean NLL in nats (+ the adaptive-span penalty) if targets are given; bpc = nll.mean() / ln 2.
        nll: (B, T) NLL of every target, in nats.
        attn: per layer (B, n_head, T, mlen + T) attention probabilities (``return_attn``; adaptive span: kept keys).
        terms: per layer the terms before the 1/sqrt(d_head) scaling, NaN where masked (``return_terms``): "a", "b",
            "c", "d" for "rel" and adaptive span; "a", "b" for "shaw"; "a" for "abs" and "abs_far".
        rel_shift_input: per layer rel_shift's input, B~ + d~ (the row d~ added to each row; ``return_terms``; "shaw":
            its (b); "abs", "abs_far": None).
        hidden: per layer "memory", "input" (h~'s two parts), "attn" (o) and "output" (h^n) (``return_hidden``).
    Examples:
        >>> out = load_pretrained("txl-tiny")(as_ids(encode("the cat"))[None], return_hidden=True)
        >>> out.logits.shape, len(out.mems), out.hidden[1]["input"].shape
        (torch.Size([1, 7, 27]), 4, torch.Size([1, 7, 128]))
    """
    logits: Optional[torch.Tensor]
    mems: list[torch.Tensor]
    loss: Optional[torch.Tensor] = None
    nll: Optional[torch.Tensor] = None
    attn: Optional[list[torch.Tensor]] = None
    terms: Optional[list[dict[str, torch.Tensor]]] = None
    rel_shift_input: Optional[list[torch.Tensor]] = None
    hidden: Optional[list[dict[str, torch.Tensor]]] = None


# -- 3.2 Segment-level recurrence with state reuse ---------------------------------------------------
def attention_mask(qlen: int, mlen: int, same_length: bool, mem_len: int, device=None) -> torch.Tensor:
    """The keys each query must not see: the future; with ``same_length``, keys ``mem_len`` or more back too.

    Returns:
        Bool (qlen, mlen + qlen) on ``device``, True where query i (key mlen + i) must NOT see key j.
    Examples:
        >>> attention_mask(2, 1, False, 1).int().tolist()
        [[0, 0, 1], [0, 0, 0]]
    """
    if validation is not None:  # a length of 0, -1 or 2.5: a ValueError that says so
        validation.check_mask_lengths(qlen, mlen, same_length, mem_len)
    ones = torch.ones(qlen, mlen + qlen, dtype=torch.bool, device=device)
    mask = torch.triu(ones, diagonal=1 + mlen)
    if same_length and mem_len > 0:
        mask = mask | torch.tril(ones, diagonal=mlen - mem_len)
    return mask


def update_memory(hids: list[torch.Tensor], mems: Optional[list[torch.Tensor]], mem_len: int) -> list[torch.Tensor]:
    """The next memory: m^n_{tau+1} = SG(the last ``mem_len`` rows of [m^n_tau o h^n_tau]), o along T.

    Returns:
        One detached tensor per layer, from ``hids[n]`` = h^n (h^0: the embeddings) and ``mems[n]`` (None: none yet).
    Examples:
        >>> [m.shape[1] for m in update_memory([torch.zeros(1, 3, 2)], [torch.ones(1, 4, 2)], 5)]
        [5]
    """
    if validation is not None:  # mem_len -1 would keep all rows but the first
        validation.check_memory_inputs(hids, mems, mem_len)
    if mem_len == 0:
        return [h.new_empty(h.size(0), 0, h.size(2)) for h in hids]
    with torch.no_grad():
        if mems is not None and hids[0].size(1) < mem_len:  # (a segment of >= mem_len needs no cat)
            hids = [torch.cat([m, h], dim=1) for m, h in zip(mems, hids)]
        return [h[:, -mem_len:].detach() for h in hids]  # SG: no gradient flows into the memory


# -- 3.3 Relative positional encodings -------------------------------------------------------------
def sinusoid_table(pos_seq: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """R: the sinusoids of each position (or distance) of ``pos_seq`` at the frequencies ``inv_freq``.

    Returns:
        (len(pos_seq), 2 len(inv_freq)): one row per position, all sines then all cosines (the authors' order).
    Examples:
        >>> sinusoid_table(torch.tensor([0.0]), torch.tensor([1.0, 0.5]))   # distance 0: sin 0, sin 0, cos 0, cos 0
        tensor([[0., 0., 1., 1.]])
    """
    if validation is not None:
        validation.check_table_inputs(pos_seq, inv_freq)
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
    """Scores against R_{klen-1}..R_0 (columns) as scores against R_{i-j} (Appendix B's shift).

    Row i of ``x`` holds (q_i + v)^T W_k,R R_r for r = klen-1..0; key j needs r = mlen + i - j, column j + qlen-1-i:
    row i slides left by qlen-1-i, done for every row at once by padding a zero column and reading the flat buffer
    in rows of klen from offset qlen (the authors' code).
    Returns:
        (..., qlen, klen): (i, j) holds distance mlen + i - j; above the causal diagonal, garbage the mask hides.
    Examples:
        >>> rel_shift(torch.tensor([[1, 2, 3], [4, 5, 6]])).tolist()       # qlen 2, klen 3: mlen 1
        [[2, 3, 0], [4, 5, 6]]
    """
    if validation is not None:
        validation.check_shift_input(x)
    *lead, qlen, klen = x.shape
    padded = F.pad(x, (1, 0)).view(*lead, klen + 1, qlen)  # a zero column first, then read as (klen+1, qlen)
    return padded[..., 1:, :].reshape(*lead, qlen, klen)


class RelMultiHeadAttn(AttentionControls):  # controls.py: score_terms (return_terms)
    """One layer's multi-head attention over [SG(memory) o segment], scored by A^rel above ("abs": by (a) alone).

    Returns:
        The module (from ``cfg``); ``att(h, mem, pos, mask, u, v)``: h (B, qlen, d_model), mem (B, mlen, d_model) or
        None, and the model's ``relative_encoding(klen)`` (vanilla: None), ``mask(...)``, ``uv(layer)``, gives
        (LayerNorm(h + W_o attention) (pre_lnorm: h + W_o attention), probabilities (B, n_head, qlen, klen)).
    Examples:
        >>> m, h = load_pretrained("txl-tiny"), torch.ones(1, 3, 128)           # 3 tokens, no memory
        >>> o, a = m.layers[0].dec_attn(h, None, m.relative_encoding(3), m.mask(3, 0, None), *m.uv(0), return_attn=True)
        >>> o.shape, a.shape
        (torch.Size([1, 3, 128]), torch.Size([1, 4, 3, 3]))
    """

    def __init__(self, cfg: TXLConfig):
        super().__init__()
        if validation is not None:
            validation.check_config_type(cfg, type(self).__name__)
        self.cfg, self.n_head, self.d_head, self.scale = cfg, cfg.n_head, cfg.d_head, 1.0 / math.sqrt(cfg.d_head)
        self.qkv_net = nn.Linear(cfg.d_model, 3 * cfg.n_head * cfg.d_head, bias=False)  # rows: W_q, W_k,E, W_v
        self.o_net = nn.Linear(cfg.n_head * cfg.d_head, cfg.d_model, bias=False)
        self.layer_norm = nn.LayerNorm(cfg.d_model)
        self.drop, self.dropatt = nn.Dropout(cfg.dropout), nn.Dropout(cfg.dropatt)
        if cfg.attn_type == "rel":
            self.r_net = nn.Linear(cfg.d_model, cfg.n_head * cfg.d_head, bias=False)  # W_k,R
            if cfg.untie_r:
                self.r_w_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))  # u
                self.r_r_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head))  # v

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, H*D) -> (B, H, T, D)
        return x.view(x.size(0), x.size(1), self.n_head, self.d_head).transpose(1, 2)

    def project(self, h: torch.Tensor, mem: Optional[torch.Tensor]):
        """q = W_q h: (B, H, qlen, D); k = W_k,E h~, val = W_v h~: (B, H, klen, D), over h~ = [SG(m) o h]."""
        cat = h if mem is None else torch.cat([mem, h], dim=1)  # memory was detached when stored
        x = self.layer_norm(cat) if self.cfg.pre_lnorm else cat
        q, k, val = self.qkv_net(x).chunk(3, dim=-1)
        q = q[:, -h.size(1):]  # queries: the segment only; keys and values: memory too
        return self._heads(q), self._heads(k), self._heads(val)

    def positional_score(self, q, pos, v, shift: bool = True) -> Optional[torch.Tensor]:
        """(b) + (d) = (q_i + v)^T W_k,R R_{i-j} for all (i, j) (v None: (b)); pos: R_{klen-1..0} or None (vanilla).
        ``shift=False``: before ``rel_shift``, against R_{klen-1-c} in column c."""
        if pos is None:
            return None
        r = self.r_net(pos).view(-1, self.n_head, self.d_head).transpose(0, 1)  # W_k,R R: (H, klen, D)
        q_v = q if v is None else q + v[:, None]
        scores = q_v @ r.transpose(-1, -2)
        return rel_shift(scores) if shift else scores

    def reweight(self, prob: torch.Tensor) -> torch.Tensor:  # adaptive span (variants.py) re-weights here
        return prob

    def attend(self, q, k, val, pos, mask, u, v, return_attn: bool = True):  # return_attn False: fast.py may skip a
        """sum_j a_ij W_v h~_j, a_i = softmax_j(A^rel_ij / sqrt(d_head)) over unmasked keys: (B, H, qlen, D); a."""
        q_u = q if u is None else q + u[:, None]  # (q_i + u): (a) and (c) in one product
        score = q_u @ k.transpose(-1, -2)  # (a) + (c)
        if pos is not None:  # + (b) + (d) (the vanilla model has no R)
            score = score + self.positional_score(q, pos, v)
        score = (score * self.scale).masked_fill(mask, torch.finfo(score.dtype).min)
        prob = self.reweight(F.softmax(score.float(), dim=-1).to(val.dtype))
        return self.dropatt(prob) @ val, prob

    def forward(self, h, mem, pos, mask, u, v, return_attn: bool = False):  # shapes: the class's docstring
        q, k, val = self.project(h, mem)
        out, prob = self.attend(q, k, val, pos, mask, u, v, return_attn)
        out = self.drop(self.o_net(out.transpose(1, 2).reshape(*h.shape[:2], -1)))
        out = h + out if self.cfg.pre_lnorm else self.layer_norm(h + out)
        return out, prob


ATTENTION = {"rel": RelMultiHeadAttn, "abs": RelMultiHeadAttn, "abs_far": RelMultiHeadAttn}  # + variants.py's


# -- The N-layer model (end of 3.3) ----------------------------------------------------------------
class PositionwiseFF(nn.Module):
    """FF(x) = W2 ReLU(W1 x + b1) + b2, with the residual and LayerNorm."""

    def __init__(self, cfg: TXLConfig):
        super().__init__()
        self.pre_lnorm = cfg.pre_lnorm
        self.CoreNet = nn.Sequential(  # the authors' name: CoreNet.0/.3 load their checkpoints
            nn.Linear(cfg.d_model, cfg.d_inner), nn.ReLU(), nn.Dropout(cfg.dropout),
            nn.Linear(cfg.d_inner, cfg.d_model), nn.Dropout(cfg.dropout))
        self.layer_norm = nn.LayerNorm(cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.CoreNet(self.layer_norm(x)) if self.pre_lnorm else self.layer_norm(x + self.CoreNet(x))


class DecoderLayer(nn.Module):
    """Layer n: o = LN(h^{n-1} + W_o RelAttn(q: h^{n-1}; k, val: [SG(m^{n-1}) o h^{n-1}])), h^n = FF(o) (or pre-LN)."""

    def __init__(self, cfg: TXLConfig):
        super().__init__()
        self.dec_attn = ATTENTION["span" if cfg.adaptive_span else cfg.attn_type](cfg)  # variants.py adds two
        self.pos_ff = PositionwiseFF(cfg)

    def forward(self, h, mem, pos, mask, u, v, return_attn: bool = False, hidden: Optional[dict] = None):
        o, prob = self.dec_attn(h, mem, pos, mask, u, v, return_attn)
        out = self.pos_ff(o)
        if hidden is not None:  # return_hidden: what entered, the attention's output, the layer's
            hidden.update(memory=h[:, :0] if mem is None else mem, input=h, attn=o, output=out)
        return out, prob


class TransformerXL(ModelControls):  # controls.py: set_lengths, lengths, fast_attn, generate
    """Transformer-XL (Sec. 3 of the paper): a character or word language model with segment-level recurrence.

    Built from a ``TXLConfig`` (``cfg``), in training mode. ``out = model(tokens, mems, targets)`` runs one segment:
      tokens   (B, T) integer ids in [0, vocab_size): a corpus's ``encode`` (text8's 27 symbols: ``txl_minimal.encode``)
      mems     the previous segment's ``out.mems`` (None: empty); pass ``out.mems`` to the next
      targets  (B, T) integer ids to score (None: no loss); return_attn, return_terms, return_hidden: see TXLOutput
    Returns:
        The model; a call returns a ``TXLOutput``. ``model.generate`` samples; ``model.lengths(...)`` changes lengths.
    Examples:
        >>> model = TransformerXL(TXLConfig(n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, tgt_len=8))
        >>> x = as_ids(encode("the cat sat on a mat"))[None]     # (1, 20) token ids: a segment of 8, then the next
        >>> model(x[:, 8:16], model(x[:, :8]).mems, return_attn=True).attn[0].shape   # with memory: (B, H, T, M + T)
        torch.Size([1, 2, 8, 16])
    """

    def __init__(self, cfg: TXLConfig):
        super().__init__()
        self.cfg = cfg  # frozen, checked (controls.py): set_lengths replaces it here and in every layer
        words = bool(cfg.cutoffs) or cfg.d_embed not in (None, cfg.d_model)  # adaptive.py's input and softmax
        if words and adaptive is None:
            raise ValueError("cutoffs and d_embed need txl_minimal/adaptive.py: import the model from the package")
        self.word_emb = adaptive.input_layer(cfg) if words else nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.emb_scale = math.sqrt(cfg.d_model)  # the authors scale by sqrt(d_model)
        self.pos_emb = PositionalEmbedding(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layer))
        shared = cfg.attn_type == "rel" and not cfg.untie_r  # one (u, v) for every layer (untie_r: one per layer)
        self.r_w_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head)) if shared else None  # u
        self.r_r_bias = nn.Parameter(torch.zeros(cfg.n_head, cfg.d_head)) if shared else None  # v
        self.crit = adaptive.output_layer(cfg, self.word_emb) if words else None  # tied to the input
        if not words:
            self.out_bias = nn.Parameter(torch.zeros(cfg.vocab_size))
            self.out_weight = None if cfg.tie_weights else nn.Parameter(torch.zeros(cfg.vocab_size, cfg.d_model))
        self.apply(self._init_weights)
        if ModelControls is not nn.Module:  # in the package: fast.py's same-named subclasses (the same numbers, faster)
            self.fast_attn = True

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        """The authors' init: N(0, 0.02) weights, zero biases, LayerNorm gain N(1, 0.02)."""
        if isinstance(m, (nn.Linear, nn.Embedding, nn.LayerNorm)):
            nn.init.normal_(m.weight, 1.0 if isinstance(m, nn.LayerNorm) else 0.0, 0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        for name in ("r_w_bias", "r_r_bias", "r_emb", "out_weight"):  # r_emb: variants.ShawAttn
            if isinstance(getattr(m, name, None), nn.Parameter):
                nn.init.normal_(getattr(m, name), 0.0, 0.02)

    def uv(self, layer: int) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """(u, v) of layer ``layer`` (from 0): shared, or its own with ``untie_r``; (None, None) if not "rel"."""
        own = self.layers[layer].dec_attn if self.cfg.untie_r and self.cfg.attn_type == "rel" else self  # (else None)
        return own.r_w_bias, own.r_r_bias

    def relative_encoding(self, klen: int) -> torch.Tensor:
        """R_{klen-1}, ..., R_0: key j's distance to the last query (above clamp_len: R_clamp_len)."""
        dist = torch.arange(klen - 1, -1, -1.0, device=self.pos_emb.inv_freq.device)
        return self.pos_emb(dist.clamp(max=self.cfg.clamp_len) if self.cfg.clamp_len > 0 else dist)

    def mask(self, qlen: int, mlen: int, device: torch.device) -> torch.Tensor:
        """``attention_mask`` at this model's lengths (same_length, mem_len); fast.FastModel keeps it, and R."""
        return attention_mask(qlen, mlen, self.cfg.same_length, self.cfg.mem_len, device=device)

    def next_memory(self, hids: list[torch.Tensor], mems: Optional[list[torch.Tensor]]) -> list[torch.Tensor]:
        """``update_memory`` at this model's mem_len (fast.FastModel slices it from what the projections joined)."""
        return update_memory(hids, mems, self.cfg.mem_len)

    def output_logits(self, h: torch.Tensor) -> torch.Tensor:
        """The softmax layer's logits (weight: the input embedding unless untied); with cutoffs, log-probabilities."""
        if self.crit is not None:
            return self.crit.log_prob(h)
        return F.linear(h, self.word_emb.weight if self.out_weight is None else self.out_weight, self.out_bias)

    def forward(self, tokens: torch.Tensor, mems: Optional[list] = None, targets: Optional[torch.Tensor] = None,
                return_attn=False, return_terms=False, return_hidden=False) -> TXLOutput:
        """Run one segment (see the class docstring); returns a ``TXLOutput``."""
        if validation is not None:  # clear errors; a list of ids becomes a tensor (outside torch.compile)
            tokens, targets = validation.check_inputs(self, tokens, mems, targets)
        elif return_terms:
            raise ValueError("return_terms needs txl_minimal/controls.py: import the model from the package")
        return self.segment(tokens, mems, targets, return_attn, return_terms, return_hidden)

    def segment(self, tokens: torch.Tensor, mems: Optional[list] = None, targets: Optional[torch.Tensor] = None,
                return_attn=False, return_terms=False, return_hidden=False) -> TXLOutput:
        """``forward`` without the input checks (``torch.compile`` traces this without a break)."""
        mems = None if not mems or mems[0].size(1) == 0 else mems
        qlen = tokens.size(1)
        mlen = 0 if mems is None else mems[0].size(1)
        x = self.word_emb(tokens.long()) * self.emb_scale
        pos, read_mems = None, mems or [None] * len(self.layers)  # what each layer reads as its memory
        if self.cfg.attn_type == "abs":  # vanilla: U_0..U_{L-1} added to the input, the same in every segment
            x = x + self.pos_emb(torch.arange(qlen, device=x.device))  # (memory and segment share them: Sec. 3.3)
        elif self.cfg.attn_type == "abs_far":  # the authors' attn_type 2: U_{klen-1..0}, counted back from the last key
            U = self.pos_emb(torch.arange(mlen + qlen - 1, -1, -1.0, device=x.device)).to(x.dtype)
            x = x + U[mlen:]  # and layer 0 reads its memory with its own, farther positions added:
            read_mems = read_mems if mems is None else [mems[0] + U[:mlen]] + mems[1:]
        else:  # R, shared by the layers
            pos = self.drop(self.relative_encoding(mlen + qlen).to(x.dtype))  # (dropout on R: the authors' code)
        h = self.drop(x)
        mask = self.mask(qlen, mlen, x.device)
        hids, attn, terms, hidden = [], [], [], []
        for i, layer in enumerate(self.layers):
            hids.append(h)  # layer i's memory is made of what entered layer i
            mem, (u, v) = read_mems[i], self.uv(i)
            if return_terms:  # ((a)-(d) apart, rel_shift's input): controls.py
                terms.append(layer.dec_attn.score_terms(h, mem, pos, mask, u, v))
            hidden.append({} if return_hidden else None)
            h, prob = layer(h, mem, pos, mask, u, v, return_attn, hidden=hidden[-1])
            attn.append(prob)
        h = self.drop(h)
        per_target = self.crit is not None and self.training and targets is not None  # adaptive softmax: no logits
        out = TXLOutput(logits=None if per_target else self.output_logits(h), mems=self.next_memory(hids, mems),
                        attn=attn if return_attn else None, hidden=hidden if return_hidden else None,
                        terms=[t for t, _ in terms] or None, rel_shift_input=[s for _, s in terms] or None)
        if targets is not None:  # (per_target: only the targets' clusters are scored)
            nll = self.crit.nll(h, targets.long()) if per_target else F.cross_entropy(
                out.logits.float().flatten(0, 1), targets.long().flatten(), reduction="none")
            out.nll = nll.float().view_as(targets)
            out.loss = out.nll.mean()
            if self.cfg.adaptive_span:  # variants.SpanAttn: the L1 penalty on the spans
                out.loss = out.loss + self.cfg.span_loss_coeff * sum(l.dec_attn.spans().mean() for l in self.layers)
        return out

