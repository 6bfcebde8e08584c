"""Every public name checks its arguments where it is called, with the package's sentence (issue 48): one
table per kind of argument, each row an entry point, each column a value a student may pass.

  counts     a length or a count (tgt_len, batch_size, n_keep, ...): 0 or -1 below its floor, 2.5, True,
             "3" and (where it is needed) None are a ValueError naming the argument; huge ones a
             sentence where they cannot work (HUGE)
  indices    a layer, head, query or position: -1, one past the last, 2.5 and None name the range
  ids        token ids: floats (0.7 would be read as 0), strings, text, a set, None and another number of
             axes are a ValueError; a list, a tuple and a NumPy array of integers are read
  degenerate the tutorial's helpers on empty, missing or mismatched input: a sentence naming the helper,
             never ZeroDivisionError, IndexError, KeyError, StopIteration, numpy's or torch's words

The checkers' hostile answers are in tests/test_careless_use.py (WRONG_KINDS: every checker, every kind).
"""
from __future__ import annotations

import array
import collections
import re

import matplotlib
import numpy as np
import pytest
import torch

from tiny import TINY
from txl_minimal import (Corpus, LMOrderedIterator, TransformerXL, TXLConfig, as_ids, attention_mask, decode, encode,
                         generate_text, paired_difference, pooled, read_segments, rel_shift, sinusoid_table,
                         sliding_window_eval, update_memory)
from txl_minimal import flops, tasks
from txl_minimal.checkpoint import model_from_checkpoint, official_state_dict, save, save_checkpoint
from txl_minimal.data import encode_symbols, load_text8_mini, word_stats
from txl_minimal.evaluate import evaluate
from txl_minimal.machine import seed_everything
from txl_minimal.stats import block_means
from txl_minimal.train import TrainConfig, lr_at
from txl_minimal.tutorial import ablation, analysis, attention_maps as am, context, own_text, plotting

matplotlib.use("Agg")
IDS = torch.randint(0, 27, (120,), generator=torch.Generator().manual_seed(0))
STREAM = IDS.numpy().astype(np.uint8)


@pytest.fixture(scope="module")
def m() -> TransformerXL:
    """A tiny float64 model (2 layers, 2 heads, tgt_len 6, mem_len 6) in eval mode."""
    torch.manual_seed(0)
    return TransformerXL(TXLConfig(**TINY)).double().eval()


@pytest.fixture(scope="module")
def seg(m) -> am.SegmentAttention:
    """One segment's attention (2 layers, 2 heads, 4 queries, 8 keys), with its score terms."""
    return am.read_with_memory(m, IDS, tgt_len=4, mem_len=4, terms=True)[-1]


def said(call, *words: str, error: type | tuple = ValueError) -> str:
    """``call()``'s ValueError (or ``error``) message, asserting it names every one of ``words``."""
    with pytest.raises(error) as e:
        result = call()
        if hasattr(result, "__next__"):  # (a generator would check nothing until read)
            next(result)
    message = str(e.value)
    assert all(w in message for w in words), (words, message)
    return message


