"""The models shipped with the package (trained on text8-mini on a CPU); they load offline.

    from txl_minimal import load_pretrained
    txl = load_pretrained("txl")          # Transformer-XL: relative attention, mem_len 128
    vanilla = load_pretrained("vanilla")  # the vanilla baseline: absolute positions, no memory

Both are the ``cpu-base`` preset (4 layers, d_model 256, 3.4M / 3.2M parameters, 5,000
steps of 16 x 128 characters, seed 0), identical except for the attention and the memory.
They were made with (bf16 autocast: 1.9x faster than fp32 on the CPU they were trained on)

    python -m txl_minimal.train --preset cpu-base --out runs/cpu-base-txl --set amp=bf16
    python -m txl_minimal.train --preset cpu-base --out runs/cpu-base-vanilla --set amp=bf16 attn_type=abs mem_len=0
    python -m txl_minimal.pretrained --ship runs/cpu-base-txl --name txl
    python -m txl_minimal.pretrained --ship runs/cpu-base-vanilla --name vanilla
    python -m txl_minimal.pretrained --table      # docs/models.md's table (pretrained/table.json)

"txl-tiny" and "vanilla-tiny" are the earlier, smaller pair (``cpu-small``: 4 layers,
d_model 128, segments of 64, fp32), which the notebooks read. ``--ship`` copies a run
(its best.pt, the weights of its best periodic valid bpc; ``--last``: its ckpt.pt, the last
state; a run without best.pt: ckpt.pt) into the package and recomputes NAME.json (all checked and
computed first, then every file and the manifest written together: a failure changes none of them);
``--update-json NAME`` only recomputes it
(``python -m txl_minimal.evaluate NAME`` prints one evaluation and writes nothing).
Every NAME.safetensors holds the weights (float32, as trained), the configs, step and wall time
as JSON in its metadata, and the checksums that every load verifies; no pickle, so any
safetensors reader opens it.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from txl_minimal import stats
from txl_minimal.cli import stopped_by_ctrl_c
from txl_minimal.checkpoint import (CHECKSUM, LOG_HEADER, NAMES, PRETRAINED_DIR, SAFETENSORS, checkpoint_bytes,
                                    checkpoint_vocab, describe_vocab, load_checkpoint, model_from_checkpoint,
                                    run_checkpoint)
from txl_minimal.data import VOCAB, CorpusError, load_corpus
from txl_minimal.evaluate import evaluate, sliding_window_eval
from txl_minimal.model import TransformerXL, TXLConfig
from txl_minimal.utils import (LN2, MANIFEST, Once, WriteError, check_shipped, read_json, shipped_fix,
                               refuse_empty_path, terminal_progress, training_now, write_shipped)

# name -> evaluations reported in NAME.json: (label, function, keyword arguments).
# "segments": evaluate.evaluate, batch_size 1 so every token has the longest context.
# "sliding": evaluate.sliding_window_eval, the vanilla model's evaluation; it runs one
# forward pass per character, so it scores only the first 20,000 predictions.
SLIDING_PREFIX = 20_000
EVALUATIONS: dict[str, list[tuple[str, str, dict]]] = {
    "txl": [
        ("train_memory", "segments", dict(mem_len=128)),
        ("train_memory_prefix", "segments", dict(mem_len=128, max_tokens=SLIDING_PREFIX)),
    ],
    "vanilla": [
        ("segments_no_memory", "segments", dict(mem_len=0)),
        ("sliding_window_prefix", "sliding", dict(context=128, max_predictions=SLIDING_PREFIX)),
    ],
    "txl-tiny": [
        ("train_memory", "segments", dict(tgt_len=64, mem_len=64)),
        ("long_memory", "segments", dict(tgt_len=64, mem_len=256, clamp_len=128, same_length=True)),
        ("train_memory_prefix", "segments", dict(tgt_len=64, mem_len=64, max_tokens=SLIDING_PREFIX)),
        ("long_memory_prefix", "segments", dict(tgt_len=64, mem_len=256, clamp_len=128, same_length=True,
                                                max_tokens=SLIDING_PREFIX)),
    ],
    "vanilla-tiny": [
        ("segments_no_memory", "segments", dict(tgt_len=64, mem_len=0)),
        ("segments_no_memory_prefix", "segments", dict(tgt_len=64, mem_len=0, max_tokens=SLIDING_PREFIX)),
        ("sliding_window_prefix", "sliding", dict(context=64, max_predictions=SLIDING_PREFIX)),
    ],
}

# The table in docs/models.md: (label, model, function, keyword arguments), each row paired with the
# first (Transformer-XL at its training memory) on the same characters. clamp_len 255 is the
# longest distance seen in training (tgt_len + mem_len - 1); same_length as the authors evaluate.
TABLE: list[tuple[str, str, str, dict]] = [
    ("Transformer-XL, memory 128 (as trained)", "txl", "segments", dict(mem_len=128)),
    ("Transformer-XL, memory 0", "txl", "segments", dict(mem_len=0)),
    ("Transformer-XL, memory 256", "txl", "segments", dict(mem_len=256)),
    ("Transformer-XL, memory 256, clamp_len 255, same_length", "txl", "segments",
     dict(mem_len=256, clamp_len=255, same_length=True)),
    ("Transformer-XL, memory 512", "txl", "segments", dict(mem_len=512)),
    ("Transformer-XL, memory 512, clamp_len 255, same_length", "txl", "segments",
     dict(mem_len=512, clamp_len=255, same_length=True)),
    ("vanilla, segments of 128", "vanilla", "segments", dict(mem_len=0)),
    ("vanilla, sliding window of 128 (first 20,000)", "vanilla", "sliding",
     dict(context=128, max_predictions=SLIDING_PREFIX)),
]
BLOCK = 1000  # paired differences are averaged per block of characters: neighbours are correlated


def _check_name(name: str) -> None:
    if name not in NAMES:
        path = isinstance(name, (str, Path)) and (Path(name).exists() or str(name).endswith((".pt", SAFETENSORS)))
        raise ValueError(f"unknown pretrained model {name!r}; available: {', '.join(NAMES)}" + (
            ". Fix: a checkpoint file or a run folder loads with txl_minimal.load(path)" if path else ""))


def load_pretrained(name: str = "txl", device: str | torch.device = "cpu") -> TransformerXL:
    """A model shipped with the package, read from its files (no network).

    ``name``: "txl" and "vanilla" (4 layers, d_model 256; 3.4M and 3.2M parameters) or "txl-tiny"
    and "vanilla-tiny" (4 layers, d_model 128; 0.86M and 0.79M), trained on text8-mini
    (docs/models.md: their bpc, with and without memory); ``device``: where its weights go. Its
    size and SHA-256 are checked against pretrained/MANIFEST.json first.

    Returns:
        The ``TransformerXL``, in eval mode, reading text8's 27 characters.

    Examples:
        >>> model = load_pretrained("txl-tiny")
        >>> model.cfg.n_layer, model.cfg.mem_len, model.training
        (4, 64, False)
        >>> load_pretrained("gpt2")
        Traceback (most recent call last):
        ValueError: unknown pretrained model 'gpt2'; available: txl, vanilla, txl-tiny, vanilla-tiny
    """
    _check_name(name)
    path = PRETRAINED_DIR / f"{name}{SAFETENSORS}"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing. Fix: reinstall the package, or rebuild it with "
                                f"python -m txl_minimal.pretrained --ship RUN_DIR --name {name}")
    return model_from_checkpoint(load_checkpoint(path, map_location=device), device)


def _shipped_state(run_dir: str | Path, name: str, last: bool = False, new_shape: bool = False) -> tuple[dict, str]:
    """A run's weights + configs as shipped (no optimiser; float32 on the CPU) and its log's text: those
    of its best.pt (best periodic valid bpc), or with ``last`` (or without a best.pt) of its ckpt.pt
    (``checkpoint.run_checkpoint``),
    after checking everything --ship needs: both files, a checkpoint that loads, a log that is
    the run's, characters (the shipped models are scored on text8-mini), a run that is not training now
    (its best.pt would be a mid-run state), and the shipped model's shape (another is refused unless
    ``new_shape``: the notebooks and docs read NAME as it is). Nothing is written."""
    _check_name(name)
    refuse_empty_path(run_dir, "--ship's RUN_DIR")
    run_dir = Path(run_dir)
    source = run_checkpoint(run_dir, last)
    missing = [f for f in (source.name, "log.csv") if not (run_dir / f).is_file()]
    if missing and (running := training_now(run_dir)):
        raise FileNotFoundError(f"{running}, and has no {' and no '.join(missing)} yet: --ship copies a finished "
                                "run's (nothing was changed). Fix: wait for it to end, then ship it.")
    if missing:
        raise FileNotFoundError(f"{run_dir}/ has no {' and no '.join(missing)}: --ship copies a finished run's "
                                "ckpt.pt and log.csv (nothing was changed). Fix: pass the --out folder of a "
                                "training run.")
    if (PRETRAINED_DIR / MANIFEST).exists():  # a damaged manifest is named now, not after the evaluation
        read_json(PRETRAINED_DIR / MANIFEST, shipped_fix(PRETRAINED_DIR / MANIFEST))
    ckpt = load_checkpoint(source)
    if running := training_now(run_dir):  # (before its first checkpoint: refused above)
        raise ValueError(f"{running}: its {source.name} is a state from the middle of the run (step "
                         f"{ckpt['step']:,} of max_steps {ckpt['train_config']['max_steps']:,}), not its end (nothing "
                         "was changed). Fix: wait for it to end, then ship it (Ctrl-C in its terminal stops it, its "
                         "step saved)")
    vocab = checkpoint_vocab(ckpt)
    if vocab is None or vocab["unit"] != "character" or vocab["symbols"] not in (None, list(VOCAB)):
        what = describe_vocab(vocab) if vocab else f"its corpus is {ckpt.get('train_config', {}).get('corpus')!r}"
        raise ValueError(f"{run_dir} is not a character model trained on text8 or text8-mini ({what}): "
                         f"the shipped {name!r} is scored on text8-mini's characters (nothing was changed). "
                         "Fix: ship a character run over text8's 27; a model of your own text travels as a file: "
                         "txl_minimal.save(txl_minimal.load(RUN_DIR), 'mine.safetensors').")
    if not new_shape and (other := _other_shape(name, ckpt["model_config"])):
        raise ValueError(f"{run_dir} is not the shape of the shipped {name!r} ({other}), which the notebooks and "
                         "docs read as it is (nothing was changed). Fix: train the run with the shipped model's "
                         f"settings (its NAME.json's model_config), or --new-shape (ship(..., new_shape=True)) to "
                         "replace it anyway")
    raw = (run_dir / "log.csv").read_bytes()
    if not raw.startswith(LOG_HEADER):
        raise ValueError(f"{run_dir / 'log.csv'} is not a training log (it begins {raw[:40]!r}); nothing was "
                         "changed. Fix: restore the run's log.csv.")
    log = raw.decode("utf-8", "replace").replace("\r\n", "\n")  # older logs had CRLF
    state = dict(format=1, model={k: v.float().cpu() for k, v in ckpt["model"].items()},
                 model_config=ckpt["model_config"], train_config=ckpt["train_config"],
                 step=ckpt["step"], wall_time_s=ckpt["wall_time_s"],
                 **{key: ckpt[key] for key in ("vocab", "corpus") if key in ckpt})
    return state, log


def _other_shape(name: str, model_config: dict) -> str:
    """How ``model_config`` differs from the shipped ``name``'s ("d_model 128 shipped, 16 here; ..."), or ""
    (the same, or nothing readable shipped: a damaged NAME.json is what --ship replaces). Dropout, which
    only training uses, does not count."""
    try:
        shipped = (pretrained_summary(name) or {}).get("model_config")
    except ValueError:
        return ""
    if not isinstance(shipped, dict):
        return ""
    try:  # each with the defaults of the fields it lacks, in one form (cutoffs None or [], ...)
        shipped, model_config = (TXLConfig(**c).to_dict() for c in (shipped, model_config))
    except (TypeError, ValueError):
        pass
    keys = sorted((set(shipped) | set(model_config)) - {"dropout", "dropatt"})
    return "; ".join(f"{k} {shipped.get(k)!r} shipped, {model_config.get(k)!r} here" for k in keys
                     if shipped.get(k) != model_config.get(k))


def shipping_line(run_dir: str | Path, name: str, last: bool = False, new_shape: bool = False) -> str:
    """What ``--ship`` says before its evaluation: the file shipped, which state it is (its step, of
    max_steps: a run stopped before its end is said), and the shipped model it replaces (its step).
    Checks as ``ship`` does (``_shipped_state``); nothing is written."""
    state, log = _shipped_state(run_dir, name, last, new_shape)
    source = run_checkpoint(run_dir, last)
    step, end = state["step"], state["train_config"]["max_steps"]
    which = "the last state" if source.name == "ckpt.pt" else "the best validation state (--last: ckpt.pt)"
    rows = [line.split(",", 1)[0] for line in log.strip().splitlines()[1:]]
    logged = int(rows[-1]) if rows and rows[-1].isdigit() else step  # the run's last step
    unfinished = f" (the run stopped at step {logged:,} of max_steps {end:,}, before its end)" if logged < end else ""
    try:
        old = pretrained_summary(name)
    except ValueError:
        old = None
    replaces = "" if old is None else f"; it replaces the shipped {name} of step {old.get('step', 0):,}"
    return f"shipping {source} as {name}: {which}, step {step:,}{unfinished}{replaces}"


def export_pretrained(run_dir: str | Path, name: str, last: bool = False, new_shape: bool = False) -> Path:
    """Copy a run's weights + configs (no optimiser, with the weights' checksum) and its log
    into the package, with their manifest entries: all checked first, then written together.
    The weights: its best.pt, or with ``last`` its ckpt.pt (``_shipped_state``)."""
    state, log = _shipped_state(run_dir, name, last, new_shape)
    path = PRETRAINED_DIR / f"{name}{SAFETENSORS}"
    write_shipped({path: checkpoint_bytes(state, path), PRETRAINED_DIR / f"{name}.log.csv": log.encode()})
    return path


def ship(run_dir: str | Path, name: str, progress: bool = False, last: bool = False, new_shape: bool = False) -> dict:
    """``--ship``: a run's weights, log and freshly computed NAME.json into the package, all or
    nothing. Everything is checked and evaluated first, then the three files and the manifest
    are written together (``utils.write_shipped``): a failure at any point leaves every shipped
    file and the manifest as they were. ``last``: ship its ckpt.pt, not its best.pt; ``new_shape``: replace
    the shipped model with one of another model config (refused otherwise)."""
    state, log = _shipped_state(run_dir, name, last, new_shape)
    path = PRETRAINED_DIR / f"{name}{SAFETENSORS}"
    weights = checkpoint_bytes(state, path)
    summary = _summary(name, model_from_checkpoint(state), state, ("valid", "test"), progress)
    write_shipped({path: weights, PRETRAINED_DIR / f"{name}.log.csv": log.encode(),
                   PRETRAINED_DIR / f"{name}.json": _json_bytes(summary)})
    return summary


def _json_bytes(value: dict) -> bytes:
    return (json.dumps(value, indent=2) + "\n").encode()


def evaluate_pretrained(name: str, splits: tuple[str, ...] = ("valid", "test"),
                        progress: bool = False, write: bool = True) -> dict:
    """Run EVALUATIONS[name] on text8-mini and (write=True) store them in NAME.json
    (and give NAME.safetensors the checksum of its weights if it has none: the same weights), together
    with the manifest."""
    _check_name(name)
    path = PRETRAINED_DIR / f"{name}{SAFETENSORS}"
    model = load_pretrained(name)
    ckpt = load_checkpoint(path)
    summary = _summary(name, model, ckpt, splits, progress)
    if write:
        files = {PRETRAINED_DIR / f"{name}.json": _json_bytes(summary)}
        if CHECKSUM not in ckpt:  # a file shipped before checksums existed
            files = {path: checkpoint_bytes(ckpt, path), **files}
        write_shipped(files)
    return summary


def _summary(name: str, model: TransformerXL, ckpt: dict, splits: tuple[str, ...], progress: bool) -> dict:
    """NAME.json's content: EVALUATIONS[name] of ``model`` on text8-mini, with ``ckpt``'s configs and times."""
    corpus = load_corpus("text8-mini")
    results: dict[str, dict] = {}
    for split in splits:
        data = getattr(corpus, split)
        for label, kind, kw in EVALUATIONS[name]:
            t0 = time.perf_counter()
            if kind == "segments":
                r = evaluate(model, data, batch_size=1, progress=progress, **kw)
            else:
                r = sliding_window_eval(model, data, progress=progress, **kw)
            seconds = time.perf_counter() - t0
            results[f"{split}/{label}"] = dict(bpc=round(r["bpc"], 4), tokens=r["tokens"], settings=kw,
                                               seconds=round(seconds, 1),
                                               predictions_per_s=round(r["tokens"] / seconds, 1))
    return dict(name=name, corpus=corpus.name, step=ckpt["step"],
                train_wall_time_s=round(ckpt["wall_time_s"], 1),
                train_tokens_per_s=round(ckpt["step"] * ckpt["train_config"]["batch_size"]
                                         * ckpt["model_config"]["tgt_len"] / ckpt["wall_time_s"]),
                params=sum(p.numel() for p in model.parameters()),
                model_config=ckpt["model_config"], train_config=ckpt["train_config"],
                results=results, torch=torch.__version__, threads=torch.get_num_threads(),
                machine=platform.machine())


def paired_difference(nll: np.ndarray, reference: np.ndarray, block: int = BLOCK) -> tuple[float, float]:
    """Mean of ``nll - reference`` in bits per character and its standard error.

    Both hold the NLL (nats) of the same characters (``reference`` may be longer: its first
    ``len(nll)``). The standard error is that of the mean over blocks of ``block`` characters (the
    last, shorter block dropped): the losses of neighbouring characters are correlated, so a
    per-character one would be too small. ``txl_minimal.stats.paired_difference`` with its block
    count, in nats, or for rows of tokens.
    """
    paired = stats.paired_difference(nll, np.asarray(reference)[:len(nll)], block)
    return paired.mean, paired.se


def paired_table(splits: tuple[str, ...] = ("valid", "test"), progress: bool = False,
                 write: bool = True) -> dict:
    """Every row of TABLE on text8-mini (batch 1), each paired with the first row on the
    same characters; (write=True) stored in pretrained/table.json."""
    corpus, models, out = load_corpus("text8-mini"), {}, {}
    for split in splits:
        data, rows, reference = getattr(corpus, split), [], None
        for label, name, kind, kw in TABLE:
            model = models.setdefault(name, load_pretrained(name))
            t0 = time.perf_counter()
            if kind == "segments":
                r = evaluate(model, data, batch_size=1, progress=progress, per_token=True, **kw)
            else:
                r = sliding_window_eval(model, data, progress=progress, per_token=True, **kw)
            reference = r["nll"] if reference is None else reference
            diff, se = paired_difference(r["nll"], reference)
            rows.append(dict(label=label, model=name, settings=kw, tokens=r["tokens"], bpc=round(r["bpc"], 4),
                             reference_bpc=round(float(reference[:r["tokens"]].mean() / LN2), 4),
                             minus_reference=round(diff, 4), se=round(se, 4),
                             seconds=round(time.perf_counter() - t0, 1)))
        out[split] = rows
    summary = dict(corpus=corpus.name, block=BLOCK, rows=out, torch=torch.__version__,
                   threads=torch.get_num_threads(), machine=platform.machine())
    if write:
        write_shipped({PRETRAINED_DIR / "table.json": _json_bytes(summary)})
    return summary


def markdown_table(summary: dict) -> str:
    """docs/models.md's table from ``paired_table``'s result."""
    lines = ["| model and evaluation | characters | valid bpc | test bpc | test bpc minus the first row |",
             "|---|---|---|---|---|"]
    for valid, test in zip(summary["rows"]["valid"], summary["rows"]["test"]):
        change = "(reference)" if test is summary["rows"]["test"][0] else \
            (f"{test['minus_reference']:+.4f} ± {test['se']:.4f} "
             f"(first row on these characters: {test['reference_bpc']:.4f})")
        lines.append(f"| {test['label']} | {test['tokens']:,} | {valid['bpc']:.4f} | {test['bpc']:.4f} | {change} |")
    return "\n".join(lines)


def pretrained_summary(name: str) -> Optional[dict]:
    """NAME.json (configs and final numbers) as a dict, or None if not shipped yet; a damaged
    file (size or SHA-256 unlike pretrained/MANIFEST.json, or not NAME's summary) is a ValueError."""
    _check_name(name)
    path = PRETRAINED_DIR / f"{name}.json"
    if not path.exists():
        return None
    check_shipped(path)
    summary = read_json(path, shipped_fix(path))
    if summary.get("name") != name or not isinstance(summary.get("results"), dict):
        raise ValueError(f"{path} is damaged: not the summary of {name!r} (its name is {summary.get('name')!r}). "
                         + shipped_fix(path))
    return summary


def main(argv: Optional[list[str]] = None) -> None:
    """The command line: ship a run as txl/vanilla, or recompute a shipped NAME.json."""
    p = argparse.ArgumentParser(prog="python -m txl_minimal.pretrained", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.register("action", None, Once)  # a flag given twice with two values is refused, not the last kept
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--ship", metavar="RUN_DIR", help="export RUN_DIR/best.pt (the best validation state; "
                      "--last or none: ckpt.pt) and log.csv as the shipped model --name, then recompute NAME.json")
    what.add_argument("--update-json", metavar="NAME", choices=NAMES, help="recompute the shipped NAME.json")
    what.add_argument("--table", action="store_true", help="docs/models.md's table of txl and vanilla, with "
                      "paired standard errors: print it and write pretrained/table.json")
    p.add_argument("--name", choices=NAMES, help="the shipped name for --ship")
    p.add_argument("--last", action="store_true", help="--ship the run's last state, ckpt.pt, not its best.pt")
    p.add_argument("--new-shape", action="store_true", help="--ship a run whose model config differs from the "
                   "shipped NAME's (the notebooks and docs read NAME as it is)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    if args.ship is not None and not args.ship.strip():  # ("" would read as no --ship: the --update-json branch)
        p.error("--ship is an empty path, which would mean the current folder. Fix: name the run's --out folder")
    if args.ship and not args.name:
        p.error("--ship needs --name txl or --name vanilla")
    if args.update_json and args.name:
        p.error("--name goes with --ship; --update-json names the model itself")
    if args.last and not args.ship:
        p.error("--last goes with --ship (which state of the run to ship)")
    if args.new_shape and not args.ship:
        p.error("--new-shape goes with --ship (a run of another model config replaces the shipped one)")
    try:
        progress = terminal_progress(not args.no_progress)
        if args.table:
            print(markdown_table(paired_table(progress=progress)))
            return
        if args.ship:
            print(shipping_line(args.ship, args.name, args.last, args.new_shape))
        summary = ship(args.ship, args.name, progress, args.last, args.new_shape) if args.ship else \
            evaluate_pretrained(args.update_json, progress=progress)
    except (ValueError, FileNotFoundError, CorpusError) as e:  # bad input: the message, no traceback
        p.error(str(e))
    except WriteError as e:  # a full disk, a read-only package folder: nothing was changed
        sys.exit(f"error: {e}")
    except KeyboardInterrupt as e:  # the files are written together at the end, or not at all
        stopped_by_ctrl_c(e, "stopped by Ctrl-C: no shipped file was changed")
    print(summary)


if __name__ == "__main__":
    main()
