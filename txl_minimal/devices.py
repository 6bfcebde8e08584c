"""Where and how fast a training step runs: the device and the ranks of a torchrun launch (DDP),
the precision and attention path (measured where "auto"), torch.compile, Adam's implementation.

A ``cfg`` here is train.py's TrainConfig (train.py imports this module, so it is not named here).
"""
from __future__ import annotations

import contextlib
import functools
import gc
import os
import time
from typing import Optional

import torch
import torch.distributed as dist

from txl_minimal import fast, validation
from txl_minimal.data import Corpus, LMOrderedIterator
from txl_minimal.model import TransformerXL, TXLConfig
from txl_minimal.machine import bf16_speedup, default_device

COMPILE_MODES = ("auto", "reduce-overhead")  # TrainConfig.compile besides True and False


def distributed() -> tuple[int, int, int]:
    """(rank, world_size, local_rank); torchrun sets the environment variables."""
    if "RANK" not in os.environ:
        return 0, 1, 0
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))


def _init_distributed(device: torch.device, world: int, batch_size: int) -> None:
    """Join the process group of a torchrun launch (nothing to do for one process)."""
    if batch_size % world:
        raise ValueError(f"batch_size {batch_size} must be divisible by the {world} processes")
    if world > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")


def training_device(cfg, local_rank: int, world: int) -> torch.device:
    """This rank's device (cfg.device; "auto": its GPU, else the CPU), in the process group of a
    torchrun launch."""
    device = torch.device(default_device(local_rank) if cfg.device == "auto" else cfg.device)
    if cfg.flex_attention and device.type != "cuda":  # torch has no FlexAttention backward on a CPU
        raise ValueError(f"flex_attention=True trains on a CUDA GPU only (torch has no FlexAttention backward on "
                         f"{device.type}). Fix: --set flex_attention=false, or train on a GPU")
    _init_distributed(device, world, cfg.batch_size)
    return device


def rank_loader(corpus: Corpus, cfg, model_cfg: TXLConfig, rank: int, world: int,
                device: torch.device) -> LMOrderedIterator:
    """This rank's contiguous block of the batch columns of the training text, its ids checked
    against the model's vocabulary here, once (``wrap``'s Segments then leave that check out)."""
    per = cfg.batch_size // world
    n_col = len(corpus.train) // cfg.batch_size  # the columns one process would use
    mine = corpus.train[rank * per * n_col:(rank + 1) * per * n_col]
    loader = LMOrderedIterator(mine, per, model_cfg.tgt_len, device=device)
    validation.check_ids(loader.data, model_cfg.vocab_size, f"{corpus.name}'s token")
    return loader


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


