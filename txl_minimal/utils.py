"""Small shared helpers: reproducibility, device choice, atomic files, units, CLI integers."""
from __future__ import annotations

import argparse
import errno
import hashlib
import json
import math
import os
import random
import shutil
import socket
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import BinaryIO
from collections.abc import Callable

import numpy as np
import torch

LN2 = math.log(2.0)  # nats per bit: bpc = loss / LN2


def score_name(unit: str) -> str:
    """What a corpus is scored in: "bpc" (bits per character) for characters and for enwik8's
    bytes (the paper's "bpc" there is per byte), "ppl" (perplexity per word) for words."""
    if unit not in ("character", "byte", "word"):
        raise ValueError(f"unit must be 'character', 'byte' or 'word', got {unit!r}")
    return "ppl" if unit == "word" else "bpc"


def score_of(loss: float, unit: str) -> float:
    """A mean NLL in nats as ``score_name(unit)``: loss / ln 2 for characters and bytes, exp(loss) for words."""
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


def check_device(device: str | torch.device, what: str = "device") -> torch.device:
    """``device`` ("auto", "cpu", "cuda", "cuda:N") as a ``torch.device`` this machine has, else a
    ``ValueError`` naming ``what``, the device and the fix (not torch's "Torch not compiled with
    CUDA enabled" from deep inside a ``.to``, nor a checkpoint called corrupt)."""
    if isinstance(device, str) and device == "auto":
        return torch.device(default_device(0))
    kinds = "'auto', 'cpu', 'cuda' or 'cuda:N'"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):  # torch's message lists every device type it knows
        raise ValueError(f"{what} must be {kinds}, got {device!r}") from None
    if dev.type == "cuda":
        n = torch.cuda.device_count()
        if (dev.index or 0) >= n:
            why = "" if torch.backends.cuda.is_built() else f" (torch {torch.__version__} is built without CUDA)"
            raise ValueError(f"{what} is {str(device)!r}, but torch sees {n} GPU(s){why}. Fix: "
                             "'auto' (a GPU if there is one) or 'cpu'")
    elif dev.type != "cpu":  # mps: no float64, which evaluation sums in; the amp set-up knows cpu and cuda
        raise ValueError(f"{what} {str(device)!r}: this package runs on a CPU or a CUDA GPU, so {what} must be "
                         f"{kinds}. Fix: 'cpu'" + (" (evaluation sums in float64, which an Apple GPU lacks)"
                                                   if dev.type == "mps" else ""))
    return dev


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


class WriteError(OSError):
    """A file the package writes could not be written (a full disk, a read-only folder); the
    message names the file, what happened to it and the fix. ``errno`` is the system's."""

    def __init__(self, message: str, code: int | None = None, reason: str = ""):
        super().__init__(message)
        self.errno, self.reason = code, reason  # reason: the system's words, e.g. "Read-only file system"


# The system errors that mean "this folder cannot take the file" rather than a bug.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


