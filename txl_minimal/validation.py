"""Clear errors for bad inputs to ``model.py``, kept out of the paper's code, and the package's
argument checks, one per kind: ``count`` (a length or a count), ``index``, ``flag``, ``integer_ids``
(token ids), ``nonempty``, ``has_keys``, ``tensor_of``, ``fits`` (a size this machine can hold).

``model.py`` calls these when it runs inside the package; copied alone, it runs the
same model without them. Each raises ``ValueError`` naming the problem and the fix
before torch fails deep inside (or, worse, computes something from a wrong input); every
public function checks its arguments with them where it is called (tests/test_arguments.py).
Like the model, this needs torch only: text is encoded in ``symbols.py``.
"""
from __future__ import annotations

import math
import numbers
import operator
import os
from dataclasses import fields
from typing import Optional
from collections.abc import Sequence

import torch

ATTN_TYPES = ("rel", "abs", "abs_far", "shaw")  # "shaw" is registered by variants.py
INT_TYPES = (torch.long, torch.int, torch.int16, torch.int8, torch.uint8)  # what nn.Embedding reads (as long)
LENGTHS = ("tgt_len", "mem_len", "clamp_len", "same_length")  # what set_lengths may change on a built model


def as_int(value) -> Optional[int]:
    """``value`` as a Python int if it is an integer (an int, a NumPy integer such as np.int64(16),
    a 0-d integer tensor), else None; True and False are not integers here."""
    if isinstance(value, bool) or (isinstance(value, torch.Tensor) and value.dtype == torch.bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


# -- a public function's arguments, checked where it is called: counts, indices, flags, token ids -------

def a_kind(value) -> str:
    """What ``value`` is, in words: "a list", "an Axes", "the text 'abc'", "None"."""
    if value is None or isinstance(value, (str, bytes)):
        return "None" if value is None else f"the text {value[:30]!r}"
    name = type(value).__name__
    return f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"


def count(value, name: str, caller: str, low: int = 1, high: Optional[int] = None, why: str = "") -> int:
    """``value`` as a Python int if it is an integer (``as_int``: a NumPy integer is one; True, 2.0 and "3"
    are not) in [low, high], else a ValueError: "{caller}: {name} must be a positive integer{why}, got ...".
    ``why`` says, in brackets, what bounds it (e.g. " (the model has 4 layers)")."""
    n = as_int(value)
    if n is None or n < low or (high is not None and n > high):
        kind = f"an integer in {low}..{high}" if high is not None else \
            "a positive integer" if low == 1 else f"an integer >= {low}"
        raise ValueError(f"{caller}: {name} must be {kind}{why}, got {value!r}")
    return n


def counts(caller: str, low: int, **values) -> list[Optional[int]]:
    """``count`` of each value (None stays None: a default), in order, all at least ``low``."""
    return [None if value is None else count(value, name, caller, low) for name, value in values.items()]


def index(value, name: str, size: int, caller: str, of: str) -> int:
    """``value`` as an index into ``size`` things (0 .. size - 1; -1 is not the last one here), else a
    ValueError naming them (``of``: "the model's layers")."""
    return count(value, name, caller, 0, size - 1, f" ({size} {of}, numbered from 0)")


def flag(value, name: str, caller: str) -> bool:
    """``value`` as a bool if it is True or False (a NumPy bool too), else a ValueError: "no" and 1 are not."""
    if type(value).__name__ not in ("bool", "bool_"):
        raise ValueError(f"{caller}: {name} must be True or False, got {value!r}")
    return bool(value)


def nonempty(value, name: str, caller: str, fix: str):
    """``value`` if it is a non-empty dict, list, tuple or other sized collection, else a ValueError saying
    that there is nothing to work on, and ``fix``."""
    if value is None or isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) == 0:
        got = "empty" if hasattr(value, "__len__") and not isinstance(value, (str, bytes)) else f"{value!r}"
        raise ValueError(f"{caller}: {name} is {got}: nothing to work on. Fix: {fix}")
    return value


def has_keys(mapping, keys, name: str, caller: str, fix: str):
    """``mapping`` if it is a dict (any Mapping) holding every one of ``keys``, else a ValueError naming
    the first one missing (and those it has) and ``fix``: not a KeyError from inside."""
    if not hasattr(mapping, "keys") or not hasattr(mapping, "__getitem__"):
        raise ValueError(f"{caller}: {name} must be a dict, got {a_kind(mapping)}. Fix: {fix}")
    missing = [k for k in keys if k not in mapping]
    if missing:
        has = ", ".join(repr(k) for k in list(mapping)[:8]) or "nothing"
        raise ValueError(f"{caller}: {name} has no {missing[0]!r} (it has {has}). Fix: {fix}")
    return mapping


