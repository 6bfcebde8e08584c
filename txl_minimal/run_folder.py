"""The run folder, --out: what one training keeps there and how it gets it back.

OUT/train.lock keeps a second training out while one runs (run_lock.py); OUT/log.csv holds a row
every log_interval steps (run_log.py); OUT/ckpt.pt is the last state, which a resume restores
bit-exactly, and OUT/best.pt the weights of the best periodic evaluation (run_checkpoints.py);
Ctrl-C, SIGTERM and SIGHUP save the step in progress (run_signals.py). This module holds the folder
itself: a run already in OUT is never replaced silently (``claim_out``), ``one_run_per_out`` wraps
``train`` in the lock and the signal handlers, and ``TrainResult`` is what ``train`` returns. A
``cfg`` here is train_config.py's TrainConfig.
"""
from __future__ import annotations

import functools
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import torch

from txl_minimal.checkpoint import BEST, LAST, load
from txl_minimal.devices import distributed
from txl_minimal.files import NO_SPACE, WriteError, remove_leftovers, write_problem
from txl_minimal.model import TransformerXL, TXLConfig
from txl_minimal.run_lock import LOCK, lock_out, unlock
from txl_minimal.run_checkpoints import REPLACED, replaced_note
from txl_minimal.run_log import CSVLog, log_has_rows, log_rows
from txl_minimal.run_signals import stop_signals_caught
from txl_minimal.scores import LN2, score_name, score_of

# Names this module held before the lock, the log, the checkpoints and the stop signals had modules of
# their own: ``from txl_minimal.run_folder import ...`` still finds them (a patch goes where they live now).
from txl_minimal.run_checkpoints import (NO_BEST, ON_RESUME, RESUME_MAY_CHANGE, Checkpoints,  # noqa: F401
                                         TrainingDiverged, _unlogged, follow_schedule, load_for_resume,
                                         saved_max_steps, saved_step)
from txl_minimal.run_log import CSV_COLUMNS  # noqa: F401
from txl_minimal.run_signals import (STOP_SIGNALS, Stop, TrainingInterrupted, TrainingStoppedAtOnce,  # noqa: F401
                                     resume_command, say)

RUN_FILES = (LAST, "log.csv", BEST)  # what a run writes in its --out directory


@dataclass
class TrainResult:
    """What ``train`` returns: the trained model and how its run went.

    Attributes:
        model: the model in its last state, unwrapped, in eval mode (``best_model()``: its best).
        step: the steps trained, in all (a resumed run counts its earlier ones).
        train_bpc: the mean training loss over the last log interval, in bits per token.
        valid_bpc: the last evaluation's, in bits per token (``score()``: perplexity for words).
        tokens_per_s: training speed, in tokens a second.
        wall_time_s: training time, in seconds.
        out: the run folder (ckpt.pt, best.pt, log.csv).
        complete: True when ``resume=True`` found the run already at its last step (nothing trained).
        unit: the corpus's: "character", "word" (reported in perplexity) or "byte".
        best_valid_bpc: the best periodic evaluation, whose weights are out/best.pt.
        best_step: its step (0: no periodic evaluation yet, no best.pt).

    Examples:
        >>> from txl_minimal.train import train
        >>> result = train(*preset("cpu-tiny", max_steps=4, eval_interval=4, eval_tokens=256, out="run", amp="off",
        ...                           warmup_steps=1),
        ...                progress=False)
        >>> result.step, result.best_step, result.unit, result.score()[0]
        (4, 4, 'character', 'bpc')
        >>> result.best_model().training
        False
    """

    model: TransformerXL  # unwrapped, in eval mode
    step: int
    train_bpc: float  # mean over the last log interval (in bits per token: loss / ln 2, also for words)
    valid_bpc: float  # last evaluation
    tokens_per_s: float
    wall_time_s: float
    out: Path
    complete: bool = False  # resume=True found the run already at its last step: nothing was trained
    unit: str = "character"  # the corpus's: "word" is reported in perplexity (see score)
    best_valid_bpc: float = float("nan")  # the best periodic evaluation, whose weights are out/best.pt
    best_step: int = 0  # its step (0: no periodic evaluation yet, no best.pt)

    def score(self, which: str = "valid") -> tuple[str, float]:
        """("bpc", value) for characters, ("ppl", value) for words, of the "train", "valid" (last
        evaluation) or "best" (best evaluation) figure."""
        bpc = dict(valid=self.valid_bpc, best=self.best_valid_bpc).get(which, self.train_bpc)
        return score_name(self.unit), score_of(bpc * LN2, self.unit)

    def best_model(self, device: Optional[str | torch.device] = None) -> TransformerXL:
        """The weights of out/best.pt (valid bpc ``best_valid_bpc`` at step ``best_step``), in eval mode,
        on ``device`` (default: where ``model`` is). ``model`` is the last state."""
        path = self.out / BEST
        if not path.is_file():
            raise FileNotFoundError(f"no {path}: this run has had no periodic evaluation with a finite valid bpc "
                                    "(its first comes at step eval_interval). Fix: use result.model, the last state, "
                                    "or train past eval_interval.")
        return load(path, next(self.model.parameters()).device if device is None else device)

