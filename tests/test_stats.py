"""txl_minimal.stats: the paired difference and its standard error against a naive computation (Python's
statistics module, one block at a time), the pooling of units (seeds, stretches), and the three older
helpers (pretrained.paired_difference, tutorial.own_text.paired_blocks, tutorial.context.paired_gains)
as thin calls giving exactly what they gave before (their formulas, copied here from before the change)."""
from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from txl_minimal import pretrained
from txl_minimal.stats import LN2, Paired, block_means, paired_difference, pooled
from txl_minimal.tutorial import context, own_text


def naive(a, b, block, bits=True, drop_partial=False):
    """(mean, se, blocks) by hand: per-token differences, means of whole blocks, their stdev / sqrt(count)."""
    d = [(x - y) / (math.log(2) if bits else 1) for x, y in zip(a, b)]
    means = [statistics.fmean(d[i:i + block]) for i in range(0, len(d) - block + 1, block)]
    mean = statistics.fmean(means) if drop_partial else statistics.fmean(d)
    return mean, statistics.stdev(means) / math.sqrt(len(means)), len(means)


@pytest.mark.parametrize("n, block", [(1000, 100), (1037, 100), (50, 1), (64, 7)])
@pytest.mark.parametrize("bits, drop_partial", [(True, False), (False, False), (False, True)])
def test_paired_difference_equals_the_naive_computation(n, block, bits, drop_partial):
    rng = np.random.default_rng(n + block)
    a = rng.gamma(2.0, 1.0, n)
    b = a - 0.1 + rng.normal(0, 0.3, n)
    got = paired_difference(a, b, block, bits=bits, drop_partial=drop_partial)
    mean, se, blocks = naive(a.tolist(), b.tolist(), block, bits, drop_partial)
    assert isinstance(got, Paired) and got.blocks == blocks == n // block
    assert got.mean == pytest.approx(mean, rel=1e-12) and got.se == pytest.approx(se, rel=1e-12)


def test_the_mean_covers_every_token_unless_drop_partial():
    a, b = np.array([1.0, 1.0, 3.0, 3.0, 9.0]), np.zeros(5)  # blocks of 2: means 1 and 3; the 9 is a partial block
    assert paired_difference(a, b, 2, bits=False).mean == pytest.approx(17 / 5)  # the difference of the scores
    assert paired_difference(a, b, 2, bits=False, drop_partial=True).mean == pytest.approx(2.0)
    assert paired_difference(a, b, 2, bits=False).se == pytest.approx(1.0)  # stdev(1, 3) / sqrt(2); the 9 left out
    assert paired_difference(a, b, 2).mean == pytest.approx(17 / 5 / math.log(2))  # nats -> bits


def test_rows_are_compared_row_by_row():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 40)), rng.normal(size=(3, 40))
    rows = paired_difference(a, b, 4, bits=False)
    assert rows.mean.shape == rows.se.shape == (3,) and rows.blocks == 10
    for k in range(3):
        one = paired_difference(a[k], b[k], 4, bits=False)
        assert (rows.mean[k], rows.se[k]) == pytest.approx((one.mean, one.se), rel=1e-12)


def test_block_means_are_means_of_whole_blocks():
    assert block_means(np.arange(7.0), 3).tolist() == [1.0, 4.0]
    assert block_means([[0.0, 2.0, 4.0, 6.0]], 2).tolist() == [[1.0, 5.0]]


@pytest.mark.parametrize("call, message", [
    (lambda: paired_difference(np.ones(10), np.ones(9), 2),
     r"one shape, \(n,\) or \(rows, n\), got \(10,\) and \(9,\)"),
    (lambda: paired_difference(np.ones(10), np.ones(10), 6), "at least 2 blocks of 6 values.*got 10 values"),
    (lambda: paired_difference(np.ones(10), np.ones(10), 0), "block must be a positive integer"),
    (lambda: paired_difference(np.ones(10), np.ones(10), 2.0), "block must be a positive integer"),
    (lambda: paired_difference(np.ones(10), np.ones(10), True), "block must be a positive integer"),
    (lambda: block_means(np.ones(4), -1), "block must be a positive integer"),
    (lambda: pooled([Paired(0.1, 0.01, 3)]), "at least 2 units"),
    (lambda: pooled([(0.1, 0.01), "x"]), "unit 1 must be a Paired or a \\(mean, se\\) pair"),
])
def test_bad_arguments_are_refused_in_a_sentence(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_pooled_takes_its_error_from_the_units_spread():
    units = [Paired(0.10, 0.010, 5), (0.06, 0.012), Paired(0.09, 0.008, 5)]
    p = pooled(units)
    means, ses = [0.10, 0.06, 0.09], [0.010, 0.012, 0.008]
    assert p.units == 3 and p.mean == pytest.approx(statistics.fmean(means))
    assert p.se == pytest.approx(statistics.stdev(means) / math.sqrt(3))
    assert p.within_se == pytest.approx(math.sqrt(sum(s * s for s in ses)) / 3)
    assert pooled([(0.1, 0.02), (0.1, 0.03)]).se == 0.0  # units that agree: no spread, whatever their own SEs


def test_pooling_per_seed_and_stretch_differences_covers_the_seed():
    """Two seeds x two stretches of a text: the pooled SE sees the seeds' offset, the units' own SEs do not."""
    rng = np.random.default_rng(1)
    units = []
    for seed_offset in (0.0, 0.2):  # the second seed's model saves 0.2 nats more on every token
        for _ in range(2):
            a = rng.gamma(2.0, 1.0, 4000)
            units.append(paired_difference(a, a - 0.1 - seed_offset + rng.normal(0, 0.05, 4000), 500, bits=False))
    p = pooled(units)
    assert p.mean == pytest.approx(0.2, abs=0.01)
    assert p.se > 5 * p.within_se  # the seed, not the tokens, makes the error


# the older helpers, as they were (copied from before they became calls of stats.paired_difference)
def old_pretrained(nll, reference, block=1000):
    diff = (np.asarray(nll) - np.asarray(reference)[:len(nll)]) / LN2
    blocks = diff[: len(diff) // block * block].reshape(-1, block).mean(axis=1)
    return float(diff.mean()), float(blocks.std(ddof=1) / math.sqrt(len(blocks)))


def old_own_text(a, b, group=1):
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    d = d[:len(d) // group * group].reshape(-1, group).mean(axis=1)
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d)))


def old_context(losses):
    diff = losses[:-1] - losses[1:]
    return diff.mean(axis=1), diff.std(axis=1, ddof=1) / math.sqrt(losses.shape[1])


def test_the_older_helpers_give_exactly_what_they_gave():
    rng = np.random.default_rng(2)
    for n in (2000, 5123):
        nll = rng.gamma(2.0, 1.0, n)
        reference = np.concatenate([nll + rng.normal(0, 0.3, n), [7.0, 8.0]])  # longer: its first n
        for block in (128, 512, 1000):
            assert pretrained.paired_difference(nll, reference, block) == old_pretrained(nll, reference, block)
        for group in (1, 8):
            assert own_text.paired_blocks(nll[:300], reference[:300], group) == old_own_text(nll[:300], reference[:300],
                                                                                           group)
    losses = rng.normal(size=(5, 777))
    for new, old in zip(context.paired_gains(losses), old_context(losses)):
        assert new.shape == old.shape == (4,) and np.array_equal(new, old)
    assert np.array_equal(own_text.block_means(nll), nll[:len(nll) // 512 * 512].reshape(-1, 512).mean(axis=1))
