"""Notebook 00's checkers (build Transformer-XL yourself): the mask, the rel-shift, the clamped distances,
and a whole relative-attention layer against ``model.RelMultiHeadAttn`` on the same weights."""
from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Optional
from collections.abc import Callable, Sequence

import torch

from txl_minimal.model import attention_mask, rel_shift
from txl_minimal.tutorial.exercises.checking import (_check, _same, _tiny, _verdict, _visible, case_seed,
                                                     checker, seed_cpu)


@checker
def check_mask(answer: Optional[Callable], *, settings: Sequence[tuple] = (
        (4, 0, 4, False), (4, 3, 3, False), (3, 5, 5, True), (5, 5, 3, True), (2, 6, 0, True)),
        seed: Optional[int] = None, tol: Optional[float] = None, raises: Optional[bool] = None) -> Optional[bool]:
    """Check a mask with ``same_length`` (notebook 00, exercise 1) against ``model.attention_mask``.

    ``answer(qlen, mlen, mem_len, same_length)`` -> bool (qlen, mlen + qlen), True where query i (key
    mlen + i) must not see key j. ``settings``: the (qlen, mlen, mem_len, same_length) tried, in order;
    ``seed``, ``tol``, ``raises``: as in ``grading`` (here nothing is drawn at random, and bools
    are compared exactly).

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_mask
        >>> check_mask(lambda qlen, mlen, mem_len, same_length: None)           # the untouched cell
        not attempted yet: write your answer in the cell above, then run this cell again
        >>> from txl_minimal.tutorial import solutions
        >>> check_mask(solutions.mask, settings=[(2, 3, 3, True), (6, 2, 4, True)])
        check_mask: right
        True
    """
    return _check("check_mask", answer, [
        ((q, m, M, s), attention_mask(q, m, s, M), f"qlen={q}, mlen={m}, mem_len={M}, same_length={s}")
        for q, m, M, s in settings], tol=tol, raises=raises)


@checker
def check_rel_shift(answer: Optional[Callable], *, settings: Sequence[tuple] = ((1, 0), (4, 0), (3, 2), (5, 7)),
                    seed: Optional[int] = None, tol: Optional[float] = None,
                    raises: Optional[bool] = None) -> Optional[bool]:
    """Check a rel-shift: scores against R_{klen-1} .. R_0 turned into scores against R_{mlen+i-j}.

    ``answer(x)``: x (2, qlen, klen), row i query i's scores against the distances klen - 1 .. 0
    (the README's B~) -> (2, qlen, klen), entry (i, j) the score of distance mlen + i - j; only the
    entries a query may see (j <= mlen + i) are compared. ``settings``: the (qlen, mlen) tried;
    ``seed``: which random scores (0: the notebooks'); ``tol``, ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_rel_shift
        >>> from txl_minimal.tutorial import solutions
        >>> check_rel_shift(solutions.rel_shift_by_padding, seed=7)              # other scores than the notebooks'
        check_rel_shift: right
        True
        >>> check_rel_shift(lambda x: x, raises=True)                            # no shift at all
        Traceback (most recent call last):
        AssertionError: check_rel_shift: not yet: qlen=4, mlen=0: 12 of 32 values differ; the first at index ...
    """
    seed_cpu(case_seed(seed, 0))
    cases = []
    for qlen, mlen in settings:
        klen = qlen + mlen
        x = torch.randn(2, qlen, klen)
        i, j = torch.arange(qlen)[:, None], torch.arange(klen)[None, :]
        want = x[:, i, (klen - 1 - (mlen + i - j)).clamp(0, klen - 1)]  # column of distance mlen + i - j
        cases.append(((x.clone(),), want, f"qlen={qlen}, mlen={mlen}", _visible(j <= mlen + i)))
    return _check("check_rel_shift", answer, cases, tol=tol, raises=raises)


