"""Notebook 09's experiment: does memory pay more on code than on text8? Its definition and results.

A character Transformer-XL of the ``cpu-small`` shape (4 layers, d_model 128, segments of 64) is
trained for the same steps on two texts of a few million characters: text8-mini (Wikipedia
prose, 27 symbols) and Python's standard library (its top-level modules, one file after another: code,
which names things far from where it uses them). On each text three models differ only in the
memory they are trained with (``TRAIN_MEMS``: none, the segment's length, four segments), and
those of ``SEED_MEMS`` are trained again with a second seed; each is scored on the first
``EVAL_CHARS`` characters of its text's test split with every evaluation memory of ``EVAL_MEMS``.
The per-character losses are kept as means over blocks of ``BLOCK`` characters, in text order, so that any two
scorings of the same characters can be compared with a paired standard error
(neighbouring characters' losses correlate; ``paired_blocks`` takes the standard error over means
of ``SE_GROUP`` blocks, which correlate much less).

Running it is not the package's job: scripts/own_text.py trains and scores every model and writes
RESULTS_DIR (results/own_text/: results.json, each run's log.csv, the weights the notebook reads,
and the code test split, so that the scores re-run on any Python); this module defines the runs,
builds the code corpus and reads the results.

    python scripts/own_text.py --replace-shipped    # ~3 h on 2 CPU cores (then --seed 1 --mems 0 64)
    python scripts/own_text.py --steps 3 --out /tmp/own   # a smoke test
"""
from __future__ import annotations

import gzip
import sys
import sysconfig
from pathlib import Path

import numpy as np

from txl_minimal import stats, validation
from txl_minimal.utils import atomic_write_text, read_json, refuse_empty_path

RESULTS_DIR = Path(__file__).resolve().parents[2] / "results" / "own_text"
CORPORA = ("code", "text8-mini")  # the standard library's code; Wikipedia prose
TRAIN_MEMS = (0, 64, 256)  # memory in training: none, one segment, four segments
EVAL_MEMS = (0, 64, 256, 1024)  # memory at evaluation (the segment stays 64)
EVAL_CHARS = 131_072  # the first 128 Ki characters of each test split are scored (256 blocks)
SEED_MEMS = (0, 64)  # trained again with seed 1: how far another seed moves the savings
STEPS = 3000
BLOCK = 512  # characters per block of the stored losses
SE_GROUP = 8  # paired SEs over means of 8 blocks, 4,096 characters (lag-1 correlation of the
# savings: 0.2-0.25 between blocks of 512, 0.0 (code) and 0.2 (text8) between groups of 8)
PRESET = "cpu-small"


def stdlib_files(root: str | Path | None = None) -> list[Path]:
    """The top-level modules of Python's standard library (``root``: its folder; default: this
    Python's), sorted by name: about 170 files and 4.7 MB of code on Python 3.11."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.is_file())
    if not files:
        raise FileNotFoundError(f"no .py files in {root}: is it Python's standard library? Fix: pass the folder "
                                "of your Python's standard library (sysconfig.get_paths()['stdlib']) or a text file")
    return files


def write_stdlib_text(path: str | Path, root: str | Path | None = None) -> Path:
    """Write the standard library's top-level modules, one after another, as one UTF-8 text file
    at ``path`` (a corpus for ``load_corpus``); returns the path. Files that are not UTF-8 are skipped;
    a file already holding that text is left as it is."""
    parts = []
    for file in stdlib_files(root):
        try:
            parts.append(file.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            continue
    refuse_empty_path(path, "write_stdlib_text's path")
    path, text = Path(path), "".join(p if p.endswith("\n") else p + "\n" for p in parts)
    if path.is_file() and path.stat().st_size == len(text.encode("utf-8")) and path.read_text(encoding="utf-8") == text:
        return path  # unchanged: not rewritten, so load_corpus's cache of it stays valid
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return path


def run_name(corpus: str, mem_len: int, seed: int = 0) -> str:
    """A run's folder and key in results.json, e.g. "code-m64" (seed 0) or "code-m64-s1"."""
    if corpus not in (*CORPORA, "text8"):
        raise ValueError(f"run_name: corpus must be one of {CORPORA} ('text8' for short), got {corpus!r}")
    mem_len, seed = (validation.count(v, name, "run_name", 0) for name, v in (("mem_len", mem_len), ("seed", seed)))
    return f"{'code' if corpus == 'code' else 'text8'}-m{mem_len}" + (f"-s{seed}" if seed else "")


