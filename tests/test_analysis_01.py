"""Tests of the notebook-01 helpers in txl_minimal.tutorial.analysis (context fragmentation, cost)."""
from __future__ import annotations

import functools
import numpy as np
import pytest
import torch

from txl_minimal.evaluate import evaluate
from txl_minimal.tutorial import analysis

torch.set_num_threads(1)


@pytest.fixture
def tiny_model(tiny_model):
    """The shared tiny model as these tests had it: float32, dropout 0.1, segments of 8, no noise."""
    return functools.partial(tiny_model, noise=0.0, dtype=torch.float32, dropout=0.1, tgt_len=8, mem_len=8)


def stream(n: int = 61, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 27, n).astype(np.uint8)


@pytest.mark.parametrize("attn_type,mem_len", [("rel", 8), ("rel", 0), ("abs", 0)])
def test_segment_position_nll_matches_evaluate(tiny_model, attn_type, mem_len):
    model = tiny_model(attn_type=attn_type, mem_len=mem_len)
    data = stream()
    nll = analysis.segment_position_nll(model, data)
    assert nll.shape == (7, 8)  # 60 predictions -> 7 full segments of 8
    ref = evaluate(model, data[:7 * 8 + 1], batch_size=1)["loss"]
    assert nll.double().mean().item() == pytest.approx(ref, abs=1e-5)


def test_segment_position_nll_without_memory_restarts_every_segment(tiny_model):
    model = tiny_model(attn_type="abs", mem_len=0)
    data = stream()
    nll = analysis.segment_position_nll(model, data)
    for k in range(nll.size(0)):  # each segment alone gives the same numbers
        seg = torch.from_numpy(data[8 * k:8 * k + 9].astype(np.int64))
        alone = model.eval()(seg[None, :-1], targets=seg[None, 1:]).nll[0]
        assert torch.allclose(nll[k], alone, atol=1e-5)


def test_segment_position_nll_memory_changes_later_segments_only(tiny_model):
    model = tiny_model(attn_type="rel", mem_len=8)
    data = stream()
    with_mem = analysis.segment_position_nll(model, data)
    without = analysis.segment_position_nll(model, data, mem_len=0)
    assert torch.allclose(with_mem[0], without[0], atol=1e-5)  # nothing to remember yet
    assert not torch.allclose(with_mem[1:], without[1:], atol=1e-4)


def test_segment_position_nll_restores_lengths_and_mode(tiny_model):
    model = tiny_model().train()
    analysis.segment_position_nll(model, list(stream()), tgt_len=5, mem_len=3)
    assert (model.cfg.tgt_len, model.cfg.mem_len, model.training) == (8, 8, True)
    with pytest.raises(ValueError, match="more than tgt_len"):
        analysis.segment_position_nll(model, stream(8))


def test_throughput_counts_predictions_per_second():
    calls = []
    runs = {"a": (lambda: calls.append("a"), 10), "b": (lambda: calls.append("b"), 20)}
    rate = analysis.throughput(runs, repeats=2)
    assert calls == ["a", "b", "a", "b"]  # interleaved
    assert set(rate) == {"a", "b"} and all(r > 0 for r in rate.values())
    with pytest.raises(ValueError):
        analysis.throughput(runs, repeats=0)


def test_throughput_shows_a_bar_only_when_asked(monkeypatch):
    bars = []

    class Bar:  # records what throughput asks of tqdm (TQDM_DISABLE=1 in the tests hides a real one)
        def __init__(self, **kwargs):
            self.kwargs, self.ticks = kwargs, 0
            bars.append(self)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n):
            self.ticks += n

    monkeypatch.setattr(analysis, "tqdm", Bar)
    runs = {"a": (lambda: None, 1), "b": (lambda: None, 1)}
    analysis.throughput(runs, repeats=3)
    analysis.throughput(runs, repeats=3, progress=True)
    assert bars[0].kwargs.get("disable") is True and "disable" not in bars[1].kwargs
    assert [b.ticks for b in bars] == [6, 6] and bars[1].kwargs["total"] == 6  # one tick per timed run
