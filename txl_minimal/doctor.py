"""What a helper needs to know about your set-up, in one block to paste into an issue.

    python -m txl_minimal.doctor           # or .venv/bin/python -m txl_minimal.doctor in a clone
    python -m txl_minimal.doctor --quick   # without timing what amp="auto" would pick

It prints Python and the packages against requirements-dev.txt's pins and the declared floors
(requirements-min.txt, pyproject.toml), each imported (metadata alone does not say it works); the
devices and what ``device="auto"`` and ``amp="auto"`` would pick; whether text8, enwik8 and WikiText
are on disk and intact; whether the shipped files match their manifests (in a clone: the notebooks
and results/ there); free disk space where data and runs go; the Jupyter kernel the notebooks get;
then one line of advice per problem. The exit status is 1 when something a notebook needs is
missing or broken, else 0. Plain text, no colours: it pastes as it prints.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional
from collections.abc import Callable

import torch

from txl_minimal import enwik8, text8, word_corpora
from txl_minimal.checkpoint import PRETRAINED_DIR
from txl_minimal.cli import stopped_by_ctrl_c
from txl_minimal.corpora import (CorpusError, Source, cache_files, check_text, folder_in_place, text8_dir,
                                 unzip_and_check)
from txl_minimal.enwik8 import ENWIK8
from txl_minimal.safetensors_io import SafetensorsError, load_file
from txl_minimal.text8 import MINI_PATH, TEXT8
from txl_minimal.train import choose_precision, preset
from txl_minimal.utils import MANIFEST, default_device, folder_problem, read_json, shipped_file_problem
from txl_minimal.word_corpora import WIKITEXT

ROOT = Path(__file__).resolve().parents[1]  # the clone, when this is one (it has notebooks/)
SHIPPED_FOLDERS = (PRETRAINED_DIR, MINI_PATH.parent)  # the package's files, each with its MANIFEST.json
# What each kind of use installs (pyproject.toml: dependencies, the notebooks and dev extras;
# tests/test_doctor.py keeps these equal to it). The first two a notebook cannot run without.
PACKAGES = {"the package": ("torch", "numpy", "tqdm", "matplotlib"),
            "the notebooks": ("jupyterlab", "ipykernel", "ipywidgets", "seaborn"),
            "the tests": ("pytest", "nbval", "nbconvert", "nbformat")}
NOTEBOOK_NEEDS = ("the package", "the notebooks")
PYTHON_FLOOR = (3, 10)  # pyproject.toml's requires-python
KERNEL_NAME, KERNEL_DISPLAY = "python3", "Python 3 (.venv)"  # what `make lab` registers
LOW_DISK = 1 << 30  # below 1 GiB free: text8 (about 300 MB with its cache) or WikiText-103 may not fit
RULE = "-" * 78


@dataclass
class Finding:
    """One line of the report; ``advice`` says what to do when something is wrong."""

    label: str
    value: str
    advice: Optional[str] = None
    needed: bool = False  # a notebook cannot run until this is fixed: exit status 1


# ----------------------------------------------------------------------------- versions

def installed_version(name: str) -> Optional[str]:
    """The installed version of distribution ``name``, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def import_problem(name: str) -> Optional[str]:
    """None if ``import name`` works in this Python, else what it raised, in one line: a package whose
    metadata is installed may still not import (a broken or half-removed install, a missing library)."""
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 (a broken package raises anything on import)
        return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:120]}"
    return None


def version_key(version: str) -> tuple[int, ...]:
    """(major, minor, micro) of a version such as "2.13.0+cpu" or "4.0.0rc1"."""
    return tuple(int(n) for n in re.findall(r"\d+", version.split("+")[0])[:3])


def read_pins(path: Path) -> dict[str, str]:
    """{name: version} of a requirements file's ``name==version`` lines (names lower-case)."""
    if not path.is_file():
        return {}
    pins = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)\s*==\s*(\S+)", line.split("#")[0].strip())
        if m:
            pins[m[1].lower().replace("_", "-")] = m[2]
    return pins


