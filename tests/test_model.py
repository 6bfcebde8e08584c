"""Tests of txl_minimal.model against naive references and the paper's properties."""
from __future__ import annotations

import os
import pydoc
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import txl_minimal
from txl_minimal.data import decode, encode, generate_text
from txl_minimal.evaluate import read_segments
from txl_minimal.model import TXLOutput, TransformerXL, attention_mask, rel_shift, sinusoid_table
from txl_minimal.reference import naive_forward, segment_visibility

torch.set_num_threads(1)


def run_segments(model: TransformerXL, tokens: torch.Tensor, seg_len: int) -> torch.Tensor:
    """Logits of consecutive segments, memory carried across."""
    return torch.cat([out.logits for _, out in read_segments(model, tokens, tgt_len=seg_len)], dim=1)


# 1. rel-shift ------------------------------------------------------------------
@pytest.mark.parametrize("qlen,mlen", [(1, 0), (4, 0), (4, 3), (5, 7), (3, 10)])
def test_rel_shift_equals_naive_gather(qlen, mlen):
    torch.manual_seed(qlen * 31 + mlen)
    klen, d = qlen + mlen, 5
    q = torch.randn(2, 3, qlen, d)
    R_by_dist = torch.randn(klen, d)             # row r: encoding of distance r
    R_layout = R_by_dist.flip(0)                  # the model's order: klen-1 ... 0
    shifted = rel_shift(q @ R_layout.T)
    for i in range(qlen):
        for j in range(klen):
            if j <= i + mlen:                     # causal part; the rest is masked
                expected = q[:, :, i] @ R_by_dist[i - j + mlen]
                torch.testing.assert_close(shifted[:, :, i, j], expected)


def test_sinusoid_layout_is_sines_then_cosines():
    inv_freq = torch.tensor([1.0, 0.5])
    table = sinusoid_table(torch.tensor([0.0, 2.0]), inv_freq)
    expected = torch.tensor([[0, 0, 1, 1], [torch.sin(torch.tensor(2.0)), torch.sin(torch.tensor(1.0)),
                                            torch.cos(torch.tensor(2.0)), torch.cos(torch.tensor(1.0))]])
    torch.testing.assert_close(table, expected)


# 2. the four terms ---------------------------------------------------------------
def test_four_terms_sum_to_the_score(tiny_model):
    model = tiny_model()
    x = torch.randint(0, 27, (2, 6))
    mems = model(x).mems
    out = model(x, mems, return_attn=True, return_terms=True)
    scale = model.layers[0].dec_attn.scale
    for terms, prob in zip(out.terms, out.attn):
        assert set(terms) == {"a", "b", "c", "d"}
        score = (terms["a"] + terms["b"] + terms["c"] + terms["d"]) * scale
        masked = torch.isnan(score)
        assert masked.equal(attention_mask(6, 6, False, 6).expand_as(score))
        expected = torch.softmax(score.masked_fill(masked, float("-inf")), -1)
        torch.testing.assert_close(prob, expected)


@pytest.mark.parametrize("attn_type", ["rel", "shaw"])
def test_the_rel_shift_input_is_returned_with_the_terms_and_shifts_into_b_plus_d(tiny_model, attn_type):
    model = tiny_model(attn_type=attn_type)
    x = torch.randint(0, 27, (2, 6))
    out = model(x, model(x).mems, return_terms=True, return_hidden=True)
    assert len(out.rel_shift_input) == model.cfg.n_layer and all("shift_input" not in t for t in out.terms)
    H, D = model.cfg.n_head, model.cfg.d_head
    for n, (terms, before) in enumerate(zip(out.terms, out.rel_shift_input)):
        assert before.shape == (2, H, 6, 12) and not before.isnan().any()
        bd = terms["b"] + terms.get("d", 0)  # (b) + (d), NaN where masked
        kept = ~bd.isnan()
        assert rel_shift(before)[kept].allclose(bd[kept])  # B~ (+ d~ in every row): what attend's rel_shift is given
        if attn_type == "rel":  # by hand: column c against R_{klen-1-c}, the query plus v
            att, v = model.layers[n].dec_attn, model.uv(n)[1]
            q = (out.hidden[n]["input"] @ att.qkv_net.weight[:H * D].T).view(2, 6, H, D)
            wr = (model.relative_encoding(12) @ att.r_net.weight.T).view(12, H, D)  # rows: distances 11..0
            torch.testing.assert_close(before, torch.einsum("bihd,chd->bhic", q + v, wr))
    assert model(x, return_terms=True).rel_shift_input[0].shape[-1] == 6
    vanilla = tiny_model(attn_type="abs")
    assert vanilla(x, return_terms=True).rel_shift_input == [None, None]


