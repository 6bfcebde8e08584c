"""What a lecturer checks in the notebooks' text without running them: the prose stays short
enough to read, every formula's characters are printable (a lone backslash in JSON once
turned `\\big` into a backspace), every figure is drawn at most ``plotting.WIDTH`` inches wide
with no text under 10 pt, and every notebook ends with a "why" question whose model answer
is folded away."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from txl_minimal.tutorial import plotting

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9]*.ipynb"))
MARKDOWN_BUDGET = 70_000  # characters of markdown in 00-07 together
OWN_BUDGETS = {"08": 9_000, "09": 9_000}  # notebooks added later get a budget of their own


def cells(path: Path, kind: str) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == kind]


def test_the_prose_of_all_notebooks_fits_its_budget():
    first = [nb for nb in NOTEBOOKS if nb.name[:2] not in OWN_BUDGETS]
    total = sum(len(s) for nb in first for s in cells(nb, "markdown"))
    assert len(first) >= 8 and total < MARKDOWN_BUDGET, f"{total:,} characters of markdown in 00-07"
    for nb in NOTEBOOKS:
        if nb.name[:2] in OWN_BUDGETS:
            own = sum(len(s) for s in cells(nb, "markdown"))
            assert own < OWN_BUDGETS[nb.name[:2]], f"{nb.name}: {own:,} characters of markdown"
    assert set(OWN_BUDGETS) <= {nb.name[:2] for nb in NOTEBOOKS}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_no_control_characters_in_the_text(notebook):
    for text in cells(notebook, "markdown") + cells(notebook, "code"):
        bad = {hex(ord(ch)) for ch in text if ord(ch) < 32 and ch not in "\n\t"}
        assert not bad, f"{notebook.name}: control characters {bad} (a backslash lost in JSON?) in {text[:80]!r}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_figures_are_sized_for_the_page(notebook):
    code = "\n".join(cells(notebook, "code"))
    assert "plotting.use_readable_style()" in code, f"{notebook.name}: call plotting.use_readable_style()"
    for w in re.findall(r"figsize=\(\s*([\d.]+)\s*,", code):
        assert float(w) <= plotting.WIDTH, f"{notebook.name}: a figure {w} inches wide (GitHub shrinks it)"
    for size in re.findall(r"fontsize=(\d+(?:\.\d+)?)\b", code):
        assert float(size) >= plotting.SMALL, f"{notebook.name}: fontsize={size} is unreadable once shrunk"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_every_notebook_asks_why_and_folds_its_answer(notebook):
    text = "\n".join(cells(notebook, "markdown"))
    assert "### Why?" in text, notebook.name
    assert re.search(r"<details><summary>[^<]+</summary>\n\n.+?\n\n</details>", text, re.S), notebook.name