def declared_floors() -> dict[str, str]:
    """The floors: requirements-min.txt in a clone, else the installed package's metadata."""
    floors = read_pins(ROOT / "requirements-min.txt")
    if floors:
        return floors
    try:
        requires = importlib.metadata.requires("txl-minimal") or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    for req in requires:
        m = re.match(r"^([A-Za-z0-9_.-]+)\s*>=\s*([0-9][^;,\s]*)", req)
        if m:
            floors[m[1].lower().replace("_", "-")] = m[2]
    return floors


def check_versions() -> list[Finding]:
    """Python, then every package of PACKAGES: installed, pinned, floor."""
    found = [Finding("python", f"{platform.python_version()} ({sys.executable}), {platform.platform()}")]
    if sys.version_info[:2] < PYTHON_FLOOR:
        found[0].advice = f"Python {platform.python_version()} is older than 3.10, which the package needs: " \
                          "install Python 3.10 or newer and make the venv again (make clean && make setup)"
        found[0].needed = True
    pins, floors = read_pins(ROOT / "requirements-dev.txt"), declared_floors()
    for group, names in PACKAGES.items():
        for name in names:
            have, pin, floor = installed_version(name), pins.get(name), floors.get(name)
            broken = None if have is None else import_problem(name)  # metadata there, the package broken
            shown = "missing" if have is None else have if broken is None else f"{have}, broken"
            f = Finding(name, f"{shown:<16} pin {pin or '-':<10} floor {floor or '-':<8} ({group})")
            need = group in NOTEBOOK_NEEDS
            fix = f'pip install "{name}>={floor}"' if floor else f"pip install {name}"
            if have is None:
                f.advice, f.needed = f"{name} is missing; {group} need it. Fix: make setup (a clone) or {fix}", need
            elif broken is not None:
                f.advice, f.needed = (f"{name} {have} is installed but does not import ({broken}); {group} need it. "
                                      f"Fix: reinstall it, pip install --force-reinstall \"{name}=={have}\" (a "
                                      "clone: make setup)"), need
            elif floor and version_key(have) < version_key(floor):
                f.advice, f.needed = f"{name} {have} is older than the floor {floor}. Fix: {fix}", need
            elif pin and version_key(have) != version_key(pin):
                f.advice = (f"{name} {have} is not the pinned {pin}, with which the notebooks' stored outputs "
                            "were made: numbers may differ in their last digits (make setup installs the pins)")
            found.append(f)
    return found


# ----------------------------------------------------------------------------- devices

def cpu_model() -> str:
    """The CPU's model name and its bf16 matrix units (from /proc/cpuinfo on Linux)."""
    name, flags = platform.processor() or platform.machine(), set()
    with contextlib.suppress(OSError):
        text = Path("/proc/cpuinfo").read_text()
        m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        name = m[1].strip() if m else name
        m = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
        flags = set(m[1].split()) if m else set()
    units = [unit for unit in ("amx_bf16", "avx512_bf16") if unit in flags]
    return f"{name}; bf16 matrix units: {', '.join(units) or 'none found'}"


def auto_choice(device: str) -> str:
    """What amp/attention "auto" picks for the preset notebook 04 trains here (measured)."""
    model_cfg, train_cfg = preset("gpu-small" if device.startswith("cuda") else "cpu-tiny")
    with contextlib.redirect_stdout(io.StringIO()):  # choose_precision prints; the report says it once
        choice = choose_precision(train_cfg, model_cfg, torch.device(device))
    amp = "fp32" if choice["amp"] == "off" else f"{choice['amp']} autocast"
    return f"{amp}, {'fast' if choice['fast_attn'] else 'explicit'} attention ({choice['reason']})"


