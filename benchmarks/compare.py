"""Speed of this checkout against another commit, measured in one run, interleaved.

    python benchmarks/compare.py                    # against main (git worktree), 5 repetitions
    python benchmarks/compare.py --base c1740ad --reps 7 --json benchmarks/compare-cpu.json
    python benchmarks/compare.py --quick            # smoke test: tiny sizes, 2 repetitions

Both trees are timed on the same machine in the same run, taking turns (A B, B A, A B, ...)
so that a slower minute of a shared machine hits both; each measurement is a fresh process
(its own peak memory) that imports ``txl_minimal`` from one tree. Reported: the median over
repetitions of each tree's time, its spread (min-max), and the median of the per-repetition
ratios base / this checkout (> 1: this checkout is faster). Only the model's public API of
both trees is used (``TXLConfig``, ``TransformerXL``, ``fast_attn``), so any commit since the
model landed can be the base. What is timed (the benchmark model of bench.py, random ids):

  train  batch 16, tgt_len 128, dropout 0.1, fp32, forward + backward + Adam step, with the
         memory carried between steps; median of --steps steps after the memory is full
  eval   batch 1, no grad, eval mode, fp32; median of --segments segments after warm-up
  peak   the process's peak resident memory (ru_maxrss) minus its resident memory before the
         first step (bench.py's peak-MiB measure), in MiB
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = dict(n_layer=4, d_model=256, n_head=4, d_head=64, d_inner=1024, dropout=0.1, tgt_len=128)

# Runs in a fresh interpreter with PYTHONPATH = one tree; prints one JSON line.
WORKER = r"""
import json, resource, statistics, sys, time
import torch
job = json.loads(sys.argv[1])
torch.set_num_threads(job["threads"])
torch.manual_seed(0)
from txl_minimal.model import TXLConfig, TransformerXL
import txl_minimal
cfg = TXLConfig(**job["model"], mem_len=job["mem_len"])
model = TransformerXL(cfg)
model.fast_attn = True
B, T = job["batch"], cfg.tgt_len
x, y = torch.randint(0, cfg.vocab_size, (2, B, T))
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
warmup = -(-cfg.mem_len // T) + 2  # the memory is full from then on
if job["mode"] == "train":
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    mems = None
    def step():
        global mems
        out = model(x, mems, targets=y)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        mems = out.mems
    n = job["steps"]
else:
    model.eval()
    mems = None
    def step():
        global mems
        with torch.no_grad():
            mems = model(x, mems, targets=y).mems
    n = job["segments"]
base = rss()  # before the first step: the peak below includes activations, gradients, Adam state
for _ in range(warmup):
    step()
times = []
for _ in range(n):
    t0 = time.perf_counter()
    step()
    times.append(time.perf_counter() - t0)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(dict(ms=1e3 * statistics.median(times), peak_mib=(peak - base) / 2 ** 20,
                      source=txl_minimal.__file__)))
"""


def run_job(tree: Path, job: dict) -> dict:
    """One measurement in a fresh process importing txl_minimal from ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS=str(job["threads"]),
               MKL_NUM_THREADS=str(job["threads"]))
    res = subprocess.run([sys.executable, "-c", WORKER, json.dumps(job)], env=env, cwd=tree,
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"the measurement failed in {tree}:\n{res.stderr[-2000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if not out["source"].startswith(str(tree)):  # an installed copy would shadow the tree
        raise SystemExit(f"{tree}: imported txl_minimal from {out['source']}, not from the tree")
    return out


def worktree(ref: str, where: Path) -> Path:
    """A detached checkout of ``ref`` (a branch, tag or commit of this repository)."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(where), ref], check=True)
    return where


def commit_of(tree: Path) -> str:
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return (out.stdout.strip() or "unknown") + ("+changes" if dirty else "")


def spread(values: list[float], fmt: str = ".1f") -> str:
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", default="main", help="commit to compare against (default: main)")
    p.add_argument("--reps", type=int, default=5, help="repetitions per tree and setting (>= 5 to report)")
    p.add_argument("--mem-lens", type=int, nargs="+", default=[128, 512])
    p.add_argument("--steps", type=int, default=5, help="training steps timed per repetition")
    p.add_argument("--segments", type=int, default=30, help="evaluation segments timed per repetition")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--quick", action="store_true", help="tiny sizes, 2 repetitions (a smoke test)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    model, batch, reps, mem_lens = dict(MODEL), 16, args.reps, args.mem_lens
    if args.quick:
        model.update(n_layer=2, d_model=64, d_head=16, d_inner=128, tgt_len=32)
        batch, reps, mem_lens = 4, 2, [32]
    settings = [(mode, m) for mode in ("train", "eval") for m in mem_lens]
    results = {f"{mode} mem_len {m}": dict(base=[], head=[], ratio=[], base_mib=[], head_mib=[])
               for mode, m in settings}
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        base = worktree(args.base, Path(tmp) / "base")
        try:
            trees = dict(base=base, head=ROOT)
            commits = {name: commit_of(tree) for name, tree in trees.items()}
            print(f"base {args.base} ({commits['base']}) vs this checkout ({commits['head']}), "
                  f"{reps} repetitions, {args.threads} threads", file=sys.stderr)
            for rep in range(reps):
                for mode, mem_len in settings:
                    job = dict(mode=mode, mem_len=mem_len, model=model, threads=args.threads,
                               batch=batch if mode == "train" else 1, steps=args.steps, segments=args.segments)
                    order = ("base", "head") if rep % 2 == 0 else ("head", "base")
                    got = {name: run_job(trees[name], job) for name in order}
                    r = results[f"{mode} mem_len {mem_len}"]
                    for name in ("base", "head"):
                        r[name].append(got[name]["ms"])
                        r[f"{name}_mib"].append(got[name]["peak_mib"])
                    r["ratio"].append(got["base"]["ms"] / got["head"]["ms"])
                    print(f"rep {rep + 1}/{reps} {mode} mem_len {mem_len}: base {got['base']['ms']:.1f} ms, "
                          f"this {got['head']['ms']:.1f} ms", file=sys.stderr)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
    rows = [("setting", "base ms", "this ms", "speed-up", "base peak MiB", "this peak MiB")]
    for name, r in results.items():
        rows.append((name, spread(r["base"]), spread(r["head"]), spread(r["ratio"], ".2f") + "x",
                     spread(r["base_mib"], ".0f"), spread(r["head_mib"], ".0f")))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    print(f"\nmedian [min-max] over {reps} repetitions; speed-up = base time / this checkout's time")
    print("\n".join([lines[0], "-" * len(lines[0])] + lines[1:]))
    out = dict(base=args.base, commits=commits, reps=reps, threads=args.threads, model=model, batch=batch,
               cpu=_cpu(), runtime_s=time.perf_counter() - t_start, results=results)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return out


def _cpu() -> str:
    if os.path.exists("/proc/cpuinfo"):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    import platform
    return platform.processor()


if __name__ == "__main__":
    main()
