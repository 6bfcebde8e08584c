"""What every tutorial figure shares: the readable text sizes (``use_readable_style``, ``check_readable``: no text
under 8 pt once a figure is drawn as wide as GitHub shows it), the argument checks of the figure functions, and
the two heatmaps (``heatmap``: matplotlib, log or linear colours; ``sns_heatmap``: seaborn, a labelled colour bar).
``plotting`` and ``plotting_memory`` draw with them; import them from ``plotting``."""
from __future__ import annotations

import math
from typing import Optional

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .. import validation
from ..validation import count

WIDTH = 10.0  # inches: the width of a notebook cell
MASKED = "#e0e0e0"  # NaN (masked) cells: light grey
SHOWN_PX = 800  # GitHub and JupyterLab draw a notebook's figure about this wide
MIN_PT = 8.0  # the smallest text a reader should meet, after that scaling
SMALL = 10  # points: the smallest text drawn here (8 pt once a WIDTH-inch figure is shown 800 px wide)
RECALL_DODGE = 0.05  # plot_recall_by_gap: neighbouring curves sit this many octaves apart, so none hides another
READABLE = {"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11, "xtick.labelsize": 10,
            "ytick.labelsize": 10, "legend.fontsize": 10, "figure.titlesize": 12, "figure.dpi": 100}

TERM_TITLES = {"a": "(a) content", "b": "(b) content-dep. position",
               "c": "(c) global content bias", "d": "(d) global position bias"}

def use_readable_style() -> None:
    """Text sizes for figures of at most ``WIDTH`` inches that stay readable at ``SHOWN_PX``."""
    plt.rcParams.update(READABLE)


def readability_problems(fig: Figure, shown_px: int = SHOWN_PX) -> list[str]:
    """Every visible text of ``fig`` smaller than ``MIN_PT`` once the figure is drawn ``shown_px``
    wide, or reaching outside the figure (clipped); [] when there is none."""
    _check_figure(fig, "readability_problems")
    shown_px = count(shown_px, "shown_px", "readability_problems")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width_px = fig.get_figwidth() * fig.dpi
    scale = min(1.0, shown_px / width_px)
    box, problems = fig.bbox, []
    hidden = set()  # tick labels of ticks outside the axis's view: matplotlib does not draw them
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not lo - 1e-9 * (hi - lo) <= tick.get_loc() <= hi + 1e-9 * (hi - lo):
                    hidden |= {id(tick.label1), id(tick.label2)}
    for t in fig.findobj(lambda a: isinstance(a, plt.Text) and a.get_visible() and a.get_text().strip()):
        if id(t) in hidden:
            continue
        shown = t.get_fontsize() * fig.dpi / 100 * scale  # pt as drawn by a 100-dpi notebook figure
        if shown < MIN_PT:
            problems.append(f"{t.get_text()[:30]!r}: {t.get_fontsize():g} pt, {shown:.1f} pt when shown")
        e = t.get_window_extent(renderer)
        if e.x0 < box.x0 - 1 or e.x1 > box.x1 + 1 or e.y0 < box.y0 - 1 or e.y1 > box.y1 + 1:
            problems.append(f"{t.get_text()[:30]!r}: outside the figure (clipped)")
    return problems


def check_readable(fig: Figure) -> None:
    """Raise AssertionError naming the texts of ``fig`` that a reader could not read."""
    _check_figure(fig, "check_readable")
    problems = readability_problems(fig)
    assert not problems, "figure text too small or clipped: " + "; ".join(problems[:8])


def _np(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=float)


def _array(x, name: str, caller: str, dims: tuple[int, ...] = (2,), shape: str = "(rows, columns)") -> np.ndarray:
    """``x`` (a tensor, array or nested list) as a float array of ``dims`` axes, none of them empty, or a
    ValueError naming ``caller``'s argument and its shape (not seaborn's "math domain error")."""
    return _np(validation.tensor_of(x, name, caller, dims, shape))


