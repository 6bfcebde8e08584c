"""What every checker shares: how an answer is compared, how a verdict is told, and how cases are drawn.

A checker calls ``_check`` (a function answer, tried on several cases) or ``_check_prediction`` (a
predicted number or list of numbers). Both say their verdict through ``_verdict``: in a notebook it
prints one line and returns True, False or None; in grading mode (``grading(raises=True)`` or a
checker's ``raises=True``) a wrong or missing answer raises ``AssertionError`` with that line, for
pytest and for autograders (nbgrader, Otter). ``@checker`` gives every checker its own random state:
the caller's torch, NumPy and Python generators are as they were when it returns.
"""
from __future__ import annotations

import functools
import inspect
import math
import random
from typing import Optional
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from txl_minimal.model import TransformerXL, TXLConfig
from txl_minimal.validation import a_kind

NOT_ATTEMPTED = "not attempted yet: write your answer in the cell above, then run this cell again"
Case = tuple  # (arguments, the right result, the setting in words[, the part compared: a function])
MODE = dict(raises=False, seed=0, tol=None)  # grading()'s settings; a checker's own keywords come first


class grading:
    """Set how the checkers report and which cases they draw: for a grader, or a course's hidden cases.

    ``with grading(raises=True):`` (or ``grading(raises=True)`` alone, from then on) makes every
    checker raise ``AssertionError`` with its message when an answer is wrong or not attempted
    (None), instead of printing it and returning False or None: pytest, nbgrader and Otter count
    that as a failed test. A right answer still prints its line and returns True. ``seed`` draws
    other random cases than the notebooks' (0: theirs), ``tol`` accepts computed float results
    that far from the right ones (absolute and relative; None: each checker's own; a prediction
    keeps its own tolerance). A checker's own ``raises``, ``seed`` and ``tol`` keywords win over
    these; ``grading(raises=False)`` is the notebooks' mode again.

    Returns:
        The setting, in force until the ``with`` block ends (or, used alone, until the next ``grading``).

    Examples:
        >>> from txl_minimal.tutorial import exercises, solutions
        >>> with exercises.grading(raises=True):
        ...     exercises.check_mask(solutions.mask)
        check_mask: right
        True
        >>> with exercises.grading(raises=True):
        ...     exercises.check_mask(lambda qlen, mlen, mem_len, same_length: None)
        Traceback (most recent call last):
        AssertionError: check_mask: not attempted yet: the answer is None or returns None
    """

    def __init__(self, raises: bool = True, seed: int = 0, tol: Optional[float] = None):
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"grading: seed must be an integer >= 0 (0: the notebooks' cases), got {seed!r}")
        if tol is not None and not tol >= 0:
            raise ValueError(f"grading: tol must be a number >= 0 (None: each checker's own), got {tol!r}")
        self.before = dict(MODE)
        MODE.update(raises=bool(raises), seed=seed, tol=tol)

    def __enter__(self) -> grading:
        return self

    def __exit__(self, *exc) -> None:
        MODE.update(self.before)


def _chosen(name: str, value):
    """A checker's own keyword (``raises``, ``seed``, ``tol``), or ``grading``'s if it gave None."""
    return MODE[name] if value is None else value


