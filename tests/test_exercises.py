"""Every exercise's worked answer passes its checker; wrong and missing answers do not."""
from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from txl_minimal.model import rel_shift
from txl_minimal.tutorial import exercises, solutions
from txl_minimal.tutorial.exercises import build, memory_attention

CHECKS = [(exercises.check_mask, solutions.mask), (exercises.check_rel_shift, solutions.rel_shift),
          (exercises.check_attention_layer, solutions.attention_layer),
          (exercises.check_rel_shift, solutions.rel_shift_by_padding), (exercises.check_reach, solutions.reach),
          (exercises.check_relative_encoding, solutions.relative_encoding),
          (exercises.check_sliding_cost, solutions.sliding_cost),
          (exercises.check_context_range, solutions.context_range),
          (exercises.check_rel_shift_prediction, solutions.rel_shift_prediction),
          (exercises.check_shaw_score, solutions.shaw_score),
          (exercises.check_shaw_far_keys, solutions.shaw_far_keys),
          (exercises.check_distinct_position_bias, solutions.distinct_position_bias),
          (exercises.check_position_bias, solutions.position_bias),
          (exercises.check_query_position_curve, solutions.query_position_curve),
          (exercises.check_memory_shape, solutions.memory_shape),
          (exercises.check_lr, solutions.lr), (exercises.check_param_count, solutions.param_count),
          (exercises.check_mean_distance, solutions.mean_distance), (exercises.check_entropy, solutions.entropy),
          (exercises.check_mean_distance_fix, solutions.mean_distance),
          (exercises.check_paired_gain, solutions.paired_gain),
          (exercises.check_relative_gain, solutions.relative_gain),
          (exercises.check_span_mask, solutions.span_mask), (exercises.check_span_memory, solutions.span_memory),
          (exercises.check_adaptive_log_prob, solutions.adaptive_log_prob),
          (exercises.check_adaptive_params, solutions.adaptive_params),
          (exercises.check_gain_by_class, solutions.gain_by_class)]

WRONG = [
    (exercises.check_mask, lambda q, m, M, s: solutions.mask(q, m, M, False)),  # same_length ignored
    (exercises.check_mask, lambda q, m, M, s: solutions.mask(q, m, M, s).int()),  # not a bool mask
    (exercises.check_mask, lambda q, m, M, s: ~solutions.mask(q, m, M, s)),  # True = visible
    (exercises.check_rel_shift, lambda x: x),  # no shift at all
    (exercises.check_rel_shift, lambda x: x.flip(-1)),  # distances reversed, not shifted
    (exercises.check_rel_shift, lambda x: rel_shift(x)[..., :-1]),  # wrong shape
    (exercises.check_attention_layer, lambda att, h, mem, pos, mask, u, v: solutions.attention_layer(
        att, h, mem, pos, mask, 0 * u, v)),  # (c) forgotten
    (exercises.check_attention_layer, lambda att, h, mem, pos, mask, u, v: solutions.attention_layer(
        att, h, mem, solutions.relative_encoding(pos.size(0), 0, pos.size(1)), mask, u, v)),  # its own R: no clamp
    (exercises.check_attention_layer, lambda att, h, mem, pos, mask, u, v: h),  # no attention at all
    (exercises.check_rel_shift_prediction, [[3, 0, 0], [5, 6, 0], [7, 8, 9]]),  # leftovers taken for zeros
    (exercises.check_rel_shift_prediction, [[3, 2, 1], [6, 5, 4], [9, 8, 7]]),  # rows reversed, not shifted
    (exercises.check_rel_shift_prediction, [[3], [5, 6], [7, 8, 9]]),  # the visible entries alone
    (exercises.check_reach, lambda n, L, M, i: n * M + i),  # right only when M is a multiple of L
    (exercises.check_reach, lambda n, L, M, i: n * L),
    (exercises.check_reach, lambda n, L, M, i: 1 / 0),  # a bug in the answer
    (exercises.check_relative_encoding, lambda k, c, d: solutions.relative_encoding(k, 0, d)),  # no cap
    (exercises.check_relative_encoding, lambda k, c, d: solutions.relative_encoding(k, c, d).flip(0)),  # R_0 first
    (exercises.check_relative_encoding, lambda k, c, d: solutions.relative_encoding(k, max(c - 1, 0), d)),  # off by one
    (exercises.check_sliding_cost, lambda n, c: n * c),  # forgets that the first window scores all its positions
    (exercises.check_sliding_cost, lambda n, c: n),
    (exercises.check_context_range, lambda L, M: (M, M + L)),  # off by one: a query sees itself
    (exercises.check_context_range, lambda L, M: (1, L)),  # the memory forgotten
    (exercises.check_shaw_score, lambda q, t, k: solutions.shaw_score(q, t, k).flip(-1)),
    (exercises.check_shaw_score, lambda q, t, k: q @ t[:k].T if t.size(0) >= k else q @ t.T),  # no shift
    (exercises.check_shaw_far_keys, 223),  # distance 32 itself forgotten: it reads the last row too
    (exercises.check_shaw_far_keys, 33),  # the table's rows, not the keys
    (exercises.check_shaw_far_keys, 224.5),
    (exercises.check_distinct_position_bias, 128 * 256),  # every entry, as if (d) held content
    (exercises.check_distinct_position_bias, 128),  # the segment's distances only
    (exercises.check_position_bias, lambda m, l, d: solutions.position_bias(m, l, d).flip(-1)),  # R_d .. R_0
    (exercises.check_position_bias, lambda m, l, d: solutions.position_bias(m, 0, d)),  # always layer 0
    (exercises.check_query_position_curve, lambda m, l, h, d: solutions.query_position_curve(m, 0, h, d)),  # layer 0
    (exercises.check_query_position_curve, lambda m, l, h, d: solutions.query_position_curve(m, l, h, d)[:, 1:]),
    (exercises.check_memory_shape, lambda B, L, M, d, n: (B, M, d)),  # full from the first segment on
    (exercises.check_memory_shape, lambda B, L, M, d, n: (B, n * L, d)),  # never trimmed
    (exercises.check_lr, lambda s, lr, w, n, m: lr * min(1.0, s / max(1, w))),  # no decay
    (exercises.check_lr, lambda s, lr, w, n, m: solutions.lr(s, lr, w, n, 0.0)),  # decays to 0, not min_lr
    (exercises.check_param_count, lambda c: solutions.param_count(c) + c.vocab_size * c.d_model),  # untied
    (exercises.check_param_count, lambda c: solutions.param_count(c) + 2 * c.n_layer * c.n_head * c.d_head),
    (exercises.check_mean_distance, lambda a: solutions.mean_distance(a.transpose(-1, -2)[..., :a.size(-2)])),
    (exercises.check_mean_distance, lambda a: (a * torch.arange(a.size(-1))).sum(-1).mean(-1)),  # key index
    (exercises.check_mean_distance_fix, lambda a: (a * torch.arange(a.size(-1))).sum(-1).mean(-1)),  # key index
    (exercises.check_entropy, lambda a: -(a * a.clamp_min(1e-30).log()).sum(-1).mean(-1)),  # not normalised
    (exercises.check_entropy, lambda a: solutions.entropy(a) * 0.5),
    (exercises.check_paired_gain, lambda a, b: (float((a - b).mean()), float((a - b).std(ddof=1)))),  # not / sqrt n
    (exercises.check_paired_gain, lambda a, b: (float((b - a).mean()), 0.1)),
    (exercises.check_relative_gain, lambda L, r: {k: float(v[0].mean() - v[1].mean()) for k, v in L.items()}),
    (exercises.check_relative_gain, lambda L, r: solutions.relative_gain(L, 1.0)),  # r ignored
    (exercises.check_span_mask, lambda d, z, R: (d[None] <= z.view(-1, 1, 1)).float()),  # a hard mask
    (exercises.check_span_mask, lambda d, z, R: solutions.span_mask(d, z, 1)),  # ramp ignored
    (exercises.check_span_memory, lambda s, R, M: M),  # never trimmed
    (exercises.check_span_memory, lambda s, R, M: math.ceil(float(s.max()))),  # ramp forgotten
    (exercises.check_span_memory, lambda s, R, M: min(M, math.ceil(float(s.max()) + R) + 1)),  # two too many
    (exercises.check_span_memory, lambda s, R, M: min(M, math.ceil(float(s.max()) + R) - 2)),  # one too few
    (exercises.check_span_memory, lambda s, R, M: math.ceil(float(s.max()) + R) - 1),  # not capped at M
    (exercises.check_adaptive_log_prob, lambda h, t: solutions.adaptive_log_prob(h, t[::-1])),  # clusters reversed
    (exercises.check_adaptive_log_prob, lambda h, t: torch.cat([h[..., :h.size(-1) - len(t)], *t], -1)),  # no log p_c
    (exercises.check_adaptive_params, lambda V, d, c, k: V * d + V),  # the plain tied softmax
    (exercises.check_adaptive_params, lambda V, d, c, k: solutions.adaptive_params(V, d, c, k) - len(c) * (d + 1)),
    (exercises.check_gain_by_class, lambda t, a, b: solutions.gain_by_class(" " + t[:-1], a, b)),  # the char read
    (exercises.check_gain_by_class, lambda t, a, b: solutions.gain_by_class(t, b, a)),  # the loss, not the gain
    (exercises.check_gain_by_class, lambda t, a, b: dict.fromkeys(("name", "space", "other"), float((a - b).mean()))),
]


