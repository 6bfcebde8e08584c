"""The command line of ``python -m txl_minimal.train`` apart from the training it starts (train.main):
its flags, the --set KEY=VALUE values, and the line it ends with. The presets, the amp choices and
the config fields come from train.main, which passes them (train.py imports this module)."""
from __future__ import annotations

import argparse
import ast
import contextlib
import warnings
from collections.abc import Iterator
from typing import Optional

from txl_minimal.data import CORPORA, UNITS
from txl_minimal.devices import COMPILE_MODES
from txl_minimal.run_folder import TrainResult
from txl_minimal.cli import Once, int_at_least

BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def parser(description: str, presets: list[str], amps: tuple[str, ...]) -> argparse.ArgumentParser:
    """The flags: --preset (one of ``presets``), a few settings by name, and any field by --set."""
    p = argparse.ArgumentParser(prog="python -m txl_minimal.train", description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.register("action", None, Once)  # a flag given twice with two values is refused, not the last kept
    p.add_argument("--preset", default="cpu-tiny", choices=presets)
    p.add_argument("--out", help="run directory (ckpt.pt, log.csv)")
    p.add_argument("--max-steps", type=int_at_least(1))
    p.add_argument("--batch-size", type=int_at_least(1))
    p.add_argument("--corpus", metavar="NAME_OR_FILE",
                   help=f"one of {', '.join(CORPORA)}, or the path to a UTF-8 text file of your own (its characters; "
                        "words with --unit word; vocab_size then follows it unless --set; --set split=0.8,0.1,0.1 "
                        "and max_vocab=N read it otherwise)")
    p.add_argument("--unit", choices=UNITS, help="how a text file is read: character (default) or word")
    p.add_argument("--device")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile each segment on any device (TrainConfig.compile; its default, 'auto', "
                        "compiles on CUDA only; --set compile=reduce-overhead: CUDA graphs too)")
    p.add_argument("--amp", choices=amps, help="autocast: auto (bf16 where measured faster), bf16, fp16, off")
    p.add_argument("--set", nargs="*", action="extend", default=[], metavar="KEY=VALUE",
                   help="any TXLConfig/TrainConfig field, e.g. attn_type=abs mem_len=0 (the vanilla baseline), "
                        "lr=5e-4, amp=bf16, seed=1, compile=true; may be given more than once")
    again = p.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="continue the run in OUT (from OUT/ckpt.pt)")
    again.add_argument("--overwrite", action="store_true", help="replace the run in OUT (its ckpt.pt, log.csv)")
    p.add_argument("--stop-at", type=int_at_least(1), help="stop after this step, as if interrupted")
    p.add_argument("--threads", type=int_at_least(1), help="torch.set_num_threads")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (the evaluation lines remain)")
    return p


def overrides(args: argparse.Namespace, field_types: dict[str, str]) -> dict:
    """The settings the flags change: those given by name, then each --set KEY=VALUE (``field_types``:
    each config field's annotation, which says how its value is read)."""
    changed = {k: v for k, v in dict(out=args.out, max_steps=args.max_steps, batch_size=args.batch_size,
                                     corpus=args.corpus, unit=args.unit, device=args.device, amp=args.amp,
                                     compile=args.compile or None).items() if v is not None}
    flag_of = {k: f"--{k.replace('_', '-')} {v}" for k, v in changed.items()}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        key = key.replace("-", "_")
        parsed = parse_value(key, value, field_types)
        if key in changed and (changed[key] != parsed or type(changed[key]) is not type(parsed)):
            raise ValueError(f"{key} is set twice, by {flag_of[key]} and by --set {item}: which one? Fix: give it once")
        changed[key], flag_of[key] = parsed, f"--set {item}"
    return changed


@contextlib.contextmanager
def one_line_warnings() -> Iterator[None]:
    """A command's warnings as one line each, "warning: ...", not the file, line and source line that
    Python adds for a library call."""
    before = warnings.formatwarning
    warnings.formatwarning = lambda message, category, *args, **kwargs: f"warning: {message}\n"
    try:
        yield
    finally:
        warnings.formatwarning = before


def parse_value(key: str, text: str, field_types: dict[str, str]):
    """A --set value: for a bool field true/false, yes/no or 1/0 (any case); else a Python
    literal (3, 0.1, None) or the plain string (text8-mini)."""
    if key == "compile" and text in COMPILE_MODES:
        return text
    if "bool" in field_types.get(key, ""):
        if text.lower() == "none" and field_types[key].startswith("Optional"):
            return None
        if text.lower() not in BOOLS:
            modes = f", or one of {', '.join(COMPILE_MODES)}" if key == "compile" else ""
            raise ValueError(f"--set {key}={text}: {key} is true or false (also yes/no, 1/0){modes}")
        return BOOLS[text.lower()]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def summary(res: TrainResult) -> Optional[str]:
    """The line a finished training ends with, or None for a run found complete (``train`` said so
    already)."""
    if res.complete:
        return None
    (name, train_score), (_, valid_score), (_, best) = res.score("train"), res.score("valid"), res.score("best")
    kept = f" (best.pt: valid {name} {best:.4f} at step {res.best_step})" if res.best_step else ""
    return (f"step {res.step}: train {name} {train_score:.4f}, valid {name} {valid_score:.4f}, "
            f"{res.tokens_per_s:,.0f} tokens/s, {res.wall_time_s:.0f} s -> {res.out}{kept}")