def tensor_of(x, name: str, caller: str, dims: tuple[int, ...], shape: str, fix: str = "") -> torch.Tensor:
    """``x`` (a tensor, NumPy array or nested list of numbers) as a tensor with one of ``dims`` axes and
    no empty axis, else a ValueError naming ``shape`` (e.g. "(..., qlen, klen)") and the shape given."""
    given = x
    if not isinstance(x, torch.Tensor):
        try:
            x = torch.as_tensor(x)
        except (TypeError, ValueError, RuntimeError):  # text, None, ragged rows
            x = None
    if x is None or x.dim() not in dims or 0 in x.shape or x.is_complex() or x.is_meta:
        got = a_kind(given) if x is None else f"shape {tuple(x.shape)} {x.dtype}"
        raise ValueError(f"{caller}: {name} must be numbers of shape {shape}, none of them empty; got {got}"
                         + (f". Fix: {fix}" if fix else ""))
    return x


def machine_memory() -> Optional[int]:
    """Bytes of this machine's RAM, or None where unknown (Windows has no sysconf)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def fits(n_bytes: int, what: str, caller: str, fix: str) -> None:
    """A ValueError when ``what`` would need more than all of this machine's memory: said before it is made
    (torch's allocator would fail naming a byte count, or the kernel kill the process)."""
    have = machine_memory()
    if have is not None and n_bytes > have:
        raise ValueError(f"{caller}: {what} would need {n_bytes / 1e9:,.1f} GB, more than this machine's "
                         f"{have / 1e9:,.1f} GB. Fix: {fix}")


ENCODE_FIX = "Fix: encode text with its corpus's encode (corpus.encode(text); text8's characters: encode(text))"


def _read_as(value) -> str:
    """How an id of ``value`` would be taken if it were truncated: " (0.7 would be read as 0)"."""
    shown = f"{value:.6g}" if isinstance(value, float) else repr(value)  # 0.7, not float32's 0.699999988
    try:
        return f" ({shown} would be read as {int(getattr(value, 'real', value))})"
    except (ValueError, OverflowError, TypeError):  # NaN, inf
        return f" ({shown} is no id at all)"


def integer_ids(x, what: str = "token ids", dims: Optional[int] = None):
    """``x`` if it holds integer token ids: a tensor or a NumPy array (a memmap too) as it is (not copied),
    a list or tuple as a tensor (``token_tensor``); else a ValueError saying what it holds and the fix: text,
    a set or a generator (``token_tensor``'s sentences), floats (0.7 would be read as 0), bools, strings,
    complex numbers, a meta tensor, or (``dims``) another number of axes. Empty ids pass (as int64)."""
    if isinstance(x, (list, tuple)) and x and isinstance(x[0], (str, bytes)):  # ['a', 'b']: characters, not ids
        raise ValueError(f"{what} must be integers, got strings ({x[0]!r}, ...): text must be encoded first. "
                         f"{ENCODE_FIX}")
    if isinstance(x, torch.Tensor) or not (hasattr(x, "__array__") and hasattr(x, "dtype")):
        x = token_tensor(x, what, rows=dims != 1)  # text, a set, a generator, ragged rows: refused there
        if x.is_meta:
            raise ValueError(f"{what} on the meta device hold no values (only a shape). Fix: make them on the CPU")
        if x.numel() == 0:  # [] is a float tensor to torch
            x = x.long()
        wrong = x.is_floating_point() or x.is_complex() or x.dtype == torch.bool
        strings, values = False, x.flatten()
    else:  # NumPy: its dtype read, nothing copied (a corpus split may be a large memmap)
        wrong = x.size > 0 and x.dtype.kind not in "iu"
        strings, values = x.dtype.kind in "USO", x.ravel()
    if wrong:
        got = "strings or objects: text must be encoded first" if strings else f"{x.dtype}{_read_as(values[0].item())}"
        raise ValueError(f"{what} must be integers, got {got}. {ENCODE_FIX}")
    if dims is not None and len(x.shape) != dims:
        fix = "ids.flatten() (or one row, ids[0])" if dims == 1 else "one stream as one row, ids[None]"
        raise ValueError(f"{what} must be {dims}-D, got shape {tuple(x.shape)}. Fix: {fix}")
    return x


def check_config(cfg) -> None:
    """A ``TXLConfig`` whose fields all make sense, else the first impossible field. NumPy integers
    become Python ints, tuples lists (a checkpoint saves the config, and loads only plain types back):
    set in place (``object.__setattr__``: the config is frozen once made)."""
    setattr = object.__setattr__  # (the dataclass is frozen: its own __setattr__ refuses)
    for f in fields(cfg):  # types first: True is an int to Python, and "no" is truthy
        value, low = getattr(cfg, f.name), 0 if f.name in ("mem_len", "clamp_len") else 1
        if f.type in ("int", "Optional[int]") and type(value) is not int and as_int(value) is not None:
            value = as_int(value)
            setattr(cfg, f.name, value)
        if f.type == "int" and (type(value) is not int or value < low):
            raise ValueError(f"TXLConfig.{f.name} must be an integer >= {low}, got {value!r}")
        if f.type == "bool" and not isinstance(value, bool):
            raise ValueError(f"TXLConfig.{f.name} must be True or False, got {value!r}")
        if f.type == "float" and type(value) not in (bool, int, float) and isinstance(value, numbers.Real):
            value = float(value)  # np.float32(0.1), as TrainConfig takes it: a plain float, which a checkpoint saves
            setattr(cfg, f.name, value)
        if f.type == "float" and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0 <= value <= 1):
            raise ValueError(f"TXLConfig.{f.name} must be a number in [0, 1], got {value!r}")
    if cfg.d_model % 2:  # R has d_model / 2 sines and as many cosines
        raise ValueError(f"TXLConfig.d_model must be even (sinusoid pairs), got {cfg.d_model}")
    if max(cfg.dropout, cfg.dropatt) >= 1:
        raise ValueError(f"TXLConfig.dropout and dropatt must be below 1, got {cfg.dropout}, {cfg.dropatt}")
    if cfg.attn_type not in ATTN_TYPES:
        raise ValueError(f"TXLConfig.attn_type must be one of {ATTN_TYPES}, got {cfg.attn_type!r}")
    if cfg.adaptive_span and cfg.attn_type != "rel":
        raise ValueError("TXLConfig.adaptive_span needs attn_type='rel'")
    check_clusters(cfg)
    setattr(cfg, "cutoffs", list(cfg.cutoffs))  # a tuple would not compare equal to a saved list
    setattr(cfg, "tie_projs", None if cfg.tie_projs is None else list(cfg.tie_projs))


