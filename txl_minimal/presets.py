"""The presets: named model and training settings, from a minute of one CPU core to the paper's
models, with what each was measured to give; ``preset`` (train.py) turns one into its configs.

A preset run on a smaller corpus than its own (text8 unreachable, --corpus, $TXL_CORPUS) is
shortened to FALLBACK_EPOCHS passes over it (``sized_to_corpus``). A ``cfg`` here is train.py's
TrainConfig (train.py imports this module, so it is not named here).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from txl_minimal.data import Corpus
from txl_minimal.model import TXLConfig

# What the two shipped CPU pairs' trainings share.
_CPU_TRAIN = dict(corpus="text8-mini", batch_size=16, max_steps=5000, eval_interval=500, eval_tokens=32768,
                  log_interval=50)
PRESETS: dict[str, dict[str, dict]] = {
    # docs/training.md and notebook 04: ~1 min of one CPU core (valid bpc ~2.75 on text8-mini).
    "cpu-tiny": dict(
        model=dict(n_layer=2, n_head=2, d_model=64, d_head=32, d_inner=256, dropout=0.0,
                   dropatt=0.0, tgt_len=32, mem_len=32),
        train=dict(corpus="text8-mini", batch_size=16, lr=3e-3, warmup_steps=100, max_steps=2000,
                   eval_interval=500, eval_tokens=8192, log_interval=25, out="runs/cpu-tiny")),
    # The shipped "txl-tiny"/"vanilla-tiny" (txl_minimal/pretrained): 2,582 s and 2,164 s
    # on ONE thread of a shared 2-core CPU (train_wall_time_s in pretrained/*.json).
    "cpu-small": dict(
        model=dict(n_layer=4, n_head=4, d_model=128, d_head=32, d_inner=512, dropout=0.1,
                   dropatt=0.0, tgt_len=64, mem_len=64),
        train=dict(_CPU_TRAIN, lr=1e-3, warmup_steps=200, out="runs/cpu-small")),
    # The shipped "txl"/"vanilla": 4 layers, d_model 256, 3.4M parameters, 5,000 steps of
    # 16 x 128 characters (10.2M, 3.7 epochs of text8-mini); the vanilla twin is the same
    # with --set attn_type=abs mem_len=0. Training times: pretrained/*.json.
    "cpu-base": dict(
        model=dict(n_layer=4, n_head=4, d_model=256, d_head=64, d_inner=1024, dropout=0.1,
                   dropatt=0.0, tgt_len=128, mem_len=128),
        train=dict(_CPU_TRAIN, lr=5e-4, warmup_steps=500, out="runs/cpu-base")),
    # One GPU. Measured once, on an H100 (torch 2.11, bf16 by amp="auto"), text8 unreachable there so on
    # text8-mini: 195,366 tokens/s, 852 s for the 20,000 steps. Full text8 and other GPUs (a T4) never run.
    "gpu-small": dict(
        model=dict(n_layer=8, n_head=8, d_model=256, d_head=32, d_inner=1024, dropout=0.1,
                   dropatt=0.0, tgt_len=256, mem_len=256),
        train=dict(corpus="text8", batch_size=32, lr=5e-4, warmup_steps=1000, max_steps=20000,
                   eval_interval=2000, eval_tokens=262144, eval_batch_size=16, log_interval=100,
                   out="runs/gpu-small")),
    # The authors' text8 base model (run_text8_base.sh); evaluation lengths as in the paper.
    "paper-base": dict(
        model=dict(n_layer=12, n_head=8, d_model=512, d_head=64, d_inner=2048, dropout=0.1,
                   dropatt=0.0, tgt_len=512, mem_len=512),
        train=dict(corpus="text8", batch_size=22, lr=2.5e-4, warmup_steps=0, max_steps=400_000,
                   eval_interval=4000, eval_tokens=None, eval_batch_size=10,
                   # the authors' test evaluation of this model (eval in run_text8_base.sh); 128 /
                   # 3,800 / 1,000 belong to their 24-layer TF scripts
                   eval_tgt_len=80, eval_mem_len=2100, eval_clamp_len=820, eval_same_length=True,
                   log_interval=200, out="runs/paper-base")),
    # The authors' WikiText-103 base model (run_wt103_base.sh; the paper's 151M parameters, 24.0
    # test perplexity) on ONE GPU: their sizes, adaptive input and softmax tied with their cutoffs
    # and tie_projs, their lr and steps, their evaluation (64 / 640 / clamp 400, same_length).
    # Their batch of 60 was split over 4 GPUs; here all 60 go on one (docs/training.md: ~17 GB in fp32).
    "wt103-base": dict(
        model=dict(vocab_size=267_735, n_layer=16, n_head=10, d_model=410, d_head=41, d_inner=2100,
                   dropout=0.1, dropatt=0.0, tgt_len=150, mem_len=150, cutoffs=[20_000, 40_000, 200_000],
                   div_val=1, tie_weights=True, tie_projs=[False, True, True, True]),
        train=dict(corpus="wt103", batch_size=60, lr=2.5e-4, warmup_steps=0, max_steps=200_000,
                   eval_interval=4000, eval_tokens=None, eval_batch_size=10, eval_tgt_len=64,
                   eval_mem_len=640, eval_clamp_len=400, eval_same_length=True, log_interval=200,
                   out="runs/wt103-base")),
}


# A preset on a smaller corpus than its own reads it at most this many times. Measured once (H100,
# torch 2.11): gpu-small on text8-mini for its 20,000 steps of 32 x 256 (59 passes) had its lowest
# valid bpc, 1.697, at step 8,000 (24 passes) and ended at 1.742 (train 1.19: memorising); a run of
# 8,000 steps, its cosine ending there, reached valid 1.670 (test 1.641).
FALLBACK_EPOCHS = 24


def sized_to_corpus(name: str, model_cfg: TXLConfig, cfg, corpus: Corpus,
                    max_epochs: Optional[float] = None) -> tuple:
    """Preset ``name``'s ``cfg`` fitted to the corpus it will really read, and a line saying what changed.

    On its own corpus, or one it reads fewer than ``max_epochs`` times, ``(cfg, None)``. On another
    (a fallback: text8 unreachable, $TXL_CORPUS, --corpus) that ``max_steps`` would read more often,
    max_steps is lowered to ``max_epochs`` (default FALLBACK_EPOCHS) passes over the training split,
    rounded down to a multiple of eval_interval (the run ends on a periodic evaluation), and the line
    says so and why."""
    max_epochs = FALLBACK_EPOCHS if max_epochs is None else max_epochs
    own = PRESETS[name]["train"]["corpus"]
    per_step = cfg.batch_size * model_cfg.tgt_len
    n_train = len(corpus.train)
    steps = int(max_epochs * n_train // per_step)
    if steps >= cfg.eval_interval:
        steps -= steps % cfg.eval_interval
    steps = max(1, steps)
    if corpus.name == own or cfg.max_steps <= steps:
        return cfg, None
    unit = corpus.unit if corpus.unit in ("word", "byte") else "character"
    note = (f"{name} on {corpus.name}, not {own}: its {cfg.max_steps:,} steps of {cfg.batch_size} x "
            f"{model_cfg.tgt_len} would read the {n_train:,} training {unit}s "
            f"{cfg.max_steps * per_step / n_train:,.1f} times; shortened to max_steps {steps:,} "
            f"({steps * per_step / n_train:,.1f} passes; measured: gpu-small's valid bpc on "
            f"text8-mini was lowest near {FALLBACK_EPOCHS} passes and rose after)")
    return replace(cfg, max_steps=steps), note
