"""`make book`: the staging of book/build.py, and the built site read as HTML (no browser).

The browser's view (formulas typeset, images drawn, links followed) is tests/e2e/test_book_browser.py.
The site tests skip, in one line, without requirements-book.txt's packages (`make book` installs them).
"""
from __future__ import annotations

import copy
import json
import re
from html.parser import HTMLParser

import pytest

import txl_minimal
from book_site import INSTALL, ROOT, build, built_site, count_math, missing_packages, notebook_facts, site_pages

NOTEBOOKS = build.notebooks()
NB05 = next(p for p in NOTEBOOKS if p.name.startswith("05_"))


# --- staging (no Sphinx needed) ---

def test_links_to_pages_stay_in_the_site_and_other_files_go_to_github():
    pages = build.link_pages()
    text = ("[a](notebooks/05_attention_over_memory.ipynb) [b](txl_minimal/model.py#L3) [c](tests/gpu) "
            "[d](CONTRIBUTING.md) [e](https://arxiv.org/abs/1901.02860) [f](#layout) [g](.github/ISSUE_TEMPLATE/)")
    out = build.rewrite_links(text, "README.md", pages, "index.md")
    assert out == ("[a](notebooks/05_attention_over_memory.ipynb) "
                   "[b](https://github.com/txl-tutorial/txl-tutorial/blob/main/txl_minimal/model.py#L3) "
                   "[c](https://github.com/txl-tutorial/txl-tutorial/tree/main/tests/gpu) [d](contributing.md) "
                   "[e](https://arxiv.org/abs/1901.02860) [f](#layout) "
                   "[g](https://github.com/txl-tutorial/txl-tutorial/tree/main/.github/ISSUE_TEMPLATE)")
    # from a notebook, relative to notebooks/
    page = "notebooks/05_attention_over_memory.ipynb"
    nb = build.rewrite_links("[r](../README.md) [s](06_context_usage.ipynb) [t](../txl_minimal/)", page, pages, page)
    assert nb == ("[r](../index.md) [s](06_context_usage.ipynb) "
                  "[t](https://github.com/txl-tutorial/txl-tutorial/tree/main/txl_minimal)")
    # from a page of docs/: links relative to docs/, as GitHub reads them
    page = "docs/setup.md"
    doc = build.rewrite_links("[a](training.md#the-commands) [b](../README.md#quick-start) "
                              "[c](../txl_minimal/model.py) [d](../CONTRIBUTING.md) "
                              "[e](../notebooks/05_attention_over_memory.ipynb)", page, pages, page)
    assert doc == ("[a](training.md#the-commands) [b](../index.md#quick-start) "
                   "[c](https://github.com/txl-tutorial/txl-tutorial/blob/main/txl_minimal/model.py) "
                   "[d](../contributing.md) [e](../notebooks/05_attention_over_memory.ipynb)")


def staged_names() -> dict[str, str]:
    """The names of the pages stage() writes (their text left empty)."""
    names = ["index.md", "package_map.md", f"{build.API_PAGE}.md", "contributing.md",
             *(f"docs/{p.name}" for p in build.docs_pages()),
             *(f"notebooks/{p.name}" for p in NOTEBOOKS)]
    return dict.fromkeys(names, "")


def test_every_page_of_docs_is_in_the_table_of_contents_once_and_in_its_order():
    listed = [page for chapter in build.CHAPTERS.values() for page in chapter]
    assert len(listed) == len(set(listed))
    assert {p for p in listed if p.startswith("docs/")} == {f"docs/{p.stem}" for p in build.docs_pages()}
    build.check_chapters(staged_names())  # the repository as it is: no complaint
    toc = build.index_page().split("```{toctree}")[1:]
    assert [line for block in toc for line in block.split("```")[0].splitlines()
            if line and not line.startswith(":")] == [f"notebooks/{p.stem}" for p in NOTEBOOKS] + listed


