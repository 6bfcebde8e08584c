"""The GPU speed levers of issue 30, tested on a CPU: each gives the numbers of the path it
replaces, and each can be switched off (benchmarks/gpu_compare.py times them on a GPU;
tests/gpu/ repeats the equalities there)."""
from __future__ import annotations

import csv
import math
import traceback
from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import txl_minimal.devices as devices
from txl_minimal import fast
from txl_minimal.command_line import parse_value
from txl_minimal.checkpoint import load_checkpoint
from txl_minimal.evaluate import evaluate
from txl_minimal.model import TransformerXL
from txl_minimal.train import FIELD_TYPES, Segments, TrainConfig, adam_options, compile_mode, train
from txl_minimal.utils import LN2

from tiny import synthetic_corpus, tiny_cfg, tiny_train_cfg

CPU, CUDA = torch.device("cpu"), torch.device("cuda")  # (a CUDA device object needs no GPU)


class Reads(TorchDispatchMode):
    """Counts the operators run inside it; ``reads``: the values read back to Python (.item(),
    int(), bool() of a tensor), each a wait for the GPU on CUDA; not counted: torch.optim's, which
    read Adam's step counters, kept on the host on any device (fused Adam reads none)."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.ops[name] += 1
        if name in ("_local_scalar_dense", "is_nonzero"):
            self.reads += not any("torch/optim/" in f.filename.replace("\\", "/") for f in traceback.extract_stack())
        return func(*args, **(kwargs or {}))


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


# 1. no host sync per training step ------------------------------------------------------------
def test_a_training_step_reads_no_value_back(tmp_path):
    """Every log row and evaluation reads values back; a step between them reads none (the
    loss stays on the device, the ids are checked once). 8 more steps, the same reads."""
    corpus = synthetic_corpus("the quick brown fox jumps over the lazy dog ")
    counts = []
    for steps in (4, 12):
        cfg = tiny_train_cfg(tmp_path / str(steps), max_steps=steps, eval_interval=steps, log_interval=steps)
        with Reads() as reads:
            train(tiny_cfg(), cfg, corpus, progress=False)
        counts.append(reads.reads)
    assert counts[0] > 0 and counts[1] == counts[0], counts  # (before: 5 reads per step)


def test_log_rows_are_the_mean_of_each_steps_nll(tmp_path, monkeypatch):
    """The loss read back once per row is the mean of the steps' mean NLLs, as the per-step
    floats gave it: log.csv and TrainResult hold exactly those numbers."""
    seen = []
    segment = TransformerXL.segment

    def recording(self, *args, **kwargs):
        out = segment(self, *args, **kwargs)
        if self.training:
            seen.append(out.nll.mean().item())
        return out
    monkeypatch.setattr(TransformerXL, "segment", recording)
    cfg = tiny_train_cfg(tmp_path, max_steps=7, log_interval=3, eval_interval=7)
    res = train(tiny_cfg(), cfg, synthetic_corpus("abc def ghi "), progress=False)
    rows = list(csv.DictReader(open(tmp_path / "log.csv")))
    assert [int(r["step"]) for r in rows] == [3, 6, 7]
    means = [sum(seen[0:3]) / 3, sum(seen[3:6]) / 3, seen[6]]
    assert [r["train_bpc"] for r in rows] == [f"{m / LN2:.5f}" for m in means]
    assert res.train_bpc == means[-1] / LN2


def test_segments_check_the_ids_unless_the_loop_did(tiny_model):
    model = tiny_model(dtype=torch.float32)
    x = torch.randint(0, 27, (2, 5))
    with Reads() as reads:
        Segments(model, ids_checked=True)(x, None, x)
    assert reads.reads == 0
    with pytest.raises(ValueError, match="token ids must be in"):
        Segments(model)(x + 100, None, None)
    with pytest.raises(ValueError, match=r"tokens must be an integer tensor"):  # the other checks stay
        Segments(model, ids_checked=True)(x.float(), None, None)


def test_training_checks_the_texts_ids_once(tmp_path):
    corpus = synthetic_corpus("abc def ")
    corpus.train[5] = 40  # beyond the 27 characters
    with pytest.raises(ValueError, match=r"synthetic's token ids must be in \[0, 26\].*max 40"):
        train(tiny_cfg(), tiny_train_cfg(tmp_path), corpus, progress=False)


# 2. Adam: fused on CUDA, foreach elsewhere; any choice resumes --------------------------------
def test_adam_auto_is_fused_on_cuda_and_foreach_elsewhere(monkeypatch):
    assert adam_options("auto", CPU) == dict(foreach=True)
    assert adam_options("for-loop", CPU) == dict(foreach=False)
    monkeypatch.setattr(devices, "_fused_adam_runs", lambda device: True)
    assert adam_options("auto", CUDA) == dict(fused=True)
    monkeypatch.setattr(devices, "_fused_adam_runs", lambda device: device != "cpu")
    with pytest.raises(ValueError, match="no fused Adam on cpu.*Fix: adam='auto' or 'foreach'"):
        adam_options("fused", CPU)
    with pytest.raises(ValueError, match="TrainConfig.adam must be one of"):
        TrainConfig(adam="apex")


def test_foreach_adam_gives_the_for_loop_numbers(tmp_path):
    """On a CPU "auto" is foreach, bit for bit the for-loop that was torch's default there (so the
    notebooks' stored numbers stay)."""
    corpus = synthetic_corpus("the quick brown fox jumps over the lazy dog ")
    runs = {a: _weights(train(tiny_cfg(), tiny_train_cfg(tmp_path / a, adam=a, max_steps=8), corpus,
                              progress=False).model) for a in ("foreach", "for-loop")}
    assert _same(runs["foreach"], runs["for-loop"])


