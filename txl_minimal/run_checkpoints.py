"""OUT/ckpt.pt and OUT/best.pt of one training: the state after a step, saved so that a resume
continues it bit-exactly (weights, optimiser, schedule, every rank's RNG state, the data position,
the memory and the losses since the last log row), and the weights of the best periodic evaluation.
A state holding NaN or inf is never saved (``TrainingDiverged``); a resume may change only the
settings ON_RESUME lists. A ``cfg`` here is train_config.py's TrainConfig."""
from __future__ import annotations

import math
import shutil
import time
import warnings
from pathlib import Path
from typing import Optional

import torch

from txl_minimal.checkpoint import (BEST, LAST, ConfigMismatch, check_config, check_weights_fit, describe_vocab,
                                    load_checkpoint, rng_state, save_checkpoint, set_rng_state)
from txl_minimal.corpora import READ_AS, corpus_change
from txl_minimal.devices import RankVote, gather, gather_objects
from txl_minimal.files import NO_SPACE, WriteError
from txl_minimal.finite import all_finite, non_finite
from txl_minimal.model import TransformerXL, TXLConfig


class TrainingDiverged(FloatingPointError):
    """A NaN or inf in the training loss, or in the state a checkpoint would hold, at ``step``: nothing
    of it was saved, so that ``path`` (OUT/ckpt.pt, at ``last_step``; None: none yet) stays the last
    finite state."""

    def __init__(self, step: int, what: str, path: Path, last_step: Optional[int], lr: float, amp: str = "off"):
        lower = f"{lr / 10:g}"
        if last_step is None:
            kept = "no checkpoint was saved before it" + replaced_note(path.parent, "; ")
            fix = (f"train afresh with a lower learning rate, --overwrite --set lr={lower} "
                   f"(train(..., overwrite=True) with TrainConfig.lr={lower})")
        else:
            kept = f"{path} still holds step {last_step}, the last finite state"
            fix = (f"resume from it with a lower learning rate, --resume --set lr={lower} "
                   f"(train(..., resume=True) with TrainConfig.lr={lower})")
        fp16 = "; in fp16 a value may overflow too: --set amp=bf16 (or off)" if amp == "fp16" else ""
        super().__init__(f"training diverged at step {step}: {what}. Nothing of it was saved: {kept}. Fix: {fix}; "
                         f"this run's lr is {lr:g} (a longer warm-up, warmup_steps, helps too){fp16}")
        self.step, self.path, self.last_step = step, path, last_step


NO_BEST = dict(step=0, valid_bpc=None)  # no periodic evaluation yet (None: a checkpoint holds no inf)
# OUT/replaced/: the run that --overwrite replaces, moved aside until the new run's first checkpoint
# replaces it (a new run that diverges or is killed before then leaves the old one there)
REPLACED = "replaced"


def replaced_note(out_dir: Path, lead: str = " ") -> str:
    """``lead`` and a sentence naming OUT/replaced/ and how to put it back, if it holds the run an
    --overwrite replaced (the new run has no checkpoint yet); else ""."""
    aside = out_dir / REPLACED
    if not aside.is_dir():
        return ""
    held = ", ".join(sorted(p.name for p in aside.iterdir())) or "nothing"
    return (f"{lead}the run --overwrite replaced is kept in {aside}/ ({held}): to restore it, move its files back "
            f"(mv {aside}/* {out_dir}/) and --resume it")


def how_to_go_on(last: Path) -> str:
    """The end of a fix after a failed write: the same command with --resume, which continues from the last
    checkpoint ``last`` (OUT/ckpt.pt), or, where none was saved, with --overwrite (nothing to resume)."""
    if saved_step(last) is not None:
        return "then run the same command with --resume"
    return ("then run the same command with --overwrite (no checkpoint was saved, so there is nothing to "
            "resume: the run starts afresh)")


