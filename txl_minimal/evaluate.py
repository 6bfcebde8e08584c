"""Bits per character (words: perplexity) of a model or checkpoint: segments with memory, or the vanilla sliding window;
and ``read_segments``, the loop that reads a long text segment by segment (Sec. 3.2).

    python -m txl_minimal.evaluate runs/cpu-tiny --split test         # a run directory: its best.pt
    python -m txl_minimal.evaluate runs/cpu-tiny --last               # ... its last state, ckpt.pt
    python -m txl_minimal.evaluate txl --mem-len 256 --clamp-len 128 --same-length
    python -m txl_minimal.evaluate vanilla --sliding-window 64 --max-predictions 20000
    python -m txl_minimal.evaluate runs/cpu-tiny --mem-len 0 64       # two settings, and their paired difference
    python -m txl_minimal.evaluate runs/a runs/b --split test         # two runs on the same characters

CKPT is a shipped model (its names are listed under CKPT below), a run directory or a
checkpoint file; it is scored on the corpus it was trained on unless --corpus names another.
A run directory is scored by its best.pt, the weights of its best periodic valid bpc (as the
authors keep their best model), where it has one; --last scores its ckpt.pt, the last state.
Two values of one of --tgt-len, --mem-len, --clamp-len, --batch-size, or two CKPTs, score twice
and print the second minus the first with its paired standard error (``stats.paired_difference``,
over blocks of --block predictions); two runs must score the same characters. Nothing is written
(``python -m txl_minimal.pretrained --update-json NAME`` rewrites NAME.json).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from txl_minimal import fast, provenance, stats, validation
from txl_minimal.cli import stopped_by_ctrl_c
from txl_minimal.checkpoint import (BEST, NAMES, checkpoint_file, checkpoint_vocab, describe_vocab, load_checkpoint,
                                    model_from_checkpoint, model_vocab, unwrap, vocab_entry)
from txl_minimal.corpora import shown_path
from txl_minimal.data import CORPORA, UNITS, CorpusError, as_ids, is_corpus_path, load_corpus
from txl_minimal.files import file_sha256
from txl_minimal.model import TransformerXL
from txl_minimal.utils import (LN2, Once, callable_module, check_device, int_at_least, score_name, score_of,
                               terminal_progress)
from txl_minimal.segments import (_check_counts, _check_positive, _read, check_fits, device_memory,  # noqa: F401
                                  is_out_of_memory, out_of_memory_said, read_segments)


def _scored_ids(data, limit: Optional[int], caller: str) -> tuple[torch.Tensor, int]:
    """The token ids of the first ``limit`` predictions (limit + 1 tokens) and their count."""
    if not isinstance(data, (torch.Tensor, np.ndarray)):  # text, a set, a generator: said (a list: a tensor)
        data = validation.token_tensor(data, f"{caller}'s text", rows=False)
    ndim = data.dim() if isinstance(data, torch.Tensor) else np.ndim(data)
    if ndim != 1:  # a (1, N) batch would be read as one "token", a (2, N) one fail inside a view
        shape = tuple(data.shape) if hasattr(data, "shape") else np.shape(data)
        raise ValueError(f"{caller} reads one stream of token ids (1-D), got shape {shape}. Fix: pass the "
                         "text as one sequence (ids[0] for one row, ids.flatten() for rows that continue each "
                         "other); batch_size= cuts it into columns itself")
    ids = as_ids(data, None if limit is None else limit + 1)
    if len(ids) < 2:
        raise ValueError(f"{caller} needs at least 2 tokens, got {len(ids)}")
    return ids, len(ids) - 1


def _scores(loss: float, n_pred: int) -> dict:
    """Every reading of a mean NLL (nats): bits per character for characters, perplexity for
    words (exp of the NLL per word, the paper's word-level number); the caller picks."""
    return dict(bpc=score_of(loss, "character"), ppl=score_of(loss, "word"), loss=loss, tokens=n_pred)


@torch.no_grad()
def evaluate(model: TransformerXL, data, batch_size: int = 1, tgt_len: Optional[int] = None,
             mem_len: Optional[int] = None, clamp_len: Optional[int] = None,
             same_length: Optional[bool] = None, max_tokens: Optional[int] = None,
             progress: bool = False, per_token: bool = False, compile: Optional[str] = None) -> dict:
    """Score ``model`` on the token ids ``data``, read in segments with the memory carried (Sec. 3.2).

    Bits per character; for word ids read "ppl" (perplexity), also returned, as is "loss" (mean NLL
    in nats). ``data``: a corpus split, a list, a NumPy array or a tensor of ids; ids taken from a
    corpus (a split or a view of one) of another unit or vocabulary than the model's are a ValueError
    naming both, and any id past the model's ``vocab_size`` is one (ids of unknown origin, and a model
    built in Python, which records no vocabulary, get only that check).
    Every token after the first is scored exactly once, the last short segment
    included: the text is cut into ``batch_size`` columns and column b also predicts
    the first token of column b+1 (the last column is padded; padding is not scored).
    Each column starts with an empty memory, so ``batch_size=1`` gives every token the
    longest context. ``max_tokens`` scores only the first that many predictions.
    Lengths (``tgt_len``, ``mem_len``, ``clamp_len``, ``same_length``) left as None keep the model's;
    they are restored afterwards. ``per_token``
    adds "nll": the NLL in nats of every prediction, in text order (float64 numpy): two scorings of the
    same text compared with ``stats.paired_difference`` give a difference and its standard error. ``compile``:
    the segments compiled by torch.compile in that mode ("default", or "reduce-overhead": with CUDA
    graphs, for a small batch on a GPU, where launching kernels takes longer than running them);
    each length compiles once (the memory's first segments and the last are other lengths).

    "settings" holds the lengths and batch size used; a tgt_len or mem_len longer than a column, or
    more columns than predictions, is cut to it (the same numbers), and "capped" names each that was,
    {name: (asked, why)}. A segment whose attention cannot fit the device's memory is a ValueError
    naming the length to lower. ``progress`` shows a bar.

    Returns:
        A dict: "bpc", "ppl", "loss" (mean NLL in nats), "tokens" (the predictions scored), "settings",
        "capped" and, with ``per_token``, "nll".

    Examples:
        >>> from txl_minimal.evaluate import evaluate
        >>> model = load_pretrained("txl-tiny")                   # trained with a memory of 64
        >>> valid = load_corpus("text8-mini").valid[:2001]
        >>> no_memory, memory = evaluate(model, valid, mem_len=0), evaluate(model, valid)
        >>> memory["tokens"], round(no_memory["bpc"], 2), round(memory["bpc"], 2)
        (2000, 2.53, 2.42)
    """
    batch_size = validation.count(batch_size, "batch_size", "evaluate")  # None too: a count it needs
    max_tokens, tgt_len = _check_positive("evaluate", max_tokens=max_tokens, tgt_len=tgt_len)
    mem_len, clamp_len = _check_counts("evaluate", 0, mem_len=mem_len, clamp_len=clamp_len)
    if compile not in (None, "default", "reduce-overhead"):
        raise ValueError(f"evaluate: compile must be None, 'default' or 'reduce-overhead', got {compile!r}")
    model = unwrap(model)
    provenance.check_vocab(model_vocab(model), data, "evaluate")  # ids of another corpus's vocabulary: said
    ids, n_pred = _scored_ids(data, max_tokens, "evaluate")
    device = next(model.parameters()).device
    B = max(1, min(batch_size, n_pred))
    n = -(-n_pred // B)  # ceil: tokens per column
    pad = B * n - n_pred
    x = F.pad(ids[:-1], (0, pad)).view(B, n).to(device)
    y = F.pad(ids[1:], (0, pad)).view(B, n).to(device)
    asked = dict(tgt_len=model.cfg.tgt_len if tgt_len is None else tgt_len,
                 mem_len=model.cfg.mem_len if mem_len is None else mem_len)
    L, M = (min(v, n) for v in asked.values())  # longer than a column: the column (the same numbers)
    capped = {k: (v, f"a column holds {n:,} token{'s' * (n > 1)}") for k, v in asked.items() if v > n}
    if batch_size > B:
        capped["batch_size"] = (batch_size, f"one column per prediction at most, and there are {n_pred:,}")
    run = None if compile is None else fast.compile_segment(model, compile)
    segments = _read(model, run, x, y, L, M, clamp_len, same_length, caller="evaluate")
    # every NLL is written into one buffer and summed once at the end: one copy per segment,
    # and no value is read back to the host until then (on a GPU, no wait per segment)
    nll = torch.zeros(B, n, dtype=torch.float64, device=device)
    for s, out in tqdm(segments, total=-(-n // L), disable=not progress, desc="evaluate", leave=False):
        nll[:, s:s + L] = out.nll
    scored = nll.flatten()[:n_pred]  # column b holds the b-th block of the text: row-major order is text
    # order, and the padding is the last B * n - n_pred positions
    loss = scored.sum().item() / n_pred
    cfg = model.cfg
    result = dict(_scores(loss, n_pred), capped=capped, settings=dict(
        tgt_len=L, mem_len=M, clamp_len=cfg.clamp_len if clamp_len is None else clamp_len,
        same_length=cfg.same_length if same_length is None else same_length, batch_size=B))
    if per_token:
        result["nll"] = scored.cpu().numpy()
    return result


@torch.no_grad()
def sliding_window_eval(model: TransformerXL, data, context: int,
                        max_predictions: Optional[int] = None, batch_size: int = 64,
                        progress: bool = False, per_token: bool = False) -> dict:
    """Score ``data`` as the vanilla model is evaluated: a sliding window (Al-Rfou et al., 2018; Fig. 1b).

    Token t is predicted from the ``context`` tokens before it, in a window that
    advances ONE position per prediction and scores only its last position: one
    forward pass of ``context`` tokens per prediction, which is why it is slow.
    The first window, the first min(context, n_pred) tokens (n_pred: the predictions scored),
    scores all its positions (each with the shorter context it has), so every token after the first counts once,
    as in ``evaluate``. ``max_predictions`` keeps only the first that many predictions.
    Windows are batched ``batch_size`` at a time; no memory is used. ``per_token`` adds
    "nll", the NLL of every prediction in text order, as ``evaluate`` does; ``progress`` shows a bar.
    "settings" and "capped" as in ``evaluate``: a context longer than the text is the text (one window).
    ``data``: token ids (a corpus split, a list, a tensor; checked as ``evaluate`` checks them);
    ``model``: any TransformerXL.

    Returns:
        A dict: "bpc" (bits per character), "ppl" (perplexity: read it for words), "loss" (mean NLL
        in nats), "tokens" (the predictions scored), "settings" ({"context", "batch_size"}), "capped"
        and, with ``per_token``, "nll".

    Examples:
        >>> model = load_pretrained("txl-tiny")
        >>> valid = load_corpus("text8-mini").valid
        >>> result = sliding_window_eval(model, valid[:300], context=32, max_predictions=100)
        >>> sorted(result), result["tokens"]
        (['bpc', 'capped', 'loss', 'ppl', 'settings', 'tokens'], 100)
        >>> round(result["bpc"], 1)
        2.4
    """
    context, batch_size = (validation.count(v, name, "sliding_window_eval") for name, v in
                           (("context", context), ("batch_size", batch_size)))
    max_predictions, = _check_positive("sliding_window_eval", max_predictions=max_predictions)
    model = unwrap(model)
    provenance.check_vocab(model_vocab(model), data, "sliding_window_eval")
    ids, n_pred = _scored_ids(data, max_predictions, "sliding_window_eval")
    ids = ids.to(next(model.parameters()).device)
    capped = {} if context <= n_pred else {"context": (context, f"the text holds {n_pred:,} predictions")}
    context = c = min(context, n_pred)  # (a longer one: the first window alone, which is the whole text)
    last = n_pred - context  # window s (1..last) reads ids[s:s+context], predicts ids[s+context]
    B = max(1, min(batch_size, last))
    if batch_size > B and last > 0:
        capped["batch_size"] = (batch_size, f"there are {last:,} windows after the first")
    own, what = model.cfg.tgt_len, "sliding_window_eval"
    check_fits(model, B, context, 0, context, what, own, window=True)
    with model.lengths(tgt_len=context, mem_len=0), out_of_memory_said(model, B, context, 0, what, own, window=True):
        parts = [model(ids[None, :c], targets=ids[None, 1:c + 1]).nll.double()[0]]
        total = parts[0].sum()
        windows = ids.unfold(0, context, 1) if last > 0 else None  # a view: no copy
        for s in tqdm(range(1, last + 1, B), disable=not progress, desc="sliding", leave=False):
            e = min(s + B, last + 1)
            logits, target = model(windows[s:e]).logits[:, -1].float(), ids[s + context:e + context]
            total += F.cross_entropy(logits, target, reduction="sum").double()
            if per_token:
                parts.append(F.cross_entropy(logits, target, reduction="none").double())
    loss = total.item() / n_pred
    result = dict(_scores(loss, n_pred), capped=capped, settings=dict(context=context, batch_size=B))
    if per_token:
        result["nll"] = torch.cat(parts).cpu().numpy()
    return result


def evaluate_checkpoint(target: str | Path, split: str = "valid", corpus: Optional[str] = None,
                        sliding_window: Optional[int] = None, max_predictions: Optional[int] = None,
                        batch_size: int = 1, tgt_len: Optional[int] = None, mem_len: Optional[int] = None,
                        clamp_len: Optional[int] = None, same_length: Optional[bool] = None,
                        device: str = "auto", progress: bool = False, last: bool = False,
                        per_token: bool = False) -> dict:
    """bpc (words: ppl) of a checkpoint (see checkpoint.checkpoint_file) on one split; writes nothing.

    A run directory is scored by its best.pt (its best periodic valid bpc), or with ``last`` (or
    without a best.pt) by its ckpt.pt; the result's "checkpoint" names the file, "step" its step.

    Segments with memory (``evaluate``; lengths left as None keep the training ones)
    or, with ``sliding_window=C``, the vanilla sliding window of C tokens. The corpus
    is the one the checkpoint was trained on unless ``corpus`` names another. ``per_token`` adds
    "nll" (as ``evaluate``) and "ids", the ids scored (the first is context only): two results
    whose "ids" and "corpus" are equal scored the same tokens.
    """
    if split not in ("train", "valid", "test"):
        raise ValueError(f"split must be 'train', 'valid' or 'test', got {split!r}")
    path = checkpoint_file(target, last)
    dev = check_device(device, "device")  # before any loading: a GPU this machine lacks is said at once
    ckpt = load_checkpoint(path)
    model = model_from_checkpoint(ckpt, dev)
    record = ckpt.get("corpus") if isinstance(ckpt.get("corpus"), dict) else {}  # how its text file was read
    trained_on = ckpt.get("train_config", {}).get("corpus") or record.get("name")  # save(model) stores the record
    fix = _corpus_fix(trained_on, corpus)
    try:
        loaded = _corpus_to_score(path, ckpt, corpus, trained_on, record.get("reading"))  # $TXL_CORPUS
        # overrides a name, never a file's path
    except ValueError as e:  # e.g. a checkpoint trained on a Corpus built in Python
        raise ValueError(f"{e}. The checkpoint {path} names corpus {trained_on!r}. {fix}") from e
    _check_corpus_fits(path, ckpt, model, loaded, fix)
    data = getattr(loaded, split)
    if sliding_window is not None:
        res = sliding_window_eval(model, data, sliding_window, max_predictions, progress=progress,
                                  per_token=per_token)
        settings = dict(sliding_window=res["settings"]["context"])
        capped = {"sliding_window" if k == "context" else k: v for k, v in res["capped"].items()}
    else:
        res = evaluate(model, data, batch_size, tgt_len, mem_len, clamp_len, same_length, max_predictions,
                       progress=progress, per_token=per_token)
        settings, capped = res["settings"], res["capped"]
    no_effect = {} if sliding_window is not None else validation.ignored_lengths(
        model.cfg, settings["mem_len"], settings["clamp_len"], settings["same_length"])  # the checkpoint's own
    if per_token:
        res["ids"] = data[:res["tokens"] + 1]
    return dict(res, checkpoint=str(path), step=ckpt.get("step"), saved_valid_bpc=ckpt.get("valid_bpc"),
                corpus=loaded.name, unit=loaded.unit, split=split, settings=settings, capped=capped,
                no_effect=no_effect)


def describe_settings(result: dict) -> str:
    """"tgt_len=64, mem_len=0, ..." of an ``evaluate_checkpoint`` result, saying of each setting that was
    cut to the text ("capped") or that changes nothing for this model ("no effect") why."""
    said = []
    for name, value in result["settings"].items():
        text = f"{name}={value:,}" if isinstance(value, int) and not isinstance(value, bool) else f"{name}={value}"
        if name in result.get("capped", {}):
            asked, why = result["capped"][name]
            text += f" (capped from {asked:,}: {why})"
        if name in result.get("no_effect", {}):
            text += f" (no effect {result['no_effect'][name].split(':')[0]})"
        said.append(text)
    return ", ".join(said)


def which_state(target: str | Path, result: dict) -> Optional[str]:
    """The line saying which state of a run directory ``result`` (evaluate_checkpoint's) scored, or None
    for a shipped name or a file."""
    if str(target) in NAMES or not Path(target).is_dir():
        return None
    path, unit, saved = Path(result["checkpoint"]), result["unit"], result["saved_valid_bpc"]
    step = "step ?" if result["step"] is None else f"step {result['step']:,}"
    if path.name == BEST:
        saved = "" if saved is None else f", valid {score_name(unit)} {score_of(saved * LN2, unit):.4f} in training"
        return f"{target}: scoring best.pt, the state of its best periodic evaluation ({step}{saved}); " \
               "--last scores ckpt.pt, the last state"
    why = "--last" if (path.parent / BEST).is_file() else "no best.pt"
    return f"{target}: scoring ckpt.pt, the last state ({step}; {why})"


def _corpus_to_score(path: Path, ckpt: dict, corpus: Optional[str], trained_on: Optional[str],
                     reading: Optional[dict]):
    """The corpus ``evaluate_checkpoint`` scores: ``corpus`` (a name or a file), else the checkpoint's own.
    Its training file is read as the run read it (``reading``: unit, split, max_vocab), once its SHA-256
    says it is that text (a ValueError where it changed); another file is read onto the model's
    vocabulary (``load_corpus(..., vocab=)``: a character it lacks is named), split as the training file
    was; a named corpus as itself."""
    target = corpus or (reading["path"] if reading else trained_on)
    if target is None or not is_corpus_path(target):
        return load_corpus(target)
    if reading and not corpus and not Path(target).is_file():
        raise ValueError(f"the checkpoint {path} was trained on {reading['path']}, which is no longer there. Fix: "
                         f"--corpus the file where it is now (moved or copied, it is the same text if its SHA-256 "
                         f"is {reading['sha256']})")
    own = (Path(target).is_file() and file_sha256(target) == reading["sha256"]) if reading else (
        not corpus or (trained_on is not None and is_corpus_path(trained_on)
                       and Path(target).expanduser().resolve() == Path(trained_on).resolve()))
    vocab = checkpoint_vocab(ckpt)
    if reading and own:  # its own text: read as the run read it (and from the cache the training wrote)
        settings = {k: reading[k] for k in ("unit", "split", "max_vocab")}
        return load_corpus(target, **settings, vocab=tuple(vocab["symbols"]) if reading.get("fixed_vocab") else None)
    if reading and not corpus:
        raise ValueError(f"{shown_path(target)} changed since the run read it (SHA-256 {reading['sha256'][:12]}... "
                         f"then, {file_sha256(target)[:12]}... now): its splits are not the text the checkpoint "
                         f"{path} was scored on. Fix: restore the file the run trained on, or name it, --corpus "
                         f"{shown_path(target)}, to score the text it holds now (read onto the model's vocabulary)")
    if own or vocab is None or vocab.get("symbols") is None or vocab["unit"] not in UNITS:
        return load_corpus(target, **_file_settings(ckpt, target))  # an older checkpoint's own file, or no symbols
    split = (reading or {}).get("split") or _file_settings(ckpt, target).get("split")
    return load_corpus(target, unit=vocab["unit"], split=split, vocab=tuple(vocab["symbols"]))


def _file_settings(ckpt: dict, target) -> dict:
    """How the checkpoint's training read its text file (unit, split, max_vocab), for reading ``target``
    the same way when it is a file's path; nothing for a corpus name (a named corpus has its own)."""
    saved = dict(ckpt.get("train_config") or {})
    if target is None or not is_corpus_path(target):
        return {}
    if saved.get("unit") is None and checkpoint_vocab(ckpt) is not None:  # e.g. save(model): its vocabulary's unit
        saved["unit"] = checkpoint_vocab(ckpt)["unit"]
    return {k: saved[k] for k in ("unit", "split", "max_vocab") if saved.get(k) is not None}


def _corpus_fix(trained_on: Optional[str], corpus: Optional[str]) -> str:
    """How to choose the right evaluation corpus, naming what chose the wrong one: $TXL_CORPUS
    (which overrides everything), --corpus, or nothing (the checkpoint's own)."""
    env = os.environ.get("TXL_CORPUS")
    # the variable, not the name asked for, chose the corpus (it never replaces a file's path)
    if env and env != (corpus or trained_on) and not is_corpus_path(corpus or trained_on or ""):
        chosen = f"--corpus {corpus}" if corpus else f"the checkpoint's corpus {trained_on!r}"
        return (f"Fix: $TXL_CORPUS={env} overrides {chosen}: unset it (unset TXL_CORPUS)"
                + (f" or set it to {trained_on}" if trained_on in CORPORA else "") + ".")
    if corpus:
        return (f"Fix: drop --corpus {corpus} (the checkpoint was trained on {trained_on})"
                if trained_on in CORPORA or (trained_on and is_corpus_path(trained_on))
                else "Fix: choose its training corpus with --corpus") + "."
    return "Fix: choose the evaluation corpus with --corpus."


def _check_corpus_fits(path: Path, ckpt: dict, model: TransformerXL, loaded, fix: str) -> None:
    """ValueError unless ``loaded``'s ids mean what the checkpoint's mean: the same unit (a word
    model's ids read as characters scores nonsense without an error), the same symbols where
    the checkpoint names them, and ids within the embedding."""
    want, got = checkpoint_vocab(ckpt), vocab_entry(loaded.unit, loaded.vocab)
    if want is not None and want["unit"] != got["unit"]:
        problem = (f"the checkpoint {path} is a {want['unit']} model ({describe_vocab(want)}) but {loaded.name} "
                   f"holds {describe_vocab(got)}: its ids would be read as {want['unit']}s")
    elif want is not None and want["symbols"] is not None and want["symbols"] != got["symbols"]:
        problem = (f"the checkpoint {path} was trained on another vocabulary ({describe_vocab(want)}) than "
                   f"{loaded.name}'s ({describe_vocab(got)}): the same id would mean another symbol")
    elif model.cfg.vocab_size < loaded.vocab_size:  # ids past the embedding: an IndexError inside torch
        problem = (f"the checkpoint {path} has vocab_size {model.cfg.vocab_size:,} but {loaded.name} has "
                   f"{loaded.vocab_size:,} symbols")
    else:
        return
    raise ValueError(f"{problem}. {fix}")


SEGMENT_OPTIONS = ("tgt_len", "mem_len", "clamp_len", "same_length", "batch_size")
COMPARED = ("tgt_len", "mem_len", "clamp_len", "batch_size")  # the options that take two values: a comparison
BLOCK = 1000  # predictions per block of a comparison's paired standard error (as pretrained.BLOCK)


class _OneOrTwo(Once):
    """``Once`` for a flag of one value or two (a comparison: ``--mem-len 0 64``); one value is kept as
    itself, so that a flag given twice is said as ``5 and 6``."""

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values[0] if len(values) == 1 else values, option_string)


def _comparison(p: argparse.ArgumentParser, args) -> tuple[list[tuple[str, dict]], Optional[str]]:
    """The scorings the command line asks for: [(CKPT, {option: value})] (one; two for two runs or two
    values of one option) and the comparison's name ("mem_len" or "checkpoint"; None: no comparison).
    Each option's list of values becomes its one value; a combination that compares nothing, or two
    things at once, is refused (``p.error``)."""
    lists = {k: v if isinstance(v := getattr(args, k), list) else [v] for k in COMPARED if getattr(args, k) is not None}
    two = [k for k, values in lists.items() if len(values) > 1]
    for k, values in lists.items():
        if len(values) > 2:
            p.error(f"--{k.replace('_', '-')} takes one value, or two to compare, got {len(values)}")
        setattr(args, k, values[0])
    if len(args.checkpoint) > 2:
        p.error(f"CKPT: one checkpoint, or two to compare on the same characters, got {len(args.checkpoint)}")
    if len(two) > 1:
        p.error(f"compare one setting at a time: {' and '.join('--' + k.replace('_', '-') for k in two)} each "
                "have two values")
    if two and len(args.checkpoint) == 2:
        p.error(f"compare two checkpoints or two values of --{two[0].replace('_', '-')}, not both")
    if two:
        return [(args.checkpoint[0], {two[0]: v}) for v in lists[two[0]]], two[0]
    if len(args.checkpoint) == 2:
        return [(t, {}) for t in args.checkpoint], "checkpoint"
    if args.block is not None:
        p.error("--block sizes the paired standard error of a comparison: give two checkpoints or two values of "
                f"one of {', '.join('--' + k.replace('_', '-') for k in COMPARED)}, or drop --block")
    return [(args.checkpoint[0], {})], None


def _compared(p: argparse.ArgumentParser, runs: list[tuple[str, dict]], kind: str, results: list[dict],
              block: int) -> str:
    """The line of a comparison: the second scoring minus the first, with its paired standard error,
    or ``p.error`` where the two did not score the same tokens or too few for two blocks."""
    a, b = results
    if a["corpus"] != b["corpus"] or a["split"] != b["split"] or not np.array_equal(a["ids"], b["ids"]):
        p.error(f"{runs[0][0]} and {runs[1][0]} did not score the same text ({a['corpus']} {a['split']}, "
                f"{a['tokens']:,} predictions, and {b['corpus']} {b['split']}, {b['tokens']:,}), so a paired "
                "difference means nothing. Fix: --corpus NAME_OR_FILE scores both on one text")
    if a["tokens"] < 2 * block:
        p.error(f"a paired standard error needs at least 2 blocks of --block {block:,} predictions, and "
                f"{a['tokens']:,} were scored. Fix: a smaller --block, or more predictions")
    words = a["unit"] == "word"
    paired = stats.paired_difference(b["nll"], a["nll"], block, bits=not words)
    name_a, name_b = (str(target) if kind == "checkpoint" else f"{kind}={setting[kind]:,}" for target, setting in runs)
    unit = "nats per word" if words else score_name(a["unit"])
    return (f"{name_b} minus {name_a}: {paired.mean:+.4f} {unit} ± {paired.se:.4f} (paired standard error over "
            f"{paired.blocks:,} blocks of {block:,} of the same {a['tokens']:,} predictions)")


def main(argv: Optional[list[str]] = None) -> None:
    """The command line: print one checkpoint's bpc (words: perplexity), or two and their paired difference
    (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m txl_minimal.evaluate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.register("action", None, Once)  # a flag given twice with two values is refused, not the last kept
    p.add_argument("checkpoint", metavar="CKPT", nargs="+",
                   help=f"a shipped model ({' | '.join(NAMES)}), a run directory or a checkpoint file; two: both "
                        "scored on the same characters and compared")
    p.add_argument("--split", choices=("train", "valid", "test"), default="valid")
    p.add_argument("--corpus", metavar="NAME_OR_FILE",
                   help=f"default: the training corpus; else one of {', '.join(CORPORA)} or a UTF-8 text file's path "
                        "(its training file: read as the run read it; another file: read onto the model's "
                        "vocabulary, split as its training file was; a character the model lacks is named)")
    seg = p.add_argument_group("segments with memory (the default evaluation); two values of one of these: "
                               "both scored and compared")
    seg.add_argument("--tgt-len", type=int_at_least(1), nargs="+", metavar="N", action=_OneOrTwo,
                     help="segment length (default: the training one)")
    seg.add_argument("--mem-len", type=int_at_least(0), nargs="+", metavar="N", action=_OneOrTwo,
                     help="memory length (default: the training one)")
    seg.add_argument("--clamp-len", type=int_at_least(0), nargs="+", metavar="N", action=_OneOrTwo,
                     help="clamp relative distances (0: no clamp)")
    seg.add_argument("--same-length", action="store_true", default=None,
                     help="every query attends to the same number of keys")
    seg.add_argument("--batch-size", type=int_at_least(1), nargs="+", metavar="N", action=_OneOrTwo,
                     help="columns read in parallel (default 1: every token gets the longest context)")
    p.add_argument("--sliding-window", type=int_at_least(1), metavar="C",
                   help="the vanilla evaluation instead: one window of C tokens per prediction, no memory")
    p.add_argument("--max-predictions", type=int_at_least(1), metavar="N", help="score only the first N predictions")
    p.add_argument("--block", type=int_at_least(1), metavar="N",
                   help=f"a comparison: predictions per block of the paired standard error (default {BLOCK:,}; "
                        "neighbouring losses correlate, so the SE is over block means)")
    p.add_argument("--last", action="store_true",
                   help="a run directory: score its last state, ckpt.pt, instead of its best.pt")
    p.add_argument("--device", default="auto", help='"auto" (a GPU if there is one), "cpu", "cuda:1" ...')
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    given = ", ".join("--" + k.replace("_", "-") for k in SEGMENT_OPTIONS if getattr(args, k) is not None)
    if args.sliding_window is not None and given:  # an error rather than options silently ignored
        p.error(f"--sliding-window reads fixed windows without memory: drop {given}")
    runs, kind = _comparison(p, args)
    results = []
    for target, setting in runs:
        lengths = dict(dict(tgt_len=args.tgt_len, mem_len=args.mem_len, clamp_len=args.clamp_len,
                            batch_size=args.batch_size), **setting)
        try:
            results.append(evaluate_checkpoint(target, args.split, args.corpus, args.sliding_window,
                                               args.max_predictions, lengths["batch_size"] or 1, lengths["tgt_len"],
                                               lengths["mem_len"], lengths["clamp_len"], args.same_length,
                                               args.device, progress=terminal_progress(not args.no_progress),
                                               last=args.last, per_token=kind is not None))
        except (ValueError, FileNotFoundError, CorpusError) as e:  # bad input: the message, no traceback
            p.error(str(e))
        except KeyboardInterrupt as e:
            stopped_by_ctrl_c(e, "stopped by Ctrl-C: nothing was written (an evaluation writes nothing)")
    compared = None if kind is None else _compared(p, runs, kind, results, args.block or BLOCK)
    for (target, _), r in zip(runs, results):
        if (which := which_state(target, r)) is not None and (kind != "mem_len" or r is results[0]):
            print(which)
        name = score_name(r["unit"])  # bpc for characters, ppl for words
        print(f"{r['checkpoint']} on {r['corpus']} {r['split']}: {name} {r[name]:.4f} "
              f"over {r['tokens']:,} predictions ({describe_settings(r)})")
    for r in results:
        if not math.isfinite(r["loss"]):  # exit 1, so that a script or CI notices
            name = score_name(r["unit"])
            sys.exit(f"error: {name} {r[name]} is not finite: the weights hold NaN or inf (a diverged run?). "
                     "Fix: evaluate an earlier checkpoint, or train again with a lower lr.")
    if compared is not None:
        print(compared)


callable_module(__name__)  # `from txl_minimal import evaluate` gives this module: evaluate(...) calls evaluate.evaluate


if __name__ == "__main__":
    main()