ADAMS = ["foreach", "for-loop", pytest.param("fused", marks=pytest.mark.skipif(
    not devices._fused_adam_runs("cpu"), reason="this torch has no fused Adam on a CPU (torch < 2.4)"))]


@pytest.mark.parametrize("adam", ADAMS)
def test_each_adam_resumes_bit_exactly(tmp_path, adam):
    corpus = synthetic_corpus("the quick brown fox jumps over the lazy dog ")
    straight = train(tiny_cfg(), tiny_train_cfg(tmp_path / "a", adam=adam), corpus, progress=False)
    train(tiny_cfg(), tiny_train_cfg(tmp_path / "b", adam=adam), corpus, stop_at=7, progress=False)
    resumed = train(tiny_cfg(), tiny_train_cfg(tmp_path / "b", adam=adam), corpus, resume=True, progress=False)
    assert _same(_weights(straight.model), _weights(resumed.model))


@pytest.mark.parametrize("saved", ADAMS)
def test_a_resume_keeps_this_runs_adam(tmp_path, saved):
    """A checkpoint of one implementation resumes under another: the state loads, and the run goes on
    with its own choice (torch would take the saved one's flags)."""
    corpus = synthetic_corpus("abc def ghi ")
    train(tiny_cfg(), tiny_train_cfg(tmp_path, adam=saved), corpus, stop_at=4, progress=False)
    res = train(tiny_cfg(), tiny_train_cfg(tmp_path, adam="foreach"), corpus, resume=True, progress=False)
    group = load_checkpoint(tmp_path / "ckpt.pt")["optimizer"]["param_groups"][0]
    assert group["foreach"] is True and not group["fused"]
    assert math.isfinite(res.train_bpc)
    if saved == "for-loop":  # the same numbers: as if never interrupted
        straight = train(tiny_cfg(), tiny_train_cfg(tmp_path / "s", adam="for-loop"), corpus, progress=False)
        assert _same(_weights(straight.model), _weights(res.model))