def check_devices(measure: bool = True) -> list[Finding]:
    """CPU, threads, CUDA GPUs (name, capability, bf16, TF32), MPS; what "auto" would pick."""
    threads = f"torch uses {torch.get_num_threads()} of {os.cpu_count()} cores"
    threads += f" (OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']})" if "OMP_NUM_THREADS" in os.environ else ""
    found = [Finding("cpu", cpu_model()),
             Finding("threads", threads + "; the notebooks' stored outputs were made with 2")]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(i)
            tf32 = (f"TF32 matmul {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}" if major >= 8
                    else "no TF32")
            bf16 = "bf16 yes" if major >= 8 else "bf16 emulated (fp16 is this GPU's fast type)"
            found.append(Finding(f"cuda:{i}", f"{torch.cuda.get_device_name(i)}, capability {major}.{minor}, "
                                              f"{bf16}, {tf32}; torch {torch.__version__}, CUDA {torch.version.cuda}"))
    else:
        found.append(Finding("cuda", f"none visible (torch {torch.__version__}, built "
                                     f"{'with CUDA ' + torch.version.cuda if torch.version.cuda else 'for the CPU'})"))
    mps = getattr(torch.backends, "mps", None)
    found.append(Finding("mps", "available (the package does not use it: device='auto' picks CUDA or the CPU)"
                         if mps is not None and mps.is_available() else "not available"))
    device = default_device()
    found.append(Finding("device=auto", device))
    if not measure:
        found.append(Finding("amp=auto", "not measured (--quick)"))
    else:
        try:
            found.append(Finding("amp=auto", auto_choice(device)))
        except Exception as e:  # a broken driver, out of memory: say so, the rest of the report still helps
            found.append(Finding("amp=auto", f"could not be measured ({type(e).__name__}: {e})",
                                 advice=f"training on {device} failed a test step ({type(e).__name__}): "
                                        "python -m txl_minimal.train --preset cpu-tiny --device cpu still runs"))
    return found


# ----------------------------------------------------------------------------- data and files

def file_digest(path: Path, algorithm: str) -> str:
    """The hex digest of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def text8_state(d: Path) -> tuple[str, Optional[str]]:
    """(what is in ``d``, advice if it is damaged): text8's cache, its zip, its text, or nothing."""
    return _archive_state(d, TEXT8, cache_files(d, "text8", ".vocab.txt"), text8._read_cache, "its text",
                          "not downloaded; the notebooks use the shipped text8-mini on a CPU (notebook 04 downloads "
                          "text8, 31 MB, on a GPU)")


def enwik8_state(d: Path) -> tuple[str, Optional[str]]:
    """(what is in ``d``, advice if it is damaged): enwik8's cache, its zip, its file, or nothing."""
    return _archive_state(d, ENWIK8, cache_files(d, "enwik8", ".vocab.json"), enwik8._read_cache, "its ids",
                          "not downloaded (no notebook needs it)")


def _archive_state(d: Path, src: Source, files: list[Path], read: Callable, hashed: str,
                   absent: str) -> tuple[str, Optional[str]]:
    """(state, advice) of ``src`` in ``d``: its cache ``files``, read as its loader reads them (``read``;
    the MD5 of ``hashed`` verified), else its unzipped text or zip, checked as its loader checks them,
    else ``absent``."""
    if all(p.is_file() for p in files):
        problem = read(files, src)[1]
        return (f"cached and verified (MD5 of {hashed})", None) if problem is None else \
            (problem, f"load_corpus('{src.name}') rebuilds this cache from {src.zip_name}; if that fails, delete "
                      f"{d}/{src.name}.* and let it download again")
    for placed in (d / name for name in src.files):
        if placed.is_dir():  # unzip text8.zip -d text8: the loader refuses it, the fix says how to place the file
            return f"{placed.name} is a folder, not a file", folder_in_place(placed, src).split("Fix: ")[-1]
        if placed.exists():
            try:
                with warnings.catch_warnings():  # a zip of another SHA-256 is checked by its content here
                    warnings.simplefilter("ignore")
                    if placed.name == src.name:
                        check_text(placed.read_bytes(), src, d, str(placed), placed)
                    elif file_digest(placed, "sha256") != src.zip_sha256:  # a re-zipped copy may still be good
                        unzip_and_check(placed, src, d, str(placed), placed)
            except CorpusError as e:
                return f"{placed.name} damaged ({str(e).split('. Fix')[0]})", str(e).split("Fix: ")[-1]
            return f"{placed.name} verified, not yet cached", None
    return absent, None


