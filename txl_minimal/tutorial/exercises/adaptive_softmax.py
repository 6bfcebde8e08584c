"""Notebook 08's checkers (words and the adaptive softmax): a word's two-step probability, and the parameters
of the adaptive input and softmax."""
from __future__ import annotations

from typing import Optional
from collections.abc import Callable, Sequence

import torch

from txl_minimal.adaptive import AdaptiveEmbedding, ProjectedAdaptiveLogSoftmax, tie
from txl_minimal.tutorial.exercises.checking import _check, case_seed, checker, seed_cpu


def _adaptive_softmax(seed: int, n_token: int, d: int, cutoffs: list, div_val: int) -> ProjectedAdaptiveLogSoftmax:
    """An adaptive softmax with every weight drawn at a visible scale (not the tiny init)."""
    seed_cpu(seed)
    crit = ProjectedAdaptiveLogSoftmax(n_token, d, d, cutoffs, div_val).double()
    with torch.no_grad():
        for p in crit.parameters():
            p.normal_(0.0, 0.5)
    return crit


@checker
def check_adaptive_log_prob(answer: Optional[Callable], *, settings: Sequence[tuple] = (
        (10, [4, 7], 2, (5,)), (12, [3], 1, (2, 3)), (20, [5, 8, 15], 2, (4,)), (9, [2, 3], 1, (1,))),
        seed: Optional[int] = None, tol: Optional[float] = None, raises: Optional[bool] = None) -> Optional[bool]:
    """Check log p(w) of every word from the head's and the tails' log-probabilities (notebook 08, exercise 1).

    ``answer(head, tails)`` -> (..., n_token): ``head`` are the head's log-probabilities (..., c_1 + n),
    its words then the cluster columns (tail cluster i's column is the i-th from the end),
    ``tails[i - 1]`` tail cluster i's log-probabilities within the cluster. Compared with
    ``ProjectedAdaptiveLogSoftmax.log_prob``. ``settings``: the (n_token, cutoffs, div_val, shape of
    h) tried; ``seed``: which weights and h (0: the notebooks'); ``tol``, ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_adaptive_log_prob
        >>> from txl_minimal.tutorial import solutions
        >>> check_adaptive_log_prob(solutions.adaptive_log_prob, settings=[(30, [6, 10], 2, (3,))], seed=4)
        check_adaptive_log_prob: right
        True
    """
    cases = []
    for k, (n_token, cutoffs, div_val, shape) in enumerate(settings):
        crit = _adaptive_softmax(case_seed(seed, k), n_token, 8, cutoffs, div_val)
        h = torch.randn(*shape, 8, dtype=torch.float64)
        with torch.no_grad():
            logp = [torch.log_softmax(torch.nn.functional.linear(h if proj is None else h @ proj, w, b), -1)
                    for w, b, proj in crit.clusters()]  # the head (with its cluster rows), then each tail
            head, tails = logp[0], logp[1:]
            cases.append(((head, tails), crit.log_prob(h),
                          f"{n_token} words, cutoffs {cutoffs}, h of shape {tuple(h.shape)}"))
    return _check("check_adaptive_log_prob", answer, cases, tol=tol, raises=raises)


@checker
def check_adaptive_params(answer: Optional[Callable], *, settings: Sequence[tuple] = (
        (10_001, 128, [2000, 6000], 2), (267_735, 1024, [20_000, 40_000, 200_000], 4), (100, 16, [10], 4),
        (50, 8, [5, 20, 30], 2)), seed: Optional[int] = None, tol: Optional[float] = None,
        raises: Optional[bool] = None) -> Optional[bool]:
    """Check a parameter count of the adaptive input and softmax (notebook 08, exercise 2).

    ``answer(n_token, d, cutoffs, div_val)`` -> the parameters of the adaptive input and softmax as
    the package builds them for ``div_val > 1`` and ``d_embed == d``, weights tied (``tie_weight``),
    projections not (``tie_projs`` all False); counted on the meta device. ``settings``: the
    (n_token, d, cutoffs, div_val) tried; ``seed``, ``tol``, ``raises``: as in ``grading`` (nothing
    is drawn at random; counts are exact).

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_adaptive_params
        >>> from txl_minimal.tutorial import solutions
        >>> check_adaptive_params(solutions.adaptive_params, settings=[(1000, 32, [100, 400], 2)])
        check_adaptive_params: right
        True
    """
    cases = []
    for n_token, d, cutoffs, div_val in settings:
        with torch.device("meta"):
            emb = AdaptiveEmbedding(n_token, d, d, cutoffs, div_val)
            crit = ProjectedAdaptiveLogSoftmax(n_token, d, d, cutoffs, div_val)
        tie(emb, crit, True, [])
        count = sum(p.numel() for p in torch.nn.ModuleList([emb, crit]).parameters())  # shared once
        cases.append(((n_token, d, list(cutoffs), div_val), count,
                      f"n_token={n_token}, d={d}, cutoffs={cutoffs}, div_val={div_val}"))
    return _check("check_adaptive_params", answer, cases, tol=tol, raises=raises)