def test_a_page_missing_from_the_table_of_contents_or_a_listed_page_missing_is_refused():
    with pytest.raises(SystemExit, match=r"docs/extra\.md is not in the book's table of contents\. "
                                         r"Fix: add 'docs/extra' to CHAPTERS in book/build\.py"):
        build.check_chapters({**staged_names(), "docs/extra.md": ""})
    listed = next(iter(build.CHAPTERS.values()))[0]
    fewer = {name: text for name, text in staged_names().items() if name != f"{listed}.md"}
    with pytest.raises(SystemExit, match=rf"lists {listed}, which is not a page \(no {listed}\.md\)\. Fix: add the"):
        build.check_chapters(fewer)


def section_id(name: str) -> str:
    """The id Sphinx gives the section of a heading (docutils: lowercase, other characters as "-")."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def test_the_api_page_indexes_every_public_name_and_gives_each_its_entry():
    page = build.api_page()
    public = build.public_names()
    entries = build.api_entries()
    assert [e.name for e in entries[:len(public)]] == public == list(txl_minimal.__all__)
    index = page.split("\n## ")[0]
    for e in entries:
        assert f"| [`{e.name}`](#{e.anchor}) | `{e.imported_from}` |" in index
        entry = page.split(f"\n## {build.md_text(e.title)}\n")[1].split("\n## ")[0]
        assert f"`from {e.imported_from} import {e.name}`" in entry and f"```python\n{e.signature}\n```" in entry
        assert "**Examples:**\n\n```pycon\n>>> " in entry, e.name
    assert [e.name for e in entries[len(public):] if not e.group] == [n for _, n in build.FROM_MODULES
                                                                       if n not in public]
    # a module a course imports whole: its own heading, its names headed with it (solutions.mask, not mask)
    for module, _ in build.MODULES:
        assert f"\n## {build.md_text(module)}\n" in page and f"**`{module}`**: " in index
    assert "\n## tutorial.exercises.check\\_attention\\_layer\n" in page
    assert len({e.anchor for e in entries}) == len(entries)  # no two entries share a heading
    # a link from a page of docs/ to the package's list of names leads to this page in the site
    out = build.rewrite_links("[API](../txl_minimal/__init__.py)", "docs/course.md", build.link_pages(),
                              "docs/course.md")
    assert out == "[API](../api.md)"


def test_the_package_map_lists_every_module_of_every_package():
    """A subpackage's modules (tutorial/exercises/: one module of checkers per notebook) are on the map too."""
    page = build.package_map()
    for path in sorted((ROOT / "txl_minimal").rglob("*.py")):
        assert f"| [`{path.relative_to(ROOT).as_posix()}`](" in page, path
    assert "## The exercises' checkers" in page


PACKAGE = {  # a package that cannot be imported here (no such torch), read from its source
    "__init__.py": "import torch\nfrom .a import f as g, K\n_LAZY = {'C': 'b'}\n__all__ = ['g', 'K'] + list(_LAZY)\n",
    "a.py": 'from txl_minimal.b import K\n\n\ndef f(x: "Optional[np.ndarray]", *, n: int = 2) -> str:\n'
            '    """What f is."""\n',
    "b.py": 'from dataclasses import dataclass, field\nK = 3\n"""K\'s docstring."""\n\n\n@dataclass\nclass C:\n'
            '    """A record."""\n    # above\n    a: int = 1  # after\n    b: list = field(default_factory=list)\n\n'
            '    def m(self) -> int:\n        return 1\n',
}


def test_the_api_page_reads_the_source_following_imports_and_refuses_a_name_defined_nowhere(tmp_path):
    (tmp_path / "txl_minimal").mkdir()
    for name, text in PACKAGE.items():
        (tmp_path / "txl_minimal" / name).write_text(text)
    g, k, c = build.api_entries(tmp_path, extra=(), modules=())
    assert (g.name, g.module, g.kind, g.doc) == ("g", "txl_minimal.a", "function", "What f is.")
    assert g.signature == "g(x: ndarray | None, *, n: int = 2) -> str" and g.params == ["x", "n"]
    assert (k.module, k.kind, k.signature, k.doc) == ("txl_minimal.b", "constant", "K = 3", "K's docstring.")
    assert c.signature == "C(\n    # above\n    a: int = 1,  # after\n    b: list = [],\n)" and c.params == ["a", "b"]
    assert [(m.name, m.kind, m.signature) for m in c.methods] == [("C.m", "method", "C.m() -> int")]
    (tmp_path / "txl_minimal" / "__init__.py").write_text("__all__ = ['nowhere']\n")
    with pytest.raises(SystemExit, match=r"txl_minimal\.nowhere is exported but neither defined nor imported .*Fix:"):
        build.api_entries(tmp_path, extra=(), modules=())


