"""Does the stop-gradient keep Transformer-XL from relaying a value past L + M? Writes
results/long_range_relay.json (notebook 03, section 5, reads it).

    python scripts/long_range_relay.py --replace-shipped       # the shipped result (~15 min, 1 thread)
    python scripts/long_range_relay.py --steps 5 --out /tmp/r  # smoke test (a minute)

A 2-layer model can see a set up to 2M + L - 1 tokens back, but past L + M - 1 only
through a relay: a token of an EARLIER segment whose layer-1 state holds the value, read
from layer 2's memory. That state was computed behind SG(.), so the answer's loss never
reaches the computation that wrote it. Inside one segment a relay is redundant (every set
a token of the segment sees, a later query of the segment sees directly).

The test: fine-tune the 2-layer model of scripts/long_range.py (results/long_range/xl.safetensors,
L = 32, M = 96) in two arms that differ ONLY in the gradient. Both read the same windows of
W = 8 segments (same order, same optimiser), each from its start, segment by segment with a
memory of M: the same forward pass, the same loss (the answers' NLL: the filler is noise).

    sg      the memory detached, as Transformer-XL trains (the model's own forward)
    no-sg   the same pass as one banded pass (analysis.band_forward): the answer's loss
            reaches every earlier segment of its window

Each arm (and the start) is scored like scripts/long_range.py, on the held-out stream (gaps up to
800) read in segments with the memory M: accuracy on the answers by gap, and their mean NLL.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from txl_minimal.model import TransformerXL
from txl_minimal.tasks import (RecallTask, bucket_labels, load_recall_model, recall_accuracy, recall_correct,
                               recall_stream, stream_predictions)
from txl_minimal.tutorial.analysis import band_forward, token_embeddings
from txl_minimal.cli import int_at_least, stopped_by_ctrl_c
from txl_minimal.files import atomic_write_text
from txl_minimal.machine import seed_everything
from txl_minimal.shipped_files import shipped_out_problem

ROOT = Path(__file__).resolve().parents[1]
START = ROOT / "results" / "long_range" / "xl.safetensors"
TASK, EVAL_TASK = RecallTask(), RecallTask(max_gap=800)  # as scripts/long_range.py
EDGES = (32, 64, 96, 128, 160, 192, 224, 256, 384)      # 129-224: what two layers can reach only by a relay
STEPS, BATCH, WINDOW, LR, WARMUP = 1000, 8, 256, 1e-3, 30


def window_loss(model: TransformerXL, x: torch.Tensor, y: torch.Tensor, scored: torch.Tensor,
                stop_gradient: bool) -> torch.Tensor:
    """Mean NLL over the ``scored`` positions (B, W) of the windows x (B, W), read from their start in
    segments of tgt_len with the memory: with SG (the model's forward) or as one banded pass without."""
    seg_len = model.cfg.tgt_len
    if stop_gradient:
        mems, nll = None, []
        for s in range(0, x.size(1), seg_len):
            out = model(x[:, s:s + seg_len], mems, targets=y[:, s:s + seg_len])
            mems, nll = out.mems, nll + [out.nll]
        nll = torch.cat(nll, dim=1)
    else:
        logits = band_forward(model, token_embeddings(model, x), seg_len)
        nll = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape)
    return nll[scored].mean()


def fine_tune(model: TransformerXL, tokens: torch.Tensor, answer: torch.Tensor, stop_gradient: bool, steps: int,
              seed: int) -> float:
    """Adam, linear warm-up then cosine decay, gradients clipped to 0.25 (as tasks.train_stream);
    the windows are drawn from ``tokens`` by ``seed``, so both arms read the same ones. Returns seconds."""
    windows = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / WARMUP, 0.5 * (1 + math.cos(math.pi * s / steps))))
    model.train()
    t0 = time.perf_counter()
    for step in range(steps):
        starts = torch.randint(0, len(tokens) - WINDOW - 1, (BATCH,), generator=windows)
        rows = torch.stack([tokens[s:s + WINDOW + 1] for s in starts.tolist()])
        scored = torch.stack([answer[s + 1:s + WINDOW + 1] for s in starts.tolist()])
        loss = window_loss(model, rows[:, :-1], rows[:, 1:], scored, stop_gradient)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"  step {step:4d}  loss {loss.item():.4f}", flush=True)
    return time.perf_counter() - t0


