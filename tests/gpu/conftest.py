"""tests/gpu: what only a CUDA GPU can check (`make test-gpu`). Each module is marked ``gpu``
(``-m "not gpu"`` leaves it out) and starts with ``cuda_only.require_cuda()``."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture
def cuda() -> torch.device:
    return torch.device("cuda")
