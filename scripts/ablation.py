"""Train the encoding x recurrence ablation (the paper's Sec. 4.2 / Table 6 in miniature), the
half-loss absolute model and the adaptive-span pair; write results.json.

    python scripts/ablation.py --replace-shipped                # the shipped numbers (~20 min, 2 cores)
    python scripts/ablation.py --steps 3 --tiny --out /tmp/abl  # smoke test (seconds)
    python scripts/ablation.py --only abs_nomem_half --replace-shipped   # re-train one variant; the others'
                                                                # results in OUT/results.json are kept

Every variant: same size, data (text8-mini) and steps, trained once per seed (--seeds,
3 by default: seeds 0, 1, 2); see txl_minimal/tutorial/ablation.py for what is trained and what
"longer context" means per variant. Writes OUT/NAME/log.csv (seed 0), OUT/NAME/seedK/log.csv
(seed K) and OUT/results.json (the weights are deleted unless --keep-ckpt); OUT defaults
to results/ablation/, the shipped results that notebook 07 reads, written only with --replace-shipped.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Optional
from collections.abc import Sequence

import torch

from txl_minimal.cli import int_at_least, stopped_by_ctrl_c
from txl_minimal.data import Corpus, CorpusError, load_corpus
from txl_minimal.files import WriteError, atomic_write_text, read_json
from txl_minimal.flops import attention_flops_per_token
from txl_minimal.model import TXLConfig
from txl_minimal.shipped_files import shipped_out_problem
from txl_minimal.train import evaluate, train
from txl_minimal.tutorial.ablation import (BASE_MODEL, BASE_TRAIN, LONG_FACTOR, RESULTS_DIR, TEST_BATCH,
                                           TINY_MODEL, Variant, contexts, later_half_bpc, model_config,
                                           model_spans, results_table, train_config, variants)


def flops_report(cfg: TXLConfig, ctx: dict, spans: Optional[Sequence[Sequence[float]]] = None) -> dict:
    """Attention FLOPs per token at an evaluation context, both counts (rounded)."""
    kw = dict(n_layer=cfg.n_layer, n_head=cfg.n_head, d_head=cfg.d_head, tgt_len=ctx["tgt_len"],
              mem_len=ctx["mem_len"], attn_type=cfg.attn_type, spans=spans,
              span_ramp=cfg.span_ramp if spans is not None else None)
    return {count: round(attention_flops_per_token(count=count, **kw)) for count in ("computed", "causal")}


def _round(x: float, nd: int = 4) -> float:
    """``x`` to ``nd`` decimals as a plain float (for results.json)."""
    return float(round(x, nd))


def run_variant(variant: Variant, steps: int, out_dir: Path, corpus: Corpus, tiny: bool = False,
                eval_tokens: Optional[int] = None, eval_batch_size: int = TEST_BATCH, keep_ckpt: bool = False,
                progress: bool = False, seed: int = 0) -> dict:
    """Train one variant with one seed into ``out_dir``/name (seed 0) or name/seedK (log.csv),
    score it, return its results."""
    model_cfg = model_config(variant, tiny)
    run_dir = Path(out_dir) / variant.name / (f"seed{seed}" if seed else "")
    train_cfg = train_config(steps, run_dir, tiny, seed=seed, **variant.train_overrides)
    t0 = time.perf_counter()
    res = train(model_cfg, train_cfg, corpus=corpus, progress=progress, overwrite=True)  # re-runs replace
    train_s = time.perf_counter() - t0
    model = res.model
    ctx = contexts(model_cfg)
    spans = model_spans(model)
    test = {}
    t1 = time.perf_counter()
    for which in ("train", "long"):
        r = evaluate(model, corpus.test, batch_size=eval_batch_size, max_tokens=eval_tokens, **ctx[which])
        test[which] = _round(r["bpc"])
    if model_cfg.mem_len == 0:  # no memory: also only the targets a half loss trains (context >= L/2 + 1)
        ids = corpus.test if eval_tokens is None else corpus.test[: eval_tokens + 1]
        test["later_half"] = _round(later_half_bpc(model, ids, model_cfg.tgt_len))
    eval_s = time.perf_counter() - t1
    if not keep_ckpt:  # neither the last state nor the best one
        for name in ("ckpt.pt", "best.pt"):
            (run_dir / name).unlink(missing_ok=True)
    result = dict(
        label=variant.label, group=variant.group, notes=variant.notes,
        attn_type=model_cfg.attn_type, mem_len=model_cfg.mem_len, adaptive_span=model_cfg.adaptive_span,
        params=model.num_params(), steps=res.step,
        final_train_bpc=_round(res.train_bpc), final_valid_bpc=_round(res.valid_bpc),
        test_bpc=dict(train_ctx=test["train"], long_ctx=test["long"],
                      **({"later_half": test["later_half"]} if "later_half" in test else {})),
        contexts=dict(train_ctx=ctx["train"], long_ctx=ctx["long"], long_desc=ctx["long_desc"]),
        attn_flops_per_token=dict(train_ctx=flops_report(model_cfg, ctx["train"], spans),
                                  long_ctx=flops_report(model_cfg, ctx["long"], spans)),
        train_wall_s=round(train_s, 1), eval_wall_s=round(eval_s, 1), threads=torch.get_num_threads(),
        log=str(run_dir.relative_to(out_dir) / "log.csv"), model_config=model_cfg.to_dict(),
        train_config={k: v for k, v in asdict(train_cfg).items() if k not in ("out", "device")},
    )
    if spans is not None:
        result["spans"] = [[round(z, 2) for z in layer] for layer in spans]
        result["span_reach"] = [[math.ceil(z + model_cfg.span_ramp) for z in layer] for layer in spans]
        # the same model with its spans switched off: how much the learned spans cost or save
        result["attn_flops_per_token_fixed"] = dict(train_ctx=flops_report(model_cfg, ctx["train"]),
                                                    long_ctx=flops_report(model_cfg, ctx["long"]))
    return result


def merge_seeds(per_seed: list[dict]) -> dict:
    """One run's results over its seeds: seed 0's record, with ``test_bpc`` the mean over seeds,
    ``test_bpc_sd`` their sample standard deviation and ``test_bpc_seeds`` each seed's."""
    merged = dict(per_seed[0], seeds=[r["train_config"]["seed"] for r in per_seed],
                  logs=[r["log"] for r in per_seed],
                  final_valid_bpc_seeds=[r["final_valid_bpc"] for r in per_seed])
    merged["test_bpc_seeds"] = {c: [r["test_bpc"][c] for r in per_seed] for c in per_seed[0]["test_bpc"]}
    merged["test_bpc"] = {c: _round(statistics.fmean(v)) for c, v in merged["test_bpc_seeds"].items()}
    merged["test_bpc_sd"] = {c: _round(statistics.stdev(v)) if len(v) > 1 else 0.0
                             for c, v in merged["test_bpc_seeds"].items()}
    merged["train_wall_s"] = round(sum(r["train_wall_s"] for r in per_seed), 1)
    merged["eval_wall_s"] = round(sum(r["eval_wall_s"] for r in per_seed), 1)
    return merged


