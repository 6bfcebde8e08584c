"""Train and evaluate Transformer-XL (and the vanilla baseline) on text8.

    python -m txl_minimal.train --preset cpu-tiny                       # a few minutes on a CPU
    python -m txl_minimal.train --preset cpu-small --out runs/txl --resume
    torchrun --nproc_per_node 2 -m txl_minimal.train --preset cpu-tiny  # data parallel
    python -m txl_minimal.train --evaluate runs/txl --split test        # bpc of a run, ckpt.pt, txl or vanilla
    python -m txl_minimal.train --evaluate vanilla --sliding-window 64 --max-predictions 20000
    python -m txl_minimal.train --evaluate txl --update-json            # recompute pretrained/txl.json

The loop is the authors' (``pytorch/train.py``): Adam, linear warm-up then cosine
decay, gradient clipping at 0.25, and memory carried from each segment to the next
(Sec. 3.2). A batch is ``batch_size`` parallel columns of the text, so row b of step
t+1 continues row b of step t; the memory is reset when a pass over the data begins.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import itertools
import math
import os
import random
import tempfile
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from tqdm import tqdm

from txl_minimal.data import Corpus, LMOrderedIterator, load_corpus
from txl_minimal.model import TransformerXL, TXLConfig
from txl_minimal.utils import default_device

LN2 = math.log(2.0)
CSV_COLUMNS = ("step", "tokens", "wall_time_s", "lr", "train_loss", "train_bpc", "valid_bpc")


@dataclass
class TrainConfig:
    """Optimisation and bookkeeping; the model's hyper-parameters live in TXLConfig."""

    corpus: str = "text8-mini"  # "text8" | "text8-mini" | "auto" (see data.load_corpus)
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
    amp: str = "auto"  # "auto" (CUDA: bf16, fp16 before Ampere; CPU: off, as bf16 is emulated without AMX/AVX512-BF16: benchmarks/README.md) | "bf16" | "fp16" | "off"
    compile: bool = False  # torch.compile the model
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:1" ...


PRESETS: dict[str, dict[str, dict]] = {
    # README and notebooks: ~1 min of one CPU core (valid bpc ~2.75 on text8-mini).
    "cpu-tiny": dict(
        model=dict(n_layer=2, n_head=2, d_model=64, d_head=32, d_inner=256, dropout=0.0,
                   dropatt=0.0, tgt_len=32, mem_len=32),
        train=dict(corpus="text8-mini", batch_size=16, lr=3e-3, warmup_steps=100, max_steps=2000,
                   eval_interval=500, eval_tokens=8192, log_interval=25, out="runs/cpu-tiny")),
    # The shipped models (txl_minimal/pretrained): measured 2,582 s (txl) and 2,164 s (vanilla)
    # on ONE thread of a shared 2-core CPU (train_wall_time_s in pretrained/*.json).
    "cpu-small": dict(
        model=dict(n_layer=4, n_head=4, d_model=128, d_head=32, d_inner=512, dropout=0.1,
                   dropatt=0.0, tgt_len=64, mem_len=64),
        train=dict(corpus="text8-mini", batch_size=16, lr=1e-3, warmup_steps=200, max_steps=5000,
                   eval_interval=500, eval_tokens=32768, log_interval=50, out="runs/cpu-small")),
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
                   eval_interval=4000, eval_tokens=None, eval_batch_size=10, eval_tgt_len=128,
                   eval_mem_len=3800, eval_clamp_len=1000, eval_same_length=True,
                   log_interval=200, out="runs/paper-base")),
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


# ----------------------------------------------------------------------------- evaluation

def _tokens(data, limit: Optional[int]) -> torch.Tensor:
    """The first ``limit`` tokens of a numpy array / tensor / list as a LongTensor."""
    data = data[:limit] if limit is not None else data
    return data.long() if isinstance(data, torch.Tensor) else torch.from_numpy(np.array(data, dtype=np.int64))


def unwrap(model: torch.nn.Module) -> TransformerXL:
    """The TransformerXL inside a DDP and/or torch.compile wrapper."""
    model = getattr(model, "module", model)
    return getattr(model, "_orig_mod", model)