# Predict-then-verify: the student writes a number (or a list) before the notebook reveals it.
PREDICTIONS = [(exercises.check_lr_prediction, solutions.LR_PREDICTION),
               (exercises.check_uniform_distance, solutions.UNIFORM_DISTANCE),
               (exercises.check_entropy_prediction, solutions.ENTROPY_PREDICTION),
               (exercises.check_span_mask_prediction, solutions.SPAN_MASK_PREDICTION)]
WRONG_PREDICTIONS = [  # (checker, a wrong prediction, a phrase the message must say or "")
    (exercises.check_lr_prediction, [0.5, 0.5, 0.25], "linear"),  # a linear decay
    (exercises.check_lr_prediction, [0.5, 0.345, 0.095], "counted from step 0"),  # cosine over all S steps
    (exercises.check_lr_prediction, [1.0, 0.5, 0.146], "no warm-up"),
    (exercises.check_lr_prediction, [0.5, 0.5, 0.5], "0.146447"),
    (exercises.check_uniform_distance, 255.5, "same_length"),  # every query sees M keys
    (exercises.check_uniform_distance, 319.5, "the future is hidden"),  # every query sees all M + L
    (exercises.check_uniform_distance, 288.25, "the query itself"),  # distances from 1
    (exercises.check_uniform_distance, 300, "287.75"),
    (exercises.check_uniform_distance, "far", "write a number"),
    (exercises.check_entropy_prediction, [16 / 512, 0.611], "share of keys"),  # n, not log n
    (exercises.check_entropy_prediction, [0.444, 0.5], "adds log 2"),  # the mean of one key and all keys
    (exercises.check_entropy_prediction, [1, 1], "0.4444"),
    (exercises.check_entropy_prediction, [0.444], "expected 2"),
    (exercises.check_span_mask_prediction, [1, 0, 0, 0], "hard mask"),
    (exercises.check_span_mask_prediction, [0, 0.2, 0.8, 1], "rising"),
    (exercises.check_span_mask_prediction, [1, 0.3, 0, 0], "centred on z"),  # the ramp from z - ρ/2 to z + ρ/2
    (exercises.check_span_mask_prediction, [1, 0.5, 0, 0], "[1.0, 0.8, 0.2, 0.0]"),  # section 4's z = 20, ρ = 16
    (exercises.check_span_mask_prediction, [1, 0.8, 0.2], "expected 4"),
    (exercises.check_memory_gain_prediction, (0.125, solutions.memory_gain_prediction()[1]), "share of the characters"),
    (exercises.check_memory_gain_prediction, (0.7, "neither"), "can be told apart"),  # the direction is judged
    (exercises.check_memory_gain_prediction, (0.7, "text8"), "it is not text8"),
    (exercises.check_memory_gain_prediction, (70, "code"), "as a fraction"),
    (exercises.check_memory_gain_prediction, 0.1, "write (share, more)"),
    (exercises.check_memory_gain_prediction, (0.7, "prose"), "write (share, more)"),
]


