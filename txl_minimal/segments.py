"""Reading a long text segment by segment with memory (Sec. 3.2): ``read_segments``, the loop that
``evaluate`` and the notebooks use, and whether a segment's attention fits the device's memory (said
in a sentence before it runs, or when its allocation fails). ``python -m txl_minimal.evaluate`` and
``evaluate`` (evaluate.py) score what these read.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Optional

import torch

from txl_minimal import provenance, validation
from txl_minimal.checkpoint import model_vocab
from txl_minimal.model import TransformerXL, TXLOutput


def read_segments(model: TransformerXL, tokens: torch.Tensor, targets: Optional[torch.Tensor] = None,
                  tgt_len: Optional[int] = None, mem_len: Optional[int] = None,
                  clamp_len: Optional[int] = None, same_length: Optional[bool] = None,
                  first_len: Optional[int] = None, attn_last: int = 0,
                  terms: bool = False) -> Iterator[tuple[int, TXLOutput]]:
    """Read a long text segment by segment, carrying the memory (Sec. 3.2), in eval mode.

    ``tokens`` (B, N) ids are cut into segments of ``tgt_len``; ``targets`` (B, N), if given, are
    scored (``output.nll``). ``tgt_len``, ``mem_len``, ``clamp_len``, ``same_length``: the lengths
    to read with (None: the model's own; they are restored afterwards). ``first_len`` is the first
    segment's length; the last ``attn_last`` segments also return their attention (and the score
    terms with ``terms``). Ids taken from a corpus (``corpus.valid[None]``, a view of it) of another
    unit or vocabulary than the model's are a ValueError naming both (``provenance.check_vocab``).

    The inputs are checked once, when it is called: a bad one is a ValueError there, before any segment
    is read (``model(...)`` would check every segment's ids again, and on a GPU each check waits for the
    queued work); the segments run ``model.segment``.

    Yields:
        ``(start, output)`` for each segment ``tokens[:, start:start + tgt_len]``, ``output`` its
        ``TXLOutput`` (its ``mems`` are what the next segment reads).

    Examples:
        >>> model = load_pretrained("txl-tiny")
        >>> ids = as_ids(encode("the king of the north and the queen of the south " * 2))[None]   # (1, 98)
        >>> [(start, out.nll.shape[1]) for start, out in read_segments(model, ids[:, :-1], ids[:, 1:], tgt_len=32)]
        [(0, 32), (32, 32), (64, 32), (96, 1)]
        >>> *_, (start, last) = read_segments(model, ids[:, :96], tgt_len=32, mem_len=64, attn_last=1)
        >>> start, last.attn[0].shape                         # (B, n_head, T, M + T): 64 remembered
        (64, torch.Size([1, 4, 32, 96]))
    """
    for ids in (tokens, targets):  # ids of a corpus of another vocabulary than the model's: said
        provenance.check_vocab(model_vocab(model), ids, "read_segments")
    return _read(model, None, tokens, targets, tgt_len, mem_len, clamp_len, same_length, first_len, attn_last, terms)


def _read(model: TransformerXL, run, tokens, targets, tgt_len, mem_len, clamp_len, same_length,
          first_len=None, attn_last=0, terms=False, caller: str = "read_segments") -> Iterator[tuple[int, TXLOutput]]:
    """``read_segments``, each segment run by ``run`` (a compiled ``model.segment``; None: itself);
    ``caller`` names the function in messages. Every argument is checked here, when it is called (a
    bad one is a ValueError at the call, not at the first segment read); the reading is the iterator."""
    device = next(model.parameters()).device
    tokens = validation.token_tensor(tokens, "read_segments' tokens", device)  # a list of rows: a tensor
    if tokens.dim() != 2:
        raise ValueError(f"read_segments reads token ids of shape (batch, seq), got {tuple(tokens.shape)}. Fix: one "
                         "stream as one row, tokens[None] (a tensor: torch.as_tensor(ids)[None])")
    first_len, = _check_counts(caller, 1, first_len=first_len)  # 0 would silently mean tgt_len
    attn_last = validation.count(attn_last, "attn_last", caller, 0)
    validation.flag(terms, "terms", caller)
    tokens, targets = validation.check_inputs(model, tokens, None, targets)
    own, lengths = model.cfg.tgt_len, (tgt_len, mem_len, clamp_len, same_length)
    with model.lengths(*lengths):  # a length the model refuses (0, -1, one it would ignore): said now
        check_fits(model, tokens.size(0), max(model.cfg.tgt_len, first_len or 0), model.cfg.mem_len, tokens.size(1),
                   caller, own)
    return _segments(model, run, tokens, targets, lengths, first_len, attn_last, terms, caller, own)


def _segments(model: TransformerXL, run, tokens, targets, lengths, first_len, attn_last, terms, caller,
              own) -> Iterator[tuple[int, TXLOutput]]:
    """The segments of ``_read``'s checked inputs, read one by one with memory at ``lengths``."""
    with model.lengths(*lengths):
        L, M, (B, n) = model.cfg.tgt_len, model.cfg.mem_len, tokens.shape
        starts = [0] + list(range(first_len or L, n, L))
        mems = None
        for k, (s, e) in enumerate(zip(starts, starts[1:] + [n])):
            keep = k >= len(starts) - attn_last
            y = None if targets is None else targets[:, s:e]
            with out_of_memory_said(model, B, e - s, M, caller, own):
                if run is None or keep:  # (the compiled segment returns no attention)
                    out = model.segment(tokens[:, s:e], mems, y, return_attn=keep, return_terms=keep and terms)
                else:
                    out = run(tokens[:, s:e], mems, y)
            mems = out.mems
            yield s, out


