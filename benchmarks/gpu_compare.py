"""Speed on a GPU of this checkout against another commit, and of each speed lever, in one run.

    python benchmarks/gpu_compare.py --base main                  # every shape, fp32 / TF32 / bf16, 3 repetitions
    python benchmarks/gpu_compare.py --base main --shapes 4L-d256 gpu-small --precisions bf16 --levers none
    python benchmarks/gpu_compare.py --base main --modes eval --kernels   # + operators and kernels per segment
    python benchmarks/gpu_compare.py --plan                       # the jobs a run would do, and nothing else
    python benchmarks/gpu_compare.py --quick --device cpu --base-tree .   # smoke test (tests/test_gpu_compare.py)

Both trees are timed on the same GPU in the same run, taking turns (base, this, this, base, ...):
the base commit is checked out in a ``git worktree`` (or ``--base-tree`` names a checkout on disk),
and each (tree, shape, repetition) is a fresh process that imports ``txl_minimal`` from its tree
and runs that shape's jobs one after the other. Random token ids; weights as initialised.

  train  tokens/s of training steps with the memory full: forward + backward + clipping + Adam, the
         loss of each step kept as the tree's ``train`` keeps it; a window of --steps steps between two
         CUDA synchronisations (so that no step is made to wait), median over --windows windows.
         The base runs its ``train`` loop's defaults (``model(...)``, ``.item()`` per step, torch's
         Adam); this checkout runs its own (``train.Segments``, the ids checked once, the loss read back
         at the window's end, ``adam_options("auto")``, ``compile_mode`` of TrainConfig()).
  eval   predictions/s of ``evaluate(model, ids, batch_size=1)`` at the training lengths, steady state
         (bench.py's method: a short and a longer evaluation, the extra predictions over the extra time).
  MFU    analytic training FLOPs (txl_minimal.flops; the adaptive softmax's head and the tails the
         uniform random targets reach) / step time / the matmul peak measured in this run in that
         precision (an 8192^3 matmul on CUDA).

Precisions: fp32 (TF32 off for matmuls and cuDNN), tf32 (TF32 on), bf16 (bf16 autocast, TF32 off).
Levers (this checkout only; each a variant of its defaults, timed in --lever-precisions): see LEVERS.
Each job's failure (a lever this torch lacks, memory) is recorded in its row and the run goes on.
Prints a table; --json writes every measurement, the GPU's name (torch.cuda.get_device_name) included.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from compare import commit_of, worktree  # noqa: E402  (the CPU comparison's: one git helper)

CHARS = dict(vocab_size=27)
SHAPES = {  # name -> model config, training batch
    "4L-d256": (dict(CHARS, n_layer=4, n_head=4, d_model=256, d_head=64, d_inner=1024, dropout=0.1,
                     tgt_len=128, mem_len=128), 16),
    "gpu-small": "gpu-small",  # the presets' model and batch (train.PRESETS)
    "paper-base": "paper-base",
    "wt103-base": "wt103-base",
}
QUICK_SHAPES = {
    "tiny": (dict(CHARS, n_layer=2, n_head=2, d_model=32, d_head=16, d_inner=64, dropout=0.1, tgt_len=16,
                  mem_len=16), 4),
    "tiny-words": (dict(vocab_size=300, cutoffs=[50, 150], div_val=2, n_layer=1, n_head=2, d_model=32, d_head=16,
                        d_inner=64, dropout=0.1, tgt_len=8, mem_len=8), 4),
}
PRECISIONS = ("fp32", "tf32", "bf16")

# This checkout's defaults, and each lever as a change of them: name -> (modes, what it switches, change).
DEFAULT = dict(loop="new", compile="auto", adam="auto", read_each_step=False, ids_each_call=False, flex=False,
               strided=None, eval_compile=None)
BASE = dict(loop="old")  # what the base commit's train() and evaluate() do
LEVERS = {
    "read-each-step": (("train", "eval"), "off: the loss read back every step, the ids checked every call "
                       "(a host sync per step / segment, as before)", dict(read_each_step=True, ids_each_call=True)),
    "torch-adam": (("train",), "off: torch's default Adam (foreach on CUDA, for-loop on a CPU) instead of "
                   "fused on CUDA / foreach elsewhere", dict(adam="torch")),
    "eager": (("train",), "off: no torch.compile (compile='auto' compiles on CUDA)", dict(compile=False)),
    "heads-first": (("train", "eval"), "off: q, k, v and the bias copied heads-first for SDPA (the strided "
                    "layout is the default on CUDA)", dict(strided=False)),
    "cuda-graphs": (("train",), "on: compile='reduce-overhead' (CUDA graphs)", dict(compile="reduce-overhead")),
    "flex": (("train", "eval"), "on: FlexAttention (with the default compile: compiled on CUDA, eager on a CPU)",
             dict(flex=True)),
    "eval-compiled": (("eval",), "on: evaluate(compile='default')", dict(eval_compile="default")),
    "eval-graphs": (("eval",), "on: evaluate(compile='reduce-overhead') (CUDA graphs)",
                    dict(eval_compile="reduce-overhead")),
}
CPU_LEVERS = ("read-each-step", "torch-adam", "heads-first")  # a CPU run's default: no compiling there

# Runs in a fresh interpreter with PYTHONPATH = one tree; prints one JSON line per job.
WORKER = r'''
import json, math, statistics, sys, time, traceback
import torch
spec = json.loads(sys.argv[1])
dev = torch.device(spec["device"])
torch.set_num_threads(spec["threads"])
import txl_minimal
from txl_minimal.model import TXLConfig, TransformerXL
from txl_minimal.evaluate import evaluate
import txl_minimal.train as train_mod
try:
    from txl_minimal import fast
except ImportError:
    fast = None
from torch.utils._python_dispatch import TorchDispatchMode


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def autocast(precision):
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
    return torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def build(job):
    v = job["variant"]
    torch.manual_seed(0)
    model = TransformerXL(TXLConfig(**job["model"])).to(dev)
    if fast is not None and hasattr(fast, "STRIDED_SDPA"):
        fast.STRIDED_SDPA = v.get("strided")
    if v.get("flex"):
        model.flex_attn = True
    return model


def peak_reset():
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
        return torch.cuda.memory_allocated(dev)
    return 0


def peak_mib(base):
    return (torch.cuda.max_memory_allocated(dev) - base) / 2 ** 20 if dev.type == "cuda" else None


def train_job(job):
    v, B = job["variant"], job["batch"]
    model = build(job).train()
    cfg = model.cfg
    T, n, warm = cfg.tgt_len, job["steps"], job["warmup"]
    total = warm + n * job["windows"]
    data = torch.randint(0, cfg.vocab_size, (B, T * total + 1), device=dev)
    new = v["loop"] == "new"
    if new:
        from txl_minimal import validation
        validation.check_ids(data, cfg.vocab_size)
        mode = train_mod.compile_mode(train_mod.TrainConfig(compile=v["compile"]), dev)
        runner = train_mod.Segments(model, mode, ids_checked=not v["ids_each_call"])
        kw = {} if v["adam"] == "torch" else train_mod.adam_options(v["adam"], dev)
    else:
        runner, kw = model, {}
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, **kw)
    amp = autocast(job["precision"])
    state = dict(mems=None, i=0, losses=[])
    read_each_step = not new or v["read_each_step"]

    def step():
        i = state["i"]
        x, y = data[:, i * T:(i + 1) * T], data[:, i * T + 1:(i + 1) * T + 1]
        with amp:
            out = runner(x, state["mems"], y)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        opt.zero_grad(set_to_none=True)
        state["mems"], state["i"] = out.mems, i + 1
        state["losses"].append(out.nll.mean().item() if read_each_step else out.nll.detach().mean())

    base = peak_reset()
    for _ in range(warm):
        step()
    sync()
    times = []
    for _ in range(job["windows"]):
        state["losses"] = []
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        if not read_each_step:  # the log row's one read back
            torch.stack(state["losses"]).tolist()
        sync()
        times.append(time.perf_counter() - t0)
    s = statistics.median(times) / n
    return dict(rate=B * T / s, unit="tokens/s", step_ms=1e3 * s, windows_ms=[1e3 * t / n for t in times],
                peak_mib=peak_mib(base), loss=float(torch.stack([torch.as_tensor(l) for l in state["losses"]]).mean()))


class Ops(TorchDispatchMode):
    """Operators run (views and allocations aside: a CPU-measurable proxy for kernel launches) and
    values read back to the host (.item(), int(), bool(): each a wait for the GPU)."""
    FREE = {"empty", "empty_strided", "empty_like", "detach", "lift_fresh", "alias", "_unsafe_view",
            "set_", "_local_scalar_dense", "is_nonzero"}

    def __init__(self):
        super().__init__()
        self.ops, self.reads = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        rets = func._schema.returns
        view = bool(rets) and rets[0].alias_info is not None and not rets[0].alias_info.is_write
        self.reads += name in ("_local_scalar_dense", "is_nonzero")
        self.ops += not view and name not in self.FREE
        return func(*args, **(kwargs or {}))


def eval_job(job):
    v = job["variant"]
    model = build(job).eval()
    cfg = model.cfg
    L, segs = cfg.tgt_len, job["segments"]
    fill = (-(-cfg.mem_len // L) + 1) * L  # the memory is full from then on
    ids = torch.randint(0, cfg.vocab_size, (fill + (segs + 8) * L + 1,))
    kw = dict(batch_size=1)
    if v.get("eval_compile"):
        kw["compile"] = v["eval_compile"]
    if v.get("ids_each_call"):  # every segment checked again, as model(...) does
        from txl_minimal import validation
        plain = model.segment
        model.segment = lambda t, m=None, y=None, *a, **k: (validation.check_inputs(model, t, m, y),
                                                            plain(t, m, y, *a, **k))[1]
    amp = autocast(job["precision"])

    def run(n):
        with amp:
            evaluate(model, ids, max_tokens=n, **kw)

    def timed(n):
        sync()
        t0 = time.perf_counter()
        run(n)
        sync()
        return time.perf_counter() - t0

    base = peak_reset()
    t_warm = min(timed(fill) for _ in range(2))  # (the first call absorbs any compiling)
    t_all = min(timed(fill + segs * L) for _ in range(2))
    extra = t_all - t_warm
    out = dict(rate=segs * L / extra if extra > 0.1 * t_all else float("nan"), unit="predictions/s",
               segment_ms=1e3 * extra / segs, peak_mib=peak_mib(base))
    if job.get("kernels"):
        out.update(count_kernels(run, fill, L))
    return out


def count_kernels(run, fill, L, extra=8):
    """Per steady segment: operators and reads (dispatch), and on CUDA the kernels the profiler saw."""
    counts = []
    for n in (fill, fill + extra * L):
        with Ops() as ops:
            run(n)
        counts.append(ops)
    out = dict(ops_per_segment=(counts[1].ops - counts[0].ops) / extra,
               reads_per_segment=(counts[1].reads - counts[0].reads) / extra)
    if dev.type == "cuda":
        from torch.profiler import ProfilerActivity, profile
        kernels = []
        for n in (fill, fill + extra * L):
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                run(n)
                sync()
            kernels.append(sum(1 for e in prof.events() if str(e.device_type).endswith("CUDA")))
        out["cuda_kernels_per_segment"] = (kernels[1] - kernels[0]) / extra
    return out


for job in spec["jobs"]:
    row = dict(id=job["id"])
    try:
        row.update(train_job(job) if job["mode"] == "train" else eval_job(job))
    except Exception as e:  # recorded; the other jobs go on
        row["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
        row["traceback"] = traceback.format_exc()[-3000:]
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    try:
        torch._dynamo.reset()  # the next job compiles its own model
    except Exception:
        pass
    row["source"] = txl_minimal.__file__
    print("JOB " + json.dumps(row), flush=True)
'''

def matmul_peaks(device: str, n: int, reps: int, threads: int) -> dict:
    """TFLOP/s of an n x n matmul (fastest of ``reps``) in fp32 (TF32 off), TF32 and bf16, with torch's
    version and the GPU's name. Run in a process of its own on a GPU (``--peaks``)."""
    import torch
    dev = torch.device(device)
    torch.set_num_threads(threads)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    out = {}
    for name, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                              ("bf16", torch.bfloat16, False)):
        if dev.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = tf32
        a, b = (torch.randn(n, n, device=dev, dtype=dtype) for _ in range(2))
        a @ b
        times = []
        for _ in range(reps):
            sync()
            t0 = time.perf_counter()
            a @ b
            sync()
            times.append(time.perf_counter() - t0)
        out[name] = 2 * n ** 3 / min(times) / 1e12
    info = dict(peaks_tflops=out, torch=torch.__version__)
    if dev.type == "cuda":
        info.update(gpu=torch.cuda.get_device_name(dev), capability=list(torch.cuda.get_device_capability(dev)))
    return info


