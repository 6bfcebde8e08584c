"""Train Transformer-XL (and the vanilla baseline) on text8.

    python -m txl_minimal.train --preset cpu-tiny                       # a few minutes on a CPU
    python -m txl_minimal.train --preset cpu-small --out runs/txl --resume
    python -m txl_minimal.train --preset cpu-tiny --out runs/cpu-tiny --overwrite  # replace that run
    python -m txl_minimal.train --preset cpu-small --set attn_type=abs mem_len=0  # the vanilla baseline
    torchrun --nproc_per_node 2 -m txl_minimal.train --preset cpu-tiny  # data parallel

The loop is the authors' (``pytorch/train.py``): Adam, linear warm-up then cosine
decay, gradient clipping at 0.25, and memory carried from each segment to the next
(Sec. 3.2). A batch is ``batch_size`` parallel columns of the text, so row b of step
t+1 continues row b of step t; the memory is reset when a pass over the data begins.
Every ``eval_interval`` steps the valid bpc (words: perplexity) is measured and OUT/ckpt.pt written
(the last state, which --resume continues); an evaluation better than every earlier one also writes
OUT/best.pt (those weights, as the authors keep their best model). ``python -m txl_minimal.evaluate OUT``
scores a run's best.pt afterwards (--last: its ckpt.pt). A preset run on a smaller corpus than its own
(text8 unreachable, --corpus, $TXL_CORPUS) is shortened to FALLBACK_EPOCHS passes over it, with a line
saying so (``sized_to_corpus``). A run already in OUT
is never replaced silently: continue it with --resume or replace it with --overwrite.
OUT/train.lock keeps a second training out of OUT while one runs; Ctrl-C finishes the step
in progress, saves it to OUT/ckpt.pt and prints the --resume command that continues it.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import functools
import gc
import io
import itertools
import json
import math
import numbers
import os
import shlex
import signal
import socket
import sys
import threading
import time
import warnings
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Optional, Union

import torch
import torch.distributed as dist
from tqdm import tqdm

from txl_minimal import fast, validation
from txl_minimal.checkpoint import (BEST, LAST, ConfigMismatch, attach_vocab, describe_vocab, load, load_checkpoint,
                                    rng_state, save_checkpoint, set_rng_state, vocab_entry)
from txl_minimal.data import CORPORA, Corpus, CorpusError, LMOrderedIterator, load_corpus
from txl_minimal.evaluate import evaluate
from txl_minimal.model import TransformerXL, TXLConfig, TXLOutput
from txl_minimal.utils import (LN2, NO_SPACE, WriteError, atomic_write, bf16_speedup, check_device, default_device,
                               int_at_least, remove_leftovers, score_name, score_of, seed_everything,
                               terminal_progress, write_problem)
from txl_minimal.validation import as_int

CSV_COLUMNS = ("step", "tokens", "wall_time_s", "lr", "train_loss", "train_bpc", "valid_bpc")
RUN_FILES = (LAST, "log.csv", BEST)  # what a run writes in its --out directory
LOCK = "train.lock"  # OUT/train.lock: the pid, host and start of the training writing there
CHOICES = dict(corpus=CORPORA, amp=("auto", "bf16", "fp16", "off"), attention=("auto", "fast", "explicit"),
               adam=("auto", "fused", "foreach", "for-loop"), loss_positions=("full", "half"))
COMPILE_MODES = ("auto", "reduce-overhead")  # TrainConfig.compile besides True and False


@dataclass
class TrainConfig:
    """Optimisation and bookkeeping; the model's hyper-parameters live in TXLConfig."""

    corpus: str = "text8-mini"  # "text8" | "text8-mini" | "auto" | words: "text8-mini-words" | "wt103" | "wt2"
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
            if f.name in CHOICES and value not in CHOICES[f.name]:
                raise ValueError(f"TrainConfig.{f.name} must be one of {CHOICES[f.name]}, got {value!r}")
        if not (isinstance(self.compile, bool) or self.compile in COMPILE_MODES):
            raise ValueError(f"TrainConfig.compile must be True or False, or one of {COMPILE_MODES}, "
                             f"got {self.compile!r}")
        if self.flex_attention and self.attention == "explicit":
            raise ValueError("TrainConfig.flex_attention is a fast path; attention='explicit' runs model.py's code, "
                             "which never uses it. Fix: attention='auto' or 'fast', or flex_attention=False")
        if self.min_lr > self.lr:
            raise ValueError(f"TrainConfig.min_lr ({self.min_lr}) must not exceed lr ({self.lr})")
        if self.device != "auto":  # one this machine has: cpu, cuda, cuda:N
            check_device(self.device, "TrainConfig.device")


# What the two shipped CPU pairs' trainings share.
_CPU_TRAIN = dict(corpus="text8-mini", batch_size=16, max_steps=5000, eval_interval=500, eval_tokens=32768,
                  log_interval=50)
