"""Checkpoints: atomic save with a checksum, safe load with a config check, the model one
describes, where the shipped models live, and the authors' parameter names (``official_state_dict``,
``load_official_state_dict``).
The RNG state that makes a resumed run bit-exact is machine.py's (``rng_state``; imported here too).

A training checkpoint (``train.py``: a run's ckpt.pt, its last state) holds ``format``, ``model``,
``optimizer``, ``scheduler``, ``scaler``, ``model_config``, ``train_config``, ``choice`` (the
precision and attention path amp="auto" chose, which a resume keeps), ``step``, ``data`` (epoch,
segment), ``mems``, ``rng`` (one state per rank, CPU tensors), ``wall_time_s``, ``best`` (the
step and valid bpc of best.pt, or None), ``vocab`` (what its ids mean) and ``corpus`` (the corpus's
record: a text file's path, SHA-256, unit, split, max_vocab, to read it again so; corpora.corpus_record);
a run's best.pt (its state of best valid bpc) holds the weights, the configs, ``vocab``, ``corpus``,
``step``, ``valid_bpc`` and ``wall_time_s``; a shipped one (``pretrained.py``) only the weights, the
configs, step and wall time; one written by ``save`` only the weights, the model config and what
the model knows of its vocabulary and corpus. Each also holds
``model_sha256``, the checksum of its weights (``weights_sha256``), and (format 2) ``state_sha256``,
the checksum of everything else in it (``state_sha256``): a resume uses the optimiser, schedule,
memory, RNG state and step counters too, so a flipped bit anywhere is refused. Shipped files are
also checked against pretrained/MANIFEST.json (size and SHA-256 of the file) before loading.

A path ending in ``.safetensors`` (the shipped models, or ``save(model, "mine.safetensors")``)
holds the same entries without pickle: the weights as tensors, every other entry as JSON text
in the file's metadata (safetensors_io.py); a training checkpoint, with its optimiser state,
stays a ``.pt``.
"""
from __future__ import annotations

import hashlib
import io
import json
import re
import warnings
from pathlib import Path
from typing import Optional

import torch

from txl_minimal.data import VOCAB, WORD_CORPORA
from txl_minimal import validation
from txl_minimal.machine import rng_state, set_rng_state  # noqa: F401 (moved to machine.py; imported from here too)
from txl_minimal.model import TransformerXL, TXLConfig
from txl_minimal.safetensors_io import file_format, load_file, to_bytes
from txl_minimal.utils import (atomic_write, check_device, check_shipped, non_finite, refuse_empty_path,
                               training_now)

PRETRAINED_DIR = Path(__file__).resolve().with_name("pretrained")  # the models shipped with the package
NAMES = ("txl", "vanilla", "txl-tiny", "vanilla-tiny")  # see pretrained.py
LAST, BEST = "ckpt.pt", "best.pt"  # in a run directory: the resumable last state; the best-validation one
CHECKSUM = "model_sha256"  # the entry holding weights_sha256(checkpoint["model"])
STATE_CHECKSUM = "state_sha256"  # the entry holding state_sha256(checkpoint): every other entry
FORMAT = 2  # 2: with STATE_CHECKSUM, which a format-2 file must hold
SAFETENSORS = ".safetensors"  # a checkpoint path with this suffix is written and read without pickle
DAMAGED_FIX = ("Fix: use an intact copy (a shipped model: git checkout txl_minimal/pretrained, or reinstall "
               "the package) or train it again; for a bare state_dict, save the model with "
               "txl_minimal.save(model, path).")


def unwrap(model: torch.nn.Module) -> TransformerXL:
    """The TransformerXL inside a DDP and/or torch.compile wrapper."""
    model = getattr(model, "module", model)
    return getattr(model, "_orig_mod", model)


