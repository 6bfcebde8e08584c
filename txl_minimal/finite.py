"""Where a NaN or inf is: ``non_finite`` names the first tensor holding one, ``all_finite`` asks
once per device (a training's checkpoint, a loaded model's weights)."""
from __future__ import annotations

import torch


def non_finite(tensors: dict, what: str = "tensor") -> str | None:
    """'NaN or inf in {what} NAME (k of n values)' for the first floating tensor holding such
    values (or 'NAME is a ..., not a tensor'), else None."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            return f"{what} entry {name} is a {type(t).__name__}, not a tensor"
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            return f"NaN or inf in {what} {name} ({int((~torch.isfinite(t)).sum())} of {t.numel()} values)"
    return None


def all_finite(tensors) -> bool:
    """Whether every floating tensor of ``tensors`` is free of NaN and inf: read back once per device
    (``non_finite`` names the first bad one, reading each)."""
    flags: dict[torch.device, list[torch.Tensor]] = {}
    for t in tensors:
        if t.is_floating_point():
            flags.setdefault(t.device, []).append(torch.isfinite(t).all())
    return all(bool(torch.stack(f).all()) for f in flags.values())
