"""The paper's ablation in miniature, and adaptive attention span.

Dai et al. (2019), Sec. 4.3 / Table 6, ask two questions at once: which positional
encoding (the paper's relative one, Shaw et al.'s learned relative table, or the
vanilla absolute sinusoids added to the input), and with or without segment-level
recurrence (memory). ``run_ablation`` trains every combination with the same size,
data (text8-mini), number of steps and seed, and scores each on the test split at
the training context and at a longer one:

  with memory     the training segment (tgt_len) with LONG_FACTOR x the memory
  without memory  one segment LONG_FACTOR x longer, still without memory

A model that generalises to longer contexts gets better (or stays level); the
vanilla model with memory cannot tell its memory's positions from the current
segment's (the paper's "temporal confusion", Sec. 3.3) and gets worse.

The same script also trains an adaptive-span model (Sukhbaatar et al., 2019): each
head learns how far back it looks, z, through the soft mask
m_z(x) = clamp((R + z - x) / R, 0, 1) on the distance x, with an L1 penalty on z;
keys beyond every head's reach are trimmed from the memory, which saves attention
FLOPs (``attention_flops_per_token``). Its counterpart is the same model with a
fixed span (plain relative attention), trained for the same steps.

    python scripts/ablation.py                  # ~50 min on 2 CPU cores
    python scripts/ablation.py --steps 3 --tiny --out /tmp/abl   # a smoke test
"""
from __future__ import annotations

import csv
import json
import math
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch

from txl_minimal.data import Corpus, load_corpus
from txl_minimal.model import TransformerXL, TXLConfig
from txl_minimal.train import TrainConfig, evaluate, train

ABLATION_DIR = Path(__file__).resolve().with_name("ablation")  # the shipped results
TEST_BATCH = 16  # test text cut into 16 columns, each read with memory carried (train.evaluate)
LONG_FACTOR = 4  # "longer context": 4 x the training memory, or 4 x the segment without memory

# One size for every variant: cpu-tiny-like, 3 layers x 4 heads so that the
# adaptive spans have 12 heads to differ across. "shaw" clips distances at 32: with
# memory (distances up to 63) the shared vector of distances >= 32 is trained; without
# memory (distances up to 31) it is not, which shows at the longer segment.
BASE_MODEL = dict(n_layer=3, n_head=4, d_model=64, d_head=16, d_inner=256, dropout=0.0, dropatt=0.0,
                  tgt_len=32, mem_len=32, shaw_max_dist=32)
BASE_TRAIN = dict(corpus="text8-mini", batch_size=16, lr=3e-3, warmup_steps=100, max_steps=1500,
                  eval_interval=250, eval_tokens=8192, eval_batch_size=8, log_interval=25, seed=0)
# Smoke tests (--tiny): the same code path in seconds.
TINY_MODEL = dict(n_layer=2, n_head=2, d_model=16, d_head=8, d_inner=32, dropout=0.0, dropatt=0.0,
                  tgt_len=8, mem_len=8, shaw_max_dist=8)

# The adaptive-span pair gets a longer memory, so there is something to save.
SPAN_MEM_LEN = 96  # largest span = tgt_len + mem_len = 128 tokens
SPAN_SETTINGS = dict(adaptive_span=True, span_ramp=16, span_init=0.5, span_loss_coeff=2e-6)


@dataclass
class Variant:
    """One trained model of the ablation."""

    name: str  # run directory and results key
    label: str  # for tables and plots
    overrides: dict  # TXLConfig fields on top of the base size
    group: str = "encoding"  # "encoding" (the 3 x 2 table) or "span" (the adaptive-span pair)
    notes: str = ""


