"""Train the long-range recall comparison; write results/long_range.json and the weights.

    python scripts/long_range.py --replace-shipped      # the shipped results (~40 min, 1 thread)
    python scripts/long_range.py --steps 20 --out /tmp/lr --only xl lstm   # smoke test (seconds)

Every model sees the same recall stream (txl_minimal/tasks.py), batch, segment length
and number of steps. What is trained:

    xl, xl-seed1            Transformer-XL, 2 layers, memory M = 96, segments of L = 32
    vanilla, vanilla-seed1  the vanilla baseline: absolute positions, no memory, L = 32
    lstm, lstm-seed1        an LSTM of about the same size, state carried across segments
    xl-1layer, xl-3layer    Transformer-XL with 1 and 3 layers (how far does the reach grow?)

and how each is scored, on a held-out stream with gaps up to 800: Transformer-XL reads it
in segments with its memory (also with 0 memory and with 2x, 4x, 8x M); the vanilla model
gets a sliding window of exactly L tokens before every answer (its best case); the LSTM
reads it in segments with its state carried. Every model is rounded to float16 before it
is scored; the seed-0 xl, vanilla and lstm weights are stored (under 1 MB each). OUT defaults to results/,
whose long_range.json and long_range/ the notebooks read: written only with --replace-shipped.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from txl_minimal.model import TransformerXL, TXLConfig
from txl_minimal.tasks import (LSTMLM, RecallTask, bucket_labels, recall_accuracy, recall_correct, recall_stream,
                               round_to_float16, save_recall_model, stream_predictions, train_stream,
                               window_predictions)
from txl_minimal.cli import int_at_least, stopped_by_ctrl_c
from txl_minimal.files import atomic_write
from txl_minimal.machine import seed_everything
from txl_minimal.shipped_files import shipped_out_problem

OUT = Path(__file__).resolve().parents[1] / "results"
TASK, EVAL_TASK = RecallTask(), RecallTask(max_gap=800)
TGT_LEN, MEM_LEN = 32, 96
EDGES = (32, 64, 96, 128, 192, 256, 384, 512, 768)
STEPS, BATCH, LR, WARMUP = 8000, 16, 1e-3, 200


def xl_config(n_layer: int = 2, attn_type: str = "rel", mem_len: int = MEM_LEN) -> TXLConfig:
    return TXLConfig(vocab_size=TASK.vocab_size, n_layer=n_layer, n_head=4, d_model=128, d_head=32,
                     d_inner=512, dropout=0.0, tgt_len=TGT_LEN, mem_len=mem_len, attn_type=attn_type)


# name -> (kind, seed, how to build it)
RUNS = {
    "xl": ("xl", 0, lambda: TransformerXL(xl_config())),
    "xl-seed1": ("xl", 1, lambda: TransformerXL(xl_config())),
    "vanilla": ("vanilla", 0, lambda: TransformerXL(xl_config(attn_type="abs", mem_len=0))),
    "vanilla-seed1": ("vanilla", 1, lambda: TransformerXL(xl_config(attn_type="abs", mem_len=0))),
    "lstm": ("lstm", 0, lambda: LSTMLM(TASK.vocab_size)),
    "lstm-seed1": ("lstm", 1, lambda: LSTMLM(TASK.vocab_size)),
    "xl-1layer": ("xl", 0, lambda: TransformerXL(xl_config(n_layer=1))),
    "xl-3layer": ("xl", 0, lambda: TransformerXL(xl_config(n_layer=3))),
}
KEEP = ("xl", "vanilla", "lstm")  # the weights the notebooks load (each < 1 MB); the rest only score


def scores(name: str, kind: str, model: torch.nn.Module, stream) -> dict[str, dict]:
    """The rows of long_range.json that this model gives (several evaluations for xl)."""
    model = model.float().eval()
    if kind == "vanilla":
        evals = {name: ("window", TGT_LEN)}
    elif kind == "lstm":
        evals = {name: ("stream", None)}
    elif name == "xl":  # the memory sweep, on the main model only
        evals = {"xl": ("stream", MEM_LEN), "xl-nomem": ("stream", 0),
                 **{f"xl-eval-{k * MEM_LEN}": ("stream", k * MEM_LEN) for k in (2, 4, 8)}}
    else:
        evals = {name: ("stream", MEM_LEN)}
    rows = {}
    for row, (how, mem) in evals.items():
        t0 = time.perf_counter()
        if how == "window":
            correct = window_predictions(model, stream.tokens, stream.answer_pos, TGT_LEN) == \
                stream.tokens[stream.answer_pos]
        else:
            correct = recall_correct(stream, stream_predictions(model, stream.tokens, TGT_LEN, mem))
        rows[row] = {"eval": how, "eval_mem_len": mem, "accuracy": recall_accuracy(correct, stream.gap, EDGES),
                     "eval_s": round(time.perf_counter() - t0, 1)}
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python scripts/long_range.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int_at_least(1), default=STEPS)
    p.add_argument("--out", type=Path, default=OUT,
                   help="writes OUT/long_range.json and OUT/long_range/NAME.safetensors (default: the shipped "
                        "results/, with --replace-shipped)")
    p.add_argument("--replace-shipped", action="store_true", help="write into the shipped results/ (the notebooks "
                   "read it)")
    p.add_argument("--only", nargs="+", choices=list(RUNS), help="train only these (others kept from the JSON)")
    p.add_argument("--eval-tokens", type=int_at_least(1), default=200_000)
    args = p.parse_args(argv)
    if not args.replace_shipped and (problem := shipped_out_problem(args.out, "scripts/long_range.py",
                                                                    "runs/long_range")):
        p.error(problem)

    json_path = args.out / "long_range.json"
    results = json.loads(json_path.read_text()) if json_path.exists() and args.only else {"models": {}}
    then = (results.get("steps", args.steps), results.get("eval_task", {}).get("tokens", args.eval_tokens))
    if (kept := sorted({r["trained"] for r in results["models"].values()} - set(args.only or []))) and \
            then != (args.steps, args.eval_tokens):  # one JSON's settings describe every model in it
        p.error(f"{json_path} holds models ({', '.join(kept)}) of --steps {then[0]} --eval-tokens {then[1]}, and "
                f"these would be of --steps {args.steps} --eval-tokens {args.eval_tokens}: one long_range.json cannot "
                "describe both (nothing was trained). Fix: another --out, or the same --steps and --eval-tokens")
    results.update(chance=TASK.chance, tgt_len=TGT_LEN, mem_len=MEM_LEN, steps=args.steps, batch=BATCH,
                   buckets=bucket_labels(EDGES), task=asdict(TASK),
                   eval_task={"max_gap": EVAL_TASK.max_gap, "tokens": args.eval_tokens},
                   threads=torch.get_num_threads())
    train_tokens = recall_stream(args.steps * BATCH * TGT_LEN + BATCH * (TGT_LEN + 1), TASK, seed=1234).tokens
    stream = recall_stream(args.eval_tokens, EVAL_TASK, seed=99)
    for name in args.only or RUNS:
        kind, seed, build = RUNS[name]
        seed_everything(seed)
        model = build()
        print(f"{name}: {kind}, seed {seed}, {model.num_params():,} parameters", flush=True)
        train_s = train_stream(model, train_tokens, args.steps, BATCH, TGT_LEN, LR, WARMUP)
        round_to_float16(model)  # every accuracy below is that of the float16 weights
        if name in KEEP:
            save_recall_model(model, args.out / "long_range" / f"{name}.safetensors")
        for row, res in scores(name, kind, model, stream).items():
            shape = {"mem_len": model.cfg.mem_len, "n_layer": model.cfg.n_layer} if kind != "lstm" else {}
            results["models"][row] = {"kind": kind, "trained": name, "seed": seed, **shape,
                                      "params": model.num_params(), "train_s": round(train_s, 1), **res}
            print(f"  {row:14s} " + " ".join(f"{k}:{v:.2f}" for k, v in res["accuracy"].items()), flush=True)
        atomic_write(json_path, lambda f: f.write((json.dumps(results, indent=1) + "\n").encode()))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as e:
        stopped_by_ctrl_c(e, "stopped by Ctrl-C: OUT/long_range.json holds the models finished (written after each)")
