"""docs/course.md ("Use it in your course") runs as written: its Python blocks, in one namespace, and its
commands, in the page's order, in a temporary folder holding the ``my.txt`` the page talks about.

A ``bash`` block's lines are commands, ``python -m txl_minimal.MODULE ARGS``, run in this process through
the module's ``main(ARGS)`` (the same argparse, without an interpreter started for each); a training
command gets ``--max-steps 4 --no-progress --set warmup_steps=1`` added (the page says so), so that it
takes seconds. A line marked "not run by the tests" (a download) is not run; its flags are checked against the command's
``--help``. The page's links and headings: tests/test_docs.py; the page in the book: tests/test_book.py.
"""
from __future__ import annotations

import hashlib
import re
import shlex
import shutil
import subprocess

import pytest
import torch

from tiny import ROOT
from txl_minimal import evaluate, generate, pretrained, train
from txl_minimal.checkpoint import load, load_checkpoint
from txl_minimal.data import CorpusError, generate_text, load_corpus

PAGE = ROOT / "docs" / "course.md"
MAINS = {"txl_minimal.train": train.main, "txl_minimal.evaluate": evaluate.main,
         "txl_minimal.pretrained": pretrained.main, "txl_minimal.generate": generate.main}
TINY = ["--max-steps", "4", "--no-progress", "--set", "warmup_steps=1"]  # what a training command of the page gets here
NOT_RUN = "not run by the tests"
# the page's my.txt: a Russian poem (Pushkin, "Winter morning", 1829), about 19,000 characters
MY_TEXT = ("Мороз и солнце; день чудесный!\nЕщё ты дремлешь, друг прелестный —\n"
           "Пора, красавица, проснись:\n") * 200


def blocks(text: str) -> list[tuple[str, int, str]]:
    """(language, line number, code) of every fenced block of a Markdown page, in order."""
    return [(m[1], text[:m.start()].count("\n") + 2, m[2])
            for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, flags=re.S | re.M)]


def commands(code: str) -> list[tuple[str, list[str], bool]]:
    """(module, arguments, run?) of each line of a bash block: ``python -m MODULE ARGS  # comment``."""
    found = []
    for line in code.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        assert words[:2] == ["python", "-m"] and words[2] in MAINS, f"the test cannot run {line!r}"
        found.append((words[2], words[3:], NOT_RUN not in line))
    return found


def run_command(module: str, args: list[str]) -> None:
    extra = {"txl_minimal.train": TINY, "txl_minimal.generate": []}.get(module, ["--no-progress"])  # (generate: no bar)
    MAINS[module](args + extra)


def help_text(module: str, capsys) -> str:
    with pytest.raises(SystemExit):
        MAINS[module](["--help"])
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def page_run(tmp_path_factory):
    """Every block of the page run in order, in a fresh folder: (folder, the Python namespace, what was printed)."""
    folder = tmp_path_factory.mktemp("course")
    (folder / "my.txt").write_text(MY_TEXT, encoding="utf-8")
    namespace, printed = {"__name__": "course"}, []
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        mp.setenv("TXL_DATA_DIR", str(folder / "data"))
        mp.setattr("builtins.print", lambda *a, **k: printed.append(" ".join(map(str, a))))
        for language, line, code in blocks(PAGE.read_text(encoding="utf-8")):
            if language == "python":
                exec(compile(code, f"{PAGE}:{line}", "exec"), namespace)  # the page's own code, as written
            elif language == "bash":
                for module, args, run in commands(code):
                    if run:
                        run_command(module, args)
    return folder, namespace, "\n".join(printed)


def test_the_page_has_python_blocks_and_commands_and_no_other_code():
    found = blocks(PAGE.read_text(encoding="utf-8"))
    assert {language for language, _, _ in found} == {"python", "bash"}
    assert sum(language == "python" for language, _, _ in found) >= 4


def test_the_first_assignment_evaluates_with_memory_and_maps_attention(page_run):
    _, ns, printed = page_run
    bpc = {int(m[1]): float(m[2]) for m in re.finditer(r"^(0|64|192) (\d\.\d+)$", printed, flags=re.M)}
    assert set(bpc) == {0, 64, 192} and bpc[64] < bpc[0]  # the memory the model was trained with helps
    assert tuple(ns["by_distance"].shape[:2]) == (4, 4) and "(4, 4, " in printed