def shape_config(name: str, quick: bool) -> tuple[dict, int]:
    """(TXLConfig keywords, training batch) of a shape."""
    table = QUICK_SHAPES if quick else SHAPES
    if name not in table:
        raise SystemExit(f"unknown shape {name!r}; choose from {sorted(table)}")
    spec = table[name]
    if isinstance(spec, str):  # a preset
        from txl_minimal.train import PRESETS
        return dict(PRESETS[spec]["model"]), PRESETS[spec]["train"]["batch_size"]
    return dict(spec[0]), spec[1]


def train_flops(model: dict, batch: int) -> float:
    """Analytic FLOPs of a training step (txl_minimal.flops); with cutoffs, the adaptive softmax's
    head plus the tails that uniformly random targets reach, instead of a full softmax."""
    from txl_minimal.flops import softmax_flops, train_step_flops
    from txl_minimal.model import TXLConfig
    cfg = TXLConfig(**model)
    flops = train_step_flops(cfg, batch)
    if cfg.cutoffs:
        tokens, V = batch * cfg.tgt_len, cfg.vocab_size
        ends = [0, *cfg.cutoffs, V]
        fractions = [(hi - lo) / V for lo, hi in zip(ends[:-1], ends[1:])]
        adaptive = softmax_flops(V, cfg.d_model, cfg.cutoffs, cfg.div_val, cfg.d_embed, fractions)["train"]
        flops += 3.0 * tokens * (adaptive - 2 * cfg.d_model * V)
    return flops


