"""A long-range recall task: tokens that only a memory of the right length can predict.

Text at CPU scale cannot show Transformer-XL's payoff (a longer memory changes a small
model's bpc by a hair), so this stream is built to need it. Besides random filler it
holds *slots*: one token ``S(k,v)`` sets key ``k`` to a random value ``v``; later, exactly
once, the token ``Q(k)`` asks for it and the next token is the answer ``v``. The answer
has ONE source, the set ``gap`` positions back: nothing else in the stream predicts it,
so the accuracy on answers, by gap, measures how far back a model really reaches. One
attention hop from ``Q(k)`` to ``S(k, v)`` (term (a), content) is all it takes, if the set
is among the keys the query can see.

    task = RecallTask()
    stream = recall_stream(200_000, task, seed=0)   # tokens, answer positions, gaps
    acc = recall_accuracy(correct, stream.gap, edges=(32, 64, 96, 128, 192, 256))

Chance on an answer is 1 / n_values. A key is set again only after it was queried, so
no two sets of one key ever compete.

The models compared on it (``scripts/long_range.py`` trains them): Transformer-XL, the
vanilla baseline, and ``LSTMLM``, an LSTM whose state is carried across segments.
``stream_predictions`` reads a stream the way each model is used (segments with memory or
carried state); ``window_predictions`` gives every query exactly ``context`` tokens (the
vanilla model's best case).
"""
from __future__ import annotations

import json
import math
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Optional
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from txl_minimal import validation
from txl_minimal.model import TransformerXL, TXLConfig, TXLOutput
from txl_minimal.safetensors_io import file_format, load_file, save_file
from txl_minimal.utils import non_finite, refuse_empty_path


@dataclass(frozen=True)
class RecallTask:
    """The stream's alphabet and timing. Token ids: fillers, sets S(k, v), queries Q(k), values."""

    n_filler: int = 16
    n_keys: int = 4  # pending slots at once: 8 kept a 2-layer model at chance for 4,000 steps
    n_values: int = 8
    min_gap: int = 2  # answer position - set position, before collisions push it later
    max_gap: int = 256
    p_set: float = 0.1  # chance that a free position starts a set (while a key is free)
    log_uniform: bool = True  # gaps log-uniform (short ones common: the lookup is learnt early) or uniform

    def __post_init__(self) -> None:  # 0 keys or p_set -1 would make a stream of filler alone, without a word
        for name in ("n_filler", "n_keys", "n_values", "min_gap", "max_gap"):
            validation.count(getattr(self, name), name, "RecallTask")
        validation.flag(self.log_uniform, "log_uniform", "RecallTask")
        if isinstance(self.p_set, bool) or not isinstance(self.p_set, (int, float)) or not 0 < self.p_set <= 1:
            raise ValueError(f"RecallTask: p_set must be a probability in (0, 1], got {self.p_set!r}")

    @property
    def vocab_size(self) -> int:
        return self.n_filler + self.n_keys * self.n_values + self.n_keys + self.n_values

    @property
    def chance(self) -> float:
        return 1.0 / self.n_values

    def set_token(self, key: int, value: int) -> int:
        return self.n_filler + key * self.n_values + value

    def query_token(self, key: int) -> int:
        return self.n_filler + self.n_keys * self.n_values + key

    def value_token(self, value: int) -> int:
        return self.n_filler + self.n_keys * self.n_values + self.n_keys + value

    def name(self, token: int) -> str:
        """A token as a reader would write it: ``.`` filler, ``S1=5`` set, ``Q1`` query, ``5`` value."""
        t = int(token) - self.n_filler
        if t < 0:
            return "."
        if t < self.n_keys * self.n_values:
            return f"S{t // self.n_values}={t % self.n_values}"
        t -= self.n_keys * self.n_values
        return f"Q{t}" if t < self.n_keys else str(t - self.n_keys)


@dataclass
class RecallStream:
    """tokens (N,) uint8; answer_pos (A,): index of each answer token; gap (A,): its
    distance to the value it repeats (answer_pos - set position)."""

    tokens: np.ndarray
    answer_pos: np.ndarray
    gap: np.ndarray


