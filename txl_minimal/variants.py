"""Attention variants beside the paper's path (not part of Section 3 of Dai et al., 2019).

  ShawAttn   Shaw et al. (2018): one learned vector per clipped distance, term (b) only
             (the relative encoding the paper compares against in its ablation, Table 6)
  SpanAttn   adaptive attention span (Sukhbaatar et al., 2019): every head learns how far
             back it looks, and memory no head can reach is dropped

Importing this module registers both with ``model.ATTENTION`` (``import txl_minimal``
does it), so that ``TXLConfig(attn_type="shaw")`` and ``TXLConfig(adaptive_span=True)``
select them. Each overrides only the step where it differs from ``RelMultiHeadAttn``.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn

from txl_minimal.model import ATTENTION, RelMultiHeadAttn, TXLConfig, rel_shift


class ShawAttn(RelMultiHeadAttn):
    """score = q_i . k_j + q_i . a_{clip(i-j)}: a learned table a, shared by the heads,
    in place of (b) + (d); no global biases u, v. The sinusoids R are not used."""

    def __init__(self, cfg: TXLConfig):
        super().__init__(cfg)
        self.r_emb = nn.Parameter(torch.zeros(cfg.shaw_max_dist + 1, cfg.d_head))

    def positional_score(self, q: torch.Tensor, pos: Optional[torch.Tensor],
                         v: Optional[torch.Tensor], shift: bool = True) -> torch.Tensor:
        klen = pos.size(0)  # R_{klen-1}, ..., R_0: only its length matters here
        dist = torch.arange(klen - 1, -1, -1, device=q.device).clamp(max=self.cfg.shaw_max_dist)
        scores = q @ self.r_emb[dist].transpose(-1, -2)  # (b) only, against the distances klen-1..0
        return rel_shift(scores) if shift else scores


def span_mask(dist: torch.Tensor, z: torch.Tensor, ramp: int) -> torch.Tensor:
    """Adaptive span's soft mask m_z(x) = clamp((R + z - x) / R, 0, 1).

    dist: distances x (any shape); z: spans (n_head,). Returns (n_head, *dist.shape):
    1 up to distance z, 0 beyond z + R, linear in between (so z gets a gradient).
    """
    z = z.view(-1, *([1] * dist.dim()))
    return ((ramp + z - dist) / ramp).clamp(0.0, 1.0)


class SpanAttn(RelMultiHeadAttn):
    """A^rel attention whose probabilities are re-weighted by m_z(i - j), one span z per head
    (learned, with an L1 penalty the model adds to its loss)."""

    def __init__(self, cfg: TXLConfig):
        super().__init__(cfg)
        self.span_frac = nn.Parameter(torch.full((cfg.n_head,), cfg.span_init))  # z / max_span
        self.max_span = cfg.tgt_len + cfg.mem_len  # at construction: set_lengths must not rescale z

    def spans(self) -> torch.Tensor:
        """z per head, in tokens."""
        return self.span_frac.clamp(0.0, 1.0) * self.max_span

    def trim_memory(self, mem: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """Drop memory that every head's mask zeroes: beyond max(z) + R."""
        if mem is None:
            return None
        keep = int(math.ceil(float(self.spans().detach().max()) + self.cfg.span_ramp))
        return mem[:, max(0, mem.size(1) - keep):]

    def _trimmed(self, h, mem, pos, mask):
        """Keys no head can reach cost nothing: shorter memory, R and mask to match."""
        mem = self.trim_memory(mem)
        klen = h.size(1) + (0 if mem is None else mem.size(1))
        return mem, pos[-klen:], mask[:, -klen:]

    def forward(self, h, mem, pos, mask, u, v, return_attn: bool = False):
        return super().forward(h, *self._trimmed(h, mem, pos, mask), u, v, return_attn)

    def score_terms(self, h, mem, pos, mask, u, v) -> tuple:
        return super().score_terms(h, *self._trimmed(h, mem, pos, mask), u, v)

    def reweight(self, prob: torch.Tensor) -> torch.Tensor:
        """a_ij <- m_z(i - j) a_ij / sum_j m_z(i - j) a_ij."""
        qlen, klen = prob.shape[-2:]
        dist = torch.arange(qlen, device=prob.device)[:, None] + (klen - qlen) - torch.arange(klen, device=prob.device)
        prob = prob * span_mask(dist.to(prob.dtype), self.spans().to(prob.dtype), self.cfg.span_ramp)
        return prob / (prob.sum(-1, keepdim=True) + 1e-8)


ATTENTION["shaw"] = ShawAttn
ATTENTION["span"] = SpanAttn