PRESETS: dict[str, dict[str, dict]] = {
    # README and notebooks: ~1 min of one CPU core (valid bpc ~2.75 on text8-mini).
    "cpu-tiny": dict(
        model=dict(n_layer=2, n_head=2, d_model=64, d_head=32, d_inner=256, dropout=0.0,
                   dropatt=0.0, tgt_len=32, mem_len=32),
        train=dict(corpus="text8-mini", batch_size=16, lr=3e-3, warmup_steps=100, max_steps=2000,
                   eval_interval=500, eval_tokens=8192, log_interval=25, out="runs/cpu-tiny")),
    # The shipped "txl-tiny"/"vanilla-tiny" (txl_minimal/pretrained): 2,582 s and 2,164 s
    # on ONE thread of a shared 2-core CPU (train_wall_time_s in pretrained/*.json).
    "cpu-small": dict(
        model=dict(n_layer=4, n_head=4, d_model=128, d_head=32, d_inner=512, dropout=0.1,
                   dropatt=0.0, tgt_len=64, mem_len=64),
        train=dict(_CPU_TRAIN, lr=1e-3, warmup_steps=200, out="runs/cpu-small")),
    # The shipped "txl"/"vanilla": 4 layers, d_model 256, 3.4M parameters, 5,000 steps of
    # 16 x 128 characters (10.2M, 3.7 epochs of text8-mini); the vanilla twin is the same
    # with --set attn_type=abs mem_len=0. Training times: pretrained/*.json.
    "cpu-base": dict(
        model=dict(n_layer=4, n_head=4, d_model=256, d_head=64, d_inner=1024, dropout=0.1,
                   dropatt=0.0, tgt_len=128, mem_len=128),
        train=dict(_CPU_TRAIN, lr=5e-4, warmup_steps=500, out="runs/cpu-base")),
    # One GPU. Measured once, on an H100 (torch 2.11, bf16 by amp="auto"), text8 unreachable there so on
    # text8-mini: 195,366 tokens/s, 852 s for the 20,000 steps. Full text8 and other GPUs (a T4) never run.
    "gpu-small": dict(
        model=dict(n_layer=8, n_head=8, d_model=256, d_head=32, d_inner=1024, dropout=0.1,
                   dropatt=0.0, tgt_len=256, mem_len=256),
        train=dict(corpus="text8", batch_size=32, lr=5e-4, warmup_steps=1000, max_steps=20000,
                   eval_interval=2000, eval_tokens=262144, eval_batch_size=16, log_interval=100,
                   out="runs/gpu-small")),
    # The authors' text8 base model (run_text8_base.sh); evaluation lengths as in the paper.
    "paper-base": dict(
        model=dict(n_layer=12, n_head=8, d_model=512, d_head=64, d_inner=2048, dropout=0.1,
                   dropatt=0.0, tgt_len=512, mem_len=512),
        train=dict(corpus="text8", batch_size=22, lr=2.5e-4, warmup_steps=0, max_steps=400_000,
                   eval_interval=4000, eval_tokens=None, eval_batch_size=10,
                   # the authors' test evaluation of this model (eval in run_text8_base.sh); 128 /
                   # 3,800 / 1,000 belong to their 24-layer TF scripts
                   eval_tgt_len=80, eval_mem_len=2100, eval_clamp_len=820, eval_same_length=True,
                   log_interval=200, out="runs/paper-base")),
    # The authors' WikiText-103 base model (run_wt103_base.sh; the paper's 151M parameters, 24.0
    # test perplexity) on ONE GPU: their sizes, adaptive input and softmax tied with their cutoffs
    # and tie_projs, their lr and steps, their evaluation (64 / 640 / clamp 400, same_length).
    # Their batch of 60 was split over 4 GPUs; here all 60 go on one (README: ~17 GB in fp32).
    "wt103-base": dict(
        model=dict(vocab_size=267_735, n_layer=16, n_head=10, d_model=410, d_head=41, d_inner=2100,
                   dropout=0.1, dropatt=0.0, tgt_len=150, mem_len=150, cutoffs=[20_000, 40_000, 200_000],
                   div_val=1, tie_weights=True, tie_projs=[False, True, True, True]),
        train=dict(corpus="wt103", batch_size=60, lr=2.5e-4, warmup_steps=0, max_steps=200_000,
                   eval_interval=4000, eval_tokens=None, eval_batch_size=10, eval_tgt_len=64,
                   eval_mem_len=640, eval_clamp_len=400, eval_same_length=True, log_interval=200,
                   out="runs/wt103-base")),
}


def preset(name: str, **overrides) -> tuple[TXLConfig, TrainConfig]:
    """(model config, train config) of a preset; overrides go to whichever has the field."""
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


# A preset on a smaller corpus than its own reads it at most this many times. Measured once (H100,
# torch 2.11): gpu-small on text8-mini for its 20,000 steps of 32 x 256 (59 passes) had its lowest
# valid bpc, 1.697, at step 8,000 (24 passes) and ended at 1.742 (train 1.19: memorising); a run of
# 8,000 steps, its cosine ending there, reached valid 1.670 (test 1.641).
FALLBACK_EPOCHS = 24


