"""Train and score notebook 09's experiment: memory on code vs on text8-mini; write results.json.

    python scripts/own_text.py                           # the shipped seed-0 runs (with --seed 1 below: ~3 h, 2 cores)
    python scripts/own_text.py --only code --threads 1   # one text's three runs (two such jobs side by side)
    python scripts/own_text.py --steps 3 --out /tmp/own  # smoke test (seconds)
    python scripts/own_text.py --resume                  # continue runs stopped from outside
    python scripts/own_text.py --seed 1 --mems 0 64      # a second seed of the main comparison
    python scripts/own_text.py --text my.txt --out runs/my_text   # your text in place of the code

Every run: the cpu-small shape, STEPS steps, seed 0 (or --seed), fp32 on the CPU, its best.pt scored on the first
EVAL_CHARS characters of its text's test split (batch 16) with every memory of EVAL_MEMS; see
txl_minimal/tutorial/own_text.py for what is trained and why. Writes OUT/NAME/log.csv, OUT/NAME.safetensors
(each run's best weights), OUT/code-test.txt.gz (the code test characters scored: the standard library
differs between Python versions, so the scores re-run on the text itself) and OUT/results.json (an
existing one's other runs are kept). OUT defaults to results/own_text/, which notebook 09 reads.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import json
import platform
import sys
import time
from pathlib import Path

import torch

from txl_minimal.checkpoint import load, save
from txl_minimal.data import load_corpus
from txl_minimal.evaluate import evaluate
from txl_minimal.train import preset, train
from txl_minimal.tutorial.own_text import (BLOCK, EVAL_CHARS, EVAL_MEMS, PRESET, RESULTS_DIR, SEED_MEMS, STEPS,
                                           TRAIN_MEMS, block_means, code_test_path, run_name, write_stdlib_text)
from txl_minimal.utils import LN2, atomic_write, atomic_write_text


def code_corpus(out: Path, text: str | None = None):
    """The standard library as one text file (in runs/, not committed; ``text``: a file of yours in
    its place) read as characters; the part of its test split that is scored is also written,
    gzipped, into ``out``."""
    path = Path(text) if text else write_stdlib_text(Path("runs") / "own_text" / "stdlib.txt")
    corpus = load_corpus(path)
    test = corpus.decode(corpus.test[:EVAL_CHARS + 1])  # what is scored
    atomic_write(code_test_path(out), lambda f: f.write(gzip.compress(test.encode("utf-8"), mtime=0)))
    return corpus


def run(corpus, name: str, mem_len: int, steps: int, out: Path, score_only: bool = False,
        resume: bool = False, seed: int = 0) -> dict:
    """Train one model (``score_only``: take the weights an earlier run saved; ``resume``: continue a
    stopped run from its ckpt.pt), keep its best weights, score them with every evaluation memory on
    the first EVAL_CHARS test characters."""
    model_cfg, train_cfg = preset(PRESET, mem_len=mem_len, vocab_size=corpus.vocab_size, max_steps=steps,
                                  amp="off", device="cpu", compile=False, out=str(out / name),
                                  eval_interval=min(500, steps), warmup_steps=min(200, max(1, steps // 10)),
                                  seed=seed)
    if score_only:
        model = load(out / f"{name}.safetensors")
    else:
        resume = resume and (out / name / "ckpt.pt").exists()
        res = train(model_cfg, train_cfg, corpus=corpus, progress=False, resume=resume, overwrite=not resume)
        model = res.best_model()
        save(model, out / f"{name}.safetensors")
        for leftover in ("ckpt.pt", "best.pt"):
            (out / name / leftover).unlink(missing_ok=True)
    with open(out / name / "log.csv", newline="") as f:  # the log's clock continues across a resume
        rows = list(csv.DictReader(f))
    train_s, step = float(rows[-1]["wall_time_s"]), int(rows[-1]["step"])
    best_valid, best_step = min((float(r["valid_bpc"]), int(r["step"])) for r in rows if r["valid_bpc"])
    test_bpc, blocks = {}, {}
    t1 = time.perf_counter()
    for m in EVAL_MEMS:
        r = evaluate(model, corpus.test, batch_size=16, mem_len=m, max_tokens=EVAL_CHARS, per_token=True)
        test_bpc[m] = round(r["bpc"], 4)
        blocks[m] = [round(float(b), 5) for b in block_means(r["nll"] / LN2)]
        print(f"{name}: memory {m:5d} at evaluation: test bpc {r['bpc']:.4f}", flush=True)
    return dict(corpus="code" if name.startswith("code") else corpus.name, mem_len=mem_len, seed=seed, steps=step,
                params=sum(p.numel() for p in model.parameters()), train_wall_s=round(train_s, 1),
                eval_wall_s=round(time.perf_counter() - t1, 1), best_step=best_step,
                best_valid_bpc=round(best_valid, 4), test_bpc=test_bpc, blocks=blocks,
                model_config=model_cfg.to_dict(), test_chars=min(len(corpus.test) - 1, EVAL_CHARS))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--out", default=str(RESULTS_DIR))
    p.add_argument("--only", choices=("code", "text8-mini"), help="one text's runs (the other's are kept)")
    p.add_argument("--mems", type=int, nargs="+", default=list(TRAIN_MEMS), help="training memories")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--score-only", type=int, nargs="*", default=[], metavar="M",
                   help="training memories whose saved weights (OUT/NAME.safetensors) are scored again, not retrained")
    p.add_argument("--resume", action="store_true", help="continue runs stopped before the end (OUT/NAME/ckpt.pt)")
    p.add_argument("--seed", type=int, default=0, help="the training seed (runs of seed N > 0 are named NAME-sN)")
    p.add_argument("--text", help="a UTF-8 file of yours in place of the standard library's code (needs --out)")
    args = p.parse_args(argv)
    if args.text and Path(args.out).resolve() == RESULTS_DIR.resolve():
        p.error(f"--text would overwrite the shipped results in {RESULTS_DIR}. Fix: add --out runs/my_text")
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = {}
    for which in ("code", "text8-mini"):
        if args.only not in (None, which):
            continue
        corpus = code_corpus(out, args.text) if which == "code" else load_corpus("text8-mini")
        for m in args.mems:
            name = run_name(which, m, args.seed)
            runs[name] = run(corpus, name, m, args.steps, out, score_only=m in args.score_only,
                             resume=args.resume, seed=args.seed)
            # written after every run (results of the other job, or of an earlier one, are kept)
            path = out / "results.json"
            old = json.loads(path.read_text())["runs"] if path.exists() else {}
            merged = {**old, **runs}
            meta = dict(script="scripts/own_text.py", preset=PRESET, steps=args.steps, block=BLOCK,
                        eval_batch_size=16, eval_chars=EVAL_CHARS, eval_mems=list(EVAL_MEMS),
                        train_mems=list(TRAIN_MEMS), seed_mems=list(SEED_MEMS),
                        python=platform.python_version(), torch=torch.__version__, threads=args.threads,
                        machine=platform.machine(), code=args.text or "the top-level modules of Python's standard "
                        f"library (Python {platform.python_version()}), one after another")
            atomic_write_text(path, json.dumps(dict(meta=meta, runs=dict(sorted(merged.items()))), indent=1))
    print(f"wrote {out}/results.json", file=sys.stderr)


if __name__ == "__main__":
    main()