def check_data() -> list[Finding]:
    """text8, enwik8 and WikiText in text8_dir(): absent, present and verified, or damaged (and what to do)."""
    d = text8_dir()
    problem = folder_problem(d)
    where = Finding("data folder", f"{d} (TXL_DATA_DIR sets it)" + (f": {problem}" if problem else ""),
                    None if problem is None else "set TXL_DATA_DIR to a folder you can write (it is made if missing), "
                    "or unset it: text8 and WikiText are downloaded and cached there")
    if problem is not None and not d.is_dir():  # nothing to look for inside a file
        return [where]
    state, advice = text8_state(d)
    found = [where, Finding("text8", state, advice), Finding("enwik8", *enwik8_state(d))]
    for name, src in WIKITEXT.items():
        words = cache_files(d, name, ".vocab.txt")
        if (d / src.zip_name).is_dir():
            found.append(Finding(name, f"{src.zip_name} is a folder, not a file",
                                 folder_in_place(d / src.zip_name, src).split("Fix: ")[-1]))
        elif all(p.is_file() for p in words):
            problem = word_corpora._read_cache(words, src)[1]
            found.append(Finding(name, "cached" if problem is None else problem,
                                 None if problem is None else f"delete {d}/{name}.*.npy: load_corpus('{name}') "
                                 f"rebuilds them from {src.zip_name}"))
        elif (d / src.zip_name).exists():
            md5 = file_digest(d / src.zip_name, "md5")
            ok = md5 == src.zip_md5
            found.append(Finding(name, f"{src.zip_name} " + ("verified (MD5), not yet cached" if ok else
                                                              f"damaged: MD5 {md5}, expected {src.zip_md5}"),
                                 None if ok else f"delete {d / src.zip_name} and download it again: "
                                                 f"load_corpus('{name}')"))
        else:
            found.append(Finding(name, f"not downloaded; only the {name}-base preset needs it "
                                       f"(notebook 08 uses text8-mini-words)" if name == "wt103" else
                                       "not downloaded (no notebook needs it)"))
    return found


def check_shipped() -> list[Finding]:
    """Each shipped folder's files against its MANIFEST.json; in a clone, results/'s weights and JSON."""
    found = []
    for folder in SHIPPED_FOLDERS:
        try:
            manifest = read_json(folder / MANIFEST, "")
        except (OSError, ValueError) as e:
            found.append(Finding(folder.name, f"{MANIFEST} unreadable ({str(e).split('. ')[0]})",
                                 _reinstall(folder / MANIFEST), needed=True))
            continue
        problems = {name: _shipped_problem(folder / name) for name in sorted(manifest)}
        bad = [f"{name}: {problem}" for name, problem in problems.items() if problem]
        found.append(Finding(folder.name, f"{len(manifest) - len(bad)} of {len(manifest)} files match {MANIFEST}"
                             + ("" if not bad else "; " + "; ".join(bad)),
                             _reinstall(folder / sorted(manifest)[0]) if bad else None, needed=bool(bad)))
    if (ROOT / "notebooks").is_dir():
        found.append(check_results())
    elif is_clone():  # the notebooks moved or deleted: a clone, not an installed package
        found += [Finding("notebooks", f"{ROOT / 'notebooks'} is missing from this clone", _checkout("notebooks"),
                          needed=True), check_results()]
    else:
        found.append(Finding("notebooks", "not here (an installed package): the notebooks and results/ come "
                                          "with a clone of the repository"))
    return found


def is_clone() -> bool:
    """Whether the package runs from a clone of the repository (its pyproject.toml or .git beside it),
    not from an installed copy (site-packages holds neither)."""
    return (ROOT / "pyproject.toml").is_file() or (ROOT / ".git").exists()


