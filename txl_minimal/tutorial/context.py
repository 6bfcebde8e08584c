"""How much context does a trained model use? (notebook 06)

The question of Sec. 4.3 and Appendix C of the paper (Dai et al., 2019): give a
model exactly ``c`` characters before a target, score the target, and see how
the loss falls as ``c`` grows. Everything here works on any ``TransformerXL``
checkpoint (relative or absolute positions) and on any token array.

    targets = target_positions(len(data), 1024, max_context=512)
    nll = loss_vs_context(model, data, [1, 2, 4, ..., 512], targets)   # (n_contexts, n_targets) nats
    gains, se = paired_gains(nll / LN2)        # bits gained by each doubling, with standard errors
    effective_context_length([1, ..., 512], nll.mean(1) / LN2, threshold=0.01)
    relative_effective_context_length({"txl": nll_a, "vanilla": nll_b}, contexts, threshold=0.01)

The last one is a simplified version of the paper's Relative Effective Context
Length (RECL): the same baseline for every model of a group, the relative
perplexity gain of a longer context over it, and the context beyond which that
gain falls below a threshold (see its docstring for what we changed).
"""
from __future__ import annotations

import math
from typing import Optional
from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from txl_minimal import stats, validation
from txl_minimal.data import as_ids
from txl_minimal.evaluate import read_segments
from txl_minimal.model import TransformerXL
from txl_minimal.utils import LN2  # noqa: F401  (notebook 06 imports it from here)
from txl_minimal.validation import count


def _contexts(contexts, caller: str) -> list[int]:
    """``contexts`` as a non-empty list of context lengths >= 1, or a ValueError naming the first that is not."""
    validation.nonempty(contexts, "contexts", caller, "a list of context lengths, e.g. [1, 2, 4, 8]")
    return [count(c, "contexts[...]", caller) for c in contexts]


