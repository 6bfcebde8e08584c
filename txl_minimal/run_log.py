"""OUT/log.csv: a row every log_interval steps (the step, tokens, wall time, lr, the training loss
and bpc since the last row, the valid bpc of an evaluation). A resumed run keeps the rows up to its
checkpoint, so that its log is an uninterrupted run's; a damaged log is refused before anything is
written, a last row cut short by a kill dropped with a warning."""
from __future__ import annotations

import csv
import io
import warnings
from pathlib import Path
from typing import Optional

from txl_minimal.checkpoint import LAST
from txl_minimal.files import WriteError, atomic_write, write_problem
from txl_minimal.run_checkpoints import how_to_go_on, last_checkpoint_note, write_failed
from txl_minimal.scores import LN2

CSV_COLUMNS = ("step", "tokens", "wall_time_s", "lr", "train_loss", "train_bpc", "valid_bpc")


def log_has_rows(path: Path) -> bool:
    """Whether a log.csv holds more than its header (an unreadable one counts as holding rows)."""
    try:
        return len(path.read_bytes().strip().splitlines()) > 1
    except OSError:
        return True


def log_rows(path: Path, step: int) -> list[dict]:
    """The rows of a run's log.csv up to ``step``, which a resume keeps. A last line cut short
    (a killed run) is dropped with a warning; other damage is a ValueError naming the file,
    raised before anything is written."""
    fix = (f"Fix: restore {path}, or move it aside: the run then resumes from its checkpoint (step {step}) "
           "with a log that starts there.")
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise ValueError(f"{path} is damaged (not text). {fix}") from None
    if not text.strip():
        warnings.warn(f"{path} is empty: the resumed run's log starts at step {step}", stacklevel=3)
        return []
    if not text.endswith("\n"):  # the last row's write was cut short
        warnings.warn(f"{path}: dropping its last line, cut short: {text[text.rfind(chr(10)) + 1:][:60]!r}",
                      stacklevel=3)
        text = text[:text.rfind("\n") + 1]
        if not text:  # the header itself was cut: no rows to keep
            return []
    reader = csv.DictReader(text.splitlines())
    if tuple(reader.fieldnames or ()) != CSV_COLUMNS:
        raise ValueError(f"{path} is damaged: its header is {text.splitlines()[0][:80]!r}, "
                         f"not {','.join(CSV_COLUMNS)}. {fix}")
    rows = list(reader)
    for line, row in enumerate(rows, 2):
        if not _row_ok(row):
            raise ValueError(f"{path} is damaged (line {line}: {','.join(map(str, row.values()))[:80]!r}). {fix}")
    return [r for r in rows if int(r["step"]) <= step]


def _row_ok(row: dict) -> bool:
    """A log.csv row with every column and numbers in them (valid_bpc may be empty)."""
    try:
        int(row["step"])
        [float(row[k]) for k in CSV_COLUMNS if k != "valid_bpc" or row[k]]
    except (TypeError, ValueError):  # float(None): a missing column
        return False
    return None not in row  # None: the key of surplus columns


class CSVLog:
    """OUT/log.csv; a resumed run keeps the rows up to its checkpoint. Only rank 0
    writes one: on the other ranks (``write=False``) the methods do nothing.

    The kept rows are written whole to a temp name and renamed over the old log (a process killed
    at any moment leaves the old log or the new one, never an empty one); then rows are appended:
    4 us a row, where rewriting a 5,000-row log whole (temp file, fsync, rename) took 9 ms (one
    CPU, a local disk). A row cut short by a kill is dropped on the next resume (``log_rows``)."""

    def __init__(self, path: Path, resume: bool, step: int, write: bool = True):
        self.file, self.path = None, path
        if not write:
            return
        if resume and not path.exists() and step:
            warnings.warn(f"{path} is missing: the resumed run's log starts at step {step}", stacklevel=3)
        rows = log_rows(path, step) if resume and path.exists() else []
        kept = io.StringIO()
        writer = csv.DictWriter(kept, CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(r for r in rows if int(r["step"]) <= step)
        atomic_write(path, lambda f: f.write(kept.getvalue().encode()))
        self.file = path.open("a", newline="")
        self.writer = csv.DictWriter(self.file, CSV_COLUMNS, lineterminator="\n")

    def write(self, step: int, tokens: int, wall_time_s: float, lr: float, train_bpc: float,
              valid_bpc: Optional[float]) -> None:
        """One row, flushed at once so that the file can be watched during a run."""
        if self.file is None:
            return
        try:
            self.writer.writerow(dict(step=step, tokens=tokens, wall_time_s=round(wall_time_s, 2), lr=f"{lr:.6g}",
                                      train_loss=f"{train_bpc * LN2:.5f}", train_bpc=f"{train_bpc:.5f}",
                                      valid_bpc="" if valid_bpc is None else f"{valid_bpc:.5f}"))
            self.file.flush()
        except OSError as e:  # a full disk: the same command with --resume goes on from the last checkpoint
            problem = write_problem(e, self.path)
            if problem is None:
                raise
            raise WriteError(f"{write_failed(self.path, step, problem, 'its row')}. "
                             f"{last_checkpoint_note(self.path.with_name(LAST))} Fix: free some disk space (or make "
                             f"{self.path.parent} writable), {how_to_go_on(self.path.with_name(LAST))}",
                             problem.errno, problem.reason) from None

    def close(self) -> None:
        if self.file is not None:
            try:
                self.file.close()
            except OSError:  # a full disk: the row's write already said so
                pass