def plan(args) -> list[dict]:
    """Every job of the run: (tree, shape, precision, mode, variant), in the order a process runs them."""
    jobs = []
    for shape in args.shapes:
        model, batch = shape_config(shape, args.quick)
        for precision in args.precisions:
            for mode in args.modes:
                common = dict(shape=shape, model=model, batch=batch, precision=precision, mode=mode)
                jobs.append(dict(common, tree="base", name="base", variant=BASE))
                jobs.append(dict(common, tree="head", name="default", variant=DEFAULT))
                if precision not in args.lever_precisions:
                    continue
                for lever in args.levers:
                    modes, _, change = LEVERS[lever]
                    if mode in modes:
                        jobs.append(dict(common, tree="head", name=lever, variant=dict(DEFAULT, **change)))
    for i, job in enumerate(jobs):
        job["id"] = i
    return jobs


def run_worker(tree: Path, jobs: list[dict], args) -> list[dict]:
    """The jobs of one tree and shape in a fresh process importing txl_minimal from ``tree``."""
    spec = dict(device=args.device, threads=args.threads, jobs=[
        dict(j, steps=args.steps, windows=args.windows, warmup=args.warmup, segments=args.segments,
             kernels=args.kernels and j["name"] in ("base", "default")) for j in jobs])
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    try:
        res = subprocess.run([sys.executable, "-c", WORKER, json.dumps(spec)], env=env, cwd=tree,
                             capture_output=True, text=True, timeout=args.job_timeout)
        stdout, stderr, code = res.stdout, res.stderr, res.returncode
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        stderr, code = f"timed out after {args.job_timeout} s", -1
    rows = {r["id"]: r for r in (json.loads(line[4:]) for line in stdout.splitlines() if line.startswith("JOB "))}
    for r in rows.values():
        if not r["source"].startswith(str(tree)):  # an installed copy would shadow the tree
            raise SystemExit(f"{tree}: imported txl_minimal from {r['source']}, not from the tree")
    for j in jobs:  # a process that died: its remaining jobs get its error
        if j["id"] not in rows:
            rows[j["id"]] = dict(id=j["id"], error=f"the worker process ended (exit {code}): {stderr.strip()[-500:]}")
    return [rows[j["id"]] for j in jobs]


