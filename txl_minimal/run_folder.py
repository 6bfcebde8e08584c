"""The run folder, --out: what one training keeps there and how it gets it back.

OUT/train.lock keeps a second training out while one runs; OUT/log.csv (CSVLog) holds a row every
log_interval steps; OUT/ckpt.pt is the last state, which a resume restores bit-exactly; OUT/best.pt
the weights of the best periodic evaluation. A run already in OUT is never replaced silently
(claim_out), and Ctrl-C saves the step in progress (TrainingInterrupted). A ``cfg`` here is
train.py's TrainConfig (train.py imports this module, so it is not named here).
"""
from __future__ import annotations

import csv
import functools
import io
import json
import math
import os
import shlex
import signal
import socket
import sys
import threading
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import torch

from txl_minimal.checkpoint import (BEST, LAST, ConfigMismatch, describe_vocab, load, load_checkpoint, rng_state,
                                    save_checkpoint, set_rng_state)
from txl_minimal.devices import RankVote, distributed, gather, gather_objects
from txl_minimal.model import TransformerXL, TXLConfig
from txl_minimal.utils import (LN2, NO_SPACE, WriteError, all_finite, atomic_write, lock_is_stale, non_finite,
                               read_lock, remove_leftovers, score_name, score_of, write_problem)

CSV_COLUMNS = ("step", "tokens", "wall_time_s", "lr", "train_loss", "train_bpc", "valid_bpc")
RUN_FILES = (LAST, "log.csv", BEST)  # what a run writes in its --out directory
LOCK = "train.lock"  # OUT/train.lock: the pid, host and start of the training writing there


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

# ----------------------------------------------------------------------------- one run per --out, Ctrl-C

def claim_out(out_dir: Path, resume: bool, overwrite: bool, rank: int) -> None:
    """Refuse to replace the run in ``out_dir`` unless told to; remove what a killed run left.
    Every rank checks before the process group forms (no rank has written anything yet). Nothing
    of an old run is deleted here: --overwrite replaces it once the new run has passed every check
    (``replace_old_run``)."""
    if resume and overwrite:
        raise ValueError("resume continues the run in --out, overwrite replaces it: choose one")
    found = [name for name in RUN_FILES if (out_dir / name).exists()]
    if found == ["log.csv"] and not _log_has_rows(out_dir / "log.csv"):
        found = []  # a run that failed before its first row (a header at most): nothing to keep
    if found == ["log.csv"] and not overwrite:  # a crash before the first checkpoint, or weights deleted
        raise (FileNotFoundError if resume else FileExistsError)(
            f"{out_dir}/ holds a run's log.csv but no ckpt.pt (it stopped before its first checkpoint, or its "
            "weights were deleted), so it cannot be resumed. Fix: --overwrite to start it afresh "
            "(train(..., overwrite=True)), or another --out directory.")
    if found and not (resume or overwrite):
        raise FileExistsError(f"{out_dir}/ already holds a run ({', '.join(found)}) that training would overwrite. "
                              "Fix: --resume to continue it, --overwrite to replace it (train(..., resume=True) "
                              "or overwrite=True), or another --out directory.")
    if rank == 0:  # a checkpoint or log write killed mid-way (utils.atomic_write)
        for name in (LAST, BEST):
            remove_leftovers(out_dir, f"{name}.*.tmp")
        remove_leftovers(out_dir, "log.csv.*.tmp")


def _log_has_rows(path: Path) -> bool:
    """Whether a log.csv holds more than its header (an unreadable one counts as holding rows)."""
    try:
        return len(path.read_bytes().strip().splitlines()) > 1
    except OSError:
        return True


def replace_old_run(out_dir: Path, overwrite: bool, rank: int) -> None:
    """--overwrite, once the new run has passed every check: drop the old checkpoint (the new
    log replaces the old one whole, CSVLog), so that no stale ckpt.pt or best.pt sits beside the new log."""
    if overwrite and rank == 0:
        for name in (LAST, BEST):
            (out_dir / name).unlink(missing_ok=True)


