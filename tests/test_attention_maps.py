"""Tests of txl_minimal.tutorial.attention_maps (and its figures) on hand-built tensors and a tiny model."""
from __future__ import annotations

import functools
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from txl_minimal.data import encode  # noqa: E402
from txl_minimal.model import attention_mask  # noqa: E402
from txl_minimal.tutorial import attention_maps as am  # noqa: E402
from txl_minimal.tutorial import plotting  # noqa: E402
from txl_minimal.tutorial.analysis import scores_to_probs  # noqa: E402

torch.set_num_threads(1)


def random_probs(*lead, qlen, klen, mask=None, seed=0):
    """Softmax of random scores over the visible keys (future hidden, plus ``mask``)."""
    g = torch.Generator().manual_seed(seed)
    hidden = torch.triu(torch.ones(qlen, klen, dtype=torch.bool), diagonal=1 + klen - qlen)
    if mask is not None:
        hidden = hidden | mask
    s = torch.randn(*lead, qlen, klen, generator=g, dtype=torch.float64)
    return torch.softmax(s.masked_fill(hidden, float("-inf")), -1)


@pytest.fixture
def tiny_model(tiny_model):
    """The shared tiny model with large weights (every key visibly matters), dropout 0.1, segments of 4."""
    return functools.partial(tiny_model, noise=0.3, dropout=0.1, tgt_len=4, mem_len=4)


# ----------------------------------------------------------------------------- by distance

def test_attention_by_distance_hand_built():
    # qlen 2, mlen 2: query 0 sits at key 2 (sees keys 0..2), query 1 at key 3 (keys 0..3).
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0],
                      [0.1, 0.2, 0.3, 0.4]])
    prof = am.attention_by_distance(p)
    # d=0: keys 2 and 3; d=1: keys 1 and 2; d=2: keys 0 and 1; d=3: only query 1, key 0.
    expected = torch.tensor([(0.2 + 0.4) / 2, (0.3 + 0.3) / 2, (0.5 + 0.2) / 2, 0.1])
    torch.testing.assert_close(prof, expected)


def test_attention_by_distance_batched_matches_loop():
    p = random_probs(3, 2, qlen=5, klen=9)
    prof = am.attention_by_distance(p)
    assert prof.shape == (3, 2, 9)
    for a in range(3):
        for h in range(2):
            for d in range(9):
                vals = [p[a, h, i, 4 + i - d] for i in range(5) if 0 <= 4 + i - d < 9]
                torch.testing.assert_close(prof[a, h, d], torch.stack(vals).mean())


def test_attention_by_distance_same_length_trims_and_sums_to_one():
    qlen, mlen, mem_len = 4, 6, 6
    mask = attention_mask(qlen, mlen, same_length=True, mem_len=mem_len)
    p = random_probs(2, qlen=qlen, klen=qlen + mlen, mask=mask)
    prof = am.attention_by_distance(p, mask)
    assert prof.shape == (2, mem_len)  # every query sees distances 0 .. mem_len-1 only
    torch.testing.assert_close(prof.sum(-1), torch.ones(2, dtype=prof.dtype))


def test_attention_by_distance_nan_where_unseen():
    mask = torch.zeros(2, 4, dtype=torch.bool)
    mask[:, 1] = True  # nobody may see key 1
    p = torch.tensor([[0.5, 0.0, 0.5, 0.0], [0.2, 0.0, 0.3, 0.5]])
    prof = am.attention_by_distance(p, mask)
    # query 0 sees d=2 (key 0), d=0 (key 2); query 1 sees d=3 (key 0), d=1 (key 2), d=0 (key 3)
    torch.testing.assert_close(prof, torch.tensor([0.5, 0.3, 0.5, 0.2]))
    mask[1, 0] = True  # now nobody sees d=3 -> trimmed
    assert am.attention_by_distance(p.masked_fill(mask, 0.0), mask).shape == (3,)


# ----------------------------------------------------------------------------- per head

