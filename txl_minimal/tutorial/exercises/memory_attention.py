"""Notebook 05's checkers (attention over memory): the mean attention distance (written, predicted for even
attention, and a given function's bug fixed) and the normalised entropy (written, predicted)."""
from __future__ import annotations

from typing import Optional
from collections.abc import Callable, Sequence

import torch

from txl_minimal.model import attention_mask
from txl_minimal.tutorial.attention_maps import mean_attention_distance, normalized_entropy
from txl_minimal.tutorial.exercises.checking import (_check, _check_prediction, _same, _verdict, case_seed, checker,
                                                     not_attempted, seed_cpu)


def _attention(seed: int, qlen: int, klen: int) -> torch.Tensor:
    """Random attention (2, 3, qlen, klen) over [memory o segment], zero on the future."""
    seed_cpu(seed)
    score = torch.randn(2, 3, qlen, klen).masked_fill(attention_mask(qlen, klen - qlen, False, 0), float("-inf"))
    return score.softmax(-1)


def _attention_cases(settings: Sequence[tuple], seed: Optional[int], first: int, reference: Callable) -> list:
    """One case per (qlen, klen) of ``settings``: random attention (case k drawn with ``case_seed(seed,
    first + k)``) and ``reference`` of it."""
    cases = []
    for n, (qlen, klen) in enumerate(settings):
        attn = _attention(case_seed(seed, first + n), qlen, klen)
        cases.append(((attn,), reference(attn), f"qlen={qlen}, klen={klen}"))
    return cases


@checker
def check_mean_distance(answer: Optional[Callable], *, settings: Sequence[tuple] = ((4, 4), (3, 8), (6, 16)),
                        seed: Optional[int] = None, tol: Optional[float] = None,
                        raises: Optional[bool] = None) -> Optional[bool]:
    """Check the mean attention distance against ``attention_maps.mean_attention_distance``.

    ``answer(attn)``: attn (..., qlen, klen) over [memory o segment] -> (...,) the mean over queries
    of sum_j p_ij (distance of key j; query i is key klen - qlen + i). ``settings``: the (qlen, klen)
    of the random attention tried; ``seed``: which attention (0: the notebooks'); ``tol``,
    ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_mean_distance
        >>> from txl_minimal.tutorial import solutions
        >>> check_mean_distance(solutions.mean_distance, settings=[(5, 12)], seed=3)
        check_mean_distance: right
        True
    """
    return _check("check_mean_distance", answer, _attention_cases(settings, seed, 0, mean_attention_distance),
                  tol=tol, raises=raises)


@checker
def check_uniform_distance(prediction, *, tol: Optional[float] = None,
                           raises: Optional[bool] = None) -> Optional[bool]:
    """Check a prediction of the mean distance of even attention (notebook 05, exercise 1).

    ``prediction``: the mean distance, averaged over the L = 128 queries of a segment read after a
    full memory of M = 512 (future hidden, no same_length), of attention spread evenly over every
    key a query sees; computed with ``mean_attention_distance``, within ``tol`` (default 0.3). A
    misreading (same_length, the future seen, distances from 1, key positions) is named.
    ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the misreading or the right value with the rule) or None (not attempted),
        said in one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_uniform_distance
        >>> check_uniform_distance(255.5)
        check_uniform_distance: not yet: 255.5 is a query that sees only the last M keys (same_length=True)...
        False
    """
    M, L = 512, 128
    seen = ~attention_mask(L, M, False, M)
    uniform = seen.double() / seen.sum(-1, keepdim=True)
    want = float(mean_attention_distance(uniform))
    return _check_prediction("check_uniform_distance", prediction, want,
                             f"Query i sees the M + i + 1 keys at distances 0 (itself) to M + i, so its mean "
                             f"distance is (M + i) / 2; averaged over i = 0 .. {L - 1}: "
                             f"(M + (L - 1) / 2) / 2 = {want:g}",
                             known=[((M - 1) / 2, "a query that sees only the last M keys (same_length=True)"),
                                    ((M + L - 1) / 2, "every query seeing all M + L keys: the future is hidden"),
                                    (want + 0.5, "distances counted from 1: the query itself is key 0 back"),
                                    ((M + L - 1) / 2 / 2, "the mean over key positions, not distances")],
                             tol=0.3 if tol is None else tol, raises=raises)


@checker
def check_entropy(answer: Optional[Callable], *, settings: Sequence[tuple] = ((4, 4), (3, 8), (6, 16)),
                  seed: Optional[int] = None, tol: Optional[float] = None,
                  raises: Optional[bool] = None) -> Optional[bool]:
    """Check the normalised entropy of attention against ``attention_maps.normalized_entropy``.

    ``answer(attn)``: attn (..., qlen, klen) -> (...,) each query's entropy divided by the log of the
    number of keys it sees, averaged over the queries that see more than one key. ``settings``: the
    (qlen, klen) of the random attention tried; ``seed``: which attention (0: the notebooks');
    ``tol``, ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_entropy
        >>> from txl_minimal.tutorial import solutions
        >>> check_entropy(solutions.entropy)
        check_entropy: right
        True
    """
    return _check("check_entropy", answer, _attention_cases(settings, seed, 3, normalized_entropy),
                  tol=tol, raises=raises)


def _given_mean_distance(attn: torch.Tensor) -> torch.Tensor:
    """05, exercise 1 (b): ``mean_distance`` as the notebook gives it, bug included: it counts
    key j as i - j back from query i, as if there were no memory (query i is key klen - qlen + i)."""
    qlen, klen = attn.shape[-2:]
    dist = (torch.arange(qlen)[:, None] - torch.arange(klen)[None, :]).clamp(min=0)
    return (attn * dist).sum(-1).mean(-1)