def start_writing(out_dir: Path, resume: bool, overwrite: bool, step: int, rank: int) -> CSVLog:
    """Every check has passed: only now is an old run replaced (--overwrite, ``replace_old_run``), and
    OUT/log.csv opened, keeping a resumed run's rows up to ``step`` (rank 0 writes)."""
    replace_old_run(out_dir, overwrite, rank)
    return CSVLog(out_dir / "log.csv", resume, step, write=rank == 0)


# The signals that stop a training as Ctrl-C does (the step finished and saved, the --resume command
# printed, the exit status 128 + the signal's number): a batch scheduler's pre-emption, `docker stop` and
# a lost Colab runtime send SIGTERM, a closed terminal SIGHUP.
STOP_SIGNALS = {getattr(signal, name): said for name, said in
                (("SIGINT", "Ctrl-C"), ("SIGTERM", "SIGTERM"), ("SIGHUP", "SIGHUP")) if hasattr(signal, name)}


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, SIGHUP: ``signum``) during ``train``: the step in progress was finished and
    saved in ``path``. ``status``: the exit status of a process stopped by that signal."""

    def __init__(self, step: int, path: Path, signum: Optional[int] = None):
        signum = signal.SIGINT if signum is None else signum
        by = "" if signum == signal.SIGINT else f" by {STOP_SIGNALS.get(signum, signum)}"
        super().__init__(f"training interrupted at step {step}{by}: {path} holds that step. "
                         "Resume with --resume (train(..., resume=True)), which continues bit-exactly.")
        self.step, self.path, self.status = step, path, 128 + int(signum)


class TrainingStoppedAtOnce(KeyboardInterrupt):
    """A second Ctrl-C (SIGTERM, SIGHUP) during ``train``: it stopped at once, saving nothing more."""

    def __init__(self, path: Path, signum: int):
        step = saved_step(path)
        kept = (f"{path} holds step {step}, the last checkpoint: --resume continues from it" if step is not None
                else f"no checkpoint was saved before it ({path} does not exist)")
        super().__init__(f"training stopped at once by a second {STOP_SIGNALS.get(signum, signum)}: no checkpoint "
                         f"of the step in progress was written; {kept}.")
        self.path, self.status = path, 128 + int(signum)


class TrainingDiverged(FloatingPointError):
    """A NaN or inf in the training loss, or in the state a checkpoint would hold, at ``step``: nothing
    of it was saved, so that ``path`` (OUT/ckpt.pt, at ``last_step``; None: none yet) stays the last
    finite state."""

    def __init__(self, step: int, what: str, path: Path, last_step: Optional[int], lr: float, amp: str = "off"):
        lower = f"{lr / 10:g}"
        if last_step is None:
            kept = "no checkpoint was saved before it"
            fix = (f"train afresh with a lower learning rate, --overwrite --set lr={lower} "
                   f"(train(..., overwrite=True) with TrainConfig.lr={lower})")
        else:
            kept = f"{path} still holds step {last_step}, the last finite state"
            fix = (f"resume from it with a lower learning rate, --resume --set lr={lower} "
                   f"(train(..., resume=True) with TrainConfig.lr={lower})")
        fp16 = "; in fp16 a value may overflow too: --set amp=bf16 (or off)" if amp == "fp16" else ""
        super().__init__(f"training diverged at step {step}: {what}. Nothing of it was saved: {kept}. Fix: {fix}; "
                         f"this run's lr is {lr:g} (a longer warm-up, warmup_steps, helps too){fp16}")
        self.step, self.path, self.last_step = step, path, last_step


class Stop:
    """Set by the first stop signal (Ctrl-C, SIGTERM, SIGHUP: ``signum``) while ``train`` runs: the loop
    saves after the current step."""

    requested = False
    signum: Optional[int] = None


class _StopAtOnce(KeyboardInterrupt):
    """A second stop signal, raised where the training is (``one_run_per_out`` says what it left)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def say(text: str) -> None:
    """A line on stderr; where the terminal has gone (SIGHUP: writing fails), the output goes to
    /dev/null from now on, so that the training can still save its step and end."""
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)


