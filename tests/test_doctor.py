"""python -m txl_minimal.doctor: a healthy set-up exits 0; each problem, simulated, is named with one
line of advice, and exits 1 exactly when a notebook cannot run until it is fixed."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from tiny import ROOT
from txl_minimal import data, doctor
from txl_minimal.utils import MANIFEST

PINS = doctor.read_pins(ROOT / "requirements-dev.txt")
HEALTHY_KERNEL = {"python3": {"resource_dir": "/k", "spec": {"argv": ["python", "-m", "ipykernel_launcher"],
                                                             "display_name": "Python 3 (.venv)"}}}


@pytest.fixture
def run(monkeypatch, tmp_path):
    """``run()`` -> (report, exit status) of a set-up made healthy here whatever the machine has: the
    pinned versions, an empty data folder, the notebooks' kernel on this Python; no timing. A test
    then breaks one thing."""
    monkeypatch.setattr(doctor, "installed_version", lambda name: PINS[name])
    monkeypatch.setenv("TXL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(doctor, "kernel_specs", lambda: HEALTHY_KERNEL)
    monkeypatch.setattr(doctor, "free_space", lambda path: 50 << 30)
    return lambda: doctor.report(measure=False)


def problem_lines(text: str) -> list[str]:
    return [line.strip() for line in text.split("problems:")[1].splitlines()[1:] if line.strip("- ")]


def test_a_healthy_setup_prints_every_section_and_exits_0(run):
    text, status = run()
    assert status == 0 and "problems: 0" in text
    for section in ("versions:", "devices:", "data:", "shipped files:", "disk:", "jupyter:"):
        assert f"\n{section}\n" in text
    for name in ("python", "torch", "numpy", "matplotlib", "jupyterlab", "cpu", "threads", "device=auto",
                 "amp=auto", "text8", "enwik8", "wt103", "pretrained", "corpus", "results", "kernel"):
        assert f"\n  {name} " in text, name
    assert "13 of 13 files match MANIFEST.json" in text and "python3 runs" in text
    assert 'make lab      "Python 3 (.venv)" registered (as python3)' in text


def test_the_block_pastes_as_plain_text(run):
    text, _ = run()
    lines = text.splitlines()
    assert "\x1b" not in text and "\t" not in text  # no colours, no tabs
    assert lines[1] == lines[-1] == doctor.RULE and lines[0].startswith("txl_minimal doctor: paste")


def test_what_device_and_amp_auto_pick_on_this_cpu():
    found = {f.label: f.value for f in doctor.check_devices(measure=True)}
    assert found["device=auto"] == "cpu"
    assert found["amp=auto"].startswith(("fp32, fast attention", "bf16 autocast, fast attention"))
    assert "a bf16 matmul of this model's size runs" in found["amp=auto"]


def test_a_gpu_is_described(run, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, 0))
    text, status = run()
    assert "cuda:0        NVIDIA H100 80GB HBM3, capability 9.0, bf16 yes, TF32 matmul" in text
    assert "device=auto   cuda\n" in text and status == 0


@pytest.mark.parametrize("version, needed, advice", [
    (None, True, 'ipywidgets is missing; the notebooks need it. '
                 'Fix: make setup (a clone) or pip install "ipywidgets>=8.0.0"'),
    ("7.8.1", True, 'ipywidgets 7.8.1 is older than the floor 8.0.0. Fix: pip install "ipywidgets>=8.0.0"'),
    ("8.0.5", False, "ipywidgets 8.0.5 is not the pinned"),
])
def test_a_notebook_package_missing_old_or_unpinned(run, monkeypatch, version, needed, advice):
    monkeypatch.setattr(doctor, "installed_version", lambda name: version if name == "ipywidgets" else PINS[name])
    text, status = run()
    assert status == int(needed)
    assert problem_lines(text)[0].startswith(f"{'NEEDED' if needed else 'advice'} ipywidgets: {advice}")


def test_a_missing_test_package_is_advice_only(run, monkeypatch):
    monkeypatch.setattr(doctor, "installed_version", lambda name: None if name == "nbval" else PINS[name])
    text, status = run()
    assert status == 0 and problem_lines(text) == [
        "advice nbval: nbval is missing; the tests need it. Fix: make setup (a clone) or pip install \"nbval>=0.10.0\""]


def test_an_old_python(run, monkeypatch):
    monkeypatch.setattr(doctor, "PYTHON_FLOOR", (99, 0))
    text, status = run()
    assert status == 1 and "NEEDED python: Python" in text and "make clean && make setup" in text


@pytest.fixture
def shipped_copy(tmp_path, monkeypatch):
    """The shipped models' folder copied to tmp_path/pretrained and checked there."""
    folder = tmp_path / "pretrained"
    shutil.copytree(doctor.PRETRAINED_DIR, folder)
    monkeypatch.setattr(doctor, "SHIPPED_FOLDERS", (folder, data.MINI_PATH.parent))
    return folder


