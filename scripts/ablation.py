"""Train the encoding x recurrence ablation and the adaptive-span pair; write results.json.

    python scripts/ablation.py                               # the shipped numbers (~50 min, 2 cores)
    python scripts/ablation.py --steps 3 --tiny --out /tmp/abl  # smoke test (seconds)

Every variant: same size, data (text8-mini), steps and seed; see txl_minimal/ablation.py
for what is trained and what "longer context" means per variant. Writes OUT/NAME/log.csv
per run and OUT/results.json (the weights are deleted unless --keep-ckpt).
"""
from __future__ import annotations

import argparse
import time

from txl_minimal.ablation import ABLATION_DIR, BASE_TRAIN, results_table, run_ablation, variants


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=BASE_TRAIN["max_steps"], help="training steps per variant")
    p.add_argument("--out", default=str(ABLATION_DIR), help="results folder (default: the shipped one)")
    p.add_argument("--tiny", action="store_true", help="a tiny model and a short test prefix (smoke test)")
    p.add_argument("--only", nargs="*", choices=[v.name for v in variants()], help="train only these variants")
    p.add_argument("--eval-tokens", type=int, help="score only this many test predictions (default: all)")
    p.add_argument("--span-loss-coeff", type=float, help="override the adaptive-span penalty lambda")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (numbers depend on it)")
    p.add_argument("--keep-ckpt", action="store_true", help="keep each run's ckpt.pt")
    p.add_argument("--progress", action="store_true", help="show a progress bar per run")
    args = p.parse_args(argv)
    eval_tokens = args.eval_tokens if args.eval_tokens is not None else (2048 if args.tiny else None)
    t0 = time.perf_counter()
    results = run_ablation(args.steps, args.out, tiny=args.tiny, only=args.only, eval_tokens=eval_tokens,
                           span_loss_coeff=args.span_loss_coeff, threads=args.threads,
                           keep_ckpt=args.keep_ckpt, progress=args.progress)
    print(results_table(results))
    print(f"{len(results['runs'])} runs in {time.perf_counter() - t0:.0f} s -> {args.out}/results.json")


if __name__ == "__main__":
    main()
