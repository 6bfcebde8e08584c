"""Where memory's gain comes from: the bits saved at each position of the segment, on several held-out stretches.

A model reading segments of L characters without memory predicts the first characters of every segment
from almost nothing (notebook 01's fragmentation); with a memory they see the characters before the cut.
A saving made there needs no reading far back. So the saving is measured **by position in the segment**
(0 … L-1), on ``STRETCHES`` stretches of ``STRETCH`` characters spread through the valid split and as many
through the test split, and pooled over stretches (and training seeds) with ``stats.pooled``: its error
covers which stretch was read and which seed trained the model, not only the characters' noise.

    curves = [saving_by_position(loss_by_position(m0, ids, mem_len=0), loss_by_position(m64, ids, mem_len=64))
              for _, _, ids in heldout_stretches(corpus)]
    by_region(curves)       # {"start": Pooled(...), "middle": ..., "second half": ...}

scripts/memory_by_position.py scores the shipped models this way (results/memory_by_position.json); notebooks
01, 03, 06 and 09 read it.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from txl_minimal import stats
from txl_minimal.evaluate import evaluate
from txl_minimal.model import TransformerXL
from txl_minimal.scores import LN2

STRETCH = 32_768  # characters (predictions) per held-out stretch
STRETCHES = 4  # stretches per split (valid and test), spread evenly through it
COLUMNS = 16  # each stretch is read as this many columns (evaluate's batch_size), each from an empty memory
START = 8  # "the segment's start": its first 8 positions
RESULTS = Path(__file__).resolve().parents[2] / "results" / "memory_by_position.json"


def stretch_starts(n: int, k: int = STRETCHES, length: int = STRETCH) -> list[int]:
    """Where ``k`` stretches of ``length`` predictions (``length`` + 1 ids) start in a split of ``n`` ids, spread
    evenly from its start to its end; a ValueError if they do not fit."""
    if k < 1 or length < 1 or n < length + 1:
        raise ValueError(f"stretch_starts: {k} stretch(es) of {length:,} predictions need a split of at least "
                         f"{length + 1:,} ids, got {n:,}. Fix: fewer or shorter stretches")
    if k == 1:
        return [0]
    step = (n - length - 1) / (k - 1)
    return [round(i * step) for i in range(k)]


def heldout_stretches(corpus, k: int = STRETCHES, length: int = STRETCH) -> list[tuple[str, int, np.ndarray]]:
    """(split, start, ids) of ``k`` stretches of ``corpus.valid`` and of ``corpus.test``, ``length`` + 1 ids each."""
    out = []
    for split in ("valid", "test"):
        ids = getattr(corpus, split)
        out += [(split, s, np.asarray(ids[s:s + length + 1])) for s in stretch_starts(len(ids), k, length)]
    return out


def loss_by_position(model: TransformerXL, ids, columns: int = COLUMNS, **lengths) -> np.ndarray:
    """The loss in bits of every prediction of ``ids`` (n + 1 ids, n divisible by ``columns`` x tgt_len), read
    with ``evaluate`` in ``columns`` columns and ``lengths`` (tgt_len, mem_len, clamp_len, same_length).

    Returns:
        (columns, segments, tgt_len) float64: [c, s, i] is position i of segment s of column c. Segment 0 of
        every column is read with an empty memory."""
    with torch.no_grad():
        res = evaluate(model, ids, batch_size=columns, per_token=True, **lengths)
    L, n = res["settings"]["tgt_len"], len(res["nll"])
    if n % (columns * L):
        raise ValueError(f"loss_by_position: {n:,} predictions do not make {columns} columns of whole segments of "
                         f"{L}. Fix: a stretch of a multiple of {columns * L:,} predictions")
    return (res["nll"] / LN2).reshape(columns, n // (columns * L), L)


def saving_by_position(base: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Bits ``other`` saves against ``base`` at each position of the segment (``loss_by_position``'s arrays of
    the same characters), averaged over every segment but each column's first (read without memory by both).

    Returns:
        (tgt_len,) float64: the mean of base - other at positions 0 … tgt_len - 1."""
    if base.shape != other.shape or base.ndim != 3 or base.shape[1] < 2:
        raise ValueError(f"saving_by_position compares two scorings of the same characters, (columns, segments >= 2, "
                         f"tgt_len) each, got {base.shape} and {other.shape}")
    return (base - other)[:, 1:].mean(axis=(0, 1))