@pytest.mark.parametrize("damage, said", [
    ("truncated", "txl-tiny.safetensors: truncated: 1,000 bytes, shipped with 3,447,404"),
    ("missing", "txl-tiny.safetensors: missing"),
    ("manifest", "MANIFEST.json unreadable"),
])
def test_a_damaged_or_missing_shipped_file(run, shipped_copy, damage, said):
    path = shipped_copy / ("txl-tiny.safetensors" if damage != "manifest" else MANIFEST)
    if damage == "missing":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:1000])
    text, status = run()
    assert status == 1 and said in text
    assert len([line for line in problem_lines(text) if line.startswith("NEEDED pretrained: ")]) == 1
    assert "reinstall" in text or "git checkout" in text


def test_a_damaged_result_in_a_clone(run, tmp_path, monkeypatch):
    clone = tmp_path / "clone"
    (clone / "notebooks").mkdir(parents=True)
    shutil.copytree(ROOT / "results" / "long_range", clone / "results" / "long_range")
    path = clone / "results" / "long_range" / "xl.safetensors"
    path.write_bytes(path.read_bytes()[:-7])
    monkeypatch.setattr(doctor, "ROOT", clone)
    text, status = run()
    assert status == 1 and "2 of 3 weight and JSON files readable; damaged: results/long_range/xl.safetensors" in text
    assert f"NEEDED results: restore them: git checkout -- results (in {clone})" in text


def test_an_installed_package_without_a_clone(run, tmp_path, monkeypatch):
    monkeypatch.setattr(doctor, "ROOT", tmp_path / "site-packages")
    text, status = run()
    assert status == 0 and "the notebooks and results/ come with a clone" in text


def fake_python(tmp_path: Path, stderr: str, status: int) -> str:
    """An executable standing in for another Python: says ``stderr`` and exits with ``status``."""
    exe = tmp_path / "bin" / "python3.9"
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\necho "{stderr}" >&2\nexit {status}\n')
    exe.chmod(0o755)
    return str(exe)


@pytest.mark.skipif(os.name != "posix", reason="a shell script stands in for the other Python")
@pytest.mark.parametrize("imports", [False, True])
def test_the_notebooks_kernel_runs_another_python(run, tmp_path, monkeypatch, imports):
    exe = fake_python(tmp_path, "" if imports else "ModuleNotFoundError: No module named 'txl_minimal'",
                      int(not imports))
    spec = {"python3": {"resource_dir": "/k", "spec": {"argv": [exe, "-m", "ipykernel_launcher"],
                                                       "display_name": "Python 3 (ipykernel)"}}}
    monkeypatch.setattr(doctor, "kernel_specs", lambda: spec)
    text, status = run()
    assert f"python3 runs {exe}" in text and status == int(not imports)
    if not imports:
        assert "which cannot import txl_minimal (ModuleNotFoundError: No module named 'txl_minimal')" in text
        assert "NEEDED kernel: register this Python as the notebooks' kernel: make lab" in text


@pytest.mark.parametrize("specs, said", [({}, "no Jupyter kernels"), (
    {"other": {"resource_dir": "/k", "spec": {"argv": ["python"], "display_name": "Other"}}},
    "none named python3, which the notebooks ask for")])
def test_no_kernel_for_the_notebooks(run, monkeypatch, specs, said):
    monkeypatch.setattr(doctor, "kernel_specs", lambda: specs)
    text, status = run()
    assert status == 1 and said in text and "NEEDED kernel" in text


def test_make_labs_kernel_not_registered_in_a_clone_with_a_venv(run, tmp_path, monkeypatch):
    (tmp_path / "clone" / ".venv").mkdir(parents=True)
    monkeypatch.setattr(doctor, "ROOT", tmp_path / "clone")
    spec = {"python3": dict(HEALTHY_KERNEL["python3"], spec=dict(HEALTHY_KERNEL["python3"]["spec"],
                                                                 display_name="Python 3 (ipykernel)"))}
    monkeypatch.setattr(doctor, "kernel_specs", lambda: spec)
    text, status = run()
    assert status == 0 and 'advice make lab: make lab registers it' in text
    assert '"Python 3 (.venv)" not registered' in text


def fake_text8(folder: Path, damaged: bool) -> data.Text8Source:
    """A small text8.zip in ``folder`` (its content damaged, or not) and the source that describes it."""
    text = data.decode(np.random.default_rng(0).integers(0, 27, 5_000)).encode()
    folder.mkdir(parents=True)
    with zipfile.ZipFile(folder / "text8.zip", "w") as zf:
        zf.writestr("text8", text[:-1] + b"x" if damaged else text)
    return data.Text8Source(url="http://localhost/text8.zip", zip_bytes=0, zip_sha256="0", text_bytes=len(text),
                            text_md5=hashlib.md5(text).hexdigest())


