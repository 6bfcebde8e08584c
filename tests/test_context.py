"""Tests of txl_minimal.tutorial.context: exact-context scoring and the effective-context estimates."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from txl_minimal.tutorial.context import (context_nll, doubling_gains, effective_context_length,
                                          extend_fixed_window, loss_vs_context, paired_gains,
                                          relative_effective_context_length, relative_gain, target_positions)

torch.set_num_threads(1)


@pytest.fixture
def tiny_model(tiny_model):
    """The shared tiny model, float32, with large weights so every input visibly matters."""
    return functools.partial(tiny_model, noise=0.3, dtype=torch.float32, dropout=0.1)


DATA = np.random.default_rng(0).integers(0, 27, 400)


# ---------------------------------------------------------------------------- targets

def test_target_positions_leave_room_for_the_longest_context():
    t = target_positions(1000, 50, max_context=128)
    assert len(t) == 50 and len(np.unique(t)) == 50
    assert t.min() >= 128 and t.max() <= 999 and np.all(np.diff(t) > 0)
    assert np.array_equal(t, target_positions(1000, 50, 128))  # deterministic
    with pytest.raises(ValueError):
        target_positions(100, 50, max_context=64)  # only 36 positions have 64 tokens before them


# ---------------------------------------------------------------------------- exact context

@pytest.mark.parametrize("attn_type", ["rel", "abs"])
def test_context_nll_equals_one_explicit_window_per_target(tiny_model, attn_type):
    model = tiny_model(attn_type=attn_type, mem_len=0 if attn_type == "abs" else 6)
    targets = target_positions(len(DATA), 9, max_context=10)
    got = context_nll(model, DATA, targets, context=10, batch_size=4)  # 3 batches, the last short
    ids = torch.as_tensor(DATA)
    want = []
    with torch.no_grad():
        for t in targets:
            model.set_lengths(tgt_len=10, mem_len=0)
            logits = model(ids[None, t - 10:t]).logits[0, -1]
            want.append(F.cross_entropy(logits[None], ids[t:t + 1]).item())
    model.set_lengths(tgt_len=6, mem_len=0 if attn_type == "abs" else 6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kw", [{}, dict(seg_len=4, mem_len=4), dict(seg_len=3, mem_len=5)])
def test_only_the_last_c_characters_matter(tiny_model, kw):
    model = tiny_model()
    c, targets = 12, target_positions(len(DATA), 6, max_context=40)
    base = context_nll(model, DATA, targets, c, **kw)
    before = DATA.copy()
    for t in targets:  # change everything more than c characters back
        before[t - 40:t - c] = (before[t - 40:t - c] + 1) % 27
    np.testing.assert_array_equal(context_nll(model, before, targets, c, **kw), base)
    inside = DATA.copy()
    for t in targets:  # change the oldest character of the window: it must be read
        inside[t - c] = (inside[t - c] + 1) % 27
    assert np.all(np.abs(context_nll(model, inside, targets, c, **kw) - base) > 1e-7)


def test_chunked_reading_with_a_memory_covering_the_window_equals_one_pass(tiny_model):
    model = tiny_model()
    targets = target_positions(len(DATA), 8, max_context=20)
    one_pass = context_nll(model, DATA, targets, 20)
    chunked = context_nll(model, DATA, targets, 20, seg_len=6, mem_len=19)  # segments 2+6+6+6
    np.testing.assert_allclose(chunked, one_pass, rtol=1e-5, atol=1e-6)
    short_memory = context_nll(model, DATA, targets, 20, seg_len=6, mem_len=2)
    assert np.abs(short_memory - one_pass).max() > 1e-4  # a short memory is a different reading


def test_context_nll_restores_lengths_and_mode(tiny_model):
    model = tiny_model(clamp_len=0).train()
    model.train()
    before = model.cfg.to_dict()
    context_nll(model, DATA, [50, 60], 16, seg_len=4, mem_len=8, clamp_len=5)
    assert model.cfg.to_dict() == before and model.training
    with pytest.raises(ValueError):
        context_nll(model, DATA, [10], 16)  # not 16 tokens before position 10


def test_loss_vs_context_rows_are_contexts(tiny_model):
    model = tiny_model(attn_type="abs", mem_len=0)
    targets = target_positions(len(DATA), 5, max_context=8)
    table = loss_vs_context(model, DATA, [1, 4, 8], targets)
    assert table.shape == (3, 5) and np.all(np.isfinite(table)) and np.all(table > 0)
    np.testing.assert_allclose(table[1], context_nll(model, DATA, targets, 4), rtol=1e-6)


# ---------------------------------------------------------------------------- estimates

CONTEXTS = [1, 2, 4, 8, 16, 32]


def test_extend_fixed_window_repeats_the_longest_measured_row():
    losses = np.arange(8.0).reshape(4, 2)  # measured at 1, 2, 4, 8
    out = extend_fixed_window(losses, [1, 2, 4, 8], CONTEXTS)
    assert out.shape == (6, 2)
    assert np.array_equal(out[:4], losses) and np.array_equal(out[4], losses[3]) and np.array_equal(out[5], losses[3])
    out[5, 0] = -1.0
    assert losses[3, 0] == 6.0  # a copy, not a view
    with pytest.raises(ValueError):
        extend_fixed_window(losses[[0, 1, 3]], [1, 2, 8], CONTEXTS)  # 4 was not measured
    with pytest.raises(ValueError):
        extend_fixed_window(losses, [1, 2, 4], CONTEXTS)  # rows and contexts disagree


def test_effective_context_length_stops_at_the_first_small_gain():
    mean = [3.0, 2.0, 1.5, 1.45, 1.0, 0.9]  # gains 1, .5, .05, .45, .1
    np.testing.assert_allclose(doubling_gains(mean), [1.0, 0.5, 0.05, 0.45, 0.1])
    assert effective_context_length(CONTEXTS, mean, threshold=0.1) == 4  # stops at 4 -> 8, not later
    assert effective_context_length(CONTEXTS, mean, threshold=0.01) == 32  # every step gains: largest
    assert effective_context_length(CONTEXTS, mean, threshold=2.0) == 1
    rng = np.random.default_rng(1)
    for _ in range(20):  # a larger threshold never gives a longer context
        curve = np.cumsum(-rng.exponential(0.1, len(CONTEXTS))) + 3
        lengths = [effective_context_length(CONTEXTS, curve, th) for th in (0.01, 0.05, 0.1, 0.2)]
        assert lengths == sorted(lengths, reverse=True)


def test_paired_gains_mean_and_standard_error():
    rng = np.random.default_rng(2)
    hard = rng.uniform(0, 5, 400)  # very different targets ...
    losses = np.stack([hard + 1.0, hard + 0.5 + rng.normal(0, 0.1, 400), hard + 0.5])
    gains, se = paired_gains(losses)
    np.testing.assert_allclose(gains, [losses[0].mean() - losses[1].mean(), losses[1].mean() - losses[2].mean()])
    assert gains[0] == pytest.approx(0.5, abs=0.02)
    assert se[0] == pytest.approx(0.1 / 20, rel=0.15)  # ... but the paired differences spread only 0.1
    assert se[0] < losses[0].std() / 20 / 10
    same_shift = np.stack([hard + 1.0, hard])
    assert paired_gains(same_shift)[1][0] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError):
        paired_gains(np.ones((3, 1)))


def synthetic(n_targets: int = 200, plateau: int = 3, seed: int = 0, offset: float = 0.0) -> np.ndarray:
    """Per-token losses that fall by 0.3 nats per doubling up to CONTEXTS[plateau], then stay."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(1.0, 3.0, n_targets)
    steps = np.minimum(np.arange(len(CONTEXTS)), plateau)
    return base[None, :] + offset - 0.3 * steps[:, None]


