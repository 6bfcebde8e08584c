"""Files the package writes and reads: atomic writes (``atomic_write``, ``replace_together``: a crash
leaves the old file, never half a new one), ``WriteError`` for a full disk or a read-only folder, the
checks that a path is or can become a folder, leftovers of a killed process, a file's SHA-256 and
``read_json``."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


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
    written there (a checkpoint, a run's files) without the user having named it; and for what is no
    path at all (None, a number: pathlib's TypeError names neither)."""
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"{what} must be a path (a str or a pathlib.Path), got {path!r}. Fix: e.g. "
                         "'runs/mine/ckpt.pt'")
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


def part_suffix() -> str:
    """The suffix of a temporary file this process writes (``atomic_write(path, write, suffix=part_suffix())``):
    ".PID.part", so that ``remove_dead_parts`` knows whose it is."""
    return f".{os.getpid()}.part"


def remove_dead_parts(folder: str | Path, name: str) -> list[Path]:
    """Delete the temporary files ``name.*.PID.part`` (``part_suffix``) in ``folder`` whose process has ended:
    what a write killed half-way (SIGKILL, a power cut) left, never the file another process is writing now
    (two DDP ranks building one cache)."""
    dead = []
    for path in Path(folder).glob(f"{name}.*.part"):
        pid = path.name.rsplit(".", 2)[-2]
        if not pid.isdigit() or not _alive(int(pid)):
            dead.append(path)
    for path in dead:
        try:
            path.unlink(missing_ok=True)
        except OSError:  # a folder that became read-only: nothing of ours can be in the way there
            pass
    return sorted(dead)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (one of another user counts as running)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # (OverflowError: a number no process has)
        return False
    except OSError:  # PermissionError: another user's
        return True
    return True


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


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
