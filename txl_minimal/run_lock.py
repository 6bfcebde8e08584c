"""OUT/train.lock: one training at a time in a run folder. ``lock_out`` creates it (holding the
pid, host and start time of the training); ``training_now`` tells a reader of the folder that a
training is writing there; a lock whose process has ended is stale and taken over."""
from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Optional

LOCK = "train.lock"  # OUT/train.lock: the pid, host and start of the training writing there


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


def training_now(folder: Path, lock: str = LOCK) -> str | None:
    """A sentence saying a training is running in ``folder`` now (its live lock: pid, start, the
    step of its first checkpoint), or None."""
    holder = read_lock(folder / lock)
    if not holder or lock_is_stale(holder):
        return None
    first = holder.get("first_checkpoint")
    return (f"{folder}/ is being trained right now (pid {holder['pid']} on {holder['host']}, started "
            f"{holder['started']}; see {folder / lock})" + (f": its first checkpoint comes at step {first:,}"
                                                             if isinstance(first, int) else ""))


def check_out_is_folder(out_dir: Path) -> None:
    """FileExistsError if ``out_dir`` or a folder above it is a file."""
    for path in (out_dir, *out_dir.parents):
        if path.exists():
            if not path.is_dir():
                raise FileExistsError(f"--out {out_dir}: {path} is a file, but --out must be a folder (the run's "
                                      "ckpt.pt and log.csv go in it). Fix: name a new or existing folder.")
            return


def lock_out(out_dir: Path, first_checkpoint: Optional[int] = None) -> Path:
    """Create OUT/train.lock with O_CREAT|O_EXCL, holding this process's pid, host and start time (and
    the step of its first checkpoint, which ``training_now`` tells a user who asks for one):
    of two trainings started together exactly one gets it, the other gets a FileExistsError
    naming the holder. A lock whose process has ended (killed, crashed) is taken over, with a message."""
    check_out_is_folder(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / LOCK
    me = dict(pid=os.getpid(), host=socket.gethostname(), started=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
              first_checkpoint=first_checkpoint)
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = read_lock(path)
            if holder == {}:  # released while we looked
                continue
            if not lock_is_stale(holder):
                raise FileExistsError(
                    f"{out_dir}/ is in use by another training (pid {holder['pid']} on {holder['host']}, started "
                    f"{holder['started']}; see {path}). Fix: wait for it to end, or use another --out; if that "
                    f"process is not a training of this folder any more, delete {path}.") from None
            what = "an unreadable lock" if holder is None else \
                f"the lock of pid {holder['pid']} (started {holder['started']}), which is no longer running"
            print(f"{out_dir}/: taking over {what}", file=sys.stderr, flush=True)
            if read_lock(path) == holder:  # not replaced meanwhile by a live run
                path.unlink(missing_ok=True)
            continue
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
        except OSError:  # a full disk: no empty lock left behind
            path.unlink(missing_ok=True)
            raise
        return path
    raise FileExistsError(f"could not lock {path}: other trainings keep taking it. Fix: use another --out.")


def unlock(path: Path) -> None:
    """Remove our lock (not one another process has taken over since)."""
    if (read_lock(path) or {}).get("pid") == os.getpid():
        path.unlink(missing_ok=True)
