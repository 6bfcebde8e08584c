"""fast.py: every fast path gives the explicit path's numbers (speed itself: benchmarks/)."""
from __future__ import annotations

import pytest
import torch

from txl_minimal import fast, model as model_py
from txl_minimal.model import RelMultiHeadAttn, TransformerXL, rel_shift
from txl_minimal.train import CompiledSegments, amp_context, choose_precision, cpu_precision, preset
from txl_minimal.utils import bf16_speedup

from tiny import run_segments


# 1. dropout ---------------------------------------------------------------------------
@pytest.mark.parametrize("p", [0.1, 0.5, 0.03])
def test_keep_mask_keeps_one_minus_p_and_scales(p):
    torch.manual_seed(0)
    mask = fast.keep_mask(torch.Size([1000, 1000]), p, torch.device("cpu"))
    values = mask.unique()
    assert len(values) == 2 and values[0] == 0 and values[1].item() == pytest.approx(1 / (1 - p))
    kept = (mask > 0).float().mean().item()
    assert abs(kept - (1 - p)) < 5 * (p * (1 - p) / 1e6) ** 0.5 + 1 / 65536  # 5 standard errors
    assert abs(mask.mean().item() - 1) < 0.01  # E[y] = x
    # every 16-bit lane of the 64-bit draws is used alike (the sign bit included)
    lanes = (mask.flatten()[: 4 * 200_000] > 0).view(-1, 4).float().mean(0)
    assert (lanes - (1 - p)).abs().max() < 0.005


def test_keep_mask_follows_the_seed_and_odd_sizes():
    torch.manual_seed(3)
    a = fast.keep_mask(torch.Size([7, 13]), 0.2, torch.device("cpu"))
    b = fast.keep_mask(torch.Size([7, 13]), 0.2, torch.device("cpu"))
    torch.manual_seed(3)
    assert torch.equal(a, fast.keep_mask(torch.Size([7, 13]), 0.2, torch.device("cpu")))
    assert not torch.equal(a, b) and a.shape == (7, 13)


def test_dropout_backward_uses_the_forward_mask():
    torch.manual_seed(0)
    x = torch.randn(64, 33, requires_grad=True)
    y = fast.dropout(x, 0.3, training=True)
    mask = (y / x).detach()  # 0 or 1 / 0.7 per element
    assert set(torch.round(mask * 7).unique().tolist()) == {0.0, 10.0}
    g = torch.randn_like(y)
    y.backward(g)
    torch.testing.assert_close(x.grad, g * mask)


def test_dropout_is_the_identity_in_eval_and_at_zero():
    x = torch.randn(5, 6)
    assert fast.dropout(x, 0.3, training=False) is x and fast.dropout(x, 0.0, training=True) is x


# 2. rel_shift as a view -----------------------------------------------------------------
@pytest.mark.parametrize("lead,qlen,mlen", [((), 4, 0), ((2,), 5, 3), ((2, 3), 6, 6), ((1,), 1, 4), ((3,), 7, 1)])
def test_rel_shift_view_equals_the_padded_shift_where_the_mask_keeps(lead, qlen, mlen):
    klen = qlen + mlen
    x = torch.randn(*lead, qlen, klen, dtype=torch.float64, requires_grad=True)
    keep = ~model_py.attention_mask(qlen, mlen, False, mlen)  # j <= mlen + i
    explicit, view = rel_shift(x), fast.rel_shift(x)
    assert torch.equal(explicit[..., keep], view[..., keep])
    # the backward: a gradient that is 0 on masked entries, as softmax gives there
    g = torch.randn_like(explicit) * keep
    (g_explicit,) = torch.autograd.grad(explicit, x, g)
    (g_view,) = torch.autograd.grad(view, x, g)
    torch.testing.assert_close(g_view, g_explicit, rtol=0, atol=0)


def test_rel_shift_view_of_a_non_contiguous_tensor():
    base = torch.randn(3, 2, 5, 9, dtype=torch.float64)
    x = base.transpose(0, 1)  # (2, 3, 5, 9), not contiguous
    keep = ~model_py.attention_mask(5, 4, False, 4)
    assert torch.equal(rel_shift(x)[..., keep], fast.rel_shift(x)[..., keep])