_check_counts = validation.counts  # (caller, low, **counts): each an integer >= low, None left as it is


def _check_positive(caller: str, **values: Optional[int]) -> list[Optional[int]]:
    """``_check_counts`` of counts that must be at least 1."""
    return _check_counts(caller, 1, **values)


# -- memory: a segment too large to fit is said before it runs, or when its allocation fails -------------

def _score_bytes(model: TransformerXL, batch: int, qlen: int, klen: int) -> int:
    """Bytes of one layer's attention scores for a segment: batch x n_head x qlen x klen floats (float32:
    the softmax is taken in it). The attention makes a few such tensors: a lower bound on its peak."""
    return batch * model.cfg.n_head * qlen * klen * 4


def device_memory(device: torch.device) -> Optional[int]:
    """Bytes of memory ``device`` has in all (a CPU: the machine's RAM), or None where unknown."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return validation.machine_memory()


def _too_large(batch: int, qlen: int, mem_len: int, caller: str, own: int, need: int, what: str,
               window: bool = False) -> ValueError:
    """The sentence for a segment that does not fit: its lengths, the memory it needs, the length to lower
    (``own``: the model's own tgt_len, named when the segments are longer). ``window``: sliding_window_eval's
    windows of ``qlen`` tokens, ``batch`` at a time, whose only lengths are its context and batch_size (the
    command line's --sliding-window refuses the others)."""
    if window:
        fewer = ", or in Python fewer windows at a time (sliding_window_eval's batch_size)" if batch > 1 else ""
        return ValueError(f"{caller}: windows of {qlen:,} tokens, {batch:,} at a time, need {need / 1e9:,.1f} GB for "
                          f"one layer's attention scores alone (windows x n_head x context x context floats); {what}. "
                          f"Fix: a shorter context (--sliding-window C; the cost grows with its square, and this "
                          f"model's own tgt_len is {own:,}){fewer}")
    own = f" (this model's own is {own:,})" if qlen > own else ""
    return ValueError(f"{caller}: segments of tgt_len={qlen:,} with mem_len={mem_len:,} in {batch:,} column(s) "
                      f"need {need / 1e9:,.1f} GB for one layer's attention scores alone (batch x n_head x tgt_len "
                      f"x (mem_len + tgt_len) floats); {what}. Fix: a smaller tgt_len{own} (the cost grows with "
                      "its square), mem_len or batch_size")


def check_fits(model: TransformerXL, batch: int, qlen: int, mem_len: int, n: int, caller: str, own: int,
               window: bool = False) -> None:
    """ValueError if one segment's attention scores alone exceed all the memory of the model's device:
    refused before it runs (the kernel would kill the process, saying nothing). ``n``: tokens per column;
    ``window``: sliding windows (``_too_large``)."""
    qlen = min(qlen, n)
    need = _score_bytes(model, batch, qlen, min(mem_len + qlen, n))
    have = device_memory(next(model.parameters()).device)
    if have is not None and need > have:
        raise _too_large(batch, qlen, mem_len, caller, own, need, f"this machine has {have / 1e9:,.1f} GB in all",
                         window)


def is_out_of_memory(e: BaseException) -> bool:
    """``e`` is an allocation that failed (torch's CPU allocator, CUDA's, or Python's MemoryError)."""
    oom = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
    return isinstance(e, (MemoryError, oom)) or isinstance(e, RuntimeError) and any(
        words in str(e) for words in ("can't allocate memory", "not enough memory", "out of memory"))


@contextlib.contextmanager
def out_of_memory_said(model: TransformerXL, batch: int, qlen: int, mem_len: int, caller: str, own: int,
                       window: bool = False):
    """An allocation failure inside the block becomes ``_too_large``'s sentence (torch's names a byte
    count inside ``attention_mask`` or a matmul, not the length to lower)."""
    try:
        yield
    except Exception as e:
        if not is_out_of_memory(e):
            raise
        need = _score_bytes(model, batch, qlen, mem_len + qlen)
        raise _too_large(batch, qlen, mem_len, caller, own, need, "the allocation failed", window) from None