class Checkpoints:
    """OUT/ckpt.pt and OUT/best.pt of one training: the ``parts`` a checkpoint restores (model,
    optimizer, scheduler, scaler), the ``configs`` it records, the best periodic evaluation so far
    (``best``, kept in ckpt.pt so that a resumed run replaces best.pt only when an uninterrupted one
    would), the run's wall time across resumes (``elapsed``; ``wall_time_s``), the step of the last
    checkpoint (``saved``) and each rank's training losses since the last log row (``unlogged``, so
    that the first row after a resume is an uninterrupted run's). Every rank calls ``save`` (it
    gathers); rank 0 writes. ``vote``: what the ranks decide together (devices.RankVote)."""

    def __init__(self, out_dir: Path, parts: dict, configs: dict, rank: int, world: int):
        self.last, self.best_path = out_dir / LAST, out_dir / BEST
        self.parts, self.configs, self.rank, self.world = parts, configs, rank, world
        self.best, self.elapsed, self.started = dict(NO_BEST), 0.0, time.perf_counter()
        self.saved: Optional[int] = None
        self.unlogged: list[float] = []
        self.replaced: Optional[Path] = None  # OUT/replaced/, deleted once a checkpoint of this run is saved
        self.vote = RankVote(world)

    def restore(self, ckpt: Optional[dict], cfg, device: torch.device) -> tuple[int, int, int, Optional[list]]:
        """(step, epoch, segment, this rank's rows of the memory) to go on from: a fresh run's start
        (``ckpt`` None), or a resume's, the parts, RNG state and wall time restored from ``ckpt``
        (OUT/ckpt.pt, loaded on the CPU) and the schedule of ``cfg`` followed from the next step."""
        if ckpt is None:
            return 0, 0, 0, None
        step, epoch, segment, self.elapsed, mems, self.best = _resume(ckpt, self.last, self.configs, self.parts,
                                                                      self.rank, self.world, device)
        follow_schedule(self.parts["optimizer"], self.parts["scheduler"], cfg)
        self.saved, self.unlogged = step, _unlogged(ckpt, self.rank, self.world)
        return step, epoch, segment, mems

    def start_clock(self) -> None:
        """The loop begins: the wall time counts from now (the set-up before it is left out)."""
        self.started = time.perf_counter()

    def wall_time_s(self) -> float:
        """The run's time so far: what earlier processes and saves counted, and this one's since."""
        return self.elapsed + time.perf_counter() - self.started

    def save(self, step: int, epoch: int, segment: int, mems: Optional[list[torch.Tensor]],
             valid_bpc: Optional[float] = None, unlogged: Optional[list[float]] = None) -> None:
        """OUT/ckpt.pt: the state after ``step``, which --resume continues bit-exactly (``unlogged``: this
        rank's losses since the last log row, ``LossMeter.pending``). With ``valid_bpc`` (a periodic
        evaluation's, known on rank 0), first OUT/best.pt, which ckpt.pt names, if it is the best so far.
        A state holding NaN or inf is never saved: ``TrainingDiverged`` instead, on every rank."""
        self.elapsed, self.started = self.wall_time_s(), time.perf_counter()
        problem = self._non_finite(mems)
        if not self.vote.all(problem is None):
            raise self.diverged(step, problem or "another rank's memory holds NaN or inf")
        if valid_bpc is not None and self.rank == 0 and not math.isfinite(valid_bpc):
            warnings.warn(f"the evaluation at step {step} gave valid bpc {valid_bpc} although the weights are finite "
                          "(it is not kept as best.pt). Fix: evaluate in fp32, --set amp=off", stacklevel=4)
        if valid_bpc is not None and self.rank == 0 and _improves(valid_bpc, self.best):
            self._save_best(step, valid_bpc)
        _save(self.last, self.parts, self.configs, step, epoch, segment, mems, self.elapsed, self.rank, self.world,
              self.best, unlogged or [])
        self.saved = step
        if self.replaced is not None:  # this run has a checkpoint now: the one --overwrite replaced goes
            shutil.rmtree(self.replaced, ignore_errors=True)
            self.replaced = None

    def _save_best(self, step: int, valid_bpc: float) -> None:
        """OUT/best.pt of a new best evaluation; a failed write says what is kept and that --resume goes on."""
        try:
            _save_best(self.best_path, self.parts["model"], self.configs, step, valid_bpc, self.elapsed)
        except WriteError as e:
            earlier = (f"best.pt of step {self.best['step']}" if self.best["step"] else "no best.pt yet")
            raise WriteError(f"{write_failed(self.best_path, step, e)} (a new best valid bpc). Kept: {earlier}. "
                             f"{last_checkpoint_note(self.last)} Fix: free some disk space (or make "
                             f"{self.best_path.parent} writable), {how_to_go_on(self.last)}",
                             e.errno, e.reason) from None
        self.best = dict(step=step, valid_bpc=valid_bpc)

    def _non_finite(self, mems: Optional[list[torch.Tensor]]) -> Optional[str]:
        """What holds NaN or inf among the weights, Adam's state and the memory (one read back per
        device: a save reads them all anyway), or None."""
        weights = self.parts["model"].state_dict()
        adam = {f"{key} of parameter {i}": t for i, state in enumerate(self.parts["optimizer"].state.values())
                for key, t in state.items() if isinstance(t, torch.Tensor)}
        memory = {f"of layer {i}": m for i, m in enumerate(mems or [])}
        if all_finite([*weights.values(), *adam.values(), *memory.values()]):
            return None
        return (non_finite(weights, "the weights") or non_finite(adam, "Adam's state")
                or non_finite(memory, "the memory"))

    def diverged(self, step: int, what: str) -> TrainingDiverged:
        """The error of a NaN or inf (``what``) at ``step``: nothing of it saved, the last checkpoint named."""
        return TrainingDiverged(step, what, self.last, self.saved, self.configs["train_config"]["lr"],
                                self.configs["choice"]["amp"])


