"""Clear errors for bad inputs to ``model.py``, kept out of the paper's code.

``model.py`` calls these when it runs inside the package; copied alone, it runs the
same model without them. Each raises ``ValueError`` naming the problem and the fix
before torch fails deep inside (or, worse, computes something from a wrong input).
Like the model, this needs torch only: text is encoded in ``symbols.py``.
"""
from __future__ import annotations

import math
import numbers
import operator
from dataclasses import fields
from typing import Optional

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

