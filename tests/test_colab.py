"""The notebooks on Colab: one repository everywhere, and a first cell that clones and
installs it once, stops with one clear message when that fails, and does nothing locally.

The Colab part of the first cell is run here without Colab: a fake ``google.colab`` module,
/content pointed at tmp_path, and a fake ``subprocess.run`` standing in for git and pip.
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
BADGE = re.compile(r"https://colab\.research\.google\.com/github/([^/\s)]+)/([^/\s)]+)/blob/([^/\s)]+)/"
                   r"notebooks/([^/\s)]+\.ipynb)")


def cells(path: Path, kind: str) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == kind]


def colab_part(path: Path) -> ast.Module:
    """The first code cell's statements up to its `if "google.colab" in sys.modules:` block."""
    from IPython.core.inputtransformer2 import TransformerManager  # the cell may hold %magics

    body = ast.parse(TransformerManager().transform_cell(cells(path, "code")[0])).body
    end = next(i for i, node in enumerate(body)
               if isinstance(node, ast.If) and "google.colab" in ast.unparse(node.test))
    return ast.Module(body=body[: end + 1], type_ignores=[])


def constants(path: Path) -> dict[str, str]:
    return {t.id: node.value.value for node in colab_part(path).body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name) and isinstance(node.value, ast.Constant)}


def test_one_repository_in_every_notebook_badge_and_pyproject():
    found = {nb.name: constants(nb) for nb in NOTEBOOKS}
    assert len(NOTEBOOKS) >= 7 and all({"REPO", "BRANCH"} <= c.keys() for c in found.values()), found
    repo, branch = found[NOTEBOOKS[0].name]["REPO"], found[NOTEBOOKS[0].name]["BRANCH"]
    assert all((c["REPO"], c["BRANCH"]) == (repo, branch) for c in found.values()), found
    owner_repo = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+)", repo).groups()
    expected = {(*owner_repo, branch, nb.name) for nb in NOTEBOOKS}

    # each notebook's first markdown cell: a badge for itself
    for nb in NOTEBOOKS:
        assert BADGE.findall(cells(nb, "markdown")[0]) == [(*owner_repo, branch, nb.name)], nb.name
    # the README's table: one badge per notebook, same repository and branch
    assert set(BADGE.findall((ROOT / "README.md").read_text())) == expected

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["urls"]["Repository"] == repo


def test_the_colab_part_is_the_same_everywhere_and_no_colab_metadata():
    first = ast.dump(colab_part(NOTEBOOKS[0]))
    for nb in NOTEBOOKS:
        assert ast.dump(colab_part(nb)) == first, f"{nb.name}: its Colab set-up differs from {NOTEBOOKS[0].name}"
        data = json.loads(nb.read_text())
        assert "colab" not in data["metadata"]
        assert not any({"colab", "outputId"} & c.get("metadata", {}).keys() for c in data["cells"])


class FakeRunner:
    """subprocess.run for git and pip: records the calls; ``fail`` = the program that fails."""

    def __init__(self, fail: str | None = None, missing: str | None = None):
        self.calls, self.fail, self.missing = [], fail, missing

    def __call__(self, cmd, **kwargs):
        cmd = list(cmd)
        program = "pip" if cmd[1:3] == ["-m", "pip"] else cmd[0]
        self.calls.append(program)
        if program == self.missing:
            raise FileNotFoundError(2, "No such file or directory", program)
        if program == self.fail:
            return subprocess.CompletedProcess(cmd, 1, "", f"fatal: {program} went wrong\n")
        if program == "git":  # a clone: the folder with the notebooks
            (Path(cmd[-1]) / "notebooks").mkdir(parents=True)
        return subprocess.CompletedProcess(cmd, 0, "", "")


@pytest.fixture
def colab(tmp_path, monkeypatch):
    """run(runner, on_colab=True, installed=False): execute the Colab part as on Colab."""
    code = ast.unparse(colab_part(NOTEBOOKS[0]))
    assert code.count("'/content'") == 1
    code = code.replace("'/content'", repr(str(tmp_path)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))

    def run(runner: FakeRunner, on_colab: bool = True, installed: bool = False) -> dict:
        monkeypatch.setattr(subprocess, "run", runner)
        if on_colab:
            monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
        else:
            monkeypatch.delitem(sys.modules, "google.colab", raising=False)
        if not installed:  # `import txl_minimal` fails, as on a fresh Colab runtime
            monkeypatch.setitem(sys.modules, "txl_minimal", None)
        else:
            monkeypatch.delitem(sys.modules, "txl_minimal", raising=False)
        namespace: dict = {}
        exec(compile(code, "<first cell>", "exec"), namespace)
        return namespace
    return run


def test_locally_nothing_runs_and_nothing_is_printed(colab, tmp_path, capsys):
    runner = FakeRunner()
    colab(runner, on_colab=False)
    assert runner.calls == [] and Path.cwd() == tmp_path
    assert capsys.readouterr() == ("", "")


def test_on_colab_clones_installs_and_a_rerun_is_quiet(colab, tmp_path, capsys):
    runner = FakeRunner()
    ns = colab(runner)
    home = tmp_path / Path(ns["REPO"]).name
    assert runner.calls == ["git", "pip"]
    assert Path.cwd() == home / "notebooks" and sys.path[0] == str(home)
    colab(runner, installed=True)  # run the cell again: the clone and the package are there
    assert runner.calls == ["git", "pip"]
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("fail, missing, what", [("git", None, "git clone"), (None, "git", "git clone"),
                                                 ("pip", None, "pip install")])
def test_on_colab_a_failure_stops_with_one_message(colab, fail, missing, what):
    runner = FakeRunner(fail=fail, missing=missing)
    with pytest.raises(RuntimeError) as e:
        colab(runner)
    message = str(e.value)
    assert message.startswith("Set-up failed:") and what in message
    assert ("went wrong" in message) if fail else ("No such file" in message)
    assert "run this cell again" in message.lower()  # what to do
    assert runner.calls == (["git"] if what == "git clone" else ["git", "pip"])  # nothing after it


def test_the_set_up_cell_is_collapsed_and_separate_from_the_imports():
    """The reader's first cell is the imports: the Colab set-up is its own cell, folded away in
    JupyterLab (source_hidden) and shown as a one-line form on Colab (#@title)."""
    for nb in NOTEBOOKS:
        code = [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
        setup, imports = code[0], "".join(code[1]["source"])
        assert "".join(setup["source"]).startswith("#@title "), nb.name
        assert setup["metadata"].get("jupyter", {}).get("source_hidden") is True, nb.name
        assert setup["metadata"].get("cellView") == "form", nb.name
        assert "google.colab" not in imports and "txl_minimal" in imports, nb.name
