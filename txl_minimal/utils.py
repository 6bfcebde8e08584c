"""Small shared helpers: reproducibility and device choice."""
from __future__ import annotations

import os
import random

import numpy as np
import torch


def seed_everything(seed: int = 0, threads: int | None = None) -> None:
    """Seed python, numpy and torch; optionally pin torch's CPU thread count
    (float sums, hence printed numbers, depend on it)."""
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