def claim_out(out_dir: Path, resume: bool, overwrite: bool, rank: int) -> None:
    """Refuse to replace the run in ``out_dir`` unless told to; remove what a killed run left.
    Every rank checks before the process group forms (no rank has written anything yet). Nothing
    of an old run is deleted here: --overwrite replaces it once the new run has passed every check
    (``replace_old_run``)."""
    if resume and overwrite:
        raise ValueError("resume continues the run in --out, overwrite replaces it: choose one")
    found = [name for name in RUN_FILES if (out_dir / name).exists()]
    if found == ["log.csv"] and not log_has_rows(out_dir / "log.csv"):
        found = []  # a run that failed before its first row (a header at most): nothing to keep
    aside = replaced_note(out_dir, " Or: ")
    if not found and aside and not overwrite:  # only the run an --overwrite replaced, whose successor never saved
        raise (FileNotFoundError if resume else FileExistsError)(
            f"{out_dir}/ holds no run of its own (no ckpt.pt), but {aside[5:]}. Or: --overwrite to start afresh "
            "(train(..., overwrite=True)), or another --out directory.")
    if resume and not found:
        raise FileNotFoundError(f"{out_dir}/ holds no run to resume (no ckpt.pt). Fix: drop --resume to start afresh "
                                "(train(..., resume=False)).")
    if found and LAST not in found and not overwrite:  # a crash before the first checkpoint, or weights deleted
        best = (" (its best.pt goes too, once the new run has a checkpoint: copy it elsewhere first to keep it)"
                if BEST in found else "")
        raise (FileNotFoundError if resume else FileExistsError)(
            f"{out_dir}/ holds a run's {' and '.join(found)} but no ckpt.pt (it stopped before its first checkpoint, "
            "or its weights were deleted), so it cannot be resumed. Fix: --overwrite to start it afresh "
            f"(train(..., overwrite=True)){best}, or another --out directory.{aside}")
    if found and not (resume or overwrite):
        raise FileExistsError(f"{out_dir}/ already holds a run ({', '.join(found)}) that training would overwrite. "
                              "Fix: --resume to continue it, --overwrite to replace it (train(..., resume=True) "
                              "or overwrite=True), or another --out directory.")
    if rank == 0:  # a checkpoint or log write killed mid-way (files.atomic_write)
        for name in (LAST, BEST):
            remove_leftovers(out_dir, f"{name}.*.tmp")
        remove_leftovers(out_dir, "log.csv.*.tmp")


def replace_old_run(out_dir: Path, overwrite: bool, rank: int) -> Optional[Path]:
    """--overwrite, once the new run has passed every check: the old run's ckpt.pt, best.pt and log.csv
    are moved into OUT/replaced/ (said in a line), so that none sits beside the new log, and kept there until
    the new run's first checkpoint (``Checkpoints.replaced``): a run that diverges or is killed before then
    loses nothing. Returns that folder, or None. A folder already there holds the run an earlier
    --overwrite replaced whose successor never saved a checkpoint: it is kept, unless OUT holds a ckpt.pt."""
    if not overwrite or rank != 0:
        return None
    aside = out_dir / REPLACED
    if aside.is_dir() and not (out_dir / LAST).exists():  # the last run with weights is still the one kept
        for name in (BEST, "log.csv"):
            (out_dir / name).unlink(missing_ok=True)
        return aside
    moved = [name for name in RUN_FILES if (out_dir / name).exists()]
    if not {LAST, BEST} & set(moved):  # a log without weights: nothing to keep (the new log replaces it)
        return None
    shutil.rmtree(aside, ignore_errors=True)
    aside.mkdir()
    for name in moved:
        os.replace(out_dir / name, aside / name)
    say(f"{out_dir}/: --overwrite moved the run it replaces ({', '.join(moved)}) into {aside}/, which is deleted "
        "once this run saves its first checkpoint")
    return aside