@torch.no_grad()
def answer_nll(model: TransformerXL, stream) -> np.ndarray:
    """(A,) -ln p(answer) of every answer of ``stream``, read in segments with the memory (as
    tasks.stream_predictions): finer than right or wrong, it shows a relay that only begins to form."""
    x = torch.as_tensor(stream.tokens, dtype=torch.long)[None]
    logp, mems, seg_len = [], None, model.cfg.tgt_len
    for s in range(0, x.size(1), seg_len):
        out = model(x[:, s:s + seg_len], mems)
        mems = out.mems
        logp.append(out.logits.float().log_softmax(-1)[0])
    logp = torch.cat(logp)
    answers = torch.as_tensor(stream.answer_pos)
    return -logp[answers - 1, x[0, answers]].numpy()


def bucket_means(values: np.ndarray, gap: np.ndarray) -> dict[str, float]:
    """Mean of ``values`` in each gap bucket of EDGES, the buckets of tasks.recall_accuracy."""
    buckets = zip(bucket_labels(EDGES), (0, *EDGES[:-1]), EDGES)
    return {label: float(values[(gap > lo) & (gap <= hi)].mean()) for label, lo, hi in buckets}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python scripts/long_range_relay.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int_at_least(1), default=STEPS)
    p.add_argument("--out", type=Path, default=ROOT / "results", help="writes OUT/long_range_relay.json (default: "
                   "the shipped results/, with --replace-shipped)")
    p.add_argument("--replace-shipped", action="store_true", help="write into the shipped results/ (notebook 03 "
                   "reads it)")
    p.add_argument("--eval-tokens", type=int_at_least(1), default=200_000)
    args = p.parse_args(argv)
    if not args.replace_shipped and (problem := shipped_out_problem(args.out, "scripts/long_range_relay.py",
                                                                    "runs/relay")):
        p.error(problem)

    seed_everything(0)
    train = recall_stream(2_000_000, TASK, seed=1234)  # the stream scripts/long_range.py trained on
    tokens = torch.as_tensor(train.tokens, dtype=torch.long)
    answer = torch.zeros(len(tokens), dtype=torch.bool)  # the loss: the answers only (the filler is noise)
    answer[train.answer_pos] = True
    stream = recall_stream(args.eval_tokens, EVAL_TASK, seed=99)
    start = load_recall_model(START)
    cfg = start.cfg
    results = {"start": str(START.relative_to(ROOT)), "tgt_len": cfg.tgt_len, "mem_len": cfg.mem_len,
               "n_layer": cfg.n_layer, "steps": args.steps, "batch": BATCH, "window": WINDOW, "lr": LR,
               "threads": torch.get_num_threads(), "chance": EVAL_TASK.chance,
               "eval_task": {"max_gap": EVAL_TASK.max_gap, "tokens": args.eval_tokens},
               "train_answers_past_L_plus_M": float(np.mean(train.gap > cfg.tgt_len + cfg.mem_len - 1)),
               "models": {}}
    arms = {"start": None, "sg": True, "no-sg": False}
    for name, stop_gradient in arms.items():
        model = load_recall_model(START)
        train_s = 0.0 if stop_gradient is None else fine_tune(model, tokens, answer, stop_gradient, args.steps, seed=1)
        correct = recall_correct(stream, stream_predictions(model.eval(), stream.tokens, cfg.tgt_len, cfg.mem_len))
        acc = recall_accuracy(correct, stream.gap, EDGES)
        nll = bucket_means(answer_nll(model, stream), stream.gap)
        results["models"][name] = {"train_s": round(train_s, 1), "accuracy": acc, "answer_nll": nll}
        print(f"{name:6s} accuracy " + "  ".join(f"{k}:{v:.2f}" for k, v in acc.items()), flush=True)
        print(f"{name:6s} nll (nats) " + "  ".join(f"{k}:{v:.3f}" for k, v in nll.items()), flush=True)
    atomic_write_text(args.out / "long_range_relay.json", json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as e:
        stopped_by_ctrl_c(e, "stopped by Ctrl-C: OUT/long_range_relay.json is as it was (it is written at the end)")
