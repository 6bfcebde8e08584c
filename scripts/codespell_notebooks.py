"""codespell over the notebooks' markdown cells (`make lint`), reported by notebook, cell and line.

codespell reads files as text, and a notebook's JSON holds code, outputs and base64 figures that
are not prose; so each markdown cell is written to a temporary file, codespell checks those, and
its findings are printed as ``notebooks/NN_x.ipynb: cell C, line L: word ==> fix``.
Exit status: codespell's (0 when nothing is found).

    python scripts/codespell_notebooks.py [notebooks/ or notebook files ...]
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOUND = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): (?P<message>.*)$")


def markdown_cells(path: Path) -> list[tuple[int, str]]:
    """(cell index, text) of every markdown cell of a notebook."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    return [(i, "".join(c["source"]) if isinstance(c["source"], list) else c["source"])
            for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"]


def notebook_files(args: list[str]) -> list[Path]:
    """The notebooks named, folders expanded to their ``*.ipynb`` (default: notebooks/)."""
    files = []
    for arg in args or [str(ROOT / "notebooks")]:
        path = Path(arg)
        files += sorted(path.glob("*.ipynb")) if path.is_dir() else [path]
    return files


def check(files: list[Path], codespell: str | None = None) -> tuple[int, list[str]]:
    """Run codespell on the markdown cells of ``files``; returns its exit status and the findings."""
    with tempfile.TemporaryDirectory() as tmp:
        where = {}
        for nb in files:
            for i, text in markdown_cells(nb):
                cell = Path(tmp) / f"{nb.stem}.cell{i}.md"
                cell.write_text(text, encoding="utf-8")
                where[str(cell)] = (nb, i)
        if not where:
            return 0, []
        cmd = [codespell or str(Path(sys.executable).with_name("codespell")),
               "--toml", str(ROOT / "pyproject.toml"), *sorted(where)]  # its [tool.codespell]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    findings = []
    for line in done.stdout.splitlines():
        m = FOUND.match(line)
        if m and m["file"] in where:
            nb, i = where[m["file"]]
            shown = nb.relative_to(ROOT) if nb.is_relative_to(ROOT) else nb
            findings.append(f"{shown}: cell {i}, line {m['line']}: {m['message']}")
        elif line.strip():
            findings.append(line)
    if done.returncode not in (0, 65) and done.stderr.strip():  # 65: misspellings found
        findings.append(done.stderr.strip())
    return done.returncode, findings


def main(argv: list[str] | None = None) -> int:
    code, findings = check(notebook_files(sys.argv[1:] if argv is None else argv))
    for line in findings:
        print(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
