"""Figures for the tutorial notebooks (any checkpoint).

Every function draws into a new figure sized for a notebook, gives it titles and
axis labels, and returns the ``Figure``; the caller decides when to ``plt.show()``.
Matrices with a labelled colour bar are seaborn heatmaps (seaborn comes with
``pip install "txl-minimal[notebooks]"``); the attention maps, which need log colour
scales and axes in tokens, and the curves and bars stay plain matplotlib.
"""
from __future__ import annotations

from typing import Optional
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from .. import validation
from ..validation import count, index
from .analysis import rel_shift_stages, segment_band_mask
from .figure_style import (MASKED, RECALL_DODGE, SHOWN_PX, SMALL, TERM_TITLES, WIDTH, _array, _np,  # noqa: F401
                           _check_figure, _panels, _titles, check_readable, heatmap, readability_problems,
                           sns_heatmap, use_readable_style)  # (also plotting's: notebooks import them from here)
from .plotting_memory import (_prob_norm, plot_attention_by_distance, plot_by_token,  # noqa: F401 (its figures)
                              plot_head_attention, plot_query_attention, plot_token_pairs)


def plot_heatmaps(mats: Mapping[str, object], suptitle: str, xlabel: str = "key position j",
                  ylabel: str = "query position i", cbar_label: Optional[str] = None,
                  center: bool = False, height: float = 3.5, ncols: Optional[int] = None) -> Figure:
    """Heatmaps, one per (title, matrix) item, ``ncols`` to a row (all in one row if None);
    ``height`` is that of one row."""
    _panels(mats, "mats", "plot_heatmaps", "{'title': matrix}")
    mats = {title: _array(m, f"mats[{title!r}]", "plot_heatmaps") for title, m in mats.items()}
    ncols = len(mats) if ncols is None else count(ncols, "ncols", "plot_heatmaps")
    if isinstance(height, bool) or not isinstance(height, (int, float)) or not 0 < height < 100:
        raise ValueError(f"plot_heatmaps: height must be a number of inches in (0, 100), got {height!r}")
    nrows = -(-len(mats) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(WIDTH, height * nrows), squeeze=False)
    for ax, (title, m) in zip(axes.flat, mats.items()):
        sns_heatmap(ax, m, title, xlabel, ylabel if ax in axes[:, 0] else "", cbar_label=cbar_label,
                    center=center, xticks=max(4, 8 // ncols))
    fig.suptitle(suptitle)
    fig.tight_layout()
    return fig




def plot_score_terms(terms: Mapping[str, object], suptitle: str) -> Figure:
    """The four terms (a)-(d) of one head as four heatmaps (unscaled scores)."""
    _panels(terms, "terms", "plot_score_terms", "{'a': term_a, 'b': term_b, ...}")
    mats = {TERM_TITLES.get(k, k): v for k, v in terms.items()}
    return plot_heatmaps(mats, suptitle, cbar_label="score (unscaled)", center=True, height=4.2, ncols=2)


def plot_sinusoids(R, title: str = "Sinusoid encodings $R_k$ (fixed, not learned)") -> Figure:
    """The table R (one row per distance k, sines then cosines)."""
    R = _array(R, "R", "plot_sinusoids", shape="(distances, d_model)")
    fig, ax = plt.subplots(figsize=(WIDTH, 3.5))
    sns_heatmap(ax, R, title, xlabel="dimension (sines | cosines)", ylabel="distance k = i - j",
                cbar_label="value", center=True)
    fig.tight_layout()
    return fig


def plot_position_bias(bias, layer: int, train_klen: Optional[int] = None) -> Figure:
    """Term (d), v^T W_k,R R_k, of every head against the distance k (one line per head);
    ``layer`` is the layer's number in the title (the paper's, from 1: ``model.layers[layer - 1]``),
    ``train_klen`` marks the longest distance seen in training (mem_len + tgt_len - 1)."""
    b = _array(bias, "bias", "plot_position_bias", shape="(n_head, distances)")
    train_klen, = validation.counts("plot_position_bias", 0, train_klen=train_klen)
    fig, ax = plt.subplots(figsize=(WIDTH, 3.5))
    for h, row in enumerate(b):
        ax.plot(np.arange(len(row)), row, label=f"head {h}")
    if train_klen is not None:
        ax.axvline(train_klen, color="grey", ls="--", lw=1, label="longest training distance")
    ax.set_xlabel("distance k = i - j (characters)")
    ax.set_ylabel("term (d), unscaled score")
    ax.set_title(f"Layer {layer}: global position bias $v^\\top W_{{k,R}} R_k$ of each head")
    ax.legend(fontsize=SMALL, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- rel-shift

def _code_matrix(qlen: int, klen: int) -> torch.Tensor:
    """x[i, c] = code of "query i scored against R_{klen-1-c}": 100 (i+1) + distance."""
    i = torch.arange(qlen)[:, None]
    k = klen - 1 - torch.arange(klen)[None, :]
    return (100 * (i + 1) + k).double()


def _decode(code: float) -> tuple[Optional[int], Optional[int]]:
    code = int(round(code))
    if code == 0:
        return None, None
    return code // 100 - 1, code % 100


CODE_PT = 13  # points: the q_i R_k labels of plot_rel_shift (their subscripts are drawn ~30% smaller)
CODE_CELL = 0.56  # inches: a cell of plot_rel_shift's tables, wide enough for a label of CODE_PT


def _ink(face) -> str:
    """Black or white: whichever contrasts more with the colour ``face`` (WCAG's relative luminance)."""
    lum = _luminance(face)
    return "black" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "white"


def _luminance(color) -> float:
    """WCAG's relative luminance of a matplotlib colour: 0 (black) to 1 (white)."""
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(color)]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _draw_codes(ax: Axes, m: np.ndarray, title: str, valid: Optional[np.ndarray] = None,
                klen: int = 10, struck_rows: Sequence[int] = (), xlabel: str = "column",
                ylabel: str = "row") -> None:
    """A table: each cell labelled q_i R_k (query i, distance k) and coloured by k (light, for a label in the
    ink that contrasts more with it); pads white; invalid grey."""
    rows, cols = m.shape
    cmap = plt.get_cmap("viridis")
    for a in range(rows):
        for b in range(cols):
            i, k = _decode(m[a, b])
            if i is None:
                face, text = "white", "0"
            else:  # viridis by k, halfway to white: black text reads on every cell
                face = 0.5 + 0.5 * np.array(cmap(0.15 + 0.7 * k / max(1, klen - 1))[:3])
                text = f"$q_{i}R_{k}$"
            bad = valid is not None and not valid[a, b]
            if bad:
                face = "#d0d0d0"
            ax.add_patch(plt.Rectangle((b, a), 1, 1, facecolor=face, edgecolor="black", lw=0.6,
                                       hatch="//" if bad else None))
            ax.text(b + 0.5, a + 0.5, text, ha="center", va="center", fontsize=CODE_PT, color=_ink(face),
                    gid="code")
    for a in struck_rows:
        ax.plot([0, cols], [a + 0.5, a + 0.5], color="red", lw=2)
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_xticks(np.arange(cols) + 0.5, [str(c) for c in range(cols)], fontsize=SMALL)
    ax.set_yticks(np.arange(rows) + 0.5, [str(c) for c in range(rows)], fontsize=SMALL)
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=SMALL + 1)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def plot_rel_shift(qlen: int = 4, mlen: int = 2) -> tuple[Figure, dict[str, torch.Tensor]]:
    """The pad -> view -> slice of ``rel_shift`` on a labelled (qlen, qlen+mlen) matrix.

    Cell labels read "q_i R_k": query i scored against the encoding of distance
    k. Two stages a row, cells large enough for labels that stay readable at the
    width GitHub shows a figure. Returns the figure and the stages (see
    ``analysis.rel_shift_stages``), whose entries are codes 100 (i+1) + k (0 = padding).
    """
    qlen, mlen = count(qlen, "qlen", "plot_rel_shift"), count(mlen, "mlen", "plot_rel_shift", 0)
    klen = qlen + mlen
    if klen > 99:
        raise ValueError("plot_rel_shift is for small matrices (klen < 100)")
    st = rel_shift_stages(_code_matrix(qlen, klen))
    causal = (torch.arange(klen)[None, :] <= torch.arange(qlen)[:, None] + mlen).numpy()
    left, gap, top, below, title = 0.65, 0.5, 0.45, 0.65, 0.6  # inches: tick labels and axis label, ...
    cell = min(CODE_CELL, (WIDTH - 2 * left - gap - 0.2) / (2 * klen + 1))  # the wider row (stages 1, 2) fits
    height = top + 2 * (title + below) + 0.25 + cell * (qlen + klen + 1)
    fig = plt.figure(figsize=(WIDTH, height))
    rows = [[(klen, qlen), (klen + 1, qlen)], [(qlen, klen + 1), (klen, qlen)]]  # (columns, rows) of each stage
    axes, y = [], height - top
    for row in rows:
        tallest = max(r for _, r in row)
        y -= title + tallest * cell
        x = (WIDTH - sum(left + c * cell for c, _ in row) - gap) / 2
        for c, r in row:
            axes.append(fig.add_axes(((x + left) / WIDTH, (y + (tallest - r) * cell) / height,
                                      c * cell / WIDTH, r * cell / height)))
            x += left + c * cell + gap
        y -= below
    _draw_codes(axes[0], _np(st["input"]), "1. $(q_i+v)^\\top W_{k,R} R$: column c holds $R_{klen-1-c}$",
                klen=klen, xlabel="column c", ylabel="query i")
    _draw_codes(axes[1], _np(st["padded"]), "2. pad one zero column", klen=klen,
                xlabel="column", ylabel="query i")
    _draw_codes(axes[2], _np(st["viewed"]), f"3. view as ({klen + 1}, {qlen}),\ndrop row 0",
                klen=klen, struck_rows=[0], xlabel="column", ylabel="row")
    _draw_codes(axes[3], _np(st["shifted"]), "4. view as (qlen, klen):\ncell (i, j) holds $R_{mlen+i-j}$",
                valid=causal, klen=klen, xlabel="key j", ylabel="query i")
    fig.suptitle(f"rel_shift, qlen={qlen}, mlen={mlen}: hatched = future keys (masked anyway)",
                 y=1 - 0.12 / height, va="top")
    return fig, st


def zoom_panel(main: Axes, zoom: Axes, title: str, x_range: tuple[float, float],
               ylim: Optional[tuple[float, float]] = None, lines: Optional[Sequence] = None) -> Axes:
    """Redraw the curves of ``main`` (or ``lines``, some of them) in ``zoom``, keeping the points whose x
    lies in ``x_range``: the same colours, markers and axis scales, and ``main``'s axis labels, since a
    zoom is read on its own and its y scale is not ``main``'s. ``ylim``: the zoom's y range (default:
    the kept points, with margins).

    Returns:
        ``zoom``, titled ``title``, with a light grid.

    Examples:
        >>> fig, (ax, zx) = plt.subplots(1, 2)
        >>> _ = ax.plot([1, 2, 4, 8], [5.0, 2.0, 1.9, 1.85], "o-")
        >>> _ = ax.set_ylabel("bits per character")
        >>> zoom_panel(ax, zx, "zoom: 2 and more", (2, 8)).get_ylabel()
        'bits per character'
        >>> plt.close(fig)
    """
    lo, hi = x_range
    if not lo < hi:
        raise ValueError(f"zoom_panel: x_range must be (low, high) with low < high, got {x_range!r}")
    curves = [line for line in main.get_lines() if line.get_transform() is main.transData] if lines is None \
        else list(lines)
    kept = 0
    for line in curves:
        x, y = np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)
        inside = (x >= lo) & (x <= hi)
        kept += int(inside.sum())
        zoom.plot(x[inside], y[inside], color=line.get_color(), ls=line.get_linestyle(), lw=line.get_linewidth(),
                  marker=line.get_marker(), ms=line.get_markersize(), alpha=line.get_alpha())
    if not kept:
        raise ValueError(f"zoom_panel: no point of the curves lies in x_range {x_range!r}: widen it")
    for axis, set_scale in ((main.xaxis, zoom.set_xscale), (main.yaxis, zoom.set_yscale)):
        scale = axis.get_scale()
        set_scale(scale, **({"base": axis.get_transform().base} if scale == "log" else {}))
    zoom.set_xlabel(main.get_xlabel())
    zoom.set_ylabel(main.get_ylabel())
    if ylim is not None:
        zoom.set_ylim(*ylim)
    zoom.set_title(title)
    zoom.grid(alpha=0.3)
    return zoom