def recall_stream(n_tokens: int, task: RecallTask = RecallTask(), seed: int = 0) -> RecallStream:
    """A deterministic stream of ``n_tokens`` (the same seed gives the same stream).

    Each set draws its gap from [min_gap, max_gap], log-uniformly unless
    ``task.log_uniform`` is False; a query whose time has
    come waits only for the event before it to finish, so the recorded gap is exact.
    """
    n_tokens, seed = validation.count(n_tokens, "n_tokens", "recall_stream"), validation.count(seed, "seed",
                                                                                                "recall_stream", 0)
    if not isinstance(task, RecallTask):
        raise ValueError(f"recall_stream: task must be a RecallTask, got {validation.a_kind(task)}")
    if task.vocab_size > 256 or task.min_gap < 2 or task.max_gap < task.min_gap:
        raise ValueError(f"need vocab_size <= 256 and 2 <= min_gap <= max_gap, got {task}")
    rng = np.random.default_rng(seed)
    tokens = np.empty(n_tokens + 2, dtype=np.uint8)  # +2: the last query may overrun
    pending: dict[int, tuple[int, int, int]] = {}  # key -> (value, set position, answer due)
    answers, gaps = [], []
    t = 0
    while t < n_tokens:
        due = [k for k, (_, _, when) in pending.items() if when <= t + 1]
        if due:  # Q(k) at t, its answer v at t + 1
            k = min(due, key=lambda key: pending[key][2])
            v, at, _ = pending.pop(k)
            tokens[t:t + 2] = (task.query_token(k), task.value_token(v))
            answers.append(t + 1)
            gaps.append(t + 1 - at)
            t += 2
        elif len(pending) < task.n_keys and rng.random() < task.p_set:  # S(k, v)
            k = int(rng.choice([i for i in range(task.n_keys) if i not in pending]))
            v = int(rng.integers(task.n_values))
            tokens[t] = task.set_token(k, v)
            pending[k] = (v, t, t + _draw_gap(rng, task))
            t += 1
        else:
            tokens[t] = rng.integers(task.n_filler)
            t += 1
    answers, gaps = np.array(answers, dtype=np.int64), np.array(gaps, dtype=np.int64)
    keep = answers < n_tokens
    return RecallStream(tokens[:n_tokens].copy(), answers[keep], gaps[keep])


def _draw_gap(rng: np.random.Generator, task: RecallTask) -> int:
    if not task.log_uniform:
        return int(rng.integers(task.min_gap, task.max_gap + 1))
    log_gap = rng.uniform(np.log(task.min_gap), np.log(task.max_gap + 1))
    return min(task.max_gap, int(np.exp(log_gap)))


def bucket_labels(edges: Sequence[int]) -> list[str]:
    """("1-32", "33-64", ...) for the gap buckets (0, e0], (e0, e1], ..."""
    lows = [1] + [e + 1 for e in edges[:-1]]
    return [f"{lo}-{hi}" for lo, hi in zip(lows, edges)]


def recall_accuracy(correct: np.ndarray, gap: np.ndarray, edges: Sequence[int]) -> dict[str, float]:
    """Share of correct answers in each gap bucket ``"lo-hi"`` (NaN for an empty bucket).

    correct: (A,) bool, one per answer; gap: (A,) its gap; edges: increasing upper ends.
    Gaps beyond the last edge are left out.
    """
    correct, gap = np.asarray(correct, dtype=bool), np.asarray(gap)
    if correct.ndim != 1 or correct.shape != gap.shape:
        raise ValueError(f"recall_accuracy: correct and gap must hold one entry per answer each, (A,), got shapes "
                         f"{correct.shape} and {gap.shape}")
    validation.nonempty(edges, "edges", "recall_accuracy", "the buckets' increasing upper ends, e.g. (32, 64, 128)")
    edges = [validation.count(e, "edges[...]", "recall_accuracy") for e in edges]
    if any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"recall_accuracy: edges must increase, got {edges}")
    out, lo = {}, 0
    for label, hi in zip(bucket_labels(edges), edges):
        sel = (gap > lo) & (gap <= hi)
        out[label] = float(correct[sel].mean()) if sel.any() else float("nan")
        lo = hi
    return out


