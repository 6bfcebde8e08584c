"""The GPU journey in one command: train a small Transformer-XL and its vanilla twin on a GPU, execute
notebook 04 there, run the GPU tests, time this checkout against the commit before the GPU levers, and
score the pair; every part rehearsed on a CPU by tests/test_gpu_journey.py.

    python scripts/gpu_journey.py                        # on a CUDA machine: every part, into runs/gpu-journey/
    python scripts/gpu_journey.py --detach --wait 540    # the same in the background; returns within 9 minutes
    python scripts/gpu_journey.py --status --wait 300    # progress; waits up to 300 s for the end
    python scripts/gpu_journey.py                        # again: done parts are skipped, a cut training resumes
    python scripts/gpu_journey.py --ship runs/gpu-journey --to shipped     # txl-gpu, vanilla-gpu (float16)
    python scripts/gpu_journey.py --pack OUT             # the results as at most 3 files (no checkpoints)
    python scripts/gpu_journey.py --prepare              # where git is: .gpu-journey/ (the base tree, the commit)
    python scripts/gpu_journey.py --device cpu --tiny    # the rehearsal: the same parts at toy sizes on a CPU

The parts, in the order of priority; each runs as background processes of this one launch and writes
RESULTS/<part>/ (with a run.json naming the commit, the GPU, torch, the commands and their wall times):
  pair      Transformer-XL at gpu-small's shape and its vanilla twin (attn_type abs, mem_len 0; same sizes,
            data, steps and seed) side by side on text8-mini. The step count is measured, not guessed: both
            train PROBE steps (inside the warm-up, so the schedule does not depend on the total), the speed of
            the slower over their last rows gives what fits --train-minutes, at most gpu-small's 24 passes over
            text8-mini (sized_to_corpus); both then --resume to it.
  nb04      notebook 04 executed cell by cell beside the pair (scripts/run_notebook.py), written after every
            cell, with each cell's time, into RESULTS/nb04/ (its cells run there; notebooks/ is not touched).
  test-gpu  make test-gpu once the pair is done, without its notebook test (nb04 is that run); summary kept.
  compare   benchmarks/gpu_compare.py against --base (default BASE_COMMIT), one shape at a time (a JSON each),
            alone on the GPU once every other part has ended.
  score     once the pair is done: its best.pt on the test split at memory 0, as trained, 512, 1,024, 2,048,
            the authors' text8 evaluation (tgt_len 80, mem_len 1,024, clamp_len 820, same_length); the vanilla
            twin as trained and by a sliding window; batch 1; every prediction's NLL kept as .npy (float32),
            differences paired on the same characters.

Cut (a time limit, Ctrl-C, SIGTERM): every process gets one SIGTERM (a training saves its step), finished
parts stay, and the last line names the command that finishes the rest: the same one, which skips what is
done, resumes a cut training (--resume) and re-runs a cut notebook, test run or comparison from its start.
Exit status: 0 every part done, 1 a part failed, 2 refused at the start, 3 cut before the end.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # --ship, --pack and the scores import txl_minimal from this checkout
PREPARED = ROOT / ".gpu-journey"  # --prepare writes base/ (the base commit's txl_minimal) and source.json
# The last commit before the GPU levers: main when issue 30 began; every issue-30 branch started from it, 35c88ea
# (section 4's levers: no host sync, fused Adam, torch.compile) among them (git log --graph a41eba0).
BASE_COMMIT = "1ca0d58"
PARTS = ("pair", "nb04", "test-gpu", "compare", "score")  # the order of priority
TWINS = {"txl": [], "vanilla": ["attn_type=abs", "mem_len=0"]}  # name -> --set beyond the pair's own
SHIPPED = {"txl": "txl-gpu", "vanilla": "vanilla-gpu"}
NOTEBOOK = ROOT / "notebooks" / "04_training_text8.ipynb"
NB_NEEDS = ("nbclient", "nbformat", "ipykernel", "matplotlib")
WHEELS, SITE = ROOT / ".whl", Path("/tmp/site")  # scripts/gpu_wheels.sh's folders
SHAPES = ("gpu-small", "4L-d256", "paper-base", "wt103-base")  # gpu_compare's shapes, the pair's first
MAX_SHIPPED_MB = 15
# the options a rerun of the same results folder keeps from its first run (journey.json), and their defaults
RESTORED = dict(device="cuda", tiny=False, train_minutes=None, skip=[], base=BASE_COMMIT, base_tree=None,
                compare_args="")
DETACHED = "GPU_JOURNEY_DETACHED"  # set in the environment of a journey started by --detach
RUN = f"{'python' if shutil.which('python') else 'python3'} scripts/gpu_journey.py"  # as the hints name it
GRACE = 60  # seconds a stopped process has to save its step before it is killed
SCORE_BLOCK = 1000  # paired differences: standard errors over blocks of this many characters (pretrained.BLOCK)


def settings(tiny: bool, device: str, found: dict) -> dict:
    """The journey's sizes: the real ones, or --tiny's (a toy model, a few steps, notebook 04's first cells)."""
    if tiny:  # (warm-up = probe: the probe's steps follow the same schedule whatever the total)
        toy = ["lr=3e-3", "n_layer=2", "n_head=2", "d_model=32", "d_head=16", "d_inner=64", "tgt_len=16", "mem_len=16",
               "batch_size=4", "warmup_steps=12", "eval_tokens=512", "eval_batch_size=4", "amp=off"]
        return dict(log_interval=2, probe=12, cap=40, cap_why="--tiny's", minutes=0.1, threads=1, score_tokens=2_000,
                    nb_cells=4, sets=toy, shapes=["tiny"], compare=["--quick", "--threads", "1", "--levers", "none"])
    amp = ["amp=bf16"] if device.startswith("cuda") and found.get("bf16") else []  # the pair in one precision
    return dict(log_interval=50, probe=300, cap=found.get("cap"), cap_why="gpu-small's 24 passes over text8-mini",
                minutes=6.0, threads=max(1, (found.get("cpus") or 4) // 4), score_tokens=None, nb_cells=None,
                sets=amp, shapes=list(SHAPES), compare=["--levers", "none", "--reps", "1"])


# ----------------------------------------------------------------------------- small helpers

def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def write_json(path: Path, value: dict) -> None:
    """``value`` as JSON at ``path``, through a temporary name (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(value, indent=1) + "\n")
    tmp.replace(path)


def read_json(path: Path) -> Optional[dict]:
    """The JSON object at ``path``, or None if there is none (or it is not one)."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def log_rows(run_dir: Path) -> list[dict]:
    """A training's log.csv as rows of numbers (step, wall_time_s, valid_bpc or None)."""
    try:
        with open(run_dir / "log.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return []
    out = []
    for r in rows:
        try:
            out.append(dict(step=int(r["step"]), wall_time_s=float(r["wall_time_s"]), train_bpc=float(r["train_bpc"]),
                            valid_bpc=float(r["valid_bpc"]) if r["valid_bpc"] else None))
        except (KeyError, TypeError, ValueError):  # a line cut by a kill
            continue
    return out


def last_run(log: Path) -> list[str]:
    """The lines a log holds since its last command (each run of a part appends "$ command" and its output)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return []
    starts = [i for i, line in enumerate(lines) if line.startswith("$ ")]
    return lines[starts[-1] + 1:] if starts else lines


def last_step(run_dir: Path) -> int:
    rows = log_rows(run_dir)
    return rows[-1]["step"] if rows else 0


def alive(pid: Optional[int]) -> bool:
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def commit_info() -> dict:
    """This checkout's commit: from git, else from .gpu-journey/source.json (--prepare), else unknown."""
    if (ROOT / ".git").exists() and shutil.which("git"):
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        if head.returncode == 0:
            dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True).stdout.strip()
            return dict(commit=head.stdout.strip() + ("+changes" if dirty else ""), source="git")
    prepared = read_json(PREPARED / "source.json")
    if prepared and prepared.get("commit"):
        return dict(commit=prepared["commit"], source=f"{PREPARED / 'source.json'}, --prepare {prepared.get('date')}")
    return dict(commit="unknown", source="no .git here and no .gpu-journey/source.json (--prepare writes it)")


# ----------------------------------------------------------------------------- --prepare, the start-up check

def prepare(base: str) -> Path:
    """.gpu-journey/: base/ (``base``'s txl_minimal without its shipped models and corpus: what gpu_compare imports)
    and source.json (this checkout's commit), for a GPU machine that gets the working tree without .git."""
    if not shutil.which("git") or not (ROOT / ".git").exists():
        raise SystemExit("--prepare needs git and this checkout's history; run it where the repository was cloned.")
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", f"{base}^{{commit}}"], capture_output=True,
                         text=True)
    if sha.returncode != 0:
        raise SystemExit(f"commit {base} is not in this clone's history (a shallow clone?): git fetch --unshallow, "
                         "or pass --base-tree DIR to the journey.")
    raw = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", base, "--", "txl_minimal",
                          ":(exclude)txl_minimal/pretrained", ":(exclude)txl_minimal/corpus"],  # (random ids: 0.4 MB)
                         capture_output=True, check=True).stdout
    tmp = PREPARED / "base.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        tar.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    shutil.rmtree(PREPARED / "base", ignore_errors=True)
    tmp.replace(PREPARED / "base")
    mine = commit_info()
    write_json(PREPARED / "source.json", dict(commit=mine["commit"], base=sha.stdout.strip(), base_ref=base,
                                              date=now()))
    return PREPARED / "base"