def test_return_hidden_gives_what_entered_each_layer_even_with_a_memory_shorter_than_the_segment(tiny_model):
    from txl_minimal.tutorial.analysis import capture_layer_inputs
    model = tiny_model(mem_len=3, tgt_len=6)  # out.mems[n] keeps 3 of the 6 rows that entered layer n
    x = torch.randint(0, 27, (2, 12))
    first = model(x[:, :6], return_hidden=True)
    assert [h["memory"].shape[1] for h in first.hidden] == [0, 0]  # no memory yet: empty, not None
    with capture_layer_inputs(model) as entered:
        out = model(x[:, 6:], first.mems, return_hidden=True)
    R, mask = model.relative_encoding(9), model.mask(6, 3, x.device)
    for n, (hid, layer) in enumerate(zip(out.hidden, model.layers)):
        assert hid["input"].shape == (2, 6, model.cfg.d_model)
        assert hid["input"].equal(entered[n]) and hid["memory"].equal(first.mems[n])
        attn_out = layer.dec_attn(hid["input"], hid["memory"], R, mask, *model.uv(n))[0]
        torch.testing.assert_close(hid["attn"], attn_out)  # o^n, before the feed-forward
        torch.testing.assert_close(hid["output"], layer.pos_ff(attn_out))  # h^n = FF(o^n)
        if n + 1 < len(out.hidden):
            assert hid["output"].equal(out.hidden[n + 1]["input"])
    torch.testing.assert_close(model.output_logits(out.hidden[-1]["output"]), out.logits)
    assert model(x[:, :6]).hidden is None


@pytest.mark.parametrize("fast", [True, False])
def test_a_function_of_model_py_replaced_at_run_time_is_what_runs(tiny_model, monkeypatch, fast):
    import txl_minimal.model as model_py
    from txl_minimal import fast as fast_py
    model = tiny_model(mem_len=6)
    model.fast_attn = fast
    model.eval()
    x = torch.randint(0, 27, (1, 12))
    with torch.no_grad():
        want = [out.logits for out in (model(x[:, :6]),)]
        want.append(model(x[:, 6:], model(x[:, :6]).mems).logits)
    calls = {"rel_shift": 0, "update_memory": 0}
    original = {name: getattr(model_py, name) for name in calls}

    def counted(name):
        def f(*args):
            calls[name] += 1
            return original[name](*args)
        return f
    for name in calls:
        monkeypatch.setattr(model_py, name, counted(name))
    assert sorted(fast_py.replaced_functions()) == sorted(calls)
    with torch.no_grad():
        got = [model(x[:, :6])]
        got.append(model(x[:, 6:], got[0].mems))
    assert calls["rel_shift"] >= 2 * model.cfg.n_layer and calls["update_memory"] >= 2  # the student's own code ran
    for w, g in zip(want, got):
        torch.testing.assert_close(g.logits, w)  # the same numbers (a right rel_shift)
    monkeypatch.setattr(model_py, "rel_shift", lambda t: original["rel_shift"](t) * 0)  # a wrong one shows
    with torch.no_grad():
        assert not torch.allclose(model(x[:, :6]).logits, want[0])
    monkeypatch.undo()
    assert fast_py.replaced_functions() == []


def test_a_method_patched_onto_the_attention_class_runs_with_the_fast_paths_on(tiny_model, monkeypatch):
    from txl_minimal.model import RelMultiHeadAttn
    model = tiny_model()
    x = torch.randint(0, 27, (1, 6))
    before = model(x).logits
    seen = []
    original = RelMultiHeadAttn.attend

    def attend(self, *args, **kwargs):
        seen.append(1)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(RelMultiHeadAttn, "attend", attend)
    assert model.fast_attn
    torch.testing.assert_close(model(x).logits, before)
    assert len(seen) == model.cfg.n_layer  # the patched method ran, not the fast path that stands in for it