# 3. the model: fast == explicit, in training and over segments of an evaluation ---------
CONFIGS = [dict(), dict(untie_r=True), dict(pre_lnorm=True), dict(same_length=True), dict(clamp_len=3),
           dict(attn_type="abs"), dict(attn_type="abs_far"), dict(attn_type="shaw"),
           dict(adaptive_span=True, span_ramp=2, span_init=0.3), dict(mem_len=3), dict(mem_len=0),
           dict(cutoffs=[10, 20], div_val=2)]


def _segments(model, xs, fast_on: bool, train: bool):
    """Log-probabilities of consecutive segments (and the parameters' gradients if train)."""
    model.fast_attn = fast_on
    return run_segments(model, xs, train)


@pytest.mark.parametrize("overrides", CONFIGS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "rel")
def test_fast_paths_give_the_explicit_log_probabilities(tiny_model, overrides):
    if overrides.get("adaptive_span"):
        import txl_minimal.variants  # noqa: F401  (registers the span attention)
    if overrides.get("attn_type") == "shaw":
        import txl_minimal.variants  # noqa: F401,F811
    model = tiny_model(dropout=0.0, dropatt=0.0, dtype=torch.float32, **overrides)
    xs = list(torch.randint(0, 27, (4, 2, 6)))  # four segments: the memory fills and slides
    for train in (True, False):
        fast_lp, fast_g, fast_m = _segments(model, xs, True, train)
        slow_lp, slow_g, slow_m = _segments(model, xs, False, train)
        for a, b in zip(fast_lp, slow_lp):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        for a, b in zip(fast_m, slow_m):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
            assert not a.requires_grad  # SG: the memory carries no gradient
        for name in slow_g:
            torch.testing.assert_close(fast_g[name], slow_g[name], rtol=1e-4, atol=1e-6, msg=name)


def test_evaluation_projects_only_the_new_rows(tiny_model, monkeypatch):
    model = tiny_model(dtype=torch.float32, mem_len=6)
    rows = []  # the rows of every (batch, rows, features) input of a linear layer
    real = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear",
                        lambda x, w, b=None: (rows.append(x.shape[1]) if x.dim() == 3 else None) or real(x, w, b))
    xs = list(torch.randint(0, 27, (4, 2, 4)))
    lps, _, _ = _segments(model, xs, True, train=False)
    assert rows and max(rows) == 4  # the memory's rows (up to 6) are never projected again
    rows.clear()
    slow, _, _ = _segments(model, xs, False, train=False)
    assert max(rows) == 4 + 6  # the explicit path projects [memory o segment]
    for a, b in zip(lps, slow):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_evaluation_cache_notices_changed_weights_and_memory(tiny_model):
    model = tiny_model(dtype=torch.float32, mem_len=6)
    x1, x2, x3 = torch.randint(0, 27, (3, 2, 4))

    def run(fast_on: bool, change):
        model.fast_attn = fast_on
        with torch.no_grad():
            saved = {k: v.clone() for k, v in model.state_dict().items()}
            m = model(x1).mems
            m = model(x2, m).mems
            change(m)
            out = model(x3, m).logits
            model.load_state_dict(saved)
        return out

    def new_weights(mems):
        model.layers[0].dec_attn.qkv_net.weight.mul_(1.5)

    def new_memory(mems):
        mems[1].mul_(-1.0)

    for change in (new_weights, new_memory):
        torch.testing.assert_close(run(True, change), run(False, change), rtol=1e-5, atol=1e-5)