def check_clusters(cfg) -> None:
    """The word-level fields (adaptive.py): cutoffs that cut the vocabulary into non-empty
    clusters, widths d_embed // div_val**i of at least 1, one tie_projs entry per cluster."""
    cutoffs, V = cfg.cutoffs, cfg.vocab_size
    if isinstance(cutoffs, (list, tuple)) and all(as_int(c) is not None for c in cutoffs):
        cutoffs = [as_int(c) for c in cutoffs]  # NumPy integers as ints
        object.__setattr__(cfg, "cutoffs", cutoffs)
    if not isinstance(cutoffs, (list, tuple)) or not all(type(c) is int for c in cutoffs):
        raise ValueError(f"TXLConfig.cutoffs must be a list of integers (e.g. [20000, 40000, 200000]; "
                         f"[]: one plain softmax), got {cutoffs!r}")
    ends = [0, *cutoffs, V]
    for i, (lo, hi) in enumerate(zip(ends[:-1], ends[1:])):
        if hi <= lo:  # also unsorted cutoffs, and one at or beyond the vocabulary
            what = "the head" if i == 0 else f"tail cluster {i}"
            raise ValueError(f"TXLConfig.cutoffs {list(cutoffs)} leave {what} [{lo}, {hi}) empty: cutoffs must "
                             f"increase strictly from above 0 to below vocab_size={V}. Fix: sorted, distinct "
                             f"values in 1..{V - 1}")
    if cfg.d_embed is not None and (type(cfg.d_embed) is not int or cfg.d_embed < 1):
        raise ValueError(f"TXLConfig.d_embed must be an integer >= 1 or None (= d_model), got {cfg.d_embed!r}")
    if cfg.div_val > 1 and not cutoffs:
        raise ValueError(f"TXLConfig.div_val={cfg.div_val} needs cutoffs: it narrows the tail clusters' vectors")
    d_embed = cfg.d_embed or cfg.d_model
    if d_embed // cfg.div_val ** len(cutoffs) < 1:
        raise ValueError(f"TXLConfig: the last cluster's width d_embed // div_val**{len(cutoffs)} = "
                         f"{d_embed} // {cfg.div_val ** len(cutoffs)} is 0. Fix: a smaller div_val or a larger d_embed")
    tie = cfg.tie_projs
    if tie is not None and (not isinstance(tie, (list, tuple)) or len(tie) != len(cutoffs) + 1
                            or not all(isinstance(t, bool) for t in tie)):
        raise ValueError(f"TXLConfig.tie_projs must be None or {len(cutoffs) + 1} bools, one per cluster (the head "
                         f"and {len(cutoffs)} tail clusters of cutoffs {list(cutoffs)}), got {tie!r}")


