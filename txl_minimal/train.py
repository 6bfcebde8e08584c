"""Train Transformer-XL (and the vanilla baseline) on text8-mini (the default), text8, words, enwik8 or your own file.

    python -m txl_minimal.train --preset cpu-tiny                       # about a minute of one CPU core
    python -m txl_minimal.train --corpus my.txt --out runs/mine         # a UTF-8 text file of your own
    python -m txl_minimal.train --preset cpu-small --out runs/txl --resume
    python -m txl_minimal.train --preset cpu-tiny --out runs/cpu-tiny --overwrite  # replace that run
    python -m txl_minimal.train --preset cpu-small --set attn_type=abs mem_len=0  # the vanilla baseline
    torchrun --nproc_per_node 2 -m txl_minimal.train --preset cpu-tiny  # data parallel

The loop is the authors' (``pytorch/train.py``): Adam, linear warm-up then cosine
decay, gradient clipping at 0.25, and memory carried from each segment to the next
(Sec. 3.2). A batch is ``batch_size`` parallel columns of the text, so row b of step
t+1 continues row b of step t; the memory is reset when a pass over the data begins.
Every ``eval_interval`` steps the valid bpc (words: perplexity) is measured and OUT/ckpt.pt written
(the last state, which --resume continues); an evaluation better than every earlier one also writes
OUT/best.pt (those weights, as the authors keep their best model). ``python -m txl_minimal.evaluate OUT``
scores a run's best.pt afterwards (--last: its ckpt.pt). A preset run on a smaller corpus than its own
(text8 unreachable, --corpus, $TXL_CORPUS) is shortened to FALLBACK_EPOCHS passes over it, with a line
saying so (``sized_to_corpus``). A run already in OUT
is never replaced silently: continue it with --resume or replace it with --overwrite.
OUT/train.lock keeps a second training out of OUT while one runs; Ctrl-C (or SIGTERM, SIGHUP)
finishes the step in progress, saves it to OUT/ckpt.pt and prints the --resume command that
continues it. A NaN or inf in the loss or the weights stops the run, its last finite checkpoint kept.
"""
from __future__ import annotations

import contextlib
import itertools
import math
import numbers
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Optional, Union

import torch
from tqdm import tqdm

from txl_minimal import command_line
from txl_minimal.checkpoint import LAST, attach_vocab, vocab_entry
from txl_minimal.data import CORPORA, UNITS, Corpus, CorpusError, check_split, is_corpus_path, load_corpus
from txl_minimal.text_file import check_settings
from txl_minimal.devices import (COMPILE_MODES, LossMeter, adam_options, amp_context, check_replicas_agree,
                                 choose_once, distributed, leave_process_group, rank_loader, training_device, wrap)
from txl_minimal.evaluate import evaluate
from txl_minimal.model import TransformerXL, TXLConfig, TXLOutput
from txl_minimal.presets import PRESETS, sized_to_corpus
from txl_minimal.run_folder import (Checkpoints, Stop, TrainingDiverged, TrainingInterrupted, TrainingStoppedAtOnce,
                                    TrainResult, best_fields, claim_out, finished, load_for_resume, one_run_per_out,
                                    resume_command, saved_max_steps, say, start_writing)
from txl_minimal.utils import (LN2, WriteError, callable_module, check_device, score_name, score_of,
                               seed_everything, terminal_progress)
from txl_minimal.validation import as_int, check_training_lengths

# Names this module held before the presets, the run folder and the device set-up had modules of their
# own: ``from txl_minimal.train import ...`` still finds them (a patch goes where they live now).
from txl_minimal.devices import (BF16_MIN_SPEEDUP, CompiledSegments, Segments, choose_precision,  # noqa: F401
                                 compile_mode, cpu_precision, time_training_step)
from txl_minimal.command_line import BOOLS  # noqa: F401
from txl_minimal.presets import FALLBACK_EPOCHS  # noqa: F401
from txl_minimal.run_folder import (CSV_COLUMNS, LOCK, NO_BEST, ON_RESUME, RESUME_MAY_CHANGE, RUN_FILES,  # noqa: F401
                                    CSVLog)

