"""Train notebook 08's word-level pair on text8-mini-words; write results/word_level/.

    python scripts/word_level.py --replace-shipped      # the shipped pair (about 5 minutes, 1 thread)
    python scripts/word_level.py --steps 20 --out /tmp/words   # smoke test

Transformer-XL and its vanilla twin (attn_type="abs", mem_len=0: absolute positions, no
memory) with the same adaptive input and softmax (cutoffs 2,000 / 6,000 of the 10,001
symbols, div_val 1 as the paper's base WikiText-103 model, tied), the same sizes, data, order
and steps. With div_val 2 (projections initialised at std 0.01, as the authors') this small
Transformer-XL left the unigram plateau late: valid perplexity 718 after 250 steps against 515
with div_val 1 (same seed and settings), 557 after 2,500 steps. Each is rounded to float16
and stored with ``tasks.save_recall_model``; the json holds the settings, the training time
and the valid/test perplexity of the stored weights (every token of each split read in one
row, memory carried). OUT defaults to the shipped results/word_level/ (notebook 08 reads it), written
only with --replace-shipped.
"""
from __future__ import annotations

import argparse
import json
import platform
import tempfile
from pathlib import Path

import torch

from txl_minimal.data import load_corpus
from txl_minimal.evaluate import evaluate
from txl_minimal.model import TXLConfig
from txl_minimal.tasks import round_to_float16, save_recall_model
from txl_minimal.train import TrainConfig, train
from txl_minimal.cli import int_at_least, stopped_by_ctrl_c
from txl_minimal.files import atomic_write
from txl_minimal.machine import seed_everything
from txl_minimal.shipped_files import shipped_out_problem

OUT = Path(__file__).resolve().parents[1] / "results" / "word_level"
MODEL = dict(n_layer=2, n_head=4, d_model=128, d_head=32, d_inner=512, dropout=0.1, dropatt=0.0,
             tgt_len=32, mem_len=32, cutoffs=[2000, 6000], div_val=1)
TWINS = {"txl": {}, "vanilla": dict(attn_type="abs", mem_len=0)}
TRAIN = dict(batch_size=16, lr=2e-3, warmup_steps=100, log_interval=100, seed=0)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python scripts/word_level.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int_at_least(1), default=2500)
    p.add_argument("--out", type=Path, default=OUT, help="default: the shipped results/word_level/, with "
                   "--replace-shipped")
    p.add_argument("--replace-shipped", action="store_true", help="write into the shipped results/word_level/")
    p.add_argument("--threads", type=int_at_least(1), default=1)
    args = p.parse_args(argv)
    if not args.replace_shipped and (problem := shipped_out_problem(args.out, "scripts/word_level.py",
                                                                    "runs/word_level")):
        p.error(problem)
    corpus = load_corpus("text8-mini-words")
    summary = {}
    for name, change in TWINS.items():
        seed_everything(0, threads=args.threads)
        cfg = TXLConfig(vocab_size=corpus.vocab_size, **{**MODEL, **change})
        with tempfile.TemporaryDirectory() as run:
            res = train(cfg, TrainConfig(max_steps=args.steps, eval_interval=args.steps, eval_tokens=4096,
                                         out=run, **TRAIN), corpus=corpus, progress=False)
        model = round_to_float16(res.model)
        save_recall_model(model, args.out / f"{name}.safetensors")
        scores = {split: round(evaluate(model, getattr(corpus, split), tgt_len=cfg.tgt_len)["ppl"], 2)
                  for split in ("valid", "test")}
        summary[name] = dict(config=cfg.to_dict(), params=sum(p.numel() for p in model.parameters()),
                             train_wall_time_s=round(res.wall_time_s, 1), tokens_per_s=round(res.tokens_per_s),
                             valid_ppl=scores["valid"], test_ppl=scores["test"])
        print(name, json.dumps(summary[name]), flush=True)
    summary["settings"] = dict(corpus=corpus.name, steps=args.steps, threads=args.threads, **TRAIN,
                               torch=torch.__version__, machine=platform.machine())
    atomic_write(args.out / "word_level.json", lambda f: f.write((json.dumps(summary, indent=1) + "\n").encode()))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as e:
        stopped_by_ctrl_c(e, "stopped by Ctrl-C: OUT/word_level.json is as it was (it is written last)")