def choose_precision(cfg, model_cfg: TXLConfig, device: torch.device,
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
        batch = cfg.batch_size // distributed()[1]
        amps = [_low_precision(device), "off"] if amp is None else [amp]
        paths = [True, False] if fast_attn is None else [fast_attn]
        amp, fast_attn, reason = _measured_choice(model_cfg, batch, device, amps, paths)
        print(f"amp/attention 'auto': {reason} -> {_described(amp, fast_attn)} (amp= or attention= chooses)")
        return dict(amp=amp, fast_attn=fast_attn, reason=reason)
    reason = "as set"  # a CPU: the fast paths (measured once, benchmarks/README.md); bf16 by a matmul
    if amp is None:  # (cpu_precision prints its measurement once per process and size)
        rows = cfg.batch_size // distributed()[1] * model_cfg.tgt_len  # one rank's rows
        amp, speedup = cpu_precision(rows, model_cfg.d_model, model_cfg.d_inner)
        reason = f"a bf16 matmul of this model's size runs {speedup:.2f}x fp32 on this CPU"
    return dict(amp=amp, fast_attn=True if fast_attn is None else fast_attn, reason=reason)


def _described(amp: str, fast_attn: bool) -> str:
    return (f"{'fp32' if amp == 'off' else amp + ' autocast'}, "
            f"{'fast' if fast_attn else 'explicit'} attention")


def choose_once(cfg, model_cfg: TXLConfig, device: torch.device, recorded: Optional[dict],
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


def compile_mode(cfg, device: torch.device) -> Optional[str]:
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


def wrap(model: TransformerXL, cfg, device: torch.device, world: int, say: bool) -> torch.nn.Module:
    """The model as the loop calls it: ``Segments`` (compiled as ``compile_mode`` says, and if
    ``say``, a line saying so for compile="auto"; the ids were checked once, by ``rank_loader``), in DDP
    under torchrun."""
    mode = compile_mode(cfg, device)
    if mode and cfg.compile == "auto" and say:
        print("compile='auto': each segment is compiled (torch.compile) on this GPU; the first steps take "
              "longer (--set compile=false: eager)")
    model = Segments(model, mode, ids_checked=True)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    return model


class LossMeter:
    """The mean NLL of each step since the last log row, kept on the device and read back once
    per row: a ``.item()`` per step would make the CPU wait for the GPU at every step. ``restored``:
    the values of the steps before a resume since its last row (a checkpoint keeps them, ``pending``),
    so that the first row after a resume averages what an uninterrupted run's does."""

    def __init__(self, restored: Optional[list[float]] = None):
        self.steps: list[torch.Tensor] = []
        self.restored = list(restored or [])

    def add(self, nll: torch.Tensor) -> None:
        self.steps.append(nll.detach().mean())

    def pending(self) -> list[float]:
        """This rank's value of every step since the last row (read back from the device: at a save)."""
        return self.restored + (torch.stack(self.steps).tolist() if self.steps else [])

    def mean(self, world: int, device: torch.device, reset: bool = True) -> float:
        """The row's mean over the whole batch (every rank's), as the per-step floats always gave it;
        ``reset=False`` (a row an uninterrupted run would not write: stop_at's) keeps the steps for the next."""
        losses = self.pending()  # the row's one read back from the device
        if reset:
            self.steps, self.restored = [], []
        return _mean_loss(losses, world, device)


def _mean_loss(losses: list[float], world: int, device: torch.device) -> float:
    """Mean NLL since the last log row, over the whole batch (every rank's columns)."""
    mean = torch.tensor(sum(losses) / len(losses), dtype=torch.float64, device=device)
    if world > 1:
        dist.all_reduce(mean)
        mean /= world
    return mean.item()


def gather(tensor: torch.Tensor, world: int) -> torch.Tensor:
    """Concatenate every rank's rows (dim 0): the full batch, as one process would hold it."""
    if world == 1:
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts)


def gather_objects(obj, world: int) -> list:
    """Every rank's ``obj`` (a picklable object), in rank order: ``[obj]`` for one process."""
    if world == 1:
        return [obj]
    objs = [None] * world
    dist.all_gather_object(objs, obj)
    return objs


class RankVote:
    """What every rank of a torchrun launch decides alike (one process: its own value). ``any`` is
    asked at every step: each step's value is all-reduced without waiting and read one step later,
    on a CPU (gloo) group, so that no step waits for the other ranks, nor for a GPU; ``all`` waits
    (at a save). Every rank calls them in the same order."""

    def __init__(self, world: int):
        self.world, self.pending = world, None
        self.group = dist.new_group(backend="gloo") if world > 1 else None

    def any(self, local: bool) -> bool:
        """Whether some rank's ``local`` was true one step ago (one process: ``local`` now)."""
        if self.world == 1:
            return local
        agreed = self.close()
        flag = torch.tensor([int(local)])
        self.pending = (dist.all_reduce(flag, dist.ReduceOp.MAX, group=self.group, async_op=True), flag)
        return agreed

    def all(self, local: bool) -> bool:
        """Whether ``local`` is true on every rank, now."""
        if self.world == 1:
            return local
        flag = torch.tensor([int(local)])
        dist.all_reduce(flag, dist.ReduceOp.MIN, group=self.group)
        return bool(flag.item())

    def close(self) -> bool:
        """The vote ``any`` sent last, once every rank has sent it (before the process group ends)."""
        if self.pending is None:
            return False
        (work, flag), self.pending = self.pending, None
        work.wait()
        return bool(flag.item())


def check_replicas_agree(model: TransformerXL, world: int) -> None:
    """The whole point of DDP: every replica ends with the same weights."""
    if world == 1:
        return
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    biggest, smallest = flat.clone(), flat.clone()
    dist.all_reduce(biggest, dist.ReduceOp.MAX)
    dist.all_reduce(smallest, dist.ReduceOp.MIN)
    if not torch.equal(biggest, smallest):
        raise RuntimeError("DDP ranks ended with different weights; this is a bug")


def leave_process_group() -> None:
    """The end of a torchrun launch's process, once the caller has dropped its result (and with it
    the DDP wrapper, held in reference cycles): freed while the process group still exists; left
    to the interpreter's exit, gloo's threads aborted a rank now and then."""
    if dist.is_initialized():
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()
