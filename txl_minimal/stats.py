"""Error bars for comparing two scorings of the same tokens: a paired difference and its standard error.

Two scores of the same text (memory 0 against 64, two runs, two contexts) are compared token by token:
the difference of each token's loss varies far less than either loss, so a difference of a hundredth
of a bit is measurable on text whose bpc alone is uncertain to a tenth. Neighbouring tokens' losses
are correlated, so the standard error is taken over the means of blocks of consecutive tokens (a
per-token one would be too small); notebooks 01, 04, 05 and 08 use blocks of 512 to 1,000 characters
(128 words), notebook 09 groups of 4,096 characters, where the blocks' correlation has faded.

    a = evaluate(model, test, mem_len=0, per_token=True)["nll"]      # nats, one per token
    b = evaluate(model, test, mem_len=64, per_token=True)["nll"]     # the same tokens
    paired_difference(a, b, block=1000)    # Paired(mean=..., se=..., blocks=...): bits a - b

``pooled`` combines several such comparisons (held-out stretches, training seeds) into one estimate
whose error is measured from their spread, so it covers what differs between them. NumPy only.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple, Union

import numpy as np

LN2 = math.log(2.0)  # nats per bit


class Paired(NamedTuple):
    """A paired difference: its mean, its standard error and the number of blocks that SE is over."""

    mean: Union[float, np.ndarray]  # mean of a - b (an array of one per row for rows of tokens)
    se: Union[float, np.ndarray]  # its standard error: std of the block means (ddof 1) / sqrt(blocks)
    blocks: int  # how many blocks the SE is taken over


class Pooled(NamedTuple):
    """Several paired differences as one: their mean, the SE of their spread, their count, their own SEs'."""

    mean: float  # mean of the units' means, each unit counted once
    se: float  # std of the units' means (ddof 1) / sqrt(units): covers what differs between them
    units: int  # how many units (seed, stretch) were pooled
    within_se: float  # sqrt(sum of the units' own SE^2) / units: the SE if they differed by token noise alone


def block_means(values, block: int) -> np.ndarray:
    """Means of consecutive blocks of ``block`` values (float64), the last, shorter block dropped.

    ``values``: per-token losses (a 1-d array, or rows of them: blocks along the last axis).
    Store these instead of every token's loss and two scorings of the same tokens can still be
    compared (``paired_difference(means_a, means_b, block=8, drop_partial=True)``: groups of 8 blocks).

    Returns:
        A float64 array with ``len // block`` values along the last axis.

    Examples:
        >>> block_means([1.0, 2.0, 3.0, 4.0, 5.0], block=2)             # the 5 is a partial block: dropped
        array([1.5, 3.5])
    """
    values = _losses(values, "values", "block_means")
    block = _count(block, "block_means", "block")
    n = values.shape[-1] // block * block
    return values[..., :n].reshape(*values.shape[:-1], -1, block).mean(axis=-1)


def paired_difference(a, b, block: int, *, bits: bool = True, drop_partial: bool = False) -> Paired:
    """The mean of ``a - b`` over the same tokens and its standard error, over blocks of ``block`` tokens.

    ``a``, ``b``: the losses of the same tokens in the same order, of the same shape: per-token NLLs
    in nats (``evaluate(..., per_token=True)["nll"]``), or means of blocks of them (``block_means``).
    Rows of tokens (shape (rows, n)) are compared row by row, as independent comparisons.
    ``block``: tokens (values) per block; the SE is std(block means of a - b, ddof=1) / sqrt(blocks),
    the last, shorter block left out. ``block=1`` treats every value as independent: right for
    block means far enough apart, or for targets spread over a text (``tutorial.context``), too
    small for neighbouring tokens, whose losses are correlated.
    ``bits``: the difference in bits (the losses divided by ln 2: bpc for characters); False keeps
    the losses' own unit (nats, or whatever ``a`` and ``b`` are in). ``drop_partial``: the mean too
    is taken over the whole blocks (by default it is over every value: for per-token losses, the
    difference of the two scores ``evaluate`` reports).

    Returns:
        ``Paired(mean, se, blocks)``: floats for 1-d inputs, one per row for rows; ``blocks`` the
        number the SE is over. A shape mismatch, or fewer than 2 blocks, is a ValueError.

    Examples:
        >>> import numpy as np
        >>> a = np.array([2.0, 2.2, 1.8, 2.4, 2.0, 2.6])          # nats, token by token
        >>> b = a - np.array([0.1, 0.3, 0.0, 0.2, 0.2, 0.4])      # the same tokens, scored lower by these
        >>> p = paired_difference(a, b, block=2, bits=False)       # blocks of 2: means 0.2, 0.1, 0.3
        >>> round(p.mean, 3), round(p.se, 4), p.blocks             # SE: std(0.2, 0.1, 0.3) / sqrt(3)
        (0.2, 0.0577, 3)
        >>> round(paired_difference(a, b, block=2).mean, 4)       # in bits: 0.2 / ln 2
        0.2885
    """
    block = _count(block, "paired_difference", "block")
    a, b = _losses(a, "a", "paired_difference"), _losses(b, "b", "paired_difference")
    if a.shape != b.shape or a.ndim not in (1, 2):
        raise ValueError(f"paired_difference compares the same tokens: a and b must have one shape, (n,) or "
                         f"(rows, n), got {a.shape} and {b.shape}. Fix: score the same tokens twice (the same "
                         "text, max_tokens and batch_size), or cut the longer to the shorter")
    d = a - b
    if bits:
        d = d / LN2
    n = d.shape[-1] // block
    if n < 2:
        raise ValueError(f"paired_difference needs at least 2 blocks of {block:,} values for a standard error, "
                         f"got {d.shape[-1]:,} values. Fix: a smaller block, or score more tokens")
    blocks = d[..., :n * block].reshape(*d.shape[:-1], n, block).mean(axis=-1)
    mean = (blocks if drop_partial else d).mean(axis=-1)
    se = blocks.std(axis=-1, ddof=1) / math.sqrt(n)
    if d.ndim == 1:
        return Paired(float(mean), float(se), n)
    return Paired(mean, se, n)