CHOICES = dict(corpus=CORPORA, unit=UNITS, amp=("auto", "bf16", "fp16", "off"), attention=("auto", "fast", "explicit"),
               adam=("auto", "fused", "foreach", "for-loop"), loss_positions=("full", "half"))


@dataclass
class TrainConfig:
    """Training's settings: the corpus, optimisation and bookkeeping (the model's live in TXLConfig).

    Each field's comment says what it is; the names are the authors' where they have one.
    ``python -m txl_minimal.train --set name=value`` sets any of them. A value that cannot work
    is a ValueError naming the field, before anything is written.

    Returns:
        The config (a dataclass); ``train(model_cfg, cfg)`` (in txl_minimal.train) runs it, and
        ``preset(name)`` gives one with a preset's values.

    Examples:
        >>> cfg = TrainConfig(corpus="text8-mini", max_steps=100, out="runs/mine")
        >>> cfg.batch_size, cfg.lr, cfg.split
        (16, 0.001, None)
        >>> TrainConfig(lr=0)
        Traceback (most recent call last):
        ValueError: TrainConfig.lr must be a number > 0, got 0
    """

    corpus: str = "text8-mini"  # "text8" | "text8-mini" | "auto" | words: "text8-mini-words" | "wt103" | "wt2"
    # | the path to a UTF-8 text file of your own (text_file.py), read with these three (None: the defaults):
    unit: Optional[str] = None  # "character" (default) | "word"; a named corpus has its own
    split: Optional[tuple] = None  # (train, valid, test) fractions of the file; None: (0.9, 0.05, 0.05)
    max_vocab: Optional[int] = None  # the most symbols kept (specials included); None: every one of train
    batch_size: int = 16  # global: split over the DDP ranks
    lr: float = 1e-3
    min_lr: float = 0.0  # cosine floor (the authors' eta_min)
    warmup_steps: int = 200
    max_steps: int = 5000
    grad_clip: float = 0.25  # the authors' scripts' value (the paper states none)
    # "full": every target of the segment is trained; "half": only its later half, each target with at
    # least tgt_len // 2 tokens of context (the paper's "half loss", Table 6: it found absolute
    # encodings work only with it)
    loss_positions: str = "full"
    eval_interval: int = 500
    eval_tokens: Optional[int] = 32768  # valid prefix scored at each evaluation (None: all)
    eval_batch_size: int = 8
    eval_tgt_len: Optional[int] = None  # evaluation lengths (None: the training ones)
    eval_mem_len: Optional[int] = None
    eval_clamp_len: Optional[int] = None
    eval_same_length: Optional[bool] = None
    log_interval: int = 50  # steps per CSV row
    seed: int = 0
    out: str = "runs/default"  # ckpt.pt, best.pt and log.csv go here
    # "auto" (measured, see choose_precision: CPU: bf16 only where a matmul of the model's size is faster;
    # GPU: the faster of a few real steps in fp32 and bf16 (fp16 before Ampere)) | "bf16" | "fp16" | "off" (fp32)
    amp: str = "auto"
    # "fast" (fast.py's paths) | "explicit" (model.py's code) | "auto" (CPU: fast; GPU: measured with amp)
    attention: str = "auto"
    # torch.compile each segment: True | False | "auto" (on CUDA) | "reduce-overhead" (+ CUDA graphs);
    # falls back to eager, with one line, where it cannot (compile_mode)
    compile: Union[bool, str] = "auto"
    # Adam's implementation: "auto" (fused on CUDA, foreach elsewhere) | "fused" | "foreach" | "for-loop"
    adam: str = "auto"
    flex_attention: bool = False  # FlexAttention for the relative attention (torch >= 2.5; pays with compile, fast.py)
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:1" ...

    def __post_init__(self) -> None:
        """Raise ``ValueError`` naming the first impossible field (before anything is written)."""
        if isinstance(self.out, os.PathLike):  # a Path would not load back from a checkpoint (weights_only)
            self.out = os.fspath(self.out)
        if isinstance(self.corpus, os.PathLike):
            self.corpus = os.fspath(self.corpus)
        if isinstance(self.out, str) and not self.out.strip():  # Path("") is the current folder
            raise ValueError(f"TrainConfig.out is {self.out!r}: the run's ckpt.pt, best.pt and log.csv would go into "
                             "the current folder. Fix: name a folder for them, e.g. --out runs/mine "
                             "(TrainConfig(out='runs/mine'))")
        for f in fields(self):  # types first, as in TXLConfig: True is an int to Python, "no" is truthy
            value, kind = getattr(self, f.name), f.type.removeprefix("Optional[").rstrip("]")
            low = 0 if f.name in ("warmup_steps", "seed", "eval_mem_len", "eval_clamp_len", "min_lr") else 1
            if value is None and f.type.startswith("Optional"):
                continue
            if kind == "int" and type(value) is not int and as_int(value) is not None:  # np.int64(16)
                value = as_int(value)
                setattr(self, f.name, value)  # a plain int: a checkpoint saves the config
            if kind == "int" and (type(value) is not int or value < low):
                raise ValueError(f"TrainConfig.{f.name} must be an integer >= {low}, got {value!r}")
            if kind == "bool" and not isinstance(value, bool):
                raise ValueError(f"TrainConfig.{f.name} must be True or False, got {value!r}")
            if kind == "float" and type(value) not in (bool, int, float) and isinstance(value, numbers.Real):
                value = float(value)  # np.float32(3e-3)
                setattr(self, f.name, value)
            if kind == "float" and (type(value) not in (int, float) or not math.isfinite(value)
                                    or value < 0 or (value == 0 and low)):  # lr 0: a division by zero
                raise ValueError(f"TrainConfig.{f.name} must be a number {'>' if low else '>='} 0, got {value!r}")
            if kind == "str" and not isinstance(value, str):
                raise ValueError(f"TrainConfig.{f.name} must be a string, got {value!r}")
            if f.name == "corpus" and value not in CORPORA and (not is_corpus_path(value) or not os.path.exists(value)):
                where = f" (no file {Path(value).expanduser().resolve()})" if value else ""
                raise ValueError(f"TrainConfig.corpus must be one of {CORPORA} or the path to a UTF-8 text file, got "
                                 f"{value!r}{where}")
            if f.name in CHOICES and value not in CHOICES[f.name] and f.name != "corpus":
                raise ValueError(f"TrainConfig.{f.name} must be one of {CHOICES[f.name]}, got {value!r}")
        if not (isinstance(self.compile, bool) or self.compile in COMPILE_MODES):
            raise ValueError(f"TrainConfig.compile must be True or False, or one of {COMPILE_MODES}, "
                             f"got {self.compile!r}")
        if self.flex_attention and self.attention == "explicit":
            raise ValueError("TrainConfig.flex_attention is a fast path; attention='explicit' runs model.py's code, "
                             "which never uses it. Fix: attention='auto' or 'fast', or flex_attention=False")
        if self.split is not None or self.max_vocab is not None:  # a tuple, as a checkpoint saves it
            _, split, _ = check_settings(self.unit, self.split, self.max_vocab)
            self.split = None if self.split is None else split
        if self.min_lr > self.lr:
            raise ValueError(f"TrainConfig.min_lr ({self.min_lr}) must not exceed lr ({self.lr})")
        if self.device != "auto":  # one this machine has: cpu, cuda, cuda:N
            check_device(self.device, "TrainConfig.device")


