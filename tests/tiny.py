"""Tiny configs and corpora, and small helpers, shared by the train/evaluate/checkpoint/pretrained tests."""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import torch

from txl_minimal.data import Corpus, encode
from txl_minimal.model import TXLConfig
from txl_minimal.train import TrainConfig

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]


# The tiny model every test uses (conftest.tiny_model builds it, seeded and moved off the init).
TINY = dict(vocab_size=27, n_layer=2, n_head=2, d_model=16, d_head=8, d_inner=32,
            dropout=0.0, dropatt=0.0, tgt_len=6, mem_len=6)


# --set values that make the cpu-tiny preset train in a second
TINY_SET = ["d_model=16", "d_head=8", "d_inner=32", "eval_tokens=64"]
DAMAGES = ("truncated", "empty", "random bytes", "wrong content")


def tiny_cfg(**overrides) -> TXLConfig:
    """The tiny config as the training tests use it: dropout 0.1, segments and memory of 8."""
    return TXLConfig(**{**TINY, "dropout": 0.1, "dropatt": 0.1, "tgt_len": 8, "mem_len": 8, **overrides})


def tiny_train_cfg(out: Path, **overrides) -> TrainConfig:
    base = dict(batch_size=4, lr=3e-3, warmup_steps=3, max_steps=12, eval_interval=4, eval_tokens=64,
                eval_batch_size=2, log_interval=2, out=str(out), amp="off")  # fp32 on every CPU
    base.update(overrides)
    if "warmup_steps" not in overrides:  # a run of 1 or 2 steps warms up over them (train warns otherwise)
        base["warmup_steps"] = min(3, base["max_steps"])
    return TrainConfig(**base)


def synthetic_corpus(text: str, n_train: int = 4 * (8 * 5 + 1)) -> Corpus:
    """Repeated text; the default train split holds exactly 5 segments per column (tgt_len 8)."""
    ids = encode((text * (1 + 3 * n_train // len(text)))[: n_train + 400])
    return Corpus("synthetic", ids[:n_train], ids[n_train:n_train + 200], ids[n_train + 200:])


def printed_bpc(out: str) -> float:
    """The bpc in the line `python -m txl_minimal.evaluate` prints."""
    return float(re.search(r"bpc (\d+\.\d+) over", out).group(1))


FOX = "the quick brown fox jumps over the lazy dog "


def overfitting_corpus() -> Corpus:
    """Trains on FOX, validates on FOX reversed: at lr 0.06 the valid bpc falls, then rises (measured:
    4.73, 4.63, 4.68, 4.70 at steps 4, 8, 12, 16), so the best state is not the last."""
    n_train = 4 * (8 * 5 + 1)
    valid = encode((FOX[::-1] * 5)[:200])
    return Corpus("synthetic", encode((FOX * 5)[:n_train]), valid, valid)


def overfitting_cfg(out: Path, **overrides) -> TrainConfig:
    """tiny_train_cfg at lr 0.06 for 16 steps, evaluated every 4: the curve overfitting_corpus describes."""
    return tiny_train_cfg(out, **{"lr": 0.06, "max_steps": 16, "eval_interval": 4, **overrides})


def run_segments(model, xs: list[torch.Tensor], train: bool):
    """(log-probabilities, gradients, memories) of consecutive segments ``xs``, each fed the last
    one's memory: the full log-softmax, or the targets' own where the adaptive softmax trains (it
    gives no logits); the parameters' gradients summed over every segment's loss, if ``train``."""
    model.train(train)
    model.zero_grad()
    mems, lps = None, []
    with torch.set_grad_enabled(train):
        for x in xs:
            out = model(x, mems, targets=x)
            assert out.nll is not None
            if train:
                out.loss.backward()
            mems = out.mems
            lps.append((-out.nll if out.logits is None else out.logits.log_softmax(-1)).detach())
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return lps, grads, mems


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def cli_error(cli, argv: list[str], capsys) -> str:
    """What an argparse error printed; fails unless the command exited with status 2."""
    with pytest.raises(SystemExit) as exit_:
        cli(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


def damage(path: Path, how: str, wrong: bytes) -> None:
    """Replace ``path`` by a damaged copy of itself (``wrong``: another valid file of its kind), one of DAMAGES."""
    raw = path.read_bytes()
    path.write_bytes({"truncated": raw[: len(raw) // 2], "empty": b"",
                      "random bytes": random.Random(0).randbytes(len(raw)), "wrong content": wrong}[how])
