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
Every ``eval_interval`` steps the valid bpc (words: perplexity) is measured and OUT/ckpt.pt written;
``python -m txl_minimal.evaluate OUT`` scores a run afterwards. A run already in OUT
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
import itertools
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
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Optional

import torch
import torch.distributed as dist
from tqdm import tqdm

from txl_minimal.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from txl_minimal.data import CORPORA, Corpus, CorpusError, LMOrderedIterator, load_corpus
from txl_minimal.evaluate import evaluate
from txl_minimal.model import TransformerXL, TXLConfig
from txl_minimal.utils import (LN2, bf16_speedup, default_device, int_at_least, remove_leftovers, score_name,
                               score_of, seed_everything, terminal_progress)

CSV_COLUMNS = ("step", "tokens", "wall_time_s", "lr", "train_loss", "train_bpc", "valid_bpc")
RUN_FILES = ("ckpt.pt", "log.csv")  # what a run writes in its --out directory
LOCK = "train.lock"  # OUT/train.lock: the pid, host and start of the training writing there
CHOICES = dict(corpus=CORPORA, amp=("auto", "bf16", "fp16", "off"))


@dataclass
class TrainConfig:
    """Optimisation and bookkeeping; the model's hyper-parameters live in TXLConfig."""

    corpus: str = "text8-mini"  # "text8" | "text8-mini" | "auto" | words: "text8-mini-words" | "wt103" | "wt2"
    batch_size: int = 16  # global: split over the DDP ranks
    lr: float = 1e-3
    min_lr: float = 0.0  # cosine floor (the authors' eta_min)
    warmup_steps: int = 200
    max_steps: int = 5000
    grad_clip: float = 0.25  # the paper's value
    eval_interval: int = 500
    eval_tokens: Optional[int] = 32768  # valid prefix scored at each evaluation (None: all)
    eval_batch_size: int = 8
    eval_tgt_len: Optional[int] = None  # evaluation lengths (None: the training ones)
    eval_mem_len: Optional[int] = None
    eval_clamp_len: Optional[int] = None
    eval_same_length: Optional[bool] = None
    log_interval: int = 50  # steps per CSV row
    seed: int = 0
    out: str = "runs/default"  # ckpt.pt and log.csv go here
    amp: str = "auto"  # "auto" (CUDA: bf16, fp16 before Ampere; CPU: bf16 only where a measured matmul of the model's size is faster, fp32 otherwise: benchmarks/README.md) | "bf16" | "fp16" | "off" (fp32)
    compile: bool = False  # torch.compile each segment (falls back to eager, with one line, where it cannot)
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
            if kind == "int" and (type(value) is not int or value < low):
                raise ValueError(f"TrainConfig.{f.name} must be an integer >= {low}, got {value!r}")
            if kind == "bool" and not isinstance(value, bool):
                raise ValueError(f"TrainConfig.{f.name} must be True or False, got {value!r}")
            if kind == "float" and (type(value) not in (int, float) or not math.isfinite(value)
                                    or value < 0 or (value == 0 and low)):  # lr 0: a division by zero
                raise ValueError(f"TrainConfig.{f.name} must be a number {'>' if low else '>='} 0, got {value!r}")
            if kind == "str" and not isinstance(value, str):
                raise ValueError(f"TrainConfig.{f.name} must be a string, got {value!r}")
            if f.name in CHOICES and value not in CHOICES[f.name]:
                raise ValueError(f"TrainConfig.{f.name} must be one of {CHOICES[f.name]}, got {value!r}")
        if self.min_lr > self.lr:
            raise ValueError(f"TrainConfig.min_lr ({self.min_lr}) must not exceed lr ({self.lr})")
        if self.device != "auto":
            try:
                device = torch.device(self.device)
            except RuntimeError:  # torch lists every device type it knows
                raise ValueError(f"TrainConfig.device must be 'auto', 'cpu', 'cuda' or 'cuda:N', "
                                 f"got {self.device!r}") from None
            if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
                raise ValueError(f"TrainConfig.device is {self.device!r}, but torch sees {torch.cuda.device_count()} "
                                 "GPU(s). Fix: device='auto' (a GPU if there is one) or 'cpu' (--device cpu)")


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
    # One Colab-class GPU, about an hour on full text8 (an estimate: never run here).
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

    def score(self, which: str = "valid") -> tuple[str, float]:
        """("bpc", value) for characters, ("ppl", value) for words, of the train or valid figure."""
        bpc = self.valid_bpc if which == "valid" else self.train_bpc
        return score_name(self.unit), score_of(bpc * LN2, self.unit)


