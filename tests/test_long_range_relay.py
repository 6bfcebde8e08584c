"""scripts/long_range_relay.py: its two arms read the same forward pass and differ only in the gradient,
which without SG reaches the earlier segments of the window and with it does not."""
from __future__ import annotations

import importlib.util

import torch

from tiny import ROOT
from txl_minimal.model import TransformerXL, TXLConfig

spec = importlib.util.spec_from_file_location("long_range_relay", ROOT / "scripts" / "long_range_relay.py")
relay = importlib.util.module_from_spec(spec)
spec.loader.exec_module(relay)


def tiny_pair() -> tuple[TransformerXL, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    cfg = TXLConfig(vocab_size=20, n_layer=2, n_head=2, d_model=16, d_head=8, d_inner=32, dropout=0.0,
                    tgt_len=4, mem_len=8)
    rows = torch.randint(0, 20, (2, 17))
    scored = torch.zeros(2, 16, dtype=torch.bool)
    scored[:, -3:] = True  # the loss: the last segment's answers only
    return TransformerXL(cfg).double(), rows[:, :-1], rows[:, 1:], scored


def grads(model: TransformerXL, x, y, scored, stop_gradient: bool) -> tuple[float, dict[str, torch.Tensor]]:
    model.zero_grad()
    loss = relay.window_loss(model, x, y, scored, stop_gradient)
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_both_arms_compute_the_same_loss_and_differ_only_through_earlier_segments():
    model, x, y, scored = tiny_pair()
    loss_sg, g_sg = grads(model, x, y, scored, stop_gradient=True)
    loss_free, g_free = grads(model, x, y, scored, stop_gradient=False)
    assert abs(loss_sg - loss_free) < 1e-6  # the same forward pass
    earlier = max((g_free[n] - g_sg[n]).abs().max().item() for n in g_sg)  # what reaches earlier segments
    # a window of one segment has no earlier segment: the two gradients differ by rounding only
    _, g_one_sg = grads(model, x[:, -4:], y[:, -4:], scored[:, -4:], stop_gradient=True)
    _, g_one_free = grads(model, x[:, -4:], y[:, -4:], scored[:, -4:], stop_gradient=False)
    rounding = max((g_one_free[n] - g_one_sg[n]).abs().max().item() for n in g_one_sg)
    assert rounding < 1e-6 and earlier > 1000 * rounding, (earlier, rounding)  # (softmax in float32: rounding)
