"""Notebook 06's checkers (how much context is used): a paired standard error and the paper's relative gain."""
from __future__ import annotations

import math
from typing import Optional
from collections.abc import Callable, Sequence

import numpy as np
import torch

from txl_minimal.tutorial.context import paired_gains, relative_gain
from txl_minimal.tutorial.exercises.checking import _check, case_seed, checker


def _losses(seed: int, n_models: int = 1, n_targets: int = 50) -> list[np.ndarray]:
    """Made-up per-target losses of ``n_models`` models: (2 contexts, n_targets) each, the longer context better."""
    rng = np.random.default_rng(seed)
    short = rng.gamma(2.0, 1.0, size=(n_models, n_targets))
    return [np.stack([s, s - rng.normal(0.05, 0.3, size=s.size)]) for s in short]


def _either_ddof(want: tuple, se_ddof0: float) -> Callable:
    """The view of a (gain, standard error) answer under which an error computed with ddof=0 counts
    as the ddof=1 one (``want``); anything else is compared as it is."""
    def part(x):
        try:
            g, se = x.tolist() if isinstance(x, (np.ndarray, torch.Tensor)) else x
            if math.isclose(float(se), se_ddof0, rel_tol=1e-6) and not math.isclose(se_ddof0, want[1], rel_tol=1e-6):
                return (g, want[1])
        except (TypeError, ValueError):
            pass
        return x
    return part


@checker
def check_paired_gain(answer: Optional[Callable], *, settings: Sequence[int] = (50, 50, 50),
                      seed: Optional[int] = None, tol: Optional[float] = None,
                      raises: Optional[bool] = None) -> Optional[bool]:
    """Check a mean gain and its paired standard error (notebook 06, exercise 1) against ``context.paired_gains``.

    ``answer(short, long)``: per-target losses of the same targets with a short and a longer context
    -> (mean gain, its standard error) from the paired differences. The standard deviation may divide
    by n - 1 (``paired_gains``) or by n (NumPy's default): with hundreds of targets the two differ by
    a fraction of a percent, and both are right readings. ``settings``: the number of targets of
    each case; ``seed``: which losses (0: the notebooks'); ``tol``, ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_paired_gain
        >>> from txl_minimal.tutorial import solutions
        >>> check_paired_gain(solutions.paired_gain, settings=[400], seed=9)
        check_paired_gain: right
        True
    """
    cases = []
    for k, n in enumerate(settings):
        (pair,) = _losses(case_seed(seed, k), n_targets=n)
        g, se = paired_gains(pair)
        want = (float(g[0]), float(se[0]))
        cases.append(((pair[0].copy(), pair[1].copy()), want, f"case {k + 1}: {n} targets",
                      _either_ddof(want, float(se[0]) * math.sqrt((n - 1) / n))))
    return _check("check_paired_gain", answer, cases, tol=tol, raises=raises)


@checker
def check_relative_gain(answer: Optional[Callable], *, settings: Sequence[float] = (1.0, 0.1, 0.5),
                        seed: Optional[int] = None, tol: Optional[float] = None,
                        raises: Optional[bool] = None) -> Optional[bool]:
    """Check the paper's relative gain over a group's shared baseline (notebook 06, exercise 2).

    ``answer(losses, r)``: losses[name] (2, n_targets), rows = contexts c and c' -> {name: g(c, c')},
    compared with ``context.relative_gain`` on three made-up models. ``settings``: the r of each case;
    ``seed``: which losses (0: the notebooks'); ``tol``, ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_relative_gain
        >>> from txl_minimal.tutorial import solutions
        >>> check_relative_gain(solutions.relative_gain, settings=[0.3])
        check_relative_gain: right
        True
    """
    cases = []
    for k, r in enumerate(settings):
        group = dict(zip(("a", "b", "c"), _losses(case_seed(seed, k), 3)))
        cases.append(((group, r), relative_gain(group, 0, 1, r=r), f"case {k + 1}: r={r}"))
    return _check("check_relative_gain", answer, cases, tol=tol, raises=raises)