# -- counts ---------------------------------------------------------------------------------------------
# (entry, argument, floor, None allowed, call(model, segment attention, value))
COUNTS = [
    ("LMOrderedIterator", "batch_size", 1, False, lambda m, s, v: LMOrderedIterator(STREAM, v, 4)),
    ("LMOrderedIterator", "tgt_len", 1, False, lambda m, s, v: LMOrderedIterator(STREAM, 2, v)),
    ("LMOrderedIterator", "tgt_len", 1, False, lambda m, s, v: LMOrderedIterator(STREAM, 2, v, evaluation=True)),
    ("LMOrderedIterator", "seed", 0, False, lambda m, s, v: LMOrderedIterator(STREAM, 2, 4, seed=v)),
    ("as_ids", "limit", 0, True, lambda m, s, v: as_ids(STREAM, v)),
    ("generate_text", "n_new", 0, False, lambda m, s, v: generate_text(m, "the ", v)),
    ("read_segments", "first_len", 1, True, lambda m, s, v: read_segments(m, IDS[None], first_len=v)),
    ("read_segments", "attn_last", 0, False, lambda m, s, v: read_segments(m, IDS[None], attn_last=v)),
    ("read_segments", "tgt_len", 1, True, lambda m, s, v: read_segments(m, IDS[None], tgt_len=v)),
    ("read_segments", "mem_len", 0, True, lambda m, s, v: read_segments(m, IDS[None], mem_len=v)),
    ("evaluate", "batch_size", 1, False, lambda m, s, v: evaluate(m, IDS, batch_size=v)),
    ("evaluate", "max_tokens", 1, True, lambda m, s, v: evaluate(m, IDS, max_tokens=v)),
    ("sliding_window_eval", "context", 1, False, lambda m, s, v: sliding_window_eval(m, IDS, v)),
    ("sliding_window_eval", "batch_size", 1, False, lambda m, s, v: sliding_window_eval(m, IDS, 8, batch_size=v)),
    ("attention_mask", "qlen", 1, False, lambda m, s, v: attention_mask(v, 2, False, 2)),
    ("attention_mask", "mlen", 0, False, lambda m, s, v: attention_mask(3, v, False, 2)),
    ("attention_mask", "mem_len", 0, False, lambda m, s, v: attention_mask(3, 2, False, v)),
    ("update_memory", "mem_len", 0, False, lambda m, s, v: update_memory([torch.zeros(1, 3, 4)], None, v)),
    ("paired_difference", "block", 1, False, lambda m, s, v: paired_difference(np.ones(20), np.zeros(20), v)),
    ("block_means", "block", 1, False, lambda m, s, v: block_means(np.ones(20), v)),
    ("position_bias", "max_dist", 0, False, lambda m, s, v: analysis.position_bias(m, 0, v)),
    ("distance_matrix", "qlen", 1, False, lambda m, s, v: analysis.distance_matrix(v, 4)),
    ("segment_band_mask", "seg_len", 1, False, lambda m, s, v: analysis.segment_band_mask(10, v, 4)),
    ("dependency_reach", "seg_len", 1, False, lambda m, s, v: analysis.dependency_reach(10, v, 4, 2)),
    ("dependency_reach", "n_layer", 0, False, lambda m, s, v: analysis.dependency_reach(10, 2, 4, v)),
    ("dependency_reach", "mem_len", 0, False, lambda m, s, v: analysis.dependency_reach(10, 2, v, 2)),
    ("staged_score_terms", "clamp_len", 0, False, lambda m, s, v: analysis.staged_score_terms(
        1, torch.ones(3, 4), torch.ones(3, 4), torch.arange(3), torch.arange(3), torch.ones(2, 4), torch.ones(2, 4),
        torch.ones(2), clamp_len=v)),
    ("scores_to_probs", "d_head", 1, False, lambda m, s, v: analysis.scores_to_probs({"a": torch.ones(2, 2)}, v)),
    ("band_forward", "seg_len", 1, False, lambda m, s, v: analysis.band_forward(m, torch.ones(1, 8, 16).double(), v)),
    ("segment_position_nll", "tgt_len", 1, True, lambda m, s, v: analysis.segment_position_nll(m, IDS, tgt_len=v)),
    ("throughput", "repeats", 1, False, lambda m, s, v: analysis.throughput({"a": (lambda: 0, 1)}, v)),
    ("bpc_vs_memory", "mem_lens", 0, False, lambda m, s, v: analysis.bpc_vs_memory(m, IDS, [v])),
    ("read_with_memory", "tgt_len", 1, False, lambda m, s, v: am.read_with_memory(m, IDS, tgt_len=v, mem_len=4)),
    ("read_with_memory", "mem_len", 0, False, lambda m, s, v: am.read_with_memory(m, IDS, tgt_len=4, mem_len=v)),
    ("read_with_memory", "n_keep", 1, False, lambda m, s, v: am.read_with_memory(m, IDS, 4, 4, n_keep=v)),
    ("attention_mass_beyond", "min_dist", 0, False, lambda m, s, v: am.attention_mass_beyond(torch.ones(2, 4), v)),
    ("mean_by_token", "n_tokens", 1, False, lambda m, s, v: am.mean_by_token(torch.ones(4), IDS[:4] % 2, v)),
    ("farthest_heads", "k", 1, False, lambda m, s, v: am.farthest_heads(torch.rand(2, 2), v)),
    ("context_snippet", "width", 0, False, lambda m, s, v: am.context_snippet(IDS, 5, v)),
    ("top_keys", "k", 1, False, lambda m, s, v: am.top_keys(s, 0, 0, 0, v)),
    ("target_positions", "n_targets", 1, False, lambda m, s, v: context.target_positions(100, v, 5)),
    ("context_nll", "context", 1, False, lambda m, s, v: context.context_nll(m, IDS, [50], v)),
    ("context_nll", "batch_size", 1, False, lambda m, s, v: context.context_nll(m, IDS, [50], 8, batch_size=v)),
    ("loss_vs_context", "contexts", 1, False, lambda m, s, v: context.loss_vs_context(m, IDS, [v], [50])),
    ("plot_heatmaps", "ncols", 1, True, lambda m, s, v: plotting.plot_heatmaps({"x": torch.rand(3, 3)}, "t", ncols=v)),
    ("sns_heatmap", "xticks", 1, False, lambda m, s, v: plotting.sns_heatmap(plotting.plt.subplots()[1],
                                                                           torch.rand(3, 3), "t", xticks=v)),
    ("plot_rel_shift", "qlen", 1, False, lambda m, s, v: plotting.plot_rel_shift(v)),
    ("plot_recurrence", "seg_len", 1, False, lambda m, s, v: plotting.plot_recurrence(v, 2, 2)),
    ("plot_recurrence", "n_layer", 1, False, lambda m, s, v: plotting.plot_recurrence(3, 2, v)),
    ("plot_query_attention", "window", 1, False, lambda m, s, v: plotting.plot_query_attention(
        am.query_breakdown(s, 0, 0, 0), list("abcdefgh"), "t", window=v)),
    ("later_half_bpc", "tgt_len", 2, False, lambda m, s, v: ablation.later_half_bpc(m, IDS, v)),
    ("later_half_bpc", "batch_size", 1, False, lambda m, s, v: ablation.later_half_bpc(m, IDS, 8, v)),
    ("ablation.train_config", "steps", 1, False, lambda m, s, v: ablation.train_config(v, "runs/x")),
    ("run_name", "mem_len", 0, False, lambda m, s, v: own_text.run_name("code", v)),
    # what else the notebooks call
    ("RecallTask", "n_keys", 1, False, lambda m, s, v: tasks.RecallTask(n_keys=v)),  # 0 keys: filler alone
    ("recall_stream", "n_tokens", 1, False, lambda m, s, v: tasks.recall_stream(v)),
    ("recall_stream", "seed", 0, False, lambda m, s, v: tasks.recall_stream(100, seed=v)),
    ("recall_accuracy", "edges", 1, False, lambda m, s, v: tasks.recall_accuracy([True], [1], [v])),
    ("lr_at", "step", 0, False, lambda m, s, v: lr_at(v, TrainConfig(warmup_steps=0))),  # step 0: was 0 / 0
    ("attention_flops_per_token", "tgt_len", 1, False, lambda m, s, v: flops.attention_flops_per_token(2, 2, 8, v, 4)),
    ("pair_flops", "d_head", 1, False, lambda m, s, v: flops.pair_flops(v)),
    ("train_step_flops", "batch", 1, False, lambda m, s, v: flops.train_step_flops(TXLConfig(**TINY), v)),
    ("softmax_flops", "n_token", 1, False, lambda m, s, v: flops.softmax_flops(v, 16)),
    ("seed_everything", "seed", 0, False, lambda m, s, v: _kept_rng(seed_everything, v)),
    ("seed_everything", "threads", 1, True, lambda m, s, v: _kept_rng(seed_everything, 0, v)),
]


