"""The versions the package declares are the versions it is tested on.

requirements-min.txt is the one list of minimum versions: `make test-min` installs exactly
it and runs tests/ there; pyproject.toml's lower bounds must equal its pins, the pins CI uses
(requirements-dev.txt) must satisfy them, and `import txl_minimal` refuses an older torch.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import txl_minimal

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"^([A-Za-z0-9_.-]+)\s*(==|>=)\s*([0-9][0-9A-Za-z.]*)$")


def parse(lines: list[str], op: str) -> dict[str, str]:
    """{name: version} of the ``name<op>version`` requirements (comments skipped; names lower-case,
    "_" as "-"); anything else fails, so that a range or a marker cannot slip past these tests."""
    found = {}
    for line in lines:
        line = line.split("#")[0].strip()
        if not line:
            continue
        m = NAME.match(line)
        assert m and m[2] == op, f"expected name{op}version, got {line!r}"
        found[m[1].lower().replace("_", "-")] = m[3]
    return found


NOT_FLOORS = {"lxml-html-clean"}  # what the oldest set alone needs (nbconvert 7.0.0 with a new lxml), no floor


def minimum() -> dict[str, str]:
    """requirements-min.txt's pins, the floors (NOT_FLOORS left out)."""
    pins = parse((ROOT / "requirements-min.txt").read_text().splitlines(), "==")
    return {name: v for name, v in pins.items() if name not in NOT_FLOORS}


def declared() -> dict[str, str]:
    """pyproject's lower bounds: the dependencies and every extra (one bound per package)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = parse(project["dependencies"], ">=")
    for extra in project["optional-dependencies"].values():
        for name, version in parse(extra, ">=").items():
            assert floors.setdefault(name, version) == version, f"two floors for {name}"
    return floors


def key(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version.split("+")[0])[:3])


def test_pyproject_floors_are_the_tested_minimum():
    assert declared() == minimum()


def test_the_pinned_versions_meet_the_floors():
    pins = parse([line for line in (ROOT / "requirements-dev.txt").read_text().splitlines()
                  if line.split("#")[0].strip()], "==")
    low = {name: v for name, v in minimum().items() if key(pins.get(name, v)) < key(v)}
    assert not low, f"requirements-dev.txt pins below the floor: {low}"
    assert set(minimum()) <= set(pins), set(minimum()) - set(pins)


def test_the_import_check_has_the_same_torch_floor():
    assert txl_minimal.TORCH_FLOOR == minimum()["torch"]


@pytest.mark.parametrize("version", ["2.3.0", "2.3.0+cpu", "2.3.1+cu121", "2.4.0a0+git1234", "2.10.0", "3.0.0"])
def test_torch_at_or_above_the_floor_is_accepted(version):
    txl_minimal.check_torch_version(version)


@pytest.mark.parametrize("version", ["2.2.2", "2.1.2+cu121", "1.13.1", "2.0.0"])
def test_older_torch_is_refused_with_the_fix(version):
    with pytest.raises(ImportError) as e:
        txl_minimal.check_torch_version(version)
    assert str(e.value) == (f"txl_minimal needs torch >= {txl_minimal.TORCH_FLOOR}, found {version}: "
                            f'upgrade it with  pip install --upgrade "torch>={txl_minimal.TORCH_FLOOR}"')


def test_import_with_an_old_torch_says_so_in_its_last_line():
    """A real `import txl_minimal` in a fresh interpreter whose torch reports 2.1.2."""
    code = "import torch; torch.__version__ = '2.1.2'; import txl_minimal"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env=None)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        f"ImportError: txl_minimal needs torch >= {txl_minimal.TORCH_FLOOR}, found 2.1.2: "
        f'upgrade it with  pip install --upgrade "torch>={txl_minimal.TORCH_FLOOR}"')
    assert "torch/" not in run.stderr  # nothing from inside torch: the check runs before any model code