def test_the_commands_train_and_evaluate_on_the_file_keeping_its_vocabulary(page_run):
    folder, ns, printed = page_run
    corpus = ns["corpus"]
    chars = load_checkpoint(folder / "runs" / "mine" / "best.pt")
    assert chars["vocab"] == dict(unit="character", symbols=list(corpus.vocab))
    assert chars["model_config"]["vocab_size"] == corpus.vocab_size  # followed the file
    words = load_checkpoint(folder / "runs" / "mine-words" / "best.pt")
    assert words["vocab"]["unit"] == "word" and words["train_config"]["split"] == (0.8, 0.1, 0.1)
    assert f"runs/mine/best.pt on {(folder / 'my.txt').resolve()} valid: bpc" in printed


def test_the_python_run_trains_on_the_file_and_writes_its_script(page_run):
    folder, ns, printed = page_run
    corpus, result = ns["corpus"], ns["result"]
    assert f"character {corpus.vocab_size} Мороз и солнце" in printed
    assert result.step == 200 and (folder / result.out / "best.pt").is_file()
    assert result.model.vocab == tuple(corpus.vocab)
    assert ns["text"].startswith("Мороз") and len(ns["text"]) == 105 and set(ns["text"]) <= set(corpus.vocab)


def test_the_run_of_the_file_writes_what_generate_samples(page_run):
    folder, _, printed = page_run
    expected = generate_text(load(folder / "runs" / "mine"), "Мороз", 200, temperature=0.8,
                             generator=torch.Generator().manual_seed(0))  # the command's default --seed 0
    assert len(expected) == 205 and expected in printed


def test_the_error_bars_are_the_paired_difference_of_memory_and_none(page_run):
    _, ns, printed = page_run
    pairs = re.findall(r"^Paired\(mean=(-?[\d.e-]+), se=([\d.e-]+), blocks=(\d+)\)$", printed, flags=re.M)
    mean, se, blocks = float(pairs[0][0]), float(pairs[0][1]), int(pairs[0][2])
    assert blocks == 5 and mean < -2 * se < 0  # the memory txl-tiny was trained with helps, beyond its error
    line = re.search(r"^mem_len=64 minus mem_len=0: (-0\.\d{4}) bpc ± (0\.\d{4}) \(paired standard error over "
                     r"5 blocks of 1,000 of the same 5,000 predictions\)$", printed, flags=re.M)
    assert line and float(line[1]) == pytest.approx(mean, abs=6e-5) and float(line[2]) == pytest.approx(se, abs=6e-5)
    assert re.search(r"^runs/mine-py minus runs/mine: [+-]\d\.\d{4} bpc ± \d\.\d{4} \(paired standard error over "
                     r"4 blocks of 200 of the same 929 predictions\)$", printed, flags=re.M)


def test_the_seed_loop_trains_in_float32_and_pools_the_seeds(page_run):
    folder, ns, printed = page_run
    savings, pooled = ns["savings"], ns["pooled"](ns["savings"])
    assert [load_checkpoint(folder / "runs" / f"seed{s}" / "best.pt")["train_config"]["amp"] for s in (0, 1)] == \
        ["off", "off"]
    assert savings[0].mean != savings[1].mean and pooled.units == 2  # the seed moves the saving
    assert pooled.se == pytest.approx(abs(savings[0].mean - savings[1].mean) / 2)  # two units: half their gap
    assert repr(pooled) in printed


def test_the_shipped_file_loads_with_its_vocabulary_and_its_published_checksum(page_run):
    folder, ns, printed = page_run
    shipped = folder / "mine.safetensors"
    assert hashlib.sha256(shipped.read_bytes()).hexdigest() in printed.splitlines()
    assert load(shipped).vocab == tuple(ns["corpus"].vocab) and not ns["model"].training


def test_the_exercise_checkers_say_right_and_not_attempted(page_run):
    _, _, printed = page_run
    assert "check_mask: right" in printed and "not attempted yet" in printed