def _stop_handler(rank: int, launched: bool):
    """The handler of STOP_SIGNALS: the first asks the loop to save and stop, said by rank 0; a second
    stops at once (one process). Under torchrun (``launched``) a second is ignored: its launcher passes
    on the signal that the terminal sent to every process already, and the ranks stop together."""
    def handle(signum, frame) -> None:
        if Stop.requested:
            if not launched:
                raise _StopAtOnce(signum)
            return
        Stop.requested, Stop.signum = True, signum
        if rank == 0:
            said = STOP_SIGNALS.get(signum, str(signum))
            again = "" if launched else f" ({said} again to stop without one)"
            say(f"\n{said}: finishing this step and saving a checkpoint{again}")
    return handle


def _catch_stop_signals(rank: int) -> dict:
    """Install ``_stop_handler`` for each of STOP_SIGNALS that is not ignored (a process started with
    nohup, or in the background, keeps ignoring it); the handlers it replaced. Only the main thread may."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    handler = _stop_handler(rank, launched="RANK" in os.environ)
    return {s: signal.signal(s, handler) for s in STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN}


def _check_out_is_folder(out_dir: Path) -> None:
    """FileExistsError if ``out_dir`` or a folder above it is a file."""
    for path in (out_dir, *out_dir.parents):
        if path.exists():
            if not path.is_dir():
                raise FileExistsError(f"--out {out_dir}: {path} is a file, but --out must be a folder (the run's "
                                      "ckpt.pt and log.csv go in it). Fix: name a new or existing folder.")
            return


def _lock_out(out_dir: Path, first_checkpoint: Optional[int] = None) -> Path:
    """Create OUT/train.lock with O_CREAT|O_EXCL, holding this process's pid, host and start time (and
    the step of its first checkpoint, which ``utils.training_now`` tells a user who asks for one):
    of two trainings started together exactly one gets it, the other gets a FileExistsError
    naming the holder. A lock whose process has ended (killed, crashed) is taken over, with a message."""
    _check_out_is_folder(out_dir)
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


def _unlock(path: Path) -> None:
    """Remove our lock (not one another process has taken over since)."""
    if (read_lock(path) or {}).get("pid") == os.getpid():
        path.unlink(missing_ok=True)


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
            lock = _lock_out(out_dir, min(cfg.eval_interval, cfg.max_steps)) if rank == 0 else None
        except OSError as e:  # a read-only or forbidden folder: not a traceback from mkdir
            problem = write_problem(e, out_dir / LOCK)
            if problem is None:
                raise
            fix = ("free some disk space, or choose --out on another disk" if problem.errno in NO_SPACE else
                   "choose a folder you can write to with --out (TrainConfig.out)")
            raise WriteError(f"cannot write in --out {out_dir} ({problem.reason}). Fix: {fix}",
                             problem.errno, problem.reason) from None
        previous = _catch_stop_signals(rank)
        Stop.requested, Stop.signum = False, None
        try:
            return train_fn(model_cfg, cfg, *args, **kwargs)
        except _StopAtOnce as e:
            raise TrainingStoppedAtOnce(out_dir / LAST, e.signum) from None
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, signal.SIG_DFL if handler is None else handler)
            Stop.requested, Stop.signum = False, None
            if lock is not None:
                _unlock(lock)
                if created and not any(out_dir.iterdir()):  # refused before writing: leave no trace
                    out_dir.rmdir()
    return run


def resume_command(argv: list[str]) -> str:
    """The command line that continues an interrupted one (under torchrun, with as many processes)."""
    args = [a for a in argv if a not in ("--overwrite", "--resume")]
    world = distributed()[1]
    launch = ["torchrun", "--nproc_per_node", str(world)] if "RANK" in os.environ else \
        [sys.executable.rsplit("/", 1)[-1]]
    return shlex.join([*launch, "-m", "txl_minimal.train", *args, "--resume"])

# ----------------------------------------------------------------------------- checkpoints and resume

NO_BEST = dict(step=0, valid_bpc=None)  # no periodic evaluation yet (None: a checkpoint holds no inf)


class Checkpoints:
    """OUT/ckpt.pt and OUT/best.pt of one training: the ``parts`` a checkpoint restores (model,
    optimizer, scheduler, scaler), the ``configs`` it records, the best periodic evaluation so far
    (``best``, kept in ckpt.pt so that a resumed run replaces best.pt only when an uninterrupted one
    would), the run's wall time across resumes (``elapsed``; ``wall_time_s``), the step of the last
    checkpoint (``saved``) and each rank's training losses since the last log row (``unlogged``, so
    that the first row after a resume is an uninterrupted run's). Every rank calls ``save`` (it
    gathers); rank 0 writes. ``vote``: what the ranks decide together (devices.RankVote)."""

    def __init__(self, out_dir: Path, parts: dict, configs: dict, rank: int, world: int):
        self.last, self.best_path = out_dir / LAST, out_dir / BEST
        self.parts, self.configs, self.rank, self.world = parts, configs, rank, world
        self.best, self.elapsed, self.started = dict(NO_BEST), 0.0, time.perf_counter()
        self.saved: Optional[int] = None
        self.unlogged: list[float] = []
        self.vote = RankVote(world)

    def restore(self, ckpt: Optional[dict], cfg, device: torch.device) -> tuple[int, int, int, Optional[list]]:
        """(step, epoch, segment, this rank's rows of the memory) to go on from: a fresh run's start
        (``ckpt`` None), or a resume's, the parts, RNG state and wall time restored from ``ckpt``
        (OUT/ckpt.pt, loaded on the CPU) and the schedule of ``cfg`` followed from the next step."""
        if ckpt is None:
            return 0, 0, 0, None
        step, epoch, segment, self.elapsed, mems, self.best = _resume(ckpt, self.last, self.configs, self.parts,
                                                                      self.rank, self.world, device)
        follow_schedule(self.parts["optimizer"], self.parts["scheduler"], cfg)
        self.saved, self.unlogged = step, _unlogged(ckpt, self.rank, self.world)
        return step, epoch, segment, mems

    def start_clock(self) -> None:
        """The loop begins: the wall time counts from now (the set-up before it is left out)."""
        self.started = time.perf_counter()

    def wall_time_s(self) -> float:
        """The run's time so far: what earlier processes and saves counted, and this one's since."""
        return self.elapsed + time.perf_counter() - self.started

    def save(self, step: int, epoch: int, segment: int, mems: Optional[list[torch.Tensor]],
             valid_bpc: Optional[float] = None, unlogged: Optional[list[float]] = None) -> None:
        """OUT/ckpt.pt: the state after ``step``, which --resume continues bit-exactly (``unlogged``: this
        rank's losses since the last log row, ``LossMeter.pending``). With ``valid_bpc`` (a periodic
        evaluation's, known on rank 0), first OUT/best.pt, which ckpt.pt names, if it is the best so far.
        A state holding NaN or inf is never saved: ``TrainingDiverged`` instead, on every rank."""
        self.elapsed, self.started = self.wall_time_s(), time.perf_counter()
        problem = self._non_finite(mems)
        if not self.vote.all(problem is None):
            raise self.diverged(step, problem or "another rank's memory holds NaN or inf")
        if valid_bpc is not None and self.rank == 0 and not math.isfinite(valid_bpc):
            warnings.warn(f"the evaluation at step {step} gave valid bpc {valid_bpc} although the weights are finite "
                          "(it is not kept as best.pt). Fix: evaluate in fp32, --set amp=off", stacklevel=3)
        if valid_bpc is not None and self.rank == 0 and _improves(valid_bpc, self.best):
            self._save_best(step, valid_bpc)
        _save(self.last, self.parts, self.configs, step, epoch, segment, mems, self.elapsed, self.rank, self.world,
              self.best, unlogged or [])
        self.saved = step

    def _save_best(self, step: int, valid_bpc: float) -> None:
        """OUT/best.pt of a new best evaluation; a failed write says what is kept and that --resume goes on."""
        try:
            _save_best(self.best_path, self.parts["model"], self.configs, step, valid_bpc, self.elapsed)
        except WriteError as e:
            earlier = (f"best.pt of step {self.best['step']}" if self.best["step"] else "no best.pt yet")
            raise WriteError(f"{_write_failed(self.best_path, step, e)} (a new best valid bpc). Kept: {earlier}. "
                             f"{_last_checkpoint(self.last)} Fix: free some disk space (or make "
                             f"{self.best_path.parent} writable), then run the same command with --resume",
                             e.errno, e.reason) from None
        self.best = dict(step=step, valid_bpc=valid_bpc)

    def _non_finite(self, mems: Optional[list[torch.Tensor]]) -> Optional[str]:
        """What holds NaN or inf among the weights, Adam's state and the memory (one read back per
        device: a save reads them all anyway), or None."""
        weights = self.parts["model"].state_dict()
        adam = {f"{key} of parameter {i}": t for i, state in enumerate(self.parts["optimizer"].state.values())
                for key, t in state.items() if isinstance(t, torch.Tensor)}
        memory = {f"of layer {i}": m for i, m in enumerate(mems or [])}
        if all_finite([*weights.values(), *adam.values(), *memory.values()]):
            return None
        return (non_finite(weights, "the weights") or non_finite(adam, "Adam's state")
                or non_finite(memory, "the memory"))

    def diverged(self, step: int, what: str) -> TrainingDiverged:
        """The error of a NaN or inf (``what``) at ``step``: nothing of it saved, the last checkpoint named."""
        return TrainingDiverged(step, what, self.last, self.saved, self.configs["train_config"]["lr"],
                                self.configs["choice"]["amp"])


def load_for_resume(path: Path, model_cfg: TXLConfig) -> dict:
    """OUT/ckpt.pt for a resume, checked against ``model_cfg``, on the CPU: the RNG states must stay
    CPU tensors, and each part moves its own state to its device."""
    try:
        return load_checkpoint(path, model_cfg, map_location="cpu")
    except ConfigMismatch as e:  # a --set of a model field: say what a resume may change
        raise ConfigMismatch(f"{e} {RESUME_MAY_CHANGE}") from None


def saved_max_steps(path: Path) -> Optional[int]:
    """The max_steps a run's checkpoint was trained towards, or None (no readable checkpoint: ``train``
    then says what is wrong with it)."""
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["train_config"]["max_steps"])
    except Exception:  # noqa: BLE001 (train() loads it again and names the damage)
        return None


def finished(model: TransformerXL, step: int, end: int, cfg, out_dir: Path, best: dict) -> TrainResult:
    """What ``train(resume=True)`` returns for a run already at its last step ``end``, after saying so."""
    try:  # the log only supplies the last numbers shown
        rows = _log_rows(out_dir / "log.csv", step) if (out_dir / "log.csv").exists() else []
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


def _keep_implementation(saved: dict, opt: torch.optim.Optimizer) -> dict:
    """A saved optimiser state with this run's implementation flags (fused, foreach): torch would
    otherwise take the saved run's, and place Adam's step counters for those."""
    flags = {k: opt.param_groups[0][k] for k in ("fused", "foreach") if k in opt.param_groups[0]}
    return dict(saved, param_groups=[dict(g, **flags) for g in saved["param_groups"]])


def _resume(ckpt: dict, path: Path, configs: dict, parts: dict, rank: int, world: int,
            device: torch.device) -> tuple[int, int, int, float, Optional[list[torch.Tensor]], dict]:
    """Load ``parts`` (model, optimiser, ...) and this rank's RNG state from a checkpoint (loaded on
    the CPU); return its (step, epoch, segment, wall_time_s, this rank's rows of the memory, best so far)."""
    used = configs["train_config"]
    _check_resume(path, ckpt, configs)
    for key, part in parts.items():
        if key == "scaler" and part.is_enabled() != bool(ckpt[key]):  # fp16 now, not then (or back)
            print(f"{path}: the loss scale starts afresh (the run was saved "
                  f"{'without' if part.is_enabled() else 'with'} fp16 loss scaling)")
            continue
        part.load_state_dict(_keep_implementation(ckpt[key], part) if key == "optimizer" else ckpt[key])
    set_rng_state(ckpt["rng"][rank % len(ckpt["rng"])], device)
    mems = ckpt["mems"]
    if mems is not None:  # saved for the full batch: keep this rank's rows
        per = used["batch_size"] // world
        mems = [m[rank * per:(rank + 1) * per].to(device) for m in mems]
    best = ckpt.get("best") or dict(NO_BEST)  # a checkpoint from before best.pt existed: none yet
    return ckpt["step"], ckpt["data"]["epoch"], ckpt["data"]["segment"], ckpt["wall_time_s"], mems, best


# What a resume may change (TrainConfig fields): the schedule, followed from the next step on
# (follow_schedule), the evaluation and logging, precision, compilation and the device. The model
# config and batch_size, corpus and seed may not: the memory and data position would not line up,
# and the random state comes from the checkpoint (a new seed would be recorded but not used).
ON_RESUME = ("lr", "min_lr", "warmup_steps", "max_steps", "grad_clip", "eval_interval", "eval_tokens",
             "eval_batch_size", "eval_tgt_len", "eval_mem_len", "eval_clamp_len", "eval_same_length",
             "log_interval", "amp", "attention", "compile", "adam", "flex_attention", "device", "out")
RESUME_MAY_CHANGE = (f"On --resume only these settings may change: {', '.join(ON_RESUME[:-1])} (a new schedule "
                     "is followed from the next step); the model's may not.")
_WHY = dict(batch_size="the memory and data position would not line up",
            corpus="the memory and data position would not line up",
            seed="a resume restores the random state saved in the checkpoint, so a new seed would be recorded "
                 "but not used")


def _check_resume(path: Path, ckpt: dict, configs: dict) -> None:
    """ValueError if this run changes a setting a resume cannot honour (see ON_RESUME), or reads
    a corpus whose vocabulary differs from the checkpoint's, before anything is loaded."""
    saved, used = ckpt["train_config"], configs["train_config"]
    for key in used:
        if key not in ON_RESUME and key in saved and saved[key] != used[key]:
            fix = " (for the corpus: --corpus, and $TXL_CORPUS, which overrides it)" if key == "corpus" else ""
            raise ValueError(f"checkpoint {path} used {key}={saved[key]!r}, this run {used[key]!r}: "
                             f"{_WHY.get(key, 'it cannot change on resume')}. Fix: resume with the same "
                             f"setting{fix}, or train afresh in another --out. {RESUME_MAY_CHANGE}")
    if "vocab" in ckpt and ckpt["vocab"] != configs["vocab"]:
        raise ValueError(f"checkpoint {path} was trained on another vocabulary than {used['corpus']}'s "
                         f"({describe_vocab(ckpt['vocab'])}, here {describe_vocab(configs['vocab'])}). "
                         "Fix: resume on its own corpus (--corpus, $TXL_CORPUS).")


def follow_schedule(opt: torch.optim.Optimizer, sched: torch.optim.lr_scheduler.LambdaLR,
                     cfg) -> None:
    """After a resume: the learning rate of this run's schedule (lr, min_lr, warmup_steps,
    max_steps), from the next step on. The scheduler's state brings back the checkpoint's lr as
    base_lrs, and the optimiser the rate it had set next: without this, a --set lr=... on resume
    would be recorded in the log and checkpoint but not used. Computed as LambdaLR computes it,
    so an unchanged schedule resumes bit-exactly."""
    sched.base_lrs = [cfg.lr for _ in opt.param_groups]
    for group, fn in zip(opt.param_groups, sched.lr_lambdas):
        group["initial_lr"] = cfg.lr
        group["lr"] = cfg.lr * fn(sched.last_epoch)
    sched._last_lr = [group["lr"] for group in opt.param_groups]


def _save(path: Path, parts: dict, configs: dict, step: int, epoch: int, segment: int,
          mems: Optional[list[torch.Tensor]], wall_time_s: float, rank: int, world: int, best: dict,
          unlogged: list[float]) -> None:
    """Write the checkpoint a bit-exact resume needs (``best``: the step and valid bpc of best.pt, so that
    a resumed run replaces it only when an uninterrupted one would; ``unlogged``: this rank's losses since
    the last log row). Every rank takes part in the gathers (full-batch memory, each rank's RNG state and
    losses); rank 0 writes."""
    full_mems = None if mems is None or mems[0].size(1) == 0 else [gather(m, world).cpu() for m in mems]
    device = next(parts["model"].parameters()).device
    rngs = gather_objects(rng_state(device), world)
    unlogged_nll = gather_objects(unlogged, world)
    if rank == 0:
        states = {key: part.state_dict() for key, part in parts.items()}
        try:
            save_checkpoint(dict(format=1, **states, **configs, step=step, data=dict(epoch=epoch, segment=segment),
                                 mems=full_mems, rng=rngs, wall_time_s=wall_time_s, best=best,
                                 unlogged_nll=unlogged_nll), path)
        except WriteError as e:  # a full disk: say which checkpoint survives, and how to go on
            raise WriteError(f"{_write_failed(path, step, e)}. {_last_checkpoint(path)} Fix: free some disk space "
                             f"(or make {path.parent} writable), then run the same command with --resume",
                             e.errno, e.reason) from None


def _write_failed(path: Path, step: int, e: WriteError, what: Optional[str] = None) -> str:
    """'no space left on the disk holding OUT for the checkpoint of step N' (or another reason); ``what``:
    what of ``path`` was written (default: the checkpoint, or the file's name)."""
    what = (f"{path.name}: {what}" if what else "the checkpoint" if path.name == LAST else path.name)
    return (f"no space left on the disk holding {path.parent} for {what} of step {step}" if e.errno in NO_SPACE else
            f"{what} of step {step} could not be written in {path.parent} ({e.reason})")


def _unlogged(ckpt: dict, rank: int, world: int) -> list[float]:
    """This rank's training losses since the last log row, as the checkpoint saved them (each rank's);
    resumed by another number of processes, every rank takes the mean of the saved ranks' (the
    whole batch's), so that the row's mean over the ranks is still the whole batch's."""
    saved = ckpt.get("unlogged_nll") or [[]]  # a checkpoint from before they were kept: none
    if len(saved) == world:
        return list(saved[rank])
    return [sum(values) / len(values) for values in zip(*saved)]


def saved_step(path: Path) -> Optional[int]:
    """The step of the checkpoint at ``path``, or None if there is none (or it cannot be read)."""
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["step"])
    except Exception:  # noqa: BLE001 (only a message depends on it)
        return None