def test_mean_distance_and_mass_beyond_one_hot():
    qlen, mlen = 3, 5
    p = torch.zeros(qlen, qlen + mlen)
    # query i sits at key mlen + i; put all its mass 4, 0, 6 tokens back
    for i, d in enumerate([4, 0, 6]):
        p[i, mlen + i - d] = 1.0
    assert am.mean_attention_distance(p).item() == pytest.approx((4 + 0 + 6) / 3)
    assert am.attention_mass_beyond(p, 4).item() == pytest.approx(2 / 3)
    assert am.attention_mass_beyond(p, 5).item() == pytest.approx(1 / 3)
    # memory keys are j < 5: query 0's key 1 and query 2's key 1
    assert am.memory_share(p).item() == pytest.approx(2 / 3)


def test_memory_keys_distance_with_memory():
    seg = am.SegmentAttention(attn=torch.zeros(1, 1, 3, 8), mask=torch.zeros(3, 8, dtype=torch.bool),
                              key_ids=torch.zeros(8, dtype=torch.long), start=5)
    d = seg.distances()
    assert seg.mlen == 5
    assert d[0, 0] == 5 and d[2, 0] == 7  # key 0 is mlen + i tokens back
    assert d[0, 5] == 0 and d[2, 7] == 0  # each query's own position
    assert d[0, 6] == -1  # the future


def test_normalized_entropy_extremes():
    qlen = klen = 4
    uniform = torch.tril(torch.ones(qlen, klen))
    uniform = uniform / uniform.sum(-1, keepdim=True)
    assert am.normalized_entropy(uniform).item() == pytest.approx(1.0)
    onehot = torch.zeros(qlen, klen)
    onehot[:, 0] = 1.0
    assert am.normalized_entropy(onehot).item() == pytest.approx(0.0, abs=1e-6)


def test_farthest_heads_order_and_ties():
    score = torch.tensor([[1.0, 5.0, 2.0],
                          [5.0, 0.5, 3.0]])
    assert am.farthest_heads(score, 3) == [(0, 1), (1, 0), (1, 2)]
    assert am.farthest_heads(score, 1) == [(0, 1)]
    # the top head really has the maximal score
    l, h = am.farthest_heads(score, 1)[0]
    assert score[l, h] == score.max()


def test_best_key_window():
    p = torch.zeros(3, 10)
    p[0, 6], p[1, 7], p[2, 2] = 1.0, 1.0, 1.0
    assert am.best_key_window(p, slice(0, 3), 3) == 5  # keys 5..7 hold 2 of the 3 units
    assert am.best_key_window(p, [2], 2) == 1  # first maximum: keys 1..2
    with pytest.raises(ValueError):
        am.best_key_window(p, slice(0, 3), 11)


def test_text_helpers():
    ids = encode("the cat")
    assert am.char_labels(ids) == ["t", "h", "e", am.SPACE, "c", "a", "t"]
    assert am.context_snippet(ids, 4, width=2) == "e [c]at"