def token_tensor(x, what: str = "tokens", device: Optional[torch.device] = None, rows: bool = True) -> torch.Tensor:
    """``x`` as a tensor of token ids: a tensor as it is; a list, tuple or NumPy array (of integers,
    checked by the caller) as a tensor on ``device``; anything else a ``ValueError`` saying what it is
    and what to pass instead (a set has no order, a generator is used up by reading it, text needs
    encoding: with ``rows``, as one row of a batch)."""
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (str, bytes)):
        raise ValueError(f"{what} must be token ids, not text (got {x[:30]!r}). Fix: encode it, "
                         "txl_minimal.encode(text)" + (" (one sequence as one row: encode(text)[None])" * rows))
    if isinstance(x, Sequence) and not isinstance(x, (list, tuple)):  # range(27), a deque, an array.array: in order
        x = list(x)
    if isinstance(x, (set, frozenset, dict)) or not isinstance(x, (list, tuple)) and not hasattr(x, "__array__"):
        kind = type(x).__name__
        why = {"set": "a set has no order", "frozenset": "a set has no order", "dict": "a dict is not a sequence"}
        raise ValueError(f"{what} must be token ids in a tensor, a list or a NumPy array, got a {kind} "
                         f"({why.get(kind, 'not a sequence of ids')}). Fix: torch.tensor(ids)"
                         + (", with the ids in text order" if kind in why else ", e.g. torch.tensor(list(ids))"))
    try:
        return torch.as_tensor(x, device=device)
    except (TypeError, ValueError, RuntimeError):  # ragged rows, strings or objects inside
        raise ValueError(f"{what} must be integer token ids with rows of one length; the {type(x).__name__} "
                         "given holds something else (text, objects, rows of different lengths). Fix: "
                         "torch.tensor(ids), ids a list of lists of ints") from None


def _check_ids_tensor(what: str, t: torch.Tensor, device: torch.device, shape: str = "(batch, seq)") -> None:
    """ValueError unless ``t`` holds integer ids, on ``device``, with as many axes as ``shape`` names."""
    if t.dim() != shape.count(",") + 1 or t.dtype not in INT_TYPES:  # float ids would be truncated
        raise ValueError(f"{what} must be an integer tensor of shape {shape}; got {tuple(t.shape)} {t.dtype}"
                         + (". Fix: .long()" if t.dim() == shape.count(",") + 1 and not t.is_floating_point()
                            and t.dtype != torch.bool else ""))
    if t.is_meta:
        raise ValueError(f"{what} are on the meta device, which holds shapes but no values. Fix: make them on "
                         f"{device}")
    if t.device != device:  # torch would fail inside the embedding, naming neither
        raise ValueError(f"{what} are on {t.device}, the model on {device}. Fix: {what}.to({str(device)!r})")