def _kept_rng(fn, *args):
    """``fn(*args)`` with torch's, NumPy's and Python's random state and torch's threads as they were after."""
    import random
    states, threads = (np.random.get_state(), random.getstate()), torch.get_num_threads()
    try:
        with torch.random.fork_rng(devices=[]):
            return fn(*args)
    finally:
        np.random.set_state(states[0])
        random.setstate(states[1])
        torch.set_num_threads(threads)
def _bad_counts(floor: int, none_allowed: bool) -> dict:
    """The values below or beside a count's floor, by what they are."""
    bad = {"below": floor - 1, "-1": -1, "2.5": 2.5, "True": True, "'3'": "3", "np.float64(3.0)": np.float64(3.0)}
    return bad if none_allowed else {**bad, "None": None}


@pytest.mark.parametrize("entry, name, floor, none_allowed, call", COUNTS,
                         ids=[f"{e}-{n}" for e, n, *_ in COUNTS])
def test_every_count_is_an_integer_at_its_floor_or_a_sentence_naming_it(m, seg, entry, name, floor, none_allowed,
                                                                        call):
    for what, value in _bad_counts(floor, none_allowed).items():
        message = said(lambda value=value: call(m, seg, value), name)
        if entry != "generate_text":  # (its n_new is model.generate's, whose sentence names n_new alone)
            assert entry.split(".")[-1] in message or "TXLConfig" in message, (what, message)
    call(m, seg, np.int64(max(floor, 2)))  # a NumPy integer is an integer
    plotting.plt.close("all")