@pytest.mark.parametrize("check,right", PREDICTIONS, ids=lambda f: getattr(f, "__name__", "value"))
def test_right_predictions_pass_in_any_container(check, right, capsys):
    for value in (right, np.asarray(right), torch.tensor(right), np.round(np.asarray(right), 1)):
        assert check(value.tolist() if isinstance(value, np.ndarray) and value.ndim else value) is True
    assert check(None) is None and check(...) is None  # the untouched cell
    assert "right" in capsys.readouterr().out


@pytest.mark.parametrize("check,wrong,says", WRONG_PREDICTIONS, ids=lambda x: getattr(x, "__name__", str(x)))
def test_wrong_predictions_are_rejected_saying_what_differs(check, wrong, says, capsys):
    assert check(wrong) is False
    out = capsys.readouterr().out
    assert "not yet:" in out and says in out


def test_the_memory_gain_prediction_takes_a_share_and_a_text_in_any_plain_form():
    share, more = solutions.memory_gain_prediction()
    assert more == "code"  # results/memory_by_position.json: past the start code saves more, beyond two SEs
    for right in ((share, more), [round(share, 1), more.upper() + " "], (np.float64(share), more),
                  (torch.tensor(share), more), lambda: (share, more)):
        assert exercises.check_memory_gain_prediction(right) is True
    assert exercises.check_memory_gain_prediction(None) is None
    assert exercises.check_memory_gain_prediction((float("nan"), more)) is False
    assert exercises.check_memory_gain_prediction((10 ** 400, more)) is False  # never raises


def test_a_standard_error_with_either_divisor_passes():
    """NumPy's std divides by n unless told ddof=1; the prose does not say which: both are right."""
    for ddof in (0, 1):
        assert exercises.check_paired_gain(
            lambda a, b, ddof=ddof: (float((a - b).mean()), float((a - b).std(ddof=ddof) / math.sqrt(a.size)))) is True


def test_the_memory_count_of_trim_memory_passes_beside_the_strict_one():
    """Notebook 07 teaches that a layer's memory is trimmed to ceil(max z + R) (what trim_memory keeps,
    one position more than any head weights): that reading is right too, in any container."""
    def kept(s, R, M):
        return min(M, math.ceil(float(s.max()) + R))

    for answer in (kept, lambda s, R, M: float(kept(s, R, M)), lambda s, R, M: torch.tensor(kept(s, R, M))):
        assert exercises.check_span_memory(answer) is True
    assert exercises.check_span_memory(lambda s, R, M: min(M, math.floor(float(s.max()) + R))) is True  # x <= z + R


VALUE_PREDICTIONS = {"check_rel_shift_prediction", "check_shaw_far_keys", "check_distinct_position_bias"}


@pytest.mark.parametrize("check,answer", CHECKS, ids=lambda f: getattr(f, "__name__", "lambda"))
def test_solutions_pass_their_checker(check, answer, capsys):
    assert check(answer) is True
    assert capsys.readouterr().out.strip().endswith("right")


@pytest.mark.parametrize("check,answer", WRONG)
def test_wrong_answers_are_rejected_with_a_reason(check, answer, capsys):
    assert check(answer) is False
    assert "not yet:" in capsys.readouterr().out


@pytest.mark.parametrize("check", sorted({c for c, _ in CHECKS}, key=lambda c: c.__name__))
def test_untouched_exercise_says_not_attempted_and_raises_nothing(check, capsys):
    assert check(None) is None
    assert check(lambda *args: None) is None  # the cell's template returns None
    assert capsys.readouterr().out.count("not attempted yet") == 2


def test_every_checker_has_a_solution_and_a_wrong_answer():
    checkers = {getattr(exercises, n) for n in dir(exercises) if n.startswith("check_")}
    predictions = {c for c, _ in PREDICTIONS} | {exercises.check_memory_gain_prediction}  # (a share and a text)
    assert checkers == {c for c, _ in CHECKS} | predictions == {c for c, _ in WRONG} | predictions
    assert predictions == {c for c, *_ in WRONG_PREDICTIONS}


def test_rel_shift_solution_agrees_with_the_model_on_visible_entries():
    x = torch.randn(3, 2, 5, 9)
    visible = torch.arange(9)[None, :] <= torch.arange(5)[:, None] + 4
    assert torch.equal(solutions.rel_shift(x)[..., visible], rel_shift(x)[..., visible])


def test_check_is_silent_when_a_claim_holds_and_names_it_when_not():
    from txl_minimal.utils import check
    check(1 < 2, "one is less than two")
    with pytest.raises(AssertionError, match="does not hold here: memory helps"):
        check(2.51 > 2.56, "memory helps")


def _as_float64(x):
    """A right answer in another float dtype: float tensors in float64, numbers as NumPy's."""
    if isinstance(x, torch.Tensor):
        return x.detach().double() if x.is_floating_point() else x
    if isinstance(x, (tuple, list)):
        return type(x)(_as_float64(v) for v in x)
    if isinstance(x, dict):
        return {k: _as_float64(v) for k, v in x.items()}
    return np.float64(x) if isinstance(x, (float, int)) and not isinstance(x, bool) else x


def _as_numpy(x):
    """A right answer as NumPy: arrays for tensors, NumPy scalars for numbers, a list for a tuple."""
    if isinstance(x, torch.Tensor):
        return x.detach().numpy()
    if isinstance(x, (tuple, list)):
        return [_as_numpy(v) for v in x]
    if isinstance(x, dict):
        return {k: _as_numpy(v) for k, v in x.items()}
    return np.asarray(x)[()] if isinstance(x, (float, int)) and not isinstance(x, bool) else x