# 3. torch.compile: "auto" on CUDA, CUDA graphs as an option ----------------------------------
def test_compile_mode(monkeypatch):
    monkeypatch.setattr(devices, "_has_triton", lambda: True)
    modes = {c: (compile_mode(TrainConfig(compile=c), CPU), compile_mode(TrainConfig(compile=c), CUDA))
             for c in (False, True, "auto", "reduce-overhead")}
    assert modes == {False: (None, None), True: ("default", "default"), "auto": (None, "default"),
                     "reduce-overhead": ("reduce-overhead", "reduce-overhead")}
    monkeypatch.setattr(devices, "_has_triton", lambda: False)  # no GPU code generator: eager
    assert compile_mode(TrainConfig(), CUDA) is None and TrainConfig().compile == "auto"
    with pytest.raises(ValueError, match=r"compile must be True or False, or one of \('auto', 'reduce-overhead'\)"):
        TrainConfig(compile="max")


def test_compile_is_set_from_the_command_line():
    parsed = {text: parse_value("compile", text, FIELD_TYPES) for text in ("reduce-overhead", "auto", "no", "True")}
    assert parsed == {"reduce-overhead": "reduce-overhead", "auto": "auto", "no": False, "True": True}
    with pytest.raises(ValueError, match="compile is true or false .*, or one of auto, reduce-overhead"):
        parse_value("compile", "max", FIELD_TYPES)


def test_cuda_graphs_mark_each_step_and_copy_the_memory(tiny_model, monkeypatch):
    """mode="reduce-overhead": a new step is announced before each call, and the memory handed to the
    next step is a copy (a CUDA graph's outputs are overwritten by its next replay)."""
    calls = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: calls.append(kw) or fn)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: calls.append("step"), raising=False)
    model = tiny_model(dtype=torch.float32)
    wrapped = Segments(model, "reduce-overhead", ids_checked=True)
    x = torch.randint(0, 27, (2, 6))
    out = wrapped(x, None, x)
    plain = model(x, None, x)
    assert calls == [dict(mode="reduce-overhead"), "step"]
    for copy, made in zip(out.mems, plain.mems):
        torch.testing.assert_close(copy, made, rtol=0, atol=0)
    kept = model.segment(x, None, x).mems
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(wrapped(x, None, x).mems, kept))
    assert calls[-1] == "step"


# 4. FlexAttention: the same numbers ----------------------------------------------------------
needs_flex = pytest.mark.skipif(not fast.flex_available(), reason="no FlexAttention in this torch (< 2.5)")
FLEX_CONFIGS = [dict(), dict(untie_r=True, pre_lnorm=True), dict(same_length=True, clamp_len=3), dict(mem_len=3),
                dict(mem_len=0)]
_ids = lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "rel"  # noqa: E731


def _logits(model, xs, train: bool):
    model.train(train)
    model.zero_grad()
    mems, outs = None, []
    with torch.set_grad_enabled(train):
        for x in xs:
            out = model(x, mems, targets=x)
            if train:
                out.loss.backward()
            mems, outs = out.mems, outs + [out.logits.detach()]
    return outs, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@needs_flex
@pytest.mark.filterwarnings("ignore:.*flex_attention called without torch.compile")
@pytest.mark.parametrize("overrides", FLEX_CONFIGS, ids=_ids)
def test_flex_attention_equals_the_explicit_code_in_evaluation(tiny_model, overrides):
    model = tiny_model(**overrides)  # float64
    xs = list(torch.randint(0, 27, (4, 2, 6)))
    model.fast_attn = False
    explicit, _ = _logits(model, xs, train=False)
    model.fast_attn, model.flex_attn = True, True
    assert model.flex_attn
    flex, _ = _logits(model, xs, train=False)
    for a, b in zip(flex, explicit):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)  # (its eager formula scores in float32)


