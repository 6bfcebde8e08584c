"""tests/gpu's modules begin with ``require_cuda()``: where torch sees no GPU the module is skipped
from the one line below, so that ``pytest -rs`` reports the whole folder in one line. (A skip in
conftest.py would do it too, but pytest 7.0, the oldest declared, then skips the whole session.)"""
from __future__ import annotations

import pytest
import torch

NO_GPU = ("no CUDA GPU here (torch.cuda.is_available() is False): tests/gpu runs on a GPU machine, "
          "`make test-gpu` (docs/gpu.md)")


def require_cuda() -> None:
    """Skip the calling test module unless torch sees a CUDA GPU."""
    if not torch.cuda.is_available():
        pytest.skip(NO_GPU, allow_module_level=True)
