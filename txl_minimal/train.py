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
import os
import sys
import time
import warnings
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Optional

import torch
from tqdm import tqdm

from txl_minimal import command_line
from txl_minimal.bookkeeping import Bookkeeper
from txl_minimal.checkpoint import LAST, attach_vocab, vocab_entry
from txl_minimal.cli import callable_module, stopped_by_ctrl_c, terminal_progress
from txl_minimal.corpora import corpus_record
from txl_minimal.data import CORPORA, Corpus, CorpusError, check_split, is_corpus_path, load_corpus
from txl_minimal.devices import (adam_options, amp_context, check_replicas_agree, choose_once, distributed,
                                 leave_process_group, rank_loader, training_device, wrap)
from txl_minimal.evaluate import evaluate
from txl_minimal.files import WriteError
from txl_minimal.machine import seed_everything
from txl_minimal.model import TransformerXL, TXLConfig, TXLOutput
from txl_minimal.presets import PRESETS, sized_to_corpus
from txl_minimal.run_checkpoints import Checkpoints, TrainingDiverged, load_for_resume, saved_max_steps
from txl_minimal.run_folder import TrainResult, best_fields, claim_out, finished, one_run_per_out, start_writing
from txl_minimal.run_signals import Stop, TrainingInterrupted, TrainingStoppedAtOnce, resume_command, say
from txl_minimal.train_config import CHOICES, FIELD_TYPES, TrainConfig, lr_at, preset, warmup_note
from txl_minimal.validation import as_int, check_training_lengths

# Names this module held before the config, the presets, the run folder, the device set-up and the
# helpers had modules of their own: ``from txl_minimal.train import ...`` still finds them (a patch goes
# where they live now).
from txl_minimal.command_line import BOOLS  # noqa: F401
from txl_minimal.data import UNITS  # noqa: F401
from txl_minimal.devices import (BF16_MIN_SPEEDUP, COMPILE_MODES, CompiledSegments, LossMeter, Segments,  # noqa: F401
                                 choose_precision, compile_mode, cpu_precision, time_training_step)
from txl_minimal.machine import check_device  # noqa: F401
from txl_minimal.presets import FALLBACK_EPOCHS  # noqa: F401
from txl_minimal.run_folder import (CSV_COLUMNS, LOCK, NO_BEST, ON_RESUME, RESUME_MAY_CHANGE, RUN_FILES,  # noqa: F401
                                    CSVLog)
from txl_minimal.scores import LN2, score_name, score_of  # noqa: F401
from txl_minimal.text_file import check_settings  # noqa: F401


# ----------------------------------------------------------------------------- the loop
# train() is the loop: data, forward, backward, clip, step, schedule. What happens between two steps (the
# log row, the divergence check, the evaluation, the checkpoint, the stop vote) is Bookkeeper.after_step
# (bookkeeping.py); the settings are train_config.py's, what a run keeps in --out run_folder.py's.

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


def _checked_corpus(corpus: Optional[Corpus], cfg: TrainConfig, model_cfg: TXLConfig) -> Corpus:
    """The corpus to train on (``corpus``, else cfg.corpus loaded: $TXL_CORPUS, "auto": see data.py), checked
    before anything takes time (amp="auto" measures) or is written: the train split fills a segment in every
    batch column, and the valid split, read at the first evaluation, holds a prediction (``check_split``)."""
    corpus = corpus if corpus is not None else load_train_corpus(cfg)
    check_split(len(corpus.train), "train", corpus.name, corpus.unit, cfg.batch_size, model_cfg.tgt_len)
    check_split(len(corpus.valid), "valid", corpus.name, corpus.unit)
    return corpus


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