def _kept_runs(path: Path, steps: int, tiny: bool, seeds: int, new: Sequence[str]) -> dict:
    """The runs of an earlier results.json at ``path`` that ``new`` (names) does not replace, with "_wall_s":
    their share of its wall time, and "_threads": the thread count its meta records (a run made otherwise
    records its own). ValueError if they were made with other steps, size or seeds: its meta, which
    describes every run, could not describe both (they used to be dropped without a word)."""
    if not path.exists():
        return {}
    old = read_json(path, f"Fix: move {path} aside (its runs are then not kept), or choose another --out")
    meta = old.get("meta", {})
    kept = {name: r for name, r in old.get("runs", {}).items() if name not in new}
    then, now = (meta.get("steps"), meta.get("tiny"), meta.get("seeds")), (steps, tiny, list(range(seeds)))
    if kept and then != now:
        said = "steps {}, tiny {}, seeds {}"
        raise ValueError(f"{path} holds runs ({', '.join(kept)}) made with {said.format(*then)}, and these would be "
                         f"made with {said.format(*now)}: one results.json cannot describe both (nothing was trained). "
                         "Fix: another --out, or the same --steps, --tiny and --seeds as those runs")
    if not kept:
        return {}
    replaced = sum(r["train_wall_s"] + r["eval_wall_s"] for name, r in old.get("runs", {}).items() if name in new)
    return dict(kept, _wall_s=max(0.0, meta.get("total_wall_s", 0.0) - replaced), _threads=meta.get("threads"))