def save_recall_model(model: nn.Module, path: str | Path) -> None:
    """Store ``model`` (a TransformerXL or an LSTMLM) as NAME.safetensors with float16 weights
    (half the file) and its kind and config as JSON text in the file's metadata: no pickle.
    Round it first with ``round_to_float16`` so that what is scored is what is stored."""
    if Path(path).suffix != ".safetensors":
        raise ValueError(f"{path}: a recall model is stored as safetensors; name it NAME.safetensors")
    kind = "lstm" if isinstance(model, LSTMLM) else model.cfg.attn_type
    config = {} if kind == "lstm" else model.cfg.to_dict()
    aliases = _tied_aliases(model)  # a tied weight (the adaptive softmax's) is stored once
    weights = {k: v.half() for k, v in model.state_dict().items() if k not in aliases}
    save_file(weights, path, {"kind": json.dumps(kind), "config": json.dumps(config)})


def _tied_aliases(model: nn.Module) -> set[str]:
    """The state_dict names that repeat an earlier name's tensor (tied weights)."""
    seen, aliases = set(), set()
    for name, t in model.state_dict().items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if t.numel() and key in seen:
            aliases.add(name)
        seen.add(key)
    return aliases


def round_to_float16(model: nn.Module) -> nn.Module:
    """Round every weight to float16 and back, in place (the model stays float32)."""
    with torch.no_grad():
        for t in model.state_dict().values():
            t.copy_(t.half())
    return model


def load_recall_model(path: str | Path) -> nn.Module:
    """A model stored by ``save_recall_model`` (scripts/long_range.py, lstm_text.py, word_level.py:
    float16 weights), as float32, in eval mode; a .pt these scripts wrote before they wrote
    safetensors loads too (weights_only). A damaged file (unreadable, not such a model, NaN
    weights) is one ValueError naming it."""
    refuse_empty_path(path, "load_recall_model's path")
    fix = (f"Fix: git checkout -- {path} (a shipped result), or train it again with the script that wrote it "
           "(scripts/long_range.py, scripts/lstm_text.py, scripts/word_level.py).")
    if not Path(path).is_file():
        raise FileNotFoundError(f"no recall model at {path}. {fix}")
    kind = file_format(path)  # what it holds, whatever its name says (a renamed file)
    try:  # damaged bytes fail anywhere in the reader; a wrong dict in the lines after it
        if kind == "text":
            raise ValueError("a text file")
        if kind == "safetensors" or kind is None and Path(path).suffix == ".safetensors":
            sd, metadata = load_file(path)
            state = {"kind": json.loads(metadata["kind"]), "config": json.loads(metadata["config"])}
        else:
            with open(path, "rb") as f:
                state = torch.load(f, weights_only=True)
            sd = state["state_dict"]
        if state["kind"] == "lstm":
            n_layer = sum(k.startswith("lstm.weight_ih_l") for k in sd)
            model = LSTMLM(sd["emb.weight"].size(0), sd["emb.weight"].size(1), sd["lstm.weight_hh_l0"].size(1), n_layer)
        else:
            model = TransformerXL(TXLConfig(**state["config"]))
        problem = non_finite(sd, "weights")
        missing, unexpected = model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
        if unexpected or set(missing) - _tied_aliases(model):  # only a tied weight may be left out
            problem = problem or (f"does not fit its config: missing {sorted(set(missing) - _tied_aliases(model))}, "
                                  f"unexpected {sorted(unexpected)}")
    except Exception as e:
        problem = f"not a recall model ({type(e).__name__}: {str(e).split(chr(10))[0].split('. ')[0][:120]})"
    if problem:
        raise ValueError(f"{path} is damaged ({Path(path).stat().st_size:,} bytes; {problem}). {fix}") from None
    return model.eval()