def check_inputs(model, tokens, mems, targets, ids: bool = True) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """``TransformerXL.forward``'s inputs: integer ids in the vocabulary, on the model's device (a list,
    tuple or NumPy array of ids becomes a tensor there: the (tokens, targets) returned), and a memory
    that this model made for this batch size (its device, and its parameters' dtype: the model
    keeps memories in that dtype also under autocast). ``ids=False`` leaves out
    the ids' range, the one check that reads values: on a GPU it waits for the queued work
    (a host sync), so a loop whose ids were checked once (``read_segments``, training) skips it."""
    cfg, p = model.cfg, next(model.parameters())
    tokens = token_tensor(tokens, "tokens", p.device)
    targets = None if targets is None else token_tensor(targets, "targets", p.device)
    for what, t in (("tokens", tokens), ("targets", targets)):
        if t is not None:
            _check_ids_tensor(what, t, p.device)
    if tokens.numel() == 0:
        raise ValueError(f"tokens must hold at least one token per row; got shape {tuple(tokens.shape)}")
    if targets is not None and targets.shape != tokens.shape:
        raise ValueError(f"targets shape {tuple(targets.shape)} != tokens shape {tuple(tokens.shape)}")
    for what, values in (("token", tokens), ("target", targets)) if ids else ():
        check_ids(values, cfg.vocab_size, what)
    if isinstance(mems, torch.Tensor):  # `if mems` would ask torch for the truth value of a tensor
        raise ValueError(f"mems must be the list out.mems (one tensor per layer), got one tensor of shape "
                         f"{tuple(mems.shape)}. Fix: pass out.mems itself, not torch.stack(out.mems)")
    if mems:  # the memory of another model, batch, dtype or device would fail inside torch
        B, d = tokens.size(0), cfg.d_model
        fits = [isinstance(m, torch.Tensor) and m.dim() == 3
                and (m.size(0), m.size(2), m.dtype, m.device) == (B, d, p.dtype, p.device) for m in mems]
        if len(mems) != cfg.n_layer or not all(fits):
            i = fits.index(False) if False in fits else 0
            m = mems[i]
            got = f"{tuple(m.shape)} {m.dtype} on {m.device}" if isinstance(m, torch.Tensor) else repr(m)
            raise ValueError(f"mems must be a previous out.mems: n_layer={cfg.n_layer} tensors (batch={B}, "
                             f"mlen, d_model={d}) {p.dtype} on {p.device}; got {len(mems)}, mems[{i}] "
                             f"{got}. Fix: pass None (an empty memory), e.g. when the batch size changes")
    return tokens, targets


def check_ids(ids, vocab_size: int, what: str = "token") -> None:
    """ValueError unless every id of ``ids`` (a tensor or None) lies in [0, vocab_size)."""
    if ids is None or ids.numel() == 0:
        return
    low, high = torch.stack(torch.aminmax(ids)).tolist()  # one read back from the device
    if low < 0 or high >= vocab_size:
        raise ValueError(f"{what} ids must be in [0, {vocab_size - 1}] (vocab_size); got min "
                         f"{low}, max {high}. Fix: ids of the model's own corpus (corpus.encode(text); text8's 27 "
                         "characters: txl_minimal.encode)")


def check_generate(prompt, n_new, temperature, top_k) -> tuple[torch.Tensor, int, float, Optional[int]]:
    """``TransformerXL.generate``'s arguments: (the prompt's ids as a (T,) or (B, T) tensor, n_new,
    temperature, top_k) as plain numbers, or a ``ValueError`` naming the bad one and the fix."""
    count = as_int(n_new)
    if count is None or count < 0:
        raise ValueError(f"n_new must be an integer >= 0 (how many tokens to add), got {n_new!r}")
    k = None if top_k is None else as_int(top_k)
    if top_k is not None and (k is None or k < 1):
        raise ValueError(f"top_k must be a positive integer or None (no limit), got {top_k!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) and not (
            isinstance(temperature, torch.Tensor) and temperature.numel() == 1):  # np.float32(0.8) is fine
        raise ValueError(f"temperature must be a number >= 0 (0 = greedy, 1 = the model's own "
                         f"distribution), got {temperature!r}")
    t = float(temperature)
    if not (math.isfinite(t) and t >= 0):  # NaN or inf would reach torch.multinomial as NaN
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy, 1 = the model's own "
                         f"distribution), got {temperature!r}")
    ids = token_tensor(prompt, "prompt")
    if ids.numel() == 0:  # (an empty list is a float tensor to torch: say what it is)
        raise ValueError(f"prompt is empty (shape {tuple(ids.shape)}): the model continues a text, so it needs "
                         "at least one token id to start from. Fix: e.g. model.generate(torch.tensor([0]), "
                         "n_new), 0 being the id of a space for characters")
    if ids.is_floating_point() or ids.dtype == torch.bool or ids.is_complex():  # a float id would be truncated
        raise ValueError(f"prompt must hold at least one integer token id, got {ids.dtype} {tuple(ids.shape)}")
    if ids.is_meta:
        raise ValueError("prompt is on the meta device, which holds shapes but no values. Fix: make it on the CPU")
    if ids.dim() not in (1, 2):
        raise ValueError(f"prompt must be token ids of shape (T,) or (batch, T), got shape {tuple(ids.shape)}. "
                         "Fix: " + ("one id as a list, torch.tensor([id])" if ids.dim() == 0 else
                                    "one row per sequence, e.g. ids.view(-1, ids.size(-1))"))
    fits(8 * ids[..., :1].numel() * (ids.size(-1) + count), f"{count:,} new ids (int64) after the prompt",
         "generate", "a smaller n_new")
    return ids, count, t, k