def os_error_in(e: BaseException) -> OSError | None:
    """The first OSError in ``e``'s chain (torch.save buries the disk's ENOSPC under a RuntimeError)."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, OSError) and e.errno is not None:
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def write_problem(e: BaseException, path: str | Path) -> WriteError | None:
    """A ``WriteError`` naming ``path`` and the fix if ``e`` is a full disk or a read-only or
    forbidden folder (anywhere in its chain), else None (an error of another kind)."""
    found = os_error_in(e)
    if found is None or found.errno not in NO_SPACE + NOT_WRITABLE:
        return None
    path = Path(path)
    if found.errno in NO_SPACE:
        return WriteError(f"no space left on the disk holding {path.parent} while writing {path.name} "
                          f"({found.strerror}); the previous {path.name}, if any, is intact. Fix: free some "
                          "disk space (or use a folder on another disk), then run again", found.errno, found.strerror)
    return WriteError(f"cannot write {path} ({found.strerror}: {found.filename or path.parent}). Fix: use a "
                      "folder you can write to, or make this one writable", found.errno, found.strerror)


def refuse_empty_path(path, what: str) -> None:
    """ValueError for an empty path: pathlib reads "" as the current folder, so a file would be read or
    written there (a checkpoint, a run's files) without the user having named it."""
    if isinstance(path, str) and not path.strip():
        raise ValueError(f"{what} is an empty path ({path!r}), which would mean the current folder. Fix: name the "
                         "file or folder")


def atomic_write(path: str | Path, write: Callable[[BinaryIO], object], suffix: str = ".tmp") -> None:
    """Call ``write(file)`` on a temp file next to ``path``, then rename it over ``path``.

    A crash mid-write leaves the old file intact and no temp file behind: the rename
    is atomic on POSIX and Windows. The file gets the usual permissions (umask). A full
    disk or a read-only folder is a ``WriteError`` saying so (not torch's or numpy's traceback).
    """
    path = Path(path)
    if path.is_dir():  # the rename would fail naming our temporary file
        raise WriteError(f"cannot write {path}: it is a folder. Fix: name a file, e.g. {path / 'model.pt'}, or move "
                         "the folder out of the way", errno.EISDIR, "Is a directory")
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=suffix)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it owner-only
        os.replace(tmp, path)
    except Exception as e:
        problem = write_problem(e, path)
        if problem is None:
            raise
        raise problem from None  # the disk's error, said once: not a 37-line chain through torch
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_text(path: str | Path, text: str) -> None:
    """``atomic_write`` of a text file (UTF-8): a results JSON, a manifest."""
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def replace_together(files: dict[Path, bytes]) -> None:
    """Write every ``path: content`` of ``files``, all or nothing: each goes to a temp name beside
    its path first (a full disk or a read-only folder fails here, before any file changes), then
    all are renamed over their paths, in order; if a rename fails, the ones already renamed get
    their old content back. A shipped model's .pt, log, summary and manifest change together."""
    staged: dict[Path, str] = {}
    previous: dict[Path, str] = {}
    path = next(iter(files))
    try:
        for path, content in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            remove_leftovers(path.parent, f"{path.name}.*.staged")  # of a process killed mid-way
            remove_leftovers(path.parent, f"{path.name}.*.previous")
            fd, staged[path] = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".staged")
            with os.fdopen(fd, "wb") as f:
                f.write(content)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(staged[path], 0o666 & ~_umask())
        for path in files:  # the old bytes, under a second name (a hard link: no copy)
            if path.exists():
                previous[path] = f"{staged[path][:-len('.staged')]}.previous"
                try:
                    os.link(path, previous[path])
                except OSError:  # a file system without hard links: a copy
                    shutil.copyfile(path, previous[path])
        renamed = []
        try:
            for path in files:
                os.replace(staged[path], path)
                del staged[path]
                renamed.append(path)
        except BaseException:
            for done in renamed:  # put back what was there
                if done in previous:
                    os.replace(previous.pop(done), done)
                else:
                    done.unlink(missing_ok=True)
            raise
    except Exception as e:
        problem = write_problem(e, path)
        if problem is None:
            raise
        names = ", ".join(p.name for p in files)
        raise WriteError(f"{problem}".replace(f"the previous {path.name}, if any, is intact",
                                              f"none of {names} was changed"), problem.errno, problem.reason) from None
    finally:
        for leftover in [*staged.values(), *previous.values()]:
            if os.path.exists(leftover):
                os.unlink(leftover)


def remove_leftovers(folder: str | Path, pattern: str) -> list[Path]:
    """Delete the files matching ``pattern`` in ``folder``: temp files of a process that
    was killed before its own clean-up ran (``atomic_write``, the text8 download)."""
    found = sorted(Path(folder).glob(pattern))
    for path in found:
        try:
            path.unlink(missing_ok=True)
        except OSError:  # a folder that became read-only: nothing of ours can be in the way there
            pass
    return found


def file_in_the_way(path: str | Path) -> Path | None:
    """The file that keeps ``path`` from being a folder: ``path`` itself, or the nearest part of it that
    exists, when that is not a folder (TXL_DATA_DIR=/tmp/notes.txt); None when it is, or can become, one."""
    existing = Path(path).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return None if existing.is_dir() else existing