def regions(tgt_len: int, start: int = START) -> dict[str, slice]:
    """The segment's positions in three parts: "start" (the first ``start``), "middle" (up to the half) and
    "second half" (positions tgt_len // 2 … tgt_len - 1, with at least tgt_len // 2 characters of the segment
    before them)."""
    half = tgt_len // 2
    return {"start": slice(0, start), "middle": slice(start, half), "second half": slice(half, tgt_len)}


def pooled_by_position(curves: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(mean, SE) at each position over ``curves`` (one per stretch and seed), the SE from their spread."""
    curves = np.asarray(curves, dtype=np.float64)
    if curves.ndim != 2 or len(curves) < 2:
        raise ValueError(f"pooled_by_position needs 2 or more curves of one length, got shape {curves.shape}")
    return curves.mean(axis=0), curves.std(axis=0, ddof=1) / np.sqrt(len(curves))


def by_region(curves: Sequence[np.ndarray], start: int = START) -> dict[str, stats.Pooled]:
    """Each region's saving (``regions``) and the whole segment's ("all"), per bit and character, pooled over
    ``curves`` (one per stretch and seed) with ``stats.pooled``: its SE from their spread."""
    curves = np.asarray(curves, dtype=np.float64)
    parts = dict(regions(curves.shape[-1], start), all=slice(None))
    return {name: stats.pooled([(c[part].mean(), 0.0) for c in curves]) for name, part in parts.items()}


def share_at_start(curve: np.ndarray, start: int = START) -> float:
    """The share of a curve's total saving made at the segment's first ``start`` positions."""
    return float(curve[:start].sum() / curve.sum())


def load(path=None) -> dict:
    """results/memory_by_position.json (``path``: another one) as scripts/memory_by_position.py wrote it."""
    path = Path(path) if path else RESULTS
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing. Fix: git checkout results/memory_by_position.json, or run "
                                "python scripts/memory_by_position.py (about 40 min on one CPU thread)")
    return json.loads(path.read_text())


def own_text_curves(results: dict, text: str) -> list[np.ndarray]:
    """Notebook 09's saving curves of ``text`` ("code" or "text8"): one per (seed, stretch), seeds in order."""
    by_seed = results["own_text"][text]["curves"]
    return [np.asarray(c) for seed in sorted(by_seed) for c in by_seed[seed]]


def start_shares(results: dict, start: int = START) -> dict[str, float]:
    """Each text's share of notebook 09's saving (pooled over seeds and stretches) made at the first ``start``
    positions of the segment."""
    return {t: share_at_start(pooled_by_position(own_text_curves(results, t))[0], start) for t in ("code", "text8")}


def past_start_verdict(results: dict, start: int = START) -> tuple[str, float, float]:
    """Which text's models save more past the segment's first ``start`` positions: "code", "text8", or "neither"
    where the difference (code minus text8) is within two of its standard errors; and that difference and SE."""
    rest = {t: stats.pooled([(c[start:].mean(), 0.0) for c in own_text_curves(results, t)]) for t in ("code", "text8")}
    diff, se = rest["code"].mean - rest["text8"].mean, float(np.hypot(rest["code"].se, rest["text8"].se))
    return ("neither" if abs(diff) < 2 * se else "code" if diff > 0 else "text8"), diff, se


def code_stretches(path=None) -> dict[str, str]:
    """The code's held-out stretches as text, {"valid 0": ..., "test 202145": ...}: what results/memory_by_position.json
    scored (the standard library differs between Python versions; this is the one the models were scored on)."""
    import gzip
    path = Path(path) if path else RESULTS.with_name(RESULTS.stem + "-code.json.gz")
    return json.loads(gzip.decompress(path.read_bytes()).decode("utf-8"))