@needs_flex
@pytest.mark.filterwarnings("ignore:.*flex_attention called without torch.compile")
@pytest.mark.parametrize("overrides", FLEX_CONFIGS[:3], ids=_ids)
def test_flex_attention_gradients(tiny_model, overrides, monkeypatch):
    """torch has no FlexAttention backward on a CPU (it refuses up front); its eager formula is
    device-agnostic, so with that check lifted the gradients are compared here (CUDA: tests/gpu)."""
    import torch.nn.attention.flex_attention as fa
    if not hasattr(fa, "_validate_device"):
        pytest.skip("this torch checks the device elsewhere")
    monkeypatch.setattr(fa, "_validate_device", lambda *args: None)
    model = tiny_model(**overrides)
    xs = list(torch.randint(0, 27, (3, 2, 6)))
    model.fast_attn = False
    explicit, g_explicit = _logits(model, xs, train=True)
    model.fast_attn, model.flex_attn = True, True
    flex, g_flex = _logits(model, xs, train=True)
    for a, b in zip(flex, explicit):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert g_flex.keys() == g_explicit.keys() and "layers.0.dec_attn.r_net.weight" in g_flex
    for name in g_explicit:
        torch.testing.assert_close(g_flex[name], g_explicit[name], rtol=1e-6, atol=1e-7, msg=name)


def test_flex_attention_needs_a_torch_that_has_it(tiny_model, monkeypatch):
    monkeypatch.setattr(fast, "flex_available", lambda: False)
    model = tiny_model()
    with pytest.raises(ValueError, match=r"flex_attn needs torch.nn.attention.flex_attention \(torch >= 2.5\).*Fix"):
        model.flex_attn = True
    model.flex_attn = False  # (off is always possible)
    assert not model.flex_attn


# 5. fewer layout copies: SDPA reads the projections' own layout -------------------------------
def test_strided_sdpa_equals_the_heads_first_copies(monkeypatch):
    torch.manual_seed(0)
    B, H, T, M, D = 3, 2, 5, 4, 8
    K = T + M
    from txl_minimal.model import attention_mask
    # q, k, v as the projection leaves them: (B, H, ., D) views of (B, ., H, D)
    q_u, q_v = (torch.randn(B, T, H, D, dtype=torch.float64).transpose(1, 2) for _ in range(2))
    k, val = (torch.randn(B, K, H, D, dtype=torch.float64).transpose(1, 2) for _ in range(2))
    r = torch.randn(H, K, D, dtype=torch.float64)
    bias = torch.zeros(T, K, dtype=torch.float64).masked_fill_(attention_mask(T, M, False, M), -1e300)
    inputs = [t.requires_grad_() for t in (q_u, q_v, k, val, r)]
    outs, grads = [], []
    for strided in (False, True):
        monkeypatch.setattr(fast, "STRIDED_SDPA", strided)
        out = fast.relative_attention(*inputs, bias, D ** -0.5, 0.0, True, sdpa=True)
        outs.append(out)
        grads.append(torch.autograd.grad(out.pow(2).sum(), inputs))
    torch.testing.assert_close(outs[1], outs[0])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def test_strided_sdpa_in_the_model(tiny_model, monkeypatch):
    monkeypatch.setattr(fast, "STRIDED_SDPA", True)
    model = tiny_model(dtype=torch.float32)
    xs = list(torch.randint(0, 27, (3, 2, 6)))
    fast_out, _ = _logits(model, xs, train=False)  # evaluation: the SDPA route
    model.fast_attn = False
    explicit, _ = _logits(model, xs, train=False)
    for a, b in zip(fast_out, explicit):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


# 6. batch-1 evaluation: no value read back per segment, R and the mask kept -------------------
def test_evaluation_reads_back_once_and_makes_R_and_the_mask_once_per_length(tiny_model):
    model = tiny_model(dtype=torch.float32)  # tgt_len = mem_len = 6
    ids = torch.randint(0, 27, (6 * 13 + 1,))
    counts = []
    for segments in (4, 12):
        with Reads() as reads:
            evaluate(model, ids, batch_size=1, max_tokens=6 * segments)
        counts.append(reads)
    assert counts[0].reads == counts[1].reads  # (before: 4 more per segment, the ids' range)
    # R (sin, cos) and the mask (triu) for the key lengths 6 and 12 only, not per segment
    assert [counts[1].ops[op] for op in ("sin", "cos", "triu")] == [2, 2, 2]