def _shipped_problem(path: Path) -> Optional[str]:
    """``shipped_file_problem``, "missing", or where the manifest's entry is the damaged one, that."""
    if not path.exists():
        return "missing"
    try:
        return shipped_file_problem(path)
    except ValueError as e:  # utils.ManifestDamaged: the file may well be intact
        return str(e).split(" Fix:")[0].replace(str(path.parent / MANIFEST), MANIFEST)


def check_results() -> Finding:
    """results/: the weights notebooks 03, 05, 06 and 08 load, and the JSON they read, each readable."""
    results = ROOT / "results"
    files = sorted([*results.glob("**/*.safetensors"), *results.glob("**/*.json")])
    bad = []
    for path in files:
        try:
            load_file(path) if path.suffix == ".safetensors" else json.loads(path.read_text())
        except (OSError, ValueError, SafetensorsError) as e:
            bad.append(f"{path.relative_to(ROOT)} ({type(e).__name__}: {str(e)[:80]})")
    if not files:
        return Finding("results", f"{results} holds no results", _checkout("results"), needed=True)
    return Finding("results", f"{len(files) - len(bad)} of {len(files)} weight and JSON files readable"
                   + ("" if not bad else "; damaged: " + ", ".join(bad)),
                   _checkout("results") if bad else None, needed=bool(bad))


def _reinstall(path: Path) -> str:
    if (ROOT / ".git").exists() and path.resolve().is_relative_to(ROOT):
        return f"restore the shipped files: git checkout -- {path.parent.relative_to(ROOT)} (in {ROOT})"
    return "reinstall the package: pip install --force-reinstall txl-minimal"


def _checkout(folder: str) -> str:
    return f"restore them: git checkout -- {folder} (in {ROOT})"


def free_space(path: Path) -> int:
    """Free bytes on the disk that holds ``path`` (or its nearest existing parent)."""
    path = Path(path).absolute()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


def check_disk() -> list[Finding]:
    """Free space where text8 / WikiText go (text8_dir) and where runs go (./runs)."""
    found = []
    for label, where in (("disk, data", text8_dir()), ("disk, runs", Path.cwd() / "runs")):
        if (problem := folder_problem(where)) is not None:  # no free space to speak of where nothing can be written
            found.append(Finding(label, f"{where}: {problem}" + (" (see data folder)" if label == "disk, data" else ""),
                                 None if label == "disk, data" else  # (advised once, under data)
                                 "train with --out naming a folder you can write (runs go to ./runs/ by default)"))
            continue
        free = free_space(where)
        found.append(Finding(label, f"{free / 2**30:.1f} GiB free at {where}",
                             f"only {free / 2**30:.2f} GiB free at {where}: text8 and its cache take about "
                             "0.3 GB, WikiText-103 about 1 GB; set TXL_DATA_DIR to a larger disk"
                             if free < LOW_DISK else None))
    return found


# ----------------------------------------------------------------------------- Jupyter

def kernel_specs() -> dict:
    """Jupyter's kernel specs ({name: {"resource_dir", "spec"}}), or {} without jupyter_client."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager
    except ImportError:
        return {}
    return KernelSpecManager().get_all_specs()


def kernel_python(spec: dict) -> str:
    """The Python a kernel spec runs; "python" and "python3" mean Jupyter's own (jupyter_client)."""
    exe = spec["spec"]["argv"][0]
    major, minor = sys.version_info[:2]
    return sys.executable if exe in ("python", f"python{major}", f"python{major}.{minor}") else exe


