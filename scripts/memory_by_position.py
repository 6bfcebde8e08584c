"""Where memory's gain comes from, measured on several held-out stretches: results/memory_by_position.json.

    python scripts/memory_by_position.py                         # ~40 min on 1 CPU thread
    python scripts/memory_by_position.py --weights runs/own_text_f16 --only own_text
    python scripts/memory_by_position.py --stretch 2048 --stretches 1 --out /tmp/m.json   # a smoke test (seconds)

Every scoring reads STRETCHES stretches of STRETCH characters spread through the valid split and as many through
the test split (txl_minimal/tutorial/memory_gain.py), each as 16 columns from an empty memory, and keeps the bits
saved at each position of the segment (every column's first segment, read without memory by both, left out):

- own_text: notebook 09's models (scripts/own_text.py; cpu-small, L = 64), code and text8-mini, seeds 0 and 1: the
  model trained and read with M = 64 against the one trained and read without memory; and the M = 64 models read
  with longer memories, with the paper's remedies (clamp_len, same_length): the bpc of each stretch.
- shipped: the package's text8-mini Transformer-XL models (txl: L = M = 128; txl-tiny: L = M = 64) read with their
  memory against without it, and with twice their memory (notebooks 01, 03, 06).

The weights are read as they are shipped (float16 for notebook 09's: --weights names their folder). Nothing is
trained. The code's held-out text (this Python's standard library) is written beside the results, gzipped, so the
notebook can re-score a stretch on any Python.
"""
from __future__ import annotations

import argparse
import gzip
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from txl_minimal import load_pretrained
from txl_minimal.checkpoint import load
from txl_minimal.data import load_corpus
from txl_minimal.files import atomic_write, atomic_write_text
from txl_minimal.tutorial import memory_gain as mg
from txl_minimal.tutorial.own_text import RESULTS_DIR, run_name, write_stdlib_text

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results" / "memory_by_position.json"
LONGER = {"64": dict(mem_len=64), "256": dict(mem_len=256), "256, clamp 128": dict(mem_len=256, clamp_len=128),
          "256, clamp 128, same_length": dict(mem_len=256, clamp_len=128, same_length=True),
          "1024, clamp 128": dict(mem_len=1024, clamp_len=128)}  # the M = 64 models at evaluation
SEEDS = (0, 1)


def bpc(nll_by_position: np.ndarray) -> float:
    """The mean bits per character of a stretch (every prediction, the columns' first segments included)."""
    return float(nll_by_position.mean())


def own_text(weights: Path, stretches: int, length: int, log) -> tuple[dict, dict]:
    """Notebook 09's comparison on every stretch; and the code's held-out stretches as text."""
    results, texts = {}, {}
    for text in ("code", "text8"):
        corpus = load_corpus(write_stdlib_text(ROOT / "runs" / "own_text" / "stdlib.txt") if text == "code"
                             else "text8-mini")
        held = mg.heldout_stretches(corpus, stretches, length)
        if text == "code":
            texts = {f"{split} {start}": corpus.decode(ids) for split, start, ids in held}
        results[text] = {"stretches": [[split, start] for split, start, _ in held], "curves": {}, "longer": {}}
        for seed in SEEDS:
            m0, m64 = (load(weights / f"{run_name(text, M, seed)}.safetensors") for M in (0, 64))
            curves, longer = [], {k: [] for k in LONGER}
            for split, start, ids in held:
                t0 = time.perf_counter()
                without = mg.loss_by_position(m0, ids, mem_len=0)
                for name, lengths in LONGER.items():
                    with_ = mg.loss_by_position(m64, ids, **lengths)
                    longer[name].append(round(bpc(with_), 5))
                    if name == "64":
                        curves.append([round(float(x), 5) for x in mg.saving_by_position(without, with_)])
                log(f"{text} seed {seed} {split} {start}: saving {np.mean(curves[-1]):+.4f} bits "
                    f"({time.perf_counter() - t0:.0f} s)")
            results[text]["curves"][str(seed)] = curves
            results[text]["longer"][str(seed)] = longer
    return results, texts


def shipped(stretches: int, length: int, log) -> dict:
    """The package's text8-mini Transformer-XL models: their memory against none, and twice it."""
    corpus, results = load_corpus("text8-mini"), {}
    held = mg.heldout_stretches(corpus, stretches, length)
    for name in ("txl", "txl-tiny"):
        model = load_pretrained(name)
        M = model.cfg.mem_len
        entry = {"mem_len": M, "tgt_len": model.cfg.tgt_len, "stretches": [[s, p] for s, p, _ in held],
                 "curves": [], "bpc": {"0": [], str(M): [], str(2 * M): []}}
        for split, start, ids in held:
            t0 = time.perf_counter()
            scored = {m: mg.loss_by_position(model, ids, mem_len=m) for m in (0, M, 2 * M)}
            entry["curves"].append([round(float(x), 5) for x in mg.saving_by_position(scored[0], scored[M])])
            for m, nll in scored.items():
                entry["bpc"][str(m)].append(round(bpc(nll), 5))
            log(f"{name} {split} {start}: saving {np.mean(entry['curves'][-1]):+.4f} bits "
                f"({time.perf_counter() - t0:.0f} s)")
        results[name] = entry
    return results


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weights", default=str(RESULTS_DIR), help="the folder of notebook 09's NAME.safetensors")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--only", choices=("own_text", "shipped"))
    p.add_argument("--stretch", type=int, default=mg.STRETCH, help="predictions per stretch")
    p.add_argument("--stretches", type=int, default=mg.STRETCHES, help="stretches per split")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    if args.stretch < 1 or args.stretches < 1:
        p.error("--stretch and --stretches must be positive integers")
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    old = json.loads(out.read_text()) if out.is_file() else {}
    log = lambda line: print(line, flush=True)  # noqa: E731
    result = dict(old)
    if args.only in (None, "own_text"):
        result["own_text"], texts = own_text(Path(args.weights), args.stretches, args.stretch, log)
        heldout = out.with_name(out.stem + "-code.json.gz")
        atomic_write(heldout, lambda f: f.write(gzip.compress(json.dumps(texts).encode("utf-8"), mtime=0)))
    if args.only in (None, "shipped"):
        result["shipped"] = shipped(args.stretches, args.stretch, log)
    result["meta"] = dict(script="scripts/memory_by_position.py", stretch=args.stretch, stretches=args.stretches,
                          columns=mg.COLUMNS, start=mg.START, longer=list(LONGER), seeds=list(SEEDS),
                          weights=str(Path(args.weights).resolve().relative_to(ROOT)) if
                          Path(args.weights).resolve().is_relative_to(ROOT) else str(args.weights),
                          python=platform.python_version(), torch=torch.__version__, threads=args.threads,
                          machine=platform.machine())
    atomic_write_text(out, json.dumps(result, indent=1))
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