def _distributed() -> tuple[int, int, int]:
    """(rank, world_size, local_rank); torchrun sets the environment variables."""
    if "RANK" not in os.environ:
        return 0, 1, 0
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))


def _claim_out(out_dir: Path, resume: bool, overwrite: bool, rank: int) -> None:
    """Refuse to replace the run in ``out_dir`` unless told to; remove what a killed run left.
    Every rank checks before the process group forms (no rank has written anything yet)."""
    if resume and overwrite:
        raise ValueError("resume continues the run in --out, overwrite replaces it: choose one")
    found = [name for name in RUN_FILES if (out_dir / name).exists()]
    if found and not (resume or overwrite):
        raise FileExistsError(f"{out_dir}/ already holds a run ({', '.join(found)}) that training would overwrite. "
                              "Fix: --resume to continue it, --overwrite to replace it (train(..., resume=True) "
                              "or overwrite=True), or another --out directory.")
    if rank == 0:
        remove_leftovers(out_dir, "ckpt.pt.*.tmp")  # a checkpoint write killed mid-way (utils.atomic_write)
        for name in found if overwrite else ():  # no stale checkpoint beside the new log
            (out_dir / name).unlink()


def _init_distributed(device: torch.device, world: int, batch_size: int) -> None:
    """Join the process group of a torchrun launch (nothing to do for one process)."""
    if batch_size % world:
        raise ValueError(f"batch_size {batch_size} must be divisible by the {world} processes")
    if world > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")


BF16_MIN_SPEEDUP = 1.2  # amp="auto" on a CPU: bf16 only where its matmul is clearly faster


@functools.lru_cache(maxsize=None)
def cpu_precision(rows: int, d_model: int, d_inner: int) -> tuple[str, float]:
    """amp="auto" on a CPU: ("bf16" or "off", the measured speed-up of a bf16 matmul of the
    feed-forward's size over fp32). Measured once per process and size, and printed."""
    speedup = bf16_speedup("cpu", rows, d_model, d_inner)
    amp = "bf16" if speedup >= BF16_MIN_SPEEDUP else "off"
    print(f"amp='auto': a bf16 matmul of this model's size runs {speedup:.2f}x fp32 on this CPU -> "
          f"{'bf16 autocast' if amp == 'bf16' else 'fp32'} (amp='off' or 'bf16' chooses)")
    return amp, speedup


def _device_and_amp(cfg: TrainConfig, local_rank: int, model_cfg: Optional[TXLConfig] = None
                    ) -> tuple[torch.device, contextlib.AbstractContextManager, torch.amp.GradScaler]:
    """(device, autocast context, gradient scaler) for cfg.device and cfg.amp."""
    device = torch.device(default_device(local_rank) if cfg.device == "auto" else cfg.device)
    amp = cfg.amp
    if amp == "auto" and device.type == "cpu":  # bf16 only where this CPU multiplies it faster
        amp = "off" if model_cfg is None else cpu_precision(
            cfg.batch_size * model_cfg.tgt_len, model_cfg.d_model, model_cfg.d_inner)[0]
    if amp == "auto":  # bf16 where the GPU has it (Ampere+); fp16 + loss scaling on older ones (T4)
        amp = "bf16" if torch.cuda.get_device_capability(device)[0] >= 8 else "fp16"
    autocast = (contextlib.nullcontext() if amp == "off" else
                torch.autocast(device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16))
    scaler = torch.amp.GradScaler(device.type, enabled=amp == "fp16")  # fp16 gradients underflow
    return device, autocast, scaler


def _loader(corpus: Corpus, cfg: TrainConfig, tgt_len: int, rank: int, world: int,
            device: torch.device) -> LMOrderedIterator:
    """This rank's contiguous block of the batch columns of the training text."""
    per = cfg.batch_size // world
    n_col = len(corpus.train) // cfg.batch_size  # the columns one process would use
    mine = corpus.train[rank * per * n_col:(rank + 1) * per * n_col]
    return LMOrderedIterator(mine, per, tgt_len, device=device)


