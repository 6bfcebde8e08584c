"""The notebooks' helpers, not the library.

Figures (plotting), attention maps, analyses and context measurements, the ablation's
definition, and the exercises' checkers with their worked answers: code that the
notebooks in notebooks/ import, tested like the rest. The library itself (the model,
data, training, evaluation, checkpoints) is ``txl_minimal``, and none of it imports
anything from here.

    from txl_minimal.tutorial import analysis, exercises, plotting
"""
