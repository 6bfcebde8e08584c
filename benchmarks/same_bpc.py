"""Training with the fast paths reaches the explicit path's validation bpc (within seed spread).

    python benchmarks/same_bpc.py                     # 3 seeds x (fast, explicit), 400 steps each
    python benchmarks/same_bpc.py --seeds 0 1 --steps 200 --json benchmarks/same-bpc.json

The fast paths draw other dropout random numbers than ``nn.Dropout``, so the two trainings
are not bit-equal: what must hold is that they end at the same validation bpc, to within
the spread between seeds. A small model with dropout 0.1 (where the dropout lever matters)
is trained with ``txl_minimal.train`` on text8-mini, once per seed with each path.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import txl_minimal.train as train_py  # noqa: E402
from txl_minimal.data import load_corpus  # noqa: E402
from txl_minimal.utils import atomic_write_text  # noqa: E402

MODEL = dict(n_layer=2, n_head=2, d_model=64, d_head=32, d_inner=256, dropout=0.1, dropatt=0.0,
             tgt_len=32, mem_len=32)


def run(seed: int, fast_on: bool, steps: int, corpus) -> float:
    with tempfile.TemporaryDirectory() as out:  # attention= picks fast.py's subclasses or model.py's code
        model_cfg, cfg = train_py.preset("cpu-tiny", **MODEL, max_steps=steps, eval_interval=steps,
                                         warmup_steps=steps // 10, seed=seed, out=out, amp="off",
                                         attention="fast" if fast_on else "explicit", eval_tokens=32768,
                                         device="cpu")
        return train_py.train(model_cfg, cfg, corpus, progress=False).valid_bpc


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--json")
    args = p.parse_args(argv)
    corpus = load_corpus("text8-mini")
    bpc = {"fast": [], "explicit": []}
    for seed in args.seeds:
        for name in bpc:
            bpc[name].append(run(seed, name == "fast", args.steps, corpus))
            print(f"seed {seed} {name:8s} valid bpc {bpc[name][-1]:.4f}", file=sys.stderr)
    diffs = [f - e for f, e in zip(bpc["fast"], bpc["explicit"])]
    spread = {k: max(v) - min(v) for k, v in bpc.items()}
    print(f"valid bpc after {args.steps} steps (first 32,768 valid characters), seeds {args.seeds}")
    for name, values in bpc.items():
        print(f"  {name:8s} " + "  ".join(f"{v:.4f}" for v in values) +
              f"   mean {statistics.mean(values):.4f}, seed spread (max-min) {spread[name]:.4f}")
    print("  fast - explicit per seed: " + "  ".join(f"{d:+.4f}" for d in diffs) +
          f"   mean {statistics.mean(diffs):+.4f}")
    same = abs(statistics.mean(diffs)) <= max(spread.values())
    print(f"  mean difference {'within' if same else 'OUTSIDE'} the seed spread ({max(spread.values()):.4f})")
    out = dict(steps=args.steps, seeds=args.seeds, model=MODEL, valid_bpc=bpc, fast_minus_explicit=diffs,
               seed_spread=spread, within_spread=same)
    if args.json:
        atomic_write_text(args.json, json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
