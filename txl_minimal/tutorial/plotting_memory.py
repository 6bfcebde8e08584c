"""Figures of attention over memory (notebooks 05, 09): attention by distance, one head's map with its zoom,
values by token, token pairs, one query's attention split by term. Import them from ``plotting``."""
from __future__ import annotations

from typing import Optional
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from .. import validation
from ..validation import count
from .figure_style import SMALL, TERM_TITLES, WIDTH, _array, _np, _panels, heatmap

# ----------------------------------------------------------------------------- attention over memory

def _prob_norm(scale: str, a: np.ndarray):
    """A colour norm for attention probabilities: "linear", "sqrt" or "log"."""
    from matplotlib.colors import LogNorm, Normalize, PowerNorm

    finite = a[np.isfinite(a)]
    vmax = float(finite.max()) if finite.size else 1.0
    if scale == "log":
        pos = finite[finite > 0]
        vmin = max(float(pos.min()) if pos.size else vmax * 1e-4, vmax * 1e-4)
        return LogNorm(vmin=vmin, vmax=vmax)
    if scale == "sqrt":
        return PowerNorm(gamma=0.5, vmin=0.0, vmax=vmax)
    if scale == "linear":
        return Normalize(vmin=0.0, vmax=vmax)
    raise ValueError(f"scale must be 'linear', 'sqrt' or 'log', got {scale!r}")


def plot_attention_by_distance(profiles: Mapping[str, object], seg_len: Optional[int] = None,
                               train_dist: Optional[int] = None, scale: str = "log",
                               suptitle: Optional[str] = None, shared_scale: bool = True) -> Figure:
    """The paper's heads x distance map, one panel per (title, profile) item.

    A profile is (n_layer, n_head, D): the average attention a head puts on the key
    k tokens back (``attention_maps.attention_by_distance``). Rows are "L n H h": layer n counted
    from 1 as in the paper (``model.layers[n - 1]``), head h from 0; layers separated by white lines;
    ``seg_len`` marks the distance beyond which every key is in the memory, ``train_dist`` the longest
    distance seen in training.
    ``scale="log"`` (default) spreads the small far-away weights over the colours;
    ``shared_scale`` gives all panels one colour scale, so they can be compared.
    """
    caller = "plot_attention_by_distance"
    _panels(profiles, "profiles", caller, "{'title': attention_maps.attention_by_distance(seg.attn)}")
    arrays = {title: _array(p, f"profiles[{title!r}]", caller, (3,), "(n_layer, n_head, D)")
              for title, p in profiles.items()}
    n = len(profiles)
    first = next(iter(arrays.values()))
    n_layer, n_head = first.shape[:2]
    if any(a.shape[:2] != (n_layer, n_head) for a in arrays.values()):
        raise ValueError(f"{caller}: every profile must have the first one's (n_layer, n_head) = {(n_layer, n_head)}, "
                         f"got {[a.shape for a in arrays.values()]}")
    rows = n_layer * n_head
    mats = {title: a.reshape(rows, -1) for title, a in arrays.items()}
    everything = np.concatenate([m.ravel() for m in mats.values()])
    marks = seg_len is not None or train_dist is not None
    legend_h = 0.45 if marks else 0.0  # inches below the panels for the legend: it covers no data
    height = 0.9 + (0.2 if n == 1 else 0.15) * rows * n + 0.6 * (n - 1) + legend_h
    fig, axes = plt.subplots(n, 1, figsize=(WIDTH, height), squeeze=False)
    for ax, (title, a) in zip(axes[:, 0], mats.items()):
        D = a.shape[1]
        heatmap(ax, a, title, xlabel="distance k = i - j to the key (characters)", ylabel="layer / head",
                cmap="magma",
                cbar_label=f"mean attention ({scale} scale{', shared' if shared_scale and n > 1 else ''})",
                norm=_prob_norm(scale, everything if shared_scale else a),
                extent=(-0.5, D - 0.5, rows - 0.5, -0.5))
        ax.set_yticks(np.arange(rows), [f"L{l + 1} H{h}" for l in range(n_layer) for h in range(n_head)],
                      fontsize=SMALL)
        for b in range(1, n_layer):
            ax.axhline(b * n_head - 0.5, color="white", lw=1)
        if seg_len is not None:
            ax.axvline(seg_len - 0.5, color="cyan", ls="--", lw=1.2,
                       label=f"k = {seg_len} = segment length: only memory beyond")
        if train_dist is not None:
            ax.axvline(train_dist + 0.5, color="lime", ls=":", lw=1.5,
                       label=f"k = {train_dist}: longest distance in training")
    if marks:
        fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=SMALL,
                   frameon=False)
    if suptitle:
        fig.suptitle(suptitle)
    fig.tight_layout(rect=(0, legend_h / height, 1, 1))
    return fig


