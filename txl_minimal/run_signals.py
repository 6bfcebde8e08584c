"""Ctrl-C, SIGTERM and SIGHUP during a training: the first finishes the step in progress, which the
loop then saves and stops at (``Stop``, ``TrainingInterrupted``: every rank at the same step); a
second stops at once (``TrainingStoppedAtOnce``). ``resume_command`` is the command line that goes
on; ``say`` writes a line even where the terminal has gone."""
from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

from txl_minimal.devices import distributed
from txl_minimal.run_checkpoints import replaced_note, saved_step

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
                else f"no checkpoint was saved before it ({path} does not exist){replaced_note(path.parent, '; ')}")
        super().__init__(f"training stopped at once by a second {STOP_SIGNALS.get(signum, signum)}: no checkpoint "
                         f"of the step in progress was written; {kept}.")
        self.path, self.status = path, 128 + int(signum)


class Stop:
    """Set by the first stop signal (Ctrl-C, SIGTERM, SIGHUP: ``signum``) while ``train`` runs: the loop
    saves after the current step."""

    requested = False
    signum: Optional[int] = None


class _StopAtOnce(KeyboardInterrupt):
    """A second stop signal, raised where the training is (``stop_signals_caught`` says what it left)."""

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


@contextlib.contextmanager
def stop_signals_caught(rank: int, last: Path) -> Iterator[None]:
    """Within it, the first of STOP_SIGNALS asks the loop to save the step in progress and stop
    (``Stop``), and a second stops at once: ``TrainingStoppedAtOnce``, naming ``last`` (OUT/ckpt.pt),
    which still holds the last checkpoint. The handlers it replaced are put back after."""
    previous = _catch_stop_signals(rank)
    Stop.requested, Stop.signum = False, None
    try:
        yield
    except _StopAtOnce as e:
        raise TrainingStoppedAtOnce(last, e.signum) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        Stop.requested, Stop.signum = False, None


def resume_command(argv: list[str]) -> str:
    """The command line that continues an interrupted one (under torchrun, with its launcher's options:
    as many processes, --standalone, the rendezvous)."""
    args = [a for a in argv if a not in ("--overwrite", "--resume")]
    world = distributed()[1]
    launch = ["torchrun", *launcher_options(_parent_argv(), world)] if "RANK" in os.environ else \
        [sys.executable.rsplit("/", 1)[-1]]
    return shlex.join([*launch, "-m", "txl_minimal.train", *args, "--resume"])


def _parent_argv() -> list[str]:
    """The command line of this process's parent (under torchrun: the launcher), or [] where it cannot be read
    (only Linux has /proc)."""
    try:
        return Path(f"/proc/{os.getppid()}/cmdline").read_bytes().decode().split("\0")[:-1]
    except (OSError, UnicodeDecodeError):
        return []


def launcher_options(launcher_argv: list[str], world: int) -> list[str]:
    """torchrun's own options in its command line ``launcher_argv`` (``torchrun OPTIONS -m txl_minimal.train
    ...`` or ``python -m torch.distributed.run OPTIONS ...``): --standalone, --nproc_per_node, --nnodes, the
    rendezvous; where that line is not a launcher's of this training, ``--nproc_per_node world`` alone."""
    train = ("txl_minimal.train", os.path.join("txl_minimal", "train.py"))
    start = next((i + 1 for i, a in enumerate(launcher_argv)
                  if a == "torch.distributed.run" or Path(a).name == "torchrun"), None)
    end = None if start is None else next((i for i in range(start, len(launcher_argv))
                                           if launcher_argv[i].endswith(train)), None)
    if end is None:
        return ["--nproc_per_node", str(world)]
    return [a for a in launcher_argv[start:end] if a not in ("-m", "--module")]  # (the launch's own -m is added)
