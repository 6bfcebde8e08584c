"""Checkpoints: atomic save with a checksum, safe load with a config check, the model one
describes, the RNG state that makes a resumed run bit-exact, where the shipped models live,
and the authors' parameter names (``official_state_dict``, ``load_official_state_dict``).

A training checkpoint (``train.py``: a run's ckpt.pt, its last state) holds ``format``, ``model``,
``optimizer``, ``scheduler``, ``scaler``, ``model_config``, ``train_config``, ``step``, ``data``
(epoch, segment), ``mems``, ``rng`` (one state per rank), ``wall_time_s`` and ``best`` (the
step and valid bpc of best.pt, or None); a run's best.pt (its state of best valid bpc) holds
the weights, the configs, ``step``, ``valid_bpc`` and ``wall_time_s``; a shipped one
(``pretrained.py``) only the weights, the configs, step and wall time;
one written by ``save`` only the weights and the model config. Each also holds
``model_sha256``, the checksum of its weights (``weights_sha256``), and (format 2) ``state_sha256``,
the checksum of everything else in it (``state_sha256``): a resume uses the optimiser, schedule,
memory, RNG state and step counters too, so a flipped bit anywhere is refused. Shipped files are
also checked against pretrained/MANIFEST.json (size and SHA-256 of the file) before loading.
"""
from __future__ import annotations

import hashlib
import random
import warnings
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from txl_minimal.model import TransformerXL, TXLConfig
from txl_minimal.utils import atomic_write, check_shipped, non_finite

PRETRAINED_DIR = Path(__file__).resolve().with_name("pretrained")  # the models shipped with the package
NAMES = ("txl", "vanilla", "txl-tiny", "vanilla-tiny")  # see pretrained.py
LAST, BEST = "ckpt.pt", "best.pt"  # in a run directory: the resumable last state; the best-validation one
CHECKSUM = "model_sha256"  # the entry holding weights_sha256(checkpoint["model"])
STATE_CHECKSUM = "state_sha256"  # the entry holding state_sha256(checkpoint): every other entry
FORMAT = 2  # 2: with STATE_CHECKSUM, which a format-2 file must hold
DAMAGED_FIX = ("Fix: use an intact copy (a shipped model: git checkout txl_minimal/pretrained, or reinstall "
               "the package) or train it again; for a bare state_dict, save the model with "
               "txl_minimal.save(model, path).")


def unwrap(model: torch.nn.Module) -> TransformerXL:
    """The TransformerXL inside a DDP and/or torch.compile wrapper."""
    model = getattr(model, "module", model)
    return getattr(model, "_orig_mod", model)