@contextlib.contextmanager
def evaluation_lengths(model: TransformerXL, tgt_len: Optional[int] = None,
                       mem_len: Optional[int] = None, clamp_len: Optional[int] = None,
                       same_length: Optional[bool] = None):
    """Eval mode with other lengths for the duration of a ``with`` block; the
    model's lengths and train/eval mode are restored afterwards, even on error."""
    cfg = model.cfg
    saved = (cfg.tgt_len, cfg.mem_len, cfg.clamp_len, cfg.same_length)
    was_training = model.training
    model.eval()
    try:
        model.set_lengths(tgt_len, mem_len, clamp_len, same_length)
        yield model
    finally:
        model.set_lengths(*saved)
        model.train(was_training)


@torch.no_grad()
def evaluate(model: TransformerXL, data, batch_size: int = 1, tgt_len: Optional[int] = None,
             mem_len: Optional[int] = None, clamp_len: Optional[int] = None,
             same_length: Optional[bool] = None, max_tokens: Optional[int] = None,
             progress: bool = False) -> dict:
    """Bits per character of ``data`` read in segments with memory carried (Sec. 3.2).

    Every token after the first is scored exactly once, the last short segment
    included: the text is cut into ``batch_size`` columns and column b also predicts
    the first token of column b+1 (the last column is padded; padding is not scored).
    Each column starts with an empty memory, so ``batch_size=1`` gives every token the
    longest context. ``max_tokens`` scores only the first that many predictions.
    Lengths left as None keep the model's; they are restored afterwards.
    """
    model = unwrap(model)
    ids = _tokens(data, None if max_tokens is None else max_tokens + 1)
    n_pred = len(ids) - 1
    if n_pred < 1:
        raise ValueError(f"evaluate needs at least 2 tokens, got {len(ids)}")
    device = next(model.parameters()).device
    B = max(1, min(batch_size, n_pred))
    n = -(-n_pred // B)  # ceil: tokens per column
    pad = B * n - n_pred
    x = F.pad(ids[:-1], (0, pad)).view(B, n).to(device)
    y = F.pad(ids[1:], (0, pad)).view(B, n).to(device)
    scored = (torch.arange(B * n) < n_pred).view(B, n).to(device)
    total, mems = torch.zeros((), dtype=torch.float64, device=device), None
    with evaluation_lengths(model, tgt_len, mem_len, clamp_len, same_length):
        L = model.cfg.tgt_len
        for s in tqdm(range(0, n, L), disable=not progress, desc="evaluate", leave=False):
            out = model(x[:, s:s + L], mems, targets=y[:, s:s + L])
            total += (out.nll.double() * scored[:, s:s + L]).sum()
            mems = out.mems
    loss = total.item() / n_pred
    return dict(bpc=loss / LN2, loss=loss, tokens=n_pred)


@torch.no_grad()
def sliding_window_eval(model: TransformerXL, data, context: int,
                        max_predictions: Optional[int] = None, batch_size: int = 64,
                        progress: bool = False) -> dict:
    """The vanilla model's evaluation (Al-Rfou et al., 2018; Fig. 1b of the paper).

    Token t is predicted from the ``context`` tokens before it, in a window that
    advances ONE position per prediction and scores only its last position: one
    forward pass of ``context`` tokens per prediction, which is why it is slow.
    The first window ``data[:context]`` scores all its positions (tokens 1..context,
    with the shorter context they have), so every token after the first counts once,
    as in ``evaluate``. ``max_predictions`` keeps only the first that many predictions.
    Windows are batched ``batch_size`` at a time; no memory is used.
    """
    model = unwrap(model)
    ids = _tokens(data, None if max_predictions is None else max_predictions + 1)
    n_pred = len(ids) - 1
    if n_pred < 1:
        raise ValueError(f"sliding_window_eval needs at least 2 tokens, got {len(ids)}")
    device = next(model.parameters()).device
    ids = ids.to(device)
    with evaluation_lengths(model, tgt_len=context, mem_len=0):
        c = min(context, n_pred)
        total = model(ids[None, :c], targets=ids[None, 1:c + 1]).nll.double().sum()
        last = n_pred - context  # window s (1..last) reads ids[s:s+context], predicts ids[s+context]
        windows = ids.unfold(0, context, 1) if last > 0 else None  # a view: no copy
        for s in tqdm(range(1, last + 1, batch_size), disable=not progress, desc="sliding", leave=False):
            e = min(s + batch_size, last + 1)
            logits = model(windows[s:e]).logits[:, -1].float()
            total += F.cross_entropy(logits, ids[s + context:e + context], reduction="sum").double()
    loss = total.item() / n_pred
    return dict(bpc=loss / LN2, loss=loss, tokens=n_pred)


# ----------------------------------------------------------------------------- checkpoints

def save_checkpoint(state: dict, path: str | Path) -> None:
    """torch.save to a temp file in the same directory, then rename over ``path``:
    a crash mid-write leaves the previous checkpoint intact and no temp file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it owner-only; a checkpoint is a normal file
        os.replace(tmp, path)  # atomic on POSIX and Windows
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


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
    """Load a checkpoint safely (weights_only=True); check its model config if given."""
    if not Path(path).exists():
        raise FileNotFoundError(f"no checkpoint at {path}. Fix: check the path (--out, --evaluate), "
                                "or drop --resume to start afresh.")
    ckpt = torch.load(path, map_location=map_location, weights_only=True)
    if model_cfg is not None:
        check_config(ckpt["model_config"], model_cfg, f"checkpoint {path}")
    return ckpt


def model_from_checkpoint(ckpt: dict, device: str | torch.device = "cpu") -> TransformerXL:
    """The TransformerXL a loaded checkpoint (or shipped .pt) describes, in eval mode."""
    model = TransformerXL(TXLConfig(**ckpt["model_config"])).to(device)
    model.load_state_dict(ckpt["model"])
    return model.eval()


def _rng_state() -> dict:
    """This process's RNG states as tensors and plain lists (loadable with weights_only)."""
    keys, pos, has_gauss, gauss = np.random.get_state()[1:]
    version, py_state, py_gauss = random.getstate()
    state = dict(torch=torch.get_rng_state(),
                 numpy=dict(keys=torch.from_numpy(keys.astype(np.int64)), pos=pos,
                            has_gauss=has_gauss, gauss=gauss),
                 python=dict(version=version, state=list(py_state), gauss=py_gauss))
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))


