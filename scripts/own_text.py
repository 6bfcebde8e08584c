"""Train and score notebook 09's experiment: memory on code vs on text8-mini; write results.json.

    python scripts/own_text.py --replace-shipped         # the shipped seed-0 runs (with --seed 1 below: ~3 h, 2 cores)
    python scripts/own_text.py --only code --threads 1 --replace-shipped   # one text's three runs (two such jobs
                                                                           # side by side)
    python scripts/own_text.py --steps 3 --out /tmp/own  # smoke test (seconds)
    python scripts/own_text.py --resume --replace-shipped                  # continue runs stopped from outside
    python scripts/own_text.py --seed 1 --mems 0 64 --replace-shipped      # a second seed of the main comparison
    python scripts/own_text.py --text my.txt --out runs/my_text   # your text in place of the code

Every run: the cpu-small shape, STEPS steps, seed 0 (or --seed), fp32 on the CPU, its best.pt scored on the first
EVAL_CHARS characters of its text's test split (batch 16) with every memory of EVAL_MEMS; see
txl_minimal/tutorial/own_text.py for what is trained and why. Writes OUT/NAME/log.csv, OUT/NAME.safetensors
(each run's best weights, in float16, scored as stored; results/own_text ships the seed-0 ones of M = 0 and
64, the others' scores are in results.json and results/memory_by_position.json), OUT/code-test.txt.gz (the code
test characters scored: the standard library differs between Python versions, so the scores re-run on the text
itself) and OUT/results.json (an
existing one's other runs are kept, if they were trained for as many steps on the same code). OUT defaults to
results/own_text/, which notebook 09 reads: written only with --replace-shipped.
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
from txl_minimal.cli import int_at_least, stopped_by_ctrl_c
from txl_minimal.data import CorpusError, load_corpus
from txl_minimal.evaluate import evaluate
from txl_minimal.files import WriteError, atomic_write, atomic_write_text, read_json
from txl_minimal.run_signals import TrainingInterrupted
from txl_minimal.scores import LN2
from txl_minimal.shipped_files import shipped_folder, shipped_out_problem
from txl_minimal.train import preset, train
from txl_minimal.tutorial.own_text import (BLOCK, EVAL_CHARS, EVAL_MEMS, PRESET, RESULTS_DIR, SEED_MEMS, STEPS,
                                           TRAIN_MEMS, block_means, code_test_path, run_name, write_stdlib_text)


def code_corpus(text: str | None = None):
    """The standard library as one text file (in runs/, not committed; ``text``: a file of yours in
    its place) read as characters."""
    return load_corpus(Path(text) if text else write_stdlib_text(Path("runs") / "own_text" / "stdlib.txt"))


def write_code_test(out: Path, corpus) -> None:
    """The part of the code corpus's test split that is scored, gzipped, into ``out``."""
    test = corpus.decode(corpus.test[:EVAL_CHARS + 1])
    atomic_write(code_test_path(out), lambda f: f.write(gzip.compress(test.encode("utf-8"), mtime=0)))


def code_text(text: str | None) -> str:
    """results.json's words for the code runs' text: the file given, or this Python's standard library."""
    return text or f"the top-level modules of Python's standard library (Python {platform.python_version()}), " \
                   "one after another"


