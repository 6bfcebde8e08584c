"""The package's import direction: model, data (over text8, word_corpora, enwik8 and batching), utils
at the bottom; checkpoint, then evaluate, then train above them (over its presets, devices,
run_folder and command_line); pretrained on top, loaded only by __init__ (lazily). The
notebooks' helpers live in txl_minimal.tutorial, above the library (the model, and evaluate
where they score text); no library module imports anything from there."""
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
    "utils": set(),
    "stats": set(),  # numpy only: paired differences and their standard errors
    "provenance": set(),  # numpy only: which corpus an array of ids comes from
    "wikifil": set(),
    "validation": set(),  # torch only: the model's clear errors (text is encoded in text8.py)
    "adaptive": set(),  # torch only: the word-level embedding and softmax
    "sampling": {"validation"},  # generate: duck-typed, it imports no model
    "model": {"validation", "adaptive", "sampling"},  # only inside the package: model.py copied alone runs without them
    "fast": {"model"},  # the model's faster subclasses (model.py names only its hook, SPEEDUP)
    "words": set(),  # the authors' Vocab
    "symbols": {"words"},  # text <-> ids over any vocabulary (a text file's characters or words)
    "text8": {"utils", "symbols", "provenance"},  # characters: text8, text8-mini, Corpus, CorpusError
    "word_corpora": {"utils", "words", "text8"},  # WikiText in text8's folder, with its download and cache
    "enwik8": {"utils", "words", "text8"},  # bytes, in text8's folder, with its download and cache
    "text_file": {"symbols", "text8", "words"},  # your own UTF-8 file: chunked reading, its vocabulary, the cache
    "batching": set(),  # torch and numpy only: the ordered iterator
    # the corpora's front door; generate_text calls model.generate without importing the model
    "data": {"text8", "word_corpora", "enwik8", "text_file", "symbols", "batching", "words"},
    "variants": {"model"},
    "flops": {"model"},
    "safetensors_io": {"utils"},  # the shipped weights' format, without pickle
    "tasks": {"model", "utils", "safetensors_io"},  # the recall stream and its models
    "checkpoint": {"model", "data", "utils", "safetensors_io"},
    "evaluate": {"model", "data", "utils", "checkpoint", "validation", "fast", "provenance",  # checks once; compile
                 "stats"},  # its command line's comparisons
    "presets": {"model", "data"},  # the presets' settings (their TrainConfig is made in train.py)
    "devices": {"model", "data", "utils", "validation", "fast"},  # DDP, precision, compile, Adam
    "run_folder": {"model", "utils", "checkpoint", "devices"},  # lock, log.csv, checkpoints, resume, Ctrl-C
    "command_line": {"data", "utils", "devices", "run_folder"},  # train.main's flags
    "train": {"model", "data", "utils", "checkpoint", "evaluate", "validation", "presets", "devices", "run_folder",
              "command_line", "batching", "text_file"},
    "pretrained": {"model", "data", "utils", "checkpoint", "evaluate", "stats"},
    "generate": {"checkpoint", "data", "utils"},  # python -m txl_minimal.generate
    "doctor": {"utils", "text8", "word_corpora", "enwik8", "checkpoint", "train",  # python -m txl_minimal.doctor
               "safetensors_io"},
    # the notebooks' helpers
    "tutorial.context": {"model", "data", "utils", "evaluate", "stats"},
    "tutorial.analysis": {"model", "data", "utils", "evaluate"},
    "tutorial.attention_maps": {"model", "data", "utils", "evaluate", "tutorial.analysis"},
    "tutorial.plotting": {"tutorial.analysis"},
    "tutorial.exercises": {"model", "adaptive", "tutorial.analysis", "tutorial.attention_maps", "tutorial.context",
                           "evaluate", "train", "variants", "tutorial.own_text",
                           "tutorial.solutions"},  # the notebooks' checkers (09's reference is its worked answer)
    "tutorial.solutions": {"tutorial.own_text"},  # their worked answers (09's prediction reads its results)
    "tutorial.ablation": {"model", "data", "utils", "train", "flops"},
    "tutorial.own_text": {"utils", "stats"},  # notebook 09: the stdlib corpus, its runs, their results
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
    assert package_imports("tutorial.plotting") == {"tutorial.analysis"}  # from .analysis import
    assert package_imports("tutorial.exercises") >= {"tutorial.context", "model"}  # from txl_minimal...
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
        indent = "    " if module.startswith("tutorial.") else "  "
        assert f"\n{indent}{module.split('.')[-1]}.py " in layout, f"docs/layout.md lacks {module}"