def _number(value, name: str, caller: str) -> float:
    """``value`` as a finite float (a NumPy number too), or a ValueError: None, "0.01" and NaN are not."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not math.isfinite(value):
        raise ValueError(f"{caller}: {name} must be a finite number, got {value!r}")
    return float(value)


def target_positions(n_tokens: int, n_targets: int, max_context: int) -> np.ndarray:
    """``n_targets`` evenly spaced positions t in [max_context, n_tokens - 1].

    Every position has at least ``max_context`` tokens before it, so the same
    targets can be scored with every context up to ``max_context``. No
    randomness: the same call always gives the same positions.
    """
    n_tokens = count(n_tokens, "n_tokens", "target_positions", 0)
    n_targets, max_context = (count(v, name, "target_positions") for name, v in (("n_targets", n_targets),
                                                                                  ("max_context", max_context)))
    available = n_tokens - max_context
    if available < n_targets:
        raise ValueError(f"{n_tokens} tokens hold only {max(available, 0)} positions with "
                         f"{max_context} tokens before them; {n_targets} were asked for")
    return max_context + np.linspace(0, available - 1, n_targets).round().astype(np.int64)


@torch.no_grad()
def context_nll(model: TransformerXL, data, targets: Sequence[int], context: int,
                batch_size: int = 32, seg_len: Optional[int] = None, mem_len: Optional[int] = None,
                clamp_len: Optional[int] = None) -> np.ndarray:
    """NLL (nats) of ``data[t]`` for each t in ``targets``, given exactly ``context``
    characters ``data[t - context : t]`` and nothing before them.

    Each target gets its own window; the model reads it and the prediction at the
    window's last position is scored. How the window is read:

    * absolute positions (``attn_type="abs"``, the vanilla model) or ``mem_len=0``:
      one segment of ``context`` tokens, positions 0 .. context-1 (beyond the
      training length for a long ``context``: the vanilla model then meets
      position encodings it never saw);
    * relative positions with memory: segments of ``seg_len`` (default: the model's
      tgt_len), each attending to a memory of ``mem_len`` (default: ``context``,
      which keeps the whole window visible and equals one causal pass over it).
      A smaller ``mem_len`` reads the window the way the model was trained, e.g.
      tgt_len 64 + mem_len 64; information then still reaches further back through
      the layers (Sec. 3.2).

    * any other model with ``TransformerXL``'s forward (``tasks.LSTMLM``): one pass over
      the window from an empty state.

    ``clamp_len`` (relative models) caps the distances given their own encoding. ``batch_size``: windows per
    forward pass; the numbers do not depend on it, the time does: 32 keeps this tutorial's models' tensors under
    the 32 MB above which glibc maps fresh memory for each one (page faults); on a CPU 512 takes twice as long.
    The model's lengths are restored afterwards. Returns float64, shape (len(targets),).
    """
    ids = as_ids(data).flatten()
    context, batch_size = (count(v, name, "context_nll") for name, v in (("context", context),
                                                                          ("batch_size", batch_size)))
    seg_len, = validation.counts("context_nll", 1, seg_len=seg_len)
    mem_len, clamp_len = validation.counts("context_nll", 0, mem_len=mem_len, clamp_len=clamp_len)
    t = as_ids(validation.integer_ids(targets, "context_nll: targets (positions in data)", dims=1))
    if len(t) == 0:
        return np.zeros(0)
    if int(t.min()) < context or int(t.max()) >= len(ids):
        raise ValueError(f"targets must lie in [context={context}, {len(ids) - 1}]; "
                         f"got {int(t.min())}..{int(t.max())}")
    device = next(model.parameters()).device
    xl = isinstance(model, TransformerXL)
    if xl:
        cfg = model.cfg
        one_pass = cfg.attn_type == "abs" or mem_len == 0 or mem_len is None or mem_len >= context
        L = context if one_pass else min(seg_len or cfg.tgt_len, context)
        first = context - L * (-(-context // L) - 1)  # a short first segment, full last ones
    out, offsets = [], torch.arange(-context, 0)
    for s in range(0, len(t), batch_size):
        tb = t[s:s + batch_size]
        windows = ids[tb[:, None] + offsets[None, :]].to(device)  # (B, context)
        if xl:
            *_, (_, last) = read_segments(model, windows, tgt_len=L, mem_len=0 if one_pass else mem_len,
                                          clamp_len=clamp_len, same_length=False, first_len=first)
        else:
            last = model(windows)
        logits = last.logits[:, -1].float()
        out.append(F.cross_entropy(logits, ids[tb].to(device), reduction="none").double().cpu())
    return torch.cat(out).numpy()


def loss_vs_context(model: TransformerXL, data, contexts: Sequence[int], targets: Sequence[int],
                    progress: bool = False, **kwargs) -> np.ndarray:
    """``context_nll`` for every context: array (len(contexts), len(targets)) in nats.

    Row k, column j is the loss on target ``targets[j]`` with ``contexts[k]``
    characters of context: the same targets in every row, so rows compare directly.
    ``progress``: a bar over the contexts (tqdm, on stderr). ``kwargs`` go to
    ``context_nll`` (batch_size, seg_len, mem_len, clamp_len).
    """
    contexts = _contexts(contexts, "loss_vs_context")
    quiet = {} if progress else {"disable": True}  # progress: tqdm's default, so TQDM_DISABLE=1 still silences it
    bar = tqdm(contexts, desc="contexts", leave=False, **quiet)
    return np.stack([context_nll(model, data, targets, c, **kwargs) for c in bar])


def extend_fixed_window(losses: np.ndarray, contexts: Sequence[int], all_contexts: Sequence[int]) -> np.ndarray:
    """Losses of a fixed-window model on a longer grid of contexts.

    ``losses`` has one row per context in ``contexts`` (the model's usable ones, up
    to its window, e.g. 1..64 for the vanilla model). A fixed-window model given more
    text simply reads its last ``max(contexts)`` characters, so the row for any
    longer context in ``all_contexts`` is a copy of the row at ``max(contexts)``.
    Contexts up to ``max(contexts)`` must have been measured.
    Returns (len(all_contexts), ...) float64.
    """
    contexts, all_contexts = _contexts(contexts, "extend_fixed_window"), _contexts(all_contexts, "extend_fixed_window")
    losses = np.asarray(losses, dtype=np.float64)
    if losses.ndim < 1 or len(losses) != len(contexts):
        raise ValueError(f"losses has {len(losses) if losses.ndim else 'no'} rows for {len(contexts)} contexts")
    longest = max(contexts)
    rows = []
    for c in all_contexts:
        if c in contexts:
            rows.append(losses[contexts.index(c)])
        elif c > longest:
            rows.append(losses[contexts.index(longest)])
        else:
            raise ValueError(f"context {c} was not measured and is not beyond the window {longest}")
    return np.stack(rows)


def doubling_gains(mean_losses: Sequence[float]) -> np.ndarray:
    """Loss(c_k) - Loss(c_{k+1}) for consecutive contexts: the gain of each step
    (each doubling when the contexts are powers of two). Positive = longer helps."""
    try:
        m = np.asarray(mean_losses, dtype=np.float64)
    except (TypeError, ValueError):
        m = None
    if m is None or m.ndim != 1 or len(m) < 2:
        raise ValueError(f"doubling_gains needs the mean loss at 2 or more contexts (a list of numbers), got "
                         f"{mean_losses!r}")
    return m[:-1] - m[1:]


def paired_gains(losses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean gain of each step and its standard error, from per-target losses.

    ``losses``: (n_contexts, n_targets), the same targets in every row. The gain of
    step k is the mean over targets of loss(c_k) - loss(c_{k+1}); as every target is
    scored at both contexts, its standard error is that of the paired differences,
    std / sqrt(n_targets), much smaller than the spread of the losses themselves.
    Returns (gains, standard errors), each of length n_contexts - 1 (``stats.paired_difference``
    with ``block=1``, row by row).
    """
    losses = np.asarray(losses, dtype=np.float64)
    if losses.ndim != 2 or losses.shape[1] < 2:
        raise ValueError(f"losses must be (n_contexts, n_targets >= 2), got shape {losses.shape}")
    paired = stats.paired_difference(losses[:-1], losses[1:], 1, bits=False)  # each target its own block
    return paired.mean, paired.se