def preset(name: str, **overrides) -> tuple[TXLConfig, TrainConfig]:
    """The model and training configs of a named preset, with ``overrides`` applied.

    ``name``: "cpu-tiny" (about a minute of one CPU core), "cpu-small", "cpu-base" (the shipped models'),
    "gpu-small", "paper-base", "wt103-base" (docs/training.md: what each gave). ``overrides``
    (``mem_len=256``, ``max_steps=100``) go to whichever config has the field; an unknown one is a
    ValueError.

    Returns:
        ``(model_cfg, cfg)``: a ``TXLConfig`` and a ``TrainConfig``, for ``train(model_cfg, cfg)``.

    Examples:
        >>> model_cfg, cfg = preset("cpu-tiny", mem_len=16, max_steps=10)
        >>> model_cfg.n_layer, model_cfg.mem_len, cfg.max_steps, cfg.out
        (2, 16, 10, 'runs/cpu-tiny')
        >>> preset("tiny")
        Traceback (most recent call last):
        ValueError: unknown preset 'tiny'; choose one of ['cpu-base', 'cpu-small', 'cpu-tiny', ...]
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    model_kw, train_kw = dict(PRESETS[name]["model"]), dict(PRESETS[name]["train"])
    model_fields = {f.name for f in fields(TXLConfig)}
    train_fields = {f.name for f in fields(TrainConfig)}
    for key, value in overrides.items():
        if key in model_fields:
            model_kw[key] = value
        elif key in train_fields:
            train_kw[key] = value
        else:
            raise ValueError(f"unknown setting {key!r}; TXLConfig fields: {sorted(model_fields)}; "
                             f"TrainConfig fields: {sorted(train_fields)}")
    return TXLConfig(**model_kw), TrainConfig(**train_kw)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate of update number ``step`` (1-based): linear warm-up, cosine to min_lr."""
    if step <= cfg.warmup_steps:
        return cfg.lr * step / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps))
    return cfg.min_lr + (cfg.lr - cfg.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


# ----------------------------------------------------------------------------- the loop

def training_loss(out: TXLOutput, loss_positions: str = "full", adaptive_span: bool = False) -> torch.Tensor:
    """What a step minimises: ``out.loss`` ("full"), or with "half" the mean NLL of the segment's
    later half (positions T // 2 .. T - 1), plus the span penalty if the model has adaptive spans."""
    if loss_positions == "full":
        return out.loss
    kept = out.nll[:, out.nll.size(1) // 2:].mean()
    if adaptive_span:  # out.loss = the mean NLL + the penalty: keep the penalty
        kept = kept + (out.loss - out.nll.mean())
    return kept


def _valid_bpc(model: TransformerXL, valid, cfg: TrainConfig, autocast: contextlib.AbstractContextManager) -> float:
    """The periodic evaluation: bpc of the valid prefix with the cfg.eval_* settings."""
    with autocast:
        return evaluate(model, valid, cfg.eval_batch_size, cfg.eval_tgt_len, cfg.eval_mem_len,
                        cfg.eval_clamp_len, cfg.eval_same_length, cfg.eval_tokens)["bpc"]


def _last_step(cfg: TrainConfig, stop_at: Optional[int]) -> int:
    """The step training ends at: ``max_steps``, or ``stop_at`` if earlier (as if interrupted)."""
    replace(cfg)  # validates again: a field may have been changed since the config was made
    if stop_at is not None and (as_int(stop_at) is None or as_int(stop_at) < 1):
        raise ValueError(f"stop_at must be a positive integer or None, got {stop_at!r}")
    return min(cfg.max_steps, as_int(stop_at) or cfg.max_steps)


def warmup_note(cfg: TrainConfig) -> Optional[str]:
    """A sentence if the warm-up outlasts the run (the rate would peak below lr, and never decay), else None.
    Said, not clamped: the schedule stays ``lr_at``'s, which a resume with a higher max_steps continues."""
    if cfg.warmup_steps <= cfg.max_steps:
        return None
    return (f"warmup_steps {cfg.warmup_steps:,} outlasts max_steps {cfg.max_steps:,}: the learning rate rises only to "
            f"{cfg.max_steps / cfg.warmup_steps:.2g} x lr ({lr_at(cfg.max_steps, cfg):.3g}) at the last step and "
            f"never decays. Fix: a shorter warm-up, e.g. --set warmup_steps={max(1, cfg.max_steps // 10)} "
            "(TrainConfig.warmup_steps)")


def _check_splits(corpus: Corpus, cfg: TrainConfig, model_cfg: TXLConfig) -> None:
    """Before the first step: the train split fills a segment in every batch column, and the valid split,
    read at the first evaluation, holds a prediction (``batching.check_split``)."""
    check_split(len(corpus.train), "train", corpus.name, corpus.unit, cfg.batch_size, model_cfg.tgt_len)
    check_split(len(corpus.valid), "valid", corpus.name, corpus.unit)


def _model_and_optimizer(model_cfg: TXLConfig, cfg: TrainConfig, choice: dict, device: torch.device,
                         rank: int) -> tuple[TransformerXL, torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """The model (on the precision choice's attention path), Adam and the schedule (``lr_at``)."""
    seed_everything(cfg.seed)
    raw = TransformerXL(TXLConfig(**model_cfg.to_dict())).to(device)  # a copy: evaluate mutates lengths
    raw.fast_attn = choice["fast_attn"]
    raw.flex_attn = cfg.flex_attention
    torch.manual_seed(cfg.seed + rank)  # dropout masks differ between ranks
    opt = torch.optim.Adam(raw.parameters(), lr=cfg.lr, **adam_options(cfg.adam, device))
    return raw, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_at(i + 1, cfg) / cfg.lr)


def _corpus_and_configs(corpus: Optional[Corpus], raw: TransformerXL, model_cfg: TXLConfig, cfg: TrainConfig,
                        choice: dict) -> tuple[Corpus, dict]:
    """The corpus (``corpus``, else cfg.corpus loaded) and what every checkpoint records beside the
    weights: the configs, the precision choice and the vocabulary (what the ids mean: evaluate and
    generate check it), which ``raw`` carries too."""
    corpus = corpus if corpus is not None else load_train_corpus(cfg)
    if model_cfg.vocab_size < corpus.vocab_size:  # else an IndexError deep inside the embedding
        raise ValueError(f"TXLConfig.vocab_size is {model_cfg.vocab_size:,} but {corpus.name} has "
                         f"{corpus.vocab_size:,} symbols. Fix: --set vocab_size={corpus.vocab_size}"
                         + ("" if corpus.name in CORPORA else f" (in Python: TXLConfig(vocab_size={corpus.vocab_size},"
                                                               " ...) or preset(..., vocab_size=...))"))
    configs = dict(model_config=model_cfg.to_dict(), train_config=dict(asdict(cfg), corpus=corpus.name),
                   choice=choice, vocab=vocab_entry(corpus.unit, corpus.vocab))
    attach_vocab(raw, configs["vocab"])
    return corpus, configs


def load_train_corpus(cfg: TrainConfig) -> Corpus:
    """The corpus ``cfg`` trains on: cfg.corpus read with its unit, split and max_vocab ($TXL_CORPUS
    overrides a corpus name, never a file's path; "auto": see data.py)."""
    return load_corpus(cfg.corpus, unit=cfg.unit, split=cfg.split, max_vocab=cfg.max_vocab)


def saved_vocab_size(path: Path) -> Optional[int]:
    """The vocab_size of a run's checkpoint, or None where there is no readable one (train says why)."""
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["model_config"]["vocab_size"])
    except Exception:  # noqa: BLE001 (train() loads it again and names the damage)
        return None


def _bar(total: int, step: int, shown: bool) -> tqdm:
    """The progress bar, from ``step`` on; one not ``shown`` is disabled, and a shown one left to
    tqdm's defaults, so that TQDM_DISABLE=1 still hides it."""
    return tqdm(total=total, initial=step, mininterval=1.0, dynamic_ncols=True, **({} if shown else {"disable": True}))


def _show(bar: tqdm, step: int, train_bpc: float, valid_bpc: float, tok_s: float, unit: str, say: bool) -> None:
    """A log row on the bar (loss, bpc or ppl, tokens/s), and if ``say``, the line of the evaluation
    just made (``valid_bpc``)."""
    name, score = score_name(unit), lambda bpc: score_of(bpc * LN2, unit)  # noqa: E731
    bar.set_postfix(loss=f"{train_bpc * LN2:.3f}", **{name: f"{score(train_bpc):.3f}"}, tok_s=f"{tok_s:,.0f}")
    if say:
        bar.write(f"step {step}: train {name} {score(train_bpc):.3f}, valid {name} {score(valid_bpc):.3f}")
        sys.stdout.flush()  # at once, also into a log file


@one_run_per_out
def train(model_cfg: TXLConfig, cfg: TrainConfig, corpus: Optional[Corpus] = None,
          resume: bool = False, stop_at: Optional[int] = None, progress: bool = True,
          overwrite: bool = False, print_evals: bool = False) -> TrainResult:
    """Train a TransformerXL; writes ``cfg.out``/ckpt.pt (the last state), best.pt and log.csv.

    resume: continue from ckpt.pt (weights, optimiser, schedule, RNG, data position and memory,
    so the run ends as if never interrupted). overwrite: replace the run in ``cfg.out`` (without
    either, a run there is refused before anything is written). stop_at: end after that many steps
    with a checkpoint, as if interrupted. progress: a bar and a line per evaluation; print_evals:
    those lines without the bar. Under torchrun each rank reads its own block of batch columns.
    best.pt holds the weights of the best periodic evaluation (every eval_interval steps and at
    max_steps; not a stop_at's): ``TrainResult.best_model()`` loads it. ``model_cfg``, ``cfg``: the
    model's and training's configs (``preset``); ``corpus``: a loaded Corpus (None: ``cfg.corpus``).
    Raises, before anything is written, ValueError for a split too short (``_check_splits``); during
    the run TrainingInterrupted (Ctrl-C, SIGTERM, SIGHUP: the step saved), TrainingStoppedAtOnce (a
    second one) or TrainingDiverged (a NaN or inf: nothing of it saved). warmup_steps > max_steps is a
    warning.

    Returns:
        A ``TrainResult``: the trained model (its last state, in eval mode), its step, bpc and speed.

    Examples:
        >>> from txl_minimal.train import train
        >>> result = train(*preset("cpu-tiny", max_steps=4, eval_interval=4, eval_tokens=256, out="run", amp="off",
        ...                           warmup_steps=1),
        ...                progress=False)
        >>> result.step, sorted(p.name for p in result.out.iterdir())
        (4, ['best.pt', 'ckpt.pt', 'log.csv'])
    """
    end = _last_step(cfg, stop_at)
    check_training_lengths(model_cfg, cfg)  # a clamp_len or same_length the model would ignore: refused now
    rank, world, local = distributed()
    if rank == 0 and (note := warmup_note(cfg)):
        warnings.warn(note, stacklevel=3)  # (3: the caller of train, past one_run_per_out)
    out_dir = Path(cfg.out)
    claim_out(out_dir, resume, overwrite, rank)
    device = training_device(cfg, local, world)
    corpus = corpus if corpus is not None else load_train_corpus(cfg)  # $TXL_CORPUS, "auto": see data.py
    _check_splits(corpus, cfg, model_cfg)  # before anything takes time (amp="auto" measures) or is written
    ckpt = load_for_resume(out_dir / LAST, model_cfg) if resume else None
    # precision and attention path: chosen (measured) once, by rank 0, and kept by a resume
    choice = choose_once(cfg, model_cfg, device, ckpt and ckpt.get("choice"), rank, world)
    autocast, scaler = amp_context(choice["amp"], device)
    raw, opt, sched = _model_and_optimizer(model_cfg, cfg, choice, device, rank)
    corpus, configs = _corpus_and_configs(corpus, raw, model_cfg, cfg, choice)
    ckpts = Checkpoints(out_dir, dict(model=raw, optimizer=opt, scheduler=sched, scaler=scaler), configs, rank, world)
    step, epoch, segment, mems = ckpts.restore(ckpt, cfg, device)
    if resume and step >= end:  # a finished run: say so, rather than log a run of no steps
        return finished(raw, step, end, cfg, out_dir, ckpts.best)
    loader = rank_loader(corpus, cfg, model_cfg, rank, world, device)  # its ids checked once: not every step
    batches = itertools.islice(iter(loader), segment, None)  # resume: skip what was read
    model = wrap(raw, cfg, device, world, say=rank == 0 and (progress or print_evals))
    # the log's rows up to the last one before the checkpoint (not stop_at's extra row, which an
    # uninterrupted run has not), and the losses since that row: the resumed log is an uninterrupted one's
    log = start_writing(out_dir, resume, overwrite, step - len(ckpts.unlogged), rank)
    bar = _bar(cfg.max_steps, step, shown=progress and rank == 0)
    tokens_per_step, first = cfg.batch_size * model_cfg.tgt_len, step
    losses, t_train, valid_bpc, train_bpc, tok_s = LossMeter(ckpts.unlogged), 0.0, float("nan"), float("nan"), 0.0
    stop = False
    ckpts.start_clock()
    while step < end:
        t0 = time.perf_counter()
        if (batch := next(batches, None)) is None:  # a new pass over the data: fresh memory
            epoch, segment, mems, batches = epoch + 1, 0, None, iter(loader)
            batch = next(batches)
        x, y = batch
        with autocast:
            out = model(x, mems, targets=y)
        mems = out.mems  # the memory carried to the next segment (detached by the model)
        scaler.scale(training_loss(out, cfg.loss_positions, model_cfg.adaptive_span)).backward()
        scaler.unscale_(opt)  # clip the true gradients
        torch.nn.utils.clip_grad_norm_(raw.parameters(), cfg.grad_clip)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        sched.step()
        step, segment = step + 1, segment + 1
        losses.add(out.nll)  # the NLL alone (loss may add a span penalty), left on the device
        # an uninterrupted run's rows; stop_at's extra one keeps its losses for the next row (a resume's first)
        regular = step % cfg.log_interval == 0 or step % cfg.eval_interval == 0 or step == cfg.max_steps
        do_eval = step % cfg.eval_interval == 0 or step == end
        if log_row := regular or do_eval:  # read back in the timed step: the GPU is done
            train_bpc = losses.mean(world, device, reset=regular) / LN2
        t_train += time.perf_counter() - t0
        if log_row:
            tok_s = (step - first) * tokens_per_step / max(t_train, 1e-9)
            finite = math.isfinite(train_bpc)  # (read back for the row: checking it waits for nothing)
            if evaluated := do_eval and rank == 0 and finite:
                valid_bpc = _valid_bpc(raw, corpus.valid, cfg, autocast)
            _show(bar, step, train_bpc, valid_bpc, tok_s, corpus.unit, say=evaluated and (progress or print_evals))
            log.write(step, step * tokens_per_step, ckpts.wall_time_s(), lr_at(step, cfg), train_bpc,
                      valid_bpc if evaluated else None)
            if not finite:  # every rank alike: the mean is the whole batch's
                bar.close()
                log.close()
                raise ckpts.diverged(step, f"the training loss became {train_bpc * LN2} (the mean of the steps "
                                           "since the last log row)")
        bar.update(1)
        stop = ckpts.vote.any(Stop.requested)  # Ctrl-C, SIGTERM: every rank stops at the same step
        if do_eval or stop:  # Ctrl-C: keep the step just finished
            # best.pt: periodic evaluations alone compete (not stop_at's), so a resumed run keeps an unbroken one's
            periodic = do_eval and (step % cfg.eval_interval == 0 or step == cfg.max_steps)
            ckpts.save(step, epoch, segment, mems, valid_bpc if periodic else None, losses.pending())
            if stop:
                break
    ckpts.vote.close()
    bar.close()
    log.close()
    if stop:
        raise TrainingInterrupted(step, ckpts.last, Stop.signum)
    check_replicas_agree(raw, world)
    return TrainResult(raw.eval(), step, train_bpc, valid_bpc, tok_s, ckpts.elapsed, out_dir, unit=corpus.unit,
                       **best_fields(ckpts.best))


# ----------------------------------------------------------------------------- command line

FIELD_TYPES = {f.name: f.type for config in (TXLConfig, TrainConfig) for f in fields(config)}


def main(argv: Optional[list[str]] = None) -> None:
    """The command line: train a preset, with any field changed by --set KEY=VALUE (its flags:
    command_line.py)."""
    p = command_line.parser(__doc__, sorted(PRESETS), CHOICES["amp"])
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        overrides = command_line.overrides(args, FIELD_TYPES)
        model_cfg, train_cfg = preset(args.preset, **overrides)
        corpus = None
        if is_corpus_path(train_cfg.corpus) and "vocab_size" not in overrides:  # your own text sizes the model
            corpus = load_train_corpus(train_cfg)
            # (a resume keeps its run's size: another file is then refused as another corpus, not another size)
            size = (saved_vocab_size(Path(train_cfg.out) / LAST) if args.resume else None) or corpus.vocab_size
            model_cfg = TXLConfig(**dict(model_cfg.to_dict(), vocab_size=size))
        saved = saved_max_steps(Path(train_cfg.out) / LAST) if args.resume and "max_steps" not in overrides else None
        if saved is not None:  # a resume without --max-steps goes on to the run's own end (its schedule)
            train_cfg = replace(train_cfg, max_steps=saved)
        elif "max_steps" not in overrides:  # a preset on a smaller corpus than its own: fewer steps, said once
            corpus = corpus or load_train_corpus(train_cfg)
            train_cfg, note = sized_to_corpus(args.preset, model_cfg, train_cfg, corpus)
            if note and distributed()[0] == 0:
                print(f"{note}; --max-steps sets another")
        with command_line.one_line_warnings():
            res = train(model_cfg, train_cfg, corpus, resume=args.resume, stop_at=args.stop_at,
                        overwrite=args.overwrite, progress=terminal_progress(not args.no_progress), print_evals=True)
    except (ValueError, FileExistsError, FileNotFoundError, CorpusError) as e:  # bad input: no traceback
        if distributed()[0] == 0:  # (under torchrun: said once)
            p.error(str(e))
        sys.exit(2)
    except WriteError as e:  # a full disk, a read-only --out: what survives and what to do
        sys.exit(f"error: {e}")
    except TrainingDiverged as e:  # a NaN: nothing of it saved; every rank stops here
        _end(f"error: {e}", 1)
    except TrainingInterrupted as e:  # Ctrl-C, SIGTERM: saved; say how to go on
        _end(f"{e}\n  {resume_command(sys.argv[1:] if argv is None else argv)}", e.status)
    except TrainingStoppedAtOnce as e:  # a second Ctrl-C: one line, no traceback
        _end(str(e), e.status)
    if (line := command_line.summary(res)) is None:
        return
    if distributed()[0] == 0:
        print(line)
    del res  # and with it the DDP wrapper, freed while the process group still exists
    leave_process_group()


def _end(message: str, status: int) -> None:
    """End a training every rank stopped at the same step: the message once (rank 0) and the exit
    status (128 + a signal's number for a stop by that signal). Under torchrun the ranks meet once
    more and leave with os._exit: destroying the process group hung now and then on torch 2.3's
    gloo (pytorch/pytorch#75097), and a launcher stopping its workers waits for them."""
    rank, world, _ = distributed()
    if rank == 0:
        say(message)
    if world > 1 and torch.distributed.is_initialized():
        sys.stdout.flush()
        sys.stderr.flush()
        torch.distributed.barrier()
        os._exit(status)
    sys.exit(status)


callable_module(__name__)  # `from txl_minimal import train` gives this module: train(...) calls train.train


if __name__ == "__main__":
    main()
