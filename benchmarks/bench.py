"""Speed benchmark of txl_minimal: training throughput, evaluation speed-up, FLOP/s.

    python benchmarks/bench.py                 # full run (~5 min on 2 idle CPU cores)
    python benchmarks/bench.py --quick         # smoke test (< 1 min)
    python benchmarks/bench.py --device cuda --json out.json

Everything is measured in one run on one machine, so compare ratios, not
absolute numbers across machines. Weights are random (speed does not depend on
them). See benchmarks/README.md for what every column means.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import resource
import statistics
import sys
import time
from datetime import datetime, timezone

import torch
from tqdm import tqdm

from txl_minimal.data import LMOrderedIterator, load_corpus
from txl_minimal.flops import TRAIN_STEP_FORMULA, train_step_flops
from txl_minimal.model import TXLConfig, TransformerXL
from txl_minimal.evaluate import evaluate, sliding_window_eval
from txl_minimal.utils import atomic_write_text

MODEL = dict(n_layer=4, d_model=256, n_head=4, d_head=64, d_inner=1024)
FULL = dict(batch=16, tgt_len=128, mem_lens=(128, 512), steps=10, contexts=(128, 256, 512, 1024),
            xl_segments=8, vanilla_preds=128, matmul_n=2048, matmul_reps=10)
QUICK = dict(batch=4, tgt_len=32, mem_lens=(32,), steps=3, contexts=(64, 128),
             xl_segments=4, vanilla_preds=16, matmul_n=512, matmul_reps=5)


def sync(device: torch.device) -> None:
    """Wait for queued GPU work so wall-clock times are real (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device) -> float:
    """Seconds taken by fn()."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def machine_info(device: torch.device, threads: int) -> dict:
    """CPU/GPU model, thread count, library versions and the load when we started."""
    cpu, bf16_hw = platform.processor() or platform.machine(), None
    if os.path.exists("/proc/cpuinfo"):
        lines = open("/proc/cpuinfo").read().splitlines()
        names = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")]
        flags = next((ln.split(":", 1)[1].split() for ln in lines if ln.startswith("flags")), [])
        cpu = names[0] if names else cpu
        # bf16 autocast only pays on a CPU with bf16 matmul units; elsewhere it is emulated
        bf16_hw = [f for f in ("amx_bf16", "avx512_bf16") if f in flags]
    info = dict(cpu=cpu, cpu_bf16=bf16_hw, cores=os.cpu_count(), threads=threads, torch=torch.__version__,
                python=platform.python_version(), device=str(device),
                load_avg_1min=round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
                date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def matmul_peak(device: torch.device, n: int, reps: int, dtype: torch.dtype) -> float:
    """GFLOP/s of an n x n matmul (median of reps): this machine's practical ceiling."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    a @ b  # warm-up
    t = statistics.median(timed(lambda: a @ b, device) for _ in range(reps))
    return 2 * n ** 3 / t / 1e9


def memory_bytes(device: torch.device, peak: bool) -> int:
    """Allocated (CUDA) or resident (CPU) memory now, or its peak so far (peak=True).
    CPU: current RSS from /proc (Linux), peak from ru_maxrss (KiB on Linux)."""
    if device.type == "cuda":
        return (torch.cuda.max_memory_allocated if peak else torch.cuda.memory_allocated)(device)
    if not peak and os.path.exists("/proc/self/statm"):
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def train_worker(job: dict) -> dict:
    """Time training steps of one configuration; runs in a fresh process so its peak
    memory is its own. Memory carried between steps as in real training."""
    torch.set_num_threads(job["threads"])
    torch.manual_seed(0)
    device = torch.device(job["device"])
    cfg = TXLConfig(**MODEL, tgt_len=job["tgt_len"], mem_len=job["mem_len"])
    model = TransformerXL(cfg).to(device).train()
    model.fast_attn = job["fast"]
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    batches = list(LMOrderedIterator(job["data"], job["batch"], cfg.tgt_len, device=device))
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=job["bf16"])
    mems = None

    def step(x, y):
        nonlocal mems
        with amp:
            out = model(x, mems, targets=y)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        mems = out.mems

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    base = memory_bytes(device, peak=False)
    times = [timed(lambda x=x, y=y: step(x, y), device) for x, y in batches]
    peak = memory_bytes(device, peak=True) - base
    step_s = statistics.median(times[job["warmup"]:])
    flops = train_step_flops(cfg, job["batch"])
    return dict(mem_len=cfg.mem_len, attention="fast" if job["fast"] else "explicit",
                precision="bf16" if job["bf16"] else "fp32", step_ms=1e3 * step_s,
                tokens_per_s=job["batch"] * cfg.tgt_len / step_s, gflop_per_s=flops / step_s / 1e9,
                gflop_per_step=flops / 1e9, peak_mem_mib=peak / 2 ** 20,
                steps_timed=len(times) - job["warmup"])