def test_only_term_a_without_u_v_and_wkr(tiny_model):
    model = tiny_model()
    with torch.no_grad():
        model.r_w_bias.zero_()
        model.r_r_bias.zero_()
        for layer in model.layers:
            layer.dec_attn.r_net.weight.zero_()
    x = torch.randint(0, 27, (2, 6))
    out = model(x, model(x).mems, return_attn=True, return_terms=True)
    for terms, prob in zip(out.terms, out.attn):
        for name in "bcd":
            visible = ~torch.isnan(terms[name])
            assert (terms[name][visible] == 0).all()
        expected = torch.softmax((terms["a"] * model.layers[0].dec_attn.scale).nan_to_num(nan=float("-inf")), -1)
        torch.testing.assert_close(prob, expected)


# 3. causality --------------------------------------------------------------------
@pytest.mark.parametrize("attn_type", ["rel", "abs", "abs_far", "shaw"])
@pytest.mark.parametrize("same_length", [False, True])
def test_future_tokens_never_change_the_past(tiny_model, attn_type, same_length):
    model = tiny_model(attn_type=attn_type, same_length=same_length)
    torch.manual_seed(1)
    x = torch.randint(0, 27, (2, 18))
    base = run_segments(model, x, 6)
    for t in (0, 4, 7, 13):
        y = x.clone()
        y[:, t + 1:] = torch.randint(0, 27, y[:, t + 1:].shape)
        changed = run_segments(model, y, 6)
        torch.testing.assert_close(changed[:, :t + 1], base[:, :t + 1], rtol=0, atol=1e-12)
        assert not torch.allclose(changed[:, t + 1:], base[:, t + 1:])


def test_memory_carries_information_across_segments(tiny_model):
    model = tiny_model()
    x = torch.randint(0, 27, (1, 12))
    y = x.clone()
    y[0, 2] = (x[0, 2] + 1) % 27                       # change one token of segment 1
    a, b = run_segments(model, x, 6), run_segments(model, y, 6)
    assert not torch.allclose(a[:, 6:], b[:, 6:])      # segment 2 sees it through memory
    no_mem = tiny_model(mem_len=0)
    a, b = run_segments(no_mem, x, 6), run_segments(no_mem, y, 6)
    torch.testing.assert_close(a[:, 6:], b[:, 6:], rtol=0, atol=0)


def test_abs_far_gives_the_memory_its_own_farther_positions(tiny_model):
    """The authors' attn_type 2, by hand: U counts back from the last key, so the segment gets
    U_{L-1..0} and layer 0 reads its memory with U_{M+L-1..L} added; the stored memory is what
    entered each layer (not changed in place, unlike the authors' ``mems_i +=``)."""
    model = tiny_model(attn_type="abs_far")
    x = torch.randint(0, 27, (2, 12))
    first = model(x[:, :6])
    kept = [m.clone() for m in first.mems]
    out = model(x[:, 6:], first.mems)
    U = model.pos_emb(torch.arange(11, -1, -1.0)).double()      # distances 11..0 to the last key
    h = model.word_emb(x[:, 6:]) * model.emb_scale + U[6:]      # the segment: 5..0
    mem_in = [kept[0] + U[:6], kept[1]]                          # layer 0's memory: 11..6 on top
    mask = attention_mask(6, 6, False, 6)
    hids = []
    for layer, mem in zip(model.layers, mem_in):
        hids.append(h)
        h, _ = layer(h, mem, None, mask, None, None)
    torch.testing.assert_close(out.logits, model.output_logits(h))
    for stored, entered in zip(out.mems, hids):
        torch.testing.assert_close(stored, entered)             # mem_len = tgt_len: this segment's inputs
    assert all(torch.equal(a, b) for a, b in zip(first.mems, kept))
    naive = tiny_model(attn_type="abs")                          # same weights, positions 0..5 repeated
    assert not torch.allclose(naive(x[:, 6:], naive(x[:, :6]).mems).logits, out.logits)