# ----------------------------------------------------------------------------- recurrence

def plot_dependency(influence: Mapping[int, object], position: int, seg_len: int,
                    spans: Mapping[int, int], mem_len: Optional[int] = None) -> Figure:
    """Left: for each depth N, which input positions influence output ``position``
    (log10 gradient norm; grey = exactly 0). Right: the span against N with the
    line N x mem_len + (position in segment)."""
    caller = "plot_dependency"
    _panels(influence, "influence", caller, "{layers N: input_influence(...) of that model}")
    seg_len = count(seg_len, "seg_len", caller)
    mem_len = seg_len if mem_len is None else count(mem_len, "mem_len", caller, 0)
    depths = sorted(influence)
    n = len(_array(influence[depths[0]], f"influence[{depths[0]!r}]", caller, (1,), "(N,)"))
    if any(len(_array(influence[d], f"influence[{d!r}]", caller, (1,), "(N,)")) != n for d in depths):
        raise ValueError(f"{caller}: every influence[N] must cover the same N positions (input_influence of one text)")
    position = index(position, "position", n, caller, "positions in each influence")
    validation.has_keys(spans, depths, "spans", caller, "{layers N: influence_span(influence[N], position)} for "
                        "every N of influence")
    img = np.full((len(depths), n), np.nan)
    for row, d in enumerate(depths):
        g = _np(influence[d])
        img[row, g > 0] = np.log10(g[g > 0])
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(WIDTH, 3.5), gridspec_kw=dict(width_ratios=[2.2, 1]))
    sns_heatmap(ax, img, f"Which inputs reach output {position} (grey: exactly 0)",
                xlabel="input position s", ylabel="layers N", cbar_label="log10 |d logit / d E_s|",
                yticklabels=depths)
    for b in range(0, n + 1, seg_len):  # segment borders; cell s spans [s, s + 1]
        ax.axvline(b, color="white", lw=0.8)
    ax.axvline(position + 0.5, color="red", lw=1.2, ls="--")
    p = position % seg_len
    ds = np.array(depths)
    ax2.plot(ds, [spans[d] for d in depths], "o", label="measured span", zorder=3)
    ax2.plot(ds, ds * mem_len + p, "-", color="grey", label=f"N·{mem_len} + {p}")
    ax2.set_title(f"Dependency length: N·M + i (M = {mem_len})", fontsize=SMALL)  # O(N·L) if M = L
    ax2.set_xlabel("layers N")
    ax2.set_ylabel("span (tokens back)")
    ax2.legend(fontsize=SMALL)
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_bpc_vs_memory(mem_lens: Sequence[int], bpcs: Sequence[float], train_mem_len: int,
                       title: str, references: Optional[Mapping[str, float]] = None) -> Figure:
    """Evaluation bpc against the evaluation memory length, one evenly spaced tick per
    length (training memory marked); ``references`` adds labelled horizontal lines
    (e.g. a baseline's bpc)."""
    validation.nonempty(mem_lens, "mem_lens", "plot_bpc_vs_memory", "the evaluation memory lengths, e.g. [0, 64, 256]")
    if not hasattr(bpcs, "__len__") or len(bpcs) != len(mem_lens):
        raise ValueError(f"plot_bpc_vs_memory: bpcs must hold one bpc per memory length ({len(mem_lens)}), got "
                         f"{bpcs!r}. Fix: analysis.bpc_vs_memory(model, data, mem_lens)")
    fig, ax = plt.subplots(figsize=(WIDTH, 3.5))
    xs = np.arange(len(mem_lens))
    ax.plot(xs, bpcs, "o-", label="Transformer-XL")
    for k, (label, value) in enumerate((references or {}).items()):
        ax.axhline(value, color=f"C{k + 1}", ls=":", lw=1.2, label=f"{label}: {value:.3f}")
    for x, b in zip(xs, bpcs):
        ax.annotate(f"{b:.3f}", (x, b), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=SMALL)
    if train_mem_len in mem_lens:
        ax.axvline(list(mem_lens).index(train_mem_len), color="grey", ls="--", lw=1,
                   label=f"training mem_len = {train_mem_len}")
    ax.set_xticks(xs, [str(m) for m in mem_lens])
    ax.set_xlabel("evaluation memory length M (characters)")
    ax.set_ylabel("bits per character")
    ax.set_title(title)
    ax.legend(fontsize=SMALL)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_recall_by_gap(curves: Mapping[str, Mapping[str, float]], chance: float, marks: Mapping[str, int],
                       title: str, styles: Optional[Mapping[str, dict]] = None) -> Figure:
    """Accuracy on the recall task's answers against their gap, one curve per model.

    ``curves``: label -> {"lo-hi": accuracy} (tasks.recall_accuracy), drawn at each bucket's
    upper end on a log axis, each curve nudged sideways a little (``RECALL_DODGE``) so that equal
    accuracies (several models at 1.0) stay visible side by side, and the y axis runs past 0 and 1
    so that no point lies on the frame; a dotted line at ``chance``; dashed verticals at ``marks``
    (e.g. {"L": 32, "L + M": 128}), named above the frame; ``styles``: label -> extra ``plot`` keywords.
    """
    _panels(curves, "curves", "plot_recall_by_gap", "{label: tasks.recall_accuracy(...)}")
    for label, acc in curves.items():
        validation.nonempty(acc, f"curves[{label!r}]", "plot_recall_by_gap", "{'lo-hi': accuracy} buckets")
        bad = [key for key in acc if not (isinstance(key, str) and key.count("-") == 1
                                          and key.split("-")[1].isdigit())]
        if bad:
            raise ValueError(f"plot_recall_by_gap: curves[{label!r}] must map buckets 'lo-hi' (e.g. '1-32') to "
                             f"accuracies, got the key {bad[0]!r}. Fix: tasks.recall_accuracy(...)")
    fig, ax = plt.subplots(figsize=(WIDTH, 4))
    for k, (label, acc) in enumerate(curves.items()):
        style = {"marker": "o", "ls": "-", **(styles or {}).get(label, {})}
        nudge = 2.0 ** (RECALL_DODGE * (k - (len(curves) - 1) / 2))  # a log axis: a factor, the same at every gap
        ax.plot([int(key.split("-")[1]) * nudge for key in acc], list(acc.values()), label=label, **style)
    ax.axhline(chance, color="grey", ls=":", lw=1.2, label=f"chance = {chance:.3f}")
    for name, x in marks.items():
        ax.axvline(x, color="k", ls="--", lw=0.8)
        ax.annotate(name, (x, 1.0), xycoords=("data", "axes fraction"), xytext=(0, 2), textcoords="offset points",
                    ha="center", va="bottom", fontsize=SMALL, annotation_clip=False)
    ax.set_xscale("log", base=2)
    ticks = sorted({int(k.split("-")[1]) for acc in curves.values() for k in acc})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set_ylim(-0.04, 1.06)
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.set_xlabel("gap D: tokens from the set S(k, v) to its answer v (bucket's upper end; curves nudged apart)")
    ax.set_ylabel("accuracy on the answers")
    ax.set_title(title, pad=18)
    ax.legend(fontsize=SMALL, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_recurrence(seg_len: int, mem_len: int, n_layer: int, n_seg: int = 3) -> Figure:
    """The paper's Figure 2 drawn from the actual lengths: ``n_seg`` segments of ``seg_len``
    tokens, ``n_layer`` layers above the input. Each state of the last segment is joined to
    the states below it that it attends to: grey dashed lines are reads from the memory
    (fixed, no gradient: SG), blue ones from its own segment. The last output's receptive
    field, which grows by ``mem_len`` per layer, is filled in."""
    caller = "plot_recurrence"
    seg_len, n_layer, n_seg = (count(v, name, caller) for name, v in (("seg_len", seg_len), ("n_layer", n_layer),
                                                                      ("n_seg", n_seg)))
    mem_len = count(mem_len, "mem_len", caller, 0)
    if n_seg * seg_len > 256 or n_layer > 16:  # a figure of every state and every line between them
        raise ValueError(f"{caller} draws every state: n_seg x seg_len = {n_seg * seg_len:,} positions and "
                         f"{n_layer:,} layers are too many to see. Fix: at most 256 positions and 16 layers, e.g. "
                         "plot_recurrence(4, 4, 3)")
    n = n_seg * seg_len
    visible = ~segment_band_mask(n, seg_len, mem_len)  # [t, j]: one layer's attention
    last_seg = range((n_seg - 1) * seg_len, n)
    reach = torch.zeros(n_layer + 1, n, dtype=torch.bool)
    reach[n_layer, n - 1] = True
    for layer in range(n_layer, 0, -1):  # what each layer of the last output's field reads
        reach[layer - 1] = (visible[reach[layer]]).any(0)
    fig, ax = plt.subplots(figsize=(WIDTH, 1.1 * (n_layer + 1) + 1))
    for s in range(n_seg):
        ax.axvspan(s * seg_len - 0.5, (s + 1) * seg_len - 0.5, color="C0" if s == n_seg - 1 else "grey",
                   alpha=0.08 if s == n_seg - 1 else 0.04)
        ax.text((s + 0.5) * seg_len - 0.5, n_layer + 0.45, f"segment {s}", ha="center", fontsize=SMALL)  # tau from 0
    for layer in range(1, n_layer + 1):
        for t in last_seg:
            for j in np.flatnonzero(visible[t].numpy()):
                memory = j < last_seg.start
                ax.plot([j, t], [layer - 1, layer], lw=0.6, alpha=0.5, ls="--" if memory else "-",
                        color="grey" if memory else "C0", zorder=1)
    for layer in range(n_layer + 1):
        x = np.arange(n)
        ax.scatter(x, np.full(n, layer), s=30, facecolor=np.where(reach[layer].numpy(), "C3", "white"),
                   edgecolor="black", lw=0.7, zorder=2)
    ax.set_yticks(range(n_layer + 1), ["input"] + [f"layer {k}" for k in range(1, n_layer + 1)])
    ax.set_xticks([])
    ax.set_xlim(-1, n)
    ax.set_ylim(-0.5, n_layer + 0.8)
    ax.plot([], [], color="C0", label="attends within its segment")
    ax.plot([], [], color="grey", ls="--", label="attends to the memory (SG: no gradient)")
    ax.scatter([], [], s=30, color="C3", edgecolor="black", label="receptive field of the last output")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=3, fontsize=SMALL, frameon=False)
    ax.set_title(f"Segment-level recurrence: L = {seg_len}, M = {mem_len}, {n_layer} layers "
                 f"(the paper's Figure 2)")
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    return fig
