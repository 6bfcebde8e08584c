"""`make lint`: codespell over the notebooks' markdown (scripts/codespell_notebooks.py) and the
lint configuration. The lint itself is `make lint`, which `make test` runs first."""
from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from tiny import ROOT

spec = importlib.util.spec_from_file_location("codespell_notebooks", ROOT / "scripts" / "codespell_notebooks.py")
codespell_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(codespell_notebooks)
CODESPELL = shutil.which("codespell", path=str(Path(sys.executable).parent)) or shutil.which("codespell")


def notebook(path: Path, cells: list[tuple[str, str]]) -> Path:
    cells = [{"cell_type": kind, "metadata": {}, "source": text,
              **({"outputs": [], "execution_count": None} if kind == "code" else {})} for kind, text in cells]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


@pytest.mark.skipif(CODESPELL is None, reason="codespell is not installed (pip install -r requirements-dev.txt)")
def test_codespell_reports_a_markdown_typo_by_notebook_cell_and_line_and_ignores_code(tmp_path):
    typo, name = "mem" + "roy", "t" + "eh"  # spelt in two halves, or `make lint` would flag this file
    nb = notebook(tmp_path / "01_x.ipynb", [("markdown", "# Title\n\nAll fine here."),
                                             ("code", f"{name} = 1  # a name in code is not prose"),
                                             ("markdown", f"One line.\nThe {typo} is cached.")])
    code, findings = codespell_notebooks.check([nb], CODESPELL)
    assert code != 0
    assert findings == [f"{nb}: cell 2, line 2: {typo} ==> memory"]
    clean = notebook(tmp_path / "02_y.ipynb", [("markdown", "The memory is cached."), ("code", f"{name} = 1")])
    assert codespell_notebooks.check([clean], CODESPELL) == (0, [])


def test_the_lint_tools_are_pinned_and_configured():
    pins = (ROOT / "requirements-dev.txt").read_text()
    assert "\nruff==" in pins and "\ncodespell==" in pins
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    assert {"F", "E", "B"} <= set(tool["ruff"]["lint"]["select"])
    assert "nd" in tool["codespell"]["ignore-words-list"].split(",")