# 4. recurrence equals a banded full-sequence computation ---------------------------
@pytest.mark.parametrize("seg_len,mem_len", [(4, 4), (4, 6), (5, 3), (3, 0)])
def test_one_layer_recurrence_equals_banded_mask(tiny_model, seg_len, mem_len):
    model = tiny_model(n_layer=1, mem_len=mem_len, tgt_len=seg_len)
    x = torch.randint(0, 27, (2, 15))
    seg = run_segments(model, x, seg_len)
    # The same layer on the whole sequence at once, with the segment-band mask.
    N = x.size(1)
    visible = segment_visibility(seg_len, mem_len)
    mask = torch.tensor([[not visible(t, j) for j in range(N)] for t in range(N)])
    h = model.word_emb(x) * model.emb_scale
    R = model.pos_emb(torch.arange(N - 1, -1, -1.0)).double()
    layer = model.layers[0]
    h, _ = layer(h, None, R, mask, model.r_w_bias, model.r_r_bias)
    full = h @ model.word_emb.weight.T + model.out_bias
    torch.testing.assert_close(seg, full)


@pytest.mark.parametrize("overrides", [{}, {"mem_len": 8}, {"pre_lnorm": True},
                                       {"untie_r": True, "n_layer": 3}, {"clamp_len": 3}])
def test_n_layer_recurrence_equals_naive_reference(tiny_model, overrides):
    model = tiny_model(**overrides)
    x = torch.randint(0, 27, (2, 16))
    cfg = model.cfg
    seg = run_segments(model, x, cfg.tgt_len)
    ref = naive_forward(model, x, segment_visibility(cfg.tgt_len, cfg.mem_len))
    torch.testing.assert_close(seg, ref)


def test_longer_memory_at_evaluation_without_rebuilding(tiny_model):
    model = tiny_model(mem_len=6)
    x = torch.randint(0, 27, (1, 24))
    model.set_lengths(mem_len=18, clamp_len=10)
    out = model(x[:, :12])
    assert out.mems[0].shape == (1, 12, 16)
    seg = run_segments(model, x, 6)
    ref = naive_forward(model, x, segment_visibility(6, 18))
    torch.testing.assert_close(seg, ref)


# 5. stop-gradient ----------------------------------------------------------------
def test_no_gradient_reaches_the_previous_segment(tiny_model):
    model = tiny_model()
    model.train()
    captured = []
    hook = model.layers[0].register_forward_hook(lambda m, i, o: captured.append(o[0]))
    x = torch.randint(0, 27, (2, 12))
    out1 = model(x[:, :6], targets=x[:, :6])
    assert all(not m.requires_grad for m in out1.mems)
    out2 = model(x[:, 6:], out1.mems, targets=x[:, 6:])
    hook.remove()
    seg1_hidden = captured[0]
    assert seg1_hidden.requires_grad
    (grad,) = torch.autograd.grad(out2.loss, seg1_hidden, allow_unused=True)
    assert grad is None
    # Sanity check of the check: without the stop-gradient a gradient would flow.
    live_mems = [model.word_emb(x[:, :6]) * model.emb_scale, seg1_hidden]
    out3 = model(x[:, 6:], live_mems, targets=x[:, 6:])
    (grad,) = torch.autograd.grad(out3.loss, seg1_hidden, allow_unused=True)
    assert grad is not None and grad.abs().sum() > 0


# 6. fast path == explicit path ------------------------------------------------------
@pytest.mark.parametrize("attn_type", ["rel", "abs", "abs_far", "shaw"])
@pytest.mark.parametrize("with_mem,same_length", [(False, False), (True, False), (True, True)])
def test_fast_path_equals_explicit_path(tiny_model, attn_type, with_mem, same_length):
    model = tiny_model(attn_type=attn_type, same_length=same_length).float()
    x = torch.randint(0, 27, (2, 6))
    mems = model(x).mems if with_mem else None

    def run(fast: bool):
        model.zero_grad()
        model.fast_attn = fast
        out = model(x, mems, targets=x)
        out.loss.backward()
        return out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    (lf, gf), (le, ge) = run(True), run(False)
    torch.testing.assert_close(lf, le, rtol=1e-5, atol=1e-5)
    for name in gf:
        torch.testing.assert_close(gf[name], ge[name], rtol=1e-4, atol=1e-6, msg=name)


