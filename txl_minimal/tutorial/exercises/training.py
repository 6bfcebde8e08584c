"""Notebook 04's checkers (training on text8): the learning-rate schedule, predicted and written, and the
model's parameter count from its sizes."""
from __future__ import annotations

import math
from typing import Optional
from collections.abc import Callable, Sequence

from txl_minimal.model import TransformerXL, TXLConfig
from txl_minimal.train import TrainConfig, lr_at
from txl_minimal.tutorial.exercises.checking import _check, _check_prediction, _said, _same, _verdict, checker

LR_PREDICTION = dict(warmup_steps=100, max_steps=500, steps=[50, 300, 400])  # 04, exercise 1: the rates to predict


@checker
def check_lr_prediction(prediction, *, tol: Optional[float] = None, raises: Optional[bool] = None) -> Optional[bool]:
    """Check a prediction of the learning rate at steps 50, 300 and 400 (notebook 04, exercise 1).

    ``prediction``: three fractions of the peak rate (W = 100, S = 500, cosine to 0: section 2's
    formula), computed with ``train.lr_at``; within ``tol`` (default 0.05: one decimal is a
    prediction). A misreading (a linear fall, the cosine from step 0, no warm-up) is named.
    ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the misreading or the right values with the rule) or None (not attempted),
        said in one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_lr_prediction
        >>> check_lr_prediction([0.5, 0.5, 0.25])
        check_lr_prediction: not yet: [0.5, 0.5, 0.25] is a linear fall: ...
        False
    """
    w, s, steps = LR_PREDICTION["warmup_steps"], LR_PREDICTION["max_steps"], LR_PREDICTION["steps"]
    cfg = TrainConfig(lr=1.0, warmup_steps=w, max_steps=s, min_lr=0.0)
    want = [round(lr_at(k, cfg), 6) for k in steps]
    cosine = lambda x: 0.5 * (1 + math.cos(math.pi * x))  # noqa: E731  (from 1 at x = 0 to 0 at x = 1)
    linear = [k / w if k <= w else 1 - (k - w) / (s - w) for k in steps]
    from_zero = [k / w if k <= w else cosine(k / s) for k in steps]
    no_warmup = [cosine(max(0, k - w) / (s - w)) if k > w else 1.0 for k in steps]
    return _check_prediction("check_lr_prediction", prediction, want,
                             f"warm-up s/W up to step W = {w}, then (1 + cos(pi (s - W) / (S - W))) / 2: "
                             f"halfway through the decay (step {(w + s) // 2}) the rate is half the peak, "
                             f"and the cosine falls fastest there: {want}",
                             known=[(linear, "a linear fall: the cosine stays higher early and falls faster mid-way"),
                                    (from_zero, "the cosine counted from step 0 (the authors' pytorch/train.py does "
                                                "that); train(), like their TF code, starts it at the end of "
                                                "warm-up: s - W"),
                                    (no_warmup, "no warm-up: before step W the rate rises as s / W")],
                             tol=0.05 if tol is None else tol, raises=raises)  # one decimal is a prediction


@checker
def check_lr(answer: Optional[Callable], *, settings: Sequence[tuple] = (
        (1, 100, 1000), (50, 100, 1000), (100, 100, 1000), (550, 100, 1000), (1000, 100, 1000), (7, 0, 10)),
        seed: Optional[int] = None, tol: Optional[float] = None, raises: Optional[bool] = None) -> Optional[bool]:
    """Check a learning-rate schedule, linear warm-up then cosine to ``min_lr`` (notebook 04, exercise 1).

    ``answer(step, lr, warmup_steps, max_steps, min_lr)`` -> the learning rate of update ``step``
    (1-based), with lr = 1e-3 and min_lr = 1e-5; compared with ``train.lr_at``. ``settings``: the
    (step, warmup_steps, max_steps) tried; ``seed``, ``tol``, ``raises``: as in ``grading``
    (nothing is drawn at random).

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_lr
        >>> from txl_minimal.tutorial import solutions
        >>> check_lr(solutions.lr, settings=[(30, 20, 200)])
        check_lr: right
        True
    """
    cases = []
    for step, warm, total in settings:
        cfg = TrainConfig(lr=1e-3, warmup_steps=warm, max_steps=total, min_lr=1e-5)
        cases.append(((step, 1e-3, warm, total, 1e-5), lr_at(step, cfg),
                      f"step={step}, warmup={warm}, max_steps={total}"))
    return _check("check_lr", answer, cases, tol=tol, raises=raises)


def _param_misreadings(cfg: TXLConfig) -> list[tuple[int, str]]:
    """Counts that a plausible misreading of 04's exercise 2 gives, with what each misreads (added
    to the right count): the prose says what each part holds, and the message points back there."""
    hd, d, n = cfg.n_head * cfg.d_head, cfg.d_model, cfg.n_layer
    rel = cfg.attn_type == "rel"
    return [(n * (3 * hd + d + (hd if rel else 0)),
             "a count with a bias on every attention projection (nn.Linear's default): W_q, W_k,E, W_v, "
             "the output projection and W_k,R have none"),
            (cfg.vocab_size * d, "a count with a separate softmax matrix: it is the embedding, tied"),
            ((n - 1) * 2 * hd if rel else 0, "a count with u and v in every layer: the model has one of each"),
            (-2 * n * d, "a count with LayerNorms of one vector each: each has a gain and a bias")]


@checker
def check_param_count(answer: Optional[Callable], *, settings: Sequence[dict] = (
        {}, {"n_layer": 2, "d_model": 64, "n_head": 2, "d_head": 32, "d_inner": 256},
        {"n_layer": 4, "d_model": 256, "n_head": 4, "d_head": 64, "d_inner": 1024}, {"attn_type": "abs", "mem_len": 0}),
        seed: Optional[int] = None, tol: Optional[float] = None, raises: Optional[bool] = None) -> Optional[bool]:
    """Check a parameter count of ``TransformerXL(cfg)`` from its sizes alone (notebook 04, exercise 2).

    ``answer(cfg)`` -> the number of parameters (tied softmax, one shared u and v, no bias on the
    attention projections); compared with ``num_params()``. A wrong count that one misreading of the
    prose explains is named. ``settings``: the TXLConfig fields of each config tried ({}: the
    defaults); ``seed``, ``tol``, ``raises``: as in ``grading`` (counts are exact).

    Returns:
        True (right), False (wrong: the first config that differs, and the misreading) or None (not attempted),
        said in one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_param_count
        >>> from txl_minimal.tutorial import solutions
        >>> check_param_count(solutions.param_count, settings=[{"n_layer": 3, "d_inner": 64}])
        check_param_count: right
        True
    """
    cases = []
    for kw in settings:
        cfg = TXLConfig(**kw)
        where = ", ".join(f"{k}={v}" for k, v in kw.items()) or "defaults"
        cases.append(((cfg,), TransformerXL(cfg).num_params(), where))
    if callable(answer):
        for (cfg,), want, where in cases:
            try:
                got = answer(cfg)
                if got is None or _same(got, want):
                    continue
                named = [why for extra, why in _param_misreadings(cfg) if extra and _same(got, want + extra)]
            except Exception:  # _check below reports it
                break
            if named:
                return _verdict(False, f"check_param_count: not yet: {where}: {_said(got)}, expected {want}: "
                                       f"{named[0]}.", raises)
            break
    return _check("check_param_count", answer, cases, tol=tol, raises=raises)
