"""Every exercise's worked answer passes its checker; wrong and missing answers do not."""
from __future__ import annotations

import pytest
import torch

from txl_minimal import exercises, solutions
from txl_minimal.model import rel_shift

CHECKS = [(exercises.check_mask, solutions.mask), (exercises.check_rel_shift, solutions.rel_shift),
          (exercises.check_rel_shift, solutions.rel_shift_by_padding), (exercises.check_reach, solutions.reach),
          (exercises.check_sliding_cost, solutions.sliding_cost),
          (exercises.check_context_range, solutions.context_range),
          (exercises.check_shaw_score, solutions.shaw_score),
          (exercises.check_position_bias, solutions.position_bias),
          (exercises.check_memory_shape, solutions.memory_shape)]

WRONG = [
    (exercises.check_mask, lambda q, m, M, s: solutions.mask(q, m, M, False)),  # same_length ignored
    (exercises.check_mask, lambda q, m, M, s: solutions.mask(q, m, M, s).int()),  # not a bool mask
    (exercises.check_mask, lambda q, m, M, s: ~solutions.mask(q, m, M, s)),  # True = visible
    (exercises.check_rel_shift, lambda x: x),  # no shift at all
    (exercises.check_rel_shift, lambda x: x.flip(-1)),  # distances reversed, not shifted
    (exercises.check_rel_shift, lambda x: rel_shift(x)[..., :-1]),  # wrong shape
    (exercises.check_reach, lambda n, L, M, i: n * M + i),  # right only when M is a multiple of L
    (exercises.check_reach, lambda n, L, M, i: n * L),
    (exercises.check_reach, lambda n, L, M, i: 1 / 0),  # a bug in the answer
    (exercises.check_sliding_cost, lambda n, c: n * c),  # forgets that the first window scores all its positions
    (exercises.check_sliding_cost, lambda n, c: n),
    (exercises.check_context_range, lambda L, M: (M, M + L)),  # off by one: a query sees itself
    (exercises.check_context_range, lambda L, M: (1, L)),  # the memory forgotten
    (exercises.check_shaw_score, lambda q, t, k: solutions.shaw_score(q, t, k).flip(-1)),
    (exercises.check_shaw_score, lambda q, t, k: q @ t[:k].T if t.size(0) >= k else q @ t.T),  # no shift
    (exercises.check_position_bias, lambda m, l, d: solutions.position_bias(m, l, d).flip(-1)),  # R_d .. R_0
    (exercises.check_position_bias, lambda m, l, d: solutions.position_bias(m, 0, d)),  # always layer 0
    (exercises.check_memory_shape, lambda B, L, M, d, n: (B, M, d)),  # full from the first segment on
    (exercises.check_memory_shape, lambda B, L, M, d, n: (B, n * L, d)),  # never trimmed
]


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
    assert checkers == {c for c, _ in CHECKS} == {c for c, _ in WRONG}


def test_rel_shift_solution_agrees_with_the_model_on_visible_entries():
    x = torch.randn(3, 2, 5, 9)
    visible = torch.arange(9)[None, :] <= torch.arange(5)[:, None] + 4
    assert torch.equal(solutions.rel_shift(x)[..., visible], rel_shift(x)[..., visible])