def load_for_resume(path: Path, model_cfg: TXLConfig, corpus: Optional[dict] = None) -> dict:
    """OUT/ckpt.pt for a resume, checked against ``corpus`` (``corpora.corpus_record`` of the corpus this run
    reads: the same text, read the same way, first, since another corpus is also another vocab_size) and
    ``model_cfg``, on the CPU: the RNG states must stay CPU tensors, and each part moves its own state to its
    device."""
    ckpt = load_checkpoint(path, map_location="cpu")
    if corpus is not None and isinstance(ckpt.get("corpus"), dict) and (
            change := corpus_change(ckpt["corpus"], corpus)) is not None:
        raise ValueError(f"checkpoint {path}: {change}.")
    try:
        check_config(ckpt["model_config"], model_cfg, f"checkpoint {path}")
    except ConfigMismatch as e:  # a --set of a model field: say what a resume may change
        raise ConfigMismatch(f"{e} {RESUME_MAY_CHANGE}") from None
    return ckpt


def saved_max_steps(path: Path) -> Optional[int]:
    """The max_steps a run's checkpoint was trained towards, or None (no readable checkpoint: ``train``
    then says what is wrong with it)."""
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["train_config"]["max_steps"])
    except Exception:  # noqa: BLE001 (train() loads it again and names the damage)
        return None


def _keep_implementation(saved: dict, opt: torch.optim.Optimizer) -> dict:
    """A saved optimiser state with this run's implementation flags (fused, foreach): torch would
    otherwise take the saved run's, and place Adam's step counters for those."""
    flags = {k: opt.param_groups[0][k] for k in ("fused", "foreach") if k in opt.param_groups[0]}
    return dict(saved, param_groups=[dict(g, **flags) for g in saved["param_groups"]])


def _resume(ckpt: dict, path: Path, configs: dict, parts: dict, rank: int, world: int,
            device: torch.device) -> tuple[int, int, int, float, Optional[list[torch.Tensor]], dict]:
    """Load ``parts`` (model, optimiser, ...) and this rank's RNG state from a checkpoint (loaded on
    the CPU); return its (step, epoch, segment, wall_time_s, this rank's rows of the memory, best so far)."""
    used = configs["train_config"]
    _check_resume(path, ckpt, configs)
    check_weights_fit(parts["model"], ckpt["model"], f"checkpoint {path}")  # not torch's list of every key
    for key, part in parts.items():
        if key == "scaler" and part.is_enabled() != bool(ckpt[key]):  # fp16 now, not then (or back)
            print(f"{path}: the loss scale starts afresh (the run was saved "
                  f"{'without' if part.is_enabled() else 'with'} fp16 loss scaling)")
            continue
        part.load_state_dict(_keep_implementation(ckpt[key], part) if key == "optimizer" else ckpt[key])
    set_rng_state(ckpt["rng"][rank % len(ckpt["rng"])], device)
    mems = ckpt["mems"]
    if mems is not None:  # saved for the full batch: keep this rank's rows
        per = used["batch_size"] // world
        mems = [m[rank * per:(rank + 1) * per].to(device) for m in mems]
    best = ckpt.get("best") or dict(NO_BEST)  # a checkpoint from before best.pt existed: none yet
    return ckpt["step"], ckpt["data"]["epoch"], ckpt["data"]["segment"], ckpt["wall_time_s"], mems, best