def _transformer_xl(model, caller: str) -> TransformerXL:
    """``model`` (inside a DDP or torch.compile wrapper too) if it is a TransformerXL, else a ValueError
    naming what it is (not an AttributeError from inside)."""
    inner = unwrap(model)
    if not isinstance(inner, TransformerXL):
        raise ValueError(f"{caller}: model must be a TransformerXL, got {validation.a_kind(inner)}. Fix: the model "
                         "itself, e.g. load_pretrained('txl-tiny') or TransformerXL(TXLConfig(...))")
    return inner


def weights_sha256(state_dict: dict[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes, in name order, read on
    the CPU: the same for any device the weights were saved from or are loaded to."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _feed(h: hashlib._Hash, value) -> None:
    """Hash ``value`` in a canonical form: type-tagged, dict keys sorted, tensors by dtype, shape, bytes."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}:".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(value, dict):
        h.update(f"D{len(value)}:".encode())
        for key in sorted(value, key=repr):
            _feed(h, key)
            _feed(h, value[key])
    elif isinstance(value, (list, tuple)):  # torch.load may give a tuple back as a list
        h.update(f"L{len(value)}:".encode())
        for item in value:
            _feed(h, item)
    elif value is None or isinstance(value, (bool, int, float, str)):
        h.update(f"{type(value).__name__}:{value!r};".encode())  # repr: floats round-trip exactly
    else:
        raise TypeError(f"state_sha256 cannot hash a {type(value).__name__}")


def state_sha256(state: dict) -> str:
    """SHA-256 of a canonical serialization of every entry but the two checksums: the
    weights, optimiser, scheduler, scaler, memory, RNG states, step counters and configs."""
    h = hashlib.sha256()
    _feed(h, {k: v for k, v in state.items() if k not in (CHECKSUM, STATE_CHECKSUM)})
    return h.hexdigest()


def _with_checksums(state: dict) -> dict:
    """``state`` in the current format, with the checksums ``load_checkpoint`` verifies."""
    state = {**state, "format": FORMAT}
    if "model" in state:
        state[CHECKSUM] = weights_sha256(state["model"])
    state[STATE_CHECKSUM] = state_sha256(state)
    return state


def save_checkpoint(state: dict, path: str | Path) -> None:
    """Write a checkpoint: the dict ``state`` at ``path``, atomically, with checksums.

    A crash mid-write leaves the previous file intact. The checksums of its ``model`` weights and of
    everything in it are added, which ``load_checkpoint`` verifies: torch.save, or for a ``path``
    ending in .safetensors the weights as tensors and every other entry as JSON in the file's
    metadata (no pickle). A full disk is a ``utils.WriteError`` saying so. ``save(model, path)``
    is this for a model alone.

    Returns:
        None; the file is written.

    Examples:
        >>> model = load_pretrained("txl-tiny")
        >>> save_checkpoint({"model": model.state_dict(), "model_config": model.cfg.to_dict(), "step": 7}, "ckpt.pt")
        >>> sorted(load_checkpoint("ckpt.pt"))                 # the format and the two checksums added
        ['format', 'model', 'model_config', 'model_sha256', 'state_sha256', 'step']
    """
    refuse_empty_path(path, "the checkpoint's path")
    validation.has_keys(state, (), "state", "save_checkpoint", "a dict, e.g. {'model': model.state_dict(), "
                        "'model_config': model.cfg.to_dict()}")
    state = _with_checksums(state)
    if Path(path).suffix == SAFETENSORS:
        raw = _safetensors_bytes(state, path)
        atomic_write(path, lambda f: f.write(raw))
    else:
        atomic_write(path, lambda f: torch.save(state, f))


def _safetensors_bytes(state: dict, path: str | Path) -> bytes:
    """``state["model"]`` as safetensors tensors, every other entry as JSON text in its metadata."""
    if "model" not in state:
        raise ValueError(f"cannot save {path} as safetensors: no 'model' entry (the weights)")
    metadata = {}
    for key, value in state.items():
        if key == "model":
            continue
        try:
            metadata[key] = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ValueError(f"cannot save {path} as safetensors: its entry {key!r} is not plain JSON ({e}). "
                             "Fix: save a training checkpoint (optimiser, memory, RNG state) as a .pt "
                             "file; safetensors holds weights, configs and numbers.") from None
    return to_bytes(state["model"], metadata)


def _load_safetensors(path: str | Path, map_location: str | torch.device) -> dict:
    """What ``_safetensors_bytes`` wrote: its metadata's JSON values and the weights as "model"."""
    tensors, metadata = load_file(path, map_location)
    return {**{key: json.loads(text) for key, text in metadata.items()}, "model": tensors}


def checkpoint_bytes(state: dict, path: str | Path = "ckpt.pt") -> bytes:
    """What ``save_checkpoint(state, path)`` would write, as bytes (to write several files together)."""
    state = _with_checksums(state)
    if Path(path).suffix == SAFETENSORS:
        return _safetensors_bytes(state, path)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def save(model: torch.nn.Module, path: str | Path) -> None:
    """Save a model (one trained in your own loop, or by ``train``) to the file ``path``.

    Its config, weights (with their checksum) and vocabulary, where the model knows it (a model
    trained on your own text: its characters or words) and the record of its corpus (``model.corpus_record``:
    how a text file was read, so that evaluate reads it again so), in the format of every checkpoint here;
    a ``path`` ending in .safetensors is written without pickle, readable by other tools (the
    shipped models are). ``load(path)`` gives it back; ``python -m txl_minimal.evaluate PATH`` scores it on
    the text file it was trained on, where it knows it (``--corpus NAME_OR_FILE`` names one).

    Returns:
        None; the file is written atomically (a crash mid-write leaves no half file).

    Examples:
        >>> model = load_pretrained("txl-tiny")
        >>> save(model, "mine.safetensors")
        >>> load("mine.safetensors").cfg == model.cfg
        True
    """
    vocab = model_vocab(model)
    model = _transformer_xl(model, "save")
    corpus = getattr(model, "corpus_record", None)  # how its text file was read: evaluate reads it so again
    weights = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    save_checkpoint(dict(model=weights, model_config=model.cfg.to_dict(), **({} if vocab is None else
                                                                              dict(vocab=vocab)),
                         **({} if corpus is None else dict(corpus=corpus))), path)


def load(path: str | Path, device: str | torch.device = "cpu") -> TransformerXL:
    """Load a model: from a checkpoint file, a run's folder or a shipped model's name.

    ``path``: a file ``save`` wrote (or a run's ckpt.pt), a run directory (its best.pt, else its
    ckpt.pt) or a shipped name ("txl", "txl-tiny", ...). ``device``: where its weights go ("cpu",
    "cuda"). The checksums are verified: a damaged file is a ValueError, not a model.

    Returns:
        The ``TransformerXL``, in eval mode, knowing its unit and vocabulary where the file says
        (``generate_text`` uses them).

    Examples:
        >>> save(load_pretrained("txl-tiny"), "mine.pt")
        >>> model = load("mine.pt")
        >>> model.training, model.unit, model.num_params()
        (False, 'character', 860315)
        >>> load("no-such-run")
        Traceback (most recent call last):
        FileNotFoundError: no model at no-such-run: not a shipped model (txl, vanilla, txl-tiny, ...
    """
    path = checkpoint_file(path)
    ckpt = load_checkpoint(path, map_location=device)
    try:
        return model_from_checkpoint(ckpt, device)
    except ValueError as e:  # (the weights do not fit its config: name the file)
        raise ValueError(str(e).replace("the checkpoint's", f"checkpoint {path}'s", 1)) from None


class ConfigMismatch(ValueError):
    """A checkpoint's model config differs from the one asked for (``check_config``)."""


def check_config(saved: dict, cfg: TXLConfig, what: str = "checkpoint") -> None:
    """ConfigMismatch (a ValueError) naming every field where ``saved`` (a config dict) differs from ``cfg``."""
    ours = cfg.to_dict()
    defaults = TXLConfig().to_dict()  # a field added to TXLConfig since the save has its default
    diff = [f"{k} {saved.get(k, defaults.get(k))!r} there vs {ours.get(k)!r} here"
            for k in sorted(set(saved) | set(ours)) if saved.get(k, defaults.get(k)) != ours.get(k)]
    if diff:
        raise ConfigMismatch(f"{what} was made with a different model config: {'; '.join(diff)}. "
                             "Fix: use the same preset and overrides, or a fresh --out directory.")


def load_checkpoint(path: str | Path, model_cfg: Optional[TXLConfig] = None,
                    map_location: str | torch.device = "cpu") -> dict:
    """Read a checkpoint file safely (weights_only=True) and verify its checksums.

    ``path``: a file ``save_checkpoint``, ``save`` or a training run wrote. ``model_cfg``, if given,
    must be the config it was saved with (else a ValueError naming each field that differs).
    ``map_location``: where its tensors go. A damaged or incomplete file raises ``ValueError``.

    Returns:
        The dict that was saved, with its "format" and checksum entries: "model" (the weights),
        "model_config", and whatever else was saved (a run's: "optimizer", "step", ...).

    Examples:
        >>> model = load_pretrained("txl-tiny")
        >>> save_checkpoint({"model": model.state_dict(), "model_config": model.cfg.to_dict()}, "ckpt.pt")
        >>> load_checkpoint("ckpt.pt", model.cfg)["model_config"]["n_layer"]
        4
        >>> from pathlib import Path
        >>> _ = Path("cut.pt").write_bytes(Path("ckpt.pt").read_bytes()[:1000])    # a copy cut short
        >>> load_checkpoint("cut.pt")
        Traceback (most recent call last):
        ValueError: checkpoint cut.pt is corrupt or incomplete (1,000 bytes; torch.load: ...). Fix: use an intact ...
    """
    refuse_empty_path(path, "the checkpoint's path")
    if Path(path).is_dir():  # (open() would raise IsADirectoryError)
        raise ValueError(f"{path} is a folder, not a checkpoint. Fix: the file in it (a run's folder holds "
                         "ckpt.pt and best.pt; txl_minimal.load(folder) finds them)")
    if not Path(path).exists():
        raise FileNotFoundError(f"no checkpoint at {path}. Fix: check the path (--out, or the "
                                "checkpoint evaluated), or drop --resume to start afresh.")
    map_location = check_device(map_location, "device")  # not "corrupt" for a GPU this machine lacks
    _refuse_text(Path(path))
    check_shipped(path)  # a shipped model: its size and SHA-256 against pretrained/MANIFEST.json
    kind = file_format(path)  # what it holds, whatever its name says (a renamed file)
    safetensors = kind == "safetensors" or kind is None and Path(path).suffix == SAFETENSORS
    try:
        ckpt = _load_safetensors(path, map_location) if safetensors else _torch_load(path, map_location)
    except PermissionError:
        raise
    except Exception as e:  # damaged bytes fail anywhere in the unpickler (EOFError, UnpicklingError,
        # UnicodeDecodeError, IndexError, KeyError, ...); torch's words point at its internals
        _refuse_pickled_model(Path(path), e)
        problem = (f"{Path(path).stat().st_size:,} bytes; {'safetensors' if safetensors else 'torch.load'}: "
                   f"{type(e).__name__} {str(e).split('. ')[0]}".rstrip())
    else:
        problem = _damage(ckpt, path)
    if problem:  # from None: torch's message would advise weights_only=False, unsafe here
        raise ValueError(f"checkpoint {path} is corrupt or incomplete ({problem}). {DAMAGED_FIX}") from None
    if model_cfg is not None:
        check_config(ckpt["model_config"], model_cfg, f"checkpoint {path}")
    return ckpt


def _torch_load(path: str | Path, map_location: str | torch.device) -> dict:
    """torch.load of a file object (weights_only): given a path whose name ends in .safetensors, torch
    would refuse a torch.save file renamed so."""
    with open(path, "rb") as f:
        return torch.load(f, map_location=map_location, weights_only=True)


LOG_HEADER = b"step,tokens,wall_time_s,"  # how a run's log.csv begins (run_folder.CSV_COLUMNS)


def _refuse_pickled_model(path: Path, e: Exception) -> None:
    """ValueError if torch.load refused ``path`` for naming a module class: a whole model saved with
    ``torch.save(model)``, not a damaged checkpoint (unpickling a class can run any code, so it is not loaded)."""
    found = re.search(r"(?:GLOBAL|class) ((?:txl_minimal|torch\.nn)\.[\w.]+)", str(e))
    if found is None:
        return
    raise ValueError(f"{path} holds a whole pickled model (torch.save(model): it refers to {found[1]}), not a "
                     "checkpoint: unpickling classes can run code from the file, so it is not loaded here. Fix: save "
                     "the model with txl_minimal.save(model, path) (its config and weights), in the session that "
                     "has it; if you trust this file, model = torch.load(path, weights_only=False), then "
                     "txl_minimal.save(model, 'model.pt')") from None


def _refuse_text(path: Path) -> None:
    """ValueError if ``path`` is a run's log.csv, or any text file (a checkpoint is a zip archive or
    safetensors, never text): not "corrupt"."""
    with open(path, "rb") as f:
        head = f.read(60)
    if head.startswith(LOG_HEADER):
        raise ValueError(f"{path} is a training log (log.csv), not a checkpoint. Fix: pass the run's folder "
                         f"({path.parent}, which holds ckpt.pt) or its ckpt.pt.")
    if file_format(path) == "text":
        text = head.decode("utf-16" if head.startswith((b"\xff\xfe", b"\xfe\xff")) else "utf-8", "ignore")
        raise ValueError(f"{path} is a text file (it begins {text[:24]!r}), not a "
                         "checkpoint, which is a run's ckpt.pt or best.pt or a file txl_minimal.save wrote. Fix: pass "
                         "a run's --out folder, a checkpoint file or a shipped name; a text to score is the corpus "
                         "(--corpus FILE, load_corpus(FILE)).")


def _damage(ckpt, path: str | Path) -> Optional[str]:
    """What is wrong with a loaded checkpoint, or None; warns if it has no checksum."""
    missing = [key for key in ("model_config", "model") if not isinstance(ckpt, dict) or key not in ckpt]
    if missing:
        return f"no {' or '.join(missing)} entry"
    if CHECKSUM not in ckpt:
        warnings.warn(f"checkpoint {path} has no checksum (saved before checksums existed): damage to its "
                      "weights would go unnoticed. Fix: re-save it, save_checkpoint(load_checkpoint(path), path) "
                      "from txl_minimal.checkpoint (a shipped model: python -m txl_minimal.pretrained "
                      "--update-json NAME)", stacklevel=3)
    elif weights_sha256(ckpt["model"]) != ckpt[CHECKSUM]:
        return "its weights do not match the SHA-256 saved with them"
    if ckpt.get("format", 1) >= 2 and STATE_CHECKSUM not in ckpt:
        return f"format {ckpt['format']} but no {STATE_CHECKSUM} entry"
    if STATE_CHECKSUM in ckpt:
        try:
            same = state_sha256(ckpt) == ckpt[STATE_CHECKSUM]
        except TypeError as e:  # an entry no checkpoint here writes
            return str(e)
        if not same:
            return ("its content (optimiser, scheduler, memory, RNG state, steps or configs) does not match "
                    "the SHA-256 saved with it")
    return _non_finite(ckpt["model"], "weights")


def _non_finite(weights: dict, what: str) -> Optional[str]:
    """'NaN or inf in ...' naming the first floating tensor with such values, or None."""
    problem = non_finite(weights, what)
    return problem and f"{problem}: a diverged run or an edited file; evaluate an earlier checkpoint, " \
                       "or train again with a lower lr"


def model_from_checkpoint(ckpt: dict, device: str | torch.device = "cpu") -> TransformerXL:
    """The model a loaded checkpoint describes: built from its config, with its weights.

    ``ckpt``: what ``load_checkpoint`` returned (a run's checkpoint, a shipped .safetensors);
    ``device``: where the model goes. ``load(path)`` is this after ``load_checkpoint(path)``.

    Returns:
        The ``TransformerXL``, in eval mode, knowing its unit and vocabulary where the checkpoint
        tells (``checkpoint_vocab``; generate_text uses them).

    Examples:
        >>> save(load_pretrained("txl-tiny"), "mine.pt")
        >>> ckpt = load_checkpoint("mine.pt")
        >>> model_from_checkpoint(ckpt).cfg.d_model
        128
    """
    validation.has_keys(ckpt, ("model", "model_config"), "ckpt", "model_from_checkpoint",
                        "pass what load_checkpoint(path) returns (a dict with the weights and their config)")
    model = TransformerXL(TXLConfig(**ckpt["model_config"])).to(check_device(device, "device"))
    check_weights_fit(model, ckpt["model"], "the checkpoint")
    model.load_state_dict(ckpt["model"])
    attach_vocab(model, checkpoint_vocab(ckpt), ckpt.get("corpus"))
    return model.eval()


def check_weights_fit(model: torch.nn.Module, weights: dict, what: str) -> None:
    """ValueError naming the tensors missing, unexpected or of another shape if ``weights`` (a state_dict)
    do not fit ``model``, built from the config saved beside them: torch's RuntimeError lists every key."""
    expected = model.state_dict()
    missing, unexpected = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
    shapes = [f"{k} {tuple(weights[k].shape)} saved, {tuple(expected[k].shape)} by the config"
              for k in sorted(set(expected) & set(weights)) if tuple(weights[k].shape) != tuple(expected[k].shape)]
    said = [f"{label} {', '.join(names[:3])}{' ...' * (len(names) > 3)} ({len(names)} in all)"
            for label, names in (("missing", missing), ("unexpected", unexpected), ("shapes:", shapes)) if names]
    if said:
        raise ValueError(f"{what}'s weights do not fit the model_config saved with them ({'; '.join(said)}): the "
                         "config was edited, or replaced on the model before it was saved. Fix: save the model again "
                         "from the session that trained it (txl_minimal.save(model, path)), or build a TXLConfig of "
                         "the weights' sizes and load_state_dict them into TransformerXL(config)")


# ----------------------------------------------------------------------------- what the ids mean

def vocab_entry(unit: str, symbols) -> dict:
    """A checkpoint's "vocab" entry: the unit ("character" or "word") and the symbol of every id
    (None where unknown), so that a model is never scored on, or fed, the other kind of ids."""
    return dict(unit=unit, symbols=None if symbols is None else list(symbols))


def describe_vocab(entry: dict) -> str:
    """"27 characters", "10,001 words", "words" (symbols unknown)."""
    symbols = entry.get("symbols")
    return f"{entry['unit']}s" if symbols is None else f"{len(symbols):,} {entry['unit']}s"


def checkpoint_vocab(ckpt: dict) -> Optional[dict]:
    """The vocab entry a checkpoint holds; for one saved before they existed, what its training
    corpus says (text8, text8-mini: the 27 characters; a word corpus: words); else None."""
    if isinstance(ckpt.get("vocab"), dict):
        return ckpt["vocab"]
    corpus = (ckpt.get("train_config") or {}).get("corpus")
    if corpus in ("text8", "text8-mini"):
        return vocab_entry("character", VOCAB)
    if corpus in WORD_CORPORA:
        return vocab_entry("word", None)
    return None


def attach_vocab(model: torch.nn.Module, entry: Optional[dict], corpus: Optional[dict] = None) -> None:
    """Let ``model`` know its unit and symbols (``model.unit``, ``model.vocab``), if known, and the record of
    the corpus it trained on (``model.corpus_record``: corpora.corpus_record; ``save`` keeps it)."""
    if entry is not None:
        model.unit = entry["unit"]
        model.vocab = None if entry.get("symbols") is None else tuple(entry["symbols"])
    if isinstance(corpus, dict):
        model.corpus_record = corpus


def model_vocab(model: torch.nn.Module) -> Optional[dict]:
    """The vocab entry of a model that knows it (``attach_vocab``), else None."""
    unit = getattr(unwrap(model), "unit", None)
    return None if unit is None else vocab_entry(unit, getattr(unwrap(model), "vocab", None))


# The authors' MemTransformerLM (attn_type 0) without cutoffs names three tensors differently; every
# other name is the same (with cutoffs, word_emb.* and crit.* are theirs too: adaptive.py).
_OFFICIAL = {"word_emb.weight": "word_emb.emb_layers.0.weight", "out_bias": "crit.out_layers.0.bias",
             "out_weight": "crit.out_layers.0.weight"}


def official_state_dict(model: TransformerXL) -> dict[str, torch.Tensor]:
    """The model's weights under the names of the authors' PyTorch code (``MemTransformerLM``).

    ``model``: a TransformerXL with ``attn_type="rel"`` (the others have no counterpart there: a
    ValueError). Their code stores the tied softmax weight twice; so does this.

    Returns:
        A dict of name -> tensor (copies), as their ``state_dict()`` names them, ready for their
        ``load_state_dict``.

    Examples:
        >>> sd = official_state_dict(load_pretrained("txl-tiny"))
        >>> sd["word_emb.emb_layers.0.weight"].shape, "crit.out_layers.0.bias" in sd
        (torch.Size([27, 128]), True)
    """
    model = _transformer_xl(model, "official_state_dict")
    if model.cfg.attn_type != "rel":
        raise ValueError("only attn_type='rel' has an official counterpart")
    sd = {_OFFICIAL.get(k, k): t.detach().clone() for k, t in model.state_dict().items()}
    if model.cfg.tie_weights and model.crit is None:  # the authors store the tied softmax weight twice
        sd["crit.out_layers.0.weight"] = sd["word_emb.emb_layers.0.weight"].clone()
    return sd


def load_official_state_dict(model: TransformerXL, sd: dict[str, torch.Tensor]) -> None:
    """Load weights saved by the authors' ``MemTransformerLM`` into ``model``.

    ``sd``: their ``state_dict()`` (names as ``official_state_dict`` gives them); ``model``: a
    TransformerXL of the same sizes, with ``attn_type="rel"``. A missing, extra or non-finite
    tensor, or tied weights that differ, is a ValueError naming it.

    Returns:
        None; ``model``'s weights are replaced in place.

    Examples:
        >>> model = load_pretrained("txl-tiny")
        >>> twin = TransformerXL(model.cfg)
        >>> load_official_state_dict(twin, official_state_dict(model))
        >>> bool((twin.out_bias == model.out_bias).all())
        True
    """
    model = _transformer_xl(model, "load_official_state_dict")
    validation.has_keys(sd, (), "sd", "load_official_state_dict", "the authors' state_dict(), a dict of tensors")
    if model.cfg.attn_type != "rel":
        raise ValueError("only attn_type='rel' has an official counterpart")
    problem = non_finite(sd, "official state dict tensor")
    if problem:
        raise ValueError(f"{problem}. Fix: load an intact copy of the authors' checkpoint.")
    if model.crit is not None:  # adaptive softmax: the names are the same; what it shares must agree
        _check_ties(model, sd)
        ours = dict(sd)
    else:
        from_official = {v: k for k, v in _OFFICIAL.items()}
        ours = {from_official.get(k, k): t for k, t in sd.items()}
    expected = model.state_dict()
    for key, t in ours.items():
        if key in expected and tuple(t.shape) != tuple(expected[key].shape):
            official = _OFFICIAL.get(key, key) if model.crit is None else key
            raise ValueError(f"official state dict: {official} has shape {tuple(t.shape)}, this model expects "
                             f"{tuple(expected[key].shape)}. Fix: build the model with the checkpoint's "
                             "config (n_layer, n_head, d_model, d_head, d_inner, vocab_size, cutoffs, div_val).")
    if model.crit is None:
        out = ours.pop("out_weight", None) if model.cfg.tie_weights else None
        if out is not None and not torch.equal(out, ours.get("word_emb.weight", out)):
            raise ValueError("crit.out_layers.0.weight differs from the input embedding: the checkpoint "
                             "has an untied softmax. Build the model with TXLConfig(tie_weights=False).")
    missing, unexpected = model.load_state_dict(ours, strict=False)
    if missing or unexpected:
        raise ValueError(f"official state dict does not fit this config: missing {missing}, "
                         f"unexpected {unexpected}")


def _check_ties(model: TransformerXL, sd: dict[str, torch.Tensor]) -> None:
    """ValueError if ``sd`` holds different tensors under two names that ``model`` shares
    (tie_weights, tie_projs): loading would keep one of them silently."""
    names: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    for shared in (n for n in names.values() if len(n) > 1):
        present = [n for n in shared if n in sd]
        for other in present[1:]:
            if not torch.equal(sd[present[0]], sd[other]):
                fix = ("TXLConfig(tie_weights=False)" if "out_layers" in other else
                       f"TXLConfig(tie_projs=...) whose entry {other.rsplit('.', 1)[1]} is False")
                raise ValueError(f"{other} differs from {present[0]}: the checkpoint does not share them as this "
                                 f"model does. Build the model with {fix}.")


def run_checkpoint(run_dir: str | Path, last: bool = False) -> Path:
    """The file a run directory is scored by: best.pt (the state of its best periodic valid
    bpc, as the authors keep) where there is one and ``last`` is False, else ckpt.pt (its last state)."""
    run_dir = Path(run_dir)
    return run_dir / (BEST if not last and (run_dir / BEST).is_file() else LAST)


def checkpoint_file(target: str | Path, last: bool = False) -> Path:
    """A shipped name (``NAMES``), a run directory (its best.pt, or with ``last`` or without
    one its ckpt.pt: ``run_checkpoint``) or a checkpoint file."""
    refuse_empty_path(target, "the checkpoint")
    if last and (str(target) in NAMES or not Path(target).is_dir()):
        raise ValueError(f"last=True (--last) picks a run directory's last state, ckpt.pt, over its best.pt; "
                         f"{target} is not a run directory. Fix: drop --last, or pass the run's --out folder.")
    if str(target) in NAMES:  # a run directory of that name needs ./ in front
        return PRETRAINED_DIR / f"{target}{SAFETENSORS}"
    path = Path(target)
    if path.is_dir():
        chosen = run_checkpoint(path, last)
        if not chosen.exists() and (running := training_now(path)):  # (its lock: OUT/train.lock)
            raise FileNotFoundError(f"{running}, and has written no checkpoint yet, so there is no model to "
                                    "evaluate. Fix: wait for its first checkpoint (log.csv shows its steps), or pass "
                                    "another run's folder.")
        if not chosen.exists() and (path / "log.csv").exists():
            if last and (path / BEST).is_file():
                raise FileNotFoundError(f"{path} has no ckpt.pt (its last state), which --last asks for. Fix: drop "
                                        "--last to score its best.pt")
            raise FileNotFoundError(f"{path} holds a run's log.csv but no ckpt.pt or best.pt: the run stopped before "
                                    "its first checkpoint (or its weights were deleted), so there is no model to "
                                    "evaluate. Fix: train it (python -m txl_minimal.train --out ... --overwrite), or "
                                    "pass another run's folder.")
        path = chosen
    if not path.is_file():
        raise FileNotFoundError(f"no model at {target}: not a shipped model ({', '.join(NAMES)}), "
                                "a run directory holding ckpt.pt or best.pt, or a checkpoint file. "
                                "Fix: pass the --out directory of a training run, a checkpoint file or a shipped name.")
    return path