# ----------------------------------------------------------------------------- training

@dataclass
class TrainResult:
    model: TransformerXL  # unwrapped, in eval mode
    step: int
    train_bpc: float  # mean over the last log interval
    valid_bpc: float  # last evaluation
    tokens_per_s: float
    wall_time_s: float
    out: Path


def _resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """"auto" -> this rank's GPU if there is one, else the CPU; anything else as given."""
    return torch.device(default_device(local_rank) if name == "auto" else name)


def _distributed() -> tuple[int, int, int]:
    """(rank, world_size, local_rank); torchrun sets the environment variables."""
    if "RANK" not in os.environ:
        return 0, 1, 0
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))


def _gather(tensor: torch.Tensor, world: int) -> torch.Tensor:
    """Concatenate every rank's rows (dim 0): the full batch, as one process would hold it."""
    if world == 1:
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts)


def train(model_cfg: TXLConfig, cfg: TrainConfig, corpus: Optional[Corpus] = None,
          resume: bool = False, stop_at: Optional[int] = None, progress: bool = True) -> TrainResult:
    """Train a TransformerXL; writes ``cfg.out``/ckpt.pt and ``cfg.out``/log.csv.

    resume: continue from ckpt.pt (weights, optimiser, schedule, RNG, data position
    and memory all restored, so the run ends as if never interrupted).
    stop_at: end after that many steps with a checkpoint, as if interrupted (the
    schedule still aims at max_steps). Under torchrun each rank reads its own
    contiguous block of the batch columns and only rank 0 logs and saves.
    """
    rank, world, local = _distributed()
    if cfg.batch_size % world:
        raise ValueError(f"batch_size {cfg.batch_size} must be divisible by the {world} processes")
    device = _resolve_device(cfg.device, local)
    if world > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    amp = cfg.amp
    if amp == "auto":  # bf16 where the GPU has it (Ampere+); fp16 + loss scaling on older ones (T4)
        amp = "off" if device.type != "cuda" else "bf16" if torch.cuda.get_device_capability(device)[0] >= 8 else "fp16"
    if amp not in ("bf16", "fp16", "off"):
        raise ValueError(f"amp must be 'auto', 'bf16', 'fp16' or 'off', got {cfg.amp!r}")
    autocast = (contextlib.nullcontext() if amp == "off" else
                torch.autocast(device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16))
    scaler = torch.amp.GradScaler(device.type, enabled=amp == "fp16")  # fp16 gradients underflow

    torch.manual_seed(cfg.seed)
    model = TransformerXL(TXLConfig(**model_cfg.to_dict())).to(device)  # a copy: evaluate mutates lengths
    torch.manual_seed(cfg.seed + rank)  # dropout masks differ between ranks
    np.random.seed(cfg.seed)
    random.seed(cfg.seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_at(i + 1, cfg) / cfg.lr)

    out_dir = Path(cfg.out)
    ckpt_path, log_path = out_dir / "ckpt.pt", out_dir / "log.csv"
    step, epoch, segment, elapsed, mems = 0, 0, 0, 0.0, None
    corpus = corpus if corpus is not None else load_corpus(cfg.corpus)
    # What was really read: $TXL_CORPUS or "auto" can make it differ from cfg.corpus.
    used = dict(asdict(cfg), corpus=corpus.name)
    if resume:
        ckpt = load_checkpoint(ckpt_path, model_cfg, map_location=device)
        for key in ("batch_size", "corpus"):
            if ckpt["train_config"][key] != used[key]:
                raise ValueError(f"checkpoint {ckpt_path} used {key}={ckpt['train_config'][key]!r}, "
                                 f"this run {used[key]!r}: the memory and data position "
                                 "would not line up. Fix: resume with the same setting "
                                 "(for the corpus: --corpus, and $TXL_CORPUS, which overrides it).")
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        sched.load_state_dict(ckpt["scheduler"])
        scaler.load_state_dict(ckpt["scaler"])
        _set_rng_state(ckpt["rng"][rank % len(ckpt["rng"])])
        step, elapsed = ckpt["step"], ckpt["wall_time_s"]
        epoch, segment = ckpt["data"]["epoch"], ckpt["data"]["segment"]
        if ckpt["mems"] is not None:  # saved for the full batch: keep this rank's rows
            per = cfg.batch_size // world
            mems = [m[rank * per:(rank + 1) * per].to(device) for m in ckpt["mems"]]

    per = cfg.batch_size // world
    n_col = len(corpus.train) // cfg.batch_size  # the columns one process would use
    mine = corpus.train[rank * per * n_col:(rank + 1) * per * n_col]  # this rank's columns
    loader = LMOrderedIterator(mine, per, model_cfg.tgt_len, device=device)
    batches = itertools.islice(iter(loader), segment, None)  # resume: skip what was read

    raw = model
    if cfg.compile:
        model = torch.compile(model)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)

    def evaluate_valid() -> float:
        with autocast:
            return evaluate(raw, corpus.valid, cfg.eval_batch_size, cfg.eval_tgt_len, cfg.eval_mem_len,
                            cfg.eval_clamp_len, cfg.eval_same_length, cfg.eval_tokens)["bpc"]

    def checkpoint() -> None:  # every rank takes part in the gathers; rank 0 writes
        full_mems = None if mems is None or mems[0].size(1) == 0 else [_gather(m, world).cpu() for m in mems]
        rngs = [_rng_state()]
        if world > 1:
            rngs = [None] * world
            dist.all_gather_object(rngs, _rng_state())
        if rank == 0:
            save_checkpoint(dict(
                format=1, model=raw.state_dict(), optimizer=opt.state_dict(), scheduler=sched.state_dict(),
                scaler=scaler.state_dict(), model_config=model_cfg.to_dict(), train_config=used,
                step=step, data=dict(epoch=epoch, segment=segment), mems=full_mems, rng=rngs,
                wall_time_s=elapsed), ckpt_path)

    if rank == 0:  # a resumed log keeps the rows up to the checkpoint
        rows = list(csv.DictReader(log_path.open())) if resume and log_path.exists() else []
        out_dir.mkdir(parents=True, exist_ok=True)
        log_file = log_path.open("w", newline="")
        log = csv.DictWriter(log_file, CSV_COLUMNS, lineterminator="\n")
        log.writeheader()
        log.writerows(r for r in rows if int(r["step"]) <= step)
    tokens_per_step = cfg.batch_size * model_cfg.tgt_len
    bar = tqdm(total=cfg.max_steps, initial=step, disable=not progress or rank != 0,
               mininterval=1.0, dynamic_ncols=True)
    end = min(cfg.max_steps, stop_at if stop_at is not None else cfg.max_steps)
    losses, t_train, n_tok, valid_bpc, train_bpc, tok_s = [], 0.0, 0, float("nan"), float("nan"), 0.0
    model.train()
    t_wall = time.perf_counter()
    while step < end:
        t0 = time.perf_counter()
        batch = next(batches, None)
        if batch is None:  # a new pass over the data: fresh memory
            epoch, segment, mems = epoch + 1, 0, None
            batches = iter(loader)
            batch = next(batches)
        x, y = batch
        with autocast:
            out = model(x, mems, targets=y)
        mems = out.mems
        scaler.scale(out.loss).backward()
        scaler.unscale_(opt)  # clip the true gradients
        torch.nn.utils.clip_grad_norm_(raw.parameters(), cfg.grad_clip)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        lr = sched.get_last_lr()[0]
        sched.step()
        step, segment = step + 1, segment + 1
        losses.append(out.nll.mean().item())  # the NLL alone (loss may add a span penalty)
        t_train += time.perf_counter() - t0
        n_tok += tokens_per_step

        do_eval = step % cfg.eval_interval == 0 or step == end
        if step % cfg.log_interval == 0 or do_eval:
            mean_loss = torch.tensor(sum(losses) / len(losses), dtype=torch.float64, device=device)
            if world > 1:  # log the loss of the whole batch, not just rank 0's columns
                dist.all_reduce(mean_loss)
                mean_loss /= world
            train_bpc = mean_loss.item() / LN2
            tok_s = n_tok / max(t_train, 1e-9)
            bar.set_postfix(loss=f"{train_bpc * LN2:.3f}", bpc=f"{train_bpc:.3f}", tok_s=f"{tok_s:,.0f}")
            if do_eval and rank == 0:
                valid_bpc = evaluate_valid()
                if progress:
                    bar.write(f"step {step}: train bpc {train_bpc:.3f}, valid bpc {valid_bpc:.3f}")
            if rank == 0:
                log.writerow(dict(step=step, tokens=step * tokens_per_step,
                                  wall_time_s=round(elapsed + time.perf_counter() - t_wall, 2),
                                  lr=f"{lr:.6g}", train_loss=f"{train_bpc * LN2:.5f}",
                                  train_bpc=f"{train_bpc:.5f}", valid_bpc=f"{valid_bpc:.5f}" if do_eval else ""))
                log_file.flush()
            losses = []
        if do_eval:
            elapsed, t_wall = elapsed + time.perf_counter() - t_wall, time.perf_counter()
            checkpoint()
        bar.update(1)
    bar.close()
    if rank == 0:
        log_file.close()
    if world > 1:  # the whole point of DDP: every replica holds the same weights
        flat = torch.cat([p.detach().flatten() for p in raw.parameters()])
        biggest, smallest = flat.clone(), flat.clone()
        dist.all_reduce(biggest, dist.ReduceOp.MAX)
        dist.all_reduce(smallest, dist.ReduceOp.MIN)
        if not torch.equal(biggest, smallest):
            raise RuntimeError("DDP ranks ended with different weights; this is a bug")
    raw.eval()
    return TrainResult(raw, step, train_bpc, valid_bpc, tok_s, elapsed, out_dir)


