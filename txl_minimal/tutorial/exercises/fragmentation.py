"""Notebook 01's checkers (context fragmentation): the vanilla sliding window's cost, the keys a query sees."""
from __future__ import annotations

from typing import Optional
from collections.abc import Callable, Sequence

import torch

from txl_minimal.evaluate import sliding_window_eval
from txl_minimal.model import attention_mask
from txl_minimal.tutorial.exercises.checking import _check, _tiny, case_seed, checker


@checker
def check_sliding_cost(answer: Optional[Callable], *, settings: Sequence[tuple] = ((10, 4), (50, 8), (5, 8), (33, 32)),
                       seed: Optional[int] = None, tol: Optional[float] = None,
                       raises: Optional[bool] = None) -> Optional[bool]:
    """Check a count of the positions the vanilla sliding window computes (notebook 01, exercise 1).

    ``answer(n_pred, context)`` -> how many positions the network computes to score ``n_pred``
    characters with ``sliding_window_eval(model, text, context)``: counted here by running it on a
    tiny vanilla model. ``settings``: the (n_pred, context) tried; ``seed``: the model and text
    (the count does not depend on them); ``tol``, ``raises``: as in ``grading`` (counts are exact).

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_sliding_cost
        >>> check_sliding_cost(lambda n_pred, context: n_pred * context)
        check_sliding_cost: not yet: n_pred=10, context=4: 40 (int), expected 28.
          expected 28
          got 40
        False
    """
    model = _tiny(case_seed(seed, 0), attn_type="abs", mem_len=0)
    cases = []
    for n_pred, context in settings:
        fed: list[int] = []
        hook = model.word_emb.register_forward_hook(lambda m, args, out, fed=fed: fed.append(args[0].numel()))
        sliding_window_eval(model, torch.randint(0, 27, (n_pred + 1,)), context, batch_size=7)
        hook.remove()
        cases.append(((n_pred, context), sum(fed), f"n_pred={n_pred}, context={context}"))
    return _check("check_sliding_cost", answer, cases, tol=tol, raises=raises)


@checker
def check_context_range(answer: Optional[Callable], *, settings: Sequence[tuple] = (
        (64, 0), (64, 64), (128, 128), (32, 96)), seed: Optional[int] = None, tol: Optional[float] = None,
        raises: Optional[bool] = None) -> Optional[bool]:
    """Check the fewest and most keys one attention layer lets a query see (notebook 01, exercise 2).

    ``answer(seg_len, mem_len)`` -> (fewest, most) keys a query of a segment sees when a full memory
    precedes it (mem_len 0: the vanilla model), counted on ``model.attention_mask``. ``settings``:
    the (seg_len, mem_len) tried; ``seed``, ``tol``, ``raises``: as in ``grading`` (nothing is drawn
    at random; counts are exact).

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_context_range
        >>> check_context_range(lambda seg_len, mem_len: (mem_len + 1, mem_len + seg_len), settings=[(16, 48)])
        check_context_range: right
        True
    """
    cases = []
    for seg_len, mem_len in settings:
        seen = (~attention_mask(seg_len, mem_len, False, mem_len)).sum(-1)
        cases.append(((seg_len, mem_len), (int(seen.min()), int(seen.max())), f"L={seg_len}, M={mem_len}"))
    return _check("check_context_range", answer, cases, tol=tol, raises=raises)