def plot_head_attention(attn, key_labels: Sequence[str], mlen: int, title: str,
                        queries: slice, keys: slice, mask=None, scale: str = "log",
                        zoom_scale: str = "linear") -> Figure:
    """One head's attention over [memory o segment] and a zoom with the characters.

    attn: (qlen, klen) probabilities; key_labels: one label per key (the queries are
    the last qlen keys); ``queries``/``keys`` select the zoomed block; ``mask`` cells
    (True = hidden) are drawn grey. Left: the whole matrix (colour ``scale``), the
    memory/segment border and the zoomed block outlined; right: the block with
    characters as tick labels (colour ``zoom_scale``), the border drawn again where it crosses it.
    """
    caller = "plot_head_attention"
    a = _array(attn, "attn", caller, shape="(qlen, klen) of one head").copy()
    qlen, klen = a.shape
    if mask is not None:
        a[_array(mask, "mask", caller, shape=f"(qlen, klen) = {a.shape}").astype(bool)] = np.nan
    mlen = count(mlen, "mlen", caller, 0)
    for name, part in (("queries", queries), ("keys", keys)):
        if not isinstance(part, slice) or len(range(qlen if name == "queries" else klen)[part]) == 0:
            raise ValueError(f"{caller}: {name} must be a slice that selects some {name} (e.g. slice(0, 16)), got "
                             f"{part!r}")
    if mlen != klen - qlen or len(key_labels) < klen:  # (the queries are the last qlen keys, labelled as keys)
        raise ValueError(f"{caller}: attn {a.shape} has mlen = klen - qlen = {klen - qlen} and needs {klen} "
                         f"key_labels; got mlen={mlen} and {len(key_labels)} labels. Fix: seg.mlen, "
                         "char_labels(seg.key_ids)")
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(WIDTH, 4.2), gridspec_kw=dict(width_ratios=[1.25, 1]))
    heatmap(ax, a, "whole segment: queries x [memory | segment]",
            xlabel=f"key position j  (memory: j < {mlen} | segment)", ylabel="query position i",
            cmap="magma", cbar_label=f"attention ({scale} scale)", norm=_prob_norm(scale, a))
    ax.axvline(mlen - 0.5, color="cyan", lw=1.2)
    q0, q1, _ = queries.indices(qlen)
    k0, k1, _ = keys.indices(klen)
    ax.add_patch(plt.Rectangle((k0 - 0.5, q0 - 0.5), k1 - k0, q1 - q0, fill=False, edgecolor="cyan", lw=1.2))
    z = a[q0:q1, k0:k1]
    heatmap(ax2, z, f"zoom: keys {k0}-{k1 - 1} x queries {q0}-{q1 - 1}", xlabel="key character",
            ylabel="query character", cmap="magma", cbar_label=f"attention ({zoom_scale} scale)",
            norm=_prob_norm(zoom_scale, z), extent=(k0 - 0.5, k1 - 0.5, q1 - 0.5, q0 - 0.5))
    ax2.set_xticks(np.arange(k0, k1), list(key_labels[k0:k1]), fontsize=SMALL, family="monospace")
    ax2.set_yticks(np.arange(q0, q1), list(key_labels[mlen + q0:mlen + q1]), fontsize=SMALL, family="monospace")
    ax2.tick_params(length=0)
    if k0 < mlen < k1:  # the zoom spans the memory's end: the same border as on the left
        ax2.axvline(mlen - 0.5, color="cyan", lw=1.2)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_by_token(values: Mapping[str, object], labels: Sequence[str], ylabel: str, title: str,
                  ref: Optional[float] = None, ref_label: str = "") -> Figure:
    """Grouped bars: one group per token (``labels``), one bar per (name, values) item;
    NaN bars (token too rare) are left out. ``ref`` draws a dashed horizontal line."""
    caller = "plot_by_token"
    _panels(values, "values", caller, "{'name': one value per token}")
    validation.nonempty(labels, "labels", caller, "one label per token, e.g. attention_maps.char_labels(range(27))")
    values = {name: _array(v, f"values[{name!r}]", caller, (1,), f"({len(labels)},): one per label")
              for name, v in values.items()}
    if any(len(v) != len(labels) for v in values.values()):
        raise ValueError(f"{caller}: every values[name] must hold one value per label ({len(labels)}), got "
                         f"{[len(v) for v in values.values()]}")
    fig, ax = plt.subplots(figsize=(WIDTH, 3.3))
    n = len(values)
    width = 0.8 / n
    x = np.arange(len(labels))
    for k, (name, v) in enumerate(values.items()):
        ax.bar(x - 0.4 + width * (k + 0.5), np.nan_to_num(_np(v), nan=0.0), width, label=name)
    if ref is not None:
        ax.axhline(ref, color="grey", ls="--", lw=1, label=ref_label or None)
    ax.set_xticks(x, list(labels), family="monospace")
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_xlabel("character read by the query")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    finite = [float(np.nanmax(v)) for v in values.values() if np.isfinite(v).any()] + [ref or 0.0]
    top = max(finite) if max(finite) > 0 else 1.0  # every bar NaN (each token too rare): an empty frame, not NaN
    ax.set_ylim(0, 1.3 * top)  # room for the legend above the bars
    ax.legend(fontsize=SMALL, ncol=n + (ref is not None), loc="upper center")
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig


