"""The two small models shipped with the package (trained on text8-mini, CPU only).

    from txl_minimal import load_pretrained
    txl = load_pretrained("txl")          # Transformer-XL: attn_type="rel", mem_len=64
    vanilla = load_pretrained("vanilla")  # the vanilla baseline: attn_type="abs", no memory

Both are the ``cpu-small`` preset (4 layers, d_model 128, ~0.8M parameters, 5000
steps, seed 0), identical except for the attention and the memory. They were made with

    python -m txl_minimal.train --preset cpu-small --out runs/cpu-small-txl
    python -m txl_minimal.train --preset cpu-small --out runs/cpu-small-vanilla --attn-type abs --mem-len 0
    python -m txl_minimal.train --ship runs/cpu-small-txl --name txl
    python -m txl_minimal.train --ship runs/cpu-small-vanilla --name vanilla

and ``python -m txl_minimal.train --evaluate NAME --update-json`` recomputes the numbers
in NAME.json (``--evaluate NAME`` alone prints one evaluation and writes nothing).
"""
from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Optional

import torch

from txl_minimal.model import TransformerXL

PRETRAINED_DIR = Path(__file__).resolve().with_name("pretrained")
NAMES = ("txl", "vanilla")

# name -> evaluations reported in NAME.json: (label, function, keyword arguments).
# "segments": train.evaluate, batch_size 1 so every token has the longest context.
# "sliding": train.sliding_window_eval, the vanilla model's evaluation; it runs one
# forward pass per character, so it scores only the first 20,000 predictions.
SLIDING_PREFIX = 20_000
EVALUATIONS: dict[str, list[tuple[str, str, dict]]] = {
    "txl": [
        ("train_memory", "segments", dict(tgt_len=64, mem_len=64)),
        ("long_memory", "segments", dict(tgt_len=64, mem_len=256, clamp_len=128, same_length=True)),
        ("train_memory_prefix", "segments", dict(tgt_len=64, mem_len=64, max_tokens=SLIDING_PREFIX)),
        ("long_memory_prefix", "segments", dict(tgt_len=64, mem_len=256, clamp_len=128, same_length=True,
                                                max_tokens=SLIDING_PREFIX)),
    ],
    "vanilla": [
        ("segments_no_memory", "segments", dict(tgt_len=64, mem_len=0)),
        ("segments_no_memory_prefix", "segments", dict(tgt_len=64, mem_len=0, max_tokens=SLIDING_PREFIX)),
        ("sliding_window_prefix", "sliding", dict(context=64, max_predictions=SLIDING_PREFIX)),
    ],
}


def _check_name(name: str) -> None:
    if name not in NAMES:
        raise ValueError(f"unknown pretrained model {name!r}; available: {', '.join(NAMES)}")


def load_pretrained(name: str = "txl", device: str | torch.device = "cpu") -> TransformerXL:
    """A shipped model, in eval mode, from the package files (no network)."""
    _check_name(name)
    path = PRETRAINED_DIR / f"{name}.pt"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing. Fix: reinstall the package, or rebuild it with "
                                f"python -m txl_minimal.train --ship RUN_DIR --name {name}")
    from txl_minimal.train import model_from_checkpoint

    return model_from_checkpoint(torch.load(path, map_location=device, weights_only=True), device)


def export_pretrained(run_dir: str | Path, name: str) -> Path:
    """Copy a run's weights + configs (no optimiser) and its log into the package."""
    from txl_minimal.train import load_checkpoint, save_checkpoint

    _check_name(name)
    run_dir = Path(run_dir)
    ckpt = load_checkpoint(run_dir / "ckpt.pt")
    path = PRETRAINED_DIR / f"{name}.pt"
    save_checkpoint(dict(format=1, model={k: v.float().cpu() for k, v in ckpt["model"].items()},
                         model_config=ckpt["model_config"], train_config=ckpt["train_config"],
                         step=ckpt["step"], wall_time_s=ckpt["wall_time_s"]), path)
    log = (run_dir / "log.csv").read_text().replace("\r\n", "\n")  # older logs had CRLF
    (PRETRAINED_DIR / f"{name}.log.csv").write_text(log)
    return path


def evaluate_pretrained(name: str, splits: tuple[str, ...] = ("valid", "test"),
                        progress: bool = False, write: bool = True) -> dict:
    """Run EVALUATIONS[name] on text8-mini and (write=True) store them in NAME.json."""
    from txl_minimal.data import load_corpus
    from txl_minimal.train import evaluate, sliding_window_eval

    _check_name(name)
    model = load_pretrained(name)
    ckpt = torch.load(PRETRAINED_DIR / f"{name}.pt", weights_only=True)
    corpus = load_corpus("text8-mini")
    results: dict[str, dict] = {}
    for split in splits:
        data = getattr(corpus, split)
        for label, kind, kw in EVALUATIONS[name]:
            t0 = time.perf_counter()
            if kind == "segments":
                r = evaluate(model, data, batch_size=1, progress=progress, **kw)
            else:
                r = sliding_window_eval(model, data, progress=progress, **kw)
            seconds = time.perf_counter() - t0
            results[f"{split}/{label}"] = dict(bpc=round(r["bpc"], 4), tokens=r["tokens"], settings=kw,
                                               seconds=round(seconds, 1),
                                               predictions_per_s=round(r["tokens"] / seconds, 1))
    summary = dict(name=name, corpus=corpus.name, step=ckpt["step"],
                   train_wall_time_s=round(ckpt["wall_time_s"], 1),
                   train_tokens_per_s=round(ckpt["step"] * ckpt["train_config"]["batch_size"]
                                            * ckpt["model_config"]["tgt_len"] / ckpt["wall_time_s"]),
                   params=sum(p.numel() for p in model.parameters()),
                   model_config=ckpt["model_config"], train_config=ckpt["train_config"],
                   results=results, torch=torch.__version__, threads=torch.get_num_threads(),
                   machine=platform.machine())
    if write:
        (PRETRAINED_DIR / f"{name}.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def pretrained_summary(name: str) -> Optional[dict]:
    """NAME.json (configs and final numbers) as a dict, or None if not shipped yet."""
    _check_name(name)
    path = PRETRAINED_DIR / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None