class CompiledSegments(torch.nn.Module):
    """``model`` with ``model.segment`` compiled (``torch.compile``): the input checks run eagerly,
    once per call, so the compiled graph has no break. Where compiling fails (no C++ compiler,
    an unsupported platform) it says so in one line and runs ``model`` as it is."""

    def __init__(self, model: TransformerXL):
        super().__init__()
        self.model = model
        self.compiled = torch.compile(model.segment)

    def forward(self, tokens: torch.Tensor, mems=None, targets=None):
        if self.compiled is None:
            return self.model(tokens, mems, targets)
        from txl_minimal import validation
        validation.check_inputs(self.model, tokens, mems, targets)
        try:
            return self.compiled(tokens, mems, targets)
        except Exception as e:  # the compiler, not the inputs (checked above): go on without it
            if not _is_compiler_error(e):
                raise
            print(f"torch.compile is not available here ({type(e).__name__}: {str(e).splitlines()[0][:120]}); "
                  "training without it")
            self.compiled = None
            return self.model(tokens, mems, targets)


def _is_compiler_error(e: Exception) -> bool:
    """An error of torch.compile's machinery (dynamo, inductor, the C++ toolchain), not of the model."""
    module = type(e).__module__ or ""
    return module.startswith(("torch._dynamo", "torch._inductor")) or isinstance(e, (OSError, RuntimeError)) and (
        "compile" in str(e).lower() or "inductor" in str(e).lower())


def _wrap(model: TransformerXL, cfg: TrainConfig, world: int, device: torch.device) -> torch.nn.Module:
    """The model as the loop calls it: compiled if cfg.compile, in DDP under torchrun."""
    if cfg.compile:
        model = CompiledSegments(model)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    return model


def _resume(path: Path, model_cfg: TXLConfig, configs: dict, parts: dict, rank: int, world: int,
            device: torch.device) -> tuple[int, int, int, float, Optional[list[torch.Tensor]]]:
    """Load ``parts`` (model, optimiser, ...) and this rank's RNG state from a checkpoint;
    return its (step, epoch, segment, wall_time_s, this rank's rows of the memory)."""
    ckpt = load_checkpoint(path, model_cfg, map_location=device)
    used = configs["train_config"]
    for key in ("batch_size", "corpus"):
        if ckpt["train_config"][key] != used[key]:
            raise ValueError(f"checkpoint {path} used {key}={ckpt['train_config'][key]!r}, "
                             f"this run {used[key]!r}: the memory and data position "
                             "would not line up. Fix: resume with the same setting "
                             "(for the corpus: --corpus, and $TXL_CORPUS, which overrides it).")
    for key, part in parts.items():
        part.load_state_dict(ckpt[key])
    set_rng_state(ckpt["rng"][rank % len(ckpt["rng"])])
    mems = ckpt["mems"]
    if mems is not None:  # saved for the full batch: keep this rank's rows
        per = used["batch_size"] // world
        mems = [m[rank * per:(rank + 1) * per].to(device) for m in mems]
    return ckpt["step"], ckpt["data"]["epoch"], ckpt["data"]["segment"], ckpt["wall_time_s"], mems


def _gather(tensor: torch.Tensor, world: int) -> torch.Tensor:
    """Concatenate every rank's rows (dim 0): the full batch, as one process would hold it."""
    if world == 1:
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts)


def _save(path: Path, parts: dict, configs: dict, step: int, epoch: int, segment: int,
          mems: Optional[list[torch.Tensor]], wall_time_s: float, rank: int, world: int) -> None:
    """Write the checkpoint a bit-exact resume needs. Every rank takes part in the
    gathers (full-batch memory, each rank's RNG state); rank 0 writes."""
    full_mems = None if mems is None or mems[0].size(1) == 0 else [_gather(m, world).cpu() for m in mems]
    rngs = [rng_state()]
    if world > 1:
        rngs = [None] * world
        dist.all_gather_object(rngs, rng_state())
    if rank == 0:
        states = {key: part.state_dict() for key, part in parts.items()}
        save_checkpoint(dict(format=1, **states, **configs, step=step, data=dict(epoch=epoch, segment=segment),
                             mems=full_mems, rng=rngs, wall_time_s=wall_time_s), path)