def test_both_routes_of_relative_attention_agree_with_gradients():
    """The GPU's route (SDPA with a differentiated bias) and the CPU's (baddbmm), run here on a CPU."""
    torch.manual_seed(0)
    B, H, T, M, D = 2, 3, 5, 4, 8
    K = T + M
    q_u, q_v = torch.randn(2, B, H, T, D, dtype=torch.float64).unbind(0)
    k, val = torch.randn(2, B, H, K, D, dtype=torch.float64).unbind(0)
    r = torch.randn(H, K, D, dtype=torch.float64)
    mask = model_py.attention_mask(T, M, False, M)
    bias = torch.zeros(mask.shape, dtype=torch.float64).masked_fill_(mask, torch.finfo(torch.float64).min)
    inputs = [t.requires_grad_() for t in (q_u, q_v, k, val, r)]
    outs, grads = [], []
    for sdpa in (True, False):
        out = fast.relative_attention(*inputs[:4], inputs[4], bias, D ** -0.5, 0.0, True, sdpa=sdpa)
        outs.append(out)
        grads.append(torch.autograd.grad(out.pow(2).sum(), inputs))
    # a naive reference: the explicit model code's formula
    score = (q_u @ k.transpose(-1, -2) + rel_shift(q_v @ r.transpose(-1, -2))) * D ** -0.5
    naive = score.masked_fill(mask, float("-inf")).softmax(-1) @ val
    for out in outs:
        torch.testing.assert_close(out, naive)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def test_fast_paths_follow_the_flag(tiny_model):
    """fast_attn swaps fast.py's subclasses in and out: the model, every attention and dropout; the
    weights, the state dict's keys and what print(model) shows stay the same."""
    import txl_minimal.variants  # noqa: F401  (the span attention: a variant's class is swapped too)
    for overrides in (dict(), dict(adaptive_span=True)):
        model = tiny_model(**overrides)
        swapped = [m for m in model.modules() if isinstance(m, (TransformerXL, RelMultiHeadAttn, torch.nn.Dropout))]
        shown, state = repr(model), model.state_dict()
        assert model.fast_attn and len(swapped) > 2 * len(model.layers)
        assert all(isinstance(m, fast._Fast) for m in swapped)
        model.fast_attn = False
        assert not model.fast_attn and not any(isinstance(m, fast._Fast) for m in model.modules())
        assert type(model) is TransformerXL and all(type(m).__module__ != "txl_minimal.fast" for m in swapped)
        model.fast_attn = True
        assert all(isinstance(m, fast._Fast) for m in swapped) and repr(model) == shown
        assert all(model.state_dict()[k] is v or torch.equal(model.state_dict()[k], v) for k, v in state.items())


def test_a_fast_model_pickles_and_comes_back_fast(tiny_model, tmp_path):
    """torch.save(model) / torch.load: the same class (fast.py's, made again by fast_class) and logits."""
    model = tiny_model(dtype=torch.float32).eval()
    x = torch.randint(0, 27, (2, 5))
    torch.save(model, tmp_path / "m.pt")
    back = torch.load(tmp_path / "m.pt", weights_only=False)
    assert type(back) is type(model) and isinstance(back, fast.FastModel) and back.fast_attn
    assert type(back.layers[0].dec_attn) is type(model.layers[0].dec_attn)
    torch.testing.assert_close(back(x).logits, model(x).logits, rtol=0, atol=0)


def test_a_subclass_keeps_its_own_attention_and_memory_with_fast_paths_on(tiny_model):
    """A subclass that overrides a step (attend, next_memory) computes its own version with the fast
    paths on too: they replace only model.py's steps."""
    calls = []

    class Doubled(RelMultiHeadAttn):
        def attend(self, *args, **kwargs):
            calls.append("attend")
            out, prob = super().attend(*args, **kwargs)
            return 2 * out, prob

    class Forgetful(TransformerXL):
        def next_memory(self, hids, mems):
            calls.append("memory")
            return [torch.zeros_like(m) for m in super().next_memory(hids, mems)]

    base = tiny_model(dtype=torch.float32, dropout=0.0)
    model = Forgetful(base.cfg)
    model.load_state_dict(base.state_dict())
    model.fast_attn = False
    for layer in model.layers:
        layer.dec_attn.__class__ = Doubled
    x1, x2 = torch.randint(0, 27, (2, 2, 5))
    results = []
    for fast_on in (False, True):
        model.fast_attn = fast_on
        calls.clear()
        with torch.no_grad():
            out = model(x2, model(x1).mems)
        results.append(out.logits)
        assert calls.count("attend") == 2 * len(model.layers) and calls.count("memory") == 2, (fast_on, calls)
        assert all(m.abs().sum() == 0 for m in out.mems)
    torch.testing.assert_close(results[0], results[1], rtol=1e-5, atol=1e-5)


