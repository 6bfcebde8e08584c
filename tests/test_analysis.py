"""Unit tests of the notebook helpers in txl_minimal.tutorial.analysis and txl_minimal.tutorial.plotting
(the score decomposition, rel-shift, recurrence and stop-gradient helpers)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from txl_minimal.model import update_memory, attention_mask, rel_shift  # noqa: E402
from txl_minimal.tutorial import analysis, plotting  # noqa: E402
from txl_minimal.reference import naive_forward, segment_visibility  # noqa: E402

torch.set_num_threads(1)


def random_weights(d: int = 12, d_head: int = 6, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    inv_freq = 1.0 / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    return dict(w_q=r(d_head, d), w_k=r(d_head, d), w_kR=r(d_head, d), u=r(d_head), v=r(d_head),
                inv_freq=inv_freq)


# --- the score, term by term ---------------------------------------------------------

def test_abs_score_terms_sum_to_the_score():
    torch.manual_seed(0)
    E_q, U_q, E_k, U_k = torch.randn(4, 5, 12, dtype=torch.float64)
    W_q, W_k = torch.randn(2, 6, 12, dtype=torch.float64)
    terms = analysis.abs_score_terms(E_q, U_q, E_k, U_k, W_q, W_k)
    assert set(terms) == set("abcd")
    full = (E_q + U_q) @ W_q.T @ W_k @ (E_k + U_k).T
    torch.testing.assert_close(sum(terms.values()), full)
    torch.testing.assert_close(terms["d"], U_q @ W_q.T @ W_k @ U_k.T)


def test_staged_terms_lose_absolute_positions_step_by_step():
    w = random_weights()
    torch.manual_seed(1)
    E = torch.randn(5, 12, dtype=torch.float64)
    pos = torch.arange(5)
    expected_changing = {0: "bcd", 1: "cd", 2: "", 3: ""}
    for stage, changing in expected_changing.items():
        change = analysis.shift_sensitivity(stage, 64, E, E, pos, pos, **w)
        for name, c in change.items():
            assert (c > 1e-3) == (name in changing), (stage, name, c)
    # stage 0 is the vanilla score; stage 3 is A^rel with its two structural properties
    U = plotting_free_table(pos, w["inv_freq"])
    s0 = analysis.staged_score_terms(0, E, E, pos, pos, **w)
    torch.testing.assert_close(sum(s0.values()), (E + U) @ w["w_q"].T @ w["w_k"] @ (E + U).T)
    s3 = analysis.staged_score_terms(3, E, E, pos, pos, **w)
    assert analysis.column_spread(s3["c"]) < 1e-12 and analysis.diagonal_spread(s3["d"]) < 1e-12
    with pytest.raises(ValueError):
        analysis.staged_score_terms(4, E, E, pos, pos, **w)
    with pytest.raises(ValueError):
        analysis.staged_score_terms(2, E, E, pos, pos, w_q=w["w_q"], w_k=w["w_k"], inv_freq=w["inv_freq"])


def plotting_free_table(pos, inv_freq):
    from txl_minimal.model import sinusoid_table
    return sinusoid_table(pos.double(), inv_freq)


@pytest.mark.parametrize("overrides", [{}, {"untie_r": True}, {"clamp_len": 3}])
def test_rel_score_terms_equal_the_model_terms(tiny_model, overrides):
    model = tiny_model(**overrides)
    x = torch.randint(0, 27, (1, 12))
    with torch.no_grad():
        mems = model(x[:, :6]).mems
        with analysis.capture_layer_inputs(model) as inputs:
            out = model(x[:, 6:], mems, return_terms=True, return_attn=True)
    assert len(inputs) == model.cfg.n_layer
    for layer in range(model.cfg.n_layer):
        for head in range(model.cfg.n_head):
            w = analysis.head_weights(model, layer, head)
            h = inputs[layer][0]
            eq = analysis.rel_score_terms(h, torch.cat([mems[layer][0], h]), w["w_q"], w["w_kE"],
                                          w["w_kR"], w["u"], w["v"], model.pos_emb.inv_freq,
                                          clamp_len=model.cfg.clamp_len)
            terms = {k: t[0, head] for k, t in out.terms[layer].items()}
            for name in "abcd":
                torch.testing.assert_close(terms[name], eq[name], equal_nan=True)
            torch.testing.assert_close(analysis.scores_to_probs(terms, model.cfg.d_head),
                                       out.attn[layer][0, head])
            assert analysis.column_spread(terms["c"]) == 0
            if not model.cfg.clamp_len:
                assert analysis.diagonal_spread(terms["d"]) == 0
            bias = analysis.position_bias(model, layer, 11)[head]
            dist = analysis.distance_matrix(6, 12)
            seen = ~torch.isnan(terms["d"])
            torch.testing.assert_close(terms["d"][seen], bias[dist[seen]].to(terms["d"].dtype))


def test_spreads_and_distance_matrix():
    toeplitz = torch.tensor([[0.0, 1, 2], [-1, 0, 1], [-2, -1, 0]])
    assert analysis.diagonal_spread(toeplitz) == 0
    assert analysis.column_spread(toeplitz) == 2
    assert analysis.row_spread(toeplitz) == 2
    cols = torch.tensor([[1.0, 2.0], [1.0, float("nan")]])
    assert analysis.column_spread(cols) == 0 and analysis.row_spread(cols) == 1
    assert analysis.row_spread(toeplitz, where=torch.eye(3, dtype=torch.bool)) == 0
    assert analysis.distance_matrix(2, 4).tolist() == [[2, 1, 0, -1], [3, 2, 1, 0]]


def test_head_weights_slices_and_position_bias_needs_rel(tiny_model):
    model = tiny_model()
    w = analysis.head_weights(model, 1, 1)
    att = model.layers[1].dec_attn
    assert w["w_q"].equal(att.qkv_net.weight[8:16]) and w["w_kE"].equal(att.qkv_net.weight[24:32])
    assert w["w_v"].equal(att.qkv_net.weight[40:48]) and w["w_kR"].equal(att.r_net.weight[8:16])
    assert w["u"].equal(model.r_w_bias[1]) and w["v"].equal(model.r_r_bias[1])
    with pytest.raises(ValueError):
        analysis.position_bias(tiny_model(attn_type="abs"), 0, 5)


def test_attention_on_repeat_restores_mem_len_and_shows_the_clash(tiny_model):
    vanilla = tiny_model(attn_type="abs", mem_len=0)
    seg = torch.randint(0, 27, (1, 6))
    p = analysis.attention_on_repeat(vanilla, seg)
    assert p.shape == (2, 6, 12) and vanilla.cfg.mem_len == 0
    causal = torch.tril(torch.ones(6, 6, dtype=torch.bool))
    torch.testing.assert_close(p[:, :, :6][:, causal], p[:, :, 6:][:, causal])
    p_rel = analysis.attention_on_repeat(tiny_model(), seg)
    assert (p_rel[:, :, :6] - p_rel[:, :, 6:])[:, causal].abs().max() > 1e-3


# --- rel-shift ----------------------------------------------------------------------

@pytest.mark.parametrize("qlen,mlen", [(1, 0), (4, 0), (4, 2), (3, 7)])
def test_naive_rel_shift_and_stages(qlen, mlen):
    x = torch.randn(2, qlen, qlen + mlen)
    naive = analysis.naive_rel_shift(x)
    causal = ~torch.isnan(naive[0])
    assert causal.equal(~attention_mask(qlen, mlen, False, mlen))
    assert rel_shift(x)[:, causal].equal(naive[:, causal])
    st = analysis.rel_shift_stages(x[0])
    assert st["padded"].shape == (qlen, qlen + mlen + 1) and st["viewed"].shape == (qlen + mlen + 1, qlen)
    assert st["shifted"].equal(rel_shift(x[0]))


# --- recurrence ---------------------------------------------------------------------

@pytest.mark.parametrize("seg_len,mem_len,same_length", [(4, 4, False), (5, 3, False), (4, 6, True)])
def test_segment_band_mask_matches_the_reference_and_the_model(seg_len, mem_len, same_length):
    n = 4 * seg_len + 1
    mask = analysis.segment_band_mask(n, seg_len, mem_len, same_length)
    if not same_length:
        visible = segment_visibility(seg_len, mem_len)
        assert mask.tolist() == [[not visible(t, j) for j in range(n)] for t in range(n)]
    # a segment in the middle, with a full memory, must see what the model's mask allows
    start = 2 * seg_len
    mlen = min(start, mem_len)
    model_mask = attention_mask(seg_len, mlen, same_length, mem_len)
    assert mask[start:start + seg_len, start - mlen:start + seg_len].equal(model_mask)


def test_band_forward_refuses_the_authors_absolute_variant(tiny_model):
    model = tiny_model(attn_type="abs_far")
    with pytest.raises(ValueError, match="no one-pass form.*segmentwise_forward"):
        analysis.band_forward(model, analysis.token_embeddings(model, torch.randint(0, 27, (1, 12))), 6)


@pytest.mark.parametrize("attn_type", ["rel", "abs", "shaw"])
@pytest.mark.parametrize("overrides", [{}, {"mem_len": 9}, {"mem_len": 0}, {"same_length": True},
                                       {"pre_lnorm": True, "clamp_len": 4}])
def test_band_forward_equals_segmentwise_forward(tiny_model, attn_type, overrides):
    model = tiny_model(attn_type=attn_type, **overrides)
    x = torch.randint(0, 27, (2, 20))
    with torch.no_grad():
        seg = analysis.segmentwise_forward(model, x, 6)
        band = analysis.band_forward(model, analysis.token_embeddings(model, x), 6)
    torch.testing.assert_close(seg, band, rtol=1e-6, atol=1e-6)
    if attn_type == "rel" and not overrides.get("same_length"):
        ref = naive_forward(model, x, segment_visibility(6, model.cfg.mem_len))
        torch.testing.assert_close(band, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("seg_len,mem_len,n_layer", [(4, 4, 1), (4, 4, 3), (4, 6, 2), (5, 3, 3)])
def test_gradient_influence_is_exactly_the_reachability(tiny_model, seg_len, mem_len, n_layer):
    model = tiny_model(n_layer=n_layer, tgt_len=seg_len, mem_len=mem_len)
    n = 30
    x = torch.randint(0, 27, (1, n))
    reach = analysis.dependency_reach(n, seg_len, mem_len, n_layer)
    for pos in (n - 1, 17):
        infl = analysis.input_influence(model, x, pos, seg_len)
        assert infl.shape == (n,)
        assert (infl != 0).equal(reach[pos])
    if mem_len == seg_len:  # the paper's O(N x L): N memories + the position in the segment
        assert analysis.influence_span(infl, 17) == n_layer * mem_len + 17 % seg_len


def test_dependency_reach_and_span_by_hand():
    reach = analysis.dependency_reach(8, 2, 2, 1)
    assert reach[5].tolist() == [False, False, True, True, True, True, False, False]
    assert reach.tril().equal(reach)  # never the future
    assert analysis.dependency_reach(8, 2, 2, 3)[7].nonzero().min().item() == 0
    assert analysis.influence_span(torch.tensor([0.0, 0.0, 1.0, 2.0, 0.0]), 3) == 1
    assert analysis.influence_span(torch.zeros(4), 2) == 0


def test_stop_gradient_helper(tiny_model):
    model = tiny_model()
    x = torch.randint(0, 27, (2, 13))
    with_sg = analysis.previous_segment_grads(model, x[:, :6], x[:, 6:12], x[:, 7:13])
    assert len(with_sg) == model.cfg.n_layer and all(g is None for g in with_sg)
    live = analysis.previous_segment_grads(model, x[:, :6], x[:, 6:12], x[:, 7:13], stop_gradient=False)
    assert all(g is not None and g.shape == (2, 6, 16) and g.abs().sum() > 0 for g in live)
    # hooks are removed afterwards
    assert all(not layer._forward_pre_hooks for layer in model.layers)


def test_bpc_vs_memory_passes_mem_len():
    calls = []

    def fake_evaluate(model, data, mem_len, **kw):
        calls.append((mem_len, kw))
        return {"bpc": 1.0 + mem_len}

    out = analysis.bpc_vs_memory(None, [1, 2, 3], [0, 8], fake_evaluate, tgt_len=4)
    assert out == [1.0, 9.0] and calls == [(0, {"tgt_len": 4}), (8, {"tgt_len": 4})]


def test_bpc_vs_memory_with_train_evaluate(tiny_model):
    model = tiny_model().float()
    data = torch.randint(0, 27, (60,))
    out = analysis.bpc_vs_memory(model, data, [0, 6, 12], batch_size=2, tgt_len=6)
    assert len(out) == 3 and all(b > 0 for b in out) and model.cfg.mem_len == 6
    assert out[0] != out[1]


def test_source_lines():
    found = analysis.source_lines(update_memory, [".detach()"])
    assert len(found) == 1 and ".detach()" in found[0][1] and found[0][0] > 1


# --- plotting (smoke tests: they draw, label and return a figure) -------------------

def test_plots_draw(tiny_model):
    model = tiny_model()
    x = torch.randint(0, 27, (1, 12))
    with torch.no_grad():
        out = model(x[:, 6:], model(x[:, :6]).mems, return_terms=True)
    figs = [
        plotting.plot_score_terms({k: t[0, 0] for k, t in out.terms[0].items()}, "terms"),
        plotting.plot_sinusoids(torch.randn(8, 6)),
        plotting.plot_position_bias(analysis.position_bias(model, 0, 20), 0, train_klen=11),
        plotting.plot_heatmaps({"x": torch.rand(3, 4), "y": torch.rand(3, 4)}, "two"),
        plotting.plot_dependency({1: torch.tensor([0.0, 1.0, 2.0, 3.0]), 2: torch.ones(4)}, 3, 2,
                                 {1: 2, 2: 3}),
        plotting.plot_bpc_vs_memory([0, 8, 16], [2.0, 1.9, 1.85], 8, "bpc", references={"base": 2.1}),
    ]
    fig, stages = plotting.plot_rel_shift(4, 2)
    figs.append(fig)
    assert stages["shifted"].equal(rel_shift(stages["input"]))
    for f in figs:
        assert all(ax.get_title() or f._suptitle for ax in f.axes if ax.get_label() != "<colorbar>")
        plt.close(f)
