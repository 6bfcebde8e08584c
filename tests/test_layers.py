"""The package's import direction: model, data, utils at the bottom; checkpoint, then
evaluate, then train above them; pretrained on top, loaded only by __init__ (lazily);
the notebooks' helpers above the model (and evaluate where they score text)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "txl_minimal"
# module -> the package modules it may import (anything not listed is off limits)
ALLOWED = {
    "utils": set(),
    "wikifil": set(),
    "model": {"validation"},  # only inside the package: model.py copied alone runs without it
    "data": {"utils"},
    "validation": {"data"},
    "variants": {"model"},
    "flops": {"model"},
    "tasks": {"model", "utils"},  # the recall stream and its models
    "checkpoint": {"model", "data", "utils"},
    "evaluate": {"model", "data", "utils", "checkpoint"},
    "train": {"model", "data", "utils", "checkpoint", "evaluate"},
    "pretrained": {"model", "data", "utils", "checkpoint", "evaluate"},
    "context": {"model", "data", "utils", "evaluate"},
    "analysis": {"model", "data", "utils", "evaluate"},
    "attention_maps": {"model", "data", "utils", "evaluate", "analysis"},
    "plotting": {"analysis"},
    "exercises": {"model", "analysis", "attention_maps", "context", "evaluate", "train", "variants"},  # the notebooks' checkers
    "solutions": set(),  # their worked answers
    "ablation": {"model", "data", "utils", "train", "flops"},
}


def package_imports(module: str) -> set[str]:
    """The txl_minimal modules ``module`` imports, at the top or inside functions."""
    found = set()
    for node in ast.walk(ast.parse((PACKAGE / f"{module}.py").read_text())):
        if isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level == 1 and not name:  # from . import x
                found |= {a.name for a in node.names}
            elif node.level == 1 or name.startswith("txl_minimal."):
                found.add(name.removeprefix("txl_minimal.").split(".")[0])
            elif name == "txl_minimal":
                found |= {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("txl_minimal.")}
    return found


@pytest.mark.parametrize("module", sorted(ALLOWED))
def test_modules_import_only_modules_below_them(module):
    assert package_imports(module) <= ALLOWED[module]


def test_every_module_has_its_place():
    assert {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"} == set(ALLOWED)


def test_no_module_imports_pretrained():
    importers = [p.stem for p in PACKAGE.glob("*.py") if "pretrained" in package_imports(p.stem)]
    assert importers == []  # __init__ loads it on first use of load_pretrained (see _LAZY there)
