"""Notebook 07's checkers (ablations and adaptive span): adaptive span's soft mask, predicted and written,
and how much memory a layer's spans still need."""
from __future__ import annotations

from typing import Optional
from collections.abc import Callable, Sequence

import torch

from txl_minimal.model import TXLConfig
from txl_minimal.tutorial.exercises.checking import _check, _check_prediction, _same, checker
from txl_minimal.variants import SpanAttn, span_mask


@checker
def check_span_mask(answer: Optional[Callable], *, settings: Sequence[tuple] = (
        ([3.0], 2), ([0.0, 5.5, 20.0], 4), ([10.0, 1.0], 32)), seed: Optional[int] = None,
        tol: Optional[float] = None, raises: Optional[bool] = None) -> Optional[bool]:
    """Check adaptive span's soft mask μ_z(k) = clamp((ρ + z - k) / ρ, 0, 1) (notebook 07, exercise 1).

    ``answer(dist, z, ramp)``: distances (any shape; tried: (4, 6), (24,), (2, 3, 4), 0 .. 23), spans z (n_head,) ->
    (n_head, *dist.shape); compared with ``variants.span_mask``. ``settings``: the (spans, ramp ρ)
    tried; ``seed``, ``tol``, ``raises``: as in ``grading`` (nothing is drawn at random).

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_span_mask
        >>> from txl_minimal.tutorial import solutions
        >>> check_span_mask(solutions.span_mask, settings=[([7.5, 2.0], 8)])
        check_span_mask: right
        True
    """
    cases = []
    for z, ramp in settings:  # distances of three shapes: a matrix, a row (as section 4's), a 3-d block
        for dist in (torch.arange(24.0).view(4, 6), torch.arange(24.0), torch.arange(24.0).view(2, 3, 4)):
            z_t = torch.tensor(z)
            cases.append(((dist, z_t, ramp), span_mask(dist, z_t, ramp),
                          f"z={z_t.tolist()}, ramp ρ={ramp}, dist of shape {tuple(dist.shape)}"))
    return _check("check_span_mask", answer, cases, tol=tol, raises=raises)


SPAN_PREDICTION = dict(z=50.0, ramp=20, dist=[30, 54, 66, 75])  # 07, exercise 1: a setting section 4 does not draw


@checker
def check_span_mask_prediction(prediction, *, tol: Optional[float] = None,
                               raises: Optional[bool] = None) -> Optional[bool]:
    """Check a prediction of μ_z(k) for z = 50, ρ = 20 at k = 30, 54, 66, 75 (notebook 07, exercise 1).

    ``prediction``: a list of four numbers, computed with ``variants.span_mask``, within ``tol``
    (default 0.02). A misreading (a hard mask, a rising one, a ramp centred on z) is named. The
    setting is not section 4's figure (z = 20 and 70, ρ = 16): the formula is read, not the plot.
    ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the misreading or the right values with the rule) or None (not attempted),
        said in one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_span_mask_prediction
        >>> check_span_mask_prediction([1, 0, 0, 0])
        check_span_mask_prediction: not yet: [1, 0, 0, 0] is a hard mask at z: ...
        False
    """
    z, ramp, dist = SPAN_PREDICTION["z"], SPAN_PREDICTION["ramp"], SPAN_PREDICTION["dist"]
    want = [round(float(m), 6) for m in span_mask(torch.tensor(dist, dtype=torch.float64), torch.tensor([z]), ramp)[0]]
    centred = [min(max((z + ramp / 2 - k) / ramp, 0.0), 1.0) for k in dist]  # the ramp from z - ρ/2 to z + ρ/2
    return _check_prediction("check_span_mask_prediction", prediction, want,
                             f"The mask is 1 up to distance k = z = {z:g}, then (ρ + z - k) / ρ down to 0 at "
                             f"k = z + ρ = {z + ramp:g}: {want}",
                             known=[([1.0, 0.0, 0.0, 0.0], "a hard mask at z: the ramp makes the fall linear over ρ"),
                                    ([1.0 - m for m in want], "a mask rising with the distance: it falls"),
                                    (centred, "a ramp centred on z: it starts at z and ends at z + ρ")],
                             tol=0.02 if tol is None else tol, raises=raises)


def _either_count(needed: int, kept: int) -> Callable:
    """The view of a memory count under which ``trim_memory``'s count (``kept``) counts as ``needed``."""
    def part(x):
        try:
            return needed if _same(x, kept) else x
        except (TypeError, ValueError, RuntimeError):
            return x
    return part


@checker
def check_span_memory(answer: Optional[Callable], *, settings: Sequence[tuple] = (
        ([0.1, 0.5], 8, 64), ([0.0, 0.02], 4, 32), ([1.0, 0.3], 16, 48), ([0.25, 0.0], 8, 32), ([0.3, 0.05], 4, 24)),
        seed: Optional[int] = None, tol: Optional[float] = None, raises: Optional[bool] = None) -> Optional[bool]:
    """Check how many memory positions a layer with these spans still needs (notebook 07, exercise 2).

    ``answer(spans, ramp, mem_len)`` -> the count, capped at ``mem_len``. Memory position k = 1 .. M
    counts back from the segment: k = 1 is the key just before the first query, at distance k from
    it (farther from every later query), and a head with span z weights distance k only if
    k < z + ρ (``variants.span_mask`` > 0). Two counts are right: the farthest position some head
    weights, ceil(max z + ρ) - 1, and what ``SpanAttn.trim_memory`` keeps (notebook 07, section 6),
    ceil(max z + ρ), one more, whose weight is 0 for every head (a reader who counts k from 0 gets it
    too). ``settings``: the (span fractions of the largest span, ramp ρ, mem_len) tried; ``seed``,
    ``tol``, ``raises``: as in ``grading`` (nothing is drawn at random; counts are exact).

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_span_memory
        >>> check_span_memory(lambda spans, ramp, mem_len: mem_len)                 # never trimmed
        check_span_memory: not yet: spans=[8.0, 40.0], ramp ρ=8, mem_len=64: 64 (int), expected 47...
        False
    """
    cases = []
    for frac, ramp, mem_len in settings:
        cfg = TXLConfig(n_head=len(frac), d_head=8, d_model=16, tgt_len=16, mem_len=mem_len, adaptive_span=True,
                        span_ramp=ramp)
        att = SpanAttn(cfg)
        with torch.no_grad():
            att.span_frac.copy_(torch.tensor(frac))
        spans = att.spans().detach()
        weighted = (span_mask(torch.arange(1.0, mem_len + 1), spans, ramp) > 0).any(0)  # memory position k = 1..M
        needed = int(weighted.nonzero().max()) + 1 if weighted.any() else 0
        kept = att.trim_memory(torch.zeros(1, mem_len, 16)).size(1)
        if kept != min(mem_len, needed + 1):  # the count IS trim_memory's, one more
            raise RuntimeError("check_span_memory: SpanAttn.trim_memory changed; report this")
        cases.append(((spans, ramp, mem_len), needed,
                      f"spans={[round(x, 2) for x in spans.tolist()]}, ramp ρ={ramp}, mem_len={mem_len}",
                      _either_count(needed, kept)))
    return _check("check_span_memory", answer, cases, tol=tol, raises=raises)
