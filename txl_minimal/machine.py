"""This machine: the device a run takes (``default_device``, ``check_device``), whether bf16 pays on
it (``bf16_speedup``), and its seeds and CPU threads (``seed_everything``: float sums, hence printed
numbers, depend on both); the RNG states a checkpoint keeps for a bit-exact resume (``rng_state``)."""
from __future__ import annotations

import os
import random
import time
from typing import Optional

import numpy as np
import torch

from txl_minimal import validation


def seed_everything(seed: int = 0, threads: int | None = None) -> None:
    """Seed python, numpy and torch; optionally pin torch's CPU thread count
    (float sums, hence printed numbers, depend on it). ``$TXL_THREADS``, where set, replaces ``threads``
    (the notebooks ask for 2; the tests run them with 1, two at a time: docs/testing.md)."""
    seed = validation.count(seed, "seed", "seed_everything", 0, 2 ** 32 - 1, " (NumPy's seeds are 32-bit)")
    threads, = validation.counts("seed_everything", 1, threads=threads)
    env = os.environ.get("TXL_THREADS", "").strip()
    if threads is not None and env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"seed_everything: $TXL_THREADS must be a positive integer, got {env!r}. "
                             "Fix: export TXL_THREADS=1, or unset it")
        threads = int(env)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if threads is not None:
        torch.set_num_threads(threads)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))


def default_device(local_rank: int | None = None) -> str:
    """"cuda" when a GPU is visible (``cuda:<local_rank>`` for one process of a
    data-parallel run), else "cpu"."""
    if not torch.cuda.is_available():
        return "cpu"
    return "cuda" if local_rank is None else f"cuda:{local_rank}"


def check_device(device: str | torch.device, what: str = "device") -> torch.device:
    """``device`` ("auto", "cpu", "cuda", "cuda:N") as a ``torch.device`` this machine has, else a
    ``ValueError`` naming ``what``, the device and the fix (not torch's "Torch not compiled with
    CUDA enabled" from deep inside a ``.to``, nor a checkpoint called corrupt)."""
    if isinstance(device, str) and device == "auto":
        return torch.device(default_device(0))
    kinds = "'auto', 'cpu', 'cuda' or 'cuda:N'"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):  # torch's message lists every device type it knows
        raise ValueError(f"{what} must be {kinds}, got {device!r}") from None
    if dev.type == "cuda":
        n = torch.cuda.device_count()
        if (dev.index or 0) >= n:
            why = "" if torch.backends.cuda.is_built() else f" (torch {torch.__version__} is built without CUDA)"
            raise ValueError(f"{what} is {str(device)!r}, but torch sees {n} GPU(s){why}. Fix: "
                             "'auto' (a GPU if there is one) or 'cpu'")
    elif dev.type != "cpu":  # mps: no float64, which evaluation sums in; the amp set-up knows cpu and cuda
        raise ValueError(f"{what} {str(device)!r}: this package runs on a CPU or a CUDA GPU, so {what} must be "
                         f"{kinds}. Fix: 'cpu'" + (" (evaluation sums in float64, which an Apple GPU lacks)"
                                                   if dev.type == "mps" else ""))
    return dev


def bf16_speedup(device: str | torch.device, rows: int, cols: int, inner: int, reps: int = 5,
                 sample_s: float = 2e-3) -> float:
    """How many times faster a (rows x cols) @ (cols x inner) matmul runs under bf16 autocast than
    in fp32 on ``device`` (fastest of ``reps`` samples each, after a warm-up; CUDA-synchronised).
    Each sample repeats the product for at least ``sample_s`` seconds: a small model's matmul takes
    microseconds, and timed once it measures the timer (it picked bf16 in one process and fp32 in
    another). Above 1 only where the hardware multiplies bf16 natively (AMX, AVX512-BF16, tensor
    cores); a CPU without such units emulates bf16 and comes out slower (benchmarks/README.md)."""
    device = torch.device(device)
    a = torch.randn(rows, cols, device=device)
    b = torch.randn(cols, inner, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def timed(fn, n: int) -> float:
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        return time.perf_counter() - t0

    def fastest(fn) -> float:
        fn()  # warm-up
        n = 1
        while (t := timed(fn, n)) < sample_s and n < 2 ** 20:  # repeat until a sample is long enough
            n *= 2
        return min([t] + [timed(fn, n) for _ in range(reps - 1)]) / n

    def bf16() -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            return a @ b
    return fastest(lambda: a @ b) / fastest(bf16)


def rng_state(device: Optional[torch.device | str] = None) -> dict:
    """This process's RNG states (torch, CUDA, numpy, python) as CPU tensors and plain lists, so
    that a checkpoint holding them still loads with weights_only=True. CUDA's is the generator of
    ``device`` when it is a GPU (the one training draws from), else of the current GPU."""
    keys, pos, has_gauss, gauss = np.random.get_state()[1:]
    version, py_state, py_gauss = random.getstate()
    state = dict(torch=torch.get_rng_state(),
                 numpy=dict(keys=torch.from_numpy(keys.astype(np.int64)), pos=pos,
                            has_gauss=has_gauss, gauss=gauss),
                 python=dict(version=version, state=list(py_state), gauss=py_gauss))
    if torch.cuda.is_available():
        gpu = torch.device(device) if device is not None and torch.device(device).type == "cuda" else "cuda"
        state["cuda"] = torch.cuda.get_rng_state(gpu)
    return state


def set_rng_state(state: dict, device: Optional[torch.device | str] = None) -> None:
    """Restore what ``rng_state(device)`` returned (CUDA only where there is a GPU). The states may
    come from a checkpoint loaded onto a GPU: torch takes them only as CPU byte tensors."""
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        gpu = torch.device(device) if device is not None and torch.device(device).type == "cuda" else "cuda"
        torch.cuda.set_rng_state(state["cuda"].cpu(), gpu)
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].cpu().numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))