def case_seed(seed: Optional[int], k: int) -> int:
    """The seed of a checker's k-th random draw: k itself with seed 0 (the notebooks' cases), else another."""
    seed = _chosen("seed", seed)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0 (0: the notebooks' cases), got {seed!r}")
    return k if seed == 0 else seed * 1_000_003 + k


def seed_cpu(seed: int) -> None:
    """Seed torch's CPU generator alone (``torch.manual_seed`` also seeds, or queues seeding of, every GPU)."""
    torch.random.default_generator.manual_seed(seed)


def _same_kind(setting, example) -> bool:
    """Whether a chosen setting has the form of a default one: a tuple of as many entries, a dict, a number."""
    if isinstance(example, tuple):
        return isinstance(setting, (tuple, list)) and len(setting) == len(example)
    if isinstance(example, dict):
        return isinstance(setting, dict)
    return isinstance(setting, (int, float)) and not isinstance(setting, bool)


def check_settings(name: str, settings, default: Sequence) -> None:
    """A ValueError naming the checker and the form it wants, for ``settings`` that are not a non-empty
    sequence of settings of the default's form (a course's typo, not a student's answer)."""
    if isinstance(settings, (list, tuple)) and settings and all(_same_kind(s, default[0]) for s in settings):
        return
    raise ValueError(f"{name}: settings must be a non-empty list of settings like its default's, e.g. "
                     f"settings=[{default[0]!r}] (the default: {list(default)!r}); got {settings!r}")


def checker(fn: Callable) -> Callable:
    """A checker that leaves the caller's random state as it found it: torch's (CPU), NumPy's and Python's
    global generators are restored when it returns or raises, whatever its cases or the answer drew.
    Chosen ``settings`` are checked against the form of the default ones first."""
    default = inspect.signature(fn).parameters.get("settings")

    @functools.wraps(fn)
    def run(*args, **kwargs):
        if default is not None and kwargs.get("settings") is not None:
            check_settings(fn.__name__, kwargs["settings"], default.default)
        numpy_state, python_state = np.random.get_state(), random.getstate()
        try:
            with torch.random.fork_rng(devices=[]):
                return fn(*args, **kwargs)
        finally:
            np.random.set_state(numpy_state)
            random.setstate(python_state)
    return run


def _verdict(verdict: Optional[bool], message: str, raises: Optional[bool]) -> Optional[bool]:
    """Say a verdict: print ``message`` and return ``verdict``; in grading mode a wrong (False) or missing
    (None) answer raises ``AssertionError(message)`` instead."""
    if verdict is not True and _chosen("raises", raises):
        raise AssertionError(message)
    print(message)
    return verdict


def not_attempted(name: str, raises: Optional[bool], notebook: str = NOT_ATTEMPTED,
                  grader: str = "the answer is None or returns None") -> None:
    """The verdict on an untouched exercise: ``notebook``'s words in a notebook (the stored outputs
    show them), ``grader``'s after the checker's name where no cell is above (grading mode)."""
    if _chosen("raises", raises):
        return _verdict(None, f"{name}: not attempted yet: {grader}", True)
    return _verdict(None, notebook, False)


def _said(x, limit: int = 200) -> str:
    """``repr(x)`` for a message, cut at ``limit`` characters; an answer whose repr raises (or recurses without
    end) is named by its type: a message about an answer never raises."""
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 10 ** 30:
        return f"an integer of {int(abs(x).bit_length() * math.log10(2)) + 1} digits"  # (repr stops at 4,300)
    try:
        text = repr(x)
    except Exception as e:  # noqa: BLE001 (RecursionError too: a list nested 5,000 deep)
        return f"{a_kind(x)} (its repr raised {type(e).__name__})"
    return text if len(text) <= limit else text[:limit] + "..."


def _unreadable(e: BaseException) -> str:
    """Why an answer could not be read as numbers, in words (not OverflowError's "int too large to convert")."""
    if isinstance(e, OverflowError):
        return "a number too large to compare (it does not fit a float)"
    if isinstance(e, RecursionError):
        return "lists nested too deeply to read"
    try:
        text = str(e)
    except Exception:  # noqa: BLE001 (an exception whose str raises)
        text = ""
    return f"{type(e).__name__}: {text[:120]}" if text else type(e).__name__


class _NotNumbers(ValueError):
    """An answer that holds no numbers in order (text, a set, a generator, a tensor without values):
    its message is the sentence the checker prints."""


def _values(t: torch.Tensor) -> torch.Tensor:
    """A tensor answer detached (a gradient is no obstacle) and on the CPU; a meta one has no values."""
    if t.is_meta:
        raise _NotNumbers("a tensor on the meta device, which has a shape but no values: compute it on the CPU")
    return t.detach().cpu()


def _plain(x):
    """``x`` with every tensor in it as plain numbers (a gradient or a GPU is no obstacle), or
    ``_NotNumbers`` for what cannot stand for numbers in order."""
    if isinstance(x, torch.Tensor):
        return _values(x).tolist()
    if isinstance(x, (set, frozenset)):
        raise _NotNumbers(f"a {type(x).__name__}, which has no order (a list keeps one)")
    if isinstance(x, Iterator):  # a generator: used up once read, so it could not be compared twice
        raise _NotNumbers(f"a {type(x).__name__}, which is used up once read (list(...) keeps its values)")
    return [_plain(v) for v in x] if isinstance(x, (list, tuple)) else x


def _tensor(x) -> torch.Tensor:
    """A student's array-like answer as a tensor: a tensor (detached, on the CPU), a NumPy array, a
    list or a number; ``_NotNumbers`` saying what it is when it holds no numbers (text, a set, ...)."""
    if isinstance(x, torch.Tensor):
        return _values(x)
    if isinstance(x, (str, bytes)):
        raise _NotNumbers(f"the text {_said(x, 60)}, not numbers")
    if isinstance(x, complex) or getattr(getattr(x, "dtype", None), "kind", "") == "c":
        raise _NotNumbers("complex numbers: the answer is real")
    try:
        array = np.asarray(_plain(x))
    except _NotNumbers:
        raise
    except Exception as e:  # an object whose __array__, __len__ or __iter__ raises; lists 5,000 deep
        raise _NotNumbers(f"{a_kind(x)} that cannot be read as numbers ({_unreadable(e)})") from None
    if array.dtype.kind == "O" and array.size and all(isinstance(v, int) for v in array.ravel()):
        raise _NotNumbers(f"{_said(x, 60)}: a number too large to compare (it does not fit a float)")
    if array.dtype.kind in "OUSV":  # objects, text, raw bytes
        raise _NotNumbers(f"{a_kind(x)} holding {'text' if array.dtype.kind in 'US' else 'objects'}, not numbers")
    if array.dtype.kind == "c":
        raise _NotNumbers("complex numbers: the answer is real")
    try:
        return torch.as_tensor(array)
    except (TypeError, ValueError, RuntimeError, OverflowError):  # longdouble, datetime64
        raise _NotNumbers(f"{a_kind(x)} of {array.dtype} values, which torch cannot hold: write them as floats "
                          "(float(x), or a list of floats)") from None


def _close(got: torch.Tensor, want: torch.Tensor, tol: Optional[float]) -> torch.Tensor:
    """Where float tensors agree: to ``tol`` absolutely and relatively, or (None) to 1e-5 absolutely and relatively."""
    tol = _chosen("tol", tol)
    return torch.isclose(got, want, atol=1e-5 if tol is None else tol, rtol=1e-5 if tol is None else tol)


def _same(got, want, tol: Optional[float] = None) -> bool:
    """Equal values, whatever container a right answer comes in: integers exactly (5, 5.0, np.int64(5)
    or tensor(5)); floats to 1e-6 relative (a Python, NumPy or 0-d torch number); float tensors to
    1e-5 in any float dtype, as a tensor or a NumPy array (a float32 number to 1e-4 relative, a 16-bit one
    to 1e-2: their own precision); bool tensors exactly and as bool; a tuple
    as any sequence of the right length; a dict entry by entry. ``tol`` (or ``grading``'s) replaces
    the floats' tolerances, absolute and relative."""
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(_same(got[k], want[k], tol) for k in want)
    if isinstance(want, tuple):
        got = got.tolist() if isinstance(got, (torch.Tensor, np.ndarray)) else got
        return isinstance(got, (tuple, list)) and len(got) == len(want) and \
            all(_same(g, w, tol) for g, w in zip(got, want))
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        got = _tensor(got)
        if got.numel() != 1 or got.dtype == torch.bool:
            return False
        if isinstance(want, int):
            return float(got) == want
        tol = _chosen("tol", tol)
        if tol is None:  # a float32 (or 16-bit) answer is right to its own precision: its sums round sooner
            rel = {torch.float16: 1e-2, torch.bfloat16: 1e-2, torch.float32: 1e-4}.get(got.dtype, 1e-6)
            return math.isclose(float(got), want, rel_tol=rel, abs_tol=1e-12)
        return math.isclose(float(got), want, rel_tol=tol, abs_tol=tol)
    if isinstance(want, torch.Tensor):
        got = _tensor(got)
        if got.shape != want.shape or (got.dtype == torch.bool) != (want.dtype == torch.bool):
            return False
        if want.is_floating_point():
            return got.is_floating_point() and bool(_close(got.to(want.dtype), want, tol).all())
        return torch.equal(got.to(want.dtype), want) and (not got.is_floating_point() or torch.equal(got, got.round()))
    return got == want


def _difference(got, want, tol: Optional[float] = None) -> str:
    """What differs between a wrong answer and the right one, in a few words."""
    if isinstance(want, torch.Tensor):
        try:
            got = _tensor(got)
        except _NotNumbers as e:
            return f"got {e}"
        except (TypeError, ValueError, RuntimeError):
            return f"got a {type(got).__name__}, expected a tensor or an array"
        if got.shape != want.shape:
            return f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"
        if (got.dtype == torch.bool) != (want.dtype == torch.bool) or (want.is_floating_point()
                                                                         and not got.is_floating_point()):
            return f"dtype {got.dtype}, expected {want.dtype}"
        wrong = (got.to(want.dtype) != want) if not want.is_floating_point() else \
            ~_close(got.to(want.dtype), want, tol)
        first = tuple(int(k) for k in wrong.nonzero()[0])
        return (f"{int(wrong.sum())} of {want.numel()} values differ; the first at index {first}: "
                f"{got[first].item():.6g}, expected {want[first].item():.6g}")
    if isinstance(want, dict) and isinstance(got, dict) and got.keys() == want.keys():
        key = next(k for k in want if not _same(got[k], want[k], tol))  # the first entry that differs
        return f"entry {key!r}: {_number(got[key])}, expected {_number(want[key])}"
    if isinstance(want, (tuple, dict)):
        return f"{_said(got)}, expected {want!r}"
    return f"{_said(got)} ({type(got).__name__}), expected {want!r}"


def _number(x) -> str:
    """A number as a reader can compare it: 7 significant digits, and its dtype where it is not a Python one."""
    try:
        t = _tensor(x)
    except (_NotNumbers, TypeError, ValueError, RuntimeError):
        return repr(x)
    if t.numel() != 1:
        return repr(x)
    kind = "" if isinstance(x, (int, float)) else f" ({str(t.dtype).removeprefix('torch.')})"
    return f"{float(t):.7g}{kind}"


def _visible(seen: torch.Tensor) -> Callable:
    """The part of a (..., qlen, klen) score that a query may see (the rest is masked anyway),
    as a tensor of the same leading shape with the query and key axes zeroed where hidden."""
    def part(t):
        t = _tensor(t)
        if t.shape[-2:] != seen.shape:  # the wrong shape: compared whole, so the message says so
            return t
        return t.masked_fill(~seen, 0) if not t.dtype == torch.bool else t & seen
    part.note = " (entries a query cannot see are set to 0 in both)"
    return part


def _show(x) -> str:
    try:
        if isinstance(x, (torch.Tensor, np.ndarray)):
            t = _tensor(x)
            shown = t.int() if t.dtype == torch.bool else t
            return f"{type(x).__name__} of shape {tuple(t.shape)}, {t.dtype}:\n{shown}\n"
    except Exception:  # noqa: BLE001 (an array torch cannot hold: strings, objects; a tensor on meta)
        return f"{type(x).__name__} of shape {getattr(x, 'shape', '?')}, dtype {getattr(x, 'dtype', '?')}"
    return _said(x)


def _check(name: str, answer, cases: Iterable[Case], view: Optional[Callable] = None,
           tol: Optional[float] = None, raises: Optional[bool] = None) -> Optional[bool]:
    """Run ``answer`` on every case; ``view`` (or a case's own) picks the part of a result compared.
    A prediction checker passes one case without arguments: its ``answer`` is then the predicted
    value itself (or a function of no arguments that returns it)."""
    cases = list(cases)
    if answer is not None and not callable(answer) and any(args for args, *_ in cases):
        # check_mask(mask(4, 3, 3, False)): a result, where the checker calls a function on its cases
        return _verdict(False, f"{name}: not yet: pass the function itself, {name}(your_function), not what it "
                               f"returns (got a {type(answer).__name__})", raises)
    for args, want, where, *own in cases:
        part = own[0] if own else view or (lambda x: x)
        try:  # a function is called on the case; a prediction (a number, a list) is the answer itself
            got = None if answer is None else answer(*args) if callable(answer) else answer
        except Exception as e:  # a student's bug is a wrong answer, not a crash of the checker
            return _verdict(False, f"{name}: not yet: {where} raised {_unreadable(e)}", raises)
        if got is None:
            return not_attempted(name, raises)
        try:
            compared = part(got)
            right = _same(compared, part(want), tol)
            why = "" if right else _difference(compared, part(want), tol)
        except Exception as e:  # noqa: BLE001 (a result of the wrong kind, shape or type, cannot be viewed)
            compared, right, why = got, False, f"got {e}" if isinstance(e, _NotNumbers) else _unreadable(e)
        if not right:
            note = getattr(part, "note", "")
            return _verdict(False, f"{name}: not yet: {where}: {why}{note}.\n  expected {_show(part(want))}\n"
                                   f"  got {_show(compared)}", raises)
    return _verdict(True, f"{name}: right", raises)


def _check_prediction(name: str, got, want: float | list, rule: str, known: Iterable[tuple] = (),
                      tol: float = 0.3, raises: Optional[bool] = None) -> Optional[bool]:
    """A predicted number (or list of numbers) against the right one, within ``tol`` (a prediction's own:
    ``grading``'s is for computed results): "right" with the rule, or what differs, naming the misreading
    when ``got`` matches one of ``known`` ((value, what it would mean) pairs). ``got`` may be a function
    of no arguments that returns the prediction, as ``_check`` takes one."""
    if callable(got):
        try:
            got = got()
        except Exception as e:  # a student's bug is a wrong answer, not a crash of the checker
            return _verdict(False, f"{name}: not yet: your function raised {_unreadable(e)}", raises)
    if got is None or got is ...:
        return not_attempted(name, raises)
    kind = f"a list of {len(want)} numbers" if isinstance(want, list) else "a number"
    try:
        plain = _plain(got)
        if isinstance(plain, complex) or np.asarray(plain).dtype.kind == "c":  # (a float cast drops the imaginary)
            raise _NotNumbers("complex numbers: the answer is real")
        with np.errstate(over="ignore"):  # a longdouble beyond float64 is inf: said as a wrong value
            values = [float(v) for v in np.ravel(np.asarray(plain, dtype=float))]
    except _NotNumbers as e:
        return _verdict(False, f"{name}: not yet: write {kind}; got {e}", raises)
    except (TypeError, ValueError):
        return _verdict(False, f"{name}: not yet: write {kind}, got {_said(got)}", raises)
    except Exception as e:  # noqa: BLE001 (10**400, an object whose __float__ raises, lists 5,000 deep)
        return _verdict(False, f"{name}: not yet: write {kind}; got {_said(got, 60)}, {_unreadable(e)}", raises)
    wants = want if isinstance(want, list) else [want]
    if len(values) != len(wants):
        return _verdict(False, f"{name}: not yet: {len(values)} value(s), expected {len(wants)}", raises)
    if all(abs(v - w) <= tol for v, w in zip(values, wants)):
        return _verdict(True, f"{name}: right: {rule}", raises)
    for value, meaning in known:
        mine = value if isinstance(value, list) else [value]
        if len(mine) == len(values) and all(abs(v - m) <= tol for v, m in zip(values, mine)):
            return _verdict(False, f"{name}: not yet: {_shown_as_written(got)} is {meaning}. {rule}", raises)
    return _verdict(False, f"{name}: not yet: you wrote {_shown_as_written(got)}, the right value is {want}: {rule}",
                    raises)


def _shown_as_written(got) -> str:
    """A prediction as the student wrote it (``str``: 0.5, [1, 2]), or its type where that raises."""
    try:
        return str(got)
    except Exception:  # noqa: BLE001
        return _said(got)


def _tiny(seed: int = 0, **overrides) -> TransformerXL:
    """A one-layer model of 16 dimensions in eval mode, its weights drawn from ``seed`` (torch's CPU generator)."""
    seed_cpu(seed)
    cfg = dict(n_layer=1, n_head=2, d_model=16, d_head=8, d_inner=32, dropout=0.0, tgt_len=8, mem_len=8)
    return TransformerXL(TXLConfig(**{**cfg, **overrides})).eval()