@pytest.mark.parametrize("text, markdown", [
    ("<unk> and <eos>", r"\<unk\> and \<eos\>"), ("$TXL_CORPUS, $x", r"\$TXL\_CORPUS, \$x"),
    ("``a_b*c`` but a_b*c", r"``a_b*c`` but a\_b\*c"), ("[0, vocab_size)", r"\[0, vocab\_size)")])
def test_docstring_prose_is_escaped_for_markdown_outside_code(text, markdown):
    assert build.md_text(text) == markdown


def test_docstring_sections_and_indented_text_render_as_blocks():
    doc = ("Summary.\n\nProse.\n  x   a table\n  y   row\n- item\n  goes on\n\n"
           "Args:\n    n: the count,\n        continued.\n\nReturns:\n    Two.\n\nExamples:\n    >>> 1 + 1\n    2\n")
    _, sections = build.docstring_sections(doc)
    assert list(sections) == ["Args", "Returns", "Examples"] and sections["Examples"] == ">>> 1 + 1\n2"
    assert build.docstring_markdown(doc) == (
        "Summary.\n\nProse.\n\n```text\nx   a table\ny   row\n```\n\n- item\n  goes on\n\n"
        "**Args:**\n\n- `n`: the count, continued.\n\n**Returns:** Two.\n\n"
        "**Examples:**\n\n```pycon\n>>> 1 + 1\n2\n```")


def test_a_long_signature_is_shown_one_parameter_a_line():
    assert build.signature("f", ["a: int", "b: str = 'x'"], "None") == "f(a: int, b: str = 'x') -> None"
    n = 6
    long = build.signature("f", [f"argument_{i}: int = {i}" for i in range(n)], "dict").splitlines()
    assert long[0] == "f(" and long[1] == "    argument_0: int = 0," and long[-1] == ") -> dict" and len(long) == n + 2


def test_the_colab_badge_image_comes_from_the_site_and_its_link_stays():
    cell = f"[![Open In Colab]({build.COLAB_BADGE})](https://colab.research.google.com/github/x/y/blob/main/n.ipynb)"
    page = "notebooks/n.ipynb"
    out = build.local_badge(build.rewrite_links(cell, page, {}, page), page)
    assert out == "[![Open In Colab](../colab-badge.svg)](https://colab.research.google.com/github/x/y/blob/main/n.ipynb)"


def test_the_explorer_becomes_its_stored_figure_under_a_line_saying_it_is_live_in_jupyter():
    nb = json.loads(NB05.read_text(encoding="utf-8"))
    before = copy.deepcopy(nb)
    assert build.static_widgets(nb) == notebook_facts(NB05)["widgets"] > 0
    assert "widgets" not in nb["metadata"]  # no widget state: no widget JavaScript is asked for
    outs = [(i, o) for i, c in enumerate(nb["cells"]) for o in c.get("outputs", [])]
    assert not [i for i, o in outs if build.WIDGET_MIME in o.get("data", {})]
    i, note = next((i, o) for i, o in outs if "text/markdown" in o.get("data", {}))
    assert note["data"]["text/markdown"].startswith("**Live in Jupyter:**")
    assert "layer = 2, head = 2, query = " in note["data"]["text/markdown"]  # the sliders as stored
    after_note = [o for j, o in outs if j == i]
    assert "image/png" in after_note[after_note.index(note) + 1]["data"]  # the figure follows the line
    # every other cell is unchanged
    others = [j for j in range(len(nb["cells"])) if j != i]
    assert [nb["cells"][j] for j in others] == [before["cells"][j] for j in others]