def test_relative_gain_definitions():
    a = synthetic(plateau=3)
    g = relative_gain({"a": a}, 2, 2)
    assert g["a"] == 0.0  # no longer context, no gain
    g = relative_gain({"a": a}, 0, 1)
    # one model: baseline = its own short loss, every target improves by 0.3 nats
    assert g["a"] == pytest.approx(1 - math.exp(np.mean(a[1]) - np.mean(a[0])))
    assert relative_gain({"a": a}, 4, 5)["a"] == pytest.approx(0.0)  # on the plateau


def test_relative_gain_shares_one_baseline():
    good, bad = synthetic(offset=0.0), synthetic(offset=5.0)  # bad: 5 nats worse everywhere
    alone = relative_gain({"good": good}, 0, 1)["good"]
    group = relative_gain({"good": good, "bad": bad}, 0, 1)
    assert group["good"] == pytest.approx(alone)  # a worse model does not move the baseline
    assert group["bad"] == 0.0  # and cannot beat it: only losses below the baseline count


def test_relative_gain_top_r_keeps_the_hardest_targets():
    a = synthetic(n_targets=10)
    a[:, 0] += 100.0  # target 0 is by far the hardest and improves a lot more
    a[1:, 0] -= 50.0
    g_all = relative_gain({"a": a}, 0, 1, r=1.0)["a"]
    g_top = relative_gain({"a": a}, 0, 1, r=0.1)["a"]  # only target 0
    assert g_top == pytest.approx(1 - math.exp(-50.3)) and g_top > g_all