# -- huge: refused in a sentence where it cannot work (or made to work), never a hang or an allocator's words ----
HUGE = [
    (lambda m: LMOrderedIterator(STREAM, 2, 10 ** 12), "yield no batch"),  # was: zero batches, silently
    (lambda m: attention_mask(10 ** 12, 2, False, 2), "GB, more than this machine's"),
    (lambda m: analysis.distance_matrix(10 ** 6, 10 ** 6), "GB, more than this machine's"),
    (lambda m: analysis.dependency_reach(10 ** 7, 2, 4, 2), "GB, more than this machine's"),
    (lambda m: m.generate(IDS[:3], 10 ** 13), "GB, more than this machine's"),  # was: generating for ever
    (lambda m: plotting.plot_recurrence(10 ** 6, 2, 2), "too many to see"),
    (lambda m: analysis.position_bias(m, 0, 10 ** 12), "GB, more than this machine's"),
]


@pytest.mark.parametrize("call, words", HUGE, ids=range(len(HUGE)))
def test_a_huge_count_that_cannot_work_is_said_before_it_is_tried(m, call, words):
    said(lambda: call(m), words, "Fix")


def test_a_huge_count_that_can_work_works():
    assert torch.equal(analysis.dependency_reach(12, 2, 2, 10 ** 12), analysis.dependency_reach(12, 2, 2, 12))  # hung
    it = LMOrderedIterator(STREAM, 2, 10 ** 12, evaluation=True)  # evaluation keeps the short last segment
    assert len(it) == 1 and next(iter(it))[0].shape == (2, 59)


# -- indices ----------------------------------------------------------------------------------------------
# (entry, argument, how many there are, call(model, seg, value))
INDICES = [
    ("head_weights", "layer", 2, lambda m, s, v: analysis.head_weights(m, v, 0)),
    ("head_weights", "head", 2, lambda m, s, v: analysis.head_weights(m, 0, v)),  # -1 gave empty rows
    ("position_bias", "layer", 2, lambda m, s, v: analysis.position_bias(m, v, 8)),
    ("attention_on_repeat", "layer", 2, lambda m, s, v: analysis.attention_on_repeat(m, IDS[None, :6], v)),
    ("input_influence", "position", 12, lambda m, s, v: analysis.input_influence(m, IDS[None, :12], v, 4)),
    ("influence_span", "position", 10, lambda m, s, v: analysis.influence_span(torch.ones(10), v)),
    ("top_keys", "layer", 2, lambda m, s, v: am.top_keys(s, v, 0, 0)),
    ("top_keys", "head", 2, lambda m, s, v: am.top_keys(s, 0, v, 0)),
    ("top_keys", "query", 4, lambda m, s, v: am.top_keys(s, 0, 0, v)),
    ("query_breakdown", "layer", 2, lambda m, s, v: am.query_breakdown(s, v, 0, 0)),
    ("query_breakdown", "head", 2, lambda m, s, v: am.query_breakdown(s, 0, v, 0)),
    ("context_snippet", "pos", 120, lambda m, s, v: am.context_snippet(IDS, v)),
    ("best_key_window", "queries", 4, lambda m, s, v: am.best_key_window(s.attn[0, 0], [v], 2)),
    ("relative_gain", "long", 3, lambda m, s, v: context.relative_gain({"a": np.ones((3, 4))}, 0, v)),
    ("plot_dependency", "position", 8, lambda m, s, v: plotting.plot_dependency({1: torch.ones(8)}, v, 4, {1: 2})),
]


@pytest.mark.parametrize("entry, name, n, call", INDICES, ids=[f"{e}-{n}" for e, n, *_ in INDICES])
def test_every_index_names_its_range(m, seg, entry, name, n, call):
    for value in (-1, n, 10 ** 12, 2.5, None, True):
        message = said(lambda value=value: call(m, seg, value), name)
        assert f"{n - 1}" in message, (value, message)  # the last index it may be
    call(m, seg, n - 1)  # the last one is one
    plotting.plt.close("all")


# -- token ids ----------------------------------------------------------------------------------------
BAD_IDS = {"floats": [0.7, 4.99] * 30, "NumPy floats": np.array([0.7, 4.99] * 30), "a float tensor":
           torch.tensor([0.7, 4.99] * 30), "strings": ["a", "b"] * 30, "text": "the king", "a set": {1, 2, 3},
           "None": None, "bools": torch.ones(60, dtype=torch.bool)}
