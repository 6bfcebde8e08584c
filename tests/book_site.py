"""The book (`make book`, book/build.py) for the tests: built once per session, and what it must hold.

tests/test_book.py reads the built HTML; tests/e2e/test_book_browser.py opens it in chromium.
Both skip, with one line, where requirements-book.txt is not installed (`make book` installs it).
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALL = "make book (or pip install -r requirements-book.txt)"
_spec = importlib.util.spec_from_file_location("book_build", ROOT / "book" / "build.py")
build = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = build  # dataclasses look their module up there
_spec.loader.exec_module(build)
_SITE: dict[str, Path] = {}


def missing_packages() -> list[str]:
    """The book's packages that are not installed (empty when `make book` can run)."""
    return [name for name in ("sphinx", "myst_nb", "sphinx_book_theme", "mathjax")
            if importlib.util.find_spec(name) is None]


def built_site(tmp_path_factory) -> Path:
    """The site's html folder, built once per test session into a temporary folder."""
    if "html" not in _SITE:
        _SITE["html"] = build.build(tmp_path_factory.mktemp("book"))
    return _SITE["html"]


def strip_code(markdown: str) -> str:
    """Markdown without fenced code blocks and code spans (no math is parsed inside them)."""
    markdown = re.sub(r"^(```|~~~).*?^\1", "", markdown, flags=re.S | re.M)
    return re.sub(r"(`+)(?!`).+?(?<!`)\1(?!`)", "", markdown, flags=re.S)


def count_math(markdown: str) -> int:
    """How many formulas Jupyter renders in a markdown cell: every ``$$…$$`` and ``$…$``
    outside code (``\\$`` is a dollar sign; inline math does not cross a blank line)."""
    text = strip_code(markdown).replace("\\$", "")
    display = len(re.findall(r"\$\$.+?\$\$", text, flags=re.S))
    text = re.sub(r"\$\$.+?\$\$", "", text, flags=re.S)
    return display + len(re.findall(r"\$(?:[^$\n]|\n(?!\s*\n))+?\$", text))


# The types of an output MyST-NB shows in HTML, first found first (its default render priority for
# the html builder, after widgets and JavaScript): a bundle with HTML and plain text shows its HTML.
SHOWN_FIRST = ("text/html", "image/svg+xml", "image/png", "image/jpeg", "text/markdown", "text/latex", "text/plain")


def shown_text(output: dict) -> str:
    """The HTML or Markdown an output shows on a page ("" when it shows an image or plain text)."""
    data = output.get("data", {})
    mime = next((m for m in SHOWN_FIRST if m in data), None)
    if mime not in ("text/html", "text/markdown"):
        return ""
    return "".join(data[mime]) if isinstance(data[mime], list) else data[mime]


def notebook_facts(path: Path) -> dict:
    """What the page of one notebook must show: its formulas, folded answers (``<details>`` in its markdown
    cells and in the HTML its cells printed), figures, the Colab link and how often the page links it."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    markdown = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
    outputs = [o for c in nb["cells"] for o in c.get("outputs", [])]
    colab = f"https://colab.research.google.com/github/txl-tutorial/txl-tutorial/blob/main/notebooks/{path.name}"
    return {
        "page": f"notebooks/{path.stem}.html",
        "math": sum(count_math(m) for m in markdown),
        "details": sum(t.count("<details") for t in [*map(strip_code, markdown), *map(shown_text, outputs)]),
        "figures": sum("image/png" in o.get("data", {}) for o in outputs),
        "widgets": sum(build.WIDGET_MIME in o.get("data", {}) for o in outputs),
        "colab": colab,
        "colab_links": sum(m.count(colab) for m in markdown) + 1,  # the notebook's own, and the header's button
    }


def site_pages(html: Path) -> list[str]:
    """Every page of the built site (relative paths), the theme's template fragments left out."""
    return sorted(p.relative_to(html).as_posix() for p in html.rglob("*.html")
                  if not p.relative_to(html).as_posix().startswith("_static/"))