def sized_to_corpus(name: str, model_cfg: TXLConfig, cfg: TrainConfig, corpus: Corpus,
                    max_epochs: Optional[float] = None) -> tuple[TrainConfig, Optional[str]]:
    """Preset ``name``'s ``cfg`` fitted to the corpus it will really read, and a line saying what changed.

    On its own corpus, or one it reads fewer than ``max_epochs`` times, ``(cfg, None)``. On another
    (a fallback: text8 unreachable, $TXL_CORPUS, --corpus) that ``max_steps`` would read more often,
    max_steps is lowered to ``max_epochs`` (default FALLBACK_EPOCHS) passes over the training split,
    rounded down to a multiple of eval_interval (the run ends on a periodic evaluation), and the line
    says so and why."""
    max_epochs = FALLBACK_EPOCHS if max_epochs is None else max_epochs
    own = PRESETS[name]["train"]["corpus"]
    per_step = cfg.batch_size * model_cfg.tgt_len
    n_train = len(corpus.train)
    steps = int(max_epochs * n_train // per_step)
    if steps >= cfg.eval_interval:
        steps -= steps % cfg.eval_interval
    steps = max(1, steps)
    if corpus.name == own or cfg.max_steps <= steps:
        return cfg, None
    unit = "word" if corpus.unit == "word" else "character"
    note = (f"{name} on {corpus.name}, not {own}: its {cfg.max_steps:,} steps of {cfg.batch_size} x "
            f"{model_cfg.tgt_len} would read the {n_train:,} training {unit}s "
            f"{cfg.max_steps * per_step / n_train:,.1f} times; shortened to max_steps {steps:,} "
            f"({steps * per_step / n_train:,.1f} passes; measured: gpu-small's valid bpc on "
            f"text8-mini was lowest near {FALLBACK_EPOCHS} passes and rose after)")
    return replace(cfg, max_steps=steps), note


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate of update number ``step`` (1-based): linear warm-up, cosine to min_lr."""
    if step <= cfg.warmup_steps:
        return cfg.lr * step / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps))
    return cfg.min_lr + (cfg.lr - cfg.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


# ----------------------------------------------------------------------------- set-up

@dataclass
class TrainResult:
    """What ``train`` returns."""

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


def _distributed() -> tuple[int, int, int]:
    """(rank, world_size, local_rank); torchrun sets the environment variables."""
    if "RANK" not in os.environ:
        return 0, 1, 0
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))


def _claim_out(out_dir: Path, resume: bool, overwrite: bool, rank: int) -> None:
    """Refuse to replace the run in ``out_dir`` unless told to; remove what a killed run left.
    Every rank checks before the process group forms (no rank has written anything yet). Nothing
    of an old run is deleted here: --overwrite replaces it once the new run has passed every check
    (``_replace_old_run``)."""
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


def _replace_old_run(out_dir: Path, overwrite: bool, rank: int) -> None:
    """--overwrite, once the new run has passed every check: drop the old checkpoint (the new
    log replaces the old one whole, CSVLog), so that no stale ckpt.pt or best.pt sits beside the new log."""
    if overwrite and rank == 0:
        for name in (LAST, BEST):
            (out_dir / name).unlink(missing_ok=True)


def _init_distributed(device: torch.device, world: int, batch_size: int) -> None:
    """Join the process group of a torchrun launch (nothing to do for one process)."""
    if batch_size % world:
        raise ValueError(f"batch_size {batch_size} must be divisible by the {world} processes")
    if world > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")


BF16_MIN_SPEEDUP = 1.2  # amp="auto" on a CPU: bf16 only where its matmul is clearly faster


@functools.cache
def cpu_precision(rows: int, d_model: int, d_inner: int) -> tuple[str, float]:
    """amp="auto" on a CPU: ("bf16" or "off", the measured speed-up of a bf16 matmul of the
    feed-forward's size over fp32). Measured once per process and size, and printed."""
    speedup = bf16_speedup("cpu", rows, d_model, d_inner)
    amp = "bf16" if speedup >= BF16_MIN_SPEEDUP else "off"
    print(f"amp='auto': a bf16 matmul of this model's size runs {speedup:.2f}x fp32 on this CPU -> "
          f"{'bf16 autocast' if amp == 'bf16' else 'fp32'} (amp='off' or 'bf16' chooses)")
    return amp, speedup


def time_training_step(model_cfg: TXLConfig, batch: int, device: torch.device, amp: str, fast_attn: bool,
                       steps: int = 5) -> float:
    """Median seconds of one training step (forward with a full memory, backward, Adam) of a fresh
    ``model_cfg`` model on random ids, under ``amp``: what ``choose_precision`` compares on a GPU,
    where a small model is bound by kernel launches, not by its matmuls."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):  # the caller's RNG untouched
        return _timed_steps(model_cfg, batch, device, amp, fast_attn, steps)


def _timed_steps(model_cfg: TXLConfig, batch: int, device: torch.device, amp: str, fast_attn: bool,
                 steps: int) -> float:
    model = TransformerXL(TXLConfig(**model_cfg.to_dict())).to(device)
    model.fast_attn = fast_attn
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    autocast, scaler = amp_context(amp, device)
    x = torch.randint(0, model_cfg.vocab_size, (batch, model_cfg.tgt_len + 1), device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda *a: None)
    warm = -(-model_cfg.mem_len // model_cfg.tgt_len) + 1  # until the memory is full, and once more
    times, mems = [], None
    for i in range(warm + steps):
        sync(device)
        t0 = time.perf_counter()
        with autocast:
            out = model(x[:, :-1], mems, targets=x[:, 1:])
        scaler.scale(out.loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        mems = out.mems
        sync(device)
        if i >= warm:
            times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def _low_precision(device: torch.device) -> str:
    """The autocast dtype a GPU multiplies fast: bf16 from Ampere on, fp16 (+ loss scaling) before (T4)."""
    return "bf16" if torch.cuda.get_device_capability(device)[0] >= 8 else "fp16"


def _measured_choice(model_cfg: TXLConfig, batch: int, device: torch.device, amps: list[str],
                     paths: list[bool]) -> tuple[str, bool, str]:
    """(amp, fast_attn, reason): the fastest of amps x paths by ``time_training_step``. A candidate
    that runs out of memory is left out (fp32 needs more than bf16)."""
    timed = {}
    for amp in amps:
        for fast_attn in paths:
            try:
                timed[amp, fast_attn] = time_training_step(model_cfg, batch, device, amp, fast_attn)
            except torch.cuda.OutOfMemoryError:
                pass
            finally:
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    if not timed:
        raise RuntimeError(f"every precision ran out of memory for a training step of batch {batch} on {device}. "
                           "Fix: a smaller batch_size or model")
    best = min(timed, key=timed.get)
    name = lambda amp, fast_attn: f"{'fp32' if amp == 'off' else amp} {'fast' if fast_attn else 'explicit'}"  # noqa: E731
    steps = ", ".join(f"{name(*k)} {t * 1e3:.1f} ms" for k, t in timed.items())
    return (*best, f"a training step of this model on {_device_name(device)}: {steps}")


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "this CPU"


def choose_precision(cfg: TrainConfig, model_cfg: TXLConfig, device: torch.device,
                     recorded: Optional[dict] = None) -> dict:
    """What ``train`` runs in: {"amp": "bf16" | "fp16" | "off", "fast_attn": bool, "reason": str}.

    cfg.amp and cfg.attention name a choice, or "auto": measure. On a CPU, bf16 where a matmul of the
    model's feed-forward size runs >= BF16_MIN_SPEEDUP x fp32 (``cpu_precision``), and the fast paths
    (benchmarks/README.md: 1.35x a training step). On a GPU, a few real training steps of each
    candidate (fp32 and the GPU's low precision, fast and explicit attention), the fastest kept:
    small models are launch-bound there, and bf16 came out slower than fp32 on an H100 (issue 30's
    run, torch 2.11). The steps are timed eagerly with torch's default Adam: compile (``compile_mode``)
    and fused Adam, which a CUDA run then uses, change launch counts, not the comparison's purpose.
    With flex_attention the fast path is kept. ``recorded``: the choice a checkpoint holds; a resumed
    "auto" keeps it instead of choosing again. What "auto" chose is printed with its reason."""
    auto_amp, auto_path = cfg.amp == "auto", cfg.attention == "auto"
    if recorded and (auto_amp or auto_path):
        amp = recorded["amp"] if auto_amp else cfg.amp
        fast_attn = recorded["fast_attn"] if auto_path else cfg.attention == "fast"
        print(f"amp/attention 'auto': as when this run started ({recorded['reason']}) -> {_described(amp, fast_attn)}")
        return dict(amp=amp, fast_attn=fast_attn, reason=recorded["reason"])
    amp = None if auto_amp else cfg.amp
    fast_attn = None if auto_path else cfg.attention == "fast"
    if cfg.flex_attention:  # FlexAttention is one of the fast paths
        fast_attn = True
    if device.type != "cpu" and (amp is None or fast_attn is None):  # measured: real steps
        batch = cfg.batch_size // _distributed()[1]
        amps = [_low_precision(device), "off"] if amp is None else [amp]
        paths = [True, False] if fast_attn is None else [fast_attn]
        amp, fast_attn, reason = _measured_choice(model_cfg, batch, device, amps, paths)
        print(f"amp/attention 'auto': {reason} -> {_described(amp, fast_attn)} (amp= or attention= chooses)")
        return dict(amp=amp, fast_attn=fast_attn, reason=reason)
    reason = "as set"  # a CPU: the fast paths (measured once, benchmarks/README.md); bf16 by a matmul
    if amp is None:  # (cpu_precision prints its measurement once per process and size)
        rows = cfg.batch_size // _distributed()[1] * model_cfg.tgt_len  # one rank's rows
        amp, speedup = cpu_precision(rows, model_cfg.d_model, model_cfg.d_inner)
        reason = f"a bf16 matmul of this model's size runs {speedup:.2f}x fp32 on this CPU"
    return dict(amp=amp, fast_attn=True if fast_attn is None else fast_attn, reason=reason)


def _described(amp: str, fast_attn: bool) -> str:
    return (f"{'fp32' if amp == 'off' else amp + ' autocast'}, "
            f"{'fast' if fast_attn else 'explicit'} attention")


def choose_once(cfg: TrainConfig, model_cfg: TXLConfig, device: torch.device, recorded: Optional[dict],
                rank: int, world: int) -> dict:
    """``choose_precision`` by rank 0 alone, its choice sent to every rank of a torchrun launch: the
    same precision and attention path in every replica (ranks measuring each would follow their own
    noise, and a replica in bf16 beside one in fp32 averages gradients of two different models)."""
    choice = choose_precision(cfg, model_cfg, device, recorded) if rank == 0 else None
    if world > 1:
        box = [choice]
        dist.broadcast_object_list(box, src=0)
        choice = box[0]
    return choice


def amp_context(amp: str, device: torch.device) -> tuple[contextlib.AbstractContextManager, torch.amp.GradScaler]:
    """(autocast context, gradient scaler) of a resolved amp ("bf16", "fp16" or "off")."""
    autocast = (contextlib.nullcontext() if amp == "off" else
                torch.autocast(device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16))
    return autocast, torch.amp.GradScaler(device.type, enabled=amp == "fp16")  # fp16 gradients underflow


def _device(cfg: TrainConfig, local_rank: int) -> torch.device:
    return torch.device(default_device(local_rank) if cfg.device == "auto" else cfg.device)


def _loader(corpus: Corpus, cfg: TrainConfig, tgt_len: int, rank: int, world: int,
            device: torch.device) -> LMOrderedIterator:
    """This rank's contiguous block of the batch columns of the training text."""
    per = cfg.batch_size // world
    n_col = len(corpus.train) // cfg.batch_size  # the columns one process would use
    mine = corpus.train[rank * per * n_col:(rank + 1) * per * n_col]
    return LMOrderedIterator(mine, per, tgt_len, device=device)


class Segments(torch.nn.Module):
    """The model as the training loop calls it: the input checks, then ``model.segment``, compiled by
    ``torch.compile`` in ``mode`` ("default", "reduce-overhead"; None: eagerly). The checks run
    eagerly, once per call, so the compiled graph has no break; ``ids_checked=True`` (the loop
    checked the whole training text once) leaves out the ids' range, the one check that reads
    values, so that a step never waits for the GPU. Where compiling fails (no C++ compiler, an
    unsupported platform) it says so in one line and runs the model eagerly."""

    def __init__(self, model: TransformerXL, mode: Optional[str] = None, ids_checked: bool = False):
        super().__init__()
        self.model, self.mode, self.ids_checked = model, mode, ids_checked
        self.compiled = None if mode is None else fast.compile_segment(model, mode)

    def forward(self, tokens: torch.Tensor, mems=None, targets=None):
        validation.check_inputs(self.model, tokens, mems, targets, ids=not self.ids_checked)
        if self.compiled is None:
            return self.model.segment(tokens, mems, targets)
        try:
            return self.compiled(tokens, mems, targets)
        except Exception as e:  # the compiler, not the inputs (checked above): go on without it
            if not _is_compiler_error(e):
                raise
            print(f"torch.compile is not available here ({type(e).__name__}: {str(e).splitlines()[0][:120]}); "
                  "training without it")
            self.compiled = None
            return self.model.segment(tokens, mems, targets)


class CompiledSegments(Segments):
    """``Segments`` compiled in torch.compile's default mode, every input checked at each call."""

    def __init__(self, model: TransformerXL, mode: str = "default"):
        super().__init__(model, mode)


def compile_mode(cfg: TrainConfig, device: torch.device) -> Optional[str]:
    """torch.compile's mode for ``cfg.compile`` on ``device``, or None (eager). "auto" compiles on CUDA
    where triton (inductor's GPU code generator) is installed: on an H100 a compiled gpu-small step
    ran 1.69x and a paper-base step 1.20x the eager one in bf16 (issue 30); a CPU stays eager (minutes
    of compiling for tiny models, not measured to pay). True: the default mode on any device;
    "reduce-overhead": the default plus CUDA graphs, one launch per graph (small, launch-bound shapes)."""
    if cfg.compile is False or (cfg.compile == "auto" and not (device.type == "cuda" and _has_triton())):
        return None
    return "default" if cfg.compile in (True, "auto") else cfg.compile


def _has_triton() -> bool:
    try:
        from torch.utils._triton import has_triton
    except ImportError:  # (a torch without it has no triton either)
        return False
    return has_triton()


@functools.cache
def _fused_adam_runs(device: str) -> bool:
    """Whether this torch has fused Adam on ``device`` (CUDA; a CPU from torch 2.4 on). Tried on that
    device itself: a DDP rank must not touch another rank's GPU."""
    try:
        torch.optim.Adam([torch.zeros(1, device=device, requires_grad=True)], fused=True)
    except (RuntimeError, ValueError):
        return False
    return True


def adam_options(choice: str, device: torch.device) -> dict:
    """The keywords of ``torch.optim.Adam`` for TrainConfig.adam: "auto" is fused on CUDA (one kernel
    updates every parameter) and foreach elsewhere (a few kernels per step for all the tensors; on a
    CPU, bit for bit the numbers of torch's default there, the for-loop, in a seventh of its time for
    a 2-layer d_model 64 model). Every choice keeps the checkpoint's optimiser state loadable by the others."""
    if choice == "auto":
        choice = "fused" if device.type == "cuda" and _fused_adam_runs(str(device)) else "foreach"
    if choice == "fused" and not _fused_adam_runs(str(device)):
        raise ValueError(f"TrainConfig.adam='fused': torch {torch.__version__} has no fused Adam on {device.type}. "
                         "Fix: adam='auto' or 'foreach' (--set adam=foreach)")
    return dict(fused=True) if choice == "fused" else dict(foreach=choice == "foreach")


def _keep_implementation(saved: dict, opt: torch.optim.Optimizer) -> dict:
    """A saved optimiser state with this run's implementation flags (fused, foreach): torch would
    otherwise take the saved run's, and place Adam's step counters for those."""
    flags = {k: opt.param_groups[0][k] for k in ("fused", "foreach") if k in opt.param_groups[0]}
    return dict(saved, param_groups=[dict(g, **flags) for g in saved["param_groups"]])


class _LossMeter:
    """The mean NLL of each step since the last log row, kept on the device and read back once
    per row: a ``.item()`` per step would make the CPU wait for the GPU at every step."""

    def __init__(self):
        self.steps: list[torch.Tensor] = []

    def add(self, nll: torch.Tensor) -> None:
        self.steps.append(nll.detach().mean())

    def mean(self, world: int, device: torch.device) -> float:
        """The row's mean over the whole batch (every rank's), as the per-step floats always gave it."""
        losses = torch.stack(self.steps).tolist()  # the row's one read back from the device
        self.steps = []
        return _mean_loss(losses, world, device)


def _is_compiler_error(e: Exception) -> bool:
    """An error of torch.compile's machinery (dynamo, inductor, the C++ toolchain), not of the model.
    A CUDA error is the model's (its message ends "Compile with `TORCH_USE_CUDA_DSA`": no fallback)."""
    module = type(e).__module__ or ""
    if module.startswith(("torch._dynamo", "torch._inductor")):
        return True
    text = str(e)
    if "CUDA error" in text or "device-side assert" in text or isinstance(e, torch.cuda.OutOfMemoryError):
        return False
    return isinstance(e, (OSError, RuntimeError)) and ("compile" in text.lower() or "inductor" in text.lower())


def _wrap(model: TransformerXL, mode: Optional[str], world: int, device: torch.device) -> torch.nn.Module:
    """The model as the loop calls it: ``Segments`` (compiled in ``mode``; the ids were checked
    once, see ``train``), in DDP under torchrun."""
    model = Segments(model, mode, ids_checked=True)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    return model


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
# (_follow_schedule), the evaluation and logging, precision, compilation and the device. The model
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


def _follow_schedule(opt: torch.optim.Optimizer, sched: torch.optim.lr_scheduler.LambdaLR,
                     cfg: TrainConfig) -> None:
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


def _gather(tensor: torch.Tensor, world: int) -> torch.Tensor:
    """Concatenate every rank's rows (dim 0): the full batch, as one process would hold it."""
    if world == 1:
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts)


def _save(path: Path, parts: dict, configs: dict, step: int, epoch: int, segment: int,
          mems: Optional[list[torch.Tensor]], wall_time_s: float, rank: int, world: int, best: dict) -> None:
    """Write the checkpoint a bit-exact resume needs (``best``: the step and valid bpc of best.pt, so that
    a resumed run replaces it only when an uninterrupted one would). Every rank takes part in the
    gathers (full-batch memory, each rank's RNG state); rank 0 writes."""
    full_mems = None if mems is None or mems[0].size(1) == 0 else [_gather(m, world).cpu() for m in mems]
    device = next(parts["model"].parameters()).device
    rngs = [rng_state(device)]
    if world > 1:
        rngs = [None] * world
        dist.all_gather_object(rngs, rng_state(device))
    if rank == 0:
        states = {key: part.state_dict() for key, part in parts.items()}
        try:
            save_checkpoint(dict(format=1, **states, **configs, step=step, data=dict(epoch=epoch, segment=segment),
                                 mems=full_mems, rng=rngs, wall_time_s=wall_time_s, best=best), path)
        except WriteError as e:  # a full disk: say which checkpoint survives, and how to go on
            what = (f"no space left on the disk holding {path.parent} for the checkpoint of step {step}"
                    if e.errno in NO_SPACE else
                    f"the checkpoint of step {step} could not be written in {path.parent} ({e.reason})")
            raise WriteError(f"{what}. {_last_checkpoint(path)} Fix: free some disk space (or make {path.parent} "
                             "writable), then run the same command with --resume", e.errno, e.reason) from None


def _last_checkpoint(path: Path) -> str:
    """What a failed save left: the earlier checkpoint (its step) or none."""
    try:
        step = torch.load(path, map_location="cpu", weights_only=True, mmap=True)["step"]
    except FileNotFoundError:
        return f"No checkpoint was saved before this one: {path} does not exist yet."
    except Exception:  # noqa: BLE001 (only a message depends on it)
        return f"{path} holds the previous checkpoint."
    return f"The last checkpoint (step {step}) is intact in {path}: --resume continues from it."


NO_BEST = dict(step=0, valid_bpc=None)  # no periodic evaluation yet (None: a checkpoint holds no inf)


def _improves(valid_bpc: float, best: dict) -> bool:
    """True if ``valid_bpc`` (finite) is lower than the best so far (strictly: a tie keeps the earlier)."""
    return math.isfinite(valid_bpc) and (best["valid_bpc"] is None or valid_bpc < best["valid_bpc"])


def _save_best(path: Path, model: TransformerXL, configs: dict, step: int, valid_bpc: float,
               wall_time_s: float) -> None:
    """OUT/best.pt: the weights of a new best evaluation with the configs, step and valid bpc (what
    ``load`` and ``python -m txl_minimal.evaluate`` read), written atomically (rank 0 only)."""
    weights = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    save_checkpoint(dict(model=weights, **configs, step=step, valid_bpc=valid_bpc, wall_time_s=wall_time_s), path)


def _valid_bpc(model: TransformerXL, valid, cfg: TrainConfig, autocast: contextlib.AbstractContextManager) -> float:
    """The periodic evaluation: bpc of the valid prefix with the cfg.eval_* settings."""
    with autocast:
        return evaluate(model, valid, cfg.eval_batch_size, cfg.eval_tgt_len, cfg.eval_mem_len,
                        cfg.eval_clamp_len, cfg.eval_same_length, cfg.eval_tokens)["bpc"]


def training_loss(out: TXLOutput, loss_positions: str = "full", adaptive_span: bool = False) -> torch.Tensor:
    """What a step minimises: ``out.loss`` ("full"), or with "half" the mean NLL of the segment's
    later half (positions T // 2 .. T - 1), plus the span penalty if the model has adaptive spans."""
    if loss_positions == "full":
        return out.loss
    kept = out.nll[:, out.nll.size(1) // 2:].mean()
    if adaptive_span:  # out.loss = the mean NLL + the penalty: keep the penalty
        kept = kept + (out.loss - out.nll.mean())
    return kept


def _mean_loss(losses: list[float], world: int, device: torch.device) -> float:
    """Mean NLL since the last log row, over the whole batch (every rank's columns)."""
    mean = torch.tensor(sum(losses) / len(losses), dtype=torch.float64, device=device)
    if world > 1:
        dist.all_reduce(mean)
        mean /= world
    return mean.item()


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
        except OSError as e:
            problem = write_problem(e, self.path)
            if problem is None:
                raise
            raise problem from None

    def close(self) -> None:
        if self.file is not None:
            try:
                self.file.close()
            except OSError:  # a full disk: the row's write already said so
                pass


def _check_replicas_agree(model: TransformerXL, world: int) -> None:
    """The whole point of DDP: every replica ends with the same weights."""
    if world == 1:
        return
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    biggest, smallest = flat.clone(), flat.clone()
    dist.all_reduce(biggest, dist.ReduceOp.MAX)
    dist.all_reduce(smallest, dist.ReduceOp.MIN)
    if not torch.equal(biggest, smallest):
        raise RuntimeError("DDP ranks ended with different weights; this is a bug")


# ----------------------------------------------------------------------------- one run per --out, Ctrl-C

class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``train``: the step in progress was finished and saved in ``path``."""

    def __init__(self, step: int, path: Path):
        super().__init__(f"training interrupted at step {step}: {path} holds that step. "
                         "Resume with --resume (train(..., resume=True)), which continues bit-exactly.")
        self.step, self.path = step, path


class _Stop:
    """Set by the first Ctrl-C (SIGINT) while ``train`` runs: the loop saves after the current step."""

    requested = False


def _on_sigint(signum, frame) -> None:
    if _Stop.requested:  # a second Ctrl-C: stop at once, without a checkpoint
        raise KeyboardInterrupt
    _Stop.requested = True
    print("\nCtrl-C: finishing this step and saving a checkpoint (Ctrl-C again to stop without one)",
          file=sys.stderr, flush=True)


def _check_out_is_folder(out_dir: Path) -> None:
    """FileExistsError if ``out_dir`` or a folder above it is a file."""
    for path in (out_dir, *out_dir.parents):
        if path.exists():
            if not path.is_dir():
                raise FileExistsError(f"--out {out_dir}: {path} is a file, but --out must be a folder (the run's "
                                      "ckpt.pt and log.csv go in it). Fix: name a new or existing folder.")
            return


def _read_lock(path: Path) -> Optional[dict]:
    """The holder a lock file names, or None if it is unreadable (waits 1 s for a lock being written)."""
    for _ in range(10):
        try:
            holder = json.loads(path.read_text())
            if isinstance(holder, dict) and {"pid", "host", "started"} <= set(holder):
                return holder
        except FileNotFoundError:
            return {}
        except (ValueError, OSError):
            pass
        time.sleep(0.1)
    return None


def _is_stale(holder: Optional[dict]) -> bool:
    """A lock nobody holds any more: unreadable, or its process on this host has ended."""
    if holder is None:
        return True
    if holder.get("host") != socket.gethostname():
        return False  # another machine's process: we cannot tell
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, OverflowError):  # PermissionError: alive, another user's
        pass
    return False


def _lock_out(out_dir: Path) -> Path:
    """Create OUT/train.lock with O_CREAT|O_EXCL, holding this process's pid, host and start time:
    of two trainings started together exactly one gets it, the other gets a FileExistsError
    naming the holder. A lock whose process has ended (killed, crashed) is taken over, with a message."""
    _check_out_is_folder(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / LOCK
    me = dict(pid=os.getpid(), host=socket.gethostname(), started=time.strftime("%Y-%m-%d %H:%M:%S %Z"))
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _read_lock(path)
            if holder == {}:  # released while we looked
                continue
            if not _is_stale(holder):
                raise FileExistsError(
                    f"{out_dir}/ is in use by another training (pid {holder['pid']} on {holder['host']}, started "
                    f"{holder['started']}; see {path}). Fix: wait for it to end, or use another --out; if that "
                    f"process is not a training of this folder any more, delete {path}.") from None
            what = "an unreadable lock" if holder is None else \
                f"the lock of pid {holder['pid']} (started {holder['started']}), which is no longer running"
            print(f"{out_dir}/: taking over {what}", file=sys.stderr, flush=True)
            if _read_lock(path) == holder:  # not replaced meanwhile by a live run
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
    if (_read_lock(path) or {}).get("pid") == os.getpid():
        path.unlink(missing_ok=True)


def _one_run_per_out(train_fn):
    """``train`` holding OUT/train.lock (rank 0), with Ctrl-C saving the step in progress (one process)."""
    @functools.wraps(train_fn)
    def run(model_cfg: TXLConfig, cfg: TrainConfig, *args, **kwargs) -> TrainResult:
        replace(cfg)  # an impossible config is refused before anything is written
        rank, world, _ = _distributed()
        out_dir = Path(cfg.out)
        created = not out_dir.exists()
        try:
            lock = _lock_out(out_dir) if rank == 0 else None
        except OSError as e:  # a read-only or forbidden folder: not a traceback from mkdir
            problem = write_problem(e, out_dir / LOCK)
            if problem is None:
                raise
            fix = ("free some disk space, or choose --out on another disk" if problem.errno in NO_SPACE else
                   "choose a folder you can write to with --out (TrainConfig.out)")
            raise WriteError(f"cannot write in --out {out_dir} ({problem.reason}). Fix: {fix}",
                             problem.errno, problem.reason) from None
        catch = (world == 1 and threading.current_thread() is threading.main_thread()
                 and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN)  # started to ignore Ctrl-C: keep that
        previous = signal.signal(signal.SIGINT, _on_sigint) if catch else None
        _Stop.requested = False
        try:
            return train_fn(model_cfg, cfg, *args, **kwargs)
        finally:
            if catch:
                signal.signal(signal.SIGINT, previous)
            _Stop.requested = False
            if lock is not None:
                _unlock(lock)
                if created and not any(out_dir.iterdir()):  # refused before writing: leave no trace
                    out_dir.rmdir()
    return run


def _finished(model: TransformerXL, step: int, end: int, cfg: TrainConfig, out_dir: Path, best: dict) -> TrainResult:
    """What ``train(resume=True)`` returns for a run already at its last step ``end``, after saying so."""
    try:  # the log only supplies the last numbers shown
        rows = _log_rows(out_dir / "log.csv", step) if (out_dir / "log.csv").exists() else []
    except ValueError:
        rows = []

    def last(key: str) -> float:
        return next((float(r[key]) for r in reversed(rows) if r.get(key)), float("nan"))

    if end < cfg.max_steps:  # stop_at / --stop-at at or before the checkpoint
        print(f"{out_dir}/ is at step {step}, already past --stop-at {end}; nothing to train. "
              f"Fix: a later --stop-at, or none to go on to max_steps {cfg.max_steps}.")
    else:
        print(f"{out_dir}/ holds a complete run: step {step} of max_steps {cfg.max_steps}; nothing to train. "
              f"To train it longer, resume with a higher limit: --resume --max-steps {2 * step} "
              "(train(..., resume=True) with TrainConfig.max_steps raised).")
    return TrainResult(model.eval(), step, last("train_bpc"), last("valid_bpc"), 0.0, 0.0, out_dir, complete=True,
                       unit=getattr(model, "unit", "character"),  # a word run reports perplexity
                       **_best_fields(best))



def _best_fields(best: dict) -> dict:
    """TrainResult's best_valid_bpc and best_step from the ``best`` a checkpoint keeps."""
    return dict(best_valid_bpc=float("nan") if best["valid_bpc"] is None else best["valid_bpc"],
                best_step=best["step"])


def _resume_command(argv: list[str]) -> str:
    """The command line that continues an interrupted one."""
    args = [a for a in argv if a not in ("--overwrite", "--resume")]
    return shlex.join([sys.executable.rsplit("/", 1)[-1], "-m", "txl_minimal.train", *args, "--resume"])


# ----------------------------------------------------------------------------- training

def _last_step(cfg: TrainConfig, stop_at: Optional[int]) -> int:
    """The step training ends at: ``max_steps``, or ``stop_at`` if earlier (as if interrupted)."""
    replace(cfg)  # validates again: a field may have been changed since the config was made
    if stop_at is not None and (as_int(stop_at) is None or as_int(stop_at) < 1):
        raise ValueError(f"stop_at must be a positive integer or None, got {stop_at!r}")
    return min(cfg.max_steps, as_int(stop_at) or cfg.max_steps)


@_one_run_per_out
def train(model_cfg: TXLConfig, cfg: TrainConfig, corpus: Optional[Corpus] = None,
          resume: bool = False, stop_at: Optional[int] = None, progress: bool = True,
          overwrite: bool = False, print_evals: bool = False) -> TrainResult:
    """Train a TransformerXL; writes ``cfg.out``/ckpt.pt (the last state), best.pt and log.csv.

    resume: continue from ckpt.pt (weights, optimiser, schedule, RNG, data position and memory,
    so the run ends as if never interrupted). overwrite: replace the run in ``cfg.out`` (without
    either, a run there is refused before anything is written). stop_at: end after that many steps
    with a checkpoint, as if interrupted. progress: a bar and a line per evaluation; print_evals:
    those lines without the bar. Under torchrun each rank reads its own block of batch columns.
    best.pt holds the weights of the best periodic evaluation (every eval_interval steps and at
    max_steps; not a stop_at's): ``TrainResult.best_model()`` loads it."""
    end = _last_step(cfg, stop_at)
    rank, world, local = _distributed()
    out_dir = Path(cfg.out)
    ckpt_path = out_dir / LAST
    _claim_out(out_dir, resume, overwrite, rank)
    device = _device(cfg, local)
    if cfg.flex_attention and device.type != "cuda":  # torch has no FlexAttention backward on a CPU
        raise ValueError(f"flex_attention=True trains on a CUDA GPU only (torch has no FlexAttention backward on "
                         f"{device.type}). Fix: --set flex_attention=false, or train on a GPU")
    _init_distributed(device, world, cfg.batch_size)
    # on the CPU: the RNG states must stay CPU tensors, and each part moves its own state to its device
    try:
        ckpt = load_checkpoint(ckpt_path, model_cfg, map_location="cpu") if resume else None
    except ConfigMismatch as e:  # a --set of a model field: say what a resume may change
        raise ConfigMismatch(f"{e} {RESUME_MAY_CHANGE}") from None
    # precision and attention path: chosen (measured) once, by rank 0, and kept by a resume
    choice = choose_once(cfg, model_cfg, device, ckpt and ckpt.get("choice"), rank, world)
    autocast, scaler = amp_context(choice["amp"], device)
    seed_everything(cfg.seed)
    raw = TransformerXL(TXLConfig(**model_cfg.to_dict())).to(device)  # a copy: evaluate mutates lengths
    raw.fast_attn = choice["fast_attn"]
    raw.flex_attn = cfg.flex_attention
    torch.manual_seed(cfg.seed + rank)  # dropout masks differ between ranks
    opt = torch.optim.Adam(raw.parameters(), lr=cfg.lr, **adam_options(cfg.adam, device))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_at(i + 1, cfg) / cfg.lr)
    parts = dict(model=raw, optimizer=opt, scheduler=sched, scaler=scaler)  # what a checkpoint restores
    corpus = corpus if corpus is not None else load_corpus(cfg.corpus)  # $TXL_CORPUS, "auto": see data.py
    if model_cfg.vocab_size < corpus.vocab_size:  # else an IndexError deep inside the embedding
        raise ValueError(f"TXLConfig.vocab_size is {model_cfg.vocab_size:,} but {corpus.name} has "
                         f"{corpus.vocab_size:,} symbols. Fix: --set vocab_size={corpus.vocab_size}")
    unit = score_name(corpus.unit)  # what the log lines call their numbers: bpc or ppl
    configs = dict(model_config=model_cfg.to_dict(), train_config=dict(asdict(cfg), corpus=corpus.name), choice=choice,
                   vocab=vocab_entry(corpus.unit, corpus.vocab))  # what the ids mean: evaluate and generate check it
    attach_vocab(raw, configs["vocab"])
    best_path = out_dir / BEST
    step, epoch, segment, elapsed, mems, best = 0, 0, 0, 0.0, None, dict(NO_BEST)
    if resume:
        step, epoch, segment, elapsed, mems, best = _resume(ckpt, ckpt_path, configs, parts, rank, world, device)
        _follow_schedule(opt, sched, cfg)
        if step >= end:  # a finished run: say so, rather than log a run of no steps
            return _finished(raw, step, end, cfg, out_dir, best)
    loader = _loader(corpus, cfg, model_cfg.tgt_len, rank, world, device)
    validation.check_ids(loader.data, model_cfg.vocab_size, f"{corpus.name}'s token")  # once: not every step
    batches = itertools.islice(iter(loader), segment, None)  # resume: skip what was read
    mode = compile_mode(cfg, device)
    if mode and cfg.compile == "auto" and rank == 0 and (progress or print_evals):
        print("compile='auto': each segment is compiled (torch.compile) on this GPU; the first steps take "
              "longer (--set compile=false: eager)")
    model = _wrap(raw, mode, world, device)
    _replace_old_run(out_dir, overwrite, rank)  # every check passed: only now is an old run replaced
    log = CSVLog(out_dir / "log.csv", resume, step, write=rank == 0)
    quiet = {} if progress and rank == 0 else {"disable": True}  # shown: TQDM_DISABLE=1 still hides it
    bar = tqdm(total=cfg.max_steps, initial=step, mininterval=1.0, dynamic_ncols=True, **quiet)
    tokens_per_step = cfg.batch_size * model_cfg.tgt_len
    losses, t_train, n_tok, valid_bpc, train_bpc, tok_s = _LossMeter(), 0.0, 0, float("nan"), float("nan"), 0.0
    t_wall = time.perf_counter()
    while step < end:
        t0 = time.perf_counter()
        if (batch := next(batches, None)) is None:  # a new pass over the data: fresh memory
            epoch, segment, mems, batches = epoch + 1, 0, None, iter(loader)
            batch = next(batches)
        x, y = batch
        with autocast:
            out = model(x, mems, targets=y)
        mems = out.mems  # the memory carried to the next segment (detached by the model)
        scaler.scale(training_loss(out, cfg.loss_positions, model_cfg.adaptive_span)).backward()
        scaler.unscale_(opt)  # clip the true gradients
        torch.nn.utils.clip_grad_norm_(raw.parameters(), cfg.grad_clip)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        sched.step()
        step, segment = step + 1, segment + 1
        losses.add(out.nll)  # the NLL alone (loss may add a span penalty), left on the device
        do_eval = step % cfg.eval_interval == 0 or step == end
        log_row = step % cfg.log_interval == 0 or do_eval
        if log_row:  # read back here, inside the timed step: the GPU has finished the row's steps
            train_bpc = losses.mean(world, device) / LN2
        t_train += time.perf_counter() - t0
        n_tok += tokens_per_step

        if log_row:
            tok_s = n_tok / max(t_train, 1e-9)
            bar.set_postfix(loss=f"{train_bpc * LN2:.3f}", **{unit: f"{score_of(train_bpc * LN2, corpus.unit):.3f}"},
                            tok_s=f"{tok_s:,.0f}")
            if do_eval and rank == 0:
                valid_bpc = _valid_bpc(raw, corpus.valid, cfg, autocast)
                if progress or print_evals:
                    bar.write(f"step {step}: train {unit} {score_of(train_bpc * LN2, corpus.unit):.3f}, "
                              f"valid {unit} {score_of(valid_bpc * LN2, corpus.unit):.3f}")
                    sys.stdout.flush()  # at once, also into a log file
            log.write(step, step * tokens_per_step, elapsed + time.perf_counter() - t_wall, lr_at(step, cfg), train_bpc,
                      valid_bpc if do_eval else None)
        if do_eval:
            elapsed, t_wall = elapsed + time.perf_counter() - t_wall, time.perf_counter()
            # only periodic evaluations compete (not stop_at's extra one), so that a resumed run keeps
            # the best.pt an uninterrupted one would; written before ckpt.pt, which names it
            periodic = step % cfg.eval_interval == 0 or step == cfg.max_steps
            if periodic and rank == 0 and _improves(valid_bpc, best):
                best = dict(step=step, valid_bpc=valid_bpc)
                _save_best(best_path, raw, configs, step, valid_bpc, elapsed)
            _save(ckpt_path, parts, configs, step, epoch, segment, mems, elapsed, rank, world, best)
        bar.update(1)
        if _Stop.requested:  # Ctrl-C: keep the step just finished (an evaluation step is saved already)
            if not do_eval:
                elapsed, t_wall = elapsed + time.perf_counter() - t_wall, time.perf_counter()
                _save(ckpt_path, parts, configs, step, epoch, segment, mems, elapsed, rank, world, best)
            break
    bar.close()
    log.close()
    if _Stop.requested:
        raise TrainingInterrupted(step, ckpt_path)
    _check_replicas_agree(raw, world)
    raw.eval()
    return TrainResult(raw, step, train_bpc, valid_bpc, tok_s, elapsed, out_dir, unit=corpus.unit,
                       **_best_fields(best))


# ----------------------------------------------------------------------------- command line

FIELD_TYPES = {f.name: f.type for config in (TXLConfig, TrainConfig) for f in fields(config)}
BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _parse_value(key: str, text: str):
    """A --set value: for a bool field true/false, yes/no or 1/0 (any case); else a Python
    literal (3, 0.1, None) or the plain string (text8-mini)."""
    if key == "compile" and text in COMPILE_MODES:
        return text
    if "bool" in FIELD_TYPES.get(key, ""):
        if text.lower() == "none" and FIELD_TYPES[key].startswith("Optional"):
            return None
        if text.lower() not in BOOLS:
            modes = f", or one of {', '.join(COMPILE_MODES)}" if key == "compile" else ""
            raise ValueError(f"--set {key}={text}: {key} is true or false (also yes/no, 1/0){modes}")
        return BOOLS[text.lower()]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _saved_max_steps(path: Path) -> Optional[int]:
    """The max_steps a run's checkpoint was trained towards, or None (no readable checkpoint: ``train``
    then says what is wrong with it)."""
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["train_config"]["max_steps"])
    except Exception:  # noqa: BLE001 (train() loads it again and names the damage)
        return None


def main(argv: Optional[list[str]] = None) -> None:
    """The command line: train a preset, with any field changed by --set KEY=VALUE."""
    p = argparse.ArgumentParser(prog="python -m txl_minimal.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="cpu-tiny", choices=sorted(PRESETS))
    p.add_argument("--out", help="run directory (ckpt.pt, log.csv)")
    p.add_argument("--max-steps", type=int_at_least(1))
    p.add_argument("--batch-size", type=int_at_least(1))
    p.add_argument("--corpus", choices=CORPORA)
    p.add_argument("--device")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile each segment on any device (TrainConfig.compile; its default, 'auto', "
                        "compiles on CUDA only; --set compile=reduce-overhead: CUDA graphs too)")
    p.add_argument("--amp", choices=CHOICES["amp"], help="autocast: auto (bf16 where measured faster), bf16, fp16, off")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="any TXLConfig/TrainConfig field, e.g. attn_type=abs mem_len=0 (the vanilla baseline), "
                        "lr=5e-4, amp=bf16, seed=1, compile=true")
    again = p.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="continue the run in OUT (from OUT/ckpt.pt)")
    again.add_argument("--overwrite", action="store_true", help="replace the run in OUT (its ckpt.pt, log.csv)")
    p.add_argument("--stop-at", type=int_at_least(1), help="stop after this step, as if interrupted")
    p.add_argument("--threads", type=int_at_least(1), help="torch.set_num_threads")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (the evaluation lines remain)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = {k: v for k, v in dict(out=args.out, max_steps=args.max_steps, batch_size=args.batch_size,
                                       corpus=args.corpus, device=args.device, amp=args.amp,
                                       compile=args.compile or None).items() if v is not None}
    try:
        for item in args.set:
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
            key = key.replace("-", "_")
            overrides[key] = _parse_value(key, value)
        model_cfg, train_cfg = preset(args.preset, **overrides)
        corpus = None
        saved = _saved_max_steps(Path(train_cfg.out) / LAST) if args.resume and "max_steps" not in overrides else None
        if saved is not None:  # a resume without --max-steps goes on to the run's own end (its schedule)
            train_cfg = replace(train_cfg, max_steps=saved)
        elif "max_steps" not in overrides:  # a preset on a smaller corpus than its own: fewer steps, said once
            corpus = load_corpus(train_cfg.corpus)
            train_cfg, note = sized_to_corpus(args.preset, model_cfg, train_cfg, corpus)
            if note and _distributed()[0] == 0:
                print(f"{note}; --max-steps sets another")
        res = train(model_cfg, train_cfg, corpus, resume=args.resume, stop_at=args.stop_at, overwrite=args.overwrite,
                    progress=terminal_progress(not args.no_progress), print_evals=True)
    except (ValueError, FileExistsError, FileNotFoundError, CorpusError) as e:  # bad input: no traceback
        p.error(str(e))
    except WriteError as e:  # a full disk, a read-only --out: what survives and what to do
        sys.exit(f"error: {e}")
    except TrainingInterrupted as e:  # Ctrl-C: saved; say how to go on
        print(f"{e}\n  {_resume_command(sys.argv[1:] if argv is None else argv)}", file=sys.stderr)
        sys.exit(130)
    if res.complete:
        return
    if _distributed()[0] == 0:
        (name, train_score), (_, valid_score), (_, best) = res.score("train"), res.score("valid"), res.score("best")
        kept = f" (best.pt: valid {name} {best:.4f} at step {res.best_step})" if res.best_step else ""
        print(f"step {res.step}: train {name} {train_score:.4f}, valid {name} {valid_score:.4f}, "
              f"{res.tokens_per_s:,.0f} tokens/s, {res.wall_time_s:.0f} s -> {res.out}{kept}")
    if dist.is_initialized():
        # Free the DDP wrapper (held in reference cycles) while its process group still exists:
        # left to the interpreter's exit, gloo's threads aborted a rank now and then.
        del res
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
