"""The README is a landing page; the manual is docs/*.md, the book's pages after the notebooks.

Read as Markdown files, as GitHub shows them (the built site: tests/test_book.py): the README stays
short and links every page, each page opens with its title and a short intro, and every relative
link of the README and the pages leads to a file of the repository, and an anchor to a heading there.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
LANDING_LINES = 200  # a newcomer reads the README in two minutes
LINK = re.compile(r"\]\(([^)\s]+)\)")


def strip_code(markdown: str) -> str:
    """Markdown without its fenced code blocks (a link or heading inside one is not one)."""
    return re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub (and MyST's heading anchors) make it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings."""
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", strip_code(path.read_text(encoding="utf-8")), flags=re.M)}


def broken_links(path: Path) -> list[str]:
    """Relative links of ``path`` to a file that does not exist, or to a heading its target lacks."""
    broken = []
    for target in LINK.findall(strip_code(path.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no such heading)")
    return broken


def test_slug_is_githubs():
    assert slug("Read it without running it: `make book`") == "read-it-without-running-it-make-book"
    assert slug("Notation (every notebook)") == "notation-every-notebook"
    assert slug("A smaller corpus than the preset's") == "a-smaller-corpus-than-the-presets"


def test_the_readme_is_a_landing_page_that_links_every_page_of_the_manual():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= LANDING_LINES, "the README grew: move the detail to a page of docs/"
    assert DOCS, "docs/ has no pages"
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in LINK.findall(text)}
    assert [p.name for p in DOCS if p.resolve() not in linked] == []
    # the quick start's two commands (CI's .ci/run runs the test command the README names)
    block = re.search(r"## Quick start\n.*?```bash\n(.*?)```", text, flags=re.S)[1]
    assert [line.split()[:2] for line in block.splitlines()] == [["make", "lab"], ["make", "test"]]
    # notebooks cite the notation table as the README's
    assert "notation-every-notebook" in anchors(README)


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_each_page_opens_with_its_title_and_a_short_intro(page):
    text = strip_code(page.read_text(encoding="utf-8"))
    title, blank, *rest = text.splitlines()
    assert title.startswith("# ") and not blank.strip(), f"{page.name}: a '# title' line, then a blank line"
    intro = "\n".join(rest).split("\n\n")[0]
    assert intro and intro[0] not in "#|-<", f"{page.name}: after the title, a paragraph saying what the page holds"
    assert len(intro) <= 700, f"{page.name}: the intro is {len(intro)} characters; keep it short"
    assert text.count("\n# ") == 0, f"{page.name}: one '# title' a page"


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_lead_to_files_and_headings_on_github(path):
    assert broken_links(path) == []


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\n## Some part\n\nx [b](b.md) [c](a.md#some-part) [d](a.md#none) "
                                   "[e](https://example.org/x)\n\n```\n[f](inside-code.md)\n```\n")
    assert broken_links(tmp_path / "a.md") == ["b.md (no such file)", "a.md#none (no such heading)"]


# ----------------------------------------------------------------------------- the pages' Python runs

RUN_ELSEWHERE = {"course.md"}  # tests/test_course.py runs its blocks and commands, in their order
RUNNABLE = [p for p in DOCS if p.name not in RUN_ELSEWHERE and "```python\n" in p.read_text(encoding="utf-8")]


def run_python_blocks(page: Path) -> tuple[dict, str]:
    """Every ```python block of ``page``, in order, in one namespace: (the namespace, what they printed)."""
    import contextlib
    import io
    text, namespace, out = page.read_text(encoding="utf-8"), {"__name__": "docs"}, io.StringIO()
    with contextlib.redirect_stdout(out):
        for m in re.finditer(r"^```python\n(.*?)^```$", text, flags=re.S | re.M):
            exec(compile(m[1], f"{page}:{text[:m.start()].count(chr(10)) + 2}", "exec"), namespace)
    return namespace, out.getvalue()


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: p.name)
def test_the_python_blocks_of_each_page_run_as_written(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TXL_DATA_DIR", str(tmp_path / "data"))
    run_python_blocks(page)


def test_the_package_page_reports_memory_against_none_with_its_paired_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ns, printed = run_python_blocks(ROOT / "docs" / "package.md")
    paired = ns["paired_difference"](ns["nll"][64], ns["nll"][0], block=1000)
    assert printed.splitlines()[-1] == repr(paired) and paired.blocks == 5
    assert paired.mean < -2 * paired.se  # the memory the model was trained with helps, beyond its error