def start_writing(out_dir: Path, resume: bool, overwrite: bool, step: int, rank: int) -> tuple[CSVLog, Optional[Path]]:
    """Every check has passed: only now is an old run replaced (--overwrite, ``replace_old_run``: moved into
    OUT/replaced/, returned), and OUT/log.csv opened, keeping a resumed run's rows up to ``step`` (rank 0 writes)."""
    aside = replace_old_run(out_dir, overwrite, rank)
    return CSVLog(out_dir / "log.csv", resume, step, write=rank == 0), aside


def one_run_per_out(train_fn):
    """``train`` holding OUT/train.lock (rank 0), with Ctrl-C, SIGTERM and SIGHUP saving the step in
    progress (every rank; a second one stops at once: ``TrainingStoppedAtOnce``)."""
    @functools.wraps(train_fn)
    def run(model_cfg: TXLConfig, cfg, *args, **kwargs) -> TrainResult:
        replace(cfg)  # an impossible config is refused before anything is written
        rank, world, _ = distributed()
        out_dir = Path(cfg.out)
        created = not out_dir.exists()
        try:
            lock = lock_out(out_dir, min(cfg.eval_interval, cfg.max_steps)) if rank == 0 else None
        except OSError as e:  # a read-only or forbidden folder: not a traceback from mkdir
            problem = write_problem(e, out_dir / LOCK)
            if problem is None:
                raise
            fix = ("free some disk space, or choose --out on another disk" if problem.errno in NO_SPACE else
                   "choose a folder you can write to with --out (TrainConfig.out)")
            raise WriteError(f"cannot write in --out {out_dir} ({problem.reason}). Fix: {fix}",
                             problem.errno, problem.reason) from None
        try:
            with stop_signals_caught(rank, out_dir / LAST):
                return train_fn(model_cfg, cfg, *args, **kwargs)
        finally:
            if lock is not None:
                unlock(lock)
                if created and not any(out_dir.iterdir()):  # refused before writing: leave no trace
                    out_dir.rmdir()
    return run


def finished(model: TransformerXL, step: int, end: int, cfg, out_dir: Path, best: dict) -> TrainResult:
    """What ``train(resume=True)`` returns for a run already at its last step ``end``, after saying so."""
    try:  # the log only supplies the last numbers shown
        rows = log_rows(out_dir / "log.csv", step) if (out_dir / "log.csv").exists() else []
    except ValueError:
        rows = []

    def last(key: str) -> float:
        return next((float(r[key]) for r in reversed(rows) if r.get(key)), float("nan"))

    if end < cfg.max_steps:  # stop_at / --stop-at at or before the checkpoint
        print(f"{out_dir}/ is at step {step}, already {'at' if step == end else 'past'} --stop-at {end}; nothing to "
              f"train. Fix: a later --stop-at, or none to go on to max_steps {cfg.max_steps}.")
    else:
        print(f"{out_dir}/ holds a complete run: step {step} of max_steps {cfg.max_steps}; nothing to train. "
              f"To train it longer, resume with a higher limit: --resume --max-steps {2 * step} "
              "(train(..., resume=True) with TrainConfig.max_steps raised).")
    return TrainResult(model.eval(), step, last("train_bpc"), last("valid_bpc"), 0.0, 0.0, out_dir, complete=True,
                       unit=getattr(model, "unit", "character"),  # a word run reports perplexity
                       **best_fields(best))


def best_fields(best: dict) -> dict:
    """TrainResult's best_valid_bpc and best_step from the ``best`` a checkpoint keeps."""
    return dict(best_valid_bpc=float("nan") if best["valid_bpc"] is None else best["valid_bpc"],
                best_step=best["step"])