def plot_token_pairs(mats: Mapping[str, object], labels: Sequence[str], suptitle: str,
                     cbar_label: str = "share of the query's attention") -> Figure:
    """Query token x key token heatmaps, one panel per (title, (V, V) matrix), e.g.
    ``attention_maps.attention_by_token_pair``; NaN rows (rare tokens) grey. All panels share
    one colour scale (0 to the largest value of any panel), so colours compare across panels."""
    caller = "plot_token_pairs"
    _panels(mats, "mats", caller, "{'title': attention_maps.attention_by_token_pair(...)[0]}")
    V = len(labels)
    mats = {title: _array(m, f"mats[{title!r}]", caller, shape=f"({V}, {V}): one row and column per label")
            for title, m in mats.items()}
    if V == 0 or any(m.shape != (V, V) for m in mats.values()):
        raise ValueError(f"{caller}: every matrix must be (V, V) with V = len(labels) = {V}, got "
                         f"{[m.shape for m in mats.values()]}")
    n = len(mats)
    ncols = min(n, 2)  # two to a row: 27 x 27 cells need the room to show their letters
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(WIDTH, 4.6 * nrows), squeeze=False)
    top = max([float(np.nanmax(m)) for m in mats.values() if np.isfinite(m).any()] or [1.0])
    for k, (ax, (title, m)) in enumerate(zip(axes.flat, mats.items())):
        a = _np(m)
        heatmap(ax, a, title, xlabel="key character", ylabel="query character" if k % ncols == 0 else "",
                cmap="magma", cbar_label=f"{cbar_label} (one scale)", vmin=0.0, vmax=top)
        ticks = np.arange(len(labels))
        ax.set_xticks(ticks, list(labels), fontsize=SMALL, family="monospace")
        ax.set_yticks(ticks, list(labels), fontsize=SMALL, family="monospace")
        ax.tick_params(length=0)
    for ax in list(axes.flat)[n:]:
        ax.remove()
    fig.suptitle(suptitle)
    fig.tight_layout()
    return fig


def plot_query_attention(parts: Mapping[str, object], key_labels: Sequence[str], title: str,
                         window: int = 64) -> Figure:
    """One query's attention (top) and its score terms (a)-(d) (bottom) over the last ``window``
    keys it may see, characters on the axis; ``parts``: ``attention_maps.query_breakdown``."""
    caller = "plot_query_attention"
    validation.has_keys(parts, ("p", "distance", "a"), "parts", caller, "attention_maps.query_breakdown(seg, layer, "
                        "head, query)")
    window = count(window, "window", caller)
    p, dist = _np(parts["p"]), _np(parts["distance"])
    if not hasattr(key_labels, "__len__") or len(key_labels) != len(p):
        raise ValueError(f"{caller}: key_labels must hold one label per key ({len(p)}), got "
                         f"{validation.a_kind(key_labels)}. Fix: attention_maps.char_labels(seg.key_ids)")
    keys = np.flatnonzero(~np.isnan(_np(parts["a"])))[-window:]  # visible keys, nearest last
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(WIDTH, 5.2), sharex=True)
    ax.bar(np.arange(len(keys)), p[keys], color="C0")
    ax.set_ylabel("attention probability")
    for name, color in zip("abcd", ("C0", "C1", "C2", "C3")):
        if name in parts:
            bx.plot(np.arange(len(keys)), _np(parts[name])[keys], "o-", ms=3, lw=1, color=color,
                    label=TERM_TITLES[name])
    bx.axhline(0, color="black", lw=0.6)
    bx.set_ylabel("score term (unscaled)")
    # every key's character; its distance back under every 8th (64 numbers would not fit)
    bx.set_xticks(np.arange(len(keys)), [f"{key_labels[k]}\n{int(dist[k]) if dist[k] % 8 == 0 else ''}"
                                         for k in keys], fontsize=SMALL, family="monospace")
    bx.set_xlabel("key: character, and its distance back (every 8th)")
    for a in (ax, bx):
        a.grid(alpha=0.3)
    fig.suptitle(title)
    fig.legend(*bx.get_legend_handles_labels(), loc="lower center", ncol=4, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))  # the legend below the axes, clear of both panels
    return fig