def kept_runs(path: Path, planned: list[str], steps: int, code: str | None) -> tuple[dict, dict]:
    """The runs of an earlier OUT/results.json that this call does not replace, and its meta ({}, {}: none).
    ValueError where those runs were trained otherwise than this call's (other steps; code runs on another
    text than ``code``, None: no code run now): one results.json, whose meta describes every run, cannot hold both."""
    if not path.exists():
        return {}, {}
    old = read_json(path, f"Fix: move {path} aside (its runs are then not kept), or choose another --out")
    meta, kept = old.get("meta", {}), {k: v for k, v in old.get("runs", {}).items() if k not in planned}
    problem = None
    if kept and meta.get("steps") != steps:
        problem = f"its runs {', '.join(sorted(kept))} were trained for {meta.get('steps')} steps, these for {steps}"
    elif code is not None and meta.get("code", code) != code and (old_code := [k for k in kept if
                                                                              k.startswith("code")]):
        problem = f"its code runs {', '.join(old_code)} read {meta['code']}; these read {code}"
    if problem:
        raise ValueError(f"{path} holds runs this one would sit beside under one description: {problem}. Nothing "
                         "was trained. Fix: another --out, or the same --steps and --text as those runs")
    return kept, meta


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
        model = res.best_model().half()  # stored in float16 (half the file); scored below as stored
        save(model, out / f"{name}.safetensors")
        model = load(out / f"{name}.safetensors")
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
    p.add_argument("--steps", type=int_at_least(1), default=STEPS)
    p.add_argument("--out", default=str(RESULTS_DIR), help="default: the shipped results (with --replace-shipped)")
    p.add_argument("--replace-shipped", action="store_true",
                   help=f"write into the shipped {RESULTS_DIR.parent.name}/{RESULTS_DIR.name}/ (notebook 09 reads it)")
    p.add_argument("--only", choices=("code", "text8-mini"), help="one text's runs (the other's are kept)")
    p.add_argument("--mems", type=int_at_least(0), nargs="+", default=list(TRAIN_MEMS), help="training memories")
    p.add_argument("--threads", type=int_at_least(1), default=2)
    p.add_argument("--score-only", type=int_at_least(0), nargs="*", default=[], metavar="M",
                   help="training memories whose saved weights (OUT/NAME.safetensors) are scored again, not retrained")
    p.add_argument("--resume", action="store_true", help="continue runs stopped before the end (OUT/NAME/ckpt.pt)")
    p.add_argument("--seed", type=int_at_least(0), default=0,
                   help="the training seed (runs of seed N > 0 are named NAME-sN)")
    p.add_argument("--text", help="a UTF-8 file of yours in place of the standard library's code (needs --out)")
    args = p.parse_args(argv)
    if args.text and shipped_folder(args.out):
        p.error(f"--text would overwrite the shipped results in {args.out}. Fix: add --out runs/my_text")
    if not args.replace_shipped and (problem := shipped_out_problem(args.out, "scripts/own_text.py", "runs/own_text")):
        p.error(problem)
    if args.text and args.only == "text8-mini":
        p.error("--text replaces the code, and --only text8-mini trains no code run. Fix: drop one of them")
    if unknown := sorted(set(args.score_only) - set(args.mems)):
        p.error(f"--score-only {' '.join(map(str, unknown))}: not among the memories trained, --mems "
                f"{' '.join(map(str, args.mems))}. Fix: add them to --mems, or drop them from --score-only")
    out = Path(args.out)
    texts = [which for which in ("code", "text8-mini") if args.only in (None, which)]
    planned = [run_name(which, m, args.seed) for which in texts for m in args.mems]
    for which in texts:
        for m in args.score_only:
            if not (weights := out / f"{run_name(which, m, args.seed)}.safetensors").is_file():
                p.error(f"--score-only {m} scores the weights an earlier run saved, and there is no {weights} "
                        f"(nothing was written). Fix: drop {m} from --score-only to train that run")
    try:
        code = code_text(args.text) if "code" in texts else None
        kept, old_meta = kept_runs(out / "results.json", planned, args.steps, code)
        corpora = {which: code_corpus(args.text) if which == "code" else load_corpus("text8-mini") for which in texts}
        torch.set_num_threads(args.threads)
        out.mkdir(parents=True, exist_ok=True)
        if "code" in corpora:
            write_code_test(out, corpora["code"])
        runs = {}
        for which, corpus in corpora.items():
            for m in args.mems:
                name = run_name(which, m, args.seed)
                runs[name] = run(corpus, name, m, args.steps, out, score_only=m in args.score_only,
                                 resume=args.resume, seed=args.seed)
                # written after every run (results of the other job, or of an earlier one, are kept)
                merged = {**kept_runs(out / "results.json", planned, args.steps, code)[0], **runs}
                meta = dict(script="scripts/own_text.py", preset=PRESET, steps=args.steps, block=BLOCK,
                            eval_batch_size=16, eval_chars=EVAL_CHARS, eval_mems=list(EVAL_MEMS),
                            train_mems=list(TRAIN_MEMS), seed_mems=list(SEED_MEMS),
                            python=platform.python_version(), torch=torch.__version__, threads=args.threads,
                            machine=platform.machine(), code=code or old_meta.get("code", code_text(None)))
                atomic_write_text(out / "results.json",
                                  json.dumps(dict(meta=meta, runs=dict(sorted(merged.items()))), indent=1))
    except (ValueError, FileNotFoundError, FileExistsError, CorpusError) as e:  # bad input: the message, no traceback
        p.error(str(e))
    except WriteError as e:  # a full disk, a read-only --out
        sys.exit(f"error: {e}")
    except TrainingInterrupted as e:  # Ctrl-C, SIGTERM: the run's step saved in OUT/NAME/ckpt.pt
        stopped_by_ctrl_c(e, f"{e} Here: the same command with --resume (results.json holds the runs finished)")
    except KeyboardInterrupt as e:
        stopped_by_ctrl_c(e, "stopped by Ctrl-C: results.json holds the runs finished (each written at its end)")
    print(f"wrote {out}/results.json", file=sys.stderr)


if __name__ == "__main__":
    main()