def _last_checkpoint(path: Path) -> str:
    """What a failed save left: the earlier checkpoint (its step) or none."""
    step = saved_step(path)
    if step is not None:
        return f"The last checkpoint (step {step}) is intact in {path}: --resume continues from it."
    if not path.exists():
        return f"No checkpoint was saved before this one: {path} does not exist yet."
    return f"{path} holds the previous checkpoint."


def _improves(valid_bpc: float, best: dict) -> bool:
    """True if ``valid_bpc`` (finite) is lower than the best so far (strictly: a tie keeps the earlier)."""
    return math.isfinite(valid_bpc) and (best["valid_bpc"] is None or valid_bpc < best["valid_bpc"])


def _save_best(path: Path, model: TransformerXL, configs: dict, step: int, valid_bpc: float,
               wall_time_s: float) -> None:
    """OUT/best.pt: the weights of a new best evaluation with the configs, step and valid bpc (what
    ``load`` and ``python -m txl_minimal.evaluate`` read), written atomically (rank 0 only)."""
    weights = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    save_checkpoint(dict(model=weights, **configs, step=step, valid_bpc=valid_bpc, wall_time_s=wall_time_s), path)

# ----------------------------------------------------------------------------- log.csv

def _log_rows(path: Path, step: int) -> list[dict]:
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
    CPU, a local disk). A row cut short by a kill is dropped on the next resume (``_log_rows``)."""

    def __init__(self, path: Path, resume: bool, step: int, write: bool = True):
        self.file, self.path = None, path
        if not write:
            return
        if resume and not path.exists() and step:
            warnings.warn(f"{path} is missing: the resumed run's log starts at step {step}", stacklevel=3)
        rows = _log_rows(path, step) if resume and path.exists() else []
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
            raise WriteError(f"{_write_failed(self.path, step, problem, 'its row')}. "
                             f"{_last_checkpoint(self.path.with_name(LAST))} Fix: free some disk space (or make "
                             f"{self.path.parent} writable), then run the same command with --resume",
                             problem.errno, problem.reason) from None

    def close(self) -> None:
        if self.file is not None:
            try:
                self.file.close()
            except OSError:  # a full disk: the row's write already said so
                pass