def pooled(units: Sequence) -> Pooled:
    """Several paired differences (held-out stretches, training seeds) as one estimate, with the error of their spread.

    ``units``: each a ``Paired`` (or a ``(mean, se)`` pair) of one comparison, say memory 64 against
    0 for one seed on one stretch of text, all in one unit; each counts once (give them the same number
    of tokens). The SE is measured from how the units' means scatter, so it covers everything that
    differs between them (the stretch of text, the seed), not the token noise alone; with few units it
    is itself rough (two units: one degree of freedom). ``within_se`` is what the error would be if
    the units differed by their own token noise alone: an ``se`` well above it says the seed or the
    stretch matters more than the tokens.

    Returns:
        ``Pooled(mean, se, units, within_se)``; fewer than 2 units is a ValueError.

    Examples:
        >>> from txl_minimal.stats import Paired
        >>> seed0, seed1 = Paired(0.10, 0.01, 30), Paired(0.06, 0.01, 30)   # one comparison per seed
        >>> p = pooled([seed0, seed1])
        >>> round(p.mean, 3), round(p.se, 3), p.units, round(p.within_se, 4)
        (0.08, 0.02, 2, 0.0071)
    """
    if isinstance(units, (str, bytes)) or not hasattr(units, "__iter__"):
        raise ValueError(f"pooled takes a list of units (what paired_difference returns for each), got {units!r}")
    units = list(units)
    if len(units) < 2:
        raise ValueError(f"pooled needs at least 2 units (seeds, stretches) to measure their spread, got "
                         f"{len(units)}. Fix: one unit's own error is its Paired.se")
    means, ses = [], []
    for k, unit in enumerate(units):
        try:
            mean, se = float(unit[0]), float(unit[1])
        except (TypeError, ValueError, IndexError):
            raise ValueError(f"pooled: unit {k} must be a Paired or a (mean, se) pair of numbers, got {unit!r}. "
                             "Fix: pass what paired_difference returns for each unit") from None
        means.append(mean)
        ses.append(se)
    means, ses = np.array(means), np.array(ses)
    k = len(means)
    return Pooled(float(means.mean()), float(means.std(ddof=1) / math.sqrt(k)), k,
                  float(math.sqrt(float((ses ** 2).sum())) / k))


def _losses(values, name: str, caller: str) -> np.ndarray:
    """``values`` as a float64 array of at least one axis, or a ValueError: text, None or rows of different
    lengths are no losses (numpy would say "could not convert string to float")."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        array = np.zeros(())
    if array.ndim == 0:
        raise ValueError(f"{caller}: {name} must be per-token values (losses), a 1-D array or rows of them, got "
                         f"{str(values)[:40]!r}. Fix: e.g. evaluate(model, ids, per_token=True)['nll']")
    return array


def _count(value, caller: str, name: str) -> int:
    """``value`` as a Python int >= 1 (a NumPy integer is one), or a ValueError naming it."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{caller}: {name} must be a positive integer (values per block), got {value!r}")
    return int(value)
