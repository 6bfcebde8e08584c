"""CI (.ci/run): the README's test command, then the tests that need what `make test`'s venv lacks.

A test that only skips in CI is not a test: .ci/run installs Debian's chromium (.ci/browser) and the book's
packages (`make book`), then `make e2e` runs tests/test_book.py and tests/e2e. Where apt-get cannot install
chromium, .ci/browser says so in one line and CI goes on (the browser tests then skip, saying so too).
"""
from __future__ import annotations

import re
import shutil
import subprocess

from tiny import ROOT

SKIPPED = re.compile(r"\.ci/browser: chromium not installed \(.+\): the browser tests \(tests/e2e\) will skip")


def recipe(target: str) -> str:
    """The first command of a Makefile target."""
    return re.search(rf"^{re.escape(target)}:.*\n\t(.+)$", (ROOT / "Makefile").read_text(), re.M)[1]


def test_ci_runs_the_readme_test_command_then_the_book_and_the_browser_tests():
    lines = [line.split("#")[0].strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert [line for line in lines if line.startswith(("make ", ".ci/"))] == [
        ".ci/browser", "make test", "make test-min", "make book", "make e2e"]
    # make test leaves the browser tests to make e2e (its time does not depend on a browser being there)
    assert re.search(r"--ignore=tests/e2e .*\btests\b", recipe("test"))
    # two files at a time, one thread each (docs/testing.md: the suite's time)
    makefile, pins = (ROOT / "Makefile").read_text(), (ROOT / "requirements-dev.txt").read_text()
    assert "$(PAR)" in recipe("test") and re.search(r"^PAR +:= -n 2 --dist loadfile --no-loadscope-reorder$", makefile,
                                                    re.M)
    # one session, files handed out in the order given: the longest notebooks, the tests, the other notebooks
    assert recipe("test").endswith(" $(LONGEST) tests $(filter-out $(LONGEST),$(NOTEBOOKS))")
    longest = re.search(r"^LONGEST +:= (.+)$", makefile, re.M)[1].split()
    assert len(longest) == 3 and all((ROOT / nb).is_file() for nb in longest)
    assert "TXL_THREADS=1" in makefile and "pytest-xdist==" in pins
    assert recipe("e2e").endswith(" tests/test_book.py tests/e2e")


def run_browser_step(path: str) -> subprocess.CompletedProcess:
    return subprocess.run([shutil.which("bash"), str(ROOT / ".ci" / "browser")], env={"PATH": path},
                          capture_output=True, text=True, timeout=60)


def test_without_apt_get_the_browser_step_says_in_one_line_what_it_skips_and_ci_goes_on(tmp_path):
    out = run_browser_step(str(tmp_path))  # no chromium, no apt-get
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.splitlines() == [
        ".ci/browser: chromium not installed (no apt-get here): the browser tests (tests/e2e) will skip"]


def test_a_failing_apt_get_is_said_in_one_line_too(tmp_path):
    apt = tmp_path / "apt-get"  # as on a machine without its package registry (or not root)
    apt.write_text("#!/bin/sh\nexit 100\n")
    apt.chmod(0o755)
    out = run_browser_step(str(tmp_path))
    assert out.returncode == 0 and len(out.stdout.splitlines()) == 1 and SKIPPED.fullmatch(out.stdout.strip())