GOOD_IDS = {"a list": IDS.tolist(), "a tuple": tuple(IDS.tolist()), "NumPy uint8": STREAM,
            "NumPy uint16": STREAM.astype(np.uint16), "an int32 tensor": IDS.int(),
            "a deque": collections.deque(IDS.tolist()), "an array.array": array.array("q", IDS.tolist())}
# (entry, call(model, ids)) over a 1-D stream of ids
STREAMS = [
    ("LMOrderedIterator", lambda m, ids: LMOrderedIterator(ids, 2, 4)),
    ("as_ids", lambda m, ids: as_ids(ids)),
    ("Corpus", lambda m, ids: Corpus("mine", ids, STREAM, STREAM)),
    ("decode", lambda m, ids: decode(ids)),
    ("evaluate", lambda m, ids: evaluate(m, ids)),
    ("sliding_window_eval", lambda m, ids: sliding_window_eval(m, ids, 8)),
    ("read_with_memory", lambda m, ids: am.read_with_memory(m, ids, 4, 4)),
    ("context_snippet", lambda m, ids: am.context_snippet(ids, 3)),
    ("char_labels", lambda m, ids: am.char_labels(ids)),
    ("context_nll", lambda m, ids: context.context_nll(m, ids, [50], 8)),
    ("segment_position_nll", lambda m, ids: analysis.segment_position_nll(m, ids)),
    ("later_half_bpc", lambda m, ids: ablation.later_half_bpc(m, ids, 8)),
]


@pytest.mark.parametrize("entry, call", STREAMS, ids=[e for e, _ in STREAMS])
def test_ids_of_another_kind_are_a_sentence_and_integer_ids_in_any_container_are_read(m, entry, call):
    for kind, bad in BAD_IDS.items():
        message = said(lambda bad=bad: call(m, bad))  # 0.7 was read as 0 by LMOrderedIterator and Corpus
        assert re.search(r"integers|not text|token ids|no order|encode", message), (kind, message)
        assert "numpy.str_" not in message and "can't convert" not in message, (kind, message)
    if entry not in ("decode", "char_labels", "context_snippet", "as_ids", "context_nll"):  # (they read rows as one
        # stream: their docstrings say so)
        said(lambda: call(m, IDS.view(2, 60)), "1-D")
    for good in GOOD_IDS.values():
        call(m, good)


def test_a_range_of_ids_is_read_in_order():  # notebook 05 labels every character with char_labels(range(27))
    assert am.char_labels(range(27)) == am.char_labels(list(range(27)))
    assert as_ids(range(3)).tolist() == [0, 1, 2] and decode(range(1, 4)) == "abc"


def test_float_ids_are_refused_saying_how_they_would_be_read():
    said(lambda: LMOrderedIterator([0.7, 4.99] * 20, 2, 4), "LMOrderedIterator's token ids must be integers",
         "0.7 would be read as 0")
    said(lambda: Corpus("mine", np.array([4.99, 1.0] * 20), STREAM, STREAM), "Corpus 'mine''s train split",
         "4.99 would be read as 4")
    said(lambda: LMOrderedIterator(["a", "b"] * 20, 2, 4), "strings", "text must be encoded first")  # was numpy.str_
    said(lambda: Corpus("mine", STREAM, STREAM.reshape(2, -1), STREAM), "valid split must be one stream")


# (entry, call(model, ids)) over rows of ids (batch, seq)
ROWS = [
    ("read_segments", lambda m, ids: read_segments(m, ids)),
    ("model", lambda m, ids: m(ids)),
    ("token_embeddings", lambda m, ids: analysis.token_embeddings(m, ids)),
    ("attention_on_repeat", lambda m, ids: analysis.attention_on_repeat(m, ids)),
    ("input_influence", lambda m, ids: analysis.input_influence(m, ids, 3, 4)),
]


@pytest.mark.parametrize("entry, call", ROWS, ids=[e for e, _ in ROWS])
def test_rows_of_ids_of_another_kind_are_a_sentence(m, entry, call):
    for bad in {**BAD_IDS, "1-D": IDS[:8], "floats in rows": [[0.7, 1.5] * 4]}.values():
        said(lambda bad=bad: call(m, bad))
    call(m, IDS[None, :8].tolist())