def folder_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be, or become, a folder this process writes into (a file in the way, a folder
    it may not write), or None."""
    path = Path(path).absolute()
    blocker = file_in_the_way(path)
    if blocker is not None:
        return f"{blocker} is a file, not a folder" + ("" if blocker == path else f", so {path} cannot be made")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is a folder this user cannot write into"
    return None


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


class Once(argparse.Action):
    """argparse's "store", refusing a flag given twice with two values (``--max-steps 20 ... --max-steps 40``):
    argparse would keep the last without a word. A parser takes it for every plain flag with
    ``parser.register("action", None, Once)``."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_given_once", {})
        if self.dest in given and given[self.dest] != values:
            parser.error(f"{option_string} is given twice, {given[self.dest]!r} and {values!r}: which one? "
                         "Fix: give it once")
        given[self.dest] = values
        setattr(namespace, self.dest, values)


class _CallableModule(types.ModuleType):
    """A module that, called, calls its function of the same name."""

    def __call__(self, *args, **kwargs):
        return getattr(self, self.__name__.rsplit(".", 1)[-1])(*args, **kwargs)


def callable_module(name: str) -> None:
    """Make module ``name`` (txl_minimal.train) callable as its function of the same name (train): ``from
    txl_minimal import train`` gives the module, and ``train(model_cfg, cfg)`` said "'module' object is
    not callable". Its names stay as they are (``txl_minimal.train.TrainConfig``)."""
    if name != "__main__":  # (python -m txl_minimal.train runs it as __main__: nothing to do)
        sys.modules[name].__class__ = _CallableModule


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


class ManifestDamaged(ValueError):
    """A ``MANIFEST.json`` entry that cannot be right (a key renamed, a number as text) or that
    disagrees with an intact file: the manifest is the damaged one, not the file it lists."""


