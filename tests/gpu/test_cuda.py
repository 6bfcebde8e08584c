"""On a CUDA GPU (`make test-gpu`; skipped, in one line, without one): the fast paths equal the
explicit code in float64 and float32, training and evaluation, gradients included; bf16 and fp16
training; a bit-exact resume; no host sync inside a training step or an evaluation segment;
torch.compile, CUDA graphs and FlexAttention against eager; evaluation and generation after
mixed-precision training; benchmarks/gpu_compare.py's quick mode."""
from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch

import txl_minimal.devices as devices
from txl_minimal import fast
from txl_minimal.checkpoint import load
from txl_minimal.evaluate import evaluate, read_segments
from txl_minimal.model import TransformerXL
from txl_minimal.train import Segments, TrainConfig, adam_options, compile_mode, train

from cuda_only import require_cuda
from tiny import ROOT, run_segments, synthetic_corpus, tiny_cfg, tiny_train_cfg

require_cuda()

pytestmark = pytest.mark.gpu

CONFIGS = [dict(), dict(untie_r=True), dict(pre_lnorm=True), dict(same_length=True), dict(clamp_len=3),
           dict(attn_type="abs"), dict(attn_type="abs_far"), dict(attn_type="shaw"),
           dict(adaptive_span=True, span_ramp=2, span_init=0.3), dict(mem_len=3), dict(mem_len=0),
           dict(cutoffs=[10, 20], div_val=2)]
_ids = lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "rel"  # noqa: E731
# model.py's explicit code takes its softmax in float32 (also for float64 weights): float32's tolerances
TOL = {torch.float64: dict(rtol=1e-6, atol=1e-8), torch.float32: dict(rtol=1e-5, atol=1e-5)}
GRAD_TOL = {torch.float64: dict(rtol=1e-5, atol=1e-8), torch.float32: dict(rtol=1e-4, atol=1e-6)}
EXACT = dict(rtol=1e-9, atol=1e-9)  # float64 on both sides
TEXT = "the quick brown fox jumps over the lazy dog "


def _close(a: list, b: list, **tol) -> None:
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, **tol)


def _grads_close(a: dict, b: dict, **tol) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], msg=name, **tol)


# 1. the same numbers on the GPU ----------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("overrides", CONFIGS, ids=_ids)
def test_fast_paths_equal_the_explicit_code_on_cuda(tiny_model, cuda, dtype, overrides):
    model = tiny_model(dropout=0.0, dropatt=0.0, dtype=dtype, **overrides).to(cuda)
    xs = list(torch.randint(0, 27, (4, 2, 6), device=cuda))  # four segments: the memory fills and slides
    for train_mode in (True, False):
        model.fast_attn = True
        fast_lp, fast_g, fast_m = run_segments(model, xs, train_mode)
        model.fast_attn = False
        slow_lp, slow_g, slow_m = run_segments(model, xs, train_mode)
        _close(fast_lp, slow_lp, **TOL[dtype])
        _close(fast_m, slow_m, **TOL[dtype])
        _grads_close(fast_g, slow_g, **GRAD_TOL[dtype])
        model.fast_attn = True


def test_cuda_gives_the_cpus_numbers(tiny_model, cuda):
    model = tiny_model()  # float64
    xs = list(torch.randint(0, 27, (3, 2, 6)))
    cpu_lp, cpu_g, _ = run_segments(model, xs, True)
    gpu_lp, gpu_g, _ = run_segments(model.to(cuda), [x.to(cuda) for x in xs], True)
    _close([t.cpu() for t in gpu_lp], cpu_lp, **EXACT)
    _grads_close({k: v.cpu() for k, v in gpu_g.items()}, cpu_g, **EXACT)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_strided_sdpa_equals_the_heads_first_copies_on_cuda(cuda, dtype, monkeypatch):
    torch.manual_seed(0)
    B, H, T, M, D = 3, 4, 16, 8, 32
    K = T + M
    from txl_minimal.model import attention_mask
    mk = lambda *s: torch.randn(*s, device=cuda, dtype=dtype)  # noqa: E731
    q_u, q_v = (mk(B, T, H, D).transpose(1, 2) for _ in range(2))  # the projection's layout
    k, val = (mk(B, K, H, D).transpose(1, 2) for _ in range(2))
    r = mk(H, K, D)
    mask = attention_mask(T, M, False, M, device=cuda)
    bias = torch.zeros(T, K, device=cuda, dtype=dtype).masked_fill_(mask, torch.finfo(dtype).min)
    inputs = [t.requires_grad_() for t in (q_u, q_v, k, val, r)]
    outs, grads = [], []
    for strided in (False, True):
        monkeypatch.setattr(fast, "STRIDED_SDPA", strided)
        out = fast.relative_attention(*inputs, bias, D ** -0.5, 0.0, True)
        outs.append(out.float())
        grads.append([g.float() for g in torch.autograd.grad(out.float().pow(2).sum(), inputs)])
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(outs[1], outs[0], **tol)
    _close(grads[1], grads[0], **tol)