def test_read_segments_checks_its_arguments_when_it_is_called(m):
    """A generator checked nothing until read: targets longer than its tokens were accepted by the call."""
    for bad in (dict(targets=IDS[None, :80]), dict(tgt_len=0), dict(first_len=0), dict(attn_last=-1),
                dict(targets=IDS[None, :50].float())):
        with pytest.raises(ValueError):
            read_segments(m, IDS[None, :50], **bad)  # not iterated: the call itself says it
    assert [s for s, _ in read_segments(m, IDS[None, :50], IDS[None, 1:51], tgt_len=20)] == [0, 20, 40]


# -- degenerate input to the tutorial's helpers (and the model's building blocks) --------------------------
DEGENERATE = [
    # the cases
    (lambda m, s, ru: am.read_with_memory(m, IDS, tgt_len=0, mem_len=4), "read_with_memory: tgt_len"),  # ZeroDivision
    (lambda m, s, ru: am.attention_by_distance(torch.empty(0)), "attention_by_distance: attn"),
    (lambda m, s, ru: analysis.dependency_reach(10, 0, 4, 2), "dependency_reach: seg_len"),  # torch's ZeroDivision
    (lambda m, s, ru: analysis.position_bias(m, 99, 8), "position_bias: layer"),  # IndexError
    (lambda m, s, ru: analysis.head_weights(m, 0, 99), "head_weights: head"),  # IndexError
    (lambda m, s, ru: context.loss_vs_context(m, IDS, [], [100]), "loss_vs_context: contexts is empty"),
    (lambda m, s, ru: context.loss_vs_context(m, IDS, [8], [500]), "targets must lie in"),
    (lambda m, s, ru: ablation.read_log(ru), "is not a training log"),  # float()'s words
    (lambda m, s, ru: ablation.results_table({}), "results_table: results has no 'runs'"),  # KeyError
    (lambda m, s, ru: plotting.plot_heatmaps({}, "t"), "plot_heatmaps: mats is empty"),  # ZeroDivisionError
    (lambda m, s, ru: plotting.plot_attention_by_distance({}), "plot_attention_by_distance: profiles is empty"),
    (lambda m, s, ru: plotting.plot_by_token({}, [], "y", "t"), "plot_by_token: values is empty"),  # ZeroDivision
    (lambda m, s, ru: plotting.plot_sinusoids(torch.empty(0, 0)), "plot_sinusoids: R must be"),  # math domain error
    # their siblings
    (lambda m, s, ru: am.attention_by_distance(s.attn, torch.ones(4, 8, dtype=torch.bool)), "hides every key"),
    (lambda m, s, ru: am.attention_by_distance(s.attn, torch.ones(3, 3, dtype=torch.bool)), "mask must be a bool"),
    (lambda m, s, ru: am.query_distance([[1.0], [0.0]]), "must be probabilities"),  # klen 1 < qlen 2
    (lambda m, s, ru: am.memory_share(None), "memory_share: attn must be numbers"),
    (lambda m, s, ru: am.row_overlap(torch.ones(3)), "row_overlap: attn"),
    (lambda m, s, ru: am.mean_by_token(torch.ones(4), IDS[:4] + 30, 27), "must lie in [0, 27)"),  # IndexError
    (lambda m, s, ru: am.attention_by_token_pair(s.attn[0, :1], s.query_ids[None], s.key_ids[None, :3], 27), "agree"),
    (lambda m, s, ru: am.term_attention_by_distance({}, 4), "terms has no 'a'"),  # KeyError
    (lambda m, s, ru: am.profile_entropy(torch.ones(1)), "profile of one distance"),
    (lambda m, s, ru: am.log_correlation(torch.ones(3), torch.ones(4)), "one shape"),
    (lambda m, s, ru: am.best_key_window(s.attn[0, 0], [], 2), "select none"),
    (lambda m, s, ru: am.query_breakdown(s.attn, 0, 0, 0), "seg must be a SegmentAttention"),  # AttributeError
    (lambda m, s, ru: analysis.diagonal_spread(torch.ones(3)), "diagonal_spread: m must be numbers"),
    (lambda m, s, ru: analysis.column_spread(torch.empty(0, 0)), "column_spread: m"),  # torch's min() words
    (lambda m, s, ru: analysis.scores_to_probs({}, 4), "scores_to_probs: terms is empty"),
    (lambda m, s, ru: analysis.naive_rel_shift(torch.zeros(4, 2)), "klen = mlen + qlen >= qlen"),
    (lambda m, s, ru: analysis.abs_score_terms(*[torch.ones(3, 4)] * 4, torch.ones(2, 8), torch.ones(2, 8)), "width"),
    (lambda m, s, ru: analysis.band_forward(m, IDS[None, :8], 4), "band_forward: embeddings"),  # matmul's words
    (lambda m, s, ru: analysis.throughput({}), "throughput: runs is empty"),
    (lambda m, s, ru: analysis.source_lines(None, ["x"]), "source_lines reads"),
    (lambda m, s, ru: analysis.source_lines(analysis.throughput, "best"), "patterns must be a list"),  # matched chars
    (lambda m, s, ru: analysis.segment_position_nll(m, IDS[:5]), "needs more than tgt_len"),
    (lambda m, s, ru: context.extend_fixed_window(None, [1], [1, 2]), "rows for 1 contexts"),
    (lambda m, s, ru: context.doubling_gains([1.0]), "2 or more contexts"),
    (lambda m, s, ru: context.relative_gain({"a": np.ones((3, 4)), "b": np.ones((3, 2))}, 0, 1), "losses['b']"),
    (lambda m, s, ru: context.effective_context_length([1, 2], [2.0, 1.0], None), "threshold must be a finite"),
    (lambda m, s, ru: context.relative_effective_context_length({}, [1, 2]), "losses is empty"),
    (lambda m, s, ru: context.context_nll(m, IDS, [50.5], 8), "targets (positions in data) must be integers"),
    (lambda m, s, ru: plotting.plot_score_terms({}, "t"), "plot_score_terms: terms is empty"),
    (lambda m, s, ru: plotting.plot_heatmaps({"x": torch.ones(3)}, "t"), "mats['x'] must be numbers of shape"),
    (lambda m, s, ru: plotting.plot_position_bias(torch.ones(3), 1), "plot_position_bias: bias"),
    (lambda m, s, ru: plotting.plot_dependency({}, 3, 4, {}), "plot_dependency: influence is empty"),  # IndexError
    (lambda m, s, ru: plotting.plot_dependency({1: torch.ones(8)}, 3, 4, {}), "spans has no 1"),  # KeyError
    (lambda m, s, ru: plotting.plot_bpc_vs_memory([0, 4], [1.0], 4, "t"), "one bpc per memory length"),
    (lambda m, s, ru: plotting.plot_recall_by_gap({"a": {"x": 0.5}}, 0.1, {}, "t"), "buckets 'lo-hi'"),  # IndexError
    (lambda m, s, ru: plotting.plot_attention_by_distance({"x": torch.ones(2, 3)}), "(n_layer, n_head, D)"),
    (lambda m, s, ru: plotting.plot_head_attention(s.attn[0, 0], [], s.mlen, "t", slice(0, 2), slice(0, 4)),
     "needs 8 key_labels"),
    (lambda m, s, ru: plotting.plot_head_attention(s.attn[0, 0], list("abcdefgh"), s.mlen, "t", 3, slice(0, 4)),
     "queries must be a slice"),  # AttributeError
    (lambda m, s, ru: plotting.plot_token_pairs({}, [], "t"), "plot_token_pairs: mats is empty"),  # ZeroDivisionError
    (lambda m, s, ru: plotting.plot_query_attention({}, [], "t"), "parts has no 'p'"),  # KeyError
    (lambda m, s, ru: plotting.readability_problems(plotting.plt.subplots()[1]), "fig must be a matplotlib Figure"),
    (lambda m, s, ru: ablation.read_log(ru.parent), "is a folder"),  # IsADirectoryError
    (lambda m, s, ru: ablation.load_results(ru.parent), "is a folder"),
    (lambda m, s, ru: ablation.results_table(ablation.load_results(), group="nope"), "group must be one of"),
    (lambda m, s, ru: ablation.results_table({"runs": {"x": {}}}), "has no 'label'"),  # KeyError
    (lambda m, s, ru: ablation.model_config("rel_mem"), "variant must be a Variant"),  # AttributeError
    (lambda m, s, ru: ablation.contexts({}), "contexts is built from a TXLConfig"),
    (lambda m, s, ru: ablation.variants("a"), "span_loss_coeff must be a number"),
    (lambda m, s, ru: own_text.memory_savings({}), "runs has no 'code-m0'"),  # KeyError
    (lambda m, s, ru: own_text.memory_savings(own_text.load_results()["runs"], 99), "runs has no 'code-m99'"),
    (lambda m, s, ru: own_text.load_results(ru), "is damaged"),  # the JSON decoder's words
    (lambda m, s, ru: own_text.read_code_test(ru.parent), "code-test.txt.gz is missing"),
    (lambda m, s, ru: own_text.run_name("cobol", 64), "corpus must be one of"),
    (lambda m, s, ru: block_means(None, 4), "block_means: values must be per-token values"),  # IndexError
    (lambda m, s, ru: paired_difference("abc", "xyz", 1), "paired_difference: a must be per-token values"),
    (lambda m, s, ru: pooled(None), "pooled takes a list of units"),
    (lambda m, s, ru: rel_shift([[1, 2]]), "rel_shift: x must be a tensor"),  # AttributeError
    (lambda m, s, ru: sinusoid_table([0.0, 1.0], torch.ones(2)), "sinusoid_table: pos_seq must be a 1-D tensor"),
    (lambda m, s, ru: update_memory(None, None, 2), "update_memory: hids must be a list"),
    (lambda m, s, ru: update_memory([torch.zeros(1, 3, 4)], [torch.zeros(2, 3, 5)], 2), "mems must match hids"),
    (lambda m, s, ru: TransformerXL(dict(TINY)), "TransformerXL is built from a TXLConfig, got a dict"),
    (lambda m, s, ru: save(None, "x.pt"), "save: model must be a TransformerXL"),
    (lambda m, s, ru: save(m, None), "must be a path"),
    (lambda m, s, ru: official_state_dict(torch.nn.Linear(2, 2)), "official_state_dict: model must be"),
    (lambda m, s, ru: model_from_checkpoint({}), "ckpt has no 'model'"),  # KeyError
    (lambda m, s, ru: save_checkpoint(None, "x.pt"), "state must be a dict"),
    (lambda m, s, ru: encode(["a"]), "encode reads text"),
    (lambda m, s, ru: encode_symbols(None, "abc"), "encode_symbols reads text"),  # AttributeError
    (lambda m, s, ru: word_stats(load_text8_mini()), "word_stats reads a word corpus"),  # characters
    (lambda m, s, ru: tasks.RecallTask(p_set=-1.0), "p_set must be a probability"),  # a stream of filler alone
    (lambda m, s, ru: tasks.recall_accuracy([True] * 3, [1, 2], [4]), "one entry per answer"),  # IndexError
    (lambda m, s, ru: tasks.recall_accuracy([True], [1], None), "edges is None"),
    (lambda m, s, ru: tasks.recall_accuracy([True], [1], [8, 4]), "edges must increase"),
    (lambda m, s, ru: tasks.load_recall_model(None), "must be a path"),
    (lambda m, s, ru: lr_at(3, {}), "lr_at: cfg must be a TrainConfig"),  # AttributeError
]
@pytest.fixture(scope="module")
def ru(tmp_path_factory):
    """A Russian text file: no training log, no JSON."""
    path = tmp_path_factory.mktemp("ru") / "ru.txt"
    path.write_text("привет мир\nещё строка\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("call, words", DEGENERATE, ids=[w[:40] for _, w in DEGENERATE])
def test_degenerate_input_gets_a_sentence_naming_the_helper(m, seg, ru, tmp_path, monkeypatch, call, words):
    monkeypatch.chdir(tmp_path)  # (nothing is written: a refused save would have written here)
    message = said(lambda: call(m, seg, ru), words, error=(ValueError, FileNotFoundError))  # (a file missing)
    for raw in ("ZeroDivisionError", "math domain error", "not enough values to unpack", "could not convert",
                "Expected reduction dim", "mat1 and mat2", "out of range", "object has no attribute"):
        assert raw not in message, message
    plotting.plt.close("all")


def test_plot_by_token_draws_bars_that_are_all_nan_as_an_empty_frame():
    fig = plotting.plot_by_token({"a": torch.full((3,), float("nan"))}, list("abc"), "y", "t")  # NaN axis limits
    assert fig.axes[0].get_ylim() == (0.0, 1.3)
    plotting.plt.close("all")


def test_txl_threads_replaces_the_threads_a_notebook_asks_for(monkeypatch):
    """The notebooks call seed_everything(0, threads=2); make test runs them two at a time with TXL_THREADS=1."""
    monkeypatch.setenv("TXL_THREADS", "1")
    assert _kept_rng(lambda: (seed_everything(0, threads=2), torch.get_num_threads())[1]) == 1
    monkeypatch.setenv("TXL_THREADS", "two")
    said(lambda: _kept_rng(seed_everything, 0, 2), "$TXL_THREADS", "positive integer", "unset it")
    monkeypatch.delenv("TXL_THREADS")
    assert _kept_rng(lambda: (seed_everything(0, threads=1), torch.get_num_threads())[1]) == 1