def imports_txl_minimal(python: str) -> Optional[str]:
    """None if ``python`` imports txl_minimal, else what it said (its last line)."""
    try:
        run = subprocess.run([python, "-c", "import txl_minimal"], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{type(e).__name__}: {e}"
    if run.returncode == 0:
        return None
    return (run.stderr.strip().splitlines() or ["exit status " + str(run.returncode)])[-1]


def check_jupyter() -> list[Finding]:
    """The kernel the notebooks ask for ("python3"): which Python it runs, and whether that Python
    imports txl_minimal; whether `make lab`'s "Python 3 (.venv)" is registered."""
    specs = kernel_specs()
    if not specs:
        return [Finding("kernel", "no Jupyter kernels (jupyter_client or ipykernel missing)",
                        "install the notebooks' packages: make setup, or pip install -e \".[notebooks]\"",
                        needed=True)]
    names = ", ".join(f"{n} ({s['spec'].get('display_name', '?')})" for n, s in sorted(specs.items()))
    found = [Finding("kernels", names)]
    if KERNEL_NAME not in specs:
        found.append(Finding("kernel", f"none named {KERNEL_NAME}, which the notebooks ask for",
                             "register it: make lab, or python -m ipykernel install --sys-prefix --name python3 "
                             f"--display-name \"{KERNEL_DISPLAY}\"", needed=True))
        return found
    python = kernel_python(specs[KERNEL_NAME])
    same = Path(python).exists() and Path(python).resolve() == Path(sys.executable).resolve()
    problem = None if same else imports_txl_minimal(python)
    found.append(Finding("kernel", f"{KERNEL_NAME} runs {python}" + (" (this Python)" if same else "")
                         + ("" if problem is None else f", which cannot import txl_minimal ({problem})"),
                         None if problem is None else "register this Python as the notebooks' kernel: make lab, or "
                         "python -m ipykernel install --sys-prefix --name python3 "
                         f"--display-name \"{KERNEL_DISPLAY}\"", needed=problem is not None))
    registered = [n for n, s in sorted(specs.items()) if s["spec"].get("display_name") == KERNEL_DISPLAY]
    venv = (ROOT / ".venv").is_dir()  # a clone set up by make: make lab registers .venv's kernel
    found.append(Finding("make lab", f"\"{KERNEL_DISPLAY}\" " + (f"registered (as {', '.join(registered)})"
                                                               if registered else "not registered"),
                         "make lab registers it (the kernel of .venv, which has every pinned package)"
                         if venv and not registered else None))
    return found


# ----------------------------------------------------------------------------- the report

def about() -> list[Finding]:
    """This package: its version and where it is; in a clone, the commit."""
    import txl_minimal
    where = f"{txl_minimal.__version__}, {Path(txl_minimal.__file__).parent}"
    if (ROOT / ".git").exists():
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            head = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                                  capture_output=True, text=True, timeout=30).stdout.strip()
            where += f" (a clone at {head})" if head else ""
    return [Finding("txl_minimal", where)]


SECTIONS: dict[str, Callable[..., list[Finding]]] = {
    "": about, "versions": check_versions, "devices": check_devices, "data": check_data,
    "shipped files": check_shipped, "disk": check_disk, "jupyter": check_jupyter}


def report(measure: bool = True) -> tuple[str, int]:
    """(the block to paste, the exit status: 1 if a notebook needs something fixed, else 0)."""
    lines = ["txl_minimal doctor: paste everything between the two rules into the issue", RULE]
    problems: list[Finding] = []
    for title, check in SECTIONS.items():
        found = check(measure) if check is check_devices else check()
        if title:
            lines.append(f"{title}:")
        for f in found:
            lines.append(f"  {f.label:<13} {f.value}")
        problems += [f for f in found if f.advice]
    needed = [f for f in problems if f.needed]
    lines.append(f"problems: {len(problems)}" + (f" ({len(needed)} that a notebook needs fixed)" if needed else ""))
    for f in sorted(problems, key=lambda f: not f.needed):
        lines.append(f"  {'NEEDED' if f.needed else 'advice'} {f.label}: {f.advice}")
    lines.append(RULE)
    return "\n".join(lines), 1 if needed else 0


def main(argv: Optional[list[str]] = None) -> None:
    """python -m txl_minimal.doctor [--quick]"""
    p = argparse.ArgumentParser(prog="python -m txl_minimal.doctor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="do not time what amp='auto' would pick")
    args = p.parse_args(argv)
    try:
        text, status = report(measure=not args.quick)
    except KeyboardInterrupt as e:  # (the timing of amp="auto" takes a while)
        stopped_by_ctrl_c(e, "stopped by Ctrl-C: nothing was written (--quick skips the timing)")
    print(text)
    sys.exit(status)


if __name__ == "__main__":
    main()