def test_relative_effective_context_length_orders_models():
    long, short = synthetic(plateau=4, seed=1), synthetic(plateau=2, seed=1)
    recl = relative_effective_context_length({"long": long, "short": short}, CONTEXTS, threshold=0.01)
    assert recl == {"long": 16, "short": 4}
    same = relative_effective_context_length({"x": long, "y": long.copy()}, CONTEXTS)
    assert same["x"] == same["y"] == 16
    never = relative_effective_context_length({"a": synthetic(plateau=9)}, CONTEXTS)
    assert never["a"] == 32  # gains at every step: the largest context, a lower bound
    with pytest.raises(ValueError):
        relative_effective_context_length({"a": long[:3]}, CONTEXTS)


def test_context_nll_of_an_lstm_reads_each_window_from_an_empty_state():
    """Any model with TransformerXL's forward works: an LSTM sees exactly the window."""
    from txl_minimal.tasks import LSTMLM  # the recurrent baseline of notebook 06

    torch.manual_seed(0)
    lstm = LSTMLM(27, d_embed=8, d_hidden=12, n_layer=2).double().eval()
    targets = target_positions(len(DATA), 7, max_context=10)
    got = context_nll(lstm, DATA, targets, context=10, batch_size=3)
    ids = torch.as_tensor(DATA)
    with torch.no_grad():
        want = [-lstm(ids[None, t - 10:t]).logits[0, -1, ids[t]].item() for t in targets]
    np.testing.assert_allclose(got, want, rtol=1e-6)  # context_nll scores in float32
    assert not np.allclose(got, context_nll(lstm, DATA, targets, context=3))  # the window matters


def test_loss_vs_context_shows_a_bar_on_stderr_only_when_asked_and_not_under_tqdm_disable():
    """progress=True draws a bar (notebook 06's long cells), which TQDM_DISABLE=1, the test
    environment's switch read when tqdm is imported, still silences (stored outputs stay clean)."""
    import os
    import subprocess
    import sys
    code = ("import numpy as np, torch; from txl_minimal.model import TransformerXL, TXLConfig; "
            "from txl_minimal.tutorial.context import loss_vs_context, target_positions; torch.manual_seed(0); "
            "m = TransformerXL(TXLConfig(n_layer=1, n_head=2, d_model=16, d_head=8, d_inner=32, "
            "tgt_len=8, mem_len=8)); "
            "d = np.random.default_rng(0).integers(0, 27, 200); t = target_positions(len(d), 4, max_context=8); "
            "loss_vs_context(m, d, [1, 4], t, progress={progress})")
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    def stderr(progress: bool, **extra) -> str:
        return subprocess.run([sys.executable, "-c", code.format(progress=progress)], env={**env, **extra},
                              capture_output=True, text=True, check=True).stderr
    assert "contexts" in stderr(True)
    assert "contexts" not in stderr(False)
    import tqdm.utils
    if hasattr(tqdm.utils, "envwrap"):  # tqdm >= 4.66 reads TQDM_* variables (4.60, the floor, does not)
        assert "contexts" not in stderr(True, TQDM_DISABLE="1")