@pytest.mark.parametrize("convert", [_as_float64, _as_numpy])
@pytest.mark.parametrize("check,answer", CHECKS, ids=lambda f: getattr(f, "__name__", "lambda"))
def test_right_answers_in_float64_or_numpy_pass(check, answer, convert, capsys):
    assert check(lambda *args: convert(answer(*args))) is True, capsys.readouterr().out


@pytest.mark.parametrize("check,answer", [(c, a) for c, a in CHECKS if c.__name__ in VALUE_PREDICTIONS],
                         ids=lambda f: getattr(f, "__name__", "value"))
def test_a_prediction_is_accepted_as_a_plain_value(check, answer, capsys):
    # a student types the predicted value itself (a number, a nested list), not a function
    assert check(answer()) is True
    assert check(np.asarray(answer())) is True
    assert check(None) is None
    assert capsys.readouterr().out.count("not attempted yet") == 1


def test_a_wrong_prediction_names_the_first_difference(capsys):
    assert exercises.check_rel_shift_prediction([[3, 0, 0], [5, 6, 0], [7, 8, 9]]) is False
    assert "the first at index (0, 2): 0, expected 4" in capsys.readouterr().out
    assert exercises.check_shaw_far_keys(223) is False
    assert "223 (int), expected 224" in capsys.readouterr().out


def test_a_wrong_prediction_is_told_how_to_get_the_answer(capsys):
    # the prediction checkers of 00 and 02 say how the count or the matrix comes about, not only its value
    assert exercises.check_rel_shift_prediction([[1, 2, 3], [4, 5, 6], [7, 8, 9]]) is False
    assert "pad a zero column first" in capsys.readouterr().out
    assert exercises.check_shaw_far_keys(223) is False
    assert "every distance from D on reads the table's last row" in capsys.readouterr().out
    assert exercises.check_distinct_position_bias(255) is False
    assert "depends on the distance i - j alone" in capsys.readouterr().out


def test_the_span_mask_checker_tries_distances_of_every_shape(capsys):
    # an answer written for 2-d distances only (z broadcast over two axes) is right on (4, 6) but not on a row
    only_2d = lambda d, z, R: ((R + z[:, None, None] - d) / R).clamp(0, 1)  # noqa: E731
    assert exercises.check_span_mask(only_2d) is False
    assert "dist of shape (24,)" in capsys.readouterr().out
    assert exercises.check_span_mask(solutions.span_mask) is True


def test_a_rejection_says_what_differs(capsys):
    # a shape, a dtype and a value: each named in the message
    assert exercises.check_span_mask(lambda d, z, R: solutions.span_mask(d, z, R)[..., :-1]) is False
    assert "shape (1, 4, 5), expected (1, 4, 6)" in capsys.readouterr().out
    assert exercises.check_mask(lambda q, m, M, s: solutions.mask(q, m, M, s).int()) is False
    assert "dtype torch.int32, expected torch.bool" in capsys.readouterr().out
    assert exercises.check_span_mask(lambda d, z, R: solutions.span_mask(d, z, R) + (d == 5)) is False
    out = capsys.readouterr().out
    assert "1 of 24 values differ; the first at index (0, 0, 5)" in out and "expected" in out
    assert exercises.check_reach(lambda n, L, M, i: 5.5) is False  # a float count is not truncated to 5
    assert "5.5 (float), expected" in capsys.readouterr().out


def _code_cells(notebook) -> list[str]:
    from IPython.core.inputtransformer2 import TransformerManager  # cells may hold %magics
    cells = json.loads(notebook.read_text())["cells"]
    return [TransformerManager().transform_cell("".join(c["source"])) for c in cells if c["cell_type"] == "code"]


NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9]*.ipynb"))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_no_exercise_stub_shadows_a_name_the_notebook_uses(notebook):
    """A student fills in an exercise, scrolls back and re-runs a figure: every other cell must
    still see what it saw before, so an exercise cell defines no name that another cell uses."""
    import ast
    cells = _code_cells(notebook)
    stubs = [c for c in cells if "# your code here" in c]
    assert stubs, f"{notebook.name} has no exercise"
    for stub in stubs:
        body = ast.parse(stub).body
        defined = {n.name for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        defined |= {t.id for n in body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        for other in cells:
            if "# your code here" in other:
                continue
            tree = ast.parse(other)
            used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
            used |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            used |= {a.asname or a.name.split(".")[0] for n in ast.walk(tree)
                     if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
            assert not defined & used, (f"{notebook.name}: an exercise defines {sorted(defined & used)}, which "
                                        f"another cell uses: rename the exercise's function (e.g. my_...)")


def test_a_wrong_rel_shift_is_reported_at_its_own_index_and_shape(capsys):
    # one visible entry wrong: the message names its index in the student's (batch, qlen, klen) result
    def off_by_one_entry(x):
        out = solutions.rel_shift(x).clone()
        out[..., -1, 0] += 1.0  # the last query sees every key, the first one too
        return out
    assert exercises.check_rel_shift(off_by_one_entry) is False
    out = capsys.readouterr().out
    assert "values differ; the first at index (0, 0, 0)" in out and "set to 0 in both" in out
    assert "of shape (2, 1, 1)" in out  # qlen=1, mlen=0: the student's shape, not a flattened view


def test_an_answer_torch_cannot_hold_is_rejected_without_a_crash(capsys):
    assert exercises.check_span_mask(lambda d, z, R: np.array([["a"]])) is False
    assert exercises.check_reach(lambda n, L, M, i: "seven") is False
    assert capsys.readouterr().out.count("not yet:") == 2


# -- 04: exercise 2 says what each part holds; a count that misreads one part is told which --------------

def test_param_count_with_nn_linear_biases_is_told_that_the_projections_have_none(capsys):
    """nn.Linear's default adds a bias: a count with one on every attention projection is wrong (the
    model has none), and the message says so instead of only printing two numbers."""
    def with_biases(cfg):
        hd, rel = cfg.n_head * cfg.d_head, cfg.attn_type == "rel"
        return solutions.param_count(cfg) + cfg.n_layer * (3 * hd + cfg.d_model + (hd if rel else 0))
    assert exercises.check_param_count(with_biases) is False
    out = capsys.readouterr().out
    assert "not yet:" in out and "have none" in out and "W_q" in out


@pytest.mark.parametrize("misread,says", [
    (lambda c: solutions.param_count(c) + c.vocab_size * c.d_model, "tied"),
    (lambda c: solutions.param_count(c) + (c.n_layer - 1) * 2 * c.n_head * c.d_head, "one of each"),
    (lambda c: solutions.param_count(c) - 2 * c.n_layer * c.d_model, "gain and a bias")])
def test_param_count_misreadings_are_named(misread, says, capsys):
    assert exercises.check_param_count(misread) is False
    assert says in capsys.readouterr().out


def test_param_count_accepts_the_count_in_any_number_type(capsys):
    for kind in (int, float, np.int64, np.float64, torch.tensor):
        assert exercises.check_param_count(lambda c, kind=kind: kind(solutions.param_count(c))) is True
    assert exercises.check_param_count(lambda c: 1 / 0) is False  # a bug: reported, not a crash
    assert "raised ZeroDivisionError" in capsys.readouterr().out


def test_lr_prediction_is_section_2s_schedule():
    from txl_minimal.train import TrainConfig, lr_at
    w, s, steps = (exercises.LR_PREDICTION[k] for k in ("warmup_steps", "max_steps", "steps"))
    cfg = TrainConfig(lr=1.0, warmup_steps=w, max_steps=s, min_lr=0.0)
    assert np.allclose(solutions.LR_PREDICTION, [lr_at(k, cfg) for k in steps])


# -- issue 41: every checker takes a right answer in any form, and says in words what a wrong one is --------

ALL_PREDICTIONS = PREDICTIONS + [(c, a()) for c, a in CHECKS if c.__name__ in VALUE_PREDICTIONS]
TORCH_WORDS = ("Can't call numpy()", "can't convert np.ndarray", "Cannot copy out of meta", "numpy.object_",
               "NotImplementedError", "Could not infer dtype")


@pytest.mark.parametrize("check,right", ALL_PREDICTIONS, ids=lambda f: getattr(f, "__name__", "value"))
def test_a_prediction_with_a_gradient_or_as_a_function_passes(check, right, capsys):
    with_grad = torch.tensor(right, dtype=torch.float64, requires_grad=True)  # e.g. computed from a model
    assert check(with_grad) is True  # was "Can't call numpy() on Tensor that requires grad"
    assert check([torch.tensor(v, requires_grad=True) for v in np.ravel(right)] if np.ndim(right) == 1 else with_grad)
    assert check(lambda: right) is True  # as every checker takes a function (the number ones refused one)
    assert check(lambda: None) is None and check(lambda: 1 / 0) is False
    assert "raised ZeroDivisionError" in capsys.readouterr().out


@pytest.mark.parametrize("check,right", ALL_PREDICTIONS, ids=lambda f: getattr(f, "__name__", "value"))
def test_a_prediction_of_another_kind_is_told_in_words(check, right, capsys):
    kinds = {"meta": torch.tensor(right, device="meta"), "set": set(np.ravel(right).tolist()),
             "generator": (v for v in np.ravel(right).tolist()), "text": "a lot"}
    said = {"meta": "meta device, which has a shape but no values", "set": "has no order",
            "generator": "used up once read", "text": "a lot"}
    for kind, answer in kinds.items():
        assert check(answer) is False, kind
        out = capsys.readouterr().out
        assert "not yet" in out and said[kind] in out and not any(w in out for w in TORCH_WORDS), (kind, out)


def test_an_int8_prediction_passes(capsys):
    assert exercises.check_rel_shift_prediction(torch.tensor(solutions.rel_shift_prediction(), dtype=torch.int8))
    assert exercises.check_lr_prediction(torch.tensor(solutions.LR_PREDICTION, dtype=torch.float16)) is True


def test_the_number_prediction_messages_read_well(capsys):
    assert exercises.check_lr_prediction("fast") is False
    assert "write a list of 3 numbers, got 'fast'" in capsys.readouterr().out  # was "write a numbers"
    assert exercises.check_uniform_distance([1, 2]) is False
    assert "2 value(s), expected 1" in capsys.readouterr().out


@pytest.mark.parametrize("check,answer", [(exercises.check_mask, solutions.mask),
                                          (exercises.check_span_mask, solutions.span_mask)],
                         ids=lambda f: getattr(f, "__name__", ""))
def test_a_function_checker_reads_results_with_a_gradient_int8_or_on_meta(check, answer, capsys):
    if check is exercises.check_span_mask:  # a float result that still carries its graph
        assert check(lambda *a: answer(*a).requires_grad_()) is True
    else:  # an int8 result: the dtype is named, in words
        assert check(lambda *a: answer(*a).to(torch.int8)) is False
        assert "dtype torch.int8, expected torch.bool" in capsys.readouterr().out
    assert check(lambda *a: answer(*a).to("meta")) is False
    out = capsys.readouterr().out
    assert "meta device, which has a shape but no values" in out and not any(w in out for w in TORCH_WORDS)
    for wrong in ({1, 2}, (i for i in range(2)), "abc"):
        assert check(lambda *a, wrong=wrong: wrong) is False
        out = capsys.readouterr().out
        assert "not yet" in out and not any(w in out for w in TORCH_WORDS), out


# -- 05: exercise 1 (b) is a bug to find; the given function must not pass, nor reveal the fix --------------

def test_the_given_mean_distance_is_right_only_without_memory():
    """The exercise says so: the bug shows only with a memory before the segment."""
    no_memory, memory = memory_attention._attention(0, 4, 4), memory_attention._attention(1, 3, 8)
    assert torch.allclose(memory_attention._given_mean_distance(no_memory), solutions.mean_distance(no_memory))
    assert not torch.allclose(memory_attention._given_mean_distance(memory), solutions.mean_distance(memory))


def test_the_unfixed_mean_distance_is_not_attempted_and_told_so_without_the_answer(capsys):
    """The cell as shipped holds the buggy function: its stored output must not give the fix away."""
    assert exercises.check_mean_distance_fix(memory_attention._given_mean_distance) is None
    out = capsys.readouterr().out
    assert out.startswith("not attempted yet: this is still the function as given")
    assert "expected" not in out and "klen - qlen" not in out
    assert exercises.check_mean_distance_fix(memory_attention._from_last_key) is False
    assert "counted from the last key" in capsys.readouterr().out


def test_entropy_prediction_is_the_helpers_on_the_two_heads():
    assert np.allclose(solutions.ENTROPY_PREDICTION, memory_attention._entropy_prediction(), atol=1e-4)


@pytest.mark.parametrize("misread,says", [
    (lambda m, l, h, d: solutions.position_bias(m, l, d), "(d) alone"),
    (lambda m, l, h, d: solutions.query_position_curve(m, l, h, d) - solutions.position_bias(m, l, d), "(b) alone"),
    (lambda m, l, h, d: solutions.query_position_curve(m, l, h, d).flip(-1), "the distances reversed")])
def test_query_position_curve_misreadings_are_named(misread, says, capsys):
    """02, exercise 2: the curve a query's (b) + (d) draws; a curve that leaves out one of the two terms,
    or runs from the farthest distance, is told which."""
    assert exercises.check_query_position_curve(misread) is False
    assert says in capsys.readouterr().out


def test_query_position_curve_with_u_for_v_is_named(capsys):
    def with_u(model, layer, h, max_dist):
        u, v = model.uv(layer)
        return solutions.query_position_curve(model, layer, h, max_dist) + torch.einsum(
            "hd,khd->hk", u - v, model.layers[layer].dec_attn.r_net(model.pos_emb(torch.arange(max_dist + 1.0)))
            .view(max_dist + 1, model.cfg.n_head, model.cfg.d_head))
    assert exercises.check_query_position_curve(with_u) is False
    assert "u in place of v" in capsys.readouterr().out


@pytest.mark.parametrize("where", ["model", "layer"])
def test_query_position_curve_with_v_from_r_r_bias_names_model_uv(where, capsys):
    """02, exercise 2: v taken from model.r_r_bias (as notebook 00 does) is None for the checker's untie_r
    case, and a layer's dec_attn has no r_r_bias without untie_r: the checker says so and names model.uv."""
    def answer(model, layer, h, max_dist):
        att = model.layers[layer].dec_attn
        v = model.r_r_bias if where == "model" else att.r_r_bias
        q = att.qkv_net(h).chunk(3)[0].view(att.n_head, att.d_head)
        r = att.r_net(model.pos_emb(torch.arange(max_dist + 1.0))).view(max_dist + 1, att.n_head, att.d_head)
        return ((q + v) * r).sum(-1).T

    assert exercises.check_query_position_curve(answer) is False
    out = capsys.readouterr().out
    said = "untie_r=True raised TypeError" if where == "model" else "raised AttributeError"
    assert "model.uv(layer)" in out and said in out
    assert exercises.check_query_position_curve(lambda *args: {}["x"]) is False  # another bug: no model.uv
    assert "model.uv" not in capsys.readouterr().out


def test_the_gain_by_class_checker_names_the_character_read_instead_of_the_one_predicted(capsys):
    """Entry t of a loss array is the loss of predicting text[t + 1]: grouping by text[t] is the likely slip."""
    assert exercises.check_gain_by_class(lambda t, a, b: solutions.gain_by_class(" " + t[:-1], a, b)) is False
    assert "the character the model READ at t" in capsys.readouterr().out


# -- issue 46: a grading kit: raise mode, chosen cases, the caller's random state, a whole attention layer ---------

ALL_CHECKERS = sorted({c for c, _ in CHECKS} | {c for c, _ in PREDICTIONS}, key=lambda c: c.__name__)
FUNCTION_CHECKERS = sorted({c for c, _ in CHECKS if c.__name__ not in VALUE_PREDICTIONS}, key=lambda c: c.__name__)
# the checkers whose cases are drawn at random, and so change with the seed
RANDOM_CASES = {"check_rel_shift", "check_attention_layer", "check_shaw_score", "check_position_bias",
                "check_query_position_curve", "check_mean_distance", "check_entropy", "check_mean_distance_fix",
                "check_paired_gain", "check_relative_gain", "check_adaptive_log_prob", "check_gain_by_class"}


def _printed(check, answer, capsys) -> str:
    check(answer)
    return capsys.readouterr().out.strip()


@pytest.mark.parametrize("check,answer", WRONG + [(c, w) for c, w, _ in WRONG_PREDICTIONS],
                         ids=lambda x: getattr(x, "__name__", "answer"))
def test_in_grading_mode_a_wrong_answer_raises_the_line_a_notebook_prints(check, answer, capsys):
    printed = _printed(check, answer, capsys)
    with pytest.raises(AssertionError) as raised:
        check(answer, raises=True)
    assert str(raised.value).strip() == printed and "not yet:" in printed
    with exercises.grading(raises=True), pytest.raises(AssertionError) as raised:  # the switch, for a whole grader
        check(answer)
    assert str(raised.value).strip() == printed and capsys.readouterr().out == ""  # raised, not printed as well


@pytest.mark.parametrize("check", ALL_CHECKERS, ids=lambda c: c.__name__)
def test_in_grading_mode_not_attempted_is_a_failure_worded_for_a_grader(check, capsys):
    assert check(None) is None and capsys.readouterr().out.strip() == exercises.NOT_ATTEMPTED  # the notebooks' words
    with pytest.raises(AssertionError) as raised:
        check(None, raises=True)
    message = str(raised.value)
    assert message == f"{check.__name__}: not attempted yet: the answer is None or returns None"
    assert "cell" not in message


def test_the_given_mean_distance_in_grading_mode_is_not_attempted_without_the_cell(capsys):
    with pytest.raises(AssertionError, match="check_mean_distance_fix: not attempted yet: this is still the function "
                                             "as given, right without memory and wrong with it: find the bug and fix "
                                             "it$"):
        exercises.check_mean_distance_fix(memory_attention._given_mean_distance, raises=True)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_an_untouched_exercise_prints_what_the_notebook_stored(notebook, capsys):
    """The notebooks' stored outputs (nbval compares them byte for byte) are the checkers' notebook words."""
    compared = 0
    for cell in json.loads(notebook.read_text())["cells"]:
        call = re.fullmatch(r"(?:.*\n)*exercises\.(check_\w+)\((\w+)\)\s*", "".join(cell["source"]))
        if cell["cell_type"] != "code" or not call:
            continue
        stub = memory_attention._given_mean_distance if call[1] == "check_mean_distance_fix" else None
        stored = "".join("".join(o["text"]) for o in cell["outputs"] if o.get("name") == "stdout")
        assert getattr(exercises, call[1])(stub) is None
        assert capsys.readouterr().out == stored, call[1]
        compared += 1
    assert compared, f"{notebook.name}: no exercise cell of the form exercises.check_...(answer)"


def test_grading_holds_for_its_block_or_from_then_on_and_a_checkers_keyword_wins(capsys):
    untouched = lambda qlen, mlen, mem_len, same_length: None  # noqa: E731
    with exercises.grading(raises=True):
        assert exercises.check_mask(solutions.mask) is True  # a right answer passes and says so
        assert "check_mask: right" in capsys.readouterr().out
        assert exercises.check_mask(untouched, raises=False) is None  # the checker's own keyword first
    assert exercises.check_mask(untouched) is None  # the block is over
    exercises.grading(raises=True)  # alone: from then on
    try:
        with pytest.raises(AssertionError):
            exercises.check_mask(untouched)
    finally:
        exercises.grading(raises=False)
    assert exercises.check_mask(untouched) is None
    for bad, says in ((dict(seed=-1), "seed must be an integer >= 0"), (dict(seed=1.5), "seed must be an integer"),
                      (dict(tol=-1.0), "tol must be a number >= 0")):
        with pytest.raises(ValueError, match=says):
            exercises.grading(**bad)
    assert exercises.check_mask(untouched) is None  # a refused setting changed nothing


@pytest.mark.parametrize("check,answer", [(c, a) for c, a in CHECKS if c in FUNCTION_CHECKERS],
                         ids=lambda f: getattr(f, "__name__", "answer"))
def test_a_chosen_seed_draws_other_cases_and_a_right_answer_passes_them(check, answer, capsys):
    """A course hides its grading cases behind a seed of its own; seed 0 is the notebooks' cases."""
    def recorded(seen):
        def run(*args):
            seen.append([a.clone() if isinstance(a, torch.Tensor) else a for a in args])
            return answer(*args)
        return run

    default, hidden, again = [], [], []
    assert check(recorded(default)) is True and check(recorded(again), seed=0) is True
    assert check(recorded(hidden), seed=2024) is True
    with exercises.grading(seed=2024):
        assert check(answer) is True
    same = [len(a) == len(b) and all(_same_input(x, y) for x, y in zip(a, b)) for a, b in zip(default, hidden)]
    assert all(_same_input_list(a, b) for a, b in zip(default, again))  # seed 0 is the default
    assert (not all(same)) == (check.__name__ in RANDOM_CASES), same


def _same_input(x, y) -> bool:
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and x.shape == y.shape and torch.equal(x, y)
    if isinstance(x, np.ndarray):
        return isinstance(y, np.ndarray) and x.shape == y.shape and np.array_equal(x, y)
    if isinstance(x, (list, tuple)):
        return isinstance(y, (list, tuple)) and len(x) == len(y) and all(_same_input(a, b) for a, b in zip(x, y))
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(_same_input(x[k], y[k]) for k in x)
    if isinstance(x, torch.nn.Module) or hasattr(x, "qkv_net"):  # a model or a layer's modules: their weights
        a = x.state_dict() if isinstance(x, torch.nn.Module) else x.qkv_net.state_dict()
        b = y.state_dict() if isinstance(y, torch.nn.Module) else y.qkv_net.state_dict()
        return all(torch.equal(a[k], b[k]) for k in a)
    return x == y


def _same_input_list(a, b) -> bool:
    return len(a) == len(b) and all(_same_input(x, y) for x, y in zip(a, b))


def test_settings_choose_the_cases_a_checker_tries(capsys):
    seen = []
    assert exercises.check_mask(lambda *a: seen.append(a) or solutions.mask(*a), settings=[(2, 1, 1, True)]) is True
    assert seen == [(2, 1, 1, True)]
    assert exercises.check_attention_layer(solutions.attention_layer, settings=[
        (3, 4, {"pre_lnorm": True}), (6, 2, {"n_head": 4, "d_head": 4, "clamp_len": 1})]) is True
    assert exercises.check_lr(solutions.lr, settings=[(3, 2, 5)]) is True
    assert exercises.check_lr(lambda *a: solutions.lr(*a) * 2, settings=[(3, 2, 5)]) is False
    assert "step=3, warmup=2, max_steps=5" in capsys.readouterr().out


def test_tol_sets_how_far_a_float_result_may_be(capsys):
    def off(d, z, R):  # every value 1e-4 too high: more than the default 1e-5
        return solutions.span_mask(d, z, R) + 1e-4
    assert exercises.check_span_mask(off) is False
    assert exercises.check_span_mask(off, tol=1e-3) is True
    with exercises.grading(raises=False, tol=1e-3):
        assert exercises.check_span_mask(off) is True
    assert exercises.check_span_mask(solutions.span_mask, tol=0.0) is True  # exact here
    with exercises.grading(raises=False, tol=1.0):  # a prediction keeps its own tolerance: grading's is for results
        assert exercises.check_lr_prediction([0.9, 0.9, 0.9]) is False
    assert exercises.check_lr_prediction([0.9, 0.9, 0.9], tol=1.0) is True


def _random_state():
    return torch.get_rng_state(), np.random.get_state(), random.getstate()


def _draws(answer):
    """``answer``, drawing from torch's, NumPy's and Python's global generators first (as a student's might)."""
    def run(*args):
        torch.rand(1), np.random.rand(), random.random()
        return answer(*args) if callable(answer) else answer
    return run


@pytest.mark.parametrize("check,answer", CHECKS + PREDICTIONS + [next((c, a) for c, a in WRONG if c is check)
                                                                  for check in FUNCTION_CHECKERS],
                         ids=lambda f: getattr(f, "__name__", "answer"))
def test_a_checker_leaves_the_callers_random_state_as_it_was(check, answer, capsys):
    """A checker draws its cases from seeds of its own (it used to call torch.manual_seed(0) on the caller's
    generator): torch's, NumPy's and Python's global states are as they were, right answer or wrong."""
    torch.manual_seed(123), np.random.seed(123), random.seed(123)
    before = _random_state()
    for given in (answer, _draws(answer), None):
        check(given)
        after = _random_state()
        assert torch.equal(before[0], after[0]), "torch's generator moved"
        (kind, keys, *rest), (kind_after, keys_after, *rest_after) = before[1], after[1]
        assert kind == kind_after and np.array_equal(keys, keys_after) and rest == rest_after, "NumPy's generator moved"
        assert before[2] == after[2], "Python's generator moved"


@pytest.mark.parametrize("slip", list(build.SLIPS))
def test_the_attention_layer_checker_names_the_slip(slip, capsys):
    """A layer with one slip (a term dropped, the shift, the mask, the scaling, W_o, the LayerNorm, the memory)
    is told which; under grading the same sentence is the AssertionError."""
    if slip == "pos unclamped":  # a table of its own, without clamp_len
        def layer(att, h, mem, pos, mask, u, v):
            return solutions.attention_layer(att, h, mem, solutions.relative_encoding(pos.size(0), 0, pos.size(1)),
                                             mask, u, v)
    else:
        def layer(*args):
            return build._layer(*args, slip=slip)[0]
    assert exercises.check_attention_layer(layer) is False
    out = capsys.readouterr().out
    assert out.startswith("check_attention_layer: not yet: ") and build.SLIPS[slip] in out
    with pytest.raises(AssertionError, match=re.escape(build.SLIPS[slip])):
        exercises.check_attention_layer(layer, raises=True, seed=5)


def test_the_attention_layer_checker_takes_out_or_out_and_prob_and_reads_prob(capsys):
    assert exercises.check_attention_layer(lambda *a: build._layer(*a)) is True  # (out, prob), as the module returns
    after_softmax = lambda *a: (build._layer(*a)[0] * 1.5, build._layer(*a)[1])  # noqa: E731
    assert exercises.check_attention_layer(after_softmax) is False
    assert "attention probabilities are right, its output is not" in capsys.readouterr().out
    in_score = lambda *a: (build._layer(*a, slip="no scaling")[0] * 1.5, build._layer(*a, slip="no scaling")[1])  # noqa
    assert exercises.check_attention_layer(in_score) is False
    assert "probabilities differ already: the slip is in the score" in capsys.readouterr().out


def test_the_attention_layer_checker_gives_the_weights_not_the_layers_forward(capsys):
    """Calling the library's layer is no answer: the student gets its modules, and nothing that runs it."""
    assert exercises.check_attention_layer(lambda att, h, mem, pos, mask, u, v: att(h, mem, pos, mask, u, v)) is False
    assert "raised TypeError" in capsys.readouterr().out
    seen = []
    exercises.check_attention_layer(lambda *a: seen.append(a))
    att, h, mem, pos, mask, u, v = seen[0]
    assert not hasattr(att, "forward") and mem.shape == (2, 0, 16) and pos.shape == (5, 16)  # no memory: empty
    assert mask.dtype == torch.bool and u.shape == v.shape == (2, 8)


@pytest.mark.parametrize("settings", [[], [(4, 3)], [4], "qlen=4", [(4, 3, 3, True), (1, 2)]], ids=str)
def test_settings_of_the_wrong_form_are_refused_naming_the_form(settings):
    """A course's typo in its cases is its own error, said before any case runs (a student's answer is no part)."""
    with pytest.raises(ValueError, match=r"check_mask: settings must be a non-empty list of settings like its "
                                         r"default's, e.g. settings=\[\(4, 0, 4, False\)\]"):
        exercises.check_mask(solutions.mask, settings=settings)
    assert exercises.check_param_count(solutions.param_count, settings=[{"n_layer": 1}]) is True  # dicts there
    with pytest.raises(ValueError, match="check_paired_gain: settings must be"):
        exercises.check_paired_gain(solutions.paired_gain, settings=[(50,)])


def test_a_right_answer_in_float32_passes_and_a_wrong_entry_is_named_with_its_digits(capsys):
    def in_float32(text, a, b):  # the gains summed in float32: right to float32's own precision
        gain = torch.tensor(a, dtype=torch.float32) - torch.tensor(b, dtype=torch.float32)
        kinds = np.array(["name" if c.isalnum() or c == "_" else "space" if c.isspace() else "other"
                          for c in text[1:len(gain) + 1]])
        return {k: gain[torch.tensor(kinds == k)].mean() for k in ("name", "space", "other")}
    assert exercises.check_gain_by_class(in_float32) is True  # was refused: tensor(0.0148) against 0.014803...
    as_tensors = lambda t, a, b: {k: torch.tensor(v) for k, v in solutions.gain_by_class(t, a, b).items()}  # noqa
    assert exercises.check_gain_by_class(as_tensors) is True
    capsys.readouterr()
    assert exercises.check_gain_by_class(lambda t, a, b: {k: v * 1.01 for k, v in
                                                          solutions.gain_by_class(t, a, b).items()}) is False
    assert re.search(r"entry 'name': 0\.04\d+, expected 0\.04\d+", capsys.readouterr().out)
