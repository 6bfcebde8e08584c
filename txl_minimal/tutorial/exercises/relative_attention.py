"""Notebook 02's checkers (relative attention): Shaw et al.'s score, how many keys share a (b), the values
of (d), the position bias of every head, and one query's (b) + (d) curve."""
from __future__ import annotations

from typing import Optional
from collections.abc import Callable, Sequence

import torch

from txl_minimal.model import TXLConfig, attention_mask
from txl_minimal.tutorial.analysis import capture_layer_inputs, position_bias
from txl_minimal.tutorial.exercises.checking import (_check, _same, _tiny, _verdict, _visible, case_seed, checker,
                                                     seed_cpu)
from txl_minimal.variants import ShawAttn


@checker
def check_shaw_score(answer: Optional[Callable], *, settings: Sequence[tuple] = ((3, 0, 8), (4, 3, 2), (5, 6, 4)),
                     seed: Optional[int] = None, tol: Optional[float] = None,
                     raises: Optional[bool] = None) -> Optional[bool]:
    """Check Shaw et al.'s positional score q_i . R^_{min(d, D)}, R^ the learned table (notebook 02, exercise 1).

    ``answer(q, table, klen)``: q (B, H, qlen, d_head), table (D + 1, d_head) -> (B, H, qlen, klen), the
    score of distance d = klen - qlen + i - j at every visible (i, j); compared with
    ``variants.ShawAttn.positional_score`` where visible. ``settings``: the (qlen, mlen, D) tried;
    ``seed``: which queries and table (0: the notebooks'); ``tol``, ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_shaw_score
        >>> from txl_minimal.tutorial import solutions
        >>> check_shaw_score(solutions.shaw_score, settings=[(6, 4, 3)], seed=5)
        check_shaw_score: right
        True
    """
    seed_cpu(case_seed(seed, 1))
    cases = []
    for qlen, mlen, max_dist in settings:
        cfg = TXLConfig(n_layer=1, n_head=2, d_model=16, d_head=8, attn_type="shaw", shaw_max_dist=max_dist)
        att = ShawAttn(cfg)
        with torch.no_grad():
            att.r_emb.normal_()
            q, klen = torch.randn(2, 2, qlen, 8), qlen + mlen
            want = att.positional_score(q, torch.zeros(klen, 16), None)
        cases.append(((q, att.r_emb.detach().clone(), klen), want, f"qlen={qlen}, mlen={mlen}, max_dist={max_dist}",
                      _visible(~attention_mask(qlen, mlen, False, mlen))))
    return _check("check_shaw_score", answer, cases, tol=tol, raises=raises)


@checker
def check_shaw_far_keys(prediction, *, raises: Optional[bool] = None) -> Optional[bool]:
    """Check a prediction: how many keys of the last query share the oldest key's (b) under Shaw's clipping.

    ``prediction``: with Shaw et al.'s table clipped at D = 32, how many of the 256 keys of the last
    query (qlen = 128 after 128 memory positions) get exactly the same (b) as the oldest key, that key
    included? Counted on ``variants.ShawAttn.positional_score`` with a random table. ``raises``: as in
    ``grading``.

    Returns:
        True (right), False (wrong: what it is, and the count) or None (not attempted), said in one printed
        line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_shaw_far_keys
        >>> check_shaw_far_keys(None, raises=True)                     # a grader: not attempted is a failure
        Traceback (most recent call last):
        AssertionError: check_shaw_far_keys: not attempted yet: the answer is None or returns None
    """
    seed_cpu(2)  # the question's table: a count that holds for any random table
    cfg = TXLConfig(n_layer=1, n_head=1, d_model=8, d_head=8, attn_type="shaw", shaw_max_dist=32)
    att = ShawAttn(cfg)
    with torch.no_grad():
        att.r_emb.normal_()
        row = att.positional_score(torch.randn(1, 1, 128, 8), torch.zeros(256, 8), None)[0, 0, -1]
    where = ("D = 32, the last of 128 queries, 128 memory + 128 segment keys (distances 0 to 255; every distance "
             "from D on reads the table's last row)")
    return _check("check_shaw_far_keys", prediction, [((), int((row == row[0]).sum()), where)], raises=raises)