# ----------------------------------------------------------------------------- evaluating a checkpoint

def checkpoint_file(target: str | Path) -> Path:
    """A shipped name (txl | vanilla), a run directory (its ckpt.pt) or a checkpoint file."""
    from txl_minimal.pretrained import NAMES, PRETRAINED_DIR

    if str(target) in NAMES:  # a run directory of that name needs ./ in front
        return PRETRAINED_DIR / f"{target}.pt"
    path = Path(target)
    path = path / "ckpt.pt" if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"nothing to evaluate at {target}: not a shipped model ({', '.join(NAMES)}), "
                                "a run directory holding ckpt.pt, or a checkpoint file. "
                                "Fix: pass the --out directory of a training run, or txl / vanilla.")
    return path


def evaluate_checkpoint(target: str | Path, split: str = "valid", corpus: Optional[str] = None,
                        sliding_window: Optional[int] = None, max_predictions: Optional[int] = None,
                        batch_size: int = 1, tgt_len: Optional[int] = None, mem_len: Optional[int] = None,
                        clamp_len: Optional[int] = None, same_length: Optional[bool] = None,
                        device: str = "auto", progress: bool = False) -> dict:
    """bpc of a checkpoint (see checkpoint_file) on one split; writes nothing.

    Segments with memory (``evaluate``; lengths left as None keep the training ones)
    or, with ``sliding_window=C``, the vanilla sliding window of C tokens. The corpus
    is the one the checkpoint was trained on unless ``corpus`` names another.
    """
    if split not in ("train", "valid", "test"):
        raise ValueError(f"split must be 'train', 'valid' or 'test', got {split!r}")
    path = checkpoint_file(target)
    ckpt = load_checkpoint(path)
    model = model_from_checkpoint(ckpt, _resolve_device(device))
    name = corpus or ckpt["train_config"]["corpus"]
    try:
        data = getattr(load_corpus(name), split)
    except ValueError as e:  # e.g. a checkpoint trained on a Corpus built in Python
        raise ValueError(f"{e}. The checkpoint {path} names corpus {name!r}. "
                         "Fix: choose the evaluation corpus with --corpus.") from e
    if sliding_window is not None:
        settings = dict(sliding_window=sliding_window)
        res = sliding_window_eval(model, data, sliding_window, max_predictions, progress=progress)
    else:
        given = dict(tgt_len=tgt_len, mem_len=mem_len, clamp_len=clamp_len, same_length=same_length)
        settings = {k: getattr(model.cfg, k) if v is None else v for k, v in given.items()}
        settings["batch_size"] = batch_size
        res = evaluate(model, data, batch_size, max_tokens=max_predictions, progress=progress, **given)
    return dict(res, checkpoint=str(path), corpus=name, split=split, settings=settings)