def variants(span_loss_coeff: Optional[float] = None) -> list[Variant]:
    """The 3 encodings x {memory, no memory}, then the adaptive-span pair."""
    out = []
    for attn, desc in (("rel", "Transformer-XL relative encoding, terms (a)-(d)"),
                       ("shaw", "Shaw et al. (2018): (a) + (b) with a learned table, clipped"),
                       ("abs", "vanilla: absolute sinusoids added to the input")):
        out.append(Variant(f"{attn}_mem", f"{attn} + memory", dict(attn_type=attn), notes=desc))
        out.append(Variant(f"{attn}_nomem", f"{attn}, no memory", dict(attn_type=attn, mem_len=0), notes=desc))
    span = dict(SPAN_SETTINGS)
    if span_loss_coeff is not None:
        span["span_loss_coeff"] = span_loss_coeff
    out.append(Variant("rel_mem96_fixed", "rel + memory 96, fixed span",
                       dict(attn_type="rel", mem_len=SPAN_MEM_LEN), group="span",
                       notes="the adaptive-span model's counterpart: every head sees all 128 keys"))
    out.append(Variant("rel_mem96_span", "rel + memory 96, adaptive span",
                       dict(attn_type="rel", mem_len=SPAN_MEM_LEN, **span), group="span",
                       notes="Sukhbaatar et al. (2019): a learned span z per head"))
    return out


def contexts(cfg: TXLConfig) -> dict[str, dict]:
    """The two evaluation settings of a model trained with ``cfg``."""
    train_ctx = dict(tgt_len=cfg.tgt_len, mem_len=cfg.mem_len)
    if cfg.mem_len > 0:
        long_ctx = dict(tgt_len=cfg.tgt_len, mem_len=LONG_FACTOR * cfg.mem_len)
        desc = f"segment {cfg.tgt_len}, memory {LONG_FACTOR * cfg.mem_len} ({LONG_FACTOR}x the training memory)"
    else:
        long_ctx = dict(tgt_len=LONG_FACTOR * cfg.tgt_len, mem_len=0)
        desc = f"segment {LONG_FACTOR * cfg.tgt_len} ({LONG_FACTOR}x the training segment), no memory"
    return dict(train=train_ctx, long=long_ctx, long_desc=desc)


# ----------------------------------------------------------------------------- FLOPs

def _pair_flops(d_head: int, attn_type: str) -> int:
    """FLOPs of one (query, key) pair in one head: 2 d_head for q.k, 2 d_head for
    p.v, and 2 d_head more for the positional term (b)+(d) of "rel" / (b) of "shaw"."""
    return (6 if attn_type in ("rel", "shaw") else 4) * d_head


def attention_flops_per_token(n_layer: int, n_head: int, d_head: int, tgt_len: int, mem_len: int,
                              attn_type: str = "rel", spans: Optional[Sequence[Sequence[float]]] = None,
                              span_ramp: Optional[int] = None, count: str = "computed") -> float:
    """Attention FLOPs per predicted token (scores and weighted sum; no projections).

    count="computed": what the code multiplies. Every query of the segment meets
    every key of [memory o segment], masked future keys included; with ``spans``
    (per layer, per head, in tokens) the memory of a layer is first trimmed to the
    reach of its longest head, ceil(max z + R) keys (``RelMultiHeadAttn.trim_memory``).
    count="causal": only the pairs that can get weight: query i of the segment sees
    distances x = 0 .. mem_len + i, and a head with span z only those with
    m_z(x) > 0, i.e. x < z + R: min(mem_len + i + 1, ceil(z + R)) keys.
    """
    if count not in ("computed", "causal"):
        raise ValueError(f"count must be 'computed' or 'causal', got {count!r}")
    if spans is not None and span_ramp is None:
        raise ValueError("spans need span_ramp (R)")
    if spans is not None and len(spans) != n_layer:
        raise ValueError(f"spans must hold n_layer={n_layer} rows, got {len(spans)}")
    total = 0.0
    for layer in range(n_layer):
        heads = [None] * n_head if spans is None else [float(z) for z in spans[layer]]
        if len(heads) != n_head:
            raise ValueError(f"spans[{layer}] must hold n_head={n_head} values, got {len(heads)}")
        reach = [math.inf if z is None else math.ceil(z + span_ramp) for z in heads]
        if count == "computed":
            mem = mem_len if spans is None else min(mem_len, max(reach))
            total += n_head * tgt_len * (mem + tgt_len)
        else:
            total += sum(min(mem_len + i + 1, r) for r in reach for i in range(tgt_len))
    return total * _pair_flops(d_head, attn_type) / tgt_len


def model_spans(model: TransformerXL) -> Optional[list[list[float]]]:
    """The learned spans z in tokens, [layer][head], or None without adaptive span."""
    if not model.cfg.adaptive_span:
        return None
    return [[float(z) for z in layer.dec_attn.spans().detach()] for layer in model.layers]