@checker
def check_distinct_position_bias(prediction, *, raises: Optional[bool] = None) -> Optional[bool]:
    """Check a prediction: how many different values term (d) of one head takes over what a segment sees.

    ``prediction``: the number of distinct values of (d) over the entries that the 128 queries of a
    segment see after a memory of 128 (section 3's matrix of notebook 02); counted on a small model's
    ``out.terms`` with v drawn at random. ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: what it is, and the count) or None (not attempted), said in one printed
        line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_distinct_position_bias
        >>> check_distinct_position_bias(None)
        not attempted yet: write your answer in the cell above, then run this cell again
    """
    model = _tiny(3, tgt_len=128, mem_len=128)  # the question's model: one value per distance, whatever v
    with torch.no_grad():
        model.r_r_bias.normal_()
        tokens = torch.randint(0, 27, (1, 256))
        d = model(tokens[:, 128:], model(tokens[:, :128]).mems, return_terms=True).terms[0]["d"][0, 0]
    seen = ~torch.isnan(d)
    where = ("128 queries, 128 memory + 128 segment keys, one head ((d) = v^T W_k,R R_{i-j} depends on the distance "
             "i - j alone: count the distances the queries see)")
    return _check("check_distinct_position_bias", prediction, [((), int(torch.unique(d[seen]).numel()), where)],
                  raises=raises)


@checker
def check_position_bias(answer: Optional[Callable], *, settings: Sequence[tuple] = ((0, 10), (1, 40)),
                        seed: Optional[int] = None, tol: Optional[float] = None,
                        raises: Optional[bool] = None) -> Optional[bool]:
    """Check term (d) of every head at every distance, v^T W_k,R R_k, against ``analysis.position_bias``.

    ``answer(model, layer, max_dist)`` -> (n_head, max_dist + 1): (d) at k = 0 .. max_dist for
    ``model.layers[layer]`` (a two-layer model with v drawn at random). ``settings``: the (layer,
    max_dist) tried; ``seed``: which model (0: the notebooks'); ``tol``, ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the first setting that differs, and how) or None (not attempted), said in
        one printed line; with ``raises``, a wrong or missing answer raises ``AssertionError`` with it instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_position_bias
        >>> from txl_minimal.tutorial import solutions
        >>> check_position_bias(solutions.position_bias)
        check_position_bias: right
        True
    """
    cases = []
    for k, (layer, max_dist) in enumerate(settings):
        model = _tiny(case_seed(seed, k), n_layer=2)
        with torch.no_grad():
            model.r_r_bias.normal_()
            want = position_bias(model, layer, max_dist)
        cases.append(((model, layer, max_dist), want, f"layer={layer}, max_dist={max_dist}"))
    return _check("check_position_bias", answer, cases, tol=tol, raises=raises)


_UV_HINT = ("If it reads v from an r_r_bias: model.r_r_bias is None with untie_r=True (each layer has its own u, v), "
           "and a layer's dec_attn holds none without it; model.uv(layer) returns (u, v) in both cases")