@checker
def check_rel_shift_prediction(prediction, *, raises: Optional[bool] = None) -> Optional[bool]:
    """Check a prediction of all nine entries of ``rel_shift(x)`` for x = [[1, 2, 3], [4, 5, 6], [7, 8, 9]].

    ``prediction``: a 3 x 3 nested list, array or tensor (or a function of no arguments returning it):
    qlen = klen = 3, no memory, the entries the mask hides included (what the pad and the two reshapes
    leave there); compared exactly with ``model.rel_shift``. ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the first entry that differs) or None (not attempted), said in one printed
        line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_rel_shift_prediction
        >>> check_rel_shift_prediction(None)                            # the untouched cell
        not attempted yet: write your answer in the cell above, then run this cell again
        >>> check_rel_shift_prediction([[1, 2], [3, 4]], raises=True)  # a grader: a wrong answer fails
        Traceback (most recent call last):
        AssertionError: check_rel_shift_prediction: not yet: ...: shape (2, 2), expected (3, 3)...
    """
    x = torch.arange(1.0, 10.0).view(3, 3)
    where = ("x = [[1, 2, 3], [4, 5, 6], [7, 8, 9]] (entries j > i are hidden by the mask but written all the same;"
             " pad a zero column first: [0 1 2 3], [0 4 5 6], [0 7 8 9]; read those 12 numbers as four rows of three"
             " and drop the first row)")
    return _check("check_rel_shift_prediction", prediction, [((), rel_shift(x).long(), where)], raises=raises)