# ----------------------------------------------------------------------------- command line

def _parse_value(text: str):
    """A --set value as a Python literal (3, 0.1, None, True) or else the plain string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a plain string such as text8-mini


SEGMENT_OPTIONS = ("eval_tgt_len", "eval_mem_len", "eval_clamp_len", "eval_same_length", "eval_batch_size")


def _check_eval_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Evaluation options that would be silently ignored are an error instead."""
    def given(keys) -> str:
        return ", ".join("--" + k.replace("_", "-") for k in keys if getattr(args, k) is not None)

    options = (*SEGMENT_OPTIONS, "split", "sliding_window", "max_predictions")
    if not args.evaluate and (flags := given(options)):
        p.error(f"{flags} only apply to an evaluation: add --evaluate CKPT")
    if (args.update_json or args.ship) and (flags := given(options)):
        p.error(f"--update-json and --ship compute the fixed table of pretrained.EVALUATIONS: drop {flags}")
    if args.sliding_window is not None and (flags := given(SEGMENT_OPTIONS)):
        p.error(f"--sliding-window reads fixed windows without memory: drop {flags}")


def main(argv: Optional[list[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="cpu-tiny", choices=sorted(PRESETS))
    p.add_argument("--out", help="run directory (ckpt.pt, log.csv)")
    p.add_argument("--max-steps", type=int)
    p.add_argument("--attn-type", choices=("rel", "abs", "shaw"), help="abs = the vanilla baseline")
    p.add_argument("--mem-len", type=int, help="0 = no recurrence (the vanilla baseline)")
    p.add_argument("--lr", type=float)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--corpus", choices=("text8", "text8-mini", "auto"))
    p.add_argument("--amp", choices=("auto", "bf16", "fp16", "off"))
    p.add_argument("--device")
    p.add_argument("--seed", type=int)
    p.add_argument("--compile", action="store_true", default=None, help="torch.compile the model")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="any TXLConfig/TrainConfig field")
    p.add_argument("--resume", action="store_true", help="continue from OUT/ckpt.pt")
    p.add_argument("--stop-at", type=int, help="stop after this step, as if interrupted")
    p.add_argument("--threads", type=int, help="torch.set_num_threads")
    p.add_argument("--no-progress", action="store_true")
    ev = p.add_argument_group("evaluation (no training; only --update-json and --ship write files)")
    ev.add_argument("--evaluate", metavar="CKPT", help="print the bpc of txl | vanilla (shipped), "
                    "a run directory or a checkpoint file; --corpus picks another corpus")
    ev.add_argument("--split", choices=("train", "valid", "test"), help="default: valid")
    ev.add_argument("--eval-tgt-len", type=int, help="segment length (default: the training one)")
    ev.add_argument("--eval-mem-len", type=int, help="memory length (default: the training one)")
    ev.add_argument("--eval-clamp-len", type=int, help="clamp relative distances (0: no clamp)")
    ev.add_argument("--eval-same-length", action="store_true", default=None,
                    help="every query attends to the same number of keys")
    ev.add_argument("--eval-batch-size", type=int,
                    help="columns read in parallel (default 1: every token gets the longest context)")
    ev.add_argument("--sliding-window", type=int, metavar="C",
                    help="the vanilla evaluation: one window of C tokens per prediction")
    ev.add_argument("--max-predictions", type=int, metavar="N", help="score only the first N predictions")
    ev.add_argument("--update-json", action="store_true",
                    help="with --evaluate txl|vanilla: recompute the shipped NAME.json")
    ev.add_argument("--ship", metavar="RUN_DIR", help="export RUN_DIR/ckpt.pt as pretrained --name, "
                    "then recompute NAME.json")
    ev.add_argument("--name", choices=("txl", "vanilla"), help="the shipped name for --ship")
    args = p.parse_args(argv)
    _check_eval_args(p, args)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.ship or args.update_json:
        from txl_minimal import pretrained
        if args.ship and not args.name:
            p.error("--ship needs --name txl or --name vanilla")
        if args.update_json and args.evaluate not in pretrained.NAMES:
            p.error("--update-json rewrites a shipped model's json: use it with --evaluate txl or vanilla")
        name = args.name if args.ship else args.evaluate
        if args.ship:
            pretrained.export_pretrained(args.ship, name)
        print(pretrained.evaluate_pretrained(name, progress=not args.no_progress))
        return
    if args.evaluate:
        r = evaluate_checkpoint(args.evaluate, args.split or "valid", args.corpus, args.sliding_window,
                                args.max_predictions, args.eval_batch_size or 1, args.eval_tgt_len,
                                args.eval_mem_len, args.eval_clamp_len, args.eval_same_length,
                                args.device or "auto", progress=not args.no_progress)
        settings = ", ".join(f"{k}={v}" for k, v in r["settings"].items())
        print(f"{r['checkpoint']} on {r['corpus']} {r['split']}: bpc {r['bpc']:.4f} "
              f"over {r['tokens']:,} predictions ({settings})")
        return
    overrides = {k: v for k, v in dict(
        out=args.out, max_steps=args.max_steps, attn_type=args.attn_type, mem_len=args.mem_len, lr=args.lr,
        batch_size=args.batch_size, corpus=args.corpus, amp=args.amp, device=args.device, seed=args.seed,
        compile=args.compile).items() if v is not None}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            p.error(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key.replace("-", "_")] = _parse_value(value)
    model_cfg, train_cfg = preset(args.preset, **overrides)
    res = train(model_cfg, train_cfg, resume=args.resume, stop_at=args.stop_at, progress=not args.no_progress)
    if _distributed()[0] == 0:
        print(f"step {res.step}: train bpc {res.train_bpc:.4f}, valid bpc {res.valid_bpc:.4f}, "
              f"{res.tokens_per_s:,.0f} tokens/s, {res.wall_time_s:.0f} s -> {res.out}")
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
