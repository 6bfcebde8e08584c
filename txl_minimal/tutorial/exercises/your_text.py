"""Notebook 09's checkers (your own text): what a memory of 64 saves on code and on text8, predicted, and
that saving split by the class of the character predicted."""
from __future__ import annotations

import math
from typing import Optional
from collections.abc import Callable, Sequence

import numpy as np

from txl_minimal.tutorial.exercises.checking import (_check, _said, _same, _unreadable, _verdict, case_seed, checker,
                                                    not_attempted)
from txl_minimal.tutorial import memory_gain
from txl_minimal.tutorial.solutions import gain_by_class


@checker
def check_memory_gain_prediction(prediction, *, tol: Optional[float] = None,
                                 raises: Optional[bool] = None) -> Optional[bool]:
    """Check a prediction of where the memory's saving comes from (notebook 09, exercise 1).

    ``prediction``: (share, more). ``share``: the share of the bits a memory of 64 saves (the model trained and
    read with it against the one trained and read without, results/memory_by_position.json) that is made at the
    segment's first 8 positions of 64, a number in [0, 1]; right within ``tol`` (default 0.15) of either text's
    share. ``more``: which text's models save more past those positions, "code", "text8" or "neither" (the two
    within two standard errors: over 8 held-out stretches and 2 seeds). Reading the share as that of the
    characters (1/8), or a percentage, is named. ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: what the measurement says) or None (not attempted), said in one printed
        line; with ``raises``, a wrong or missing answer raises ``AssertionError`` instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_memory_gain_prediction
        >>> check_memory_gain_prediction((0.125, "neither"))
        check_memory_gain_prediction: not yet: 0.125 is the share of the characters at those positions, ...
        False
    """
    name = "check_memory_gain_prediction"
    if callable(prediction):
        try:
            prediction = prediction()
        except Exception as e:  # noqa: BLE001 (a student's bug is a wrong answer)
            return _verdict(False, f"{name}: not yet: your function raised {type(e).__name__}: {e}", raises)
    if prediction is None or prediction is ...:
        return not_attempted(name, raises)
    form = 'write (share, more): a number in [0, 1] and "code", "text8" or "neither", e.g. (0.3, "code")'
    try:  # whatever a student wrote: read, or said back in words (a checker never raises)
        share, more = prediction
        if np.iscomplexobj(share):
            raise TypeError("a complex share")  # (float() would keep its real part, with only a warning)
        share = float(share)
    except Exception as e:  # noqa: BLE001 (an answer whose __iter__ or __float__ raises is a wrong answer)
        return _verdict(False, f"{name}: not yet: {form}; got {_said(prediction)} ({_unreadable(e)})", raises)
    more = more.strip().lower() if isinstance(more, str) else None
    if not math.isfinite(share) or more not in ("code", "text8", "neither"):
        return _verdict(False, f"{name}: not yet: {form}; got {_said(prediction)}", raises)
    results = memory_gain.load()
    shares, (verdict, diff, se) = memory_gain.start_shares(results), memory_gain.past_start_verdict(results)
    tol = 0.15 if tol is None else tol
    measured = (f"{shares['code']:.0%} of the saving is made at the first 8 positions on code, {shares['text8']:.0%} "
                f"on text8; past them code saves {diff:+.3f} \u00b1 {se:.3f} bits per character more than text8")
    if 1 < share <= 100:
        return _verdict(False, f"{name}: not yet: write the share as a fraction (0.3 for 30%), got {share:g}", raises)
    near = min(shares.values()) - tol <= share <= max(shares.values()) + tol
    if near and more == verdict:
        return _verdict(True, f"{name}: right: {measured}", raises)
    said = []
    if not near:
        said.append("0.125 is the share of the characters at those positions, not of the saving" if
                    abs(share - 0.125) < 0.02 else f"a share of {share:g} is off")
    if more != verdict:
        said.append({"neither": "the two can be told apart", "code": "it is not code", "text8": "it is not text8"}[more]
                    if verdict != "neither" else "the two cannot be told apart (within two SEs)")
    return _verdict(False, f"{name}: not yet: {'; '.join(said)}: {measured}", raises)


def _char_gains(seed: int, n: int) -> tuple[str, np.ndarray, np.ndarray]:
    """A short code-like text and two made-up NLL arrays (bits) for its n - 1 predictions."""
    rng = np.random.default_rng(seed)
    words = ["self", "x_1", "(", ")", " ", "    ", "\n", "return", ":", "=", "def", "._", "é"]
    text = "".join(rng.choice(words, size=n))[:n]
    without = rng.gamma(2.0, 1.0, size=len(text) - 1)
    return text, without, without - rng.normal(0.1, 0.5, size=without.size)


@checker
def check_gain_by_class(answer: Optional[Callable], *, settings: Sequence[int] = (40, 300, 1000),
                        seed: Optional[int] = None, tol: Optional[float] = None,
                        raises: Optional[bool] = None) -> Optional[bool]:
    """Check the memory's saving split by the class of the character predicted (notebook 09, exercise 2).

    ``answer(text, nll_without, nll_with)`` -> {"name": ..., "space": ..., "other": ...}: the mean of
    nll_without - nll_with (bits) over the predictions of each class of character; entry t of both
    arrays is the loss of predicting text[t + 1]. A name character: ``ch.isalnum() or ch == "_"``; a
    space: ``ch.isspace()``; other: the rest. Grouping by the character read (text[t]) or classing
    'é' as other is named. ``settings``: the lengths of the made-up texts tried; ``seed``: which
    texts and losses (0: the notebooks'); ``tol``, ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the first setting that differs, and the misreading) or None (not
        attempted), said in one printed line; with ``raises``, a wrong or missing answer raises instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_gain_by_class
        >>> from txl_minimal.tutorial import solutions
        >>> check_gain_by_class(solutions.gain_by_class, settings=[500], seed=2)
        check_gain_by_class: right
        True
    """
    cases = []
    for k, n in enumerate(settings):
        text, a, b = _char_gains(case_seed(seed, k), n)
        cases.append(((text, a.copy(), b.copy()), gain_by_class(text, a, b), f"a text of {len(text)} characters "
                                                                              f"(case {k + 1})"))
    if callable(answer):  # the one misreading worth a sentence of its own: the loss of t read as text[t]'s
        (text, a, b), right, _ = cases[min(1, len(cases) - 1)]
        misread = ""
        try:
            got = answer(text, a.copy(), b.copy())
            if got is not None and not _same(got, right, tol):
                if _same(got, gain_by_class(" " + text[:-1], a, b), tol):
                    misread = ("you grouped each loss by the character the model READ at t; entry t is the loss of "
                               "PREDICTING text[t + 1], the character that follows it")
                elif _same(got, gain_by_class(text.replace("é", "+"), a, b), tol):  # é read as "other"
                    misread = ("you classed 'é' as other; a name character is any letter or digit (ch.isalnum(), "
                               "in every script) or '_'")
        except Exception:  # noqa: BLE001 (``_check`` below reports it)
            pass
        if misread:
            return _verdict(False, f"check_gain_by_class: not yet: {misread}", raises)
    return _check("check_gain_by_class", answer, cases, tol=tol, raises=raises)
