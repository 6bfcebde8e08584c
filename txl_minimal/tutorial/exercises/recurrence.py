"""Notebook 03's checkers (segment-level recurrence): the memory's shape, and how far back an output reaches."""
from __future__ import annotations

from typing import Optional
from collections.abc import Callable, Sequence

import torch

from txl_minimal.tutorial.analysis import dependency_reach, influence_span
from txl_minimal.tutorial.exercises.checking import _check, _tiny, case_seed, checker


@checker
def check_memory_shape(answer: Optional[Callable], *, settings: Sequence[tuple] = (
        (2, 4, 4, 1), (3, 4, 10, 2), (1, 5, 7, 3), (2, 6, 0, 2)), seed: Optional[int] = None,
        tol: Optional[float] = None, raises: Optional[bool] = None) -> Optional[bool]:
    """Check the shape of one layer's memory after some segments (notebook 03, exercise 1).

    ``answer(batch, seg_len, mem_len, d_model, n_segments)`` -> the shape of one layer's memory after
    reading ``n_segments`` segments from an empty memory, counted by running a tiny model
    (d_model = 16). ``settings``: the (batch, seg_len, mem_len, n_segments) tried; ``seed``: the
    model and text (the shape does not depend on them); ``tol``, ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_memory_shape
        >>> check_memory_shape(lambda batch, seg_len, mem_len, d_model, n: (batch, mem_len, d_model))
        check_memory_shape: not yet: batch=3, L=4, M=10, d_model=16, after 2 segment(s): (3, 10, 16), expected ...
        False
    """
    cases = []
    for batch, seg_len, mem_len, n_seg in settings:
        model, mems = _tiny(case_seed(seed, 0), tgt_len=seg_len, mem_len=mem_len), None
        with torch.no_grad():
            for _ in range(n_seg):
                mems = model(torch.randint(0, 27, (batch, seg_len)), mems).mems
        cases.append(((batch, seg_len, mem_len, 16, n_seg), tuple(mems[0].shape),
                      f"batch={batch}, L={seg_len}, M={mem_len}, d_model=16, after {n_seg} segment(s)"))
    return _check("check_memory_shape", answer, cases, tol=tol, raises=raises)


@checker
def check_reach(answer: Optional[Callable], *, settings: Sequence[tuple] = (
        (1, 4, 4, 0), (2, 4, 4, 3), (3, 4, 2, 1), (2, 3, 6, 2), (3, 3, 4, 1), (4, 8, 0, 5)),
        seed: Optional[int] = None, tol: Optional[float] = None, raises: Optional[bool] = None) -> Optional[bool]:
    """Check how many tokens back the output at position i of a segment can depend on (notebook 03, exercise 2).

    ``answer(n_layer, seg_len, mem_len, i)`` -> how many tokens before it the output at position i
    (0-based) of a segment can depend on, with enough text before it; counted with
    ``analysis.dependency_reach``. ``settings``: the (n_layer, seg_len, mem_len, i) tried; ``seed``,
    ``tol``, ``raises``: as in ``grading`` (nothing is drawn at random; counts are exact).

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_reach
        >>> from txl_minimal.tutorial import solutions
        >>> check_reach(solutions.reach, settings=[(3, 5, 7, 2)])
        check_reach: right
        True
    """
    cases = []
    for n_layer, seg_len, mem_len, i in settings:
        n = (n_layer + 3) * max(seg_len, mem_len)
        n += seg_len - n % seg_len  # whole segments
        position = n - seg_len + i  # in the last segment
        want = influence_span(dependency_reach(n, seg_len, mem_len, n_layer)[position], position)
        cases.append(((n_layer, seg_len, mem_len, i), want, f"n_layer={n_layer}, L={seg_len}, M={mem_len}, i={i}"))
    return _check("check_reach", answer, cases, tol=tol, raises=raises)
