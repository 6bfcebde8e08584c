"""The paper's ablation in miniature, and adaptive attention span: the experiment's
definition and its results.

Dai et al. (2019), Sec. 4.2 / Table 6, vary the positional encoding (the paper's
relative one, Shaw et al.'s learned relative table, the absolute ones of Vaswani et al. and
Al-Rfou et al.), segment-level recurrence (memory) and the loss ("full": every position of
the segment; "half": its later half); the absolute encodings appear there without memory
and with the half loss only. Here every encoding (the paper's, Shaw's, absolute sinusoids
added to the input) is trained with and without memory, all with the full loss, plus the
absolute one without memory and with the half loss (``variants``); same size, data
(text8-mini), number of steps and seeds. Each is scored on the test split at the training
context and at a longer one (``contexts``):

  with memory     the training segment (tgt_len) with LONG_FACTOR x the memory
  without memory  one segment LONG_FACTOR x longer, still without memory

A model that generalises to longer contexts gets better (or stays level); the
vanilla model with memory cannot tell its memory's positions from the current
segment's (the paper's "temporal confusion", Sec. 3.3) and gets worse.

The same experiment also trains an adaptive-span model (Sukhbaatar et al., 2019): each
head learns how far back it looks, z, through the soft mask
m_z(x) = clamp((R + z - x) / R, 0, 1) on the distance x, with an L1 penalty on z;
keys beyond every head's reach are trimmed from the memory, which saves attention
FLOPs (``txl_minimal.flops.attention_flops_per_token``). Its counterpart is the same
model with a fixed span (plain relative attention), trained for the same steps.

Running it is not the package's job: scripts/ablation.py trains every variant and
writes RESULTS_DIR (results/ablation/ at the top of the repository: results.json and
NAME/log.csv per run); this module reads them (``load_results``, ``read_log``,
``results_table``).

    python scripts/ablation.py --replace-shipped   # ~20 min on 2 CPU cores (3 seeds)
    python scripts/ablation.py --steps 3 --tiny --out /tmp/abl   # a smoke test
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from txl_minimal import validation
from txl_minimal.data import as_ids
from txl_minimal.model import TransformerXL, TXLConfig
from txl_minimal.train import TrainConfig
from txl_minimal.utils import read_json
from txl_minimal.validation import count

GROUPS = ("encoding", "abs_far", "half_loss", "span")  # a Variant's group
LOG_FIX = "Fix: a run's log.csv (results/ablation/NAME/log.csv, or OUT/log.csv of a training)"

# The shipped results live beside the package, not in it (the package is installed
# editable, so this is the repository's folder).
RESULTS_DIR = Path(__file__).resolve().parents[2] / "results" / "ablation"

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
    """One trained model of the ablation: its name, its label, and what it changes from the base size.

    Attributes:
        name: its run directory and key in results.json ("rel_mem").
        label: how tables and plots name it.
        overrides: TXLConfig fields on top of the base size (``model_config`` applies them).
        group: "encoding" (the 3 x 2 table), "abs_far", "half_loss" or "span" (the adaptive-span pair).
        notes: what it is, in a sentence.
        train_overrides: TrainConfig fields (``loss_positions="half"``).

    Examples:
        >>> from txl_minimal.tutorial import ablation
        >>> v = ablation.variants()[1]
        >>> v.name, v.label, v.overrides
        ('rel_nomem', 'rel, no memory', {'attn_type': 'rel', 'mem_len': 0})
    """

    name: str  # run directory and results key
    label: str  # for tables and plots
    overrides: dict  # TXLConfig fields on top of the base size
    group: str = "encoding"  # "encoding" (the 3 x 2 table), "abs_far", "half_loss" or "span" (the adaptive-span pair)
    notes: str = ""
    train_overrides: dict = field(default_factory=dict)  # TrainConfig fields (loss_positions="half")


def variants(span_loss_coeff: Optional[float] = None) -> list[Variant]:
    """The ablation's models: 3 encodings x {memory, no memory}, the authors' absolute one, half loss, adaptive span.

    In order: rel, Shaw and abs, each with and without memory; abs_far with memory (the authors'
    absolute positions counted back from the last key); abs without memory trained on the later
    half of each segment (the paper's setting for absolute encodings); then the adaptive-span pair
    (``span_loss_coeff``: its L1 penalty, None: SPAN_SETTINGS').

    Returns:
        A list of ``Variant``, what scripts/ablation.py trains and results.json holds.

    Examples:
        >>> from txl_minimal.tutorial import ablation
        >>> [v.name for v in ablation.variants()]
        ['rel_mem', 'rel_nomem', 'shaw_mem', 'shaw_nomem', 'abs_mem', 'abs_nomem', 'abs_far_mem', 'abs_nomem_half',
         'rel_mem96_fixed', 'rel_mem96_span']
    """
    if span_loss_coeff is not None and (isinstance(span_loss_coeff, bool) or not isinstance(
            span_loss_coeff, (int, float)) or not 0 <= span_loss_coeff < math.inf):
        raise ValueError(f"variants: span_loss_coeff must be a number >= 0 (the L1 penalty on the spans) or None "
                         f"(SPAN_SETTINGS' {SPAN_SETTINGS['span_loss_coeff']}), got {span_loss_coeff!r}")
    out = []
    for attn, desc in (("rel", "Transformer-XL relative encoding, terms (a)-(d)"),
                       ("shaw", "Shaw et al. (2018): (a) + (b) with a learned table, clipped"),
                       ("abs", "vanilla: absolute sinusoids 0..L-1 added to the input; the memory's repeat them")):
        label = "abs + memory, same positions" if attn == "abs" else f"{attn} + memory"
        out.append(Variant(f"{attn}_mem", label, dict(attn_type=attn), notes=desc))
        out.append(Variant(f"{attn}_nomem", f"{attn}, no memory", dict(attn_type=attn, mem_len=0), notes=desc))
    out.append(Variant("abs_far_mem", "abs + memory, farther positions", dict(attn_type="abs_far"), group="abs_far",
                       notes="the authors' attn_type 2: positions count back from the last key, so the "
                             "memory's are farther than the segment's (added to layer 0's memory)"))
    out.append(Variant("abs_nomem_half", "abs, no memory, half loss", dict(attn_type="abs", mem_len=0),
                       group="half_loss", train_overrides=dict(loss_positions="half"),
                       notes="the paper's setting for absolute encodings (Table 6): trained on the later "
                             "half of each segment only"))
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
    """The two evaluation settings of a model trained with ``cfg``: its training context and a longer one.

    With memory: the training segment with LONG_FACTOR x the memory; without: one segment
    LONG_FACTOR x longer, still without memory.

    Returns:
        {"train": {tgt_len, mem_len}, "long": {tgt_len, mem_len}, "long_desc": the longer one in words}.

    Examples:
        >>> from txl_minimal.tutorial import ablation
        >>> ablation.contexts(TXLConfig(tgt_len=32, mem_len=32))["long"]
        {'tgt_len': 32, 'mem_len': 128}
        >>> ablation.contexts(TXLConfig(tgt_len=32, mem_len=0))["long_desc"]
        'segment 128 (4x the training segment), no memory'
    """
    validation.check_config_type(cfg, "contexts")
    train_ctx = dict(tgt_len=cfg.tgt_len, mem_len=cfg.mem_len)
    if cfg.mem_len > 0:
        long_ctx = dict(tgt_len=cfg.tgt_len, mem_len=LONG_FACTOR * cfg.mem_len)
        desc = f"segment {cfg.tgt_len}, memory {LONG_FACTOR * cfg.mem_len} ({LONG_FACTOR}x the training memory)"
    else:
        long_ctx = dict(tgt_len=LONG_FACTOR * cfg.tgt_len, mem_len=0)
        desc = f"segment {LONG_FACTOR * cfg.tgt_len} ({LONG_FACTOR}x the training segment), no memory"
    return dict(train=train_ctx, long=long_ctx, long_desc=desc)


def train_config(steps: int, out: str | Path, tiny: bool = False, seed: int = BASE_TRAIN["seed"],
                 **overrides) -> TrainConfig:
    """The ablation's training settings for ``steps`` steps, written to ``out``, on the CPU in float32.

    BASE_TRAIN with warm-up and evaluation interval shrunk for short runs; ``tiny``: the smoke
    test's smaller evaluation; ``seed``: the run's seed; ``overrides``: other TrainConfig fields (a
    variant's ``train_overrides``).

    Returns:
        A ``TrainConfig`` (train it with ``model_config(variant)``: ``txl_minimal.train.train``).

    Examples:
        >>> from txl_minimal.tutorial import ablation
        >>> cfg = ablation.train_config(200, "runs/abl", seed=1, loss_positions="half")
        >>> cfg.max_steps, cfg.warmup_steps, cfg.eval_interval, cfg.seed, cfg.loss_positions
        (200, 20, 200, 1, 'half')
    """
    steps = count(steps, "steps", "train_config")
    kw = dict(BASE_TRAIN, **overrides, max_steps=steps, out=str(out), device="cpu", seed=seed, amp="off",  # fp32
              warmup_steps=min(BASE_TRAIN["warmup_steps"], max(1, steps // 10)),
              eval_interval=min(BASE_TRAIN["eval_interval"], steps))
    if tiny:
        kw.update(eval_tokens=512)
    return TrainConfig(**kw)


def model_config(variant: Variant, tiny: bool = False) -> TXLConfig:
    """The model of one ``variant``: the base size (BASE_MODEL) with the variant's changes.

    ``tiny``: the smoke-test size (TINY_MODEL), where the adaptive-span pair gets 3 x the segment
    as memory and a ramp of 4.

    Returns:
        A ``TXLConfig``.

    Examples:
        >>> from txl_minimal.tutorial import ablation
        >>> cfg = ablation.model_config(ablation.variants()[2])            # Shaw et al., with memory
        >>> cfg.attn_type, cfg.n_layer, cfg.tgt_len, cfg.mem_len, cfg.shaw_max_dist
        ('shaw', 3, 32, 32, 32)
    """
    if not isinstance(variant, Variant):
        raise ValueError(f"model_config: variant must be a Variant, got {validation.a_kind(variant)}. Fix: one of "
                         "variants(), e.g. model_config(variants()[0])")
    overrides = dict(variant.overrides)
    if tiny and variant.group == "span":
        overrides.update(mem_len=3 * TINY_MODEL["tgt_len"], span_ramp=4)
    return TXLConfig(**{**(TINY_MODEL if tiny else BASE_MODEL), **overrides})


@torch.no_grad()
def later_half_bpc(model: TransformerXL, ids: torch.Tensor, tgt_len: int, batch_size: int = 256) -> float:
    """bpc of a model without memory on windows of ``tgt_len`` tokens that start every tgt_len // 2,
    each scoring its later half: every target from position tgt_len // 2 + 1 on is scored once, with
    tgt_len // 2 + 1 to tgt_len tokens of context (what a "half loss" trained: no short contexts)."""
    tgt_len = validation.count(tgt_len, "tgt_len", "later_half_bpc", 2, why=" (the window; its later half is scored)")
    batch_size = validation.count(batch_size, "batch_size", "later_half_bpc")  # (count is a local name below)
    half = tgt_len // 2
    ids = as_ids(validation.integer_ids(ids, "later_half_bpc: ids", dims=1))  # 0.7 would be read as 0: refused
    ids = ids.to(next(model.parameters()).device)
    if len(ids) < tgt_len + 1:
        raise ValueError(f"later_half_bpc: {len(ids):,} ids hold no window of tgt_len={tgt_len} and its targets. Fix: "
                         f"at least {tgt_len + 1} ids, or a smaller tgt_len")
    windows = ids[: len(ids) - 1].unfold(0, tgt_len, half)           # (n, tgt_len) inputs
    targets = ids[1:].unfold(0, tgt_len, half)
    model.eval()
    total, count = 0.0, 0
    for s in range(0, windows.size(0), batch_size):
        nll = model(windows[s:s + batch_size], None, targets=targets[s:s + batch_size]).nll[:, half:]
        total, count = total + nll.double().sum().item(), count + nll.numel()
    return total / count / math.log(2)


def model_spans(model: TransformerXL) -> Optional[list[list[float]]]:
    """The learned spans z in tokens, [layer][head], or None without adaptive span."""
    validation.check_config_type(getattr(model, "cfg", None), "model_spans: model")
    if not model.cfg.adaptive_span:
        return None
    return [[float(z) for z in layer.dec_attn.spans().detach()] for layer in model.layers]


# ----------------------------------------------------------------------------- reading

def load_results(path: str | Path = RESULTS_DIR / "results.json") -> dict:
    """The ablation's results: the shipped results.json (results/ablation/), or the one at ``path``.

    A missing or damaged file is a clear error naming it and the fix (git checkout, or
    scripts/ablation.py to train afresh).

    Returns:
        {"meta": the settings, "runs": {variant name: its test bpc at both contexts, FLOPs, spans, ...}}.

    Examples:
        >>> from txl_minimal.tutorial import ablation
        >>> results = ablation.load_results()
        >>> sorted(results), sorted(results["runs"])[:2]
        (['meta', 'runs'], ['abs_far_mem', 'abs_mem'])
    """
    where = Path(str(path)).parent
    make = f"python scripts/ablation.py --out {where}" + (  # (the script writes there only when asked)
        " --replace-shipped" if where.resolve() == RESULTS_DIR.resolve() else "")
    path = _file(path, "load_results", f"Fix: {make}")
    fix = f"Fix: git checkout -- {path} (the shipped results), or {make}"
    results = read_json(path, fix)  # a damaged file: one error naming it, not the decoder's traceback
    if not isinstance(results.get("runs"), dict) or not isinstance(results.get("meta"), dict):
        raise ValueError(f"{path} is damaged: no 'meta' and 'runs' (keys: {sorted(results)[:6]}), "
                         f"so it is not an ablation's results. {fix}")
    return results


def _file(path, caller: str, fix: str) -> Path:
    """``path`` as a Path to an existing file, or an error saying what it is instead (missing, a folder) and ``fix``."""
    validation_path = Path(path) if isinstance(path, (str, Path)) else None
    if validation_path is None:
        raise ValueError(f"{caller}: path must be a path (a str or a pathlib.Path), got {path!r}. {fix}")
    if validation_path.is_dir():
        raise ValueError(f"{caller}: {path} is a folder, not a file. {fix}")
    if not validation_path.is_file():
        raise FileNotFoundError(f"{path} is missing. {fix}")
    return validation_path


def read_log(path: str | Path) -> list[dict]:
    """A run's log.csv as a list of rows with numbers (valid_bpc None when not evaluated).

    A file that is not such a log (no "step" column, a value that is no number) is a ValueError naming
    the file and the row, not the csv reader's or float()'s words."""
    path = _file(path, "read_log", LOG_FIX)
    rows = []
    try:
        with path.open(encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None or "step" not in reader.fieldnames:
                head = ", ".join(reader.fieldnames or [])[:60] or "nothing"
                raise ValueError(f"{path} is not a training log: its first line names no 'step' column ({head}). "
                                 f"{LOG_FIX}")
            for line, r in enumerate(reader, start=2):
                try:
                    rows.append({k: (None if v in ("", None) else (int(v) if k in ("step", "tokens") else float(v)))
                                 for k, v in r.items()})
                except (TypeError, ValueError):
                    raise ValueError(f"{path}, line {line}: not numbers ({', '.join(map(str, r.values()))[:60]}): not "
                                     f"a training log, or a damaged one. {LOG_FIX}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a training log (not UTF-8 text). {LOG_FIX}") from None
    return rows


def results_table(results: dict, group: Optional[str] = None) -> str:
    """A fixed-width text table of the test bpc at both contexts (and the attention FLOPs) of each run.

    ``results``: what ``load_results`` gives; ``group``: only the runs of that group of ``Variant``
    (None: every run).

    Returns:
        The table, one line per run under a two-line heading.

    Examples:
        >>> from txl_minimal.tutorial import ablation
        >>> print(ablation.results_table(ablation.load_results(), group="span"))
        variant                           test bpc  test bpc  change  attn kFLOPs/token
                                         train ctx  long ctx                (train ctx)
        rel + memory 96, fixed span ...
        rel + memory 96, adaptive span ...
    """
    validation.has_keys(results, ("runs",), "results", "results_table", "what load_results() returns")
    if group is not None and group not in GROUPS:
        raise ValueError(f"results_table: group must be one of {GROUPS} (a Variant's group) or None (every run), got "
                         f"{group!r}")
    for name, r in results["runs"].items():
        validation.has_keys(r, ("label", "group", "test_bpc", "attn_flops_per_token"), f"results['runs'][{name!r}]",
                            "results_table", "results.json as scripts/ablation.py writes it (load_results())")
    head = (f"{'variant':32s} {'test bpc':>9s} {'test bpc':>9s} {'change':>7s} {'attn kFLOPs/token':>18s}\n"
            f"{'':32s} {'train ctx':>9s} {'long ctx':>9s} {'':>7s} {'(train ctx)':>18s}")
    lines = [head]
    for r in results["runs"].values():
        if group is not None and r["group"] != group:
            continue
        a, b = r["test_bpc"]["train_ctx"], r["test_bpc"]["long_ctx"]
        flops = r["attn_flops_per_token"]["train_ctx"]["computed"] / 1e3
        change = round(b - a, 3) + 0.0  # + 0.0: a change that rounds to zero prints as +0.000
        lines.append(f"{r['label']:32s} {a:9.3f} {b:9.3f} {change:+7.3f} {flops:18.1f}")
    return "\n".join(lines)