def test_a_widget_without_stored_state_still_gets_the_line():
    widget = {"output_type": "display_data", "metadata": {},
              "data": {build.WIDGET_MIME: {"model_id": "x"}, "text/plain": "w"}}
    nb = {"metadata": {}, "cells": [{"cell_type": "code", "source": "", "metadata": {}, "outputs": [widget]}]}
    assert build.static_widgets(nb) == 1
    assert [o["data"] for o in nb["cells"][0]["outputs"]] == [{"text/markdown": build.widget_note([])}]


def test_cells_folded_in_jupyterlab_are_folded_on_the_site():
    nb = json.loads(NOTEBOOKS[0].read_text(encoding="utf-8"))
    assert nb["cells"][1]["metadata"]["jupyter"]["source_hidden"]  # the Colab set-up cell
    build.fold_hidden(nb)
    assert nb["cells"][1]["metadata"]["tags"] == ["hide-input"]
    assert not any("hide-input" in c["metadata"].get("tags", []) for c in nb["cells"][2:])


@pytest.mark.parametrize("markdown, n", [
    ("$a$ and $$b$$", 2), ("`$not$` and ```\n$$no$$\n```\n$x_1$", 1), (r"costs \$5 and \$6", 0),
    ("$$\na = b\n$$\n\n$c$", 2), ("$a\n\nb$", 0), ("$x$, $$y$$ inline, `$z$`", 2)])
def test_count_math_counts_formulas_outside_code(markdown, n):
    assert count_math(markdown) == n


# --- the built site, read as HTML ---

class Page(HTMLParser):
    """What the tests read in a page: resources, links, ids, folded answers, formulas in the article."""

    def __init__(self, text: str):
        super().__init__()
        self.resources, self.links, self.ids, self.details, self.images = [], [], set(), [], []
        self.math, self._article, self.text = 0, False, []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "article":
            self._article = True
        if tag == "script" and a.get("src"):
            self.resources.append(a["src"])
        if tag == "link" and a.get("rel") in ("stylesheet", "preload", "icon") and a.get("href"):
            self.resources.append(a["href"])
        if tag == "img":
            self.resources.append(a.get("src", ""))
            self.images.append(a.get("src", ""))
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag == "details":
            self.details.append(a)
        if self._article and tag in ("span", "div") and "math" in (a.get("class") or "").split():
            self.math += 1

    def handle_endtag(self, tag):
        if tag == "article":
            self._article = False

    def handle_data(self, data):
        if self._article:
            self.text.append(data)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if missing := missing_packages():
        pytest.skip(f"book not built: no {', '.join(missing)}; to build it: {INSTALL}")
    committed = {p: p.read_bytes() for p in (ROOT / "notebooks").glob("*.ipynb")}
    html = built_site(tmp_path_factory)
    # nothing is re-run or written back: the notebooks are as committed
    assert {p: p.read_bytes() for p in (ROOT / "notebooks").glob("*.ipynb")} == committed
    return html, {page: Page((html / page).read_text(encoding="utf-8")) for page in site_pages(html)}


def test_the_site_has_the_landing_page_the_package_map_every_notebook_and_every_page_of_docs(site):
    html, pages = site
    notebook_pages = {notebook_facts(p)["page"] for p in NOTEBOOKS}
    docs = [f"{page}.html" for chapter in build.CHAPTERS.values() for page in chapter if page.startswith("docs/")]
    built = {"index.html", "package_map.html", "api.html", "contributing.html"}
    assert built | notebook_pages | set(docs) <= set(pages)
    # every notebook of notebooks/ is a page (build.notebooks() reads NN_*.ipynb: a notebook named otherwise is missed)
    assert len(notebook_pages) == len(NOTEBOOKS) == len(list((ROOT / "notebooks").glob("*.ipynb")))
    assert len(docs) == len(build.docs_pages()) > 0
    index = " ".join(pages["index.html"].text)
    assert "Transformer-XL in five lines" in index and "Notation (every notebook)" in index  # the README, whole
    assert "Neither the time nor the perplexity was measured here" in " ".join(pages["docs/training.html"].text)
    # the sidebar (before the article) lists the pages of docs/ in CHAPTERS' order
    in_nav = [link for link in dict.fromkeys(link.split("#")[0] for link in pages["index.html"].links) if link in docs]
    assert in_nav == docs
    package_map = " ".join(pages["package_map.html"].text)
    for module in ("model.py", "fast.py", "train.py", "tutorial/plotting.py"):
        assert f"txl_minimal/{module}" in package_map
    assert build.module_summary(ROOT / "txl_minimal" / "model.py") in package_map