def effective_context_length(contexts: Sequence[int], mean_losses: Sequence[float],
                             threshold: float) -> int:
    """One model's effective context length (in the spirit of Khandelwal et al., 2018).

    Walk up the contexts: while going from ``c`` to the next context lowers the
    loss by at least ``threshold`` (same unit as ``mean_losses``), move on; return
    the first ``c`` whose next step gains less. If every step gains enough, the
    largest context is returned (the true value may be longer: a lower bound).
    """
    contexts, threshold = _contexts(contexts, "effective_context_length"), _number(threshold, "threshold",
                                                                                   "effective_context_length")
    if not hasattr(mean_losses, "__len__") or len(contexts) != len(mean_losses):
        raise ValueError("contexts and mean_losses must be non-empty and of equal length")
    if any(b <= a for a, b in zip(contexts, contexts[1:])):
        raise ValueError(f"contexts must increase, got {contexts}")
    gains = doubling_gains(mean_losses)
    for k, gain in enumerate(gains):
        if gain < threshold:
            return contexts[k]
    return contexts[-1]


def relative_gain(losses: Mapping[str, np.ndarray], short: int, long: int, r: float = 1.0) -> dict[str, float]:
    """The paper's relative gain g_i(c, c') for every model of a group (Appendix C).

    ``losses[name]`` is (n_contexts, n_targets) per-token NLL in nats, all models on
    the same targets; ``short``/``long`` are ROW indices of c and c' (c <= c').

    * baseline  b(c, t) = min over models of l_i(c, t): the best short-context loss;
    * T = the ceil(r * n) targets with the largest b(c, t) (the hard ones);
    * relative loss  f_i(c, c') = mean over T of min(b(c, t), l_i(c', t)):
      only improvements over the shared baseline count;
    * relative gain  g_i(c, c') = (exp f_i(c, c) - exp f_i(c, c')) / exp f_i(c, c),
      a relative perplexity reduction, 0 when the long context helps no target.
    """
    if isinstance(r, bool) or not isinstance(r, (int, float, np.number)) or not 0.0 < r <= 1.0:
        raise ValueError(f"r must be in (0, 1], got {r}")
    if not losses or not hasattr(losses, "keys"):
        raise ValueError("losses must hold at least one model")
    names = list(losses)
    stack = _stacked(losses, "relative_gain")  # (models, ctx, tgt)
    short, long = (validation.index(v, name, stack.shape[1], "relative_gain", "rows (contexts) in each losses[name]")
                   for name, v in (("short", short), ("long", long)))
    if short > long:
        raise ValueError(f"short row {short} must not come after long row {long}")
    base = stack[:, short].min(axis=0)  # b(c, t)
    k = max(1, math.ceil(r * base.size))
    hard = np.argsort(-base, kind="stable")[:k]
    ref = math.exp(base[hard].mean())  # exp f_i(c, c): the same for every model
    gains = {}
    for i, name in enumerate(names):
        f = np.minimum(base[hard], stack[i, long, hard]).mean()
        gains[name] = (ref - math.exp(f)) / ref
    return gains


