"""scripts/gpu_journey.py rehearsed on the CPU (--device cpu --tiny): every part end to end, a run cut in the
middle of the pair's training (the --cut-at hook: its trainings stop at that step, as a time limit's SIGTERM
would stop them, and the journey ends there), the same command again (the cut training resumes, the rest runs),
once more (every part kept), then --status, --ship and --pack on its results. One rehearsal for the module."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from argparse import Namespace

import numpy as np
import pytest
import torch

from tiny import ROOT
from txl_minimal import load
from txl_minimal.data import load_corpus
from txl_minimal.evaluate import evaluate
from txl_minimal.safetensors_io import load_file

pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

SCRIPT = ROOT / "scripts" / "gpu_journey.py"
spec = importlib.util.spec_from_file_location("gpu_journey", SCRIPT)
gpu_journey = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_journey)
CUT = 20


def journey_command(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=600)


def commands(results, part):
    return (gpu_journey.read_json(results / part / "run.json") or {}).get("commands", [])


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("journey")
    results = tmp / "results"
    gpu_journey.PREPARED, prepared = tmp / "prepared", gpu_journey.PREPARED
    try:  # the real base commit's tree, as --prepare makes it (a clone without that history: this checkout)
        base = gpu_journey.prepare(gpu_journey.BASE_COMMIT)
    except SystemExit:
        base = ROOT
    finally:
        gpu_journey.PREPARED = prepared
    t0 = time.perf_counter()
    # (--train-minutes 5: on any machine the 40 steps of --tiny's cap fit, so the plan does not depend on its load)
    cut = journey_command("--device", "cpu", "--tiny", "--results", str(results), "--base-tree", str(base),
                          "--train-minutes", "5", "--cut-at", str(CUT))
    after_cut = {n: (gpu_journey.log_rows(results / "pair" / n),
                     torch.load(results / "pair" / n / "ckpt.pt", weights_only=True)["step"])
                 for n in gpu_journey.TWINS}
    again = journey_command("--results", str(results))
    counts = {p: len(commands(results, p)) for p in ("pair/txl", "nb04", "test-gpu", "compare", "score")}
    notebook = (results / "nb04" / "04_training_text8.ipynb").stat().st_mtime_ns
    once_more = journey_command("--results", str(results))
    return Namespace(results=results, base=base, cut=cut, again=again, once_more=once_more, after_cut=after_cut,
                     counts=counts, notebook=notebook, seconds=time.perf_counter() - t0)


def test_a_cut_journey_keeps_what_finished_and_names_the_command_that_finishes_it(rehearsal):
    out = rehearsal.cut.stdout
    assert rehearsal.cut.returncode == 3, out + rehearsal.cut.stderr
    # the start-up report: what it found
    for word in ("commit ", "torch ", "GPU      none (--device cpu)", "wheels   nbclient", "base     "):
        assert word in out
    plan = json.loads((rehearsal.results / "pair" / "plan.json").read_text())
    assert plan["steps"] == 40 and plan["probe_steps"] == 12  # --tiny's cap: 40 steps
    for name, (rows, saved) in rehearsal.after_cut.items():
        assert rows[-1]["step"] == saved == CUT, name  # stopped mid-part, its checkpoint saved there
    last = out.strip().splitlines()[-1]
    assert "cut: pair" in last and "not started: test-gpu, compare, score" in last
    assert last.endswith(f"to finish the rest: {gpu_journey.RUN} --results {rehearsal.results}")


def test_the_same_command_resumes_the_cut_training_and_runs_every_other_part(rehearsal):
    out, results = rehearsal.again.stdout, rehearsal.results
    assert rehearsal.again.returncode == 0, out + rehearsal.again.stderr
    assert out.strip().splitlines()[-1].endswith("done: pair, nb04, test-gpu, compare, score. every part done")
    for name in gpu_journey.TWINS:
        argvs = [c["argv"] for c in commands(results, f"pair/{name}")]
        # the probe (to 12 steps, the warm-up), the main run cut at CUT, its resume to the plan's 40
        assert [a[a.index("--max-steps") + 1] for a in argvs] == ["40", "40", "40"]
        assert ["--stop-at", "12", "--overwrite"] == argvs[0][argvs[0].index("--stop-at"):][:3]
        assert "--resume" in argvs[1] and f"--stop-at {CUT}" in " ".join(argvs[1])
        assert "--resume" in argvs[2] and "--stop-at" not in argvs[2]
        steps = [r["step"] for r in gpu_journey.log_rows(results / "pair" / name)]
        assert steps == list(range(2, 41, 2))  # one log, as if never cut
        run = json.loads((results / "pair" / name / "run.json").read_text())
        assert run["status"] == "done" and run["steps"] == 40 and (results / "pair" / name / "best.pt").exists()
        assert {"commit", "gpu", "torch", "commands", "wall_s", "train_wall_time_s", "best_valid_bpc"} <= set(run)
    vanilla = commands(results, "pair/vanilla")[0]["argv"]
    assert "attn_type=abs" in vanilla and "mem_len=0" in vanilla  # the twin; the same sizes, steps and seed
    assert "n_layer=2" in vanilla and "attn_type=abs" not in commands(results, "pair/txl")[0]["argv"]


def test_every_part_wrote_its_results(rehearsal):
    results = rehearsal.results
    nb = json.loads((results / "nb04" / "04_training_text8.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert len(code) == 4 and all(c["execution_count"] for c in code)  # --tiny: its first 4 code cells
    printed = "".join("".join(o.get("text", "")) for c in code for o in c["outputs"])
    assert "preset 'cpu-tiny' on text8-mini, device cpu" in printed  # notebook 04's CPU branch
    assert len([x for x in (results / "nb04" / "cells.log").read_text().splitlines() if x.startswith("cell ")]) >= 4
    assert "no GPU here, nothing to run" in (results / "test-gpu" / "summary.txt").read_text()
    compare = json.loads((results / "compare" / "tiny.json").read_text())
    assert {r["variant"] for r in compare["results"]} == {"base", "default"}
    assert all(r["error"] is None for r in compare["results"]), compare["results"]
    scores = json.loads((results / "score" / "scores.json").read_text())["rows"]
    assert list(scores) == ["txl-trained", "txl-mem0", "txl-mem512", "txl-mem1024", "txl-mem2048", "txl-authors",
                            "vanilla-trained", "vanilla-sliding16"]
    assert scores["txl-authors"]["settings"] == dict(tgt_len=80, mem_len=1024, clamp_len=820, same_length=True,
                                                     batch_size=1)
    reference = np.load(results / "score" / "txl-trained.npy").astype(np.float64)
    for name, row in scores.items():
        nll = np.load(results / "score" / f"{name}.npy").astype(np.float64)
        assert len(nll) == row["tokens"] == 2000
        assert abs(nll.mean() / np.log(2) - row["bpc"]) < 1e-4  # the kept losses are the scored ones
        assert abs((nll - reference).mean() / np.log(2) - row["minus_txl_trained"]) < 1e-4  # paired
    for part in gpu_journey.PARTS:  # each names the commit, the GPU, torch, its commands and their wall time
        run = json.loads((results / part / "run.json").read_text())
        assert run["status"] == "done" and run["commit"] and run["torch"] and "gpu" in run
        for where in (["pair/txl", "pair/vanilla"] if part == "pair" else [part]):
            run = json.loads((results / where / "run.json").read_text())
            assert run["commands"] and all(c["argv"] and c["seconds"] > 0 for c in run["commands"]) and run["wall_s"]


def test_a_finished_journey_run_again_keeps_every_part(rehearsal):
    out = rehearsal.once_more.stdout
    assert rehearsal.once_more.returncode == 0, out + rehearsal.once_more.stderr
    assert "every part done before, kept" in out and out.strip().endswith("every part done")
    assert {p: len(commands(rehearsal.results, p)) for p in rehearsal.counts} == rehearsal.counts  # nothing ran
    assert (rehearsal.results / "nb04" / "04_training_text8.ipynb").stat().st_mtime_ns == rehearsal.notebook


def test_detach_runs_it_in_a_session_of_its_own_and_prints_its_output(rehearsal):
    res = journey_command("--results", str(rehearsal.results), "--detach", "--wait", "30")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "every part done before, kept" in res.stdout and res.stdout.strip().endswith("every part done")
    assert "every part done before, kept" in (rehearsal.results / "journey.log").read_text()


def test_status_shows_each_part_and_the_last_line(rehearsal, capsys):
    assert gpu_journey.main(["--status", str(rehearsal.results)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].endswith("every part done") and any(line.split()[:2] == ["pair", "done"] for line in lines)


def test_ship_writes_float16_models_that_load_verified_and_pack_leaves_checkpoints_out(rehearsal, tmp_path):
    results = rehearsal.results
    shipped = results / "ship"
    gpu_journey.main(["--ship", str(results), "--to", str(shipped)])
    test = load_corpus("text8-mini").test
    for twin, name in gpu_journey.SHIPPED.items():
        path = shipped / f"{name}.safetensors"
        assert path.stat().st_size < 15e6
        tensors, _ = load_file(path)
        assert {t.dtype for t in tensors.values() if t.is_floating_point()} == {torch.float16}
        best = torch.load(results / "pair" / twin / "best.pt", weights_only=True)
        model = load(path)  # MANIFEST.json's size and SHA-256, the weights' checksum
        assert all(torch.equal(model.state_dict()[k], v.half().float()) for k, v in best["model"].items())
        info = json.loads((shipped / f"{name}.json").read_text())
        assert info["dtype"] == "float16" and info["step"] == best["step"] and "gpu" in info
        assert info["train_wall_time_s"] > 0 and info["train_config"]["batch_size"] == 4
        assert info["results"]["test/as_trained"]["bpc"] == round(evaluate(model, test, max_tokens=2000)["bpc"], 4)
    manifest = json.loads((shipped / "MANIFEST.json").read_text())
    assert sorted(manifest) == sorted(f"{n}{ext}" for n in gpu_journey.SHIPPED.values()
                                      for ext in (".json", ".log.csv", ".safetensors"))
    (tmp_path / "damaged").mkdir()
    shutil.copy(shipped / "MANIFEST.json", tmp_path / "damaged")
    damaged = bytearray(path.read_bytes())
    damaged[-100] ^= 1
    (tmp_path / "damaged" / path.name).write_bytes(bytes(damaged))
    with pytest.raises(ValueError, match="damaged"):
        load(tmp_path / "damaged" / path.name)

    gpu_journey.main(["--results", str(results), "--pack", str(tmp_path / "out")])  # (the pair is shipped already)
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["gpu-journey.tar.gz", "txl-gpu.safetensors", "vanilla-gpu.safetensors"]
    with tarfile.open(tmp_path / "out" / "gpu-journey.tar.gz") as tar:
        names = tar.getnames()
    assert "./pair/txl/log.csv" in names and "./score/txl-trained.npy" in names and "./ship/txl-gpu.json" in names
    assert not [n for n in names if n.endswith((".pt", ".safetensors"))]


def test_ship_refuses_an_unfinished_pair_and_the_package_folder(tmp_path, capsys):
    (tmp_path / "pair").mkdir()
    with pytest.raises(SystemExit):
        gpu_journey.main(["--ship", str(tmp_path), "--to", str(tmp_path / "ship")])
    assert "pair is not finished" in capsys.readouterr().err and not (tmp_path / "ship").exists()
    gpu_journey.write_json(tmp_path / "pair" / "run.json", dict(status="done"))
    with pytest.raises(SystemExit):
        gpu_journey.main(["--ship", str(tmp_path), "--to", str(ROOT / "txl_minimal" / "pretrained")])
    assert "the package's shipped folder" in capsys.readouterr().err


def test_no_cuda_stops_the_journey_in_one_sentence(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    res = journey_command("--results", str(tmp_path / "r"), "--skip", "compare")
    assert res.returncode == 2 and res.stdout.strip().splitlines()[-1] == (
        f"stopped: no CUDA GPU here (torch {torch.__version__} sees none): on a CPU, "
        "python scripts/gpu_journey.py --device cpu --tiny rehearses the journey.")


FOUND = dict(modules=dict(nbclient="0.10.2", nbformat="5.11.1", ipykernel="7.4.0", matplotlib="3.9", pytest="8.3",
                          numpy="2.1", triton="3.2"), torch="2.11.0+cu130", cuda_available=True,
             txl_minimal=str(ROOT / "txl_minimal" / "__init__.py"), executable="python3")


def refusal(found=FOUND, base=ROOT, **opts):
    opts = Namespace(**dict(dict(device="cuda", parts=list(gpu_journey.PARTS), base="1ca0d58"), **opts))
    return gpu_journey.refusal(found, opts, base)


def test_what_is_missing_at_the_start_is_named_with_its_fix():
    assert refusal() is None
    no_wheels = dict(FOUND, modules=dict(FOUND["modules"], nbclient=None))
    assert "nbclient cannot be imported" in refusal(no_wheels)
    assert "scripts/gpu_wheels.sh download" in refusal(no_wheels) and "--skip nb04" in refusal(no_wheels)
    assert refusal(no_wheels, parts=["pair"]) is None  # --skip nb04
    assert "--prepare and carry .gpu-journey/ along" in refusal(base=None)
    assert "pip install pytest" in refusal(dict(FOUND, modules=dict(FOUND["modules"], pytest=None)))
    assert "not from this checkout" in refusal(dict(FOUND, txl_minimal="/usr/lib/python3/txl_minimal/__init__.py"))
    assert refusal(dict(FOUND, cuda_available=False), device="cpu") is None


def rows(rates: dict[str, float], probe=300, log_interval=50, compile_s=20.0):
    """Log rows of a probe: the first row holds the compiling, then each twin at its own speed."""
    return {n: [dict(step=s, wall_time_s=compile_s + (s - log_interval) / r) for s in range(log_interval, probe + 1,
                                                                                            log_interval)]
            for n, r in rates.items()}


def test_the_step_count_fits_the_budget_at_the_slower_twins_measured_speed():
    plan = gpu_journey.make_plan(rows(dict(txl=20.0, vanilla=30.0)), 300, 50, budget_s=360, cap=8000)
    spent = 20 + 250 / 20  # the probe's training time, compiling included
    assert plan["steps"] == int(300 + (360 - spent) * 20) // 50 * 50 == 6850 and plan["steps_per_s"]["txl"] == 20
    assert plan["eval_interval"] == 850  # about 8 evaluations, a multiple of the log interval
    capped = gpu_journey.make_plan(rows(dict(txl=40.0, vanilla=50.0)), 300, 50, budget_s=360, cap=8000)
    assert capped["steps"] == 8000 and "capped at 8,000" in capped["why"]
    short = gpu_journey.make_plan(rows(dict(txl=1.0, vanilla=1.0)), 300, 50, budget_s=100, cap=8000)
    assert short["steps"] == 350  # the probe outlasted the budget: one log interval more