def base_tree(opts) -> tuple[Optional[Path], str]:
    """The tree gpu_compare times against, and a line saying where it came from (prepared now if git can)."""
    if opts.base_tree:
        return Path(opts.base_tree).resolve(), f"{opts.base_tree} (--base-tree)"
    source = read_json(PREPARED / "source.json") or {}
    if (PREPARED / "base" / "txl_minimal").is_dir() and source.get("base_ref") == opts.base:
        return PREPARED / "base", f"{opts.base} ({source.get('base')}) in .gpu-journey/base, {source.get('date')}"
    if (ROOT / ".git").exists() and shutil.which("git"):
        return prepare(opts.base), f"{opts.base}, just prepared from git into .gpu-journey/base"
    return None, (f"missing: no .gpu-journey/base of {opts.base} and no git history here to make it")


CHECK = r'''
import importlib.util, json, os, platform, sys
out = dict(python=platform.python_version(), executable=sys.executable, cpus=os.cpu_count(), modules={})
for name in ("nbclient", "nbformat", "ipykernel", "matplotlib", "pytest", "numpy", "triton"):
    if importlib.util.find_spec(name) is None:
        out["modules"][name] = None
        continue
    try:
        from importlib.metadata import version
        out["modules"][name] = version(name)
    except Exception:
        out["modules"][name] = "?"
try:
    import torch
except Exception as e:
    out["torch_error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(out))
    sys.exit()
out.update(torch=torch.__version__, cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
if out["cuda_available"]:
    free, total = torch.cuda.mem_get_info()
    out.update(gpu=torch.cuda.get_device_name(0), gpus=torch.cuda.device_count(), free_gib=free / 2 ** 30,
               total_gib=total / 2 ** 30, capability=list(torch.cuda.get_device_capability(0)),
               bf16=torch.cuda.is_bf16_supported())
try:
    import txl_minimal
    from txl_minimal.data import load_corpus
    from txl_minimal.presets import sized_to_corpus
    from txl_minimal.train import preset
    out["txl_minimal"] = txl_minimal.__file__
    if "--tiny" not in sys.argv:  # gpu-small's steps on text8-mini: its 24 passes (sized_to_corpus)
        model_cfg, cfg = preset("gpu-small", corpus="text8-mini")
        out["cap"] = sized_to_corpus("gpu-small", model_cfg, cfg, load_corpus("text8-mini"))[0].max_steps
except Exception as e:
    out["txl_minimal_error"] = f"{type(e).__name__}: {str(e)[:300]}"
print(json.dumps(out))
'''