def _panels(items, name: str, caller: str, example: str):
    """``items``, a non-empty dict of panels (title -> data), or a ValueError: there is nothing to draw."""
    validation.has_keys(items, (), name, caller, f"a dict {example}")
    return validation.nonempty(items, name, caller, f"one item per panel, {example}")


def _check_figure(fig, caller: str) -> None:
    if not isinstance(fig, Figure):
        raise ValueError(f"{caller}: fig must be a matplotlib Figure, got {validation.a_kind(fig)}. Fix: the figure a "
                         "plot_... function returns (an Axes: ax.figure)")


def _seaborn():
    try:
        import seaborn
    except ImportError as e:
        raise ImportError("txl_minimal.tutorial.plotting draws its heatmaps with seaborn: pip install seaborn "
                          '(or pip install "txl-minimal[notebooks]")') from e
    return seaborn


def _color_limits(a: np.ndarray, center: bool, kw: dict) -> str | None:
    """``center=True``: vmin/vmax symmetric around 0 (unless given) and a diverging map."""
    if not center:
        return None
    lim = float(np.nanmax(np.abs(a))) if np.isfinite(a).any() else 1.0
    kw.setdefault("vmin", -lim)
    kw.setdefault("vmax", lim)
    return "RdBu_r"


def _titles(ax: Axes, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=SMALL)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def heatmap(ax: Axes, m, title: str, xlabel: str = "key position j",
            ylabel: str = "query position i", cmap: str = "viridis",
            cbar_label: Optional[str] = None, center: bool = False, **imshow_kw):
    """imshow of a 2-D matrix; NaN (masked) cells light grey; a colorbar.

    ``center=True`` uses a diverging colormap symmetric around 0. For large matrices
    with their own norm or extent (the attention maps); ``sns_heatmap`` for the others.
    """
    a = _array(m, "m", "heatmap")
    cm = plt.get_cmap(_color_limits(a, center, imshow_kw) or cmap).with_extremes(bad=MASKED)
    im = ax.imshow(np.ma.masked_invalid(a), cmap=cm, aspect="auto", interpolation="nearest", **imshow_kw)
    _titles(ax, title, xlabel, ylabel)
    cb = ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.03)
    cb.outline.set_visible(False)  # the look of seaborn's heatmaps
    ax.spines[:].set_visible(False)
    if cbar_label:
        cb.set_label(cbar_label)
    return im


def _every(n: int, most: int) -> int:
    """Label every k-th row or column, k a power of two: at most ``most`` labels."""
    return 1 << max(0, math.ceil(math.log2(n / most)))


def sns_heatmap(ax: Axes, m, title: str, xlabel: str = "key position j",
                ylabel: str = "query position i", cmap: str = "viridis",
                cbar_label: Optional[str] = None, center: bool = False, xticks: int = 8,
                **heatmap_kw):
    """``seaborn.heatmap`` of a 2-D matrix, cell (i, j) spanning [j, j+1] x [i, i+1]; at most
    ``xticks`` (and 8) indices as tick labels; NaN (masked) cells light grey; a labelled
    colour bar. ``center=True`` uses a diverging colormap symmetric around 0.
    Returns the QuadMesh.
    """
    a, xticks = _array(m, "m", "sns_heatmap"), count(xticks, "xticks", "sns_heatmap")
    cmap = _color_limits(a, center, heatmap_kw) or cmap
    heatmap_kw.setdefault("xticklabels", _every(a.shape[1], xticks))
    heatmap_kw.setdefault("yticklabels", _every(a.shape[0], 8))
    cbar_kws = {"fraction": 0.046, "pad": 0.03, **({"label": cbar_label} if cbar_label else {})}
    _seaborn().heatmap(a, ax=ax, cmap=cmap, cbar_kws=cbar_kws, **heatmap_kw)
    ax.set_facecolor(MASKED)  # seaborn leaves NaN cells out: the background shows
    _titles(ax, title, xlabel, ylabel)
    ax.tick_params(labelrotation=0)  # seaborn turns crowded labels; ours are spaced out
    return ax.collections[-1]
