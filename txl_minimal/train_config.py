"""What a training is told: ``TrainConfig`` (the corpus, optimisation and bookkeeping; each value
checked when the config is made), ``preset`` (a named preset's model and training configs) and the
learning-rate schedule they set, ``lr_at``. ``train`` (train.py) runs them."""
from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Optional, Union

from txl_minimal.data import CORPORA, UNITS, is_corpus_path
from txl_minimal.devices import COMPILE_MODES
from txl_minimal.machine import check_device
from txl_minimal.model import TXLConfig
from txl_minimal.presets import PRESETS
from txl_minimal.text_file import check_settings
from txl_minimal import validation
from txl_minimal.validation import as_int

CHOICES = dict(corpus=CORPORA, unit=UNITS, amp=("auto", "bf16", "fp16", "off"), attention=("auto", "fast", "explicit"),
               adam=("auto", "fused", "foreach", "for-loop"), loss_positions=("full", "half"))


@dataclass
class TrainConfig:
    """Training's settings: the corpus, optimisation and bookkeeping (the model's live in TXLConfig).

    Each field's comment says what it is; the names are the authors' where they have one.
    ``python -m txl_minimal.train --set name=value`` sets any of them. A value that cannot work
    is a ValueError naming the field, before anything is written.

    Returns:
        The config (a dataclass); ``train(model_cfg, cfg)`` (in txl_minimal.train) runs it, and
        ``preset(name)`` gives one with a preset's values.

    Examples:
        >>> cfg = TrainConfig(corpus="text8-mini", max_steps=100, out="runs/mine")
        >>> cfg.batch_size, cfg.lr, cfg.split
        (16, 0.001, None)
        >>> TrainConfig(lr=0)
        Traceback (most recent call last):
        ValueError: TrainConfig.lr must be a number > 0, got 0
    """

    corpus: str = "text8-mini"  # "text8" | "text8-mini" | "auto" | words: "text8-mini-words" | "wt103" | "wt2"
    # | the path to a UTF-8 text file of your own (text_file.py), read with these three (None: the defaults):
    unit: Optional[str] = None  # "character" (default) | "word"; a named corpus has its own
    split: Optional[tuple] = None  # (train, valid, test) fractions of the file; None: (0.9, 0.05, 0.05)
    max_vocab: Optional[int] = None  # the most symbols kept (specials included); None: every one of train
    batch_size: int = 16  # global: split over the DDP ranks
    lr: float = 1e-3
    min_lr: float = 0.0  # cosine floor (the authors' eta_min)
    warmup_steps: int = 200
    max_steps: int = 5000
    grad_clip: float = 0.25  # the authors' scripts' value (the paper states none)
    # "full": every target of the segment is trained; "half": only its later half, each target with at
    # least tgt_len // 2 tokens of context (the paper's "half loss", Table 6: it found absolute
    # encodings work only with it)
    loss_positions: str = "full"
    eval_interval: int = 500
    eval_tokens: Optional[int] = 32768  # valid prefix scored at each evaluation (None: all)
    eval_batch_size: int = 8
    eval_tgt_len: Optional[int] = None  # evaluation lengths (None: the training ones)
    eval_mem_len: Optional[int] = None
    eval_clamp_len: Optional[int] = None
    eval_same_length: Optional[bool] = None
    log_interval: int = 50  # steps per CSV row
    seed: int = 0
    out: str = "runs/default"  # ckpt.pt, best.pt and log.csv go here
    # "auto" (measured, see choose_precision: CPU: bf16 only where a matmul of the model's size is faster;
    # GPU: the faster of a few real steps in fp32 and bf16 (fp16 before Ampere)) | "bf16" | "fp16" | "off" (fp32)
    amp: str = "auto"
    # "fast" (fast.py's paths) | "explicit" (model.py's code) | "auto" (CPU: fast; GPU: measured with amp)
    attention: str = "auto"
    # torch.compile each segment: True | False | "auto" (on CUDA) | "reduce-overhead" (+ CUDA graphs);
    # falls back to eager, with one line, where it cannot (compile_mode)
    compile: Union[bool, str] = "auto"
    # Adam's implementation: "auto" (fused on CUDA, foreach elsewhere) | "fused" | "foreach" | "for-loop"
    adam: str = "auto"
    flex_attention: bool = False  # FlexAttention for the relative attention (torch >= 2.5; pays with compile, fast.py)
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:1" ...

    def __post_init__(self) -> None:
        """Raise ``ValueError`` naming the first impossible field (before anything is written)."""
        if isinstance(self.out, os.PathLike):  # a Path would not load back from a checkpoint (weights_only)
            self.out = os.fspath(self.out)
        if isinstance(self.corpus, os.PathLike):
            self.corpus = os.fspath(self.corpus)
        if isinstance(self.out, str) and not self.out.strip():  # Path("") is the current folder
            raise ValueError(f"TrainConfig.out is {self.out!r}: the run's ckpt.pt, best.pt and log.csv would go into "
                             "the current folder. Fix: name a folder for them, e.g. --out runs/mine "
                             "(TrainConfig(out='runs/mine'))")
        for f in fields(self):  # types first, as in TXLConfig: True is an int to Python, "no" is truthy
            value, kind = getattr(self, f.name), f.type.removeprefix("Optional[").rstrip("]")
            low = 0 if f.name in ("warmup_steps", "seed", "eval_mem_len", "eval_clamp_len", "min_lr") else 1
            if value is None and f.type.startswith("Optional"):
                continue
            if kind == "int" and type(value) is not int and as_int(value) is not None:  # np.int64(16)
                value = as_int(value)
                setattr(self, f.name, value)  # a plain int: a checkpoint saves the config
            if kind == "int" and (type(value) is not int or value < low):
                raise ValueError(f"TrainConfig.{f.name} must be an integer >= {low}, got {value!r}")
            if kind == "bool" and not isinstance(value, bool):
                raise ValueError(f"TrainConfig.{f.name} must be True or False, got {value!r}")
            if kind == "float" and type(value) not in (bool, int, float) and isinstance(value, numbers.Real):
                value = float(value)  # np.float32(3e-3)
                setattr(self, f.name, value)
            if kind == "float" and (type(value) not in (int, float) or not math.isfinite(value)
                                    or value < 0 or (value == 0 and low)):  # lr 0: a division by zero
                raise ValueError(f"TrainConfig.{f.name} must be a number {'>' if low else '>='} 0, got {value!r}")
            if kind == "str" and not isinstance(value, str):
                raise ValueError(f"TrainConfig.{f.name} must be a string, got {value!r}")
            if f.name == "corpus" and value not in CORPORA and (not is_corpus_path(value) or not os.path.exists(value)):
                where = f" (no file {Path(value).expanduser().resolve()})" if value else ""
                raise ValueError(f"TrainConfig.corpus must be one of {CORPORA} or the path to a UTF-8 text file, got "
                                 f"{value!r}{where}")
            if f.name in CHOICES and value not in CHOICES[f.name] and f.name != "corpus":
                raise ValueError(f"TrainConfig.{f.name} must be one of {CHOICES[f.name]}, got {value!r}")
        if not (isinstance(self.compile, bool) or self.compile in COMPILE_MODES):
            raise ValueError(f"TrainConfig.compile must be True or False, or one of {COMPILE_MODES}, "
                             f"got {self.compile!r}")
        if self.flex_attention and self.attention == "explicit":
            raise ValueError("TrainConfig.flex_attention is a fast path; attention='explicit' runs model.py's code, "
                             "which never uses it. Fix: attention='auto' or 'fast', or flex_attention=False")
        if self.split is not None or self.max_vocab is not None:  # a tuple, as a checkpoint saves it
            _, split, _ = check_settings(self.unit, self.split, self.max_vocab)
            self.split = None if self.split is None else split
        if self.min_lr > self.lr:
            raise ValueError(f"TrainConfig.min_lr ({self.min_lr}) must not exceed lr ({self.lr})")
        if self.device != "auto":  # one this machine has: cpu, cuda, cuda:N
            check_device(self.device, "TrainConfig.device")