def peaks(args) -> dict:
    """The matmul peaks: in this process on a CPU; on a GPU in a process of its own (this one keeps no
    CUDA context beside the workers')."""
    n, reps = (256, 3) if args.quick else (8192, 10)
    if args.device == "cpu":
        return matmul_peaks("cpu", n, reps, args.threads)
    res = subprocess.run([sys.executable, __file__, "--peaks", args.device, str(n), str(reps), str(args.threads)],
                         capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        raise SystemExit(f"measuring the matmul peak failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def spread(values: list[float], fmt: str) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"


def summarise(jobs: list[dict], rows: dict[int, list[dict]], peak: dict, flops: dict) -> list[dict]:
    """One result per job: its rates over the repetitions, medians, MFU and ratios."""
    results = []
    for j in jobs:
        got = [r for r in rows[j["id"]] if "error" not in r]
        errors = sorted({r["error"] for r in rows[j["id"]] if "error" in r})
        rates = [r["rate"] for r in got if r["rate"] == r["rate"]]  # NaN: noise swamped the extra time
        res = dict(shape=j["shape"], precision=j["precision"], mode=j["mode"], tree=j["tree"], variant=j["name"],
                   unit="tokens/s" if j["mode"] == "train" else "predictions/s", rates=rates,
                   median=statistics.median(rates) if rates else None,
                   peak_mib=(statistics.median([r["peak_mib"] for r in got])
                             if got and got[0].get("peak_mib") is not None else None),
                   error=errors[0] if errors else None)
        if j["mode"] == "train" and rates:
            per_token = flops[j["shape"]] / (j["batch"] * j["model"]["tgt_len"])
            res["mfu"] = [rate * per_token / (peak["peaks_tflops"][j["precision"]] * 1e12) for rate in rates]
        for key in ("ops_per_segment", "reads_per_segment", "cuda_kernels_per_segment"):
            if got and key in got[0]:
                res[key] = statistics.median(r[key] for r in got)
        if errors:
            res["traceback"] = next(r.get("traceback") for r in rows[j["id"]] if "error" in r)
        results.append(res)
    by = {(r["shape"], r["precision"], r["mode"], r["variant"]): r for r in results}
    for r in results:
        base = by.get((r["shape"], r["precision"], r["mode"], "base"))
        default = by.get((r["shape"], r["precision"], r["mode"], "default"))
        if r["median"] and base and base["median"] and r["variant"] != "base":
            r["vs_base"] = r["median"] / base["median"]
        if r["median"] and default and default["median"] and r["variant"] not in ("base", "default"):
            r["vs_default"] = r["median"] / default["median"]
    return results


def table(results: list[dict]) -> str:
    rows = [("shape", "prec", "mode", "variant", "rate: median [min-max]", "unit", "/ base", "/ default", "MFU %",
             "peak MiB", "ops/seg", "reads/seg", "kernels/seg")]
    for r in results:
        mfu = spread([100 * m for m in r["mfu"]], ".1f") if r.get("mfu") else "-"
        rows.append((r["shape"], r["precision"], r["mode"], r["variant"],
                     spread(r["rates"], ".0f") if r["rates"] else "ERROR: " + (r["error"] or "no rate")[:60],
                     r["unit"], f"{r['vs_base']:.2f}x" if "vs_base" in r else "-",
                     f"{r['vs_default']:.2f}x" if "vs_default" in r else "-", mfu,
                     f"{r['peak_mib']:.0f}" if r.get("peak_mib") is not None else "-",
                     *(f"{r[k]:.1f}" if k in r else "-"
                       for k in ("ops_per_segment", "reads_per_segment", "cuda_kernels_per_segment"))))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join([lines[0], "-" * len(lines[0])] + lines[1:])


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--base", default="main", help="commit to compare against (default: main)")
    p.add_argument("--base-tree", help="a checkout on disk to compare against, instead of --base")
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:1, or cpu (--quick smoke test)")
    p.add_argument("--quick", action="store_true", help="tiny shapes, 1 repetition, few steps (a smoke test)")
    p.add_argument("--shapes", nargs="+",
                   help=f"default: all ({', '.join(SHAPES)}; --quick: {', '.join(QUICK_SHAPES)})")
    p.add_argument("--precisions", nargs="+", choices=PRECISIONS, help="default: fp32 tf32 bf16 (a CPU: fp32)")
    p.add_argument("--modes", nargs="+", choices=("train", "eval"), default=["train", "eval"])
    p.add_argument("--levers", nargs="+", help=f"default: all on CUDA ({', '.join(LEVERS)}), {', '.join(CPU_LEVERS)} "
                                               "on a CPU; 'none' for none")
    p.add_argument("--lever-precisions", nargs="+", choices=PRECISIONS, help="where levers are timed (default: bf16; "
                                                                            "a CPU: fp32)")
    p.add_argument("--reps", type=int, help="repetitions (fresh processes) per tree and shape (default 3; --quick 1)")
    p.add_argument("--steps", type=int, help="training steps per timed window (default 20; --quick 2)")
    p.add_argument("--windows", type=int, help="timed windows per job (default 3; --quick 2)")
    p.add_argument("--warmup", type=int, help="training steps before timing (default 5: memory full, compiled)")
    p.add_argument("--segments", type=int, help="evaluation segments timed (default 32; --quick 4)")
    p.add_argument("--kernels", action="store_true", help="also count operators, reads and CUDA kernels per segment "
                                                          "of the base's and this checkout's batch-1 evaluation")
    p.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1), help="torch CPU threads per worker")
    p.add_argument("--job-timeout", type=int, default=1800, help="seconds for one worker process (a tree and shape)")
    p.add_argument("--plan", action="store_true", help="print the jobs and exit")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    cpu = args.device == "cpu"
    args.shapes = args.shapes or list(QUICK_SHAPES if args.quick else SHAPES)
    args.precisions = args.precisions or (["fp32"] if cpu else list(PRECISIONS))
    args.lever_precisions = args.lever_precisions or (["fp32"] if cpu else ["bf16"])
    levers = args.levers or list(CPU_LEVERS if cpu else LEVERS)
    args.levers = [] if levers == ["none"] else levers
    unknown = [lever for lever in args.levers if lever not in LEVERS]
    if unknown:
        p.error(f"unknown lever(s) {unknown}; choose from {list(LEVERS)} or 'none'")
    args.reps = args.reps or (1 if args.quick else 3)
    args.steps = args.steps or (2 if args.quick else 20)
    args.windows = args.windows or (2 if args.quick else 3)
    args.warmup = args.warmup if args.warmup is not None else (2 if args.quick else 5)
    args.segments = args.segments or (4 if args.quick else 32)
    jobs = plan(args)
    if args.plan:
        for j in jobs:
            print(f"{j['id']:4d} {j['tree']:4s} {j['shape']:10s} {j['precision']:4s} {j['mode']:5s} {j['name']}")
        print(f"{len(jobs)} jobs x {args.reps} repetitions, in {2 * len(args.shapes) * args.reps} processes")
        return {}
    t_start = time.perf_counter()
    peak = peaks(args)
    print(f"matmul peaks on {peak.get('gpu', args.device)}: "
          + ", ".join(f"{k} {v:.1f} TFLOP/s" for k, v in peak["peaks_tflops"].items()), file=sys.stderr)
    flops = {shape: train_flops(*shape_config(shape, args.quick)) for shape in args.shapes}
    rows: dict[int, list[dict]] = {j["id"]: [] for j in jobs}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(args.base_tree).resolve() if args.base_tree else worktree(args.base, Path(tmp) / "base")
        try:
            trees = dict(base=base, head=ROOT)
            commits = {name: commit_of(tree) for name, tree in trees.items()}
            print(f"base {args.base_tree or args.base} ({commits['base']}) vs this checkout ({commits['head']}), "
                  f"{args.reps} repetitions, {len(jobs)} jobs", file=sys.stderr)
            turn = 0
            for rep in range(args.reps):
                for shape in args.shapes:
                    order = ("base", "head") if turn % 2 == 0 else ("head", "base")
                    turn += 1
                    for tree in order:
                        mine = [j for j in jobs if j["shape"] == shape and j["tree"] == tree]
                        t0 = time.perf_counter()
                        for j, r in zip(mine, run_worker(trees[tree], mine, args)):
                            rows[j["id"]].append(r)
                        print(f"rep {rep + 1}/{args.reps} {shape} {tree}: {len(mine)} jobs in "
                              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
        finally:
            if not args.base_tree:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    results = summarise(jobs, rows, peak, flops)
    print(f"\n{peak.get('gpu', args.device)}, torch {peak['torch']}: median [min-max] over {args.reps} repetitions; "
          "/ base, / default: ratio of medians (> 1: faster)")
    print(table(results))
    out = dict(gpu=peak.get("gpu"), device=args.device, torch=peak["torch"], capability=peak.get("capability"),
               base=args.base_tree or args.base, commits=commits,
               date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               settings=dict(shapes=args.shapes, precisions=args.precisions, modes=args.modes, levers=args.levers,
                             lever_precisions=args.lever_precisions, reps=args.reps, steps=args.steps,
                             windows=args.windows, warmup=args.warmup, segments=args.segments, quick=args.quick,
                             threads=args.threads),
               levers={name: what for name, (_, what, _) in LEVERS.items()},
               matmul_peak_tflops=peak["peaks_tflops"], train_flops_per_step=flops,
               runtime_s=time.perf_counter() - t_start, results=results)
    if args.json:
        tmp_path = Path(args.json).with_suffix(".json.tmp")
        tmp_path.write_text(json.dumps(out, indent=1) + "\n")
        tmp_path.replace(args.json)
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["--peaks"]:  # (peaks(): device, n, reps, threads)
        device, n, reps, threads = sys.argv[2], *map(int, sys.argv[3:6])
        print(json.dumps(matmul_peaks(device, n, reps, threads)))
    else:
        main()
