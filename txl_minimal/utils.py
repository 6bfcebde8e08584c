"""Small shared helpers: reproducibility, device choice, atomic files, units, CLI integers."""
from __future__ import annotations

import argparse
import math
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

import numpy as np
import torch

LN2 = math.log(2.0)  # nats per bit: bpc = loss / LN2


def score_name(unit: str) -> str:
    """What a corpus is scored in: "bpc" (bits per character) for characters, "ppl"
    (perplexity per word) for words, as the paper reports them."""
    if unit not in ("character", "word"):
        raise ValueError(f"unit must be 'character' or 'word', got {unit!r}")
    return "bpc" if unit == "character" else "ppl"


def score_of(loss: float, unit: str) -> float:
    """A mean NLL in nats as ``score_name(unit)``: loss / ln 2 for characters, exp(loss) for words."""
    return loss / LN2 if score_name(unit) == "bpc" else math.exp(min(loss, 700.0))


def check(condition: bool, claim: str) -> None:
    """A notebook's claim, checked at the end of the cell that makes it: silent when it holds,
    an ``AssertionError`` naming the claim when it does not (say, for a reader's own model)."""
    if not condition:
        raise AssertionError(f"this claim does not hold here: {claim}")


def seed_everything(seed: int = 0, threads: int | None = None) -> None:
    """Seed python, numpy and torch; optionally pin torch's CPU thread count
    (float sums, hence printed numbers, depend on it)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if threads is not None:
        torch.set_num_threads(threads)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))


def default_device(local_rank: int | None = None) -> str:
    """"cuda" when a GPU is visible (``cuda:<local_rank>`` for one process of a
    data-parallel run), else "cpu"."""
    if not torch.cuda.is_available():
        return "cpu"
    return "cuda" if local_rank is None else f"cuda:{local_rank}"


def atomic_write(path: str | Path, write: Callable[[BinaryIO], object], suffix: str = ".tmp") -> None:
    """Call ``write(file)`` on a temp file next to ``path``, then rename it over ``path``.

    A crash mid-write leaves the old file intact and no temp file behind: the rename
    is atomic on POSIX and Windows. The file gets the usual permissions (umask).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it owner-only
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def remove_leftovers(folder: str | Path, pattern: str) -> list[Path]:
    """Delete the files matching ``pattern`` in ``folder``: temp files of a process that
    was killed before its own clean-up ran (``atomic_write``, the text8 download)."""
    found = sorted(Path(folder).glob(pattern))
    for path in found:
        path.unlink(missing_ok=True)
    return found


def terminal_progress(wanted: bool) -> bool:
    """Show a command's progress bar only if ``wanted`` and stderr is a terminal: in a log
    file each of the bar's carriage-return updates would become one more line."""
    return wanted and sys.stderr.isatty()


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer >= low (argparse names the flag in its error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
        return value
    return parse