def test_flex_set_on_an_explicit_model_takes_effect_when_fast_paths_come_on(tiny_model):
    model = tiny_model()
    model.fast_attn = False
    model.flex_attn = True  # an explicit model has no FlexAttention path: nothing changes yet
    if fast.flex_available():
        model.fast_attn = True
        assert model.flex_attn and all(l.dec_attn.flex for l in model.layers)
    else:
        with pytest.raises(ValueError, match="flex_attn needs torch.nn.attention.flex_attention"):
            model.fast_attn = True


# 4. torch.compile: the segment compiles without a graph break ---------------------------
def test_segment_compiles_without_graph_breaks(tiny_model):
    model = tiny_model(dtype=torch.float32, dropout=0.1)
    segment = torch.compile(model.segment, backend="eager", fullgraph=True)  # a break raises
    x = torch.randint(0, 27, (2, 5))
    model.train()
    mems = None
    for _ in range(2):
        out = segment(x, mems, x)
        out.loss.backward()
        mems = out.mems
    model.eval()
    with torch.no_grad():
        compiled = segment(x, mems, x).logits
        assert torch.allclose(compiled, model(x, mems, x).logits, atol=1e-5)


def test_compiled_training_falls_back_with_one_line(tiny_model, monkeypatch, capsys):
    class FakeCompilerError(RuntimeError):
        pass
    FakeCompilerError.__module__ = "torch._inductor.exc"

    def broken(*args, **kwargs):
        raise FakeCompilerError("no C++ compiler found")
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: broken)
    model = tiny_model(dtype=torch.float32)
    wrapped = CompiledSegments(model)
    x = torch.randint(0, 27, (2, 5))
    out = wrapped(x, None, x)
    torch.testing.assert_close(out.logits, model(x, None, x).logits)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and "torch.compile is not available here" in lines[0]
    with pytest.raises(ValueError, match="token ids must be in"):  # the checks still run, eagerly
        wrapped(x + 100, None, None)


# 5. amp="auto" on a CPU: bf16 only where measured faster ----------------------------------
def test_bf16_speedup_is_a_measured_ratio():
    ratio = bf16_speedup("cpu", 64, 32, 48, reps=2)
    assert 0 < ratio < 100


@pytest.mark.parametrize("speedup,expected", [(2.4, "bf16"), (1.05, "off"), (0.5, "off")])
def test_auto_precision_picks_bf16_only_where_faster(monkeypatch, capsys, speedup, expected, tmp_path):
    import txl_minimal.devices as devices
    cpu_precision.cache_clear()
    monkeypatch.setattr(devices, "bf16_speedup", lambda *a, **k: speedup)
    model_cfg, cfg = preset("cpu-tiny", device="cpu", out=str(tmp_path))
    autocast, _ = amp_context(choose_precision(cfg, model_cfg, torch.device("cpu"))["amp"], torch.device("cpu"))
    assert isinstance(autocast, torch.autocast) == (expected == "bf16")
    choose_precision(cfg, model_cfg, torch.device("cpu"))  # measured and printed once per size
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and f"{speedup:.2f}x fp32" in out[0]
    assert ("bf16 autocast" in out[0]) == (expected == "bf16")
    cpu_precision.cache_clear()


def test_amp_off_never_measures(monkeypatch, tmp_path):
    import txl_minimal.devices as devices
    monkeypatch.setattr(devices, "bf16_speedup", lambda *a, **k: pytest.fail("measured"))
    model_cfg, cfg = preset("cpu-tiny", device="cpu", out=str(tmp_path), amp="off")
    autocast, _ = amp_context(choose_precision(cfg, model_cfg, torch.device("cpu"))["amp"], torch.device("cpu"))
    assert not isinstance(autocast, torch.autocast)