# What a resume may change (TrainConfig fields): the schedule, followed from the next step on
# (follow_schedule), the evaluation and logging, precision, compilation and the device. The model
# config and batch_size, corpus and seed may not: the memory and data position would not line up,
# and the random state comes from the checkpoint (a new seed would be recorded but not used).
ON_RESUME = ("lr", "min_lr", "warmup_steps", "max_steps", "grad_clip", "eval_interval", "eval_tokens",
             "eval_batch_size", "eval_tgt_len", "eval_mem_len", "eval_clamp_len", "eval_same_length",
             "log_interval", "amp", "attention", "compile", "adam", "flex_attention", "device", "out")
RESUME_MAY_CHANGE = (f"On --resume only these settings may change: {', '.join(ON_RESUME[:-1])} (a new schedule "
                     "is followed from the next step); the model's may not.")
_WHY = dict(batch_size="the memory and data position would not line up",
            corpus="the memory and data position would not line up",
            seed="a resume restores the random state saved in the checkpoint, so a new seed would be recorded "
                 "but not used")


def _check_resume(path: Path, ckpt: dict, configs: dict) -> None:
    """ValueError if this run changes a setting a resume cannot honour (see ON_RESUME), or reads
    a corpus whose vocabulary differs from the checkpoint's, before anything is loaded."""
    saved, used = ckpt["train_config"], configs["train_config"]
    read = isinstance(ckpt.get("corpus"), dict) and "corpus" in configs  # its corpus's record: its text, not its path
    for key in used:
        if read and key in ("corpus",) + READ_AS:  # compared by content in load_for_resume (a moved file: the same)
            continue
        if key not in ON_RESUME and key in saved and saved[key] != used[key]:
            fix = " (for the corpus: --corpus, and $TXL_CORPUS, which overrides it)" if key == "corpus" else ""
            raise ValueError(f"checkpoint {path} used {key}={saved[key]!r}, this run {used[key]!r}: "
                             f"{_WHY.get(key, 'it cannot change on resume')}. Fix: resume with the same "
                             f"setting{fix}, or train afresh in another --out. {RESUME_MAY_CHANGE}")
    if "vocab" in ckpt and ckpt["vocab"] != configs["vocab"]:
        raise ValueError(f"checkpoint {path} was trained on another vocabulary than {used['corpus']}'s "
                         f"({describe_vocab(ckpt['vocab'])}, here {describe_vocab(configs['vocab'])}). "
                         "Fix: resume on its own corpus (--corpus, $TXL_CORPUS).")


def follow_schedule(opt: torch.optim.Optimizer, sched: torch.optim.lr_scheduler.LambdaLR,
                     cfg) -> None:
    """After a resume: the learning rate of this run's schedule (lr, min_lr, warmup_steps,
    max_steps), from the next step on. The scheduler's state brings back the checkpoint's lr as
    base_lrs, and the optimiser the rate it had set next: without this, a --set lr=... on resume
    would be recorded in the log and checkpoint but not used. Computed as LambdaLR computes it,
    so an unchanged schedule resumes bit-exactly."""
    sched.base_lrs = [cfg.lr for _ in opt.param_groups]
    for group, fn in zip(opt.param_groups, sched.lr_lambdas):
        group["initial_lr"] = cfg.lr
        group["lr"] = cfg.lr * fn(sched.last_epoch)
    sched._last_lr = [group["lr"] for group in opt.param_groups]