@checker
def check_query_position_curve(answer: Optional[Callable], *, settings: Sequence[tuple] = (
        (0, False, 0, 0), (1, False, 5, 0), (1, True, 3, 20)), seed: Optional[int] = None, tol: Optional[float] = None,
        raises: Optional[bool] = None) -> Optional[bool]:
    """Check one query's (b) + (d) = (q + v)^T W_k,R R_k at every distance k (notebook 02, exercise 2).

    ``answer(model, layer, h, max_dist)`` -> (n_head, max_dist + 1): the curve at k = 0 .. max_dist for
    the query q = W_q h of one input row h (d_model,) of ``model.layers[layer]``. Compared with the
    model's own (b) + (d) (``out.terms``) at the distances its query sees, and with W_k,R R_k read
    off ``r_net`` beyond them. A curve that one misreading explains ((d) or (b) alone, u for v, the
    distances reversed) is named, and so is an answer that fails on ``model.r_r_bias`` (None with
    ``untie_r``: ``model.uv``). ``settings``: (layer, untie_r, query i, distances beyond the keys)
    tried on a two-layer model; ``seed``: which model and text (0: the notebooks'); ``tol``,
    ``raises``: as in ``grading``.

    Returns:
        True (right), False (wrong: the first setting that differs, and the misreading) or None (not
        attempted), said in one printed line; with ``raises``, a wrong or missing answer raises instead.

    Examples:
        >>> from txl_minimal.tutorial.exercises import check_query_position_curve
        >>> from txl_minimal.tutorial import solutions
        >>> check_query_position_curve(solutions.query_position_curve)
        check_query_position_curve: right
        True
    """
    cases, misread = [], []
    for k, (layer, untie, i, extra) in enumerate(settings):
        model = _tiny(case_seed(seed, k), n_layer=2, untie_r=untie)
        with torch.no_grad():
            for p in model.parameters():  # u, v and the rest away from their initial values (v starts at 0)
                p.add_(0.1 * torch.randn_like(p))
            tokens = torch.randint(0, 27, (1, 16))
            mems = model(tokens[:, :8]).mems
            with capture_layer_inputs(model) as inputs:
                terms = model(tokens[:, 8:], mems, return_terms=True).terms[layer]
            h, mlen = inputs[layer][0, i], mems[layer].size(1)
            max_dist = mlen + i + extra
            att, (u, v) = model.layers[layer].dec_attn, model.uv(layer)
            r = att.r_net(model.pos_emb(torch.arange(max_dist + 1.0))).view(max_dist + 1, att.n_head, att.d_head)
            q = att.qkv_net(h).chunk(3)[0].view(att.n_head, att.d_head)
            want = torch.einsum("hd,khd->hk", q + v, r)
            seen = (terms["b"] + terms["d"])[0, :, i, : mlen + i + 1].flip(-1)  # distances 0 .. mlen + i
            if not torch.allclose(want[:, : mlen + i + 1], seen, atol=1e-5):  # the formula IS the model's
                raise RuntimeError("check_query_position_curve: the model's (b) + (d) changed; report this")
            misread.append([(torch.einsum("hd,khd->hk", v, r), "(d) alone: (b) adds the query's own q, W_q h"),
                            (torch.einsum("hd,khd->hk", q, r), "(b) alone: (d) adds v"),
                            (torch.einsum("hd,khd->hk", q + u, r), "u in place of v: u goes with the content keys"),
                            (want.flip(-1), "the distances reversed: entry k is distance k, R_0 first")])
        where = f"layer={layer}, query {i} after {mlen} memory positions, max_dist={max_dist}" + \
            (", untie_r=True" if untie else "")
        cases.append(((model, layer, h.clone(), max_dist), want, where))
    if callable(answer):
        for (args, want, where), known in zip(cases, misread):
            try:
                got = answer(*args)
            except (TypeError, AttributeError) as e:  # v read where this model keeps none: name model.uv
                said = str(e)
                if not ("r_r_bias" in said or "r_w_bias" in said or ("NoneType" in said and args[0].cfg.untie_r)):
                    break
                return _verdict(False, f"check_query_position_curve: not yet: {where} raised {type(e).__name__}: "
                                       f"{said}. {_UV_HINT}", raises)
            except Exception:  # _check below reports it
                break
            try:
                if got is None or _same(got, want, tol):
                    continue
                named = [why for value, why in known if _same(got, value, tol)]
            except Exception:  # noqa: BLE001 (text, a set, an unreadable object: _check below says what it is)
                break
            if named:
                return _verdict(False, f"check_query_position_curve: not yet: {where}: {named[0]}.", raises)
            break
    return _check("check_query_position_curve", answer, cases, tol=tol, raises=raises)
