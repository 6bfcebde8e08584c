"""The seaborn heatmaps of txl_minimal.tutorial.plotting: a labelled colour bar, NaN cells grey,
spaced-out index labels, a colour scale symmetric around 0 where asked."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from txl_minimal.tutorial import plotting  # noqa: E402

pytest.importorskip("seaborn", reason="seaborn is not installed (pip install -e .[notebooks])")


def test_seaborn_heatmaps_label_their_colour_bar_and_grey_out_nan():
    m = torch.randn(64, 128)
    m[:, 100:] = float("nan")  # masked keys
    fig = plotting.plot_heatmaps({"a": m, "b": 2 * m}, "two", cbar_label="score", center=True)
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(panels) == len(bars) == 2
    assert all(bar.get_ylabel() == "score" for bar in bars)
    for ax, scale in zip(panels, (1, 2)):
        mesh = ax.collections[0]
        assert mesh.norm.vmin == -mesh.norm.vmax == pytest.approx(-scale * m.nan_to_num().abs().max().item())
        assert matplotlib.colors.to_hex(ax.get_facecolor()) == plotting.MASKED  # behind the NaN cells
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "32", "64", "96"]
        assert [t.get_text() for t in ax.get_yticklabels()] == [str(i) for i in range(0, 64, 8)]
    plt.close(fig)


def test_dependency_map_rows_are_the_depths():
    fig = plotting.plot_dependency({1: torch.tensor([0.0, 0.0, 1.0, 2.0]), 3: torch.ones(4)}, 3, 2, {1: 1, 3: 3})
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1", "3"]
    assert ax.collections[0].get_array().mask.sum() == 2  # the two zero-gradient inputs: grey
    plt.close(fig)


def test_readability_check_flags_small_and_clipped_text_and_passes_readable_figures():
    plotting.use_readable_style()
    fig, ax = plt.subplots(figsize=(plotting.WIDTH, 3))
    ax.plot([0, 1], [0, 1], label="a line")
    ax.legend()
    ax.set_xlabel("x")
    fig.tight_layout()
    assert plotting.readability_problems(fig) == []
    ax.set_title("tiny", fontsize=7)  # 5.6 pt once 1,000 px are shown in 800
    fig.text(0.99, 0.5, "clipped on the right edge of the figure")
    problems = plotting.readability_problems(fig)
    assert any("'tiny'" in p and "5.6 pt when shown" in p for p in problems)
    assert any("outside the figure" in p for p in problems)
    with pytest.raises(AssertionError, match="too small or clipped"):
        plotting.check_readable(fig)
    plt.close(fig)


def test_the_package_figures_are_readable_at_800_px():
    plotting.use_readable_style()
    torch.manual_seed(0)
    p = torch.rand(70).softmax(-1)
    parts = {"p": p, "distance": torch.arange(69, -1, -1.0), **{k: torch.randn(70) for k in "abcd"}}
    figs = [plotting.plot_query_attention(parts, list("abcdefghij" * 7), "one query"),
            plotting.plot_recurrence(4, 4, 3, n_seg=4),
            plotting.plot_heatmaps({"a": torch.randn(16, 32), "b": torch.randn(16, 32)}, "two", cbar_label="s"),
            plotting.plot_attention_by_distance({"t": torch.rand(4, 4, 256)}, seg_len=128, train_dist=255)]
    for fig in figs:
        assert plotting.readability_problems(fig) == [], fig.texts
        plt.close(fig)


def test_recall_curves_keep_equal_accuracies_apart_and_off_the_frame():
    """Notebook 03: Transformer-XL and vanilla both at 1.0 at the first gap, and Transformer-XL at 1.0
    out to 96: each point must show beside the other (not under it) and inside the frame."""
    plotting.use_readable_style()
    labels = ["1-32", "33-64", "65-96", "97-128", "129-192", "193-256", "257-384", "385-512", "513-768"]
    perfect = dict.fromkeys(labels, 1.0)
    fig = plotting.plot_recall_by_gap({"xl": perfect, "vanilla": dict(perfect), "lstm": dict(perfect)}, 0.125,
                                      {"L": 32, "L + M": 128}, "three curves at 1.0")
    ax = fig.axes[0]
    curves = {line.get_label(): line for line in ax.get_lines()}
    px = {name: ax.transData.transform(curves[name].get_xydata()) for name in ("xl", "vanilla", "lstm")}
    radius = curves["xl"].get_markersize() * fig.dpi / 72 / 2
    for a, b in (("xl", "vanilla"), ("vanilla", "lstm")):
        assert (abs(px[a][:, 0] - px[b][:, 0]) > radius).all()  # sideways by more than half a marker
    top = ax.transAxes.transform((0, 1))[1]
    assert (px["xl"][:, 1] < top - radius).all()  # the whole marker below the frame, not cut by it
    assert all(text.xy[1] == 1.0 and text.xycoords[1] == "axes fraction" for text in ax.texts)  # names above it
    assert plotting.readability_problems(fig) == []
    plt.close(fig)


def _contrast(a, b) -> float:
    """WCAG's contrast ratio of two colours: 1 (the same) to 21 (black on white)."""
    hi, lo = sorted((plotting._luminance(a), plotting._luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_rel_shift_labels_are_large_and_contrast_with_their_cells():
    """Notebook 02, cell 32: the q_i R_k labels were 10 pt in cells a quarter of the width each, about 9 px
    once GitHub shows the figure 800 px wide, some light on mid-dark cells. Now: at least 14 px tall when
    shown, and at least 7:1 (WCAG AAA) against their cell."""
    plotting.use_readable_style()
    fig, _ = plotting.plot_rel_shift(qlen=4, mlen=2)
    fig.canvas.draw()
    renderer, scale = fig.canvas.get_renderer(), plotting.SHOWN_PX / (fig.get_figwidth() * fig.dpi)
    labels = 0
    for ax in fig.axes:
        faces = {(round(p.get_x()), round(p.get_y())): p.get_facecolor() for p in ax.patches}
        for text in (t for t in ax.texts if t.get_gid() == "code"):
            x, y = text.get_position()
            assert text.get_window_extent(renderer).height * scale >= 14, text.get_text()
            assert _contrast(text.get_color(), faces[(round(x - 0.5), round(y - 0.5))]) >= 7, text.get_text()
            labels += 1
    assert labels == 6 * 4 + 7 * 4 + 7 * 4 + 6 * 4  # every cell of the four stages
    assert fig.get_figwidth() <= plotting.WIDTH and plotting.readability_problems(fig) == []
    plt.close(fig)


def test_a_zoom_panel_redraws_the_curves_in_its_range_with_the_axis_labels():
    """Notebooks 04 and 06: a zoom is read on its own, with a y scale of its own: it carries its y label."""
    fig, (ax, zx) = plt.subplots(1, 2, figsize=(plotting.WIDTH, 3))
    ax.plot([1, 2, 4, 8, 16], [5.0, 3.0, 2.0, 1.9, 1.85], "o-", color="C1", label="a")
    ax.axvline(4, color="grey")  # not a curve: left out of the zoom
    ax.set(xscale="log", xlabel="context c", ylabel="bits per character")
    ax.set_xscale("log", base=2)
    assert plotting.zoom_panel(ax, zx, "zoom", (4, 16), ylim=(1.8, 2.1)) is zx
    (line,) = zx.get_lines()
    assert line.get_xdata().tolist() == [4, 8, 16] and line.get_color() == "C1" and line.get_marker() == "o"
    assert (zx.get_xlabel(), zx.get_ylabel(), zx.get_title()) == ("context c", "bits per character", "zoom")
    assert zx.get_xscale() == "log" and zx.xaxis.get_transform().base == 2 and zx.get_ylim() == (1.8, 2.1)
    with pytest.raises(ValueError, match="low < high"):
        plotting.zoom_panel(ax, zx, "zoom", (16, 4))
    with pytest.raises(ValueError, match="no point"):
        plotting.zoom_panel(ax, zx, "zoom", (100, 200))
    plt.close(fig)
