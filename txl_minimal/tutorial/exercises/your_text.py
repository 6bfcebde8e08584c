"""Notebook 09's checkers (your own text): what a memory of 64 saves on code and on text8, predicted, and
that saving split by the class of the character predicted."""
from __future__ import annotations

from typing import Optional
from collections.abc import Callable, Sequence

import numpy as np

from txl_minimal.tutorial import own_text
from txl_minimal.tutorial.exercises.checking import _check, _check_prediction, _same, _verdict, case_seed, checker
from txl_minimal.tutorial.solutions import gain_by_class


@checker
def check_memory_gain_prediction(prediction, *, tol: Optional[float] = None,
                                 raises: Optional[bool] = None) -> Optional[bool]:
    """Check a prediction of the bits per character a memory of 64 saves on code and on text8 (notebook 09).

    ``prediction``: (saving on code, saving on text8) by the model trained and evaluated with a memory
    of 64 against the one trained and evaluated without (results/own_text/results.json: the paired
    block means of the same test characters); within ``tol`` (default 0.025 bits of each: the seed
    moves the code saving by 0.021; the two savings differ by 0.042, so the wrong way round is not
    right). A misreading (the two swapped, the M = 64 model without its memory) is named.
    ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the misreading or the right values with the rule) or None (not attempted),
        said in one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_memory_gain_prediction
        >>> check_memory_gain_prediction([0, 0])
        check_memory_gain_prediction: not yet: [0, 0] is no saving. ...
        False
    """
    runs = own_text.load_results()["runs"]
    want = own_text.memory_savings(runs)
    own = [round(own_text.paired_blocks(runs[f"{t}-m64"]["blocks"][0], runs[f"{t}-m64"]["blocks"][64])[0], 3)
           for t in ("code", "text8")]
    rule = (f"a memory of 64 saves {want[0]:.3f} bits per character on code and {want[1]:.3f} on text8 "
            f"({want[0] / want[1]:.1f} times as much on code)")
    return _check_prediction("check_memory_gain_prediction", prediction, want, rule,
                             known=[(want[::-1], "the two the wrong way round: code gains more"),
                                    (own, "what the M = 64 model loses without its memory, which it learnt to "
                                          "rely on; the question compares it with a model trained without one"),
                                    ([0.0, 0.0], "no saving")],
                             tol=0.025 if tol is None else tol, raises=raises)


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