def _run_configs(corpus: Corpus, raw: TransformerXL, model_cfg: TXLConfig, cfg: TrainConfig, choice: dict) -> dict:
    """What every checkpoint records beside the weights: the configs, the precision choice, the
    vocabulary of ``corpus`` (what the ids mean: evaluate and generate check it) and its record (how a
    text file was read, its SHA-256: evaluate and --resume read it again so; ``corpus_record``), which
    ``raw`` carries too."""
    if model_cfg.vocab_size < corpus.vocab_size:  # else an IndexError deep inside the embedding
        raise ValueError(f"TXLConfig.vocab_size is {model_cfg.vocab_size:,} but {corpus.name} has "
                         f"{corpus.vocab_size:,} symbols. Fix: --set vocab_size={corpus.vocab_size}"
                         + ("" if corpus.name in CORPORA else f" (in Python: TXLConfig(vocab_size={corpus.vocab_size},"
                                                               " ...) or preset(..., vocab_size=...))"))
    configs = dict(model_config=model_cfg.to_dict(), train_config=dict(asdict(cfg), corpus=corpus.name),
                   choice=choice, vocab=vocab_entry(corpus.unit, corpus.vocab), corpus=corpus_record(corpus))
    attach_vocab(raw, configs["vocab"], configs["corpus"])
    return configs


TRAIN_FIELDS = {f.name for f in fields(TrainConfig)}


def load_train_corpus(cfg: TrainConfig) -> Corpus:
    """The corpus ``cfg`` trains on: cfg.corpus read with its unit, split and max_vocab ($TXL_CORPUS
    overrides a corpus name, never a file's path; "auto": see data.py)."""
    return load_corpus(cfg.corpus, unit=cfg.unit, split=cfg.split, max_vocab=cfg.max_vocab)


def resume_reading(path: Path, cfg: TrainConfig, given: dict) -> TrainConfig:
    """``cfg`` with the unit, split and max_vocab the run's checkpoint at ``path`` read its text file with,
    where the command line (``given``: its overrides) sets none, so that ``--resume --corpus FILE`` reads
    the file as the run did; ``cfg`` itself without a readable checkpoint or one of a named corpus."""
    try:
        record = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("corpus")
    except Exception:  # noqa: BLE001 (train() loads it again and names the damage)
        return cfg
    reading = (record or {}).get("reading") if isinstance(record, dict) else None
    if reading is None or not is_corpus_path(cfg.corpus):
        return cfg
    taken = {k: tuple(reading[k]) if k == "split" else reading[k] for k in ("unit", "split", "max_vocab")
             if k not in given}
    return replace(cfg, **taken)


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