def _manifest_entry(path: Path) -> dict | None:
    """``path``'s entry in the MANIFEST.json beside it ({"bytes": int, "sha256": 64 hex digits}), None if
    unlisted; ``ManifestDamaged`` naming the manifest if the entry is malformed."""
    manifest = path.parent / MANIFEST
    entry = read_json(manifest, shipped_fix(manifest)).get(path.name)
    if entry is None:
        return None
    sha = entry.get("sha256") if isinstance(entry, dict) else None
    if not (isinstance(entry, dict) and type(entry.get("bytes")) is int and isinstance(sha, str)
            and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
        raise ManifestDamaged(f"{manifest} is damaged: its entry for {path.name} is {json.dumps(entry)[:120]}, not "
                              '{"bytes": <an integer>, "sha256": <64 hex digits>} (a key renamed or a value edited; '
                              f"{path.name} itself may be intact). {shipped_fix(manifest)}")
    return entry


def shipped_file_problem(path: str | Path) -> str | None:
    """What is wrong with a file listed in the ``MANIFEST.json`` beside it (size, then SHA-256),
    or None: it matches, or it is not listed (a file the package did not ship). Where the manifest
    is the one in the wrong, ``ManifestDamaged`` says so: its entry is malformed, or the file's
    SHA-256 is the shipped one under another size, or differs from it in a digit or two (another
    file's would differ in nearly all 64)."""
    path = Path(path)
    if not (path.parent / MANIFEST).exists():  # a file outside the package's folders
        return None
    entry = _manifest_entry(path)
    if entry is None:
        return None
    size, want, sha = path.stat().st_size, entry["bytes"], file_sha256(path)
    edited = sum(a != b for a, b in zip(sha, entry["sha256"]))
    if (sha == entry["sha256"] and size != want) or (size == want and 0 < edited <= 4):
        what = (f'"bytes": {want:,}, but {path.name} has {size:,} bytes and exactly the SHA-256 it lists'
                if sha == entry["sha256"] else f'a "sha256" that differs from {path.name}\'s in only {edited} of its '
                '64 digits (a changed file changes nearly all of them)')
        manifest = path.parent / MANIFEST
        raise ManifestDamaged(f"{manifest} is damaged, not {path.name}: its entry says {what}. "
                              f"{shipped_fix(manifest)}")
    if size != want:
        kind = "empty" if size == 0 else "truncated" if size < want else "longer than shipped"
        return f"{kind}: {size:,} bytes, shipped with {want:,}"
    if sha != entry["sha256"]:
        return f"wrong content: SHA-256 {sha[:16]}..., shipped with {entry['sha256'][:16]}... (same size)"
    return None


def check_shipped(path: str | Path, error: type[Exception] = ValueError) -> None:
    """Raise ``error`` naming a shipped file whose size or SHA-256 differs from its manifest, or
    naming the manifest where its entry is the damaged one."""
    try:
        problem = shipped_file_problem(path)
    except ValueError as e:  # the manifest: unreadable, or its entry the damaged one (ManifestDamaged)
        raise (e if error is ValueError else error(str(e))) from None
    if problem:
        raise error(f"{path} is damaged ({problem}). {shipped_fix(path)}")


def update_manifest(path: str | Path) -> None:
    """Record a (re)written shipped file's size and SHA-256 in the manifest beside it."""
    path = Path(path)
    manifest_path = path.parent / MANIFEST
    manifest = read_json(manifest_path, shipped_fix(manifest_path)) if manifest_path.exists() else {}
    manifest[path.name] = dict(bytes=path.stat().st_size, sha256=file_sha256(path))
    text = json.dumps(dict(sorted(manifest.items())), indent=1) + "\n"
    atomic_write(manifest_path, lambda f: f.write(text.encode()))


def write_shipped(files: dict[Path, bytes]) -> None:
    """(Re)write files that ship with the package together with their entries in the manifest beside
    them, all or nothing (``replace_together``): a failure leaves every file and the manifest as they were."""
    files = {Path(p): content for p, content in files.items()}
    folders = {p.parent for p in files}
    if len(folders) != 1:
        raise ValueError(f"write_shipped writes into one folder, got {sorted(map(str, folders))}")
    manifest_path = folders.pop() / MANIFEST
    manifest = read_json(manifest_path, shipped_fix(manifest_path)) if manifest_path.exists() else {}
    for path, content in files.items():
        manifest[path.name] = dict(bytes=len(content), sha256=hashlib.sha256(content).hexdigest())
    text = json.dumps(dict(sorted(manifest.items())), indent=1) + "\n"
    replace_together({**files, manifest_path: text.encode()})  # the manifest last


def non_finite(tensors: dict, what: str = "tensor") -> str | None:
    """'NaN or inf in {what} NAME (k of n values)' for the first floating tensor holding such
    values (or 'NAME is a ..., not a tensor'), else None."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            return f"{what} entry {name} is a {type(t).__name__}, not a tensor"
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            return f"NaN or inf in {what} {name} ({int((~torch.isfinite(t)).sum())} of {t.numel()} values)"
    return None


def all_finite(tensors) -> bool:
    """Whether every floating tensor of ``tensors`` is free of NaN and inf: read back once per device
    (``non_finite`` names the first bad one, reading each)."""
    flags: dict[torch.device, list[torch.Tensor]] = {}
    for t in tensors:
        if t.is_floating_point():
            flags.setdefault(t.device, []).append(torch.isfinite(t).all())
    return all(bool(torch.stack(f).all()) for f in flags.values())

# ----------------------------------------------------------------------------- a training's lock

def read_lock(path: Path) -> dict | None:
    """The holder a training's lock file (OUT/train.lock) names, {} if there is none, or None if it is
    unreadable (waits 1 s for a lock being written)."""
    for _ in range(10):
        try:
            holder = json.loads(path.read_text())
            if isinstance(holder, dict) and {"pid", "host", "started"} <= set(holder):
                return holder
        except FileNotFoundError:
            return {}
        except (ValueError, OSError):
            pass
        time.sleep(0.1)
    return None


def lock_is_stale(holder: dict | None) -> bool:
    """A lock nobody holds any more: unreadable, or its process on this host has ended."""
    if holder is None:
        return True
    if holder.get("host") != socket.gethostname():
        return False  # another machine's process: we cannot tell
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, OverflowError):  # PermissionError: alive, another user's
        pass
    return False


def training_now(folder: Path, lock: str = "train.lock") -> str | None:
    """A sentence saying a training is running in ``folder`` now (its live lock: pid, start, the
    step of its first checkpoint), or None."""
    holder = read_lock(folder / lock)
    if not holder or lock_is_stale(holder):
        return None
    first = holder.get("first_checkpoint")
    return (f"{folder}/ is being trained right now (pid {holder['pid']} on {holder['host']}, started "
            f"{holder['started']}; see {folder / lock})" + (f": its first checkpoint comes at step {first:,}"
                                                             if isinstance(first, int) else ""))