def test_read_segments_still_refuses_bad_ids(tiny_model):
    from txl_minimal.evaluate import read_segments
    with pytest.raises(ValueError, match="target ids must be in"):
        next(read_segments(tiny_model(), torch.zeros(1, 12, dtype=torch.long), torch.full((1, 12), 27)))


def test_compiled_evaluation_gives_the_eager_numbers(tiny_model, monkeypatch):
    """evaluate(compile=...): the segments traced by dynamo (here with its "eager" backend, no code
    generated) give the eager numbers, under CUDA graphs' bookkeeping too; attention maps still come."""
    real, calls = torch.compile, []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: calls.append(kw) or real(fn, backend="eager"))
    model = tiny_model(dtype=torch.float32)
    ids = torch.randint(0, 27, (6 * 5 + 3,))
    eager = evaluate(model, ids, batch_size=2, per_token=True)
    for mode in ("default", "reduce-overhead"):
        compiled = evaluate(model, ids, batch_size=2, per_token=True, compile=mode)
        assert compiled["tokens"] == eager["tokens"]
        torch.testing.assert_close(torch.as_tensor(compiled["nll"]), torch.as_tensor(eager["nll"]),
                                   rtol=1e-5, atol=1e-6)
    assert calls == [{}, dict(mode="reduce-overhead")]
    with pytest.raises(ValueError, match="compile must be None, 'default' or 'reduce-overhead'"):
        evaluate(model, ids, compile=True)


# -- after review: what an evaluation keeps, compile errors, FlexAttention's limits ------------------

@pytest.mark.skipif(not devices._fused_adam_runs("cpu"), reason="no fused Adam on this torch's CPU")
def test_periodic_valid_bpc_with_fused_adam_is_the_weights_own(tmp_path):
    """Fused Adam (CUDA's default here) updates the weights in place without bumping their version
    counters, which the evaluation cache checked: an evaluation whose first segment had the previous
    one's last shape (whole segments, eval_mem_len 0) reused W_k,R R of older weights, and logged
    3.7246 for weights that score 3.7223 (cpu-tiny, 100 steps). Entering eval mode now forgets."""
    from txl_minimal.train import preset
    from txl_minimal.data import load_corpus
    corpus = load_corpus("text8-mini")
    model_cfg, cfg = preset("cpu-tiny", max_steps=20, eval_interval=10, eval_mem_len=0, eval_tokens=2048, amp="off",
                            adam="fused", out=str(tmp_path))
    res = train(model_cfg, cfg, corpus, progress=False)
    fresh = TransformerXL(model_cfg)
    fresh.load_state_dict(res.model.state_dict())
    assert res.valid_bpc == pytest.approx(evaluate(fresh, corpus.valid, cfg.eval_batch_size, mem_len=0,
                                                   max_tokens=2048)["bpc"], abs=1e-6)


def test_a_cuda_error_is_not_taken_for_a_compiler_error():
    """Every CUDA error ends "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions":
    the word "compile" must not switch compiling off and hide the model's own failure."""
    cuda = RuntimeError("CUDA error: device-side assert triggered\nCompile with `TORCH_USE_CUDA_DSA` to enable "
                        "device-side assertions.")
    assert not devices._is_compiler_error(cuda)
    assert devices._is_compiler_error(RuntimeError("inductor: C++ compile failed"))
    assert not devices._is_compiler_error(ValueError("token ids must be in [0, 26]"))


def test_flex_attention_is_refused_where_it_cannot_train(tmp_path):
    with pytest.raises(ValueError, match="attention='explicit'.*Fix"):
        TrainConfig(flex_attention=True, attention="explicit")
    with pytest.raises(ValueError, match="CUDA GPU only.*Fix: --set flex_attention=false"):
        train(tiny_cfg(), tiny_train_cfg(tmp_path / "r", flex_attention=True, device="cpu"),
              synthetic_corpus("abc def "), progress=False)
    assert not (tmp_path / "r").exists()  # refused before anything was written
