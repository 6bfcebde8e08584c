"""Checkers for the notebooks' exercises: ``check_*(answer)`` says whether an answer is right.

Each takes the function a student wrote in the exercise cell and tries it on several settings
against the package's own computation; a prediction checker (``check_rel_shift_prediction``,
``check_lr_prediction``, ...) takes the predicted value itself and compares it with what the package
computes. It prints one line and returns True (right), False (wrong: the first setting where it
differs) or None (not attempted yet: the function is missing or still returns None), and raises
nothing, so that a notebook with untouched exercise cells runs from top to bottom. Worked answers:
``solutions.py``.

For a grader (pytest, nbgrader, Otter), ``grading(raises=True)`` or a checker's ``raises=True`` turns a
wrong or missing answer into an ``AssertionError`` with the same line. A course can choose its own
cases: ``settings`` (the sizes tried), ``seed`` (other random draws than the notebooks'; 0: theirs)
and ``tol`` (how far a float may be off) on every checker of a function. A checker leaves the
caller's torch, NumPy and Python random state as it found it.

One module of checkers per notebook, the machinery they share in ``checking.py``:

  build (00), fragmentation (01), relative_attention (02), recurrence (03), training (04),
  memory_attention (05), context_usage (06), ablations (07), adaptive_softmax (08), your_text (09)
"""
from txl_minimal.tutorial.exercises.checking import grading
from txl_minimal.tutorial.exercises.build import (check_attention_layer, check_mask, check_rel_shift,
                                                  check_rel_shift_prediction, check_relative_encoding)
from txl_minimal.tutorial.exercises.fragmentation import check_context_range, check_sliding_cost
from txl_minimal.tutorial.exercises.relative_attention import (check_distinct_position_bias, check_position_bias,
                                                               check_query_position_curve, check_shaw_far_keys,
                                                               check_shaw_score)
from txl_minimal.tutorial.exercises.recurrence import check_memory_shape, check_reach
from txl_minimal.tutorial.exercises.training import check_lr, check_lr_prediction, check_param_count
from txl_minimal.tutorial.exercises.memory_attention import (check_entropy,
                                                             check_entropy_prediction, check_mean_distance,
                                                             check_mean_distance_fix, check_uniform_distance)
from txl_minimal.tutorial.exercises.context_usage import check_paired_gain, check_relative_gain
from txl_minimal.tutorial.exercises.ablations import (check_span_mask, check_span_mask_prediction,
                                                      check_span_memory)
from txl_minimal.tutorial.exercises.adaptive_softmax import check_adaptive_log_prob, check_adaptive_params
from txl_minimal.tutorial.exercises.your_text import check_gain_by_class, check_memory_gain_prediction
# importable here as before the split (not in __all__): the notebooks' words, the predictions' settings
from txl_minimal.tutorial.exercises.checking import NOT_ATTEMPTED  # noqa: F401
from txl_minimal.tutorial.exercises.training import LR_PREDICTION  # noqa: F401
from txl_minimal.tutorial.exercises.memory_attention import ENTROPY_PREDICTION  # noqa: F401
from txl_minimal.tutorial.exercises.ablations import SPAN_PREDICTION  # noqa: F401

__all__ = [
    "grading",
    # 00 · build Transformer-XL yourself
    "check_mask", "check_rel_shift", "check_rel_shift_prediction", "check_relative_encoding", "check_attention_layer",
    # 01 · context fragmentation
    "check_sliding_cost", "check_context_range",
    # 02 · relative attention
    "check_shaw_score", "check_shaw_far_keys", "check_distinct_position_bias", "check_position_bias",
    "check_query_position_curve",
    # 03 · segment-level recurrence
    "check_memory_shape", "check_reach",
    # 04 · training
    "check_lr_prediction", "check_lr", "check_param_count",
    # 05 · attention over memory
    "check_mean_distance", "check_uniform_distance", "check_entropy", "check_mean_distance_fix",
    "check_entropy_prediction",
    # 06 · context usage
    "check_paired_gain", "check_relative_gain",
    # 07 · ablations and adaptive span
    "check_span_mask", "check_span_mask_prediction", "check_span_memory",
    # 08 · words and the adaptive softmax
    "check_adaptive_log_prob", "check_adaptive_params",
    # 09 · your own text
    "check_memory_gain_prediction", "check_gain_by_class",
]