class LSTMLM(nn.Module):
    """A character LSTM language model: the recurrent baseline the paper compares against.

    ``forward`` takes and returns what ``TransformerXL.forward`` does, so one training loop
    serves both: ``mems`` is the LSTM state ``[h, c]``, carried across segments and detached
    (truncated back-propagation through time, one segment long).
    """

    def __init__(self, vocab_size: int, d_embed: int = 128, d_hidden: int = 160, n_layer: int = 2):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_embed)
        self.lstm = nn.LSTM(d_embed, d_hidden, n_layer, batch_first=True)
        self.out = nn.Linear(d_hidden, vocab_size)

    def forward(self, tokens: torch.Tensor, mems: Optional[list[torch.Tensor]] = None,
                targets: Optional[torch.Tensor] = None) -> TXLOutput:
        h, (hn, cn) = self.lstm(self.emb(tokens.long()), None if not mems else tuple(mems))
        out = TXLOutput(logits=F.log_softmax(self.out(h), dim=-1), mems=[hn.detach(), cn.detach()])
        if targets is not None:
            out.nll = F.nll_loss(out.logits.flatten(0, 1), targets.long().flatten(), reduction="none")
            out.nll = out.nll.view(targets.shape)
            out.loss = out.nll.mean()
        return out

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def train_stream(model: nn.Module, tokens: np.ndarray, steps: int, batch_size: int, tgt_len: int,
                 lr: float, warmup: int, grad_clip: float = 0.25, log_every: int = 500) -> float:
    """Train ``model`` (a TransformerXL or an LSTMLM) on a token stream; return the seconds.

    The plain loop: the stream cut into ``batch_size`` rows read in order, memory (or LSTM
    state) carried from segment to segment and reset when the rows wrap around, Adam with
    linear warm-up then cosine decay, gradients clipped to ``grad_clip``.
    """
    data = torch.as_tensor(np.asarray(tokens[: len(tokens) // batch_size * batch_size]), dtype=torch.long)
    data = data.view(batch_size, -1)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warmup, 0.5 * (1 + math.cos(math.pi * s / steps))))
    model.train()
    mems, t0 = None, time.perf_counter()
    for step in range(steps):
        s = step * tgt_len % (data.size(1) - tgt_len - 1)
        if s < tgt_len:
            mems = None  # (re)started at the beginning of the rows
        out = model(data[:, s:s + tgt_len], mems, data[:, s + 1:s + 1 + tgt_len])
        mems = out.mems
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        sched.step()
        if step % log_every == 0 or step == steps - 1:
            print(f"  step {step:5d}  loss {out.loss.item():.3f}", flush=True)
    return time.perf_counter() - t0


@torch.no_grad()
def stream_predictions(model: nn.Module, tokens: np.ndarray, tgt_len: int,
                       mem_len: Optional[int] = None) -> np.ndarray:
    """The most likely next token after every position of ``tokens`` (N,), read in one row,
    segment by segment with the memory (Transformer-XL, ``mem_len`` if given) or the
    carried state (LSTM). Entry i predicts tokens[i + 1]."""
    x = torch.as_tensor(np.asarray(tokens), dtype=torch.long)[None]
    preds, mems = [], None
    was_training = model.training
    lengths = model.lengths(tgt_len=tgt_len, mem_len=mem_len) if isinstance(model, TransformerXL) else nullcontext()
    with lengths:
        model.eval()
        for s in range(0, x.size(1), tgt_len):
            out = model(x[:, s:s + tgt_len], mems)
            mems = out.mems
            preds.append(out.logits.argmax(-1)[0])
    model.train(was_training)
    return torch.cat(preds).numpy()


@torch.no_grad()
def window_predictions(model: TransformerXL, tokens: np.ndarray, positions: np.ndarray,
                       context: int, batch_size: int = 256) -> np.ndarray:
    """The most likely token at each of ``positions``, each predicted from exactly the
    ``context`` tokens before it and nothing else (no memory): a sliding window, run only
    where it is scored. Positions with fewer than ``context`` tokens before them are read
    from the start of the stream."""
    tokens = torch.as_tensor(np.asarray(tokens), dtype=torch.long)
    positions = np.asarray(positions)
    preds = np.empty(len(positions), dtype=np.int64)
    with model.lengths(tgt_len=context, mem_len=0):
        for i in range(0, len(positions), batch_size):
            pos = positions[i:i + batch_size]
            starts = np.maximum(pos - context, 0)
            rows = [tokens[s:s + context] for s in starts]
            rows = torch.stack([torch.nn.functional.pad(r, (0, context - len(r))) for r in rows])
            logits = model(rows).logits  # row r predicts position p from index p - 1 - start
            preds[i:i + len(pos)] = logits[torch.arange(len(pos)), torch.as_tensor(pos - 1 - starts)].argmax(-1)
    return preds


def recall_correct(stream: RecallStream, predictions: np.ndarray) -> np.ndarray:
    """(A,) bool: was each answer predicted? ``predictions`` is stream_predictions' output."""
    return predictions[stream.answer_pos - 1] == stream.tokens[stream.answer_pos]