def weights_sha256(state_dict: dict[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes, in name order, read on
    the CPU: the same for any device the weights were saved from or are loaded to."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _feed(h: "hashlib._Hash", value) -> None:
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


def save_checkpoint(state: dict, path: str | Path) -> None:
    """torch.save ``state`` atomically (a crash mid-write leaves the previous file intact),
    with the checksums of its ``model`` weights and of everything in it, which
    ``load_checkpoint`` verifies."""
    state = {**state, "format": FORMAT}
    if "model" in state:
        state[CHECKSUM] = weights_sha256(state["model"])
    state[STATE_CHECKSUM] = state_sha256(state)
    atomic_write(path, lambda f: torch.save(state, f))


def save(model: torch.nn.Module, path: str | Path) -> None:
    """Save a model, e.g. one trained in your own loop: its config and weights (with their
    checksum), the format of every checkpoint here. ``load(path)`` gives it back;
    ``python -m txl_minimal.evaluate PATH --corpus text8-mini`` scores it."""
    model = unwrap(model)
    weights = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    save_checkpoint(dict(model=weights, model_config=model.cfg.to_dict()), path)


def load(path: str | Path, device: str | torch.device = "cpu") -> TransformerXL:
    """The model in a checkpoint (``save``, a run's ckpt.pt, a shipped .pt), in eval mode."""
    return model_from_checkpoint(load_checkpoint(path, map_location=device), device)


def check_config(saved: dict, cfg: TXLConfig, what: str = "checkpoint") -> None:
    """ValueError naming every field where ``saved`` (a config dict) differs from ``cfg``."""
    ours = cfg.to_dict()
    defaults = TXLConfig().to_dict()  # a field added to TXLConfig since the save has its default
    diff = [f"{k} {saved.get(k, defaults.get(k))!r} there vs {ours.get(k)!r} here"
            for k in sorted(set(saved) | set(ours)) if saved.get(k, defaults.get(k)) != ours.get(k)]
    if diff:
        raise ValueError(f"{what} was made with a different model config: {'; '.join(diff)}. "
                         "Fix: use the same preset and overrides, or a fresh --out directory.")


def load_checkpoint(path: str | Path, model_cfg: Optional[TXLConfig] = None,
                    map_location: str | torch.device = "cpu") -> dict:
    """Load a checkpoint safely (weights_only=True), verify its weights' checksum and, if
    given, its model config. A damaged or incomplete file raises ``ValueError``."""
    if not Path(path).exists():
        raise FileNotFoundError(f"no checkpoint at {path}. Fix: check the path (--out, or the "
                                "checkpoint evaluated), or drop --resume to start afresh.")
    check_shipped(path)  # a shipped model: its size and SHA-256 against pretrained/MANIFEST.json
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except PermissionError:
        raise
    except Exception as e:  # damaged bytes fail anywhere in the unpickler (EOFError, UnpicklingError,
        # UnicodeDecodeError, IndexError, KeyError, ...); torch's words point at its internals
        problem = (f"{Path(path).stat().st_size:,} bytes; torch.load: {type(e).__name__} "
                   f"{str(e).split('. ')[0]}".rstrip())
    else:
        problem = _damage(ckpt, path)
    if problem:  # from None: torch's message would advise weights_only=False, unsafe here
        raise ValueError(f"checkpoint {path} is corrupt or incomplete ({problem}). {DAMAGED_FIX}") from None
    if model_cfg is not None:
        check_config(ckpt["model_config"], model_cfg, f"checkpoint {path}")
    return ckpt


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
    """The TransformerXL a loaded checkpoint (or shipped .pt) describes, in eval mode."""
    model = TransformerXL(TXLConfig(**ckpt["model_config"])).to(device)
    model.load_state_dict(ckpt["model"])
    return model.eval()


# The authors' MemTransformerLM (attn_type 0) without cutoffs names three tensors differently; every
# other name is the same (with cutoffs, word_emb.* and crit.* are theirs too: adaptive.py).
_OFFICIAL = {"word_emb.weight": "word_emb.emb_layers.0.weight", "out_bias": "crit.out_layers.0.bias",
             "out_weight": "crit.out_layers.0.weight"}


def official_state_dict(model: TransformerXL) -> dict[str, torch.Tensor]:
    """The model's weights under the names of the authors' PyTorch code."""
    if model.cfg.attn_type != "rel":
        raise ValueError("only attn_type='rel' has an official counterpart")
    sd = {_OFFICIAL.get(k, k): t.detach().clone() for k, t in model.state_dict().items()}
    if model.cfg.tie_weights and model.crit is None:  # the authors store the tied softmax weight twice
        sd["crit.out_layers.0.weight"] = sd["word_emb.emb_layers.0.weight"].clone()
    return sd


def load_official_state_dict(model: TransformerXL, sd: dict[str, torch.Tensor]) -> None:
    """Load weights saved by the authors' ``MemTransformerLM`` into ``model``."""
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
    """A shipped name (txl | vanilla), a run directory (its best.pt, or with ``last`` or without
    one its ckpt.pt: ``run_checkpoint``) or a checkpoint file."""
    if last and (str(target) in NAMES or not Path(target).is_dir()):
        raise ValueError(f"last=True (--last) picks a run directory's last state, ckpt.pt, over its best.pt; "
                         f"{target} is not a run directory. Fix: drop --last, or pass the run's --out folder.")
    if str(target) in NAMES:  # a run directory of that name needs ./ in front
        return PRETRAINED_DIR / f"{target}.pt"
    path = Path(target)
    path = run_checkpoint(path, last) if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"nothing to evaluate at {target}: not a shipped model ({', '.join(NAMES)}), "
                                "a run directory holding ckpt.pt, or a checkpoint file. "
                                "Fix: pass the --out directory of a training run, or txl / vanilla.")
    return path


def rng_state() -> dict:
    """This process's RNG states (torch, CUDA, numpy, python) as tensors and plain
    lists, so that a checkpoint holding them still loads with weights_only=True."""
    keys, pos, has_gauss, gauss = np.random.get_state()[1:]
    version, py_state, py_gauss = random.getstate()
    state = dict(torch=torch.get_rng_state(),
                 numpy=dict(keys=torch.from_numpy(keys.astype(np.int64)), pos=pos,
                            has_gauss=has_gauss, gauss=gauss),
                 python=dict(version=version, state=list(py_state), gauss=py_gauss))
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what ``rng_state()`` returned (CUDA only where there is a GPU)."""
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))