def _save(path: Path, parts: dict, configs: dict, step: int, epoch: int, segment: int,
          mems: Optional[list[torch.Tensor]], wall_time_s: float, rank: int, world: int, best: dict,
          unlogged: list[float]) -> None:
    """Write the checkpoint a bit-exact resume needs (``best``: the step and valid bpc of best.pt, so that
    a resumed run replaces it only when an uninterrupted one would; ``unlogged``: this rank's losses since
    the last log row). Every rank takes part in the gathers (full-batch memory, each rank's RNG state and
    losses); rank 0 writes."""
    full_mems = None if mems is None or mems[0].size(1) == 0 else [gather(m, world).cpu() for m in mems]
    device = next(parts["model"].parameters()).device
    rngs = gather_objects(rng_state(device), world)
    unlogged_nll = gather_objects(unlogged, world)
    if rank == 0:
        states = {key: part.state_dict() for key, part in parts.items()}
        try:
            save_checkpoint(dict(format=1, **states, **configs, step=step, data=dict(epoch=epoch, segment=segment),
                                 mems=full_mems, rng=rngs, wall_time_s=wall_time_s, best=best,
                                 unlogged_nll=unlogged_nll), path)
        except WriteError as e:  # a full disk: say which checkpoint survives, and how to go on
            raise WriteError(f"{write_failed(path, step, e)}. {last_checkpoint_note(path)} Fix: free some disk space "
                             f"(or make {path.parent} writable), {how_to_go_on(path)}", e.errno, e.reason) from None


def write_failed(path: Path, step: int, e: WriteError, what: Optional[str] = None) -> str:
    """'no space left on the disk holding OUT for the checkpoint of step N' (or another reason); ``what``:
    what of ``path`` was written (default: the checkpoint, or the file's name)."""
    what = (f"{path.name}: {what}" if what else "the checkpoint" if path.name == LAST else path.name)
    return (f"no space left on the disk holding {path.parent} for {what} of step {step}" if e.errno in NO_SPACE else
            f"{what} of step {step} could not be written in {path.parent} ({e.reason})")


def _unlogged(ckpt: dict, rank: int, world: int) -> list[float]:
    """This rank's training losses since the last log row, as the checkpoint saved them (each rank's);
    resumed by another number of processes, every rank takes the mean of the saved ranks' (the
    whole batch's), so that the row's mean over the ranks is still the whole batch's."""
    saved = ckpt.get("unlogged_nll") or [[]]  # a checkpoint from before they were kept: none
    if len(saved) == world:
        return list(saved[rank])
    return [sum(values) / len(values) for values in zip(*saved)]


def saved_step(path: Path) -> Optional[int]:
    """The step of the checkpoint at ``path``, or None if there is none (or it cannot be read)."""
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["step"])
    except Exception:  # noqa: BLE001 (only a message depends on it)
        return None


def last_checkpoint_note(path: Path) -> str:
    """What a failed save left: the earlier checkpoint (its step) or none."""
    step = saved_step(path)
    if step is not None:
        return f"The last checkpoint (step {step}) is intact in {path}: --resume continues from it."
    if not path.exists():
        return f"No checkpoint was saved before this one: {path} does not exist yet{replaced_note(path.parent, '; ')}."
    return f"{path} holds the previous checkpoint."


def _improves(valid_bpc: float, best: dict) -> bool:
    """True if ``valid_bpc`` (finite) is lower than the best so far (strictly: a tie keeps the earlier)."""
    return math.isfinite(valid_bpc) and (best["valid_bpc"] is None or valid_bpc < best["valid_bpc"])


def _save_best(path: Path, model: TransformerXL, configs: dict, step: int, valid_bpc: float,
               wall_time_s: float) -> None:
    """OUT/best.pt: the weights of a new best evaluation with the configs, step and valid bpc (what
    ``load`` and ``python -m txl_minimal.evaluate`` read), written atomically (rank 0 only)."""
    weights = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    save_checkpoint(dict(model=weights, **configs, step=step, valid_bpc=valid_bpc, wall_time_s=wall_time_s), path)
