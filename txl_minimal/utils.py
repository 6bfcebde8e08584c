"""Small shared helpers: reproducibility, device choice, atomic files, units, CLI integers."""
from __future__ import annotations

import argparse
import hashlib
import json
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


def bf16_speedup(device: str | torch.device, rows: int, cols: int, inner: int, reps: int = 5,
                 sample_s: float = 2e-3) -> float:
    """How many times faster a (rows x cols) @ (cols x inner) matmul runs under bf16 autocast than
    in fp32 on ``device`` (fastest of ``reps`` samples each, after a warm-up; CUDA-synchronised).
    Each sample repeats the product for at least ``sample_s`` seconds: a small model's matmul takes
    microseconds, and timed once it measures the timer (it picked bf16 in one process and fp32 in
    another). Above 1 only where the hardware multiplies bf16 natively (AMX, AVX512-BF16, tensor
    cores); a CPU without such units emulates bf16 and comes out slower (benchmarks/README.md)."""
    import time
    device = torch.device(device)
    a = torch.randn(rows, cols, device=device)
    b = torch.randn(cols, inner, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def timed(fn, n: int) -> float:
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        return time.perf_counter() - t0

    def fastest(fn) -> float:
        fn()  # warm-up
        n = 1
        while (t := timed(fn, n)) < sample_s and n < 2 ** 20:  # repeat until a sample is long enough
            n *= 2
        return min([t] + [timed(fn, n) for _ in range(reps - 1)]) / n

    def bf16() -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            return a @ b
    return fastest(lambda: a @ b) / fastest(bf16)


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


# ----------------------------------------------------------------------------- shipped files

MANIFEST = "MANIFEST.json"  # beside the files it lists: {name: {"bytes": size, "sha256": hex}}


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def shipped_fix(path: str | Path) -> str:
    """How to get a good copy of a file that ships with the package."""
    path = Path(path).resolve()
    repo = Path(__file__).resolve().parents[1]
    if (repo / ".git").exists() and path.is_relative_to(repo):  # a clone: git has the right bytes
        return (f"Fix: git checkout -- {path.relative_to(repo)} (in {repo}), or reinstall the package "
                "(pip install --force-reinstall txl-minimal).")
    return "Fix: reinstall the package (pip install --force-reinstall txl-minimal)."


def read_json(path: str | Path, fix: str) -> dict:
    """A JSON object from ``path``, or a ``ValueError`` naming the file, what is wrong with it
    (empty, cut short, not text, not an object) and ``fix``; never the decoder's traceback."""
    path = Path(path)
    raw = path.read_bytes()
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        problem = "not text (binary bytes)"
    except json.JSONDecodeError as e:
        problem = "empty" if not raw.strip() else f"not valid JSON, truncated or edited ({e.msg} at line {e.lineno})"
    else:
        if isinstance(value, dict):
            return value
        problem = f"a JSON {type(value).__name__}, not an object"
    raise ValueError(f"{path} is damaged: {len(raw):,} bytes, {problem}. {fix}")


def shipped_file_problem(path: str | Path) -> str | None:
    """What is wrong with a file listed in the ``MANIFEST.json`` beside it (size, then SHA-256),
    or None: it matches, or it is not listed (a file the package did not ship)."""
    path = Path(path)
    if not (path.parent / MANIFEST).exists():  # a file outside the package's folders
        return None
    entry = read_json(path.parent / MANIFEST, shipped_fix(path.parent / MANIFEST)).get(path.name)
    if entry is None:
        return None
    size, want = path.stat().st_size, entry["bytes"]
    if size != want:
        kind = "empty" if size == 0 else "truncated" if size < want else "longer than shipped"
        return f"{kind}: {size:,} bytes, shipped with {want:,}"
    sha = file_sha256(path)
    if sha != entry["sha256"]:
        return f"wrong content: SHA-256 {sha[:16]}..., shipped with {entry['sha256'][:16]}... (same size)"
    return None


def check_shipped(path: str | Path, error: type[Exception] = ValueError) -> None:
    """Raise ``error`` naming a shipped file whose size or SHA-256 differs from its manifest."""
    problem = shipped_file_problem(path)
    if problem:
        raise error(f"{path} is damaged ({problem}). {shipped_fix(path)}")


def update_manifest(path: str | Path) -> None:
    """Record a (re)written shipped file's size and SHA-256 in the manifest beside it."""
    path = Path(path)
    manifest_path = path.parent / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest[path.name] = dict(bytes=path.stat().st_size, sha256=file_sha256(path))
    text = json.dumps(dict(sorted(manifest.items())), indent=1) + "\n"
    atomic_write(manifest_path, lambda f: f.write(text.encode()))


def non_finite(tensors: dict, what: str = "tensor") -> str | None:
    """'NaN or inf in {what} NAME (k of n values)' for the first floating tensor holding such
    values (or 'NAME is a ..., not a tensor'), else None."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            return f"{what} entry {name} is a {type(t).__name__}, not a tensor"
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            return f"NaN or inf in {what} {name} ({int((~torch.isfinite(t)).sum())} of {t.numel()} values)"
    return None