# 2. no host sync inside a step or a segment ----------------------------------------------------
@pytest.mark.parametrize("amp", ["off", "bf16", "fp16"])
def test_a_training_step_never_waits_for_the_gpu(cuda, amp):
    """The loop's step (Segments with the ids checked once, clipping, fused Adam, the gradient
    scaler for fp16, the loss kept on the device) under torch.cuda.set_sync_debug_mode("error")."""
    torch.manual_seed(0)
    model = TransformerXL(tiny_cfg()).to(cuda).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, **adam_options("auto", cuda))
    assert opt.param_groups[0]["fused"]
    scaler = torch.amp.GradScaler("cuda", enabled=amp == "fp16")
    autocast = torch.autocast("cuda", dtype=torch.float16 if amp == "fp16" else torch.bfloat16, enabled=amp != "off")
    runner = Segments(model, None, ids_checked=True)
    data = torch.randint(0, 27, (4, 8 * 10 + 1), device=cuda)
    meter, state = devices.LossMeter(), dict(mems=None)

    def step(i: int) -> None:
        x, y = data[:, 8 * i:8 * i + 8], data[:, 8 * i + 1:8 * i + 9]
        with autocast:
            out = runner(x, state["mems"], y)
        scaler.scale(out.loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        state["mems"] = out.mems
        meter.add(out.nll)

    step(0)
    step(1)  # (Adam's state made, the memory full)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for i in range(2, 8):
            step(i)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert math.isfinite(meter.mean(1, cuda))


def test_an_evaluation_segment_never_waits_for_the_gpu(tiny_model, cuda):
    model = tiny_model(dtype=torch.float32).to(cuda)
    x = torch.randint(0, 27, (1, 6 * 8), device=cuda)
    segments = read_segments(model, x, x)
    next(segments)  # the inputs' one check (a read back) and the first segment
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        outs = [out.nll for _, out in segments]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert len(outs) == 7 and all(torch.isfinite(o).all() for o in outs)


# 3. training on the GPU: precisions, resume, compile, FlexAttention -----------------------------
@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_mixed_precision_training_then_evaluation_and_generation(tmp_path, cuda, amp):
    corpus = synthetic_corpus(TEXT, n_train=4000)
    cfg = tiny_cfg(dropout=0.0, dropatt=0.0, d_model=32, d_head=16, d_inner=64, tgt_len=16, mem_len=16)
    res = train(cfg, tiny_train_cfg(tmp_path, device="cuda", amp=amp, compile=False, batch_size=8, lr=5e-3,
                                   warmup_steps=10, max_steps=100, eval_interval=100, eval_tokens=None),
                corpus, progress=False)
    assert next(res.model.parameters()).is_cuda and res.valid_bpc < 2.0  # 4.75 at the start
    plain = evaluate(res.model, corpus.valid)["bpc"]
    with torch.autocast("cuda", dtype=torch.bfloat16 if amp == "bf16" else torch.float16):
        mixed = evaluate(res.model, corpus.valid)["bpc"]
    assert abs(mixed - plain) < 0.05 and math.isfinite(plain)
    on_cpu = load(tmp_path / "ckpt.pt")  # the checkpoint, on the CPU
    assert evaluate(on_cpu, corpus.valid)["bpc"] == pytest.approx(plain, abs=1e-4)
    ids = res.model.generate(torch.tensor([1, 2, 3], device=cuda), 20, temperature=0)
    assert ids.shape == (23,) and ids.is_cuda and int(ids.max()) < 27


def test_resume_is_bit_exact_on_cuda(tmp_path):
    """12 steps straight vs 7 + a resume to 12, in a process with deterministic kernels (cuBLAS's
    workspace set before it starts, SDPA's math kernel): the same weights and the same CUDA RNG state."""
    code = f"""
import json, sys, torch
sys.path.insert(0, {str(ROOT / "tests")!r})
torch.use_deterministic_algorithms(True)
for name in ("flash", "mem_efficient", "cudnn"):
    getattr(torch.backends.cuda, f"enable_{{name}}_sdp", lambda on: None)(False)
from tiny import synthetic_corpus, tiny_cfg, tiny_train_cfg
from txl_minimal.checkpoint import load_checkpoint
from txl_minimal.train import train
corpus = synthetic_corpus({TEXT!r})
out = {{}}
for amp in ("off", "bf16"):
    cfg = lambda d: tiny_train_cfg({str(tmp_path)!r} + "/" + amp + d, device="cuda", amp=amp, compile=False)
    a = train(tiny_cfg(), cfg("a"), corpus, progress=False)
    train(tiny_cfg(), cfg("b"), corpus, stop_at=7, progress=False)
    b = train(tiny_cfg(), cfg("b"), corpus, resume=True, progress=False)
    sa, sb = a.model.state_dict(), b.model.state_dict()
    rng = [load_checkpoint({str(tmp_path)!r} + "/" + amp + d + "/ckpt.pt")["rng"][0]["cuda"] for d in "ab"]
    out[amp] = dict(weights=all(torch.equal(sa[k], sb[k]) for k in sa), rng=torch.equal(*rng))
print(json.dumps(out))
"""
    env = dict(os.environ, CUBLAS_WORKSPACE_CONFIG=":4096:8", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {amp: dict(weights=True, rng=True) for amp in ("off", "bf16")}


def test_compile_auto_compiles_on_cuda(cuda):
    assert compile_mode(TrainConfig(), cuda) == ("default" if devices._has_triton() else None)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compiled_training_gives_the_eager_numbers(tmp_path, mode):
    corpus = synthetic_corpus(TEXT)
    cfg = tiny_cfg(dropout=0.0, dropatt=0.0)  # (compiled code draws its own dropout masks)
    runs = {c: train(cfg, tiny_train_cfg(tmp_path / str(c), device="cuda", compile=c), corpus, progress=False)
            for c in (False, mode)}
    eager, compiled = runs[False], runs[mode]
    assert compiled.train_bpc == pytest.approx(eager.train_bpc, rel=1e-3)
    assert compiled.valid_bpc == pytest.approx(eager.valid_bpc, rel=1e-3)


@pytest.mark.skipif(not fast.flex_available(), reason="no FlexAttention in this torch (< 2.5)")
@pytest.mark.parametrize("overrides", [dict(), dict(same_length=True, clamp_len=3), dict(mem_len=3)], ids=_ids)
def test_flex_attention_equals_the_explicit_code_on_cuda(tiny_model, cuda, overrides):
    """Eagerly (torch's unfused formula) and compiled (its fused kernel), with gradients."""
    model = tiny_model(dtype=torch.float32, **overrides).to(cuda)
    xs = list(torch.randint(0, 27, (3, 2, 16), device=cuda))
    model.fast_attn = False
    ref = {t: run_segments(model, xs, t) for t in (True, False)}
    model.fast_attn, model.flex_attn = True, True
    for t in (True, False):
        lp, g, _ = run_segments(model, xs, t)
        _close(lp, ref[t][0], rtol=1e-4, atol=1e-5)
        _grads_close(g, ref[t][1], rtol=1e-3, atol=1e-5)
    segment = torch.compile(model.segment)
    model.train()
    model.zero_grad()
    mems = None
    for x, want in zip(xs, ref[True][0]):
        out = segment(x, mems, x)
        out.loss.backward()
        mems = out.mems
        torch.testing.assert_close(out.logits.log_softmax(-1).detach(), want, rtol=1e-4, atol=1e-5)
    _grads_close({n: p.grad for n, p in model.named_parameters() if p.grad is not None}, ref[True][1],
                 rtol=1e-3, atol=1e-5)


@pytest.mark.skipif(not fast.flex_available(), reason="no FlexAttention in this torch (< 2.5)")
def test_flex_attention_trains_compiled_in_bf16(tmp_path):
    corpus = synthetic_corpus(TEXT)
    cfg = tiny_cfg(dropout=0.0, dropatt=0.0)
    runs = {flex: train(cfg, tiny_train_cfg(tmp_path / str(flex), device="cuda", amp="bf16", compile=True,
                                            flex_attention=flex), corpus, progress=False) for flex in (False, True)}
    assert runs[True].train_bpc == pytest.approx(runs[False].train_bpc, rel=2e-2)


def test_compiled_evaluation_on_cuda(tiny_model, cuda):
    model = tiny_model(dtype=torch.float32).to(cuda)
    ids = torch.randint(0, 27, (6 * 9 + 4,))
    eager = evaluate(model, ids, per_token=True)
    for mode in ("default", "reduce-overhead"):
        got = evaluate(model, ids, per_token=True, compile=mode)
        torch.testing.assert_close(torch.as_tensor(got["nll"]), torch.as_tensor(eager["nll"]), rtol=1e-4, atol=1e-5)


# 4. the benchmark -----------------------------------------------------------------------------
def test_gpu_compare_quick_mode_on_cuda(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("gpu_compare", ROOT / "benchmarks" / "gpu_compare.py")
    gpu_compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_compare)
    levers = [name for name in gpu_compare.LEVERS if name != "flex" or fast.flex_available()]
    gpu_compare.main(["--quick", "--device", "cuda", "--base-tree", str(ROOT), "--shapes", "tiny", "--levers", *levers,
                      "--precisions", "fp32", "bf16", "--kernels", "--json", str(tmp_path / "gpu.json")])
    res = json.loads((tmp_path / "gpu.json").read_text())
    assert res["gpu"] == torch.cuda.get_device_name() and res["device"] == "cuda"
    failed = {(r["shape"], r["precision"], r["mode"], r["variant"]): r["error"] for r in res["results"] if r["error"]}
    assert not failed, failed
    kernels = [r["cuda_kernels_per_segment"] for r in res["results"]
               if r["variant"] == "default" and r["mode"] == "eval"]
    assert kernels and all(k > 0 for k in kernels)
