"""What each fast path of txl_minimal/fast.py saves, one at a time, in one process.

    python benchmarks/levers.py                      # train and eval at mem_len 128 and 512, 3 repetitions
    python benchmarks/levers.py --profile train 128  # the top operators of a training step (torch.profiler)
    python benchmarks/levers.py --json benchmarks/levers-cpu.json

Every lever is switched off alone (the others on) and timed in turn with "all on" and "all
off" (``model.fast_attn = False``: the explicit code of model.py), repetition after repetition,
so that a noisy minute hits all of them. Reported: time per step (median over repetitions)
and "gives" = time with the lever off / time with everything on (> 1: the lever pays).
The model and sizes are benchmarks/compare.py's (bench.py's model, random ids).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from txl_minimal import fast, model as model_py  # noqa: E402
from txl_minimal.model import TransformerXL, TXLConfig  # noqa: E402
from txl_minimal.utils import atomic_write_text  # noqa: E402

MODEL = dict(n_layer=4, d_model=256, n_head=4, d_head=64, d_inner=1024, dropout=0.1, tgt_len=128)


def _sdpa_attention(q_u, q_v, k, val, r, mask_bias, scale, dropatt, training):
    """Before fast.py: the padded rel_shift of model.py, then the bias given to SDPA."""
    pos = model_py.rel_shift(q_v @ r.transpose(-1, -2))
    bias = (pos * scale + mask_bias).to(q_u.dtype)
    return F.scaled_dot_product_attention(q_u, k, val, attn_mask=bias, dropout_p=dropatt if training else 0.0,
                                          scale=scale)


# lever -> (what it is, how to switch it off on a model, the modes it concerns)
LEVERS = {
    "dropout": ("dropout's random numbers: 16-bit lanes of 64-bit draws, one float mask",
                lambda m: [setattr(d, "__class__", torch.nn.Dropout)
                           for d in m.modules() if isinstance(d, fast.Dropout)],
                ("train",)),
    "attention": ("relative attention: bias built once, added by baddbmm (SDPA in evaluation)",
                  lambda m: setattr(fast, "relative_attention", _sdpa_attention), ("train", "eval")),
    "rel_shift": ("rel_shift as a strided view instead of the padded copy",
                  lambda m: setattr(fast, "rel_shift", model_py.rel_shift), ("train",)),
    "queries": ("queries projected for the segment's rows only, not the memory's",
                lambda m: setattr(fast, "project_qkv", model_py.RelMultiHeadAttn.project), ("train",)),
    "memory": ("the next memory sliced from the attention's [memory o segment], one cat fewer",
               lambda m: setattr(fast, "sliced_memory", lambda *a: None), ("train",)),
    "relu": ("ReLU out of place (in place on a view cost a copy in the backward)",
             lambda m: [setattr(r, "inplace", True) for r in m.modules() if isinstance(r, torch.nn.ReLU)],
             ("train",)),
    "eval_cache": ("evaluation keeps the memory's k, v, R, W_k,R R and the mask between segments",
                   lambda m: setattr(fast, "reusing", lambda module: False), ("eval",)),
}
ORIGINAL = {name: getattr(fast, name) for name in ("relative_attention", "rel_shift", "project_qkv", "sliced_memory",
                                                    "reusing")}


def build(mode: str, mem_len: int, off: str | None) -> tuple:
    """A fresh model, data and step function with lever ``off`` switched off ("all" = every one)."""
    for name, fn in ORIGINAL.items():
        setattr(fast, name, fn)
    torch.manual_seed(0)
    cfg = TXLConfig(**MODEL, mem_len=mem_len)
    model = TransformerXL(cfg)
    model.fast_attn = off != "all"
    if off not in (None, "all"):
        LEVERS[off][1](model)
    B = 16 if mode == "train" else 1
    x, y = torch.randint(0, cfg.vocab_size, (2, B, cfg.tgt_len))
    state = {"mems": None}
    if mode == "train":
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)

        def step():
            out = model(x, state["mems"], targets=y)
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            state["mems"] = out.mems
    else:
        model.eval()

        def step():
            with torch.no_grad():
                state["mems"] = model(x, state["mems"], targets=y).mems
    for _ in range(-(-mem_len // cfg.tgt_len) + 2):  # warm-up: the memory fills
        step()
    return step


def time_variant(mode: str, mem_len: int, off: str | None, n: int) -> float:
    step = build(mode, mem_len, off)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def profile(mode: str, mem_len: int, off: str | None, rows: int = 15) -> str:
    from torch.profiler import profile as prof
    step = build(mode, mem_len, off)
    with prof() as p:
        for _ in range(3):
            step()
    return p.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--mem-lens", type=int, nargs="+", default=[128, 512])
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--profile", nargs=2, metavar=("MODE", "MEM_LEN"), help="print a profile (train|eval, mem_len)")
    p.add_argument("--off", default=None, help="with --profile: a lever to switch off, or 'all'")
    p.add_argument("--json")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.profile:
        print(profile(args.profile[0], int(args.profile[1]), args.off))
        return {}
    results = {}
    for mode in ("train", "eval"):
        for mem_len in args.mem_lens:
            variants = [None, "all"] + [k for k, v in LEVERS.items() if mode in v[2]]
            times = {v: [] for v in variants}
            for rep in range(args.reps):
                for v in variants:
                    times[v].append(time_variant(mode, mem_len, v, 5 if mode == "train" else 30))
                print(f"{mode} mem_len {mem_len}: repetition {rep + 1}/{args.reps}", file=sys.stderr)
            on = statistics.median(times[None])
            results[f"{mode} mem_len {mem_len}"] = {
                str(v): dict(ms=statistics.median(t), gives=statistics.median(t) / on, all_ms=t)
                for v, t in times.items()}
    print(f"\nms per step (median of {args.reps}); gives = ms with the lever off / ms with all on "
          f"({args.threads} threads)")
    print(f"{'setting':20s} {'lever switched off':12s} {'ms':>8s} {'gives':>7s}  what")
    for setting, rows in results.items():
        for v, r in rows.items():
            name = {"None": "(none: all on)", "all": "(all: explicit)"}.get(v, v)
            what = LEVERS[v][0] if v in LEVERS else ""
            print(f"{setting:20s} {name:18s} {r['ms']:8.1f} {r['gives']:6.2f}x  {what}")
    if args.json:
        atomic_write_text(args.json, json.dumps(dict(threads=args.threads, reps=args.reps, model=MODEL,
                                                     results=results), indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