def block_means(nll: np.ndarray, block: int = BLOCK) -> np.ndarray:
    """Means of consecutive blocks of ``block`` losses (the last, shorter block dropped): ``stats.block_means``."""
    return stats.block_means(nll, block)


def paired_blocks(a: np.ndarray, b: np.ndarray, group: int = 1) -> tuple[float, float]:
    """Mean of ``a - b`` (block means of the same characters) and its standard error, computed
    over means of ``group`` consecutive blocks (``SE_GROUP``: neighbouring blocks of 512 still
    correlate, groups of eight, 4,096 characters, much less); a last partial group is dropped
    (``stats.paired_difference(a, b, group, bits=False, drop_partial=True)``)."""
    paired = stats.paired_difference(a, b, group, bits=False, drop_partial=True)
    return paired.mean, paired.se


def memory_savings(runs: dict, mem_len: int = 64, seed: int = 0) -> list[float]:
    """[code, text8]: bits per character saved by the model trained and evaluated with ``mem_len``
    against the one trained and evaluated without memory (both of training seed ``seed``), on the
    same test characters (block means)."""
    mem_len, seed = (validation.count(v, name, "memory_savings", 0) for name, v in (("mem_len", mem_len),
                                                                                     ("seed", seed)))
    needed = [run_name(t, m, seed) for t in ("code", "text8") for m in (0, mem_len)]
    validation.has_keys(runs, needed, "runs", "memory_savings", f"load_results()['runs'], which holds the runs trained "
                        f"(memories {TRAIN_MEMS}; seed 1 for {SEED_MEMS}), or train the missing one with "
                        "scripts/own_text.py")
    for t in ("code", "text8"):
        for m in {0, mem_len}:
            blocks = runs[run_name(t, m, seed)].get("blocks", {})
            if m not in blocks:
                raise ValueError(f"memory_savings: run {run_name(t, m, seed)} was not scored with an evaluation "
                                 f"memory of {m} (it was with {sorted(blocks)}). Fix: a mem_len of {TRAIN_MEMS}")
    return [round(paired_blocks(runs[run_name(t, 0, seed)]["blocks"][0],
                                runs[run_name(t, mem_len, seed)]["blocks"][mem_len])[0], 3) for t in ("code", "text8")]


def code_test_path(results_dir: str | Path = RESULTS_DIR) -> Path:
    """The code test split shipped with the results (so the scores re-run on any Python)."""
    return Path(results_dir) / "code-test.txt.gz"


def read_code_test(results_dir: str | Path = RESULTS_DIR) -> str:
    """The code test split as text."""
    refuse_empty_path(results_dir, "read_code_test's results_dir")
    path = code_test_path(results_dir)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing. Fix: git checkout results/own_text (it ships the code test "
                                f"split), or run {sys.executable.rsplit('/', 1)[-1]} scripts/own_text.py --out "
                                f"{results_dir}")
    try:
        return gzip.decompress(path.read_bytes()).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as e:  # gzip's BadGzipFile is an OSError
        raise ValueError(f"{path} is damaged ({type(e).__name__}). Fix: git checkout -- {path}") from None


def load_results(path: str | Path = RESULTS_DIR / "results.json") -> dict:
    """results.json as scripts/own_text.py wrote it (block means as NumPy arrays)."""
    refuse_empty_path(path, "load_results' path")
    path = Path(path)
    fix = (f"git checkout results/own_text, or run {sys.executable.rsplit('/', 1)[-1]} scripts/own_text.py "
           "--replace-shipped")
    if path.is_dir():
        raise ValueError(f"{path} is a folder, not results.json. Fix: {path / 'results.json'}")
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing. Fix: {fix}")
    results = read_json(path, f"Fix: {fix}")  # a damaged file: a sentence naming it, not the decoder's traceback
    validation.has_keys(results, ("runs",), str(path), "load_results", fix)
    for run in results["runs"].values():
        run["blocks"] = {int(m): np.asarray(v) for m, v in run["blocks"].items()}
        run["test_bpc"] = {int(m): v for m, v in run["test_bpc"].items()}
    return results