def preset(name: str, **overrides) -> tuple[TXLConfig, TrainConfig]:
    """The model and training configs of a named preset, with ``overrides`` applied.

    ``name``: "cpu-tiny" (about a minute of one CPU core), "cpu-small", "cpu-base" (the shipped models'),
    "gpu-small", "paper-base", "wt103-base" (docs/training.md: what each gave). ``overrides``
    (``mem_len=256``, ``max_steps=100``) go to whichever config has the field; an unknown one is a
    ValueError.

    Returns:
        ``(model_cfg, cfg)``: a ``TXLConfig`` and a ``TrainConfig``, for ``train(model_cfg, cfg)``.

    Examples:
        >>> model_cfg, cfg = preset("cpu-tiny", mem_len=16, max_steps=10)
        >>> model_cfg.n_layer, model_cfg.mem_len, cfg.max_steps, cfg.out
        (2, 16, 10, 'runs/cpu-tiny')
        >>> preset("tiny")
        Traceback (most recent call last):
        ValueError: unknown preset 'tiny'; choose one of ['cpu-base', 'cpu-small', 'cpu-tiny', ...]
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    model_kw, train_kw = dict(PRESETS[name]["model"]), dict(PRESETS[name]["train"])
    model_fields = {f.name for f in fields(TXLConfig)}
    train_fields = {f.name for f in fields(TrainConfig)}
    for key, value in overrides.items():
        if key in model_fields:
            model_kw[key] = value
        elif key in train_fields:
            train_kw[key] = value
        else:
            raise ValueError(f"unknown setting {key!r}; TXLConfig fields: {sorted(model_fields)}; "
                             f"TrainConfig fields: {sorted(train_fields)}")
    return TXLConfig(**model_kw), TrainConfig(**train_kw)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate of update number ``step`` (1-based): linear warm-up, cosine to min_lr."""
    if not isinstance(cfg, TrainConfig):
        raise ValueError(f"lr_at: cfg must be a TrainConfig, got {validation.a_kind(cfg)}. Fix: lr_at(step, "
                         "TrainConfig(...)), or a preset's: preset('cpu-tiny')[1]")
    step = validation.count(step, "step", "lr_at", 0)  # -1 would give a negative rate, 2.5 one between steps
    if step <= cfg.warmup_steps:
        return cfg.lr * step / max(1, cfg.warmup_steps)  # (step 0 without warm-up: 0, not 0 / 0)
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps))
    return cfg.min_lr + (cfg.lr - cfg.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_note(cfg: TrainConfig) -> Optional[str]:
    """A sentence if the warm-up outlasts the run (the rate would peak below lr, and never decay), else None.
    Said, not clamped: the schedule stays ``lr_at``'s, which a resume with a higher max_steps continues."""
    if cfg.warmup_steps <= cfg.max_steps:
        return None
    return (f"warmup_steps {cfg.warmup_steps:,} outlasts max_steps {cfg.max_steps:,}: the learning rate rises only to "
            f"{cfg.max_steps / cfg.warmup_steps:.2g} x lr ({lr_at(cfg.max_steps, cfg):.3g}) at the last step and "
            f"never decays. Fix: a shorter warm-up, e.g. --set warmup_steps={max(1, cfg.max_steps // 10)} "
            "(TrainConfig.warmup_steps)")


# the --set KEY=VALUE fields of both configs, by name: their types (command_line.overrides)
FIELD_TYPES = {f.name: f.type for config in (TXLConfig, TrainConfig) for f in fields(config)}
