"""txl_minimal.tutorial.memory_gain: the saving by position in the segment, on spread held-out stretches."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from txl_minimal.evaluate import evaluate
from txl_minimal.scores import LN2
from txl_minimal.stats import pooled
from txl_minimal.tutorial import memory_gain as mg
from tiny import synthetic_corpus


def test_stretches_are_spread_from_the_start_to_the_end_of_each_split_without_overlap():
    starts = mg.stretch_starts(153_317, 4, 32_768)
    assert starts[0] == 0 and starts[-1] + 32_769 == 153_317
    assert all(b - a >= 32_769 for a, b in zip(starts, starts[1:]))
    assert mg.stretch_starts(100, 1, 50) == [0]
    with pytest.raises(ValueError, match="need a split of at least 51 ids, got 50"):
        mg.stretch_starts(50, 2, 50)
    corpus = synthetic_corpus("abc de")  # valid and test: 200 ids each
    held = mg.heldout_stretches(corpus, 2, 64)
    assert [(s, len(ids)) for s, _, ids in held] == [("valid", 65)] * 2 + [("test", 65)] * 2
    assert np.array_equal(held[-1][2], corpus.test[-65:])


def test_loss_by_position_is_evaluates_losses_by_column_segment_and_position(tiny_model):
    model = tiny_model(mem_len=6, tgt_len=6)  # 4 columns of 3 segments
    ids = torch.randint(0, 27, (4 * 18 + 1,))
    grid = mg.loss_by_position(model, ids, columns=4)
    flat = evaluate(model, ids, batch_size=4, per_token=True)["nll"] / LN2
    assert grid.shape == (4, 3, 6) and np.allclose(grid.reshape(-1), flat)
    no_memory = mg.loss_by_position(model, ids, columns=4, mem_len=0)
    assert np.array_equal(no_memory[:, 0], grid[:, 0])  # each column's first segment: no memory either way
    assert not np.allclose(no_memory[:, 1:], grid[:, 1:])
    curve = mg.saving_by_position(no_memory, grid)
    assert np.allclose(curve, (no_memory - grid)[:, 1:].mean(axis=(0, 1)))  # the first segments left out
    with pytest.raises(ValueError, match="do not make 4 columns of whole segments of 6"):
        mg.loss_by_position(model, ids[:-6], columns=4)


def test_regions_cover_the_segment_once_and_by_region_pools_over_curves():
    parts = mg.regions(64)
    covered = sorted(i for s in parts.values() for i in range(64)[s])
    assert covered == list(range(64)) and parts["second half"] == slice(32, 64)
    rng = np.random.default_rng(0)
    curves = rng.normal(0.1, 0.05, (6, 64))
    got = mg.by_region(curves)
    want = pooled([(c[:8].mean(), 0.0) for c in curves])
    assert got["start"].mean == pytest.approx(want.mean) and got["start"].se == pytest.approx(want.se)
    assert got["all"].mean == pytest.approx(curves.mean()) and got["all"].units == 6
    mean, se = mg.pooled_by_position(curves)
    assert np.allclose(mean, curves.mean(0)) and np.allclose(se, curves.std(0, ddof=1) / np.sqrt(6))
    assert mg.share_at_start(np.r_[np.full(8, 1.0), np.zeros(56)]) == 1.0
    with pytest.raises(ValueError, match="2 or more curves"):
        mg.pooled_by_position(curves[:1])