def test_same_length_window_and_no_nan_without_memory(tiny_model):
    mask = attention_mask(qlen=4, mlen=6, same_length=True, mem_len=5)
    assert (~mask).sum(-1).tolist() == [5, 5, 5, 5]     # every query sees mem_len keys
    model = tiny_model(same_length=True, mem_len=0)
    out = model(torch.randint(0, 27, (2, 6)))
    assert torch.isfinite(out.logits).all()


def test_bf16_autocast_masked_scores_stay_finite(tiny_model):
    model = tiny_model().float()
    x = torch.randint(0, 27, (2, 6))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for fast in (True, False):
            model.fast_attn = fast
            out = model(x, model(x).mems, targets=x)
            assert torch.isfinite(out.logits).all() and torch.isfinite(out.loss)


# 7. generation -------------------------------------------------------------------
@pytest.mark.parametrize("attn_type,mem_len", [("rel", 64), ("abs", 0), ("shaw", 64)])
def test_generate_with_memory_equals_full_recomputation(tiny_model, attn_type, mem_len):
    model = tiny_model(attn_type=attn_type, mem_len=mem_len, tgt_len=5 if mem_len else 64)
    prompt = torch.randint(0, 27, (2, 13))
    fast = model.generate(prompt, 20, temperature=0)
    seq = prompt
    for _ in range(20):   # recompute the whole prefix for every new token
        nxt = model(seq).logits[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt], 1)
    assert fast.equal(seq)


def test_generate_sampling_is_reproducible_and_respects_top_k(tiny_model):
    model = tiny_model()
    prompt = torch.randint(0, 27, (8,))

    def g() -> torch.Generator:
        return torch.Generator().manual_seed(3)

    a = model.generate(prompt, 30, temperature=1.0, top_k=1, generator=g())
    assert a.equal(model.generate(prompt, 30, temperature=0))   # top-1 is greedy
    b = model.generate(prompt, 30, temperature=1.0, generator=g())
    c = model.generate(prompt, 30, temperature=1.0, generator=g())
    assert b.equal(c) and b.shape == (38,)
    with pytest.raises(ValueError, match="temperature"):
        model.generate(prompt, 3, temperature=-1.0)


def test_generate_reads_every_token_once(tiny_model):
    # memory (4) shorter than the prompt (13): old states drop out, nothing is recomputed
    model = tiny_model(tgt_len=5, mem_len=4)
    seen = []
    model.word_emb.register_forward_hook(lambda m, inp, out: seen.append(inp[0].size(1)))
    out = model.generate(torch.randint(0, 27, (2, 13)), 20, temperature=0)
    assert out.shape == (2, 33)
    assert sum(seen) == 13 + 20 - 1  # the prompt once, then each new token once (the last is not read)


def test_generate_text_takes_and_returns_a_string(tiny_model):
    model = tiny_model()
    text = generate_text(model, "the king ", 12, temperature=0)
    assert isinstance(text, str) and len(text) == 21 and text.startswith("the king ")
    assert text == decode(model.generate(encode("the king "), 12, temperature=0))  # ids: the same
    with pytest.raises(ValueError, match="'K' at position 4 is not in VOCAB"):
        generate_text(model, "the King", 3)
    assert txl_minimal.generate_text is generate_text  # the public name


def test_generate_takes_ids_only_and_names_generate_text_for_a_string(tiny_model):
    model = tiny_model()
    ids = model.generate([20, 8, 5], 4, temperature=0)  # a list of ints is a prompt too
    assert ids.equal(model.generate(torch.tensor([20, 8, 5]), 4, temperature=0)) and ids.shape == (7,)
    with pytest.raises(ValueError, match=r"takes token ids, not text.*Fix: txl_minimal\.generate_text\(model"):
        model.generate("the king ", 3)
    with pytest.raises(ValueError, match="generate_text takes a string prompt"):
        generate_text(model, encode("the king "), 3)