def test_text_helpers_read_the_ids_of_your_own_texts_vocabulary(tmp_path, monkeypatch):
    """char_labels of an own-text model's ids said "ids must lie in [0, 27)", text8's, or labelled them with
    text8's letters where they were below 27."""
    from txl_minimal.data import load_corpus
    monkeypatch.setenv("TXL_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "ru.txt").write_text("Мороз и солнце; день чудесный! " * 60, encoding="utf-8")
    corpus = load_corpus(tmp_path / "ru.txt")
    ids = corpus.encode("Мороз и")
    assert am.char_labels(torch.as_tensor(ids), vocab=corpus.vocab) == list("Мороз") + [am.SPACE, "и"]
    assert am.context_snippet(ids.tolist(), 2, width=2, vocab=corpus.vocab) == "Мо[р]оз"
    assert am.char_labels(corpus.valid[:5]) == [am.SPACE if c == " " else c for c in corpus.decode(corpus.valid[:5])]
    big = torch.tensor([1, 30])  # past text8's 27 (ids of a larger vocabulary): said, with the fix
    with pytest.raises(ValueError, match=r"char_labels: ids 1..\d+ are not ids of text8's 27 characters: they come "
                                         r"from another vocabulary\. Fix: pass the model's or corpus's own, "
                                         r"vocab=model.vocab"):
        am.char_labels(big)


def test_top_keys_matches_naive_sort():
    # 3 layers x 2 heads, 4 queries over 8 memory + 4 segment keys: query i sits at key 8 + i
    attn = random_probs(3, 2, qlen=4, klen=12, seed=3).float()
    seg = am.SegmentAttention(attn=attn, mask=torch.zeros(4, 12, dtype=torch.bool),
                              key_ids=torch.arange(12), start=8)
    for layer, head, query in [(0, 0, 0), (1, 1, 2), (2, 0, 3)]:
        got = am.top_keys(seg, layer, head, query, k=5)
        row = attn[layer, head, query].tolist()
        # naive: every key, largest probability first (the future keys have probability 0)
        naive = sorted(range(12), key=lambda j: row[j], reverse=True)[:5]
        assert [j for j, _, _ in got] == naive
        assert [p for _, _, p in got] == [row[j] for j in naive]
        assert [d for _, d, _ in got] == [8 + query - j for j in naive]
        assert all(0 <= d <= 8 + query for _, d, _ in got)  # never a future key


def test_top_keys_ties_go_to_the_nearer_key():
    # mlen 4, qlen 2: query 1 sits at key 5; keys 1 and 3 tie, and keys 0 and 2
    p = torch.zeros(1, 1, 2, 6)
    p[0, 0, 1] = torch.tensor([0.1, 0.3, 0.1, 0.3, 0.2, 0.0])
    seg = am.SegmentAttention(attn=p, mask=torch.zeros(2, 6, dtype=torch.bool), key_ids=torch.arange(6), start=4)
    row = p[0, 0, 1].tolist()
    assert am.top_keys(seg, 0, 0, 1, k=4) == [(3, 2, row[3]), (1, 4, row[1]), (4, 1, row[4]), (2, 3, row[2])]


def test_term_attention_by_distance_sums_to_one():
    qlen, mlen = 3, 5
    mask = attention_mask(qlen, mlen, same_length=True, mem_len=mlen)
    g = torch.Generator().manual_seed(1)
    terms = {n: torch.randn(2, qlen, qlen + mlen, generator=g).masked_fill(mask, float("nan"))
             for n in "abcd"}
    out = am.term_attention_by_distance(terms, d_head=4, mask=mask)
    assert set(out) == {"a", "b", "d"}
    for prof in out.values():
        assert prof.shape == (2, mlen)
        torch.testing.assert_close(prof.sum(-1), torch.ones(2))


# ----------------------------------------------------------------------------- with a model

def test_read_with_memory_tiny_model(tiny_model):
    model = tiny_model().train()
    text = torch.randint(0, 27, (30,), generator=torch.Generator().manual_seed(0))
    segs = am.read_with_memory(model, text, tgt_len=4, mem_len=12, same_length=True, n_keep=2, terms=True)
    # lengths and mode are restored
    assert (model.cfg.tgt_len, model.cfg.mem_len, model.cfg.same_length) == (4, 4, False)
    assert model.training
    assert len(segs) == 2
    last = segs[-1]
    assert last.attn.shape == (2, 2, 4, 16) and last.mlen == 12
    assert last.start == 24  # 30 tokens -> 7 full segments, the last starts at 24
    assert torch.equal(last.key_ids, text[12:28])  # memory = the 12 tokens before the segment
    assert torch.equal(last.query_ids, text[24:28])
    # rows are distributions; hidden keys get nothing
    torch.testing.assert_close(last.attn.sum(-1), torch.ones(2, 2, 4))
    assert last.attn[..., last.mask].abs().max() == 0
    # the terms rebuild the probabilities, NaN exactly where masked
    for layer in range(2):
        t = last.terms[layer]
        assert set(t) == {"a", "b", "c", "d"}
        torch.testing.assert_close(scores_to_probs(t, 8), last.attn[layer], atol=1e-6, rtol=1e-5)
        for v in t.values():
            assert torch.equal(torch.isnan(v[0]), last.mask)
    # same_length with mem_len 12: every query sees distances 0..11
    prof = am.attention_by_distance(last.attn, last.mask)
    assert prof.shape == (2, 2, 12)
    torch.testing.assert_close(prof.sum(-1), torch.ones(2, 2))
    assert float(am.memory_share(last.attn).min()) > 0  # a random model spreads onto the memory


def test_read_with_memory_matches_plain_forward(tiny_model):
    model = tiny_model(seed=1).eval()
    text = torch.randint(0, 27, (12,), generator=torch.Generator().manual_seed(2))
    segs = am.read_with_memory(model, text, tgt_len=4, mem_len=8, n_keep=1)
    model.set_lengths(mem_len=8)
    mems = None
    for s in range(0, 12, 4):
        out = model(text[s:s + 4][None], mems, return_attn=True)
        mems = out.mems
    torch.testing.assert_close(segs[0].attn, torch.stack([a[0] for a in out.attn]).float())


def test_read_with_memory_errors(tiny_model):
    model = tiny_model()
    with pytest.raises(ValueError):
        am.read_with_memory(model, torch.zeros(10, dtype=torch.long), tgt_len=4, mem_len=4, n_keep=3)
    with pytest.raises(ValueError):
        am.read_with_memory(model, torch.zeros(2, 8, dtype=torch.long), tgt_len=4, mem_len=4)


# ----------------------------------------------------------------------------- figures

def test_plot_attention_by_distance_figure():
    prof = am.attention_by_distance(random_probs(2, 3, qlen=4, klen=12))
    fig = plotting.plot_attention_by_distance({"full": prof, "again": prof}, seg_len=4, train_dist=7)
    image_axes = [ax for ax in fig.axes if ax.images]
    assert len(image_axes) == 2
    labels = [t.get_text() for t in image_axes[0].get_yticklabels()]
    assert labels == [f"L{l} H{h}" for l in (1, 2) for h in range(3)]  # layers from 1, as in the paper
    # the legend of the marked distances sits below every panel, on no data
    fig.canvas.draw()
    (legend,) = fig.legends
    box = legend.get_window_extent()
    assert all(box.y1 <= ax.get_window_extent().y0 for ax in image_axes) and not image_axes[0].get_legend()
    plt.close(fig)
    # one colour scale for all panels unless asked otherwise
    for shared in (True, False):
        fig = plotting.plot_attention_by_distance({"x": prof, "half": prof / 2}, shared_scale=shared)
        vmax = [ax.images[0].norm.vmax for ax in fig.axes if ax.images]
        assert (vmax[0] == vmax[1]) == shared
        plt.close(fig)


def test_plot_head_attention_zoom_labels():
    p = random_probs(qlen=4, klen=10)
    labels = am.char_labels(encode("abc defghi"))
    fig = plotting.plot_head_attention(p, labels, mlen=6, title="t",
                                       queries=slice(1, 4), keys=slice(2, 7))
    zoom = [ax for ax in fig.axes if ax.images][1]
    assert [t.get_text() for t in zoom.get_xticklabels()] == labels[2:7]
    assert [t.get_text() for t in zoom.get_yticklabels()] == labels[7:10]  # queries = last 4 keys
    borders = [line.get_xdata()[0] for line in zoom.lines]
    assert borders == [5.5]  # keys 2-6 span the memory's end (mlen 6): the zoom draws the border too
    plt.close(fig)
    fig = plotting.plot_head_attention(p, labels, mlen=6, title="t", queries=slice(1, 4), keys=slice(6, 10))
    assert len([ax for ax in fig.axes if ax.images][1].lines) == 0  # a zoom inside the segment: no border
    plt.close(fig)
    with pytest.raises(ValueError):
        plotting._prob_norm("cubic", np.ones(3))
    assert math.isclose(plotting._prob_norm("log", np.array([1e-9, 1.0])).vmin, 1e-4)


def test_row_overlap():
    same = torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.5, 0.5, 0.0]])
    assert am.row_overlap(same).item() == pytest.approx(1.0)
    disjoint = torch.eye(3)
    assert am.row_overlap(disjoint).item() == pytest.approx(0.0)
    # rows 0,1 share 0.5; rows 0,2 share 0; rows 1,2 share 0.5 -> mean 1/3
    mixed = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.0, 1.0, 0.0]])
    assert am.row_overlap(mixed).item() == pytest.approx(1 / 3)
    assert am.row_overlap(torch.stack([same, disjoint])).shape == (2,)
    with pytest.raises(ValueError):
        am.row_overlap(torch.ones(1, 3))