def flops_report(cfg: TXLConfig, ctx: dict, spans=None) -> dict:
    """FLOPs per token at an evaluation context, both counts."""
    kw = dict(n_layer=cfg.n_layer, n_head=cfg.n_head, d_head=cfg.d_head, tgt_len=ctx["tgt_len"],
              mem_len=ctx["mem_len"], attn_type=cfg.attn_type, spans=spans,
              span_ramp=cfg.span_ramp if spans is not None else None)
    return {count: round(attention_flops_per_token(count=count, **kw)) for count in ("computed", "causal")}


# ----------------------------------------------------------------------------- running

def train_config(steps: int, out: str | Path, tiny: bool = False) -> TrainConfig:
    """BASE_TRAIN for ``steps`` steps (warm-up and evaluation interval shrink for short runs)."""
    kw = dict(BASE_TRAIN, max_steps=steps, out=str(out), device="cpu",
              warmup_steps=min(BASE_TRAIN["warmup_steps"], max(1, steps // 10)),
              eval_interval=min(BASE_TRAIN["eval_interval"], steps))
    if tiny:
        kw.update(eval_tokens=512)
    return TrainConfig(**kw)


def model_config(variant: Variant, tiny: bool = False) -> TXLConfig:
    """The base size with the variant's changes (--tiny: the smoke-test size, where
    the adaptive-span pair gets 3 x the segment as memory and a ramp of 4)."""
    overrides = dict(variant.overrides)
    if tiny and variant.group == "span":
        overrides.update(mem_len=3 * TINY_MODEL["tgt_len"], span_ramp=4)
    return TXLConfig(**{**(TINY_MODEL if tiny else BASE_MODEL), **overrides})


def _round(x: float, nd: int = 4) -> float:
    return float(round(x, nd))


def run_variant(variant: Variant, steps: int, out_dir: Path, corpus: Corpus, tiny: bool = False,
                eval_tokens: Optional[int] = None, eval_batch_size: int = TEST_BATCH, keep_ckpt: bool = False,
                progress: bool = False) -> dict:
    """Train one variant into ``out_dir``/name (log.csv), score it, return its results."""
    model_cfg = model_config(variant, tiny)
    run_dir = Path(out_dir) / variant.name
    train_cfg = train_config(steps, run_dir, tiny)
    t0 = time.perf_counter()
    res = train(model_cfg, train_cfg, corpus=corpus, progress=progress)
    train_s = time.perf_counter() - t0
    model = res.model
    ctx = contexts(model_cfg)
    spans = model_spans(model)
    test = {}
    t1 = time.perf_counter()
    for which in ("train", "long"):
        r = evaluate(model, corpus.test, batch_size=eval_batch_size, max_tokens=eval_tokens, **ctx[which])
        test[which] = _round(r["bpc"])
    eval_s = time.perf_counter() - t1
    if not keep_ckpt:
        (run_dir / "ckpt.pt").unlink(missing_ok=True)
    result = dict(
        label=variant.label, group=variant.group, notes=variant.notes,
        attn_type=model_cfg.attn_type, mem_len=model_cfg.mem_len, adaptive_span=model_cfg.adaptive_span,
        params=model.num_params(), steps=res.step,
        final_train_bpc=_round(res.train_bpc), final_valid_bpc=_round(res.valid_bpc),
        test_bpc=dict(train_ctx=test["train"], long_ctx=test["long"]),
        contexts=dict(train_ctx=ctx["train"], long_ctx=ctx["long"], long_desc=ctx["long_desc"]),
        attn_flops_per_token=dict(train_ctx=flops_report(model_cfg, ctx["train"], spans),
                                  long_ctx=flops_report(model_cfg, ctx["long"], spans)),
        train_wall_s=round(train_s, 1), eval_wall_s=round(eval_s, 1),
        log=f"{variant.name}/log.csv", model_config=model_cfg.to_dict(),
        train_config={k: v for k, v in asdict(train_cfg).items() if k not in ("out", "device")},
    )
    if spans is not None:
        result["spans"] = [[round(z, 2) for z in layer] for layer in spans]
        result["span_reach"] = [[math.ceil(z + model_cfg.span_ramp) for z in layer] for layer in spans]
        # the same model with its spans switched off: how much the learned spans cost or save
        result["attn_flops_per_token_fixed"] = dict(train_ctx=flops_report(model_cfg, ctx["train"]),
                                                    long_ctx=flops_report(model_cfg, ctx["long"]))
    return result


def run_ablation(steps: int = BASE_TRAIN["max_steps"], out: str | Path = ABLATION_DIR, tiny: bool = False,
                 only: Optional[Sequence[str]] = None, eval_tokens: Optional[int] = None,
                 span_loss_coeff: Optional[float] = None, threads: Optional[int] = 2,
                 keep_ckpt: bool = False, progress: bool = False, verbose: bool = True) -> dict:
    """Train and score every variant in turn; write ``out``/results.json and return it."""
    if threads:
        torch.set_num_threads(threads)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    corpus = load_corpus(BASE_TRAIN["corpus"])
    chosen = [v for v in variants(span_loss_coeff) if only is None or v.name in only]
    if only is not None and len(chosen) != len(set(only)):
        known = [v.name for v in variants()]
        raise ValueError(f"unknown variant in {list(only)}; choose from {known}")
    t0 = time.perf_counter()
    runs = {}
    for v in chosen:
        runs[v.name] = run_variant(v, steps, out, corpus, tiny=tiny, eval_tokens=eval_tokens,
                                   keep_ckpt=keep_ckpt, progress=progress)
        if verbose:
            r = runs[v.name]
            print(f"{v.name:18s} test bpc {r['test_bpc']['train_ctx']:.3f} (train ctx) "
                  f"{r['test_bpc']['long_ctx']:.3f} (long ctx)  train {r['train_wall_s']:.0f} s", flush=True)
    results = dict(
        meta=dict(
            script="scripts/ablation.py", steps=steps, tiny=tiny, seed=BASE_TRAIN["seed"],
            corpus=corpus.name, split="test", eval_tokens=eval_tokens or len(corpus.test) - 1,
            eval_batch_size=TEST_BATCH, long_factor=LONG_FACTOR,
            long_context=("with memory: the training segment and LONG_FACTOR x the training memory; "
                          "without memory: one segment LONG_FACTOR x the training segment"),
            base_model=TINY_MODEL if tiny else BASE_MODEL,
            threads=torch.get_num_threads(), torch=torch.__version__, machine=platform.machine(),
            total_wall_s=round(time.perf_counter() - t0, 1)),
        runs=runs)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


# ----------------------------------------------------------------------------- reading

def load_results(path: str | Path = ABLATION_DIR / "results.json") -> dict:
    """The shipped (or a fresh) results.json as a dict."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing. Fix: python scripts/ablation.py --out {path.parent}")
    return json.loads(path.read_text())


def read_log(path: str | Path) -> list[dict]:
    """A run's log.csv as a list of rows with numbers (valid_bpc None when not evaluated)."""
    rows = []
    with Path(path).open() as f:
        for r in csv.DictReader(f):
            rows.append({k: (None if v == "" else (int(v) if k in ("step", "tokens") else float(v)))
                         for k, v in r.items()})
    return rows


def results_table(results: dict, group: Optional[str] = None) -> str:
    """A fixed-width text table of the test bpc (and attention FLOPs) per run."""
    head = (f"{'variant':32s} {'test bpc':>9s} {'test bpc':>9s} {'change':>7s} {'attn kFLOPs/token':>18s}\n"
            f"{'':32s} {'train ctx':>9s} {'long ctx':>9s} {'':>7s} {'(train ctx)':>18s}")
    lines = [head]
    for name, r in results["runs"].items():
        if group is not None and r["group"] != group:
            continue
        a, b = r["test_bpc"]["train_ctx"], r["test_bpc"]["long_ctx"]
        flops = r["attn_flops_per_token"]["train_ctx"]["computed"] / 1e3
        change = round(b - a, 3) + 0.0  # + 0.0: a change that rounds to zero prints as +0.000
        lines.append(f"{r['label']:32s} {a:9.3f} {b:9.3f} {change:+7.3f} {flops:18.1f}")
    return "\n".join(lines)