# -- lengths: what each one changes, and a built model's config ---------------------------------------

def ignored_lengths(cfg, mem_len: Optional[int] = None, clamp_len: Optional[int] = None,
                    same_length: Optional[bool] = None) -> dict[str, str]:
    """{name: why} for ``clamp_len`` and ``same_length`` where they are on (clamp_len > 0, same_length True)
    but change nothing for ``cfg``'s model at these lengths (None: the config's own). clamp_len caps the
    distances of Transformer-XL's sinusoids R, which only attn_type "rel" reads (adaptive span included);
    same_length hides keys mem_len or more back, so at mem_len 0 it hides none the causal mask does not."""
    mem = cfg.mem_len if mem_len is None else mem_len
    clamp = cfg.clamp_len if clamp_len is None else clamp_len
    same = cfg.same_length if same_length is None else same_length
    why = {}
    if clamp and cfg.attn_type != "rel":
        why["clamp_len"] = (f"on attn_type {cfg.attn_type!r}: " + (
            f"its table clips distances at shaw_max_dist={cfg.shaw_max_dist}, set when the model is built"
            if cfg.attn_type == "shaw" else "absolute positions leave no relative distances to clamp"))
    if same and mem == 0:
        why["same_length"] = ("at mem_len 0: it limits every query to its last mem_len keys of memory, and "
                              "without memory the causal mask alone decides")
    return why


def check_lengths_matter(cfg, prefix: str = "", mem_len: Optional[int] = None, clamp_len: Optional[int] = None,
                         same_length: Optional[bool] = None) -> None:
    """ValueError for a ``clamp_len`` or ``same_length`` given (not None) that ``ignored_lengths`` says
    changes nothing for ``cfg``'s model at ``mem_len`` (None: the config's): a setting printed beside a
    score must be one that made it. ``prefix`` names where it was set, e.g. "TrainConfig.eval_"."""
    why = ignored_lengths(cfg, mem_len, clamp_len, same_length)
    for name, value, off in (("clamp_len", clamp_len, 0), ("same_length", same_length, False)):
        if value is not None and name in why:
            raise ValueError(f"{prefix}{name}={value!r} has no effect {why[name]}. Fix: leave it out "
                             f"({prefix}{name}={off})")


def check_training_lengths(model_cfg, train_cfg) -> None:
    """A run's clamp_len and same_length, its own and its evaluations' (``TrainConfig.eval_*``), where
    they change nothing: refused before the first step, not at the first evaluation."""
    check_lengths_matter(model_cfg, "TXLConfig.", None, model_cfg.clamp_len, model_cfg.same_length)
    check_lengths_matter(model_cfg, "TrainConfig.eval_", train_cfg.eval_mem_len, train_cfg.eval_clamp_len,
                         train_cfg.eval_same_length)


def check_new_config(old, new) -> None:
    """``model.cfg = new`` on a model built from ``old``: ``new`` must be a ``TXLConfig`` with the same sizes (the
    layers were built from them), and a clamp_len or same_length it changes must change something
    (``check_lengths_matter``); else a ValueError naming the field and the fix."""
    if type(new) is not type(old):
        raise ValueError(f"model.cfg must be a TXLConfig, got {type(new).__name__}. Fix: model.set_lengths(...) for "
                         "its lengths, or build another model, TransformerXL(TXLConfig(...))")
    for f in fields(old):
        if f.name not in LENGTHS and getattr(new, f.name) != getattr(old, f.name):
            raise ValueError(f"model.cfg.{f.name} is fixed once the model is built: its layers were made with "
                             f"{f.name}={getattr(old, f.name)!r}, not {getattr(new, f.name)!r}. Fix: build another "
                             f"model, TransformerXL(dataclasses.replace(model.cfg, {f.name}=...)); lengths change "
                             "with model.set_lengths(tgt_len=..., mem_len=..., clamp_len=..., same_length=...)")
    changed = {k: getattr(new, k) for k in ("clamp_len", "same_length") if getattr(new, k) != getattr(old, k)}
    check_lengths_matter(new, **changed)