def test_the_api_page_has_an_entry_an_anchor_and_examples_for_every_public_name(site):
    html, pages = site
    api = pages["api.html"]
    entries = build.api_entries()
    for e in entries:
        assert section_id(e.title) in api.ids and f"#{section_id(e.title)}" in api.links, e.name  # the index links it
    text = " ".join("".join(api.text).split())  # Sphinx puts each word of inline code in its own span
    assert [e.name for e in entries if f"from {e.imported_from} import {e.name}" not in text] == []
    assert (html / "api.html").read_text(encoding="utf-8").count('class="highlight-pycon') >= len(entries)
    # the guide leads to it: the course page's link to the package's list of names
    assert "../api.html" in pages["docs/course.html"].links


def test_every_resource_comes_from_the_site_itself(site):
    html, pages = site
    remote = {page: [r for r in p.resources if "//" in r] for page, p in pages.items()}
    assert not {page: r for page, r in remote.items() if r}, "a page loads something from another host"
    missing = {page: [r for r in p.resources if not (html / page).parent.joinpath(r.split("?")[0]).is_file()]
               for page, p in pages.items()}
    assert not {page: m for page, m in missing.items() if m}, "resources missing from the site"
    assert (html / "_static" / "mathjax" / "tex-chtml.js").is_file()
    assert list((html / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_each_notebook_page_shows_its_formulas_figures_folded_answers_and_colab_link(site, path):
    html, pages = site
    facts = notebook_facts(path)
    page = pages[facts["page"]]
    assert page.math == facts["math"] > 0, "a formula of the notebook is not math on the page"
    # its own figures, the explorer's (notebook 05) and the Colab badge; all are files of the site
    figures = [i for i in page.images if "/_images/" in "/" + i and not i.endswith("colab-badge.svg")]
    assert len(figures) == facts["figures"] + facts["widgets"], (len(figures), facts)
    assert page.links.count(facts["colab"]) == facts["colab_links"]  # its own (the badge) and the header's button
    # the "Why?" and exercise answers, and those a cell printed; not MyST-NB's "Show code cell source" toggles
    answers = [d for d in page.details if "hide" not in (d.get("class") or "").split()]
    assert len(answers) == facts["details"] > 0 and not [d for d in answers if "open" in d]
    if facts["widgets"]:
        assert "Live in Jupyter:" in " ".join(page.text)


def test_internal_links_lead_to_pages_and_anchors_and_github_links_to_files_that_exist(site):
    html, pages = site
    broken = []
    for name, page in pages.items():
        for link in page.links:
            if link.startswith("https://github.com/txl-tutorial/txl-tutorial/"):
                parts = link.split("#")[0].split("/")
                if len(parts) > 7 and parts[5] in ("blob", "tree") and not (ROOT / "/".join(parts[7:])).exists():
                    broken.append((name, link))
            elif "//" not in link and not link.startswith("mailto:"):
                target, _, anchor = link.partition("#")
                file = ((html / name).parent / target).resolve() if target else html / name
                rel = file.relative_to(html.resolve()).as_posix() if target else name
                if not file.is_file():
                    broken.append((name, link))
                elif anchor and rel in pages and anchor not in pages[rel].ids:
                    broken.append((name, link))
    assert not broken


def test_the_pages_workflow_publishes_what_make_book_builds():
    workflow = (ROOT / ".github" / "workflows" / "book.yml").read_text(encoding="utf-8")
    assert "make book" in workflow and "path: build/book/html" in workflow
    assert "actions/deploy-pages" in workflow
