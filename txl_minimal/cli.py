"""What the package's command lines share (``python -m txl_minimal.train``, ``.evaluate``,
``.pretrained``, the scripts): argparse's ``int_at_least`` and ``Once``, ``terminal_progress``,
``stopped_by_ctrl_c`` (one line, not KeyboardInterrupt's traceback), and ``callable_module``, which lets
``from txl_minimal import train`` be called as the function."""
from __future__ import annotations

import argparse
import sys
import types
from collections.abc import Callable
from typing import NoReturn


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


def stopped_by_ctrl_c(e: KeyboardInterrupt, said: str) -> NoReturn:
    """Exit as a command stopped by Ctrl-C does, status 130 (a training stopped by SIGTERM or SIGHUP: 128 + its
    number, ``e.status``), with one line ``said`` (what was kept or written) on stderr, not
    KeyboardInterrupt's traceback."""
    try:
        if said:
            print(said, file=sys.stderr, flush=True)
    except OSError:  # the terminal has gone
        pass
    sys.exit(getattr(e, "status", 130))


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
