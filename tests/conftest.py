"""Shared fixtures: one tiny Transformer-XL for every test that needs a model, one tiny run folder."""
from __future__ import annotations

import urllib.request

import pytest
import torch

from tiny import TINY, synthetic_corpus, tiny_cfg, tiny_train_cfg
from txl_minimal.model import TransformerXL, TXLConfig
from txl_minimal.train import train


@pytest.fixture
def tiny_config():
    """Factory: ``tiny_config(**overrides)`` -> a 2-layer, 2-head, d_model 16 ``TXLConfig``."""
    return lambda **overrides: TXLConfig(**{**TINY, **overrides})


@pytest.fixture
def tiny_model(tiny_config):
    """Factory: ``tiny_model(seed=0, noise=0.05, dtype=torch.float64, **overrides)``.

    A seeded tiny ``TransformerXL`` in eval mode whose parameters are moved off the
    init by ``noise`` x N(0, 1), so that u, v and every bias visibly matter (the init
    has them at 0). float64 by default: comparisons against references can be tight.
    """
    def make(seed: int = 0, noise: float = 0.05, dtype: torch.dtype = torch.float64,
             **overrides) -> TransformerXL:
        torch.manual_seed(seed)
        model = TransformerXL(tiny_config(**overrides)).to(dtype).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(noise * torch.randn_like(p))
        return model
    return make


@pytest.fixture
def no_network(monkeypatch):
    """Tests may open file:// URLs only; anything else fails loudly instead of downloading."""
    real = urllib.request.urlopen

    def guarded(url, *args, **kwargs):
        assert str(url).startswith("file:"), f"test tried to reach the network: {url}"
        return real(url, *args, **kwargs)

    monkeypatch.setattr(urllib.request, "urlopen", guarded)
    monkeypatch.delenv("TXL_CORPUS", raising=False)
    monkeypatch.delenv("TXL_DATA_DIR", raising=False)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny training run with dropout (so its RNG state matters) and a memory."""
    out = tmp_path_factory.mktemp("run")
    train(tiny_cfg(), tiny_train_cfg(out, max_steps=6, eval_interval=3), synthetic_corpus("the cat sat "),
          progress=False)
    return out