def _from_last_key(attn: torch.Tensor) -> torch.Tensor:
    """A wrong fix of ``_given_mean_distance``: every key's distance from the last key, whatever the query."""
    klen = attn.size(-1)
    return (attn * (klen - 1 - torch.arange(klen))).sum(-1).mean(-1)


@checker
def check_mean_distance_fix(answer: Optional[Callable], *, settings: Sequence[tuple] = ((4, 4), (3, 8), (6, 16)),
                            seed: Optional[int] = None, tol: Optional[float] = None,
                            raises: Optional[bool] = None) -> Optional[bool]:
    """Check the notebook's ``mean_distance`` with its bug fixed (notebook 05, exercise 1 (b)).

    ``answer(attn)``: attn (..., qlen, klen) over [memory o segment] -> (...,) the mean over queries of
    sum_j p_ij (distance of key j), compared with ``attention_maps.mean_attention_distance`` on
    attention without memory (where the given function is right) and with it. The function as given
    is the untouched cell: not attempted yet (None), told so without the right numbers.
    ``settings``: the (qlen, klen) tried; ``seed``: which attention (0: the notebooks'); ``tol``,
    ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_mean_distance_fix
        >>> from txl_minimal.tutorial import solutions
        >>> check_mean_distance_fix(solutions.mean_distance)
        check_mean_distance_fix: right
        True
    """
    cases = [((a,), want, f"{where} ({'no memory' if q == k else f'a memory of {k - q}'})")
             for ((a,), want, where), (q, k) in zip(_attention_cases(settings, seed, 0, mean_attention_distance),
                                                    settings)]
    if callable(answer):
        for wrong, verdict in ((_given_mean_distance, None), (_from_last_key, False)):
            try:
                same = all(_same(answer(*args), wrong(*args), tol) for args, *_ in cases)
            except Exception:  # a bug or None: _check below says what it is
                same = False
            if same and verdict is None:
                return not_attempted(
                    "check_mean_distance_fix", raises,
                    notebook="not attempted yet: this is still the function as given, right without memory and "
                             "wrong with it: find the bug, fix it in the cell above, then run this cell again",
                    grader="this is still the function as given, right without memory and wrong with it: find "
                           "the bug and fix it")
            if same:
                return _verdict(False, "check_mean_distance_fix: not yet: every key's distance is counted from the "
                                       "last key, whatever the query: query i is key klen - qlen + i, its own "
                                       "distance 0", raises)
    return _check("check_mean_distance_fix", answer, cases, tol=tol, raises=raises)


ENTROPY_PREDICTION = dict(n_keys=512, nearest=16)  # 05, exercise 2: a query over section 2's M = 512 keys


def _entropy_prediction() -> list[float]:
    """05, exercise 2 (b), (c): the normalised entropy (``normalized_entropy``) of one query over
    n_keys keys, the last its own: even weight on the ``nearest`` keys; half on the key just
    before it and half spread evenly over the other n_keys - 1."""
    n, near = ENTROPY_PREDICTION["n_keys"], ENTROPY_PREDICTION["nearest"]
    even = torch.zeros(n, dtype=torch.float64)
    even[n - near:] = 1 / near
    half = torch.full((n,), 0.5 / (n - 1), dtype=torch.float64)
    half[n - 2] = 0.5
    return [round(float(normalized_entropy(p.view(1, 1, n))), 4) for p in (even, half)]


@checker
def check_entropy_prediction(prediction, *, tol: Optional[float] = None,
                             raises: Optional[bool] = None) -> Optional[bool]:
    """Check a prediction of two normalised entropies, [(b), (c)] (notebook 05, exercise 2).

    ``prediction``: (b) even weight on the 16 nearest of 512 keys; (c) half on the key just before
    the query, half spread evenly over the other 511; computed with ``normalized_entropy``, within
    ``tol`` (default 0.05: one decimal is right; the misreadings lie 0.1 and more away). A
    misreading (the share of keys, the mean of 0 and 1) is named. ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the misreading or the right values with the rule) or None (not attempted),
        said in one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_entropy_prediction
        >>> check_entropy_prediction([0.444])
        check_entropy_prediction: not yet: 1 value(s), expected 2
        False
    """
    n, near = ENTROPY_PREDICTION["n_keys"], ENTROPY_PREDICTION["nearest"]
    want = _entropy_prediction()
    return _check_prediction(
        "check_entropy_prediction", prediction, want,
        f"even weight on n keys has entropy log n, so (b) is log {near} / log {n} = {want[0]:.4f}; (c) is the "
        f"50/50 choice, log 2, plus half of log {n - 1} (the even half), over log {n}: {want[1]:.4f}. A head with "
        f"half its weight on one key scores {want[1]:.2f}: the entropy measures spread, and the spread-out half "
        "dominates it",
        known=[([near / n, want[1]], f"right for (c), but (b) is the share of keys, {near}/{n}: entropy grows "
                                     "with log n, not n"),
               ([want[0], 0.5], "right for (b), but (c) is not the mean of 0 (one key) and 1 (every key): "
                                "the 50/50 choice itself adds log 2"),
               ([near / n, 0.5], f"(b) as the share of keys ({near}/{n}) and (c) as the mean of 0 and 1")],
        tol=0.05 if tol is None else tol, raises=raises)
