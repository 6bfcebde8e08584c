"""Train the LSTM baseline on text8-mini; write results/lstm_text/lstm.safetensors and lstm.json.

    python scripts/lstm_text.py --replace-shipped   # the shipped model (a few minutes, 2 threads)
    python scripts/lstm_text.py --steps 20 --out /tmp/lstm   # smoke test

The LSTM sees the same characters in the same order, for the same number of steps, as the
txl-tiny / vanilla-tiny pair (their cpu-small preset: batch 16, segments of 64, 5,000 steps,
lr 1e-3 with 200 warm-up steps and cosine decay, gradients clipped to 0.25). Notebook 06
compares it with the cpu-base pair (txl, vanilla: segments of 128, so twice its characters in
the same steps, lr 5e-4 with 500 warm-up steps, dropout 0.1); its state is carried from segment to segment and detached
(truncated back-propagation through one segment). It is stored in float16, and the bpc
in lstm.json is that of the stored weights: the whole valid and test splits read in one
row, the state carried throughout. OUT defaults to the shipped results/lstm_text/ (notebook 06 reads
it), written only with --replace-shipped.
"""
from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import numpy as np
import torch

from txl_minimal.data import VOCAB_SIZE, load_corpus
from txl_minimal.tasks import LSTMLM, round_to_float16, save_recall_model, train_stream
from txl_minimal.cli import int_at_least, stopped_by_ctrl_c
from txl_minimal.files import atomic_write
from txl_minimal.machine import seed_everything
from txl_minimal.scores import LN2
from txl_minimal.shipped_files import shipped_out_problem

OUT = Path(__file__).resolve().parents[1] / "results" / "lstm_text"
BATCH, TGT_LEN, STEPS, LR, WARMUP = 16, 64, 5000, 1e-3, 200  # the cpu-small preset's


@torch.no_grad()
def stream_bpc(model: LSTMLM, ids: np.ndarray, tgt_len: int = TGT_LEN) -> float:
    """Bits per character of ``ids`` read in one row, segment by segment, state carried."""
    x = torch.as_tensor(np.asarray(ids), dtype=torch.long)[None]
    model.eval()
    total, state = 0.0, None
    for s in range(0, x.size(1) - 1, tgt_len):
        inp, tgt = x[:, s:s + tgt_len], x[:, s + 1:s + 1 + tgt_len]
        out = model(inp[:, :tgt.size(1)], state, tgt)
        state = out.mems
        total += out.nll.double().sum().item()
    return total / (x.size(1) - 1) / LN2


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python scripts/lstm_text.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int_at_least(1), default=STEPS)
    p.add_argument("--out", type=Path, default=OUT, help="default: the shipped results/lstm_text/, with "
                   "--replace-shipped")
    p.add_argument("--replace-shipped", action="store_true", help="write into the shipped results/lstm_text/")
    p.add_argument("--threads", type=int_at_least(1), default=2)
    args = p.parse_args(argv)
    if not args.replace_shipped and (problem := shipped_out_problem(args.out, "scripts/lstm_text.py",
                                                                    "runs/lstm_text")):
        p.error(problem)

    seed_everything(0, threads=args.threads)
    corpus = load_corpus("text8-mini")
    model = LSTMLM(VOCAB_SIZE, d_embed=128, d_hidden=240, n_layer=2)
    print(f"LSTM: {model.num_params():,} parameters; {args.steps} steps of {BATCH} x {TGT_LEN}", flush=True)
    train_s = train_stream(model, corpus.train, args.steps, BATCH, TGT_LEN, LR, WARMUP)
    round_to_float16(model)
    save_recall_model(model, args.out / "lstm.safetensors")
    result = {"corpus": corpus.name, "params": model.num_params(), "steps": args.steps, "batch_size": BATCH,
              "tgt_len": TGT_LEN, "lr": LR, "warmup_steps": WARMUP, "train_s": round(train_s, 1),
              "threads": args.threads, "torch": torch.__version__, "machine": platform.machine(),
              "valid_bpc": round(stream_bpc(model, corpus.valid), 4),
              "test_bpc": round(stream_bpc(model, corpus.test), 4)}
    atomic_write(args.out / "lstm.json", lambda f: f.write((json.dumps(result, indent=1) + "\n").encode()))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as e:
        stopped_by_ctrl_c(e, "stopped by Ctrl-C: OUT/lstm.json is as it was (it is written last)")
