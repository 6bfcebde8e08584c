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


def default_device() -> str:
    """"cuda" when a GPU is visible, else "cpu"."""
    return "cuda" if torch.cuda.is_available() else "cpu"