ALONE = """
import torch
from model import TXLConfig, TransformerXL, validation
assert validation is None  # no package around it: no input checks
torch.manual_seed(0)
for attn_type, mem_len in (("rel", 6), ("abs", 0)):  # the paper's model and the vanilla baseline
    model = TransformerXL(TXLConfig(n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32,
                                    tgt_len=5, mem_len=mem_len, attn_type=attn_type))
    x = torch.randint(0, 27, (2, 10))
    out = model(x[:, :5], targets=x[:, 1:6])
    out = model(x[:, 5:9], out.mems, targets=x[:, 6:10])
    out.loss.backward()
    grads = all(p.grad is not None for p in model.parameters() if p.dim() > 1)
    print(attn_type, round(out.loss.item(), 4), tuple(out.logits.shape), grads)
from dataclasses import replace
model.cfg = replace(model.cfg, mem_len=3)  # lengths: a new config (set_lengths and generate are the package's)
print(model(x[:, :5]).mems[0].shape[1], hasattr(model, "set_lengths"), hasattr(model, "generate"),
      hasattr(model.layers[0].dec_attn, "score_terms"))  # return_terms: controls.py's too
try:
    model(x[:, :5], return_terms=True)
except ValueError as e:
    print(e)
"""


def test_model_py_copied_alone_runs_the_paper_and_the_baseline(tmp_path):
    src = Path(__file__).resolve().parents[1] / "txl_minimal" / "model.py"
    shutil.copy(src, tmp_path / "model.py")
    run = subprocess.run([sys.executable, "-c", ALONE], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)}, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert [line.split()[0] for line in lines[:2]] == ["rel", "abs"]
    assert all(line.endswith("(2, 4, 27) True") for line in lines[:2])  # the second segment's logits; trained
    assert lines[2] == "3 False False False"  # a new config's memory length is read; controls.py's methods are not
    assert lines[3].startswith("return_terms needs txl_minimal/controls.py")  # said, not an AttributeError


def test_help_shows_the_inputs_and_every_output_with_units():
    shown = pydoc.plain(pydoc.render_doc(TransformerXL))  # what help(TransformerXL) prints
    assert all(re.search(rf"^[\s|]*{name}\s+\(B, T\) integer ids", shown, re.M) for name in ("tokens", "targets"))
    assert "previous segment's ``out.mems``" in shown and "return_attn" in shown
    shown = pydoc.plain(pydoc.render_doc(TXLOutput))
    for field, unit in (("logits", "nats"), ("mems", "d_model"), ("loss", "nats"), ("nll", "nats"),
                        ("attn", "probabilities"), ("terms", "1/sqrt(d_head)")):
        assert re.search(rf"^[\s|]*{field}:.*{re.escape(unit)}", shown, re.M), field


# 8. errors -----------------------------------------------------------------------
@pytest.mark.parametrize("field,value", [("n_layer", 0), ("d_model", -4), ("mem_len", -1),
                                         ("clamp_len", -2), ("attn_type", "relative"),
                                         ("dropout", 1.5), ("vocab_size", 2.5), ("d_model", 7),
                                         ("n_layer", True), ("dropout", "0.1")])
def test_bad_config_names_the_field(tiny_config, field, value):
    with pytest.raises(ValueError, match=field):
        tiny_config(**{field: value})


def test_bad_tokens_give_a_clear_error(tiny_model):
    model = tiny_model()
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 26\]"):
        model(torch.tensor([[1, 2, 27]]))
    with pytest.raises(ValueError, match="token ids"):
        model(torch.tensor([[-1, 2, 3]]))
    with pytest.raises(ValueError, match="shape"):
        model(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="batch"):
        model(torch.tensor([[1, 2, 3]]), model(torch.tensor([[1, 2], [3, 4]])).mems)
    with pytest.raises(ValueError, match=r"target ids must be in \[0, 26\]"):
        model(torch.tensor([[1, 2, 3]]), targets=torch.tensor([[1, 2, 27]]))
    with pytest.raises(ValueError, match="at least one token"):
        model(torch.zeros(2, 0, dtype=torch.long))