def child_env(site: Optional[Path], threads: int) -> dict:
    """The parts' environment: this checkout (and the wheels' folder) first on PYTHONPATH, no progress bars,
    headless figures, ``threads`` CPU threads each; $TXL_CORPUS left out (the pair and the scores read text8-mini)."""
    paths = [str(ROOT), *([str(site)] if site else []), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1", TQDM_DISABLE="1",
               MPLBACKEND="Agg", OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    env.pop("TXL_CORPUS", None)
    return env


def check(env: dict, tiny: bool) -> dict:
    """What the parts' python finds: its version, torch, CUDA and the GPU, the modules, txl_minimal's place."""
    res = subprocess.run([sys.executable, "-c", CHECK, *(["--tiny"] if tiny else [])], env=env, capture_output=True,
                         text=True, cwd=ROOT)
    if res.returncode != 0 or not res.stdout.strip():
        raise SystemExit(f"the start-up check could not run {sys.executable}: {res.stderr.strip()[-500:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def install_wheels() -> Optional[str]:
    """scripts/gpu_wheels.sh install (no network), where .whl/ holds wheels; what it did, or None."""
    if not list(WHEELS.glob("*.whl")):
        return None
    res = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_wheels.sh"), "install"], capture_output=True, text=True,
                         env=dict(os.environ, PY=sys.executable, SITE=str(SITE)))
    if res.returncode != 0:
        return f"scripts/gpu_wheels.sh install failed: {res.stderr.strip()[-300:]}"
    return f"installed {len(list(WHEELS.glob('*.whl')))} wheels from .whl/ into {SITE}"


def refusal(found: dict, opts, base: Optional[Path] = ROOT) -> Optional[str]:
    """The one sentence that stops the journey before it starts, or None (``base``: gpu_compare's tree)."""
    py, missing = found.get("executable", sys.executable), [m for m, v in found["modules"].items() if v is None]
    if "torch_error" in found:
        return f"torch does not import in {py} ({found['torch_error']}): install it, or run this with another python."
    if opts.device.startswith("cuda") and not found.get("cuda_available"):
        return (f"no CUDA GPU here (torch {found['torch']} sees none): on a CPU, "
                "python scripts/gpu_journey.py --device cpu --tiny rehearses the journey.")
    if "txl_minimal_error" in found:
        return f"txl_minimal does not import from {ROOT} ({found['txl_minimal_error']})."
    if not str(found.get("txl_minimal", "")).startswith(str(ROOT)):
        return (f"{py} imports txl_minimal from {found.get('txl_minimal')}, not from this checkout ({ROOT}): "
                "uninstall that copy or run from the checkout it belongs to.")
    nb = [m for m in NB_NEEDS if m in missing]
    if "nb04" in opts.parts and nb:
        return (f"notebook 04 needs {', '.join(NB_NEEDS)} and {', '.join(nb)} cannot be imported: bring nbclient, "
                "nbformat and ipykernel as wheels (scripts/gpu_wheels.sh download where PyPI is reachable, then carry "
                ".whl/ along: the journey installs them), or leave notebook 04 out with --skip nb04.")
    if "test-gpu" in opts.parts and "pytest" in missing:
        return f"make test-gpu needs pytest, which {py} cannot import: pip install pytest, or --skip test-gpu."
    if "compare" in opts.parts and base is None:
        return (f"gpu_compare needs the tree of {opts.base} and this checkout has no git history to make it: where git "
                "is, run python scripts/gpu_journey.py --prepare and carry .gpu-journey/ along (or pass --base-tree "
                "DIR, or --skip compare).")
    return None


def report(found: dict, commit: dict, base_line: str, wheels: Optional[str], opts) -> list[str]:
    """What the start-up check found, one line a thing."""
    m = found["modules"]
    lines = [f"commit   {commit['commit']} ({commit['source']})",
             f"python   {found['python']} ({found['executable']}), {found['cpus']} CPU cores"]
    if "torch" in found:
        lines.append(f"torch    {found['torch']}, CUDA {found['cuda'] or 'none'}"
                     + (f", triton {m['triton']}" if m.get("triton") else ", no triton (no torch.compile on CUDA)"))
    if found.get("cuda_available"):
        lines.append(f"GPU      {found['gpu']} (x{found['gpus']}), {found['free_gib']:.1f} of {found['total_gib']:.1f} "
                     f"GiB free, compute capability {'.'.join(map(str, found['capability']))}, bf16 "
                     f"{'yes' if found['bf16'] else 'no'}")
    else:
        lines.append(f"GPU      none (--device {opts.device})")
    lines.append("wheels   " + ", ".join(f"{k} {m[k] or 'MISSING'}" for k in NB_NEEDS + ("pytest",))
                 + (f" ({wheels})" if wheels else ""))
    lines.append(f"base     {base_line}")
    return lines


# ----------------------------------------------------------------------------- the journey

def make_plan(rows: dict[str, list[dict]], probe: int, log_interval: int, budget_s: float, cap: Optional[int],
              cap_why: str = "") -> dict:
    """The pair's step count from its probe's log rows: the slower twin's speed over its rows from step
    2 x log_interval to probe - log_interval (the first rows hold compiling, the last one an evaluation),
    so that probe + (budget - the probe's training time) x that speed steps are trained; at most ``cap``,
    at least one log interval more than the probe, a multiple of log_interval. Returns the plan (a dict)."""
    rates, spent = {}, {}
    for name, rs in rows.items():
        steady = [r for r in rs if 2 * log_interval <= r["step"] <= probe - log_interval]
        if len(steady) < 2:
            raise ValueError(f"the {name} probe's log has {len(steady)} rows between steps {2 * log_interval} and "
                             f"{probe - log_interval}; it needs 2")
        dt = steady[-1]["wall_time_s"] - steady[0]["wall_time_s"]
        rates[name] = (steady[-1]["step"] - steady[0]["step"]) / dt if dt > 0 else float("inf")
        spent[name] = max(r["wall_time_s"] for r in rs if r["step"] <= probe)
    slow = min(rates, key=rates.get)
    fits = probe + (budget_s - max(spent.values())) * rates[slow]
    steps = int(min(fits, cap if cap is not None else fits)) // log_interval * log_interval
    steps = max(probe + log_interval, steps)
    why = (f"{rates[slow]:.2f} steps/s ({slow}, the slower) fit {fits:,.0f} steps in {budget_s:.0f} s of training"
           + (f"; capped at {cap:,} ({cap_why})" if cap is not None and fits > cap else ""))
    return dict(steps=steps, eval_interval=max(log_interval, steps // 8 // log_interval * log_interval),
                steps_per_s={k: round(v, 3) for k, v in rates.items()}, probe_steps=probe, probe_train_s=spent,
                budget_s=budget_s, cap=cap, why=why)


class Journey:
    """One launch: the parts as threads, each running its processes (a session each, so that a stop reaches
    each once) and writing RESULTS/<part>/ when it ends."""

    def __init__(self, results: Path, opts, found: dict, commit: dict, base: Optional[Path], env: dict):
        self.results, self.opts, self.found, self.commit, self.base, self.env = results, opts, found, commit, base, env
        self.s = settings(opts.tiny, opts.device, found)
        if opts.train_minutes is not None:
            self.s["minutes"] = opts.train_minutes
        self.lock = threading.Lock()
        self.children: dict[int, tuple[str, subprocess.Popen]] = {}
        self.cutting: Optional[str] = None
        self.signalled: Optional[int] = None
        self.status: dict[str, str] = {}
        self.notes: dict[str, str] = {}
        self.threads: dict[str, threading.Thread] = {}
        self.saving = threading.Lock()
        corpus = os.environ.get("TXL_CORPUS")  # the notebook as a reader runs it: $TXL_CORPUS is theirs
        self.nb_env = dict(env, **({"TXL_CORPUS": corpus} if corpus else {}))

    # --- bookkeeping
    def about(self) -> dict:
        """What every run.json names: the commit, the machine, torch."""
        f = self.found
        return dict(commit=self.commit["commit"], gpu=f.get("gpu"), torch=f.get("torch"), cuda=f.get("cuda"),
                    python=f.get("python"), host=platform.node(), device=self.opts.device, tiny=self.opts.tiny)

    def save(self, state: str = "running") -> None:
        """journey.json: the parts' states, this process and its children (what --status reads)."""
        with self.saving:
            journal = read_json(self.results / "journey.json") or {}
            children = {str(pid): part for pid, (part, _) in self.children.items()}
            journal.update(state=state, pid=os.getpid(), updated=now(), parts=dict(self.status),
                           notes=dict(self.notes), children=children)
            write_json(self.results / "journey.json", journal)

    def record(self, run_dir: Path, **fields) -> dict:
        """Update ``run_dir``/run.json with ``fields`` (a "command" is appended to its "commands")."""
        run = read_json(run_dir / "run.json") or dict(self.about(), commands=[])
        if "command" in fields:
            run["commands"].append(fields.pop("command"))
            run["wall_s"] = round(sum(c["seconds"] for c in run["commands"]), 1)
        run.update(self.about(), **fields)
        write_json(run_dir / "run.json", run)
        return run

    # --- processes
    def run(self, part: str, jobs: list[tuple[list[str], Path, Path]], cwd: Path = ROOT,
            env: Optional[dict] = None) -> Optional[list[int]]:
        """Start every job (argv, log file, run folder for its run.json) at once, each a session of its own, and
        wait for all. Their exit statuses (-N: stopped by signal N); None if the journey is being cut."""
        started = []
        with self.lock:
            if self.cutting:
                return None
            for argv, log, run_dir in jobs:
                log.parent.mkdir(parents=True, exist_ok=True)
                with open(log, "ab") as f:
                    f.write(f"\n$ {shlex.join(argv)}   # {now()}\n".encode())
                    f.flush()
                    p = subprocess.Popen(argv, cwd=cwd, env=env or self.env, stdout=f, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
                self.children[p.pid] = (part, p)
                started.append((p, argv, log, run_dir, time.time(), now()))
        self.save()
        codes: dict[int, int] = {}
        while len(codes) < len(started):  # (each one's time: when it ended, not when it was waited for)
            for p, argv, log, run_dir, t0, when in started:
                if p.pid in codes or (code := p.poll()) is None:
                    continue
                codes[p.pid] = code
                with self.lock:
                    self.children.pop(p.pid, None)
                self.record(run_dir, command=dict(argv=argv, cwd=str(cwd), started=when, exit=code,
                                                  seconds=round(time.time() - t0, 1),
                                                  log=str(log.relative_to(self.results))))
            time.sleep(0.1)
        self.save()
        return None if self.cutting else [codes[p.pid] for p, *_ in started]

    def cut(self, reason: str) -> None:
        """Stop the journey: one SIGTERM to each process group (a training saves its step), no new process."""
        with self.lock:
            if self.cutting:
                return
            self.cutting, self.deadline = reason, time.time() + GRACE
        say(f"cut ({reason}): one SIGTERM to each of {len(self.children)} process group(s); trainings save their step")
        self.signal_all(signal.SIGTERM)

    def signal_all(self, sig: int) -> None:
        with self.lock:
            procs = [p for _, p in self.children.values()]
        for p in procs:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass

    # --- scheduling
    def ready(self, part: str) -> bool:
        s = self.status
        if s.get("compare") == "running":
            return False  # alone on the GPU
        if part in ("pair", "nb04"):
            return True
        if part in ("test-gpu", "score"):  # after the pair, which they would slow down (or need)
            return s["pair"] not in ("waiting", "running")
        return all(s[p] not in ("waiting", "running") for p in PARTS if p != "compare")

    def go(self) -> int:
        for part in PARTS:
            done = (read_json(self.results / part / "run.json") or {}).get("status") == "done"
            self.status[part] = "skipped" if part not in self.opts.parts else "done" if done else "waiting"
            if done and part in self.opts.parts:
                self.notes[part] = "done before: kept (delete its folder to run it again)"
                say(f"{part}: done before, kept")
        self.save()
        poll = 0.1 if self.opts.tiny else 1.0
        while True:
            if self.signalled and not self.cutting:
                self.cut(f"signal {signal.Signals(self.signalled).name}")
            if not self.cutting:
                for part in PARTS:
                    if self.status[part] == "waiting" and self.ready(part):
                        self.start(part)
            if not any(t.is_alive() for t in self.threads.values()) and \
                    (self.cutting or "waiting" not in self.status.values()):
                break
            if self.cutting and time.time() > self.deadline:  # GRACE seconds after the SIGTERM
                self.signal_all(signal.SIGKILL)
            time.sleep(poll)
        for part, st in self.status.items():
            if st == "waiting":
                self.status[part] = "not started"
        state = "cut" if self.cutting else "finished"
        self.save(state)
        for line in summary(self.results):
            print(line, flush=True)
        if self.cutting:
            return 3
        return 1 if "failed" in self.status.values() else 0

    def start(self, part: str) -> None:
        self.status[part] = "running"
        say(f"{part}: started")
        self.save()
        t = threading.Thread(target=self._part, args=(part,), name=part, daemon=True)
        self.threads[part] = t
        t.start()

    def _part(self, part: str) -> None:
        t0 = time.time()
        folder = self.results / part
        folder.mkdir(parents=True, exist_ok=True)
        try:
            status, note = PART_RUNS[part](self, folder)
        except Exception as e:  # the part's failure, recorded; the others go on
            status, note = "failed", f"{type(e).__name__}: {e}"
            with open(folder / "error.txt", "a") as f:
                f.write(traceback.format_exc())
        if self.cutting and status != "done":
            status = "cut"
        self.record(folder, status=status, note=note, ended=now())
        self.status[part], self.notes[part] = status, note
        say(f"{part}: {status} after {time.time() - t0:.0f} s" + (f" ({note})" if note else ""))
        self.save()


# ----------------------------------------------------------------------------- the parts

def twin_sets(j: Journey, name: str, eval_interval: Optional[int] = None) -> dict[str, str]:
    """The --set values of a twin: the pair's (--tiny: toy sizes), then the twin's own."""
    sets = dict(kv.split("=", 1) for kv in [f"log_interval={j.s['log_interval']}", *j.s["sets"], *TWINS[name]])
    return dict(sets, **({"eval_interval": str(eval_interval)} if eval_interval else {}))


def train_argv(j: Journey, name: str, max_steps: int, stop_at: Optional[int] = None,
               eval_interval: Optional[int] = None) -> list[str]:
    """``python -m txl_minimal.train`` for one twin: gpu-small on text8-mini (--tiny: toy sizes), continued if
    its folder holds a checkpoint."""
    out = j.results / "pair" / name
    sets = twin_sets(j, name, eval_interval)
    argv = [sys.executable, "-m", "txl_minimal.train", "--preset", "gpu-small", "--corpus", "text8-mini", "--out",
            str(out), "--device", j.opts.device, "--max-steps", str(max_steps), "--no-progress"]
    if stop_at is not None:
        argv += ["--stop-at", str(stop_at)]
    argv.append("--resume" if (out / "ckpt.pt").exists() else "--overwrite")
    return argv + ["--set", *(f"{k}={v}" for k, v in sets.items())]


def run_pair(j: Journey, folder: Path) -> tuple[str, str]:
    """The probe (both twins to PROBE steps, side by side), the plan, then both --resume to its steps."""
    P, Li = j.s["probe"], j.s["log_interval"]
    cap = j.s["cap"] if j.s["cap"] is not None else j.found.get("cap")
    plan = read_json(folder / "plan.json")
    if plan is None:
        todo = [n for n in TWINS if last_step(folder / n) < P]
        codes = j.run("pair", [(train_argv(j, n, cap or P * 10, stop_at=P), folder / n / "train.out", folder / n)
                               for n in todo])
        if codes is None:
            return "cut", "cut in the probe"
        if any(codes):
            return "failed", f"the probe's training exited {codes} (see pair/*/train.out)"
        plan = make_plan({n: log_rows(folder / n) for n in TWINS}, P, Li, 60 * j.s["minutes"], cap, j.s["cap_why"])
        write_json(folder / "plan.json", plan)
        say(f"pair: {plan['steps']:,} steps each: {plan['why']}")
    N, stop_at = plan["steps"], j.opts.cut_at
    todo = [n for n in TWINS if last_step(folder / n) < N]
    codes = j.run("pair", [(train_argv(j, n, N, stop_at=stop_at, eval_interval=plan["eval_interval"]),
                            folder / n / "train.out", folder / n) for n in todo]) if todo else []
    if codes is None:
        return "cut", f"txl at step {last_step(folder / 'txl')}, vanilla at {last_step(folder / 'vanilla')} of {N:,}"
    if stop_at is not None and stop_at < N:  # the rehearsal's hook: stopped as a time limit would
        j.cut(f"--cut-at {stop_at}")
        return "cut", f"stopped at step {stop_at} of {N:,} (--cut-at)"
    if any(codes):
        return "failed", f"a training exited {codes} (see pair/*/train.out)"
    for n in TWINS:
        rows = log_rows(folder / n)
        if rows[-1]["step"] != N:
            return "failed", f"{n} ended at step {rows[-1]['step']}, not {N}"
        periodic = [r for r in rows if r["valid_bpc"] is not None and (r["step"] % plan["eval_interval"] == 0
                                                                       or r["step"] == N)]
        best = min(periodic, key=lambda r: r["valid_bpc"])
        j.record(folder / n, status="done", part=f"pair/{n}", steps=N, train_wall_time_s=rows[-1]["wall_time_s"],
                 best_step=best["step"], best_valid_bpc=best["valid_bpc"], last_valid_bpc=rows[-1]["valid_bpc"],
                 last_train_bpc=rows[-1]["train_bpc"], preset="gpu-small", corpus="text8-mini",
                 settings=twin_sets(j, n, plan["eval_interval"]))
    j.record(folder, plan=plan)
    return "done", f"{N:,} steps each"


def notebook_input(j: Journey, folder: Path) -> Path:
    """Notebook 04 as it is, or with --tiny its first code cells (and a note saying where it stops)."""
    if j.s["nb_cells"] is None:
        return NOTEBOOK
    nb = json.loads(NOTEBOOK.read_text())  # (nbformat's JSON; importing nbformat here would cost seconds)
    keep, code = [], 0
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            if code == j.s["nb_cells"]:
                break
            code += 1
        keep.append(cell)
    note = f"*(The rehearsal, --tiny, stops here: notebook 04's first {code} code cells.)*"
    nb["cells"] = keep + [dict(cell_type="markdown", id="rehearsal-stops-here", metadata={}, source=[note])]
    path = folder / "input.ipynb"
    path.write_text(json.dumps(nb, indent=1) + "\n")
    return path


def run_nb04(j: Journey, folder: Path) -> tuple[str, str]:
    """Notebook 04 through scripts/run_notebook.py, its cells run in RESULTS/nb04 (a cell's error is recorded,
    and the notebook goes on, as a reader's run would)."""
    src = notebook_input(j, folder)
    out = folder / NOTEBOOK.name
    codes = j.run("nb04", [([sys.executable, str(ROOT / "scripts" / "run_notebook.py"), str(src), str(out), "--cwd",
                             str(folder)], folder / "cells.log", folder)], env=j.nb_env)
    cells = [line for line in last_run(folder / "cells.log") if line.startswith("cell ")]
    if codes is None:
        return "cut", f"after {len(cells)} code cells"
    if codes[0] not in (0, 1):
        return "failed", f"run_notebook exited {codes[0]} (see nb04/cells.log)"
    errors = [line for line in cells if " ERROR " in line]
    j.record(folder, cells=cells, errors=errors)
    return "done", f"{len(cells)} code cells, {len(errors)} with an error" + (f": {errors[0]}" if errors else "")


def run_test_gpu(j: Journey, folder: Path) -> tuple[str, str]:
    """make test-gpu without its notebook test; its output kept, the summary (failures and skips) beside it."""
    # (-p no:nbval: where nbval is installed, it would import nbformat and jsonschema for nothing, seconds of CPU)
    select = ["GPU_TESTS=-k 'not notebook' -p no:nbval"]
    if shutil.which("make"):
        argv = ["make", "--no-print-directory", "test-gpu", f"GPU_PY={sys.executable}", *select]
    else:  # what make test-gpu runs
        argv = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/gpu", "-k",
                "not notebook", "-p", "no:nbval"]
    codes = j.run("test-gpu", [(argv, folder / "output.log", folder)])
    tail = [line for line in last_run(folder / "output.log") if line.strip()]
    start = next((i for i, line in enumerate(tail) if "short test summary" in line), max(0, len(tail) - 1))
    (folder / "summary.txt").write_text("\n".join(tail[start:]) + "\n")
    if codes is None:
        return "cut", ""
    return "done", f"exit {codes[0]}: {tail[-1] if tail else ''}"


def run_compare(j: Journey, folder: Path) -> tuple[str, str]:
    """gpu_compare.py one shape at a time (a JSON each: a cut keeps the shapes done); a shape that fails is
    said, and the next one runs."""
    done, failed = [], []
    for shape in j.s["shapes"]:
        out = folder / f"{shape}.json"
        if out.exists():
            done.append(shape)
            continue
        argv = [sys.executable, str(ROOT / "benchmarks" / "gpu_compare.py"), "--base-tree", str(j.base), "--device",
                j.opts.device, "--shapes", shape, "--json", str(out), *j.s["compare"],
                *shlex.split(j.opts.compare_args)]
        codes = j.run("compare", [(argv, folder / f"{shape}.log", folder)])
        if codes is None:
            return "cut", f"shapes done: {', '.join(done) or 'none'}"
        if codes[0] != 0 or not out.exists():
            failed.append(f"{shape} (exit {codes[0]}: compare/{shape}.log)")
        else:
            done.append(shape)
    return ("failed" if failed else "done"), ", ".join(done) + (f"; failed: {', '.join(failed)}" if failed else "")


def run_score(j: Journey, folder: Path) -> tuple[str, str]:
    """The scores, in a process of their own (score_worker)."""
    if j.status.get("pair") != "done":
        return "not started", "the pair did not finish: nothing to score"
    codes = j.run("score", [([sys.executable, str(Path(__file__).resolve()), "--score-worker", str(j.results)],
                             folder / "output.log", folder)])
    if codes is None:
        return "cut", f"{len((read_json(folder / 'scores.json') or {}).get('rows', {}))} evaluations kept"
    if codes[0] != 0:
        return "failed", f"exit {codes[0]} (see score/output.log)"
    return "done", f"{len(read_json(folder / 'scores.json')['rows'])} evaluations"


PART_RUNS = {"pair": run_pair, "nb04": run_nb04, "test-gpu": run_test_gpu, "compare": run_compare, "score": run_score}


# ----------------------------------------------------------------------------- the score part's process

def score_settings(tgt_len: int) -> list[tuple[str, str, str, dict]]:
    """(name, twin, how, keywords) of every evaluation; the first is the reference of the paired differences."""
    txl = [("trained", {}), ("mem0", dict(mem_len=0))] + [(f"mem{m}", dict(mem_len=m)) for m in (512, 1024, 2048)]
    txl.append(("authors", dict(tgt_len=80, mem_len=1024, clamp_len=820, same_length=True)))
    return ([(f"txl-{n}", "txl", "segments", kw) for n, kw in txl]
            + [("vanilla-trained", "vanilla", "segments", {}),  # memory 0, as trained
               (f"vanilla-sliding{tgt_len}", "vanilla", "sliding", dict(context=tgt_len))])


def score_worker(results: Path) -> None:
    """Score the pair's best.pt on text8-mini's test split, one evaluation after the other, each written at
    once (scores.json and NAME.npy): a cut keeps what was scored, a rerun does the rest."""
    import numpy as np
    import torch

    from txl_minimal import load
    from txl_minimal.data import load_corpus
    from txl_minimal.evaluate import evaluate, sliding_window_eval
    from txl_minimal.pretrained import paired_difference

    journal = read_json(results / "journey.json") or {}
    device = journal.get("options", {}).get("device", "cpu")
    limit = journal.get("options", {}).get("score_tokens")
    folder = results / "score"
    scores = read_json(folder / "scores.json") or dict(corpus="text8-mini", split="test", block=SCORE_BLOCK, rows={})
    test = load_corpus("text8-mini").test
    models = {n: load(results / "pair" / n, device=device) for n in TWINS}  # each folder's best.pt
    reference = None
    for name, twin, how, kw in score_settings(models["vanilla"].cfg.tgt_len):
        npy = folder / f"{name}.npy"
        if name in scores["rows"] and npy.exists():
            nll = np.load(npy).astype(np.float64)
        else:
            t0 = time.perf_counter()
            if how == "segments":
                r = evaluate(models[twin], test, batch_size=1, max_tokens=limit, per_token=True, **kw)
            else:
                r = sliding_window_eval(models[twin], test, max_predictions=limit, per_token=True, **kw)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            nll = r["nll"]
            np.save(npy, nll.astype(np.float32))
            scores["rows"][name] = dict(model=twin, how=how, settings=r["settings"], asked=kw, tokens=r["tokens"],
                                        bpc=round(r["bpc"], 5), seconds=round(time.perf_counter() - t0, 1),
                                        capped={k: list(v) for k, v in r["capped"].items()})
        reference = nll if reference is None else reference
        diff, se = paired_difference(nll, reference, SCORE_BLOCK)
        scores["rows"][name].update(minus_txl_trained=round(diff, 5), se=round(se, 5))
        write_json(folder / "scores.json", scores)
        print(f"{name:22s} bpc {scores['rows'][name]['bpc']:.4f}  minus txl-trained {diff:+.4f} +- {se:.4f}  "
              f"({scores['rows'][name]['tokens']:,} predictions, {scores['rows'][name]['seconds']} s)", flush=True)


# ----------------------------------------------------------------------------- --status, the last line

def progress(results: Path, part: str) -> str:
    """A few words on how far a part got."""
    folder = results / part
    if part == "pair":
        plan = read_json(folder / "plan.json")
        steps = ", ".join(f"{n} step {last_step(folder / n):,}" for n in TWINS)
        return steps + (f" of {plan['steps']:,}" if plan else " (probe)")
    if part == "nb04":
        cells = [x for x in last_run(folder / "cells.log") if x.startswith("cell ")]
        return f"{len(cells)} code cells run" + (f", last: {cells[-1]}" if cells else "")
    if part == "compare":
        return "shapes done: " + (", ".join(sorted(p.stem for p in folder.glob("*.json") if p.name != "run.json"))
                                  or "none")
    if part == "score":
        return f"{len((read_json(folder / 'scores.json') or {}).get('rows', {}))} evaluations"
    if part == "test-gpu":
        lines = [x for x in last_run(folder / "output.log") if x.strip()]
        return lines[-1][:100] if lines else ""
    return ""


def finish_command(results: Path) -> str:
    """The command that finishes a journey: the same folder (its options are kept in journey.json), in the
    background if it ran there."""
    journal = read_json(results / "journey.json") or {}
    detached = " --detach --wait 540" if journal.get("options", {}).get("detached") else ""
    return f"{RUN} --results {shlex.quote(str(results))}{detached}"


def summary(results: Path) -> list[str]:
    """A line per part (its state, how far it got) and the last line: what finished, what was cut, and the one
    command that finishes the rest."""
    journal = read_json(results / "journey.json") or {}
    notes, running = journal.get("notes", {}), journal.get("state") == "running" and alive(journal.get("pid"))
    states = {p: journal.get("parts", {}).get(p, "not started") for p in PARTS}
    if not running:  # the journey's process is gone: what it ran was cut
        states = {p: "cut" if st in ("running", "waiting") else st for p, st in states.items()}
    lines = [f"  {p:9s} {st:12s} {progress(results, p) if st == 'running' else notes.get(p) or ''}".rstrip()
             for p, st in states.items()]
    said = "; ".join(f"{word}: {', '.join(p for p in PARTS if states[p] == word)}"
                     for word in ("done", "failed", "cut", "running", "waiting", "not started")
                     if word in states.values())
    rest = [p for p, st in states.items() if st not in ("done", "skipped")]
    if running:
        end = f"running (pid {journal.get('pid')}): {RUN} --status {results} --wait 300"
    else:
        end = f"to finish the rest: {finish_command(results)}" if rest else "every part done"
    return lines + [f"{results}: {said}. {end}"]


def status(results: Path, wait: float = 0, since: Optional[int] = None) -> int:
    """--status: the parts and the last line. With ``wait``, first the journey's log (journey.log, which --detach
    writes; from byte ``since``) as it grows, until the journey ends or ``wait`` seconds pass. Returns 0 if every
    part is done, 1 if one failed, 3 otherwise (running, cut, not started)."""
    if not (results / "journey.json").exists():
        print(f"{results}: no journey there (no journey.json): python scripts/gpu_journey.py --results {results} "
              "starts one")
        return 2
    log = results / "journey.log"
    offset = since if since is not None else (log.stat().st_size if log.exists() else 0)
    t_end, shown, printed = time.time() + wait, None, ""
    while True:
        journal = read_json(results / "journey.json") or {}
        going = journal.get("state") == "running" and alive(journal.get("pid"))
        if log.exists():
            with open(log, "rb") as f:
                f.seek(offset)
                raw = f.read()
            offset, new = offset + len(raw), raw.decode(errors="replace")
            print(new, end="", flush=True)
            printed = (printed + new)[-5000:]
        elif going and wait and (lines := summary(results)) != shown:  # a journey in the foreground elsewhere
            print(*lines, sep="\n", flush=True)
            shown = lines
        if not going or time.time() >= t_end:
            break
        time.sleep(min(0.2 if journal.get("options", {}).get("tiny") else 5, max(0.1, t_end - time.time())))
    lines = summary(results)
    if not printed.rstrip().endswith("\n".join(lines)):  # (the journey's own last lines, just shown)
        print(*lines, sep="\n", flush=True)
    states = set((read_json(results / "journey.json") or {}).get("parts", {}).values()) - {"skipped"}
    return 0 if states == {"done"} and not going else 1 if "failed" in states else 3


# ----------------------------------------------------------------------------- --ship, --pack

def ship(results: Path, to: Path, device: Optional[str] = None) -> list[dict]:
    """The pair's best.pt as txl-gpu and vanilla-gpu in ``to``: float16 safetensors (a checksum inside, size and
    SHA-256 in ``to``/MANIFEST.json), the log, and NAME.json (settings, training time, the GPU, the bpc of the
    stored float16 weights on text8-mini's valid and test splits); each loaded back and checked after writing."""
    import torch

    from txl_minimal import load
    from txl_minimal.checkpoint import PRETRAINED_DIR, checkpoint_bytes, load_checkpoint, model_from_checkpoint
    from txl_minimal.data import load_corpus
    from txl_minimal.evaluate import evaluate
    from txl_minimal.utils import write_shipped

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")  # (the bpc of the stored weights)
    pair = read_json(results / "pair" / "run.json") or {}
    if pair.get("status") != "done":
        steps = ", ".join(f"{n} at step {last_step(results / 'pair' / n):,}" for n in TWINS)
        raise ValueError(f"{results}/pair is not finished ({pair.get('status', 'not started')}: {steps}): --ship "
                         f"copies a finished pair. Fix: {finish_command(results)}")
    to = Path(to)
    if to.resolve() == PRETRAINED_DIR.resolve():
        raise ValueError(f"--to {to} is the package's shipped folder, whose names (checkpoint.NAMES) do not include "
                         "txl-gpu and vanilla-gpu: nothing was written. Fix: ship into another folder; "
                         "txl_minimal.load(FOLDER/txl-gpu.safetensors) loads it from there")
    corpus, shipped = load_corpus("text8-mini"), []
    limit = (read_json(results / "journey.json") or {}).get("options", {}).get("score_tokens")  # --tiny: a prefix
    for twin, name in SHIPPED.items():
        run = read_json(results / "pair" / twin / "run.json") or {}
        ckpt = load_checkpoint(results / "pair" / twin / "best.pt")  # (its checksums verified)
        weights = {k: v.half() if v.is_floating_point() else v for k, v in ckpt["model"].items()}
        state = dict(model=weights, model_config=ckpt["model_config"], train_config=ckpt["train_config"],
                     step=ckpt["step"], wall_time_s=ckpt["wall_time_s"],
                     **({"vocab": ckpt["vocab"]} if "vocab" in ckpt else {}))
        path = to / f"{name}.safetensors"
        raw = checkpoint_bytes(state, path)
        model = model_from_checkpoint(state, device)  # the float16 values, as the file will give them
        results_ = {}
        for split in ("valid", "test"):
            r = evaluate(model, getattr(corpus, split), batch_size=1, max_tokens=limit)
            results_[f"{split}/as_trained"] = dict(bpc=round(r["bpc"], 4), tokens=r["tokens"], settings=r["settings"])
        cfg = ckpt["train_config"]
        info = dict(name=name, corpus=corpus.name, dtype="float16", step=ckpt["step"],
                    best_valid_bpc_in_training=ckpt.get("valid_bpc"), train_wall_time_s=round(ckpt["wall_time_s"], 1),
                    train_tokens_per_s=round(ckpt["step"] * cfg["batch_size"] * ckpt["model_config"]["tgt_len"]
                                             / ckpt["wall_time_s"]),
                    params=sum(p.numel() for p in model.parameters()), gpu=run.get("gpu"), torch=run.get("torch"),
                    commit=run.get("commit"), commands=[c["argv"] for c in run.get("commands", [])],
                    model_config=ckpt["model_config"], train_config=cfg, results=results_,
                    bpc_of="the stored float16 weights, batch 1, at the training lengths")
        if len(raw) > MAX_SHIPPED_MB * 1e6:
            raise ValueError(f"{name} would be {len(raw) / 1e6:.1f} MB, over the {MAX_SHIPPED_MB} MB a shipped model "
                             "may weigh: nothing was written")
        to.mkdir(parents=True, exist_ok=True)
        log = (results / "pair" / twin / "log.csv").read_bytes()
        write_shipped({path: raw, to / f"{name}.log.csv": log,
                       to / f"{name}.json": (json.dumps(info, indent=2) + "\n").encode()})
        back = load(path)  # the manifest's size and SHA-256, then the weights' checksum
        same = all(torch.equal(back.state_dict()[k].half().float(), v.float()) for k, v in weights.items())
        if not same:
            raise ValueError(f"{path} does not load back the weights written")
        print(f"{path}: {len(raw) / 1e6:.1f} MB, float16, step {ckpt['step']:,}, loaded back and verified; "
              + ", ".join(f"{k} bpc {v['bpc']:.4f}" for k, v in results_.items()), flush=True)
        shipped.append(info)
    return shipped


def pack(results: Path, dest: Path) -> list[Path]:
    """RESULTS in a few files for a machine that returns at most 8: gpu-journey.tar.gz (everything but the
    checkpoints and the shipped weights) and ship/*.safetensors beside it; the pair shipped first if it is
    done and not shipped yet."""
    ship_dir = results / "ship"
    if dest.resolve().is_relative_to(results.resolve()):
        raise ValueError(f"--pack {dest} is inside the results folder {results}, which it packs. Fix: another folder")
    pair = read_json(results / "pair" / "run.json") or {}
    if pair.get("status") == "done" and not all((ship_dir / f"{n}.safetensors").exists() for n in SHIPPED.values()):
        journal = read_json(results / "journey.json") or {}
        ship(results, ship_dir, journal.get("options", {}).get("device", "cpu"))
    dest.mkdir(parents=True, exist_ok=True)
    tar_path = dest / "gpu-journey.tar.gz"

    def keep(info: tarfile.TarInfo) -> Optional[tarfile.TarInfo]:
        name = info.name
        if name.endswith((".pt", ".safetensors", ".tmp", ".lock")) or "/__pycache__" in name:
            return None
        return info

    with tarfile.open(tar_path, "w:gz") as tar:
        tar.add(results, arcname=".", filter=keep)
    out = [tar_path]
    for weights in sorted(ship_dir.glob("*.safetensors")):
        shutil.copyfile(weights, dest / weights.name)
        out.append(dest / weights.name)
    for path in out:
        print(f"{path}: {path.stat().st_size / 1e6:.1f} MB", flush=True)
    print(f"unpack: mkdir -p {results} && tar -xzf gpu-journey.tar.gz -C {results} && "
          f"cp *-gpu.safetensors {results}/ship/", flush=True)
    return out


# ----------------------------------------------------------------------------- the command line

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default="runs/gpu-journey", help="the results folder (default: runs/gpu-journey)")
    p.add_argument("--device", help="cuda (default) or cpu; a rerun keeps the first run's")
    p.add_argument("--tiny", action="store_true", help="toy sizes (the CPU rehearsal); a rerun keeps the first run's")
    p.add_argument("--train-minutes", type=float, help="the pair's training time (default 6; --tiny 0.1)")
    p.add_argument("--skip", nargs="+", choices=PARTS, metavar="PART", help=f"leave out parts: {', '.join(PARTS)}")
    p.add_argument("--base", help=f"the commit gpu_compare times against (default {BASE_COMMIT})")
    p.add_argument("--base-tree", help="a checkout of it on disk (default: .gpu-journey/base, made by --prepare)")
    p.add_argument("--compare-args", help="more arguments for gpu_compare.py, e.g. '--reps 3'")
    p.add_argument("--detach", action="store_true", help="run in the background (its own session), output in "
                   "RESULTS/journey.log; with --wait, follow it that long")
    p.add_argument("--wait", type=float, default=0, help="with --detach or --status: follow it up to this many seconds")
    p.add_argument("--status", nargs="?", const="", metavar="RESULTS", help="print the progress of a journey")
    p.add_argument("--ship", metavar="RESULTS", help="ship the pair as txl-gpu and vanilla-gpu (float16) --to FOLDER")
    p.add_argument("--to", help="the folder --ship writes into")
    p.add_argument("--pack", metavar="DIR", help="RESULTS as gpu-journey.tar.gz and the shipped weights, in DIR")
    p.add_argument("--prepare", action="store_true", help="where git is: .gpu-journey/ (the base tree, the commit)")
    p.add_argument("--cut-at", type=int, help="(the rehearsal's hook) stop the pair at this step, as a time limit "
                   "would, and end the journey there")
    p.add_argument("--score-worker", metavar="RESULTS", help=argparse.SUPPRESS)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser()
    opts = p.parse_args(argv)
    if opts.score_worker:
        score_worker(Path(opts.score_worker).resolve())
        return 0
    if opts.prepare:
        opts.base = opts.base or BASE_COMMIT
        tree = prepare(opts.base)
        print(f"{tree}: {opts.base}'s txl_minimal for gpu_compare; {PREPARED / 'source.json'}: this checkout's "
              f"commit ({commit_info()['commit']}). Carry .gpu-journey/ along with the working tree.")
        return 0
    if opts.status is not None:
        return status(Path(opts.status or opts.results), opts.wait)
    try:
        if opts.ship:
            if not opts.to:
                p.error("--ship needs --to FOLDER (where txl-gpu and vanilla-gpu are written)")
            ship(Path(opts.ship), Path(opts.to), opts.device)
            return 0
        if opts.pack:
            pack(Path(opts.results), Path(opts.pack))
            return 0
    except (ValueError, FileNotFoundError) as e:
        p.error(str(e))
    return launch(p, opts, argv)


def launch(p: argparse.ArgumentParser, opts, argv: list[str]) -> int:
    results = Path(opts.results).resolve()
    journal = read_json(results / "journey.json")
    if journal and journal.get("state") == "running" and alive(journal.get("pid")):
        p.error(f"a journey is running in {results} (pid {journal['pid']}): python scripts/gpu_journey.py --status "
                f"{opts.results} --wait 300 follows it")
    saved = (journal or {}).get("options", {})
    for key in ("device", "tiny"):  # a rerun continues the same journey
        if saved and getattr(opts, key) not in (None, False, saved.get(key)):
            p.error(f"{results} holds a journey with --{key.replace('_', '-')} {saved.get(key)}; this run asks "
                    f"{getattr(opts, key)}. Fix: another --results folder, or leave the option out")
    for key, default in RESTORED.items():  # what this run leaves out, the first run's (else the default)
        if getattr(opts, key) in (None, False):
            setattr(opts, key, saved.get(key, default))
    opts.parts = [x for x in PARTS if x not in opts.skip]
    opts.base_tree = opts.base_tree and str(Path(opts.base_tree).resolve())
    if opts.detach:
        return detach(results, argv, opts.wait)
    if journal and all((read_json(results / x / "run.json") or {}).get("status") == "done" for x in opts.parts):
        print(f"gpu_journey: {results}: every part done before, kept (delete a part's folder to run it again)")
        for line in summary(results):
            print(line, flush=True)
        return 0
    wheels = None
    env = child_env(SITE if SITE.is_dir() else None, 1)
    found = check(env, opts.tiny)
    if any(found["modules"].get(m) is None for m in NB_NEEDS[:3]) and "nb04" in opts.parts:
        wheels = install_wheels()
        if wheels:
            env = child_env(SITE, 1)
            found = check(env, opts.tiny)
    base, base_line = None, "not needed (--skip compare)" if "compare" not in opts.parts else "not looked for"
    if (why := refusal(found, opts)) is None and "compare" in opts.parts:  # (prepared from git if it can be)
        base, base_line = base_tree(opts)
        why = refusal(found, opts, base)
    commit = commit_info()
    print(f"gpu_journey: {results}" + (" (continuing)" if journal else ""), flush=True)
    for line in report(found, commit, base_line, wheels, opts):
        print("  " + line, flush=True)
    if why:
        print(f"stopped: {why}", flush=True)
        return 2
    results.mkdir(parents=True, exist_ok=True)
    s = settings(opts.tiny, opts.device, found)
    journal = dict(journal or {}, argv=argv, started=now(), found=found, commit=commit["commit"], base=base_line,
                   options=dict({key: getattr(opts, key) for key in RESTORED}, score_tokens=s["score_tokens"],
                                detached=bool(os.environ.get(DETACHED))))
    write_json(results / "journey.json", journal)
    j = Journey(results, opts, found, commit, base, child_env(SITE if wheels or SITE.is_dir() else None, s["threads"]))
    stop_left(results, journal)

    def on_signal(signum, frame):
        j.signalled = signum
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    plan = [f"pair ({j.s['minutes']:g} min of training)" * ("pair" in opts.parts),
            "notebook 04 beside it" * ("nb04" in opts.parts), "then test-gpu" * ("test-gpu" in opts.parts),
            "the scores" * ("score" in opts.parts), "then gpu_compare alone" * ("compare" in opts.parts)]
    print(f"  plan     {', '.join(filter(None, plan))}", flush=True)
    return j.go()


def detach(results: Path, argv: list[str], wait: float) -> int:
    """--detach: this command again without --detach and --wait, in a session of its own (a command's time limit
    does not reach it), its output in RESULTS/journey.log; then --status (from the start of that output) for up
    to ``wait`` seconds."""
    results.mkdir(parents=True, exist_ok=True)
    child = [a for i, a in enumerate(argv) if a != "--detach" and not a.startswith("--wait")
             and (i == 0 or argv[i - 1] != "--wait")]
    log = results / "journey.log"
    since = log.stat().st_size if log.exists() else 0
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *child], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                env=dict(os.environ, **{DETACHED: "1"}))
    t_end = time.time() + 120
    while (read_json(results / "journey.json") or {}).get("pid") != proc.pid and proc.poll() is None \
            and time.time() < t_end:
        time.sleep(0.2)  # until it has checked the machine and started (or stopped: refused, or all done)
    if proc.poll() is not None or (read_json(results / "journey.json") or {}).get("pid") != proc.pid:
        print(log.read_bytes()[since:].decode(errors="replace"), end="", flush=True)
        if proc.poll() is None:
            print(f"(pid {proc.pid} is still checking the machine after 120 s: python scripts/gpu_journey.py "
                  f"--status {results} --wait 300 follows it)", flush=True)
        return 3 if proc.returncode is None else proc.returncode
    print(f"the journey runs in the background (pid {proc.pid}), its output in {log}; progress: "
          f"python scripts/gpu_journey.py --status {results} --wait 300", flush=True)
    return status(results, wait, since)


def ours(pid: int, results: Path) -> bool:
    """Whether process ``pid`` is a part of a journey in ``results`` (its command line names the folder, or
    make test-gpu): a pid reused by another program is left alone."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return str(results) in cmdline or "test-gpu" in cmdline


def stop_left(results: Path, journal: dict) -> None:
    """Processes a journey that was killed (SIGKILL) left running: one SIGTERM each, and a wait for them."""
    left = [int(pid) for pid in (journal.get("children") or {}) if alive(int(pid)) and ours(int(pid), results)]
    for pid in left:
        say(f"pid {pid} of an earlier journey still runs: SIGTERM")
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.time() + GRACE
    while any(alive(pid) for pid in left) and time.time() < deadline:
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