def test_the_autograder_passes_a_right_submission_and_fails_a_wrong_one_saying_what_differs(page_run):
    """The page's grader (checkers in raise mode, the course's own seed): full points for the worked answers,
    none for a submission that does not shift and leaves out u, each failure named; a part not written is
    "not attempted"; grading mode ends with the grader."""
    from txl_minimal.tutorial import exercises
    from txl_minimal.tutorial.exercises.checking import MODE
    _, ns, printed = page_run
    grade = ns["grade"]
    assert grade(ns["right"]) == {"points": {"rel_shift": 1, "attention": 1}, "feedback": {}}
    wrong = grade(ns["wrong"])
    assert wrong["points"] == {"rel_shift": 0, "attention": 0}
    assert wrong["feedback"]["rel_shift"].startswith("check_rel_shift: not yet: qlen=4, mlen=0: ")
    assert "values differ" in wrong["feedback"]["rel_shift"]
    assert wrong["feedback"]["attention"].startswith("check_attention_layer: not yet: qlen=5, mlen=0: term (c), "
                                                     "u^T k_j, is missing")
    alice = grade(ns["load_submission"](str(page_run[0] / "alice.py")))
    assert alice["points"] == {"rel_shift": 1, "attention": 0}
    assert alice["feedback"]["attention"] == ("check_attention_layer: not attempted yet: the answer is None or "
                                              "returns None")
    assert "alice {'rel_shift': 1, 'attention': 0}" in printed and "wrong {'rel_shift': 0, 'attention': 0}" in printed
    assert MODE["raises"] is False and exercises.check_rel_shift(None) is None  # the notebooks' mode again
    assert grade(ns["right"], seed=0) == grade(ns["right"])  # the notebooks' cases pass too


def test_a_command_not_run_here_has_flags_its_command_knows(capsys):
    skipped = [(module, args) for language, _, code in blocks(PAGE.read_text(encoding="utf-8")) if language == "bash"
               for module, args, run in commands(code) if not run]
    assert skipped, f"no command marked {NOT_RUN!r}: drop this test"
    for module, args in skipped:
        known = help_text(module, capsys)
        assert all(f"{flag} " in known or f"{flag}\n" in known for flag in args if flag.startswith("--"))


@pytest.mark.skipif(shutil.which("iconv") is None, reason="no iconv here (it comes with glibc: libc-bin)")
def test_the_conversion_the_page_gives_makes_a_latin1_file_a_corpus(tmp_path, monkeypatch):
    command = re.search(r"`(iconv [^`]+)`", PAGE.read_text(encoding="utf-8"))[1]
    assert command == "iconv -f LATIN1 -t UTF-8 in.txt > out.txt"
    monkeypatch.setenv("TXL_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "in.txt").write_bytes("Café au lait, naïve façade.\n".encode("latin-1") * 40)
    with pytest.raises(CorpusError, match="is not UTF-8 text"):
        load_corpus(tmp_path / "in.txt")
    subprocess.run(command, shell=True, cwd=tmp_path, check=True)  # the page's own command, as written
    converted = load_corpus(tmp_path / "out.txt")
    assert converted.decode(converted.encode("Café naïve")) == "Café naïve"


def test_the_tests_the_guarantees_name_exist():
    """Each row of "What the tests guarantee" names test files (links) and tests (`test_...`): they exist."""
    section = PAGE.read_text(encoding="utf-8").split("## What the tests guarantee")[1].split("\n## ")[0]
    rows = [row for row in section.splitlines() if row.startswith("| ") and "tests/" in row]
    assert len(rows) >= 8
    for row in rows:
        files = [ROOT / "docs" / p for p in re.findall(r"\]\((\.\./tests/[\w/.]+\.py)\)", row)]
        assert files and all(f.is_file() for f in files), row
        source = "".join(f.read_text(encoding="utf-8") for f in files)
        for name in re.findall(r"`(test_\w+)`", row):
            assert f"def {name}(" in source, f"{name} is not in {', '.join(f.name for f in files)}"


def test_commands_are_read_with_their_comments_and_marks():
    code = ("python -m txl_minimal.train --corpus my.txt --out runs/x   # a comment\n\n"
            f"python -m txl_minimal.evaluate runs/x  # {NOT_RUN}: a GPU\n")
    assert commands(code) == [("txl_minimal.train", ["--corpus", "my.txt", "--out", "runs/x"], True),
                              ("txl_minimal.evaluate", ["runs/x"], False)]
    with pytest.raises(AssertionError, match="the test cannot run 'pip install x'"):
        commands("pip install x")
    assert blocks("a\n```python\nx = 1\n```\n\n```bash\npython -m y\n```\n") == [
        ("python", 3, "x = 1\n"), ("bash", 7, "python -m y\n")]

