"""The package's import direction: model, data (over the corpus layer, corpora.py, with text8,
word_corpora, enwik8 and text_file on it, and over batching), utils (over the helpers by job: scores,
machine, files, shipped_files, finite, cli, run_lock) at the bottom; checkpoint, then evaluate, then
train above them (over its train_config, presets, devices, the run folder's run_checkpoints,
run_signals, run_log and run_folder, bookkeeping and command_line); pretrained on top, loaded only by
__init__ (lazily). The notebooks' helpers live in txl_minimal.tutorial, above the library (the model,
and evaluate where they score text); no library module imports anything from there."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "txl_minimal"
# module (dotted, inside txl_minimal) -> the package modules it may import (anything not listed is off limits)
ALLOWED = {
    # the library
    # the helpers, by job; utils.py imports each (the names it held before they had modules of their own)
    "scores": set(),  # LN2, bpc or perplexity
    "machine": {"validation"},  # the device, bf16's speed, seeds and threads
    "files": set(),  # atomic writes, WriteError, folder checks, read_json
    "shipped_files": {"files"},  # MANIFEST.json: sizes and SHA-256 of what ships
    "finite": set(),  # where a NaN or inf is
    "cli": set(),  # what the command lines share: int_at_least, Once, terminal_progress, callable_module
    "run_lock": set(),  # OUT/train.lock
    "utils": {"scores", "machine", "files", "shipped_files", "finite", "cli", "run_lock"},  # check, and the above
    "stats": set(),  # numpy only: paired differences and their standard errors
    "provenance": set(),  # numpy only: which corpus an array of ids comes from
    "wikifil": set(),
    "validation": set(),  # torch only: the model's clear errors (text is encoded in symbols.py)
    "adaptive": set(),  # torch only: the word-level embedding and softmax
    "sampling": {"validation"},  # generate: duck-typed, it imports no model
    "controls": {"validation", "sampling"},  # the model's bases: set_lengths, fast_attn, generate; score_terms
    "model": {"validation", "adaptive", "controls"},  # only inside the package: model.py copied alone runs without them
    "fast": {"model", "controls"},  # the model's faster subclasses (controls.py holds their one hook, SPEEDUP)
    "words": set(),  # the authors' Vocab
    "symbols": {"words", "validation"},  # text <-> ids: text8's 27 characters (VOCAB, encode), any other vocabulary
    # what every corpus shares: Corpus (its splits' ids checked), Source, the download, the cache
    "corpora": {"files", "symbols", "provenance", "validation"},
    "text8": {"utils", "symbols", "corpora"},  # characters: text8, text8-mini
    "word_corpora": {"words", "symbols", "corpora", "text8"},  # words: text8-mini's, WikiText's
    "enwik8": {"words", "corpora"},  # bytes, as the authors prepare them
    "text_file": {"symbols", "corpora", "words", "files"},  # your own UTF-8 file: chunked reading, vocabulary, cache
    "batching": {"validation", "machine"},  # the ordered iterator: its arguments checked, its device one this has
    # the corpora's front door; generate_text calls model.generate without importing the model
    "data": {"corpora", "text8", "word_corpora", "enwik8", "text_file", "symbols", "batching", "words"},
    "variants": {"model"},
    "flops": {"model", "validation"},
    "safetensors_io": {"utils"},  # the shipped weights' format, without pickle
    "tasks": {"model", "utils", "safetensors_io", "validation"},  # the recall stream and its models
    "reference": {"model"},  # the naive key-by-key model the tests trust (it reads model.py's sinusoid_table)
    "checkpoint": {"model", "data", "utils", "safetensors_io", "validation", "machine"},
    "segments": {"model", "checkpoint", "validation", "provenance"},  # read_segments; does a segment fit
    "evaluate": {"model", "data", "corpora", "files", "utils", "cli", "checkpoint", "validation", "fast",
                 "provenance",
                 "stats", "segments"},  # its command line's comparisons
    "presets": {"model", "data"},  # the presets' settings (their TrainConfig is made in train.py)
    "devices": {"model", "data", "machine", "validation", "fast"},  # DDP, precision, compile, Adam
    "train_config": {"model", "data", "machine", "validation", "presets", "devices", "text_file"},  # TrainConfig
    "run_checkpoints": {"model", "checkpoint", "corpora", "devices", "files", "finite"},  # ckpt.pt, best.pt, resume
    "run_signals": {"devices", "run_checkpoints"},  # Ctrl-C, SIGTERM, SIGHUP
    "run_log": {"checkpoint", "files", "scores", "run_checkpoints"},  # log.csv
    "run_folder": {"model", "checkpoint", "devices", "files", "scores", "run_lock", "run_checkpoints", "run_signals",
                   "run_log"},  # --out: one run per folder; TrainResult
    "bookkeeping": {"devices", "scores", "train_config", "run_checkpoints", "run_signals", "run_log"},  # between steps
    "command_line": {"data", "cli", "devices", "run_folder"},  # train.main's flags
    "train": {"model", "data", "corpora", "checkpoint", "evaluate", "validation", "presets", "devices", "run_folder",
              "command_line", "batching", "text_file", "train_config", "bookkeeping", "run_checkpoints",
              "run_signals", "scores", "files", "machine", "cli"},
    "pretrained": {"model", "data", "utils", "checkpoint", "evaluate", "stats", "cli"},
    "generate": {"checkpoint", "data", "utils", "cli"},  # python -m txl_minimal.generate
    "doctor": {"utils", "corpora", "text8", "word_corpora", "enwik8", "checkpoint",  # python -m txl_minimal.doctor
               "train", "safetensors_io", "cli"},
    # the notebooks' helpers
    "tutorial.context": {"model", "data", "utils", "evaluate", "stats", "validation"},
    "tutorial.analysis": {"model", "data", "utils", "evaluate", "validation"},
    "tutorial.attention_maps": {"model", "data", "utils", "evaluate", "provenance", "tutorial.analysis", "validation"},
    "tutorial.figure_style": {"validation"},  # what every figure shares: readable sizes, checks, the heatmaps
    "tutorial.plotting_memory": {"validation", "tutorial.figure_style"},  # attention over memory (05, 09)
    "tutorial.plotting": {"tutorial.analysis", "validation", "tutorial.figure_style", "tutorial.plotting_memory"},
    # the notebooks' checkers: one module per notebook over the machinery they share (checking)
    "tutorial.exercises.checking": {"model", "validation"},
    "tutorial.exercises.build": {"model", "tutorial.exercises.checking"},
    "tutorial.exercises.fragmentation": {"model", "evaluate", "tutorial.exercises.checking"},
    "tutorial.exercises.relative_attention": {"model", "variants", "tutorial.analysis", "tutorial.exercises.checking"},
    "tutorial.exercises.recurrence": {"tutorial.analysis", "tutorial.exercises.checking"},
    "tutorial.exercises.training": {"model", "train", "tutorial.exercises.checking"},
    "tutorial.exercises.memory_attention": {"model", "tutorial.attention_maps", "tutorial.exercises.checking"},
    "tutorial.exercises.context_usage": {"tutorial.context", "tutorial.exercises.checking"},
    "tutorial.exercises.ablations": {"model", "variants", "tutorial.exercises.checking"},
    "tutorial.exercises.adaptive_softmax": {"adaptive", "tutorial.exercises.checking"},
    "tutorial.exercises.your_text": {"tutorial.own_text", "tutorial.solutions",  # 09's reference: its worked answer
                                     "tutorial.exercises.checking", "tutorial.memory_gain"},
    "tutorial.solutions": {"tutorial.own_text", "tutorial.memory_gain"},  # their worked answers (09's prediction
    # reads its results)
    "tutorial.ablation": {"model", "data", "utils", "train", "flops", "validation"},
    "tutorial.own_text": {"utils", "stats", "validation"},  # notebook 09: the stdlib corpus, its runs, their results
    "tutorial.memory_gain": {"model", "evaluate", "scores", "stats"},  # the saving by position, pooled over stretches
}


def modules() -> set[str]:
    """Every module of the package, dotted (``tutorial.plotting``), __init__ files included."""
    return {".".join(p.relative_to(PACKAGE).with_suffix("").parts) for p in PACKAGE.rglob("*.py")}


def _module_or_package(dotted: str) -> bool:
    path = PACKAGE.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def package_imports(module: str) -> set[str]:
    """The txl_minimal modules ``module`` imports, at the top or inside functions, dotted as in
    ALLOWED (``from ..model import x`` in tutorial/analysis.py -> "model"; ``from txl_minimal
    import tutorial`` -> "tutorial", the subpackage itself)."""
    parts = module.split(".")  # its package is parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(PACKAGE.joinpath(*parts).with_suffix(".py").read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . / from .. (level 1 = the module's own package)
                base = parts[:len(parts) - node.level]
                name = ".".join(base + (node.module.split(".") if node.module else []))
            elif node.module == "txl_minimal" or (node.module or "").startswith("txl_minimal."):
                name = node.module.removeprefix("txl_minimal").lstrip(".")
            else:
                continue
            for alias in node.names:  # from <package> import <module>, or from <module> import <name>
                sub = f"{name}.{alias.name}" if name else alias.name
                found.add(sub if _module_or_package(sub) else name)
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("txl_minimal.") for a in node.names if a.name.startswith("txl_minimal.")}
    return found - {""}


def test_package_imports_reads_relative_and_absolute_imports():
    assert package_imports("tutorial.analysis") >= {"model", "data", "evaluate"}  # from ..model import
    assert package_imports("tutorial.plotting_memory") == {"validation", "tutorial.figure_style"}  # from .., from .x
    assert package_imports("tutorial.exercises.context_usage") >= {"tutorial.context",  # from txl_minimal...
                                                                   "tutorial.exercises.checking"}
    assert "variants" in package_imports("__init__")  # from . import variants


@pytest.mark.parametrize("module", sorted(ALLOWED))
def test_modules_import_only_modules_below_them(module):
    assert package_imports(module) <= ALLOWED[module]


def test_every_module_has_its_place():
    assert {m for m in modules() if not m.endswith("__init__")} == set(ALLOWED)


def test_no_library_module_imports_the_tutorial():
    """The library stands alone: nothing outside txl_minimal/tutorial/ imports from it, in the
    source (ALLOWED and __init__.py) or when every library module is imported."""
    library = {m for m in modules() if not m.startswith("tutorial")}
    assert {"__init__", "model", "train", "pretrained"} <= library
    for module in library:
        reached = {m for m in package_imports(module) if m == "tutorial" or m.startswith("tutorial.")}
        assert not reached, f"txl_minimal/{module.replace('.', '/')}.py imports {sorted(reached)}"
        assert not any(m.startswith("tutorial") for m in ALLOWED.get(module, ()))
    names = sorted(m for m in library if m != "__init__")
    code = ("import sys, importlib, txl_minimal\n"
            f"for m in {names!r}: importlib.import_module('txl_minimal.' + m)\n"
            "[getattr(txl_minimal, n) for n in txl_minimal.__all__]\n"
            "print(sorted(m for m in sys.modules if m.startswith('txl_minimal.tutorial')))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["[]"], f"importing the library loads {run.stdout.strip()}"


def test_no_module_imports_pretrained():
    importers = [m for m in modules() if "pretrained" in package_imports(m)]
    assert importers == []  # __init__ loads it on first use of load_pretrained (see _LAZY there)


def test_the_layout_page_maps_every_module():
    """docs/layout.md (the book's Layout page, linked from the README) lists each library module under
    txl_minimal/ and each helper under tutorial/."""
    layout = (PACKAGE.parent / "docs" / "layout.md").read_text()
    for module in ALLOWED:
        indent = "  " * (module.count(".") + 1)  # a subpackage's modules under its folder
        assert f"\n{indent}{module.split('.')[-1]}.py " in layout, f"docs/layout.md lacks {module}"