@checker
def check_relative_encoding(answer: Optional[Callable], *, settings: Sequence[tuple] = (
        (5, 0, 8), (6, 3, 8), (10, 4, 16), (3, 10, 4), (7, 1, 6)), seed: Optional[int] = None,
        tol: Optional[float] = None, raises: Optional[bool] = None) -> Optional[bool]:
    """Check the clamped table of relative encodings (notebook 00, exercise 3) against the model's.

    ``answer(klen, clamp_len, d_model)`` -> (klen, d_model): R_{klen-1} .. R_0 with every distance
    above ``clamp_len`` capped at it (0: no cap); compared with ``TransformerXL.relative_encoding``.
    ``settings``: the (klen, clamp_len, d_model) tried (d_model even); ``seed``, ``tol``, ``raises``:
    as in ``grading`` (nothing here is drawn at random).

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_relative_encoding
        >>> from txl_minimal.tutorial import solutions
        >>> check_relative_encoding(solutions.relative_encoding, settings=[(12, 5, 10)])
        check_relative_encoding: right
        True
    """
    cases = []
    for klen, clamp_len, d in settings:
        model = _tiny(d_model=d, d_head=max(1, d // 2), clamp_len=clamp_len)
        cases.append(((klen, clamp_len, d), model.relative_encoding(klen),
                      f"klen={klen}, clamp_len={clamp_len}, d_model={d}"))
    return _check("check_relative_encoding", answer, cases, tol=tol, raises=raises)


# -- a whole relative-attention layer (an assignment: notebook 00, section 4, with pos and mask given) ----------

# Slips a student's layer can make, each as the output it gives, tried in this order; the first that
# explains a wrong output is named (what it is, then what the layer does).
SLIPS = {
    "a": "term (a), q_i^T k_j, is missing: (a) + (c) is (q_i + u)^T k_j",
    "b": "term (b), q_i^T W_k,R R_{i-j}, is missing: (b) + (d) is (q_i + v)^T W_k,R R_{i-j}",
    "c": "term (c), u^T k_j, is missing: the content keys are scored with (q_i + u)",
    "d": "term (d), v^T W_k,R R_{i-j}, is missing: the distances are scored with (q_i + v)",
    "c and d": "terms (c) and (d) are missing: u and v are never added",
    "u for v": "u and v are swapped: u goes with the content keys (c), v with the distances (d)",
    "no shift": "the shift is missing: (b) + (d) against R_{klen-1} .. R_0 must be rel-shifted to R_{i-j}",
    "pos reversed": "the distances are reversed: row 0 of pos is R_{klen-1}, the farthest key's, the last row R_0",
    "pos unclamped": "the distances are not clamped: use the pos given, whose distances above clamp_len are "
                     "R_clamp_len (a table of your own ignores clamp_len)",
    "no mask": "the mask is not applied: a key where mask is True gets no attention",
    "mask without memory": "the mask ignores the memory: query i is key mlen + i and sees every memory key",
    "causal mask": "the mask is not the one given: with same_length=True it also hides the keys mem_len or more "
                   "back (use the mask argument)",
    "no scaling": "the softmax scaling is missing: the score is divided by sqrt(d_head) before the softmax",
    "scaled by d_model": "the scaling uses sqrt(d_model): the score is divided by sqrt(d_head)",
    "softmax over queries": "the softmax runs over the queries: each query's weights sum to 1 over the keys "
                            "(the last axis)",
    "no W_o": "the output projection W_o (att.o_net) is missing",
    "no residual": "the residual is missing: the output is LayerNorm(h + W_o attention)",
    "no LayerNorm": "the LayerNorm is missing: the output is LayerNorm(h + W_o attention)",
    "LayerNorm before residual": "the LayerNorm is applied before the residual: the output is "
                                 "LayerNorm(h + W_o attention), not h + LayerNorm(W_o attention)",
    "memory ignored": "the memory is ignored: keys and values are [SG(mem) o h], the memory first",
    "memory last": "the memory comes after the segment: keys and values are [SG(mem) o h], the memory first",
}


def _layer(att, h: torch.Tensor, mem: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, u: torch.Tensor,
           v: torch.Tensor, slip: str = "",
           plain_pos: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, prob): the layer's output and attention as notebook 00 (section 4) computes them, with one of
    SLIPS made on purpose (``plain_pos``: R without clamp_len, for "pos unclamped")."""
    B, qlen, _ = h.shape
    H, D = att.n_head, att.d_head
    if slip == "memory ignored":
        mem, pos, mask = mem[:, :0], pos[-qlen:], mask[:, -qlen:]
    cat = torch.cat([h, mem] if slip == "memory last" else [mem, h], dim=1)
    x = att.layer_norm(cat) if att.cfg.pre_lnorm else cat
    q, k, val = att.qkv_net(x).chunk(3, dim=-1)
    q = q[:, :qlen] if slip == "memory last" else q[:, -qlen:]  # the segment's rows
    q, k, val = (t.view(B, t.size(1), H, D).transpose(1, 2) for t in (q, k, val))
    R = {"pos reversed": pos.flip(0), "pos unclamped": plain_pos}.get(slip, pos)
    r = att.r_net(R).view(-1, H, D).transpose(0, 1)  # W_k,R R: (H, klen, D)
    uu, vv = (v, u) if slip == "u for v" else (u, v)
    content = (slip != "a") * q + (slip not in ("c", "c and d")) * uu[:, None]  # (a) + (c): (q_i + u)^T k_j
    position = (slip != "b") * q + (slip not in ("d", "c and d")) * vv[:, None]  # (b) + (d), before the shift
    bd = position @ r.transpose(-1, -2)
    score = content @ k.transpose(-1, -2) + (bd if slip == "no shift" else rel_shift(bd))
    score = score / {"no scaling": 1.0, "scaled by d_model": math.sqrt(att.cfg.d_model)}.get(slip, math.sqrt(D))
    klen = k.size(2)
    hidden = {"no mask": torch.zeros_like(mask),
              "mask without memory": torch.ones(qlen, klen, dtype=torch.bool).triu(1),
              "causal mask": attention_mask(qlen, klen - qlen, False, 0)}.get(slip, mask)
    prob = score.masked_fill(hidden, torch.finfo(score.dtype).min).softmax(-2 if slip == "softmax over queries" else -1)
    out = (prob @ val).transpose(1, 2).reshape(B, qlen, H * D)
    out = out if slip == "no W_o" else att.o_net(out)
    if att.cfg.pre_lnorm:
        return (out if slip == "no residual" else h + out), prob
    if slip == "no residual":
        return att.layer_norm(out), prob
    if slip == "no LayerNorm":
        return h + out, prob
    if slip == "LayerNorm before residual":
        return h + att.layer_norm(out), prob
    return att.layer_norm(h + out), prob  # the residual, then the LayerNorm


def _layer_case(seed: int, qlen: int, mlen: int, overrides: dict) -> tuple[tuple, torch.Tensor, torch.Tensor, str]:
    """(the student's arguments, the right output, R without clamp_len, the setting in words) of one case:
    a one-layer model's explicit ``RelMultiHeadAttn`` with every weight drawn at a visible scale."""
    overrides = dict(overrides)
    mem_len = overrides.pop("mem_len", mlen)
    model = _tiny(seed, tgt_len=qlen, mem_len=mem_len, **overrides)
    model.fast_attn = False  # model.py's own attention, not fast.py's subclass
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.5 if p.dim() < 2 else 1 / math.sqrt(p.size(-1)))
    cfg, att, (u, v) = model.cfg, model.layers[0].dec_attn, model.uv(0)
    h, mem = torch.randn(2, qlen, cfg.d_model), torch.randn(2, mlen, cfg.d_model)
    klen = qlen + mlen
    pos, mask = model.relative_encoding(klen), model.mask(qlen, mlen, h.device)
    with torch.no_grad():
        u, v = u.detach().clone(), v.detach().clone()
        want = att(h, mem if mlen else None, pos, mask, u, v)[0]
        if not torch.allclose(_layer(att, h, mem, pos, mask, u, v)[0], want, atol=1e-5):  # the formula IS the layer's
            raise RuntimeError("check_attention_layer: model.RelMultiHeadAttn changed; report this")
    weights = SimpleNamespace(qkv_net=att.qkv_net, r_net=att.r_net, o_net=att.o_net, layer_norm=att.layer_norm,
                              n_head=att.n_head, d_head=att.d_head, cfg=cfg)  # the modules, not the layer's forward
    shown = {k: getattr(cfg, k) for k in ("untie_r", "clamp_len", "same_length", "pre_lnorm") if getattr(cfg, k)}
    where = f"qlen={qlen}, mlen={mlen}" + "".join(f", {k}={v}" for k, v in shown.items()) + \
        (f" (mem_len={mem_len})" if cfg.same_length else "")
    plain = model.pos_emb(torch.arange(klen - 1, -1, -1.0))
    return (weights, h, mem, pos, mask, u, v), want, plain, where


def _output(got):
    """The output of a layer that returns ``out`` or ``(out, prob)`` as ``RelMultiHeadAttn`` does."""
    return got[0] if isinstance(got, (tuple, list)) and len(got) == 2 else got


def _fresh(args: tuple) -> tuple:
    """The arguments again, tensors copied: an answer that writes into its inputs spoils no other call."""
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _slip_named(got, args: tuple, want: torch.Tensor, plain_pos: torch.Tensor, tol: Optional[float]) -> str:
    """The first of SLIPS whose output equals ``got``'s (and differs from the right one); else, when the
    answer returns ``(out, prob)``, whether its attention is right already; else ''."""
    out = _output(got)
    with torch.no_grad():
        for slip, words in SLIPS.items():
            try:
                wrong = _layer(*args, slip=slip, plain_pos=plain_pos)[0]
            except RuntimeError:  # a slip this case's sizes cannot make (no W_o when H * D != d_model)
                continue
            if not _same(wrong, want, tol) and _same(out, wrong, tol):
                return words
        if isinstance(got, (tuple, list)) and len(got) == 2:
            if _same(got[1], _layer(*args)[1], tol):
                return ("its attention probabilities are right, its output is not: the slip is after the softmax "
                        "(the values W_v h~, W_o, the residual or the LayerNorm)")
            return ("its attention probabilities differ already: the slip is in the score (a term, the shift, "
                    "the scaling) or in the mask")
    return ""


@checker
def check_attention_layer(answer: Optional[Callable], *, settings: Sequence[tuple] = (
        (5, 0, {}), (4, 6, {}), (4, 6, {"untie_r": True}), (4, 6, {"clamp_len": 3}), (4, 6, {"same_length": True}),
        (3, 9, {"untie_r": True, "clamp_len": 5, "same_length": True, "mem_len": 6})),
        seed: Optional[int] = None, tol: Optional[float] = None, raises: Optional[bool] = None) -> Optional[bool]:
    """Check a whole relative-attention layer against ``model.RelMultiHeadAttn`` on the same weights.

    ``answer(att, h, mem, pos, mask, u, v)`` -> out (B, qlen, d_model): LayerNorm(h + W_o attention)
    (pre_lnorm: h + W_o attention over LayerNorm'd inputs), with attention over h~ = [SG(mem) o h]
    scored by A^rel = (a) + (b) + (c) + (d) as in notebook 00, section 4 (the README's notation);
    ``(out, prob)`` as ``RelMultiHeadAttn.forward`` returns is read as out. The arguments:

    - ``att``: the layer's modules, not its forward: ``att.qkv_net`` (rows W_q, W_k,E, W_v, no bias),
      ``att.r_net`` (W_k,R), ``att.o_net`` (W_o), ``att.layer_norm``, ``att.n_head``, ``att.d_head``,
      ``att.cfg`` (its TXLConfig: ``pre_lnorm``, ``d_model``);
    - ``h`` (B, qlen, d_model) the segment; ``mem`` (B, mlen, d_model) the memory (mlen = 0: an empty
      tensor, never None); ``pos`` (klen, d_model): R_{klen-1}, ..., R_0, klen = mlen + qlen, distances
      already capped at ``clamp_len``; ``mask`` (qlen, klen) bool, True = hidden (``same_length``
      included); ``u``, ``v`` (n_head, d_head): the biases to use (the layer's own with ``untie_r``).

    Tried without and with memory, with untied biases, ``clamp_len`` and ``same_length``
    (``settings``: (qlen, mlen, TXLConfig fields) triples; a "mem_len" field sets the model's M,
    which ``same_length`` reads; default M = mlen). A wrong output that one slip explains is named:
    a missing term (a), (b), (c) or (d), u and v swapped, no shift, reversed or unclamped distances,
    the mask, the softmax's scaling or axis, W_o, the residual, the LayerNorm, the memory. ``seed``:
    which weights and inputs (0: the default cases); ``tol``, ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the first setting that differs and the slip that explains it) or None (not
        attempted), said in one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError``.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_attention_layer
        >>> from txl_minimal.tutorial import solutions
        >>> check_attention_layer(solutions.attention_layer)
        check_attention_layer: right
        True
        >>> def without_u(att, h, mem, pos, mask, u, v):
        ...     return solutions.attention_layer(att, h, mem, pos, mask, 0 * u, v)
        >>> check_attention_layer(without_u)
        check_attention_layer: not yet: qlen=5, mlen=0: term (c), u^T k_j, is missing: ...
        False
    """
    cases, plain = [], []
    for k, (qlen, mlen, overrides) in enumerate(settings):
        args, want, plain_pos, where = _layer_case(case_seed(seed, k), qlen, mlen, overrides)
        cases.append((args, want, where, _output))
        plain.append(plain_pos)
    if callable(answer):  # the first case the answer gets wrong, and the slip that explains it
        for (args, want, where, _), plain_pos in zip(cases, plain):
            try:
                got = answer(*_fresh(args))
                if got is None or _same(_output(got), want, tol):
                    continue
                named = _slip_named(got, args, want, plain_pos, tol)
            except Exception:  # a bug, text, a set: _check below says what it is
                break
            if named:
                return _verdict(False, f"check_attention_layer: not yet: {where}: {named}.", raises)
            break
    return _check("check_attention_layer", answer, [(_fresh(a), *rest) for a, *rest in cases], tol=tol,
                  raises=raises)