def _stacked(losses: Mapping[str, np.ndarray], caller: str) -> np.ndarray:
    """The models' (n_contexts, n_targets) losses stacked (models, n_contexts, n_targets), or a ValueError
    naming the model whose losses have another shape (numpy would say "all input arrays must have the same shape")."""
    arrays = {name: np.asarray(l, dtype=np.float64) for name, l in losses.items()}
    first = next(iter(arrays.values()))
    for name, a in arrays.items():
        if a.ndim != 2 or 0 in a.shape or a.shape != first.shape:
            raise ValueError(f"{caller}: losses[{name!r}] must be (n_contexts, n_targets) like every model's, the same "
                             f"targets at the same contexts; got {a.shape} (the first: {first.shape})")
    return np.stack(list(arrays.values()))


def relative_effective_context_length(losses: Mapping[str, np.ndarray], contexts: Sequence[int],
                                      threshold: float = 0.01, r: float = 1.0) -> dict[str, int]:
    """A simplified Relative Effective Context Length (the paper's RECL, Appendix C).

    For each model: start at c = contexts[0], c' = the next context; while the
    relative gain g_i(c, c') (``relative_gain``, with the baseline shared by the
    whole group) is at least ``threshold``, step up (c = c'); return the first c
    where it is not. The largest context is returned when every step gains enough
    (then the value is only a lower bound).

    What is simplified: the paper steps c' = c + Delta with a fixed Delta (100 words on
    WikiText-103) and threshold 0.01; here c' is simply the next context of the grid
    (powers of two: each step doubles the context), and ``threshold`` is a parameter
    to choose for characters. The paper's model group also held several models
    trained for the comparison; here it is whatever ``losses`` holds.
    """
    contexts = _contexts(contexts, "relative_effective_context_length")
    threshold = _number(threshold, "threshold", "relative_effective_context_length")
    validation.nonempty(losses, "losses", "relative_effective_context_length",
                        "{model name: its (n_contexts, n_targets) losses}, the same targets for every model")
    if any(b <= a for a, b in zip(contexts, contexts[1:])):
        raise ValueError(f"contexts must increase, got {contexts}")
    for name, l in losses.items():
        if np.shape(l)[0] != len(contexts):
            raise ValueError(f"losses[{name!r}] has {np.shape(l)[0]} rows for {len(contexts)} contexts")
    result = {}
    for name in losses:
        k = 0
        while k + 1 < len(contexts) and relative_gain(losses, k, k + 1, r)[name] >= threshold:
            k += 1
        result[name] = contexts[k]
    return result