def _valid_bpc(model: TransformerXL, valid, cfg: TrainConfig, autocast: contextlib.AbstractContextManager) -> float:
    """The periodic evaluation: bpc of the valid prefix with the cfg.eval_* settings."""
    with autocast:
        return evaluate(model, valid, cfg.eval_batch_size, cfg.eval_tgt_len, cfg.eval_mem_len,
                        cfg.eval_clamp_len, cfg.eval_same_length, cfg.eval_tokens)["bpc"]


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
        raise ValueError(f"{path} is damaged: its header is {text.splitlines()[0][:80]!r}, not {','.join(CSV_COLUMNS)}. {fix}")
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
    writes one: on the other ranks (``write=False``) the methods do nothing."""

    def __init__(self, path: Path, resume: bool, step: int, write: bool = True):
        self.file = None
        if not write:
            return
        rows = _log_rows(path, step) if resume and path.exists() else []
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = path.open("w", newline="")
        self.writer = csv.DictWriter(self.file, CSV_COLUMNS, lineterminator="\n")
        self.writer.writeheader()
        self.writer.writerows(r for r in rows if int(r["step"]) <= step)

    def write(self, step: int, tokens: int, wall_time_s: float, lr: float, train_bpc: float,
              valid_bpc: Optional[float]) -> None:
        """One row, flushed at once so that the file can be watched during a run."""
        if self.file is None:
            return
        self.writer.writerow(dict(step=step, tokens=tokens, wall_time_s=round(wall_time_s, 2), lr=f"{lr:.6g}",
                                  train_loss=f"{train_bpc * LN2:.5f}", train_bpc=f"{train_bpc:.5f}",
                                  valid_bpc="" if valid_bpc is None else f"{valid_bpc:.5f}"))
        self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


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
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
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
        lock = _lock_out(out_dir) if rank == 0 else None
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


def _finished(model: TransformerXL, step: int, end: int, cfg: TrainConfig, out_dir: Path) -> TrainResult:
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
    return TrainResult(model.eval(), step, last("train_bpc"), last("valid_bpc"), 0.0, 0.0, out_dir, complete=True)


def _resume_command(argv: list[str]) -> str:
    """The command line that continues an interrupted one."""
    args = [a for a in argv if a not in ("--overwrite", "--resume")]
    return shlex.join([sys.executable.rsplit("/", 1)[-1], "-m", "txl_minimal.train", *args, "--resume"])


# ----------------------------------------------------------------------------- training

def _last_step(cfg: TrainConfig, stop_at: Optional[int]) -> int:
    """The step training ends at: ``max_steps``, or ``stop_at`` if earlier (as if interrupted)."""
    replace(cfg)  # validates again: a field may have been changed since the config was made
    if stop_at is not None and (type(stop_at) is not int or stop_at < 1):
        raise ValueError(f"stop_at must be a positive integer or None, got {stop_at!r}")
    return min(cfg.max_steps, stop_at or cfg.max_steps)


@_one_run_per_out
def train(model_cfg: TXLConfig, cfg: TrainConfig, corpus: Optional[Corpus] = None,
          resume: bool = False, stop_at: Optional[int] = None, progress: bool = True,
          overwrite: bool = False, print_evals: bool = False) -> TrainResult:
    """Train a TransformerXL; writes ``cfg.out``/ckpt.pt and ``cfg.out``/log.csv.

    resume: continue from ckpt.pt (weights, optimiser, schedule, RNG, data position and memory,
    so the run ends as if never interrupted). overwrite: replace the run in ``cfg.out`` (without
    either, a run there is refused before anything is written). stop_at: end after that many steps
    with a checkpoint, as if interrupted. progress: a bar and a line per evaluation; print_evals:
    those lines without the bar. Under torchrun each rank reads its own block of batch columns."""
    end = _last_step(cfg, stop_at)
    rank, world, local = _distributed()
    out_dir = Path(cfg.out)
    _claim_out(out_dir, resume, overwrite, rank)
    device, autocast, scaler = _device_and_amp(cfg, local, model_cfg)
    _init_distributed(device, world, cfg.batch_size)
    seed_everything(cfg.seed)
    raw = TransformerXL(TXLConfig(**model_cfg.to_dict())).to(device)  # a copy: evaluate mutates lengths
    torch.manual_seed(cfg.seed + rank)  # dropout masks differ between ranks
    opt = torch.optim.Adam(raw.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_at(i + 1, cfg) / cfg.lr)
    parts = dict(model=raw, optimizer=opt, scheduler=sched, scaler=scaler)  # what a checkpoint restores
    corpus = corpus if corpus is not None else load_corpus(cfg.corpus)  # $TXL_CORPUS, "auto": see data.py
    if model_cfg.vocab_size < corpus.vocab_size:  # else an IndexError deep inside the embedding
        raise ValueError(f"TXLConfig.vocab_size is {model_cfg.vocab_size:,} but {corpus.name} has "
                         f"{corpus.vocab_size:,} symbols. Fix: --set vocab_size={corpus.vocab_size}")
    unit = score_name(corpus.unit)  # what the log lines call their numbers: bpc or ppl
    configs = dict(model_config=model_cfg.to_dict(), train_config=dict(asdict(cfg), corpus=corpus.name))
    ckpt_path = out_dir / "ckpt.pt"
    step, epoch, segment, elapsed, mems = 0, 0, 0, 0.0, None
    if resume:
        step, epoch, segment, elapsed, mems = _resume(ckpt_path, model_cfg, configs, parts, rank, world, device)
        if step >= end:  # a finished run: say so, rather than log a run of no steps
            return _finished(raw, step, end, cfg, out_dir)
    loader = _loader(corpus, cfg, model_cfg.tgt_len, rank, world, device)
    batches = itertools.islice(iter(loader), segment, None)  # resume: skip what was read
    model = _wrap(raw, cfg, world, device)
    log = CSVLog(out_dir / "log.csv", resume, step, write=rank == 0)
    quiet = {} if progress and rank == 0 else {"disable": True}  # shown: TQDM_DISABLE=1 still hides it
    bar = tqdm(total=cfg.max_steps, initial=step, mininterval=1.0, dynamic_ncols=True, **quiet)
    tokens_per_step = cfg.batch_size * model_cfg.tgt_len
    losses, t_train, n_tok, valid_bpc, train_bpc, tok_s = [], 0.0, 0, float("nan"), float("nan"), 0.0
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
        scaler.scale(out.loss).backward()
        scaler.unscale_(opt)  # clip the true gradients
        torch.nn.utils.clip_grad_norm_(raw.parameters(), cfg.grad_clip)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        sched.step()
        step, segment = step + 1, segment + 1
        losses.append(out.nll.mean().item())  # the NLL alone (loss may add a span penalty)
        t_train += time.perf_counter() - t0
        n_tok += tokens_per_step

        do_eval = step % cfg.eval_interval == 0 or step == end
        if step % cfg.log_interval == 0 or do_eval:
            train_bpc = _mean_loss(losses, world, device) / LN2
            tok_s = n_tok / max(t_train, 1e-9)
            losses = []
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
            _save(ckpt_path, parts, configs, step, epoch, segment, mems, elapsed, rank, world)
        bar.update(1)
        if _Stop.requested:  # Ctrl-C: keep the step just finished (an evaluation step is saved already)
            if not do_eval:
                elapsed, t_wall = elapsed + time.perf_counter() - t_wall, time.perf_counter()
                _save(ckpt_path, parts, configs, step, epoch, segment, mems, elapsed, rank, world)
            break
    bar.close()
    log.close()
    if _Stop.requested:
        raise TrainingInterrupted(step, ckpt_path)
    _check_replicas_agree(raw, world)
    raw.eval()
    return TrainResult(raw, step, train_bpc, valid_bpc, tok_s, elapsed, out_dir, unit=corpus.unit)


# ----------------------------------------------------------------------------- command line

FIELD_TYPES = {f.name: f.type for config in (TXLConfig, TrainConfig) for f in fields(config)}
BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _parse_value(key: str, text: str):
    """A --set value: for a bool field true/false, yes/no or 1/0 (any case); else a Python
    literal (3, 0.1, None) or the plain string (text8-mini)."""
    if "bool" in FIELD_TYPES.get(key, ""):
        if text.lower() == "none" and FIELD_TYPES[key].startswith("Optional"):
            return None
        if text.lower() not in BOOLS:
            raise ValueError(f"--set {key}={text}: {key} is true or false (also yes/no, 1/0)")
        return BOOLS[text.lower()]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


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
    p.add_argument("--compile", action="store_true", help="torch.compile each segment (TrainConfig.compile)")
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
        res = train(model_cfg, train_cfg, resume=args.resume, stop_at=args.stop_at, overwrite=args.overwrite,
                    progress=terminal_progress(not args.no_progress), print_evals=True)
    except (ValueError, FileExistsError, FileNotFoundError, CorpusError) as e:  # bad input: no traceback
        p.error(str(e))
    except TrainingInterrupted as e:  # Ctrl-C: saved; say how to go on
        print(f"{e}\n  {_resume_command(sys.argv[1:] if argv is None else argv)}", file=sys.stderr)
        sys.exit(130)
    if res.complete:
        return
    if _distributed()[0] == 0:
        (name, train_score), (_, valid_score) = res.score("train"), res.score("valid")
        print(f"step {res.step}: train {name} {train_score:.4f}, valid {name} {valid_score:.4f}, "
              f"{res.tokens_per_s:,.0f} tokens/s, {res.wall_time_s:.0f} s -> {res.out}")
    if dist.is_initialized():
        # Free the DDP wrapper (held in reference cycles) while its process group still exists:
        # left to the interpreter's exit, gloo's threads aborted a rank now and then.
        del res
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