@pytest.mark.parametrize("damaged", [False, True])
def test_text8_on_disk_is_verified(run, tmp_path, monkeypatch, damaged):
    monkeypatch.setattr(doctor, "TEXT8", fake_text8(tmp_path / "data", damaged))
    text, status = run()
    assert status == 0  # the notebooks fall back to text8-mini
    if damaged:
        assert "text8.zip damaged" in text and "advice text8: delete or replace" in text
    else:
        assert "text8.zip verified, not yet cached" in text and "problems: 0" in text


@pytest.mark.parametrize("state", ["zip", "cache", "damaged zip", "damaged cache"])
def test_enwik8_on_disk_is_verified(run, tmp_path, monkeypatch, state):
    """A small fake enwik8 (unit tests: test_enwik8.py), its zip or its cache, checked as load_corpus checks them."""
    text = b"<page>\n  <title>Caf\xc3\xa9</title>\n</page>\n" * 100
    folder = tmp_path / "data"
    folder.mkdir()
    with zipfile.ZipFile(folder / "enwik8.zip", "w") as zf:
        zf.writestr("enwik8", text)
    src = data.Enwik8Source(url="http://localhost/enwik8.zip", zip_sha256="0", text_bytes=len(text),
                            text_md5=hashlib.md5(text).hexdigest())
    monkeypatch.setattr(doctor, "ENWIK8", src)
    if "cache" in state:
        with pytest.warns(UserWarning, match="SHA-256"):
            data.load_enwik8(folder, source=src, download=False)
        if state == "damaged cache":
            (folder / "enwik8.test.npy").write_bytes(b"")
    elif state == "damaged zip":
        (folder / "enwik8.zip").write_bytes(b"<html>not found</html>")
    text, status = run()
    assert status == 0  # no notebook needs enwik8
    said = {"zip": "enwik8        enwik8.zip verified, not yet cached",
            "cache": "enwik8        cached and verified (MD5 of its ids)",
            "damaged zip": "enwik8        enwik8.zip damaged (", "damaged cache": "enwik8.test.npy is truncated"}[state]
    assert said in text
    assert ("advice enwik8: " in text) == state.startswith("damaged")


def test_a_damaged_wikitext_zip(run, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "wikitext-103-v1.zip").write_bytes(b"<html>not found</html>")
    text, status = run()
    assert status == 0 and "wt103         wikitext-103-v1.zip damaged: MD5" in text
    assert "advice wt103: delete" in text


def test_little_free_disk(run, monkeypatch):
    monkeypatch.setattr(doctor, "free_space", lambda path: 200 << 20)
    text, status = run()
    assert status == 0 and "advice disk, data: only 0.20 GiB free" in text and "TXL_DATA_DIR" in text


def test_a_failing_amp_measurement_is_reported(monkeypatch):
    def broken(device):
        raise RuntimeError("CUDA error: no kernel image is available")
    monkeypatch.setattr(doctor, "auto_choice", broken)
    found = {f.label: f for f in doctor.check_devices(measure=True)}
    assert "could not be measured (RuntimeError: CUDA error" in found["amp=auto"].value
    assert found["amp=auto"].advice and not found["amp=auto"].needed


def test_the_package_groups_are_pyprojects():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = lambda reqs: tuple(r.split(">=")[0] for r in reqs)  # noqa: E731
    assert doctor.PACKAGES == {"the package": names(project["dependencies"]),
                               "the notebooks": names(project["optional-dependencies"]["notebooks"]),
                               "the tests": tuple(n for n in names(project["optional-dependencies"]["dev"])
                                                  if n != "ipykernel")}