def test_query_distance_and_mean_by_token():
    qlen, mlen = 3, 2
    p = torch.zeros(qlen, qlen + mlen)
    p[0, 0], p[1, 1], p[1, 3], p[2, 4] = 1.0, 0.5, 0.5, 1.0  # query i sits at key 2 + i: 2; (2 + 0) / 2; 0
    torch.testing.assert_close(am.query_distance(p), torch.tensor([2.0, 1.0, 0.0]))
    values = torch.tensor([[2.0, 1.5, 0.0], [4.0, 1.0, 3.0]])
    ids = torch.tensor([[1, 0, 1], [1, 3, 0]])
    mean, count = am.mean_by_token(values, ids, n_tokens=5)
    assert count.tolist() == [2, 3, 0, 1, 0]
    torch.testing.assert_close(mean[[0, 1, 3]], torch.tensor([(1.5 + 3.0) / 2, (2 + 0 + 4) / 3, 1.0]))
    assert torch.isnan(mean[2]) and torch.isnan(mean[4])
    mean2, _ = am.mean_by_token(values, ids, n_tokens=5, min_count=3)
    assert torch.isnan(mean2[0]) and not torch.isnan(mean2[1])
    with pytest.raises(ValueError):
        am.mean_by_token(values, ids[:, :2], n_tokens=5)


