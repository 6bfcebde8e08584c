"""What the training loop does between its steps, behind one call, ``Bookkeeper.after_step``: every
log_interval steps the mean training loss since the last row (read back from the device once a row),
written to OUT/log.csv and shown on the progress bar with tokens/s; a NaN or inf there stops the run
(``TrainingDiverged``); every eval_interval steps an evaluation and a checkpoint (best.pt too, for a
new best); and the stop vote: after Ctrl-C or SIGTERM every rank saves the same step and stops."""
from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import Optional

import torch

from txl_minimal.devices import LossMeter
from txl_minimal.run_checkpoints import Checkpoints
from txl_minimal.run_log import CSVLog
from txl_minimal.run_signals import Stop
from txl_minimal.scores import LN2, score_name, score_of
from txl_minimal.train_config import TrainConfig, lr_at


class Bookkeeper:
    """The bookkeeping of one training from ``step`` (0, or a resume's) to ``end`` (max_steps, or an
    earlier stop_at): ``after_step`` after each step, ``close`` after the last. ``ckpts``: the run's
    OUT/ckpt.pt and best.pt (and the ranks' vote); ``log``: OUT/log.csv; ``bar``: the progress bar;
    ``evaluate``: the valid bpc of the model as it is (rank 0 calls it); ``tokens_per_step``: the whole
    batch's; ``unit``: the corpus's (the bar shows bpc or perplexity); ``say``: a line per evaluation.
    The wall time counts from its creation. ``train_bpc`` (the last row's), ``valid_bpc`` (the last
    evaluation's) and ``tok_s`` are what the run reports."""

    def __init__(self, cfg: TrainConfig, step: int, end: int, ckpts: Checkpoints, log: CSVLog, bar,
                 evaluate: Callable[[], float], tokens_per_step: int, unit: str, device: torch.device, say: bool):
        self.cfg, self.end, self.ckpts, self.log, self.bar, self.evaluate = cfg, end, ckpts, log, bar, evaluate
        self.tokens_per_step, self.unit, self.device, self.say = tokens_per_step, unit, device, say
        self.first, self.t_train, self.stopped = step, 0.0, False
        self.losses = LossMeter(ckpts.unlogged)  # and a resume's since its last row: the row averages them too
        self.train_bpc, self.valid_bpc, self.tok_s = float("nan"), float("nan"), 0.0
        ckpts.start_clock()

    def after_step(self, step: int, epoch: int, segment: int, mems: Optional[list[torch.Tensor]],
                   nll: torch.Tensor, started: float) -> bool:
        """Book step ``step`` (``nll``: its NLL, left on the device; ``started``: its perf_counter at the
        start; ``epoch``, ``segment``, ``mems``: where the data and memory are, for a checkpoint): the log
        row and the evaluation where due, the stop vote, and a checkpoint at an evaluation or a stop.

        Returns:
            Whether the loop stops here (a stop signal: this step saved). A row whose loss is NaN or inf
            raises ``TrainingDiverged`` instead, nothing of it saved.
        """
        cfg = self.cfg
        self.losses.add(nll)  # the NLL alone (the loss may add a span penalty)
        # an uninterrupted run's rows; stop_at's extra one keeps its losses for the next row (a resume's first)
        regular = step % cfg.log_interval == 0 or step % cfg.eval_interval == 0 or step == cfg.max_steps
        do_eval = step % cfg.eval_interval == 0 or step == self.end
        if log_row := regular or do_eval:  # read back in the timed step: the GPU is done
            self.train_bpc = self.losses.mean(self.ckpts.world, self.device, reset=regular) / LN2
        self.t_train += time.perf_counter() - started
        if log_row:
            self._write_row(step, do_eval)
        self.bar.update(1)
        self.stopped = self.ckpts.vote.any(Stop.requested)  # Ctrl-C, SIGTERM: every rank stops at the same step
        if do_eval or self.stopped:  # Ctrl-C: keep the step just finished
            # best.pt: periodic evaluations alone compete (not stop_at's), so a resumed run keeps an unbroken one's
            periodic = do_eval and (step % cfg.eval_interval == 0 or step == cfg.max_steps)
            self.ckpts.save(step, epoch, segment, mems, self.valid_bpc if periodic else None, self.losses.pending())
        return self.stopped

    def _write_row(self, step: int, do_eval: bool) -> None:
        """The row of ``step`` in log.csv and on the bar, after the evaluation if ``do_eval``; a loss that is
        not finite: ``TrainingDiverged`` (on every rank alike: the mean is the whole batch's)."""
        self.tok_s = (step - self.first) * self.tokens_per_step / max(self.t_train, 1e-9)
        finite = math.isfinite(self.train_bpc)  # (read back for the row: checking it waits for nothing)
        if evaluated := do_eval and self.ckpts.rank == 0 and finite:
            self.valid_bpc = self.evaluate()
        self._show(step, say=evaluated and self.say)
        self.log.write(step, step * self.tokens_per_step, self.ckpts.wall_time_s(), lr_at(step, self.cfg),
                       self.train_bpc, self.valid_bpc if evaluated else None)
        if not finite:
            self.bar.close()
            self.log.close()
            raise self.ckpts.diverged(step, f"the training loss became {self.train_bpc * LN2} (the mean of the "
                                            "steps since the last log row)")

    def _show(self, step: int, say: bool) -> None:
        """The row on the bar (loss, bpc or ppl, tokens/s), and if ``say``, the line of the evaluation
        just made."""
        name, score = score_name(self.unit), lambda bpc: score_of(bpc * LN2, self.unit)  # noqa: E731
        self.bar.set_postfix(loss=f"{self.train_bpc * LN2:.3f}", **{name: f"{score(self.train_bpc):.3f}"},
                             tok_s=f"{self.tok_s:,.0f}")
        if say:
            self.bar.write(f"step {step}: train {name} {score(self.train_bpc):.3f}, valid {name} "
                           f"{score(self.valid_bpc):.3f}")
            sys.stdout.flush()  # at once, also into a log file

    def close(self) -> None:
        """After the last step: the ranks' last vote collected, the bar and the log closed."""
        self.ckpts.vote.close()
        self.bar.close()
        self.log.close()