def test_the_command_line():
    """The real command, in a fresh interpreter: its exit status says whether anything is NEEDED."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "txl_minimal.doctor", "--quick"], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)
    # (stderr may hold other packages' warnings: ipykernel 6.5 imports debugpy, which warns there)
    assert "Traceback" not in done.stderr and done.stdout.startswith("txl_minimal doctor")
    assert done.returncode == (1 if "NEEDED" in done.stdout else 0)
    assert "amp=auto      not measured (--quick)" in done.stdout


# -- issue 41: a data folder that is a file, a manifest whose entry is the damaged part -------------------

@pytest.mark.parametrize("inside", [False, True], ids=["the file", "a folder inside it"])
def test_a_data_folder_that_is_a_file_is_named(run, tmp_path, monkeypatch, inside):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    monkeypatch.setenv("TXL_DATA_DIR", str(notes / "data" if inside else notes))
    text, status = run()
    assert f"{notes} is a file, not a folder" in text and "problems: 0" not in text
    assert f"GiB free at {notes}" not in text  # was "70 GiB free at <the file>"
    assert "advice data folder: set TXL_DATA_DIR to a folder you can write" in text
    assert notes.read_text() == "my notes" and status == 0  # the notebooks run on text8-mini all the same


def test_a_runs_folder_that_cannot_be_written_is_named(run, tmp_path, monkeypatch):
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "runs").write_text("not a folder")
    monkeypatch.chdir(tmp_path / "here")
    text, _ = run()
    assert f"disk, runs    {tmp_path / 'here' / 'runs'}: {tmp_path / 'here' / 'runs'} is a file, not a folder" in text
    assert "advice disk, runs: train with --out naming a folder you can write" in text


@pytest.mark.parametrize("edit, said", [
    (lambda e: e.update(byte=e.pop("bytes")), "its entry for txl-tiny.safetensors is"),  # a key renamed
    (lambda e: e.update(bytes=str(e["bytes"])), '"bytes": "3447404"'),  # a number as a string
    (lambda e: e.update(bytes=e["bytes"] + 10), '"bytes": 3,447,414, but txl-tiny.safetensors has 3,447,404'),
    (lambda e: e.update(sha256=e["sha256"][:9] + "0123456789abcdef"[("0123456789abcdef".index(e["sha256"][9]) + 1)
                                                                        % 16] + e["sha256"][10:]), "in only 1 of"),
], ids=["key renamed", "number as text", "size digit", "sha256 digit"])
def test_a_damaged_manifest_entry_is_blamed_not_the_file(run, shipped_copy, edit, said):
    manifest = json.loads((shipped_copy / MANIFEST).read_text())
    edit(manifest["txl-tiny.safetensors"])
    (shipped_copy / MANIFEST).write_text(json.dumps(manifest))
    text, status = run()  # used to crash: KeyError 'bytes', TypeError
    assert status == 1 and said in text
    assert f"txl-tiny.safetensors: {MANIFEST} is damaged" in text and "NEEDED pretrained: " in text
    assert "txl-tiny.safetensors: truncated" not in text and "wrong content" not in text  # the file is intact


# -- issue 48: packages that do not import, a clone without its notebooks, folders in the data folder ------

def test_a_package_that_does_not_import_is_named(run, monkeypatch):
    """With seaborn and matplotlib broken (installed, but neither imports) the doctor read only their
    metadata and said problems: 0."""
    for name in ("seaborn", "matplotlib"):
        monkeypatch.setitem(sys.modules, name, None)  # import name: ImportError, as a broken install gives
    text, status = run()
    assert status == 1 and "problems: 2 (2 that a notebook needs fixed)" in text
    assert f"  seaborn       {PINS['seaborn'] + ', broken':<16} pin" in text
    for name, group in (("matplotlib", "the package"), ("seaborn", "the notebooks")):
        assert (f"NEEDED {name}: {name} {PINS[name]} is installed but does not import (ModuleNotFoundError: import "
                f"of {name} halted; None in sys.modules); {group} need it. Fix: reinstall it, pip install "
                f"--force-reinstall \"{name}=={PINS[name]}\"") in text


def test_a_clone_without_its_notebooks_is_not_an_installed_package(run, tmp_path, monkeypatch):
    """notebooks/ moved away from a clone: it said "not here (an installed package)", and results/ went unchecked."""
    clone = tmp_path / "clone"
    shutil.copytree(ROOT / "results" / "long_range", clone / "results" / "long_range")
    (clone / "pyproject.toml").write_text("[project]\nname = 'txl-minimal'\n")
    path = clone / "results" / "long_range" / "xl.safetensors"
    path.write_bytes(path.read_bytes()[:-7])
    monkeypatch.setattr(doctor, "ROOT", clone)
    text, status = run()
    assert status == 1 and "an installed package" not in text
    assert f"notebooks     {clone / 'notebooks'} is missing from this clone" in text
    assert f"NEEDED notebooks: restore them: git checkout -- notebooks (in {clone})" in text
    assert "damaged: results/long_range/xl.safetensors" in text


@pytest.mark.parametrize("name", ["text8", "enwik8", "text8.zip", "wikitext-2-v1.zip"])
def test_a_folder_where_a_corpus_file_goes_is_named_not_a_crash(run, tmp_path, name):
    """unzip text8.zip -d text8 makes data/text8/ a folder: the doctor crashed with IsADirectoryError."""
    (tmp_path / "data" / name).mkdir(parents=True)
    if name == "text8":
        (tmp_path / "data" / name / "text8").write_text("the text, one level too deep")
    text, status = run()
    assert status == 0 and f"{name} is a folder, not a file" in text
    if name == "text8":
        inside = tmp_path / "data" / "text8" / "text8"
        assert f"advice text8: move the text8 it holds into its place: mv {inside}" in text
    else:
        assert "move the folder out of the way (or delete it)" in text