def amp_auto_choice(s: dict, device: torch.device) -> dict:
    """What TrainConfig(amp="auto") picks for the benchmark's training on this device, and why."""
    if device.type == "cuda":
        major = torch.cuda.get_device_capability(device)[0]
        return dict(choice="bf16" if major >= 8 else "fp16", reason=f"CUDA compute capability {major}.x")
    from txl_minimal.train import cpu_precision
    amp, speedup = cpu_precision(s["batch"] * s["tgt_len"], MODEL["d_model"], MODEL["d_inner"])
    return dict(choice="bf16" if amp == "bf16" else "fp32",
                reason=f"a bf16 matmul of the model's size ran {speedup:.2f}x fp32", bf16_speedup=speedup)


def run_training(s: dict, data, device: torch.device, threads: int, bar) -> list[dict]:
    """All 2 x 2 x len(mem_lens) training configurations, each in its own process."""
    ctx = mp.get_context("spawn")
    rows = []
    for mem_len in s["mem_lens"]:
        warmup = max(2, -(-mem_len // s["tgt_len"]) + 1)  # memory is full from then on
        n_tok = s["batch"] * s["tgt_len"] * (warmup + s["steps"]) + s["batch"]
        for fast in (False, True):
            for bf16 in (False, True):
                job = dict(threads=threads, device=str(device), tgt_len=s["tgt_len"], mem_len=mem_len,
                           fast=fast, bf16=bf16, batch=s["batch"], warmup=warmup, data=data[:n_tok])
                with ctx.Pool(1) as pool:
                    rows.append(pool.apply(train_worker, (job,)))
                bar.update()
    return rows


def steady_rate(run, n_warm: int, n_total: int, device: torch.device, reps: int = 2) -> float:
    """Predictions/s once the start-up transient is over: time run(n_warm) and
    run(n_total) (fastest of ``reps``, which also absorbs the first call's warm-up),
    and divide the extra predictions by the extra time. NaN if noise swamped it."""
    t_warm = min(timed(lambda: run(n_warm), device) for _ in range(reps))
    t_total = min(timed(lambda: run(n_total), device) for _ in range(reps))
    extra = t_total - t_warm
    return (n_total - n_warm) / extra if extra > 0.1 * t_total else float("nan")


def run_eval(s: dict, test, device: torch.device, bar) -> list[dict]:
    """Transformer-XL with memory vs the vanilla sliding window, same size, same context."""
    torch.manual_seed(0)
    B, L = s["batch"], s["tgt_len"]
    xl = TransformerXL(TXLConfig(**MODEL, tgt_len=L, mem_len=L)).to(device)
    vanilla = TransformerXL(TXLConfig(**MODEL, tgt_len=L, mem_len=0, attn_type="abs")).to(device)
    rows = []
    for C in s["contexts"]:
        # XL: segments of L tokens, C memories, same_length -> every query sees C keys.
        xl_run = lambda n, C=C: evaluate(xl, test, batch_size=B, tgt_len=L, mem_len=C,  # noqa: E731
                                         same_length=True, max_tokens=n)
        # memory is full after ceil(C/L) segments per column; then xl_segments more
        fill = -(-C // L) * L
        xl_rate = steady_rate(xl_run, B * fill, B * (fill + s["xl_segments"] * L), device)
        bar.update()
        # vanilla: the first window scores C positions in one pass; then one pass per prediction
        van_run = lambda n, C=C: sliding_window_eval(vanilla, test, C, max_predictions=n,  # noqa: E731
                                                     batch_size=B)
        van_rate = steady_rate(van_run, C, C + s["vanilla_preds"], device)
        bar.update()
        rows.append(dict(context=C, xl_pred_per_s=xl_rate, vanilla_pred_per_s=van_rate,
                         speedup=xl_rate / van_rate, vanilla_predictions_timed=s["vanilla_preds"],
                         xl_predictions_timed=B * s["xl_segments"] * L))
    return rows


def table(rows: list[dict], cols: list[tuple[str, str, str]]) -> str:
    """Plain-text table; cols = (header, key, format spec)."""
    cells = [[h for h, _, _ in cols]] + [[format(r[k], f) for _, k, f in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join([lines[0], "-" * len(lines[0])] + lines[1:])


def _bf16_units(machine: dict) -> str:
    """The CPU's bf16 matmul flags as recorded ("not recorded" in older result files)."""
    if "cpu_bf16" not in machine or machine["cpu_bf16"] is None:
        return "not recorded"
    return ", ".join(machine["cpu_bf16"]) or "none (bf16 is emulated)"


def report(res: dict) -> str:
    """The whole result as text: header, then the three tables."""
    m, s, mm = res["machine"], res["settings"], res["matmul_gflop_per_s"]
    for r in res["train"]:
        r["pct_fp32_peak"] = 100 * r["gflop_per_s"] / mm["fp32"]
    out = [f"txl_minimal benchmark  {m['date']}  ({'quick' if s['quick'] else 'full'} run, "
           f"{res['runtime_s']:.0f} s)",
           f"machine: {m['cpu']} | {m['cores']} cores | torch {m['torch']} threads {m['threads']} "
           f"| device {m['device']}{' ' + m.get('gpu', '') if 'gpu' in m else ''} "
           f"| load avg at start {m['load_avg_1min']} "
           f"| bf16 units: {_bf16_units(m)}",
           f"model: {MODEL}, random weights",
           f"matmul {s['matmul_n']}x{s['matmul_n']}: fp32 {mm['fp32']:.1f} GFLOP/s, "
           f"bf16 {mm['bf16']:.1f} GFLOP/s",
           f"amp='auto' picks {res['amp_auto']['choice']} for this training ({res['amp_auto']['reason']})"
           if "amp_auto" in res else "amp='auto': not recorded", "",
           f"1+3. training: batch {s['batch']}, tgt_len {s['tgt_len']}, median of {s['steps']} steps "
           f"after warm-up (Adam step included)",
           table(res["train"], [("mem_len", "mem_len", "d"), ("attention", "attention", "s"),
                                ("precision", "precision", "s"), ("ms/step", "step_ms", ".1f"),
                                ("tokens/s", "tokens_per_s", ".0f"), ("GFLOP/s", "gflop_per_s", ".1f"),
                                ("% fp32 matmul", "pct_fp32_peak", ".1f"),
                                ("peak MiB", "peak_mem_mib", ".0f")]), "",
           f"2. evaluation, predictions/s (steady state, fp32, fast attention, batch {s['batch']}): "
           f"Transformer-XL (tgt_len {s['tgt_len']}, mem_len = context, same_length) vs vanilla "
           f"sliding window (attn_type abs, one window per prediction)",
           table(res["eval"], [("context", "context", "d"), ("XL pred/s", "xl_pred_per_s", ".0f"),
                               ("vanilla pred/s", "vanilla_pred_per_s", ".1f"),
                               ("speed-up", "speedup", ".0f")])]
    return "\n".join(out)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, < 1 min (smoke test)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="torch CPU threads")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    s = dict(QUICK if args.quick else FULL, quick=args.quick)
    corpus = load_corpus("text8-mini")
    res = dict(machine=machine_info(device, args.threads), settings=s, flops_formula=TRAIN_STEP_FORMULA,
               memory_measure="CUDA: max_memory_allocated minus allocated before the first step; "
                              "CPU: peak RSS (ru_maxrss) minus RSS before the first step, one process "
                              "per config (activations, grads, Adam state, allocator slack)")
    n_configs = 4 * len(s["mem_lens"]) + 2 * len(s["contexts"]) + 1
    with tqdm(total=n_configs, desc="bench", file=sys.stderr) as bar:
        res["matmul_gflop_per_s"] = {name: matmul_peak(device, s["matmul_n"], s["matmul_reps"], dt)
                                     for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16))}
        bar.update()
        res["amp_auto"] = amp_auto_choice(s, device)
        res["train"] = run_training(s, corpus.train, device, args.threads, bar)
        res["eval"] = run_eval(s, corpus.test, device, bar)
    res["runtime_s"] = time.perf_counter() - t0
    print(report(res))
    if args.json:
        atomic_write_text(args.json, json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    main()