def test_read_with_memory_adaptive_span_pads_trimmed_memory(tiny_model):
    model = tiny_model(adaptive_span=True, span_ramp=2, span_init=0.2, tgt_len=4, mem_len=8)
    with torch.no_grad():
        model.layers[1].dec_attn.span_frac.fill_(1.0)  # layer 0 keeps little memory, layer 1 all
    text = torch.randint(0, 27, (20,), generator=torch.Generator().manual_seed(3))
    seg = am.read_with_memory(model, text, tgt_len=4, mem_len=8, n_keep=1, terms=True)[0]
    assert seg.attn.shape == (2, 2, 4, 12)
    torch.testing.assert_close(seg.attn.sum(-1), torch.ones(2, 2, 4))
    assert seg.attn[0, :, :, :2].abs().max() == 0  # trimmed by layer 0: nothing there
    assert torch.isnan(seg.terms[0]["a"][:, :, :2]).all()


def test_plot_by_token_bars():
    fig = plotting.plot_by_token({"a": torch.tensor([1.0, float("nan"), 3.0]), "b": torch.ones(3)},
                                 ["x", "y", "z"], "reach", "t", ref=2.0, ref_label="chance")
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert heights == [1.0, 0.0, 3.0, 1.0, 1.0, 1.0]  # NaN drawn as no bar
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x", "y", "z"]
    plt.close(fig)