def test_set_lengths_validates_first_and_touches_one_model_only(tiny_config):
    cfg = tiny_config(mem_len=8)
    a, b = TransformerXL(cfg), TransformerXL(cfg)
    with pytest.raises(ValueError, match="mem_len"):
        a.set_lengths(tgt_len=3, mem_len=-3)
    assert (a.cfg.tgt_len, a.cfg.mem_len) == (cfg.tgt_len, 8)  # unchanged after the error
    a.set_lengths(mem_len=16)
    assert a.layers[0].dec_attn.cfg.mem_len == 16  # the layers see the change...
    assert b.cfg.mem_len == 8 and cfg.mem_len == 8  # ...another model built from cfg does not


# adaptive span (Sukhbaatar et al., 2019) ----------------------------------------------
def test_span_mask_is_one_then_linear_then_zero():
    from txl_minimal.variants import span_mask
    z = torch.tensor([10.0, 3.5])
    dist = torch.arange(0, 60).float()
    m = span_mask(dist, z, ramp=8)
    for h, zh in enumerate(z.tolist()):
        assert (m[h][dist <= zh] == 1).all()
        assert (m[h][dist >= zh + 8] == 0).all()
        ramp = (dist > zh) & (dist < zh + 8)
        torch.testing.assert_close(m[h][ramp], (8 + zh - dist[ramp]) / 8)


def test_adaptive_span_gets_gradients_and_trimming_changes_nothing(tiny_model):
    model = tiny_model(adaptive_span=True, span_ramp=2, mem_len=12, tgt_len=6, n_layer=2)
    with torch.no_grad():
        for i, layer in enumerate(model.layers):
            layer.dec_attn.span_frac.copy_(torch.tensor([0.1, 0.2]) * (i + 1))
    x = torch.randint(0, 27, (2, 24))
    mems = None
    for s in range(0, 18, 6):
        mems = model(x[:, s:s + 6], mems).mems
    assert mems[0].size(1) == 12
    out = model(x[:, 18:], mems, targets=x[:, 18:])
    out.loss.backward()
    for layer in model.layers:
        g = layer.dec_attn.span_frac.grad
        assert g is not None and (g != 0).all()
    # the layer-0 span (0.1, 0.2) * 18 tokens + ramp 2 reaches 6 keys back: memory trimmed
    assert model.layers[0].dec_attn.trim_memory(mems[0]).size(1) == 6
    untrimmed = tiny_model(adaptive_span=True, span_ramp=2, mem_len=12, tgt_len=6, n_layer=2)
    untrimmed.load_state_dict(model.state_dict())
    for layer in untrimmed.layers:
        layer.dec_attn.trim_memory = lambda mem: mem
    torch.testing.assert_close(untrimmed(x[:, 18:], mems).logits, model(x[:, 18:], mems).logits)
    # a span penalty is part of the loss
    plain = model(x[:, 18:], mems, targets=x[:, 18:])
    assert plain.loss > plain.nll.mean()


@pytest.mark.parametrize("attn_type", ["abs", "abs_far", "shaw"])
def test_untie_r_beside_an_attention_without_u_and_v_changes_nothing(tiny_model, attn_type):
    """u and v belong to "rel" alone: untie_r=True on another attention (the authors' flag, set for all) gives
    the same model, with (None, None) from uv, not an AttributeError on the first segment."""
    x = torch.randint(0, 27, (2, 6))
    tied, untied = tiny_model(attn_type=attn_type), tiny_model(attn_type=attn_type, untie_r=True)
    assert all(untied.uv(n) == (None, None) for n in range(untied.cfg.n_layer))
    out_t, out_u = tied(x, tied(x).mems), untied(x, untied(x).mems)
    torch.testing.assert_close(out_u.logits, out_t.logits, rtol=0, atol=0)


@pytest.mark.parametrize("attn_type, keys", [("rel", "abcd"), ("shaw", "ab"), ("abs", "a"), ("abs_far", "a")])
def test_the_terms_returned_are_the_ones_txloutput_names_for_each_attention(tiny_model, attn_type, keys):
    model = tiny_model(attn_type=attn_type)
    x = torch.randint(0, 27, (1, 6))
    out = model(x, model(x).mems, return_terms=True)
    assert [sorted(t) for t in out.terms] == [list(keys)] * model.cfg.n_layer
    assert f'"{keys[-1]}"' in TXLOutput.__doc__  # the docstring lists each attention's keys
