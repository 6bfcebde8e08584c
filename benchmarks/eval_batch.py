"""How many windows to score per forward pass: context_nll's time against its batch size, the same numbers.

    python benchmarks/eval_batch.py                          # the shipped txl model, contexts 128 and 512
    python benchmarks/eval_batch.py --targets 64 --batches 8,32,512
    python benchmarks/eval_batch.py --json benchmarks/eval-batch-cpu.json

``tutorial.context.context_nll`` (notebook 06) scores each target with exactly ``c`` characters before it,
a window per target, ``batch_size`` windows per forward pass. The losses do not depend on the batch size;
the time does: on Linux, glibc gives an allocation larger than its mmap threshold (at most 32 MB) fresh pages
from the kernel each time, and every page is a fault when first written. Batches whose attention scores and
feed-forward activations pass that size spend more time in page faults than in arithmetic. Reported per batch
size: seconds (the fastest of ``--repeats``), the minor page faults of that run, and the largest difference of
its losses from the first batch size's (0: bit for bit the same). Batch sizes are timed in turn, repetition
after repetition.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import txl_minimal  # noqa: E402
from txl_minimal.data import load_corpus  # noqa: E402
from txl_minimal.files import atomic_write_text  # noqa: E402
from txl_minimal.tutorial.context import context_nll, target_positions  # noqa: E402


def faults() -> int:
    """Minor page faults of this process so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def measure(model, data, targets, context: int, batches: list[int], repeats: int) -> list[dict]:
    """One row per batch size: fastest seconds, its page faults, its losses' largest difference from the first's."""
    best = {b: (float("inf"), 0) for b in batches}
    losses = {}
    for _ in range(repeats):
        for b in batches:
            f0, t0 = faults(), time.perf_counter()
            losses[b] = context_nll(model, data, targets, context, batch_size=b, mem_len=model.cfg.mem_len)
            took = time.perf_counter() - t0
            if took < best[b][0]:
                best[b] = (took, faults() - f0)
    first = losses[batches[0]]
    return [dict(context=context, batch_size=b, seconds=round(best[b][0], 3), page_faults=best[b][1],
                 max_difference=float(np.abs(losses[b] - first).max())) for b in batches]


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="txl", help="a shipped model (default: txl)")
    p.add_argument("--contexts", default="128,512", help="comma-separated contexts (default: 128,512)")
    p.add_argument("--batches", default="16,32,64,128,512", help="comma-separated batch sizes")
    p.add_argument("--targets", type=int, default=256, help="targets scored per context (default: 256)")
    p.add_argument("--repeats", type=int, default=2, help="timed runs per batch size; the fastest is kept")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1)")
    p.add_argument("--json", help="also write the rows here")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    model = txl_minimal.load_pretrained(a.model)
    test = load_corpus("text8-mini").test
    contexts = [int(c) for c in a.contexts.split(",")]
    targets = target_positions(len(test), a.targets, max_context=max(contexts))
    rows = [r for c in contexts for r in measure(model, test, targets, c, [int(b) for b in a.batches.split(",")],
                                                 a.repeats)]
    print(f"context_nll, {a.model}, {a.targets} targets, {a.threads} thread(s), fastest of {a.repeats}")
    print(f"{'context':>8s} {'batch':>6s} {'seconds':>8s} {'page faults':>12s} {'vs fastest':>10s} "
          f"{'max |diff| (nats)':>18s}")
    for c in contexts:
        mine = [r for r in rows if r["context"] == c]
        fastest = min(r["seconds"] for r in mine)
        for r in mine:
            print(f"{c:8d} {r['batch_size']:6d} {r['seconds']:8.2f} {r['page_faults']:12,d} "
                  f"{r['seconds'] / fastest:9.2f}x {r['max_difference']:18.1e}")
    result = dict(model=a.model, targets=a.targets, threads=a.threads, repeats=a.repeats, rows=rows)
    if a.json:
        atomic_write_text(Path(a.json), json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