def test_attention_by_token_pair():
    # one segment, qlen 2, mlen 2; keys read tokens [1, 2, 1, 3]; queries read [1, 3]
    key_ids = torch.tensor([[1, 2, 1, 3]])
    query_ids = key_ids[:, 2:]
    attn = torch.tensor([[[0.2, 0.3, 0.5, 0.0],
                          [0.1, 0.4, 0.2, 0.3]]])
    share, count = am.attention_by_token_pair(attn, query_ids, key_ids, n_tokens=4)
    assert count.tolist() == [0, 1, 0, 1]
    torch.testing.assert_close(share[1], torch.tensor([0.0, 0.7, 0.3, 0.0]))
    torch.testing.assert_close(share[3], torch.tensor([0.0, 0.3, 0.4, 0.3]))
    assert torch.isnan(share[0]).all() and torch.isnan(share[2]).all()
    # memory keys only (j < 2): rows sum to the memory share
    keep = torch.tensor([[True, True, False, False]] * 2)
    share_m, _ = am.attention_by_token_pair(attn, query_ids, key_ids, n_tokens=4, keep=keep)
    torch.testing.assert_close(share_m[1].sum(), attn[0, 0, :2].sum())  # query 1 = row 0
    torch.testing.assert_close(share_m[3], torch.tensor([0.0, 0.1, 0.4, 0.0]))


def test_profile_entropy_and_log_correlation():
    flat = torch.full((8,), 1 / 8)
    spike = torch.zeros(8)
    spike[0] = 1.0
    assert am.profile_entropy(flat).item() == pytest.approx(1.0)
    assert am.profile_entropy(spike).item() == pytest.approx(0.0, abs=1e-6)
    decay = torch.exp(-torch.arange(8.0))
    assert 0 < am.profile_entropy(decay).item() < 1
    torch.testing.assert_close(am.log_correlation(decay, 5 * decay), torch.tensor(1.0))  # scale-free
    torch.testing.assert_close(am.log_correlation(decay, decay.flip(0)), torch.tensor(-1.0))
    both = am.log_correlation(torch.stack([decay, decay]), torch.stack([decay, decay.flip(0)]))
    torch.testing.assert_close(both, torch.tensor([1.0, -1.0]))


def test_plot_token_pairs_labels():
    m = torch.rand(3, 3)
    m[1] = float("nan")
    fig = plotting.plot_token_pairs({"a": m, "b": m / 2}, ["x", "y", "z"], "t")
    image_axes = [ax for ax in fig.axes if ax.images]
    assert len(image_axes) == 2
    assert {ax.images[0].norm.vmax for ax in image_axes} == {float(m.nan_to_num().max())}  # one colour scale
    assert [t.get_text() for t in image_axes[1].get_yticklabels()] == ["x", "y", "z"]
    plt.close(fig)


def test_query_breakdown_terms_rebuild_the_query_attention(tiny_model):
    model = tiny_model(tgt_len=4, mem_len=6)
    text = torch.randint(0, 27, (22,), generator=torch.Generator().manual_seed(5))
    seg = am.read_with_memory(model, text, tgt_len=4, mem_len=6, same_length=True, n_keep=1, terms=True)[0]
    d_head = model.cfg.d_head
    for layer, head, query in ((0, 0, 0), (1, 1, 3), (1, 0, 2)):
        parts = am.query_breakdown(seg, layer, head, query)
        seen = ~torch.isnan(parts["a"])
        assert torch.equal(seen, ~seg.mask[query])  # NaN exactly where this query may not look
        score = sum(parts[n][seen] for n in "abcd") / d_head ** 0.5
        torch.testing.assert_close(score.softmax(-1), parts["p"][seen])  # the four terms ARE the attention
        assert parts["p"][~seen].abs().max() == 0
        assert parts["distance"][seen].min() == 0 and parts["distance"][seen].max() == 5  # same_length: M keys
    fig = plotting.plot_query_attention(parts, am.char_labels(seg.key_ids), "t", window=5)
    assert len(fig.axes[0].patches) == 5 and len(fig.axes[1].lines) >= 4
    plt.close(fig)
    with pytest.raises(ValueError, match="terms=True"):
        am.query_breakdown(am.read_with_memory(model, text, tgt_len=4, mem_len=6, n_keep=1)[0], 0, 0, 0)
    with pytest.raises(ValueError, match=r"query must be in \[0, 3\]"):
        am.query_breakdown(seg, 0, 0, 4)