@one_run_per_out
def train(model_cfg: TXLConfig, cfg: TrainConfig, corpus: Optional[Corpus] = None,
          resume: bool = False, stop_at: Optional[int] = None, progress: bool = True,
          overwrite: bool = False, print_evals: bool = False) -> TrainResult:
    """Train a TransformerXL; writes ``cfg.out``/ckpt.pt (the last state), best.pt and log.csv.

    resume: continue from ckpt.pt (weights, optimiser, schedule, RNG, data position and memory, so the run
    ends as if never interrupted). overwrite: replace the run in ``cfg.out`` (without either, a run there is
    refused before anything is written). stop_at: end after that many steps with a checkpoint, as if
    interrupted. progress: a bar and a line per evaluation; print_evals: those lines without the bar. Under
    torchrun each rank reads its own block of batch columns. best.pt holds the weights of the best periodic
    evaluation (every eval_interval steps and at max_steps; not a stop_at's): ``TrainResult.best_model()``
    loads it. ``model_cfg``, ``cfg``: the model's and training's configs (``preset``); ``corpus``: a loaded
    Corpus (None: ``cfg.corpus``). Raises, before anything is written, ValueError for a split too short
    (``_checked_corpus``); during the run TrainingInterrupted (Ctrl-C, SIGTERM, SIGHUP: the step saved),
    TrainingStoppedAtOnce (a second one) or TrainingDiverged (a NaN or inf: nothing of it saved).
    warmup_steps > max_steps is a warning.

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
    corpus = _checked_corpus(corpus, cfg, model_cfg)  # a split too short for a batch: refused now
    ckpt = load_for_resume(out_dir / LAST, model_cfg, corpus_record(corpus)) if resume else None
    # precision and attention path: chosen (measured) once, by rank 0, and kept by a resume
    choice = choose_once(cfg, model_cfg, device, ckpt and ckpt.get("choice"), rank, world)
    autocast, scaler = amp_context(choice["amp"], device)
    raw, opt, sched = _model_and_optimizer(model_cfg, cfg, choice, device, rank)
    parts = dict(model=raw, optimizer=opt, scheduler=sched, scaler=scaler)
    ckpts = Checkpoints(out_dir, parts, _run_configs(corpus, raw, model_cfg, cfg, choice), rank, world)
    step, epoch, segment, mems = ckpts.restore(ckpt, cfg, device)
    if resume and step >= end:  # a finished run: say so, rather than log a run of no steps
        return finished(raw, step, end, cfg, out_dir, ckpts.best)
    loader = rank_loader(corpus, cfg, model_cfg, rank, world, device)  # its ids checked once: not every step
    batches = itertools.islice(iter(loader), segment, None)  # resume: skip what was read
    model = wrap(raw, cfg, device, world, say=rank == 0 and (progress or print_evals))
    # a resume keeps its earlier rows; --overwrite moves the old run aside until this one saves a checkpoint
    log, ckpts.replaced = start_writing(out_dir, resume, overwrite, step - len(ckpts.unlogged), rank)
    books = Bookkeeper(cfg, step, end, ckpts, log, _bar(cfg.max_steps, step, shown=progress and rank == 0),
                       lambda: _valid_bpc(raw, corpus.valid, cfg, autocast), cfg.batch_size * model_cfg.tgt_len,
                       corpus.unit, device, say=progress or print_evals)
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
        if books.after_step(step, epoch, segment, mems, out.nll, t0):  # the log row, evaluation, checkpoint
            break  # Ctrl-C, SIGTERM: this step saved (a NaN or inf: TrainingDiverged, nothing saved)
    books.close()
    if books.stopped:
        raise TrainingInterrupted(step, ckpts.last, Stop.signum)
    check_replicas_agree(raw, world)
    return TrainResult(raw.eval(), step, books.train_bpc, books.valid_bpc, books.tok_s, ckpts.elapsed, out_dir,
                       unit=corpus.unit, **best_fields(ckpts.best))


# ----------------------------------------------------------------------------- command line

def main(argv: Optional[list[str]] = None) -> None:
    """The command line: train a preset, with any field changed by --set KEY=VALUE (its flags:
    command_line.py)."""
    p = command_line.parser(__doc__, sorted(PRESETS), CHOICES["amp"])
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        overrides = command_line.overrides(args, FIELD_TYPES)
        # the training settings alone first: your own text sizes the model before its config is checked (a
        # --set cutoffs=[30] is for the file's 41 symbols, not the preset's 27)
        _, train_cfg = preset(args.preset, **{k: v for k, v in overrides.items() if k in TRAIN_FIELDS})
        if args.resume:  # the run's text file read as the run read it (a split, a cap the command leaves out)
            train_cfg = resume_reading(Path(train_cfg.out) / LAST, train_cfg, overrides)
        corpus = None
        if is_corpus_path(train_cfg.corpus) and "vocab_size" not in overrides:  # your own text sizes the model
            corpus = load_train_corpus(train_cfg)
            # (a resume keeps its run's size: another file is then refused as another corpus, not another size)
            size = (saved_vocab_size(Path(train_cfg.out) / LAST) if args.resume else None) or corpus.vocab_size
            overrides = dict(overrides, vocab_size=size)
        model_cfg, _ = preset(args.preset, **overrides)  # (its training settings: train_cfg's, read above)
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
    except KeyboardInterrupt as e:  # before train's own handlers are in place: reading a large corpus
        stopped_by_ctrl_c(e, "stopped by Ctrl-C before training began: nothing of a run was written" if
                          distributed()[0] == 0 else "")
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
