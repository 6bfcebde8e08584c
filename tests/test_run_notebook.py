"""scripts/run_notebook.py, which tests/gpu uses to execute notebook 04 on a GPU: on a CPU, a
notebook that passes and one whose assert fails."""
from __future__ import annotations

import importlib.util

import pytest

from tiny import ROOT

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

spec = importlib.util.spec_from_file_location("run_notebook", ROOT / "scripts" / "run_notebook.py")
run_notebook = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_notebook)


def test_cells_run_in_order_in_the_notebooks_folder_and_errors_are_reported(tmp_path, capsys):
    (tmp_path / "data.txt").write_text("42")
    cells = [nbformat.v4.new_markdown_cell("# title"),
             nbformat.v4.new_code_cell("x = int(open('data.txt').read())"),  # relative to the notebook
             nbformat.v4.new_code_cell("assert x == 42, 'claim'\nprint('holds', x)"),
             nbformat.v4.new_code_cell("assert x == 41, 'this claim fails'"),
             nbformat.v4.new_code_cell("print('after the error')")]
    nb = tmp_path / "nb.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), str(nb))
    out = tmp_path / "out.ipynb"
    code = run_notebook.main([str(nb), str(out)])
    assert code == 1
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in printed[:4]] == ["cell 1", "cell 2", "cell 3", "cell 4"]
    assert "ERROR AssertionError: this claim fails" in printed[2]
    assert printed[-1].startswith(f"{nb}: 4 code cells in ") and printed[-1].endswith(" s, 1 with an error")
    done = nbformat.read(str(out), as_version=4)
    assert done.cells[2].outputs[0]["text"] == "holds 42\n"
    assert done.cells[4].outputs[0]["text"] == "after the error\n"  # it went on, as a reader's run would