def run_ablation(steps: int = BASE_TRAIN["max_steps"], out: str | Path = RESULTS_DIR, tiny: bool = False,
                 only: Optional[Sequence[str]] = None, eval_tokens: Optional[int] = None,
                 span_loss_coeff: Optional[float] = None, threads: Optional[int] = 2,
                 keep_ckpt: bool = False, progress: bool = False, verbose: bool = True,
                 seeds: int = 3, replace_shipped: bool = False) -> dict:
    """Train and score every variant with seeds 0..``seeds``-1; write ``out``/results.json and return it.
    With ``only``, the other variants' results already in ``out``/results.json (same steps, seeds and
    size: else a ValueError) are kept. ``out`` is the shipped folder by default, written only with
    ``replace_shipped`` (else a ValueError, before anything is written)."""
    if not replace_shipped and (problem := shipped_out_problem(out, "scripts/ablation.py", "runs/ablation")):
        raise ValueError(problem)
    chosen = [v for v in variants(span_loss_coeff) if only is None or v.name in only]
    if only is not None and len(chosen) != len(set(only)):
        known = [v.name for v in variants()]
        raise ValueError(f"unknown variant in {list(only)}; choose from {known}")
    out = Path(out)
    kept = _kept_runs(out / "results.json", steps, tiny, seeds, [v.name for v in chosen]) if only is not None else {}
    if threads:
        torch.set_num_threads(threads)
    out.mkdir(parents=True, exist_ok=True)
    corpus = load_corpus(BASE_TRAIN["corpus"])
    t0 = time.perf_counter()
    runs = {}
    for v in chosen:
        per_seed = []
        for seed in range(seeds):
            per_seed.append(run_variant(v, steps, out, corpus, tiny=tiny, eval_tokens=eval_tokens,
                                        keep_ckpt=keep_ckpt, progress=progress, seed=seed))
            if verbose:
                r = per_seed[-1]
                print(f"{v.name:18s} seed {seed}  test bpc {r['test_bpc']['train_ctx']:.3f} (train ctx) "
                      f"{r['test_bpc']['long_ctx']:.3f} (long ctx)  train {r['train_wall_s']:.0f} s", flush=True)
        runs[v.name] = merge_seeds(per_seed)
    wall_s = time.perf_counter() - t0
    threads = torch.get_num_threads()
    if kept:
        wall_s += kept.pop("_wall_s")
        threads = kept.pop("_threads")  # the file's; each new run records its own
        runs = {v.name: (runs | kept)[v.name] for v in variants() if v.name in runs | kept}  # the usual order
    results = dict(
        meta=dict(
            script="scripts/ablation.py", steps=steps, tiny=tiny, seeds=list(range(seeds)),
            corpus=corpus.name, split="test", eval_tokens=eval_tokens or len(corpus.test) - 1,
            eval_batch_size=TEST_BATCH, long_factor=LONG_FACTOR,
            long_context=("with memory: the training segment and LONG_FACTOR x the training memory; "
                          "without memory: one segment LONG_FACTOR x the training segment"),
            base_model=TINY_MODEL if tiny else BASE_MODEL,
            threads=threads, torch=torch.__version__, machine=platform.machine(),
            total_wall_s=round(wall_s, 1)),
        runs=runs)
    atomic_write_text(out / "results.json", json.dumps(results, indent=2) + "\n")  # a killed run keeps the old one
    return results


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int_at_least(1), default=BASE_TRAIN["max_steps"], help="training steps per variant")
    p.add_argument("--out", default=str(RESULTS_DIR), help="results folder (default: the shipped one, with "
                   "--replace-shipped)")
    p.add_argument("--replace-shipped", action="store_true",
                   help="write into the shipped results/ablation/ (notebook 07 reads it)")
    p.add_argument("--tiny", action="store_true", help="a tiny model and a short test prefix (smoke test)")
    p.add_argument("--only", nargs="*", choices=[v.name for v in variants()], help="train only these variants")
    p.add_argument("--eval-tokens", type=int_at_least(1), help="score only this many test predictions (default: all)")
    p.add_argument("--span-loss-coeff", type=float, help="override the adaptive-span penalty lambda")
    p.add_argument("--seeds", type=int_at_least(1), default=3, help="train every variant with seeds 0..N-1 (default 3)")
    p.add_argument("--threads", type=int_at_least(1), default=2, help="torch.set_num_threads (numbers depend on it)")
    p.add_argument("--keep-ckpt", action="store_true", help="keep each run's ckpt.pt and best.pt")
    p.add_argument("--progress", action="store_true", help="show a progress bar per run")
    args = p.parse_args(argv)
    eval_tokens = args.eval_tokens if args.eval_tokens is not None else (2048 if args.tiny else None)
    t0 = time.perf_counter()
    try:
        results = run_ablation(args.steps, args.out, tiny=args.tiny, only=args.only, eval_tokens=eval_tokens,
                               span_loss_coeff=args.span_loss_coeff, threads=args.threads, keep_ckpt=args.keep_ckpt,
                               progress=args.progress, seeds=args.seeds, replace_shipped=args.replace_shipped)
    except (ValueError, FileNotFoundError, FileExistsError, CorpusError) as e:  # bad input: the message, no traceback
        p.error(str(e))
    except WriteError as e:  # a full disk, a read-only --out
        sys.exit(f"error: {e}")
    except KeyboardInterrupt as e:  # (training's own Ctrl-C included: the script has no --resume)
        stopped_by_ctrl_c(e, f"stopped by Ctrl-C: {args.out}/results.json is as it was (it is written at the end). "
                             "Fix: run the same command again")
    print(results_table(results))
    print(f"{len(results['runs'])} runs in {time.perf_counter() - t0:.0f} s -> {args.out}/results.json")


if __name__ == "__main__":
    main()
