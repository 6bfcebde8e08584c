"""The scripts that trained the shipped results (scripts/*.py): none writes into a shipped folder unless asked
by name (--replace-shipped), their smoke tests write elsewhere, their counts are checked where they are
parsed, and a results file keeps runs of an earlier call only under a description that is still theirs."""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from tiny import ROOT
from txl_minimal.shipped_files import SHIPPED_FOLDERS, shipped_folder

# every script with an --out (what it writes; its default: a shipped folder)
SCRIPTS = ("own_text", "ablation", "long_range", "long_range_relay", "lstm_text", "word_level")


def script(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_script", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shipped_state() -> dict[str, tuple[int, int]]:
    """Every file of the shipped folders: its size and mtime (what a write would change)."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for folder in SHIPPED_FOLDERS if folder.exists()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(main, argv: list[str], capsys) -> str:
    """What ``main(argv)`` says on its way out with argparse's status 2."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert "Traceback" not in err
    return err


# 1. no script writes into a shipped folder unless asked by name ----------------------------------

@pytest.mark.parametrize("name", SCRIPTS)
def test_no_script_writes_into_a_shipped_folder_unless_asked_by_name(name, capsys):
    """`python scripts/own_text.py --only code --mems 0 --steps 3` (own_text's smoke test without its --out)
    used to replace the shipped code-m0.safetensors, its log.csv and results.json, which notebook 09 reads;
    so did every script's default --out. Now each is refused before anything is written."""
    before = shipped_state()
    main = script(name).main
    argv = ["--only", "code", "--mems", "0", "--steps", "3"] if name == "own_text" else ["--steps", "3"]
    err = refused(main, argv, capsys)
    assert "would write into the shipped folder" in err or ", in the shipped folder" in err
    assert "nothing was written" in err and "--replace-shipped" in err and "Fix: --out runs/" in err
    inside = SHIPPED_FOLDERS[0] / ("own_text" if name == "own_text" else name)  # a path naming one, too
    assert "--replace-shipped" in refused(main, [*argv, "--out", str(inside)], capsys)
    assert shipped_state() == before


def test_the_scripts_docstrings_say_how_each_command_writes():
    """Their smoke tests write outside the shipped folders; a command without --out asks for them by name."""
    for name in SCRIPTS:
        commands = re.findall(r"^ {4}python (scripts/\S+\.py.*?)(?:#(.*))?$", script(name).__doc__, re.M)
        assert commands, name
        for command, comment in commands:
            args = command.split()
            if "smoke test" in (comment or ""):
                assert "--out" in args and shipped_folder(args[args.index("--out") + 1]) is None, command
            elif "--out" not in args:
                assert "--replace-shipped" in args, command


def test_the_ablation_as_a_function_refuses_the_shipped_folder_too(tmp_path):
    ablation = script("ablation")
    before = shipped_state()
    with pytest.raises(ValueError, match=r"would write into .*, in the shipped folder .*Fix: --out runs/ablation"):
        ablation.run_ablation(steps=1, tiny=True, only=["rel_mem"], seeds=1)
    assert shipped_state() == before


# 4. each argument checked where it is given; results.json's description stays its runs' ----------

def utf16_file(path: Path) -> str:
    path.write_bytes("def f():\n    return 1\n".encode("utf-16"))
    return str(path)


OWN_TEXT_BAD = [  # argv (OUT added), what the one line says
    (["--text", "{tmp}/missing.txt"], "missing.txt does not exist"),
    (["--text", "{utf16}"], "is UTF-16 text"),
    (["--steps", "0"], "argument --steps: must be an integer >= 1, got '0'"),
    (["--mems", "-1"], "argument --mems: must be an integer >= 0, got '-1'"),
    (["--threads", "0"], "argument --threads: must be an integer >= 1"),
    (["--seed", "-1"], "argument --seed: must be an integer >= 0"),
    (["--only", "code", "--score-only", "0"], "--score-only 0 scores the weights an earlier run saved, and there is "
                                              "no {out}/code-m0.safetensors"),
    (["--score-only", "128"], "--score-only 128: not among the memories trained, --mems 0 64 256"),
    (["--only", "text8-mini", "--text", "{utf16}"], "--only text8-mini trains no code run"),
]


@pytest.mark.parametrize("argv, said", OWN_TEXT_BAD, ids=[" ".join(a) for a, _ in OWN_TEXT_BAD])
def test_own_text_says_what_is_wrong_with_an_argument_in_one_line(argv, said, tmp_path, capsys):
    """A missing or UTF-16 --text, --steps 0, --mems -1, --score-only 0 with nothing saved: tracebacks."""
    out, utf16 = tmp_path / "out", utf16_file(tmp_path / "u16.txt")
    fill = dict(tmp=tmp_path, utf16=utf16, out=out)
    err = refused(script("own_text").main, [a.format(**fill) for a in argv] + ["--out", str(out)], capsys)
    assert said.format(**fill) in err
    assert not out.exists()  # nothing written


COUNTS = [(name, flag) for name in SCRIPTS for flag in ("--steps", "--threads", "--eval-tokens", "--seeds")
          if f'"{flag}"' in (ROOT / "scripts" / f"{name}.py").read_text()]  # the flags each script has


@pytest.mark.parametrize("name, flag", COUNTS)
def test_every_scripts_counts_are_checked_by_argparse(name, flag, tmp_path, capsys):
    """The same argument kinds in the other scripts: --steps 0 reached TrainConfig (a traceback), or trained
    nothing and wrote results of 0 steps; --threads 0 was torch's RuntimeError."""
    err = refused(script(name).main, [flag, "0", "--out", str(tmp_path / "out")], capsys)
    assert f"argument {flag}: must be an integer >= 1, got '0'" in err
    assert not (tmp_path / "out").exists()


def fake_run(corpus, name, mem_len, steps, out, score_only=False, resume=False, seed=0):
    """own_text's ``run`` without the training: the record results.json gets."""
    (out / name).mkdir(parents=True, exist_ok=True)
    return dict(corpus="code" if name.startswith("code") else corpus.name, mem_len=mem_len, seed=seed, steps=steps)


def test_own_text_keeps_earlier_runs_only_under_their_own_description(tmp_path, capsys, monkeypatch):
    """`--text ru.txt --out D --only code`, then `--out D --only text8-mini`: results.json relabelled the
    kept code runs as Python's standard library (its meta's "code", which notebook 09 prints, came from the
    second call's arguments). Code runs of another text, or runs of other steps, beside them are refused."""
    own_text = script("own_text")
    monkeypatch.setattr(own_text, "run", fake_run)
    text, out = tmp_path / "ru.txt", tmp_path / "D"
    text.write_text("Мороз и солнце; день чудесный!\n" * 400)
    own_text.main(["--text", str(text), "--out", str(out), "--only", "code", "--mems", "0", "--steps", "3"])
    own_text.main(["--out", str(out), "--only", "text8-mini", "--mems", "0", "--steps", "3"])
    results = json.loads((out / "results.json").read_text())
    assert sorted(results["runs"]) == ["code-m0", "text8-m0"]
    assert results["meta"]["code"] == str(text)  # still what the code run read
    before = (out / "results.json").read_bytes()
    err = refused(own_text.main, ["--out", str(out), "--only", "code", "--mems", "64", "--steps", "3"], capsys)
    assert f"its code runs code-m0 read {text}; these read the top-level modules of Python's standard library" in err
    err = refused(own_text.main, ["--out", str(out), "--only", "text8-mini", "--mems", "64", "--steps", "5"], capsys)
    assert "were trained for 3 steps, these for 5" in err and "Nothing was trained" in err
    assert (out / "results.json").read_bytes() == before
    # retraining the code run itself on another text is fine: no code run of the old text is left beside it
    own_text.main(["--text", str(text), "--out", str(out), "--only", "code", "--mems", "0", "--steps", "3"])


def test_the_ablation_no_longer_drops_the_runs_it_cannot_keep(tmp_path, capsys):
    """--only with other --steps (or --tiny, --seeds) than results.json's rewrote it without the other
    variants' runs, without a word."""
    ablation = script("ablation")
    meta = dict(steps=2, tiny=True, seeds=[0], total_wall_s=9.0, threads=1)
    (tmp_path / "results.json").write_text(json.dumps(dict(meta=meta, runs={"rel_mem": {"train_wall_s": 1.0,
                                                                                        "eval_wall_s": 1.0}})))
    before = (tmp_path / "results.json").read_bytes()
    err = refused(ablation.main, ["--steps", "3", "--tiny", "--seeds", "1", "--out", str(tmp_path), "--only",
                                  "abs_mem"], capsys)
    assert "holds runs (rel_mem) made with steps 2, tiny True, seeds [0]" in err and "steps 3" in err
    assert (tmp_path / "results.json").read_bytes() == before
    assert ablation._kept_runs(tmp_path / "results.json", 2, True, 1, ["abs_mem"])["rel_mem"]  # the same: kept


def test_long_range_keeps_models_only_of_its_own_settings(tmp_path, capsys):
    """--only replaced long_range.json's steps with its own over the models it kept."""
    shutil.copy(ROOT / "results" / "long_range.json", tmp_path / "long_range.json")
    before = (tmp_path / "long_range.json").read_bytes()
    err = refused(script("long_range").main, ["--out", str(tmp_path), "--only", "xl", "--steps", "20"], capsys)
    assert "of --steps 8000 --eval-tokens 200000, and these would be of --steps 20" in err
    assert (tmp_path / "long_range.json").read_bytes() == before


def test_rebuilding_text8_mini_changes_the_shipped_file_only_when_asked(tmp_path, capsys, monkeypatch):
    """data/build_text8_mini.py wrote the rebuilt file over the shipped one even where another zlib gave
    other bytes: MANIFEST.json then called the package's corpus damaged."""
    spec = importlib.util.spec_from_file_location("build", ROOT / "data" / "build_text8_mini.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    monkeypatch.setattr(build, "read_source", lambda path: b"")
    monkeypatch.setattr(build, "build_text", lambda raw: "the same text")
    monkeypatch.setattr(build, "compress", lambda text: b"other gzip bytes")
    before = shipped_state()
    err = refused(build.main, ["gensim.whl"], capsys)
    assert "holds the same text in other gzip bytes" in err and "--replace-shipped" in err
    assert shipped_state() == before
    build.main(["gensim.whl", "--out", str(tmp_path / "mini.txt.gz")])  # elsewhere: written
    assert (tmp_path / "mini.txt.gz").read_bytes() == b"other gzip bytes"