# -- the model's building blocks (model.py), called alone: their arguments said in a sentence --------------
# (not while torch.compile traces a segment: the same call ran eagerly, checked, before it was compiled)

def check_mask_lengths(qlen, mlen, same_length, mem_len) -> None:
    """``attention_mask``'s arguments: qlen >= 1 queries, mlen >= 0 memory keys, mem_len >= 0, a bool."""
    if torch.compiler.is_compiling():
        return
    qlen, mlen = count(qlen, "qlen", "attention_mask"), count(mlen, "mlen", "attention_mask", 0)
    count(mem_len, "mem_len", "attention_mask", 0)
    flag(same_length, "same_length", "attention_mask")
    fits(2 * qlen * (mlen + qlen), f"a ({qlen:,}, {mlen + qlen:,}) mask", "attention_mask", "a smaller qlen or mlen")


def check_memory_inputs(hids, mems, mem_len) -> None:
    """``update_memory``'s arguments: a list of (B, T, d) tensors, one per layer, the memory None or as many
    (B, M, d) tensors, and mem_len >= 0."""
    if torch.compiler.is_compiling():
        return
    count(mem_len, "mem_len", "update_memory", 0)
    for name, tensors in (("hids", hids), ("mems", mems)):
        if tensors is None and name == "mems":
            continue
        if not isinstance(tensors, (list, tuple)) or not tensors or not all(
                isinstance(t, torch.Tensor) and t.dim() == 3 for t in tensors):
            raise ValueError(f"update_memory: {name} must be a list of (batch, length, d_model) tensors, one per "
                             f"layer, got {a_kind(tensors)}" + (" (one tensor: wrap it, [h])"
                                                                       if isinstance(tensors, torch.Tensor) else ""))
    if mems is not None and (len(mems) != len(hids) or any(
            (m.size(0), m.size(2)) != (h.size(0), h.size(2)) for m, h in zip(mems, hids))):
        raise ValueError(f"update_memory: mems must match hids, one (batch, M, d_model) tensor per layer; got "
                         f"{len(mems)} for {len(hids)}, shapes {tuple(mems[0].shape)} and {tuple(hids[0].shape)}. "
                         "Fix: None (no memory yet), or the list it returned last")


def check_table_inputs(pos_seq, inv_freq) -> None:
    """``sinusoid_table``'s arguments: two 1-D tensors (positions, frequencies)."""
    if torch.compiler.is_compiling():
        return
    for name, t in (("pos_seq", pos_seq), ("inv_freq", inv_freq)):
        if not isinstance(t, torch.Tensor) or t.dim() != 1:
            got = f"shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else a_kind(t)
            raise ValueError(f"sinusoid_table: {name} must be a 1-D tensor, got {got}. Fix: e.g. "
                             "torch.arange(5.0) for the positions 0..4")


def check_shift_input(x, caller: str = "rel_shift", dims: tuple[int, ...] = (2, 3, 4, 5, 6)) -> None:
    """``rel_shift``'s argument (or ``caller``'s): a tensor (..., qlen, klen) of ``dims`` axes with klen >= qlen
    >= 1 (the queries are the last keys)."""
    if torch.compiler.is_compiling():
        return
    if not isinstance(x, torch.Tensor) or x.dim() not in dims or x.size(-2) < 1 or x.size(-1) < x.size(-2):
        got = f"shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else a_kind(x)
        shape = "(qlen, klen)" if dims == (2,) else "(..., qlen, klen)"
        raise ValueError(f"{caller}: x must be a tensor of scores {shape} with klen = mlen + qlen >= qlen >= 1, "
                         f"got {got}. Fix: torch.tensor(scores), one row per query")


def check_config_type(cfg, caller: str) -> None:
    """A ``TXLConfig`` given where a module is built from one (a dict or a preset's name would fail inside)."""
    if type(cfg).__name__ != "TXLConfig":
        raise ValueError(f"{caller} is built from a TXLConfig, got {a_kind(cfg)}. Fix: {caller}(TXLConfig("
                         "...))" + (", e.g. TXLConfig(**d)" if isinstance(cfg, dict) else ""))
