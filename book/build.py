"""`make book`: the committed, executed notebooks as a static site (Sphinx + MyST-NB).

Nothing is re-run: every page shows the outputs stored in notebooks/*.ipynb. The sources are
staged in OUT/src (copies; the repository's files are never written), then Sphinx builds
OUT/html. Staging does what a site needs and a notebook does not:

- README.md becomes the landing page (index); the notebooks, the Markdown pages of docs/ (the
  manual: set-ups, the package, training, tests, ...) and CONTRIBUTING.md become pages, in the
  order of CHAPTERS, and a package map is written from the modules' own docstrings; links between
  these files stay in the site, links to other repository files point to GitHub;
- book/book.css fits the code cells to the text column (wrapping only a line too long for it);
- the Colab badge's image is served from the site (the link to Colab stays on every page);
- the ipywidgets explorer becomes its stored figure, with a line saying it is live in Jupyter
  (a widget needs a kernel; its JavaScript would come from a CDN);
- MathJax 3 (the django-static-mathjax wheel: its es5 build and fonts) is copied into
  _static/mathjax, so formulas render with no network.

    python book/build.py [--out build/book] [--clean]
"""
from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
REPO_URL = "https://github.com/txl-tutorial/txl-tutorial"
BRANCH = "main"
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
BADGE_FILE = "colab-badge.svg"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# repository files that become pages (repository path -> the page's source in the staged tree)
PAGES = {"README.md": "index.md", "CONTRIBUTING.md": "contributing.md"}
# The book's chapters after the notebooks, in reading order: caption -> pages. A page is its staged
# source without the suffix: a Markdown file of docs/ (staged as itself), CONTRIBUTING, or a page
# this script writes (package_map). Adding a page is one line here (stage() refuses a page of docs/
# that is not listed, and a listed page that is not there).
CHAPTERS: dict[str, tuple[str, ...]] = {
    "Guide": (
        "docs/setup",
        "docs/package",
        # issue 40's API reference and docs/course.md ("Use it in your course") come here
        "docs/words",
        "docs/training",
        "docs/run_folders",
        "docs/models",
        "docs/benchmarks",
        "docs/gpu",
    ),
    "Reference": (
        "docs/layout",
        "package_map",
        "docs/testing",
        "docs/book",
        "contributing",
    ),
}
# what MathJax's tex-chtml component loads, from the wheel's es5 build (no speech rule engine,
# no SVG output: about 5 MB instead of 24)
MATHJAX_PARTS = ("tex-chtml.js", "input", "output/chtml", "ui", "a11y", "adaptors")
LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def notebooks(root: Path = ROOT) -> list[Path]:
    """The tutorial's notebooks, in order (notebooks/NN_*.ipynb)."""
    return sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def docs_pages(root: Path = ROOT) -> list[Path]:
    """The Markdown pages of docs/ (the book's manual), by name."""
    return sorted((root / "docs").glob("*.md"))


def github_url(path: str) -> str:
    """The GitHub page of a repository path: a folder (ending in /) or a file."""
    kind = "tree" if path.endswith("/") or (ROOT / path).is_dir() else "blob"
    return f"{REPO_URL}/{kind}/{BRANCH}/{path.rstrip('/')}"


def rewrite_links(text: str, source: str, pages: dict[str, str], page: str) -> str:
    """Markdown links of the repository file ``source``, as the staged page ``page`` needs them.

    A link to a file that is a page of the site points to that page (relative to ``page``);
    a link to any other repository file or folder points to it on GitHub; web links, anchors
    and mail links stay as they are.
    """
    def fix(m: re.Match) -> str:
        target = m[2]
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return m[0]
        path, _, anchor = target.partition("#")
        repo_path = os.path.normpath(os.path.join(os.path.dirname(source), path)).replace(os.sep, "/")
        if path.endswith("/"):
            repo_path += "/"
        if repo_path in pages:
            new = os.path.relpath(pages[repo_path], os.path.dirname(page) or ".").replace(os.sep, "/")
        else:
            new = github_url(repo_path)
        return f"{m[1]}{new}{'#' + anchor if anchor else ''}{m[3]}"
    return LINK.sub(fix, text)


def local_badge(text: str, page: str) -> str:
    """The Colab badge's image from the site itself (``colab-badge.svg`` at the staged root)."""
    rel = os.path.relpath(BADGE_FILE, os.path.dirname(page) or ".").replace(os.sep, "/")
    return text.replace(COLAB_BADGE, rel)


def widget_note(sliders: list[tuple[str, object]]) -> str:
    """The line that replaces a live widget on the site."""
    values = ", ".join(f"{name} = {value}" for name, value in sliders)
    at = f" for {values}" if values else ""
    return (f"**Live in Jupyter:** in JupyterLab or on Colab this explorer's sliders "
            f"({', '.join(name for name, _ in sliders) or 'its controls'}) redraw the figure. "
            f"Here, a static page, is the figure it drew{at}.")


def static_widgets(nb: dict) -> int:
    """Replace every widget output of ``nb`` by its stored outputs and a line saying it is live.

    An ``interact`` widget keeps its figure in an Output widget's state (the notebook's
    ``metadata.widgets``), not in the cell's outputs. That figure, under `widget_note`, takes the
    widget's place; the widget state is dropped, so no page asks a CDN for the widgets' JavaScript.
    Returns the number of widgets replaced.
    """
    state = nb.get("metadata", {}).get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    models = state.get("state", {})
    replaced = 0
    for cell in nb["cells"]:
        outputs = []
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_MIME)
            if view is None:
                outputs.append(out)
                continue
            sliders, stored = [], []
            for model in widget_tree(models, view["model_id"]):
                s = model.get("state", {})
                if model.get("model_name", "").endswith("SliderModel"):
                    sliders.append((s.get("description", ""), s.get("value")))
                if model.get("model_name") == "OutputModel":
                    stored += copy.deepcopy(s.get("outputs", []))
            outputs.append({"output_type": "display_data", "metadata": {},
                            "data": {"text/markdown": widget_note(sliders)}})
            outputs += [o for o in stored if o.get("output_type") != "stream" or o.get("name") == "stdout"]
            replaced += 1
        if "outputs" in cell:
            cell["outputs"] = outputs
    nb.get("metadata", {}).pop("widgets", None)
    return replaced


def widget_tree(models: dict, model_id: str) -> list[dict]:
    """The widget ``model_id`` and every widget below it (children, depth first)."""
    found, todo, seen = [], [model_id], set()
    while todo:
        mid = todo.pop(0)
        if mid in seen or mid not in models:
            continue
        seen.add(mid)
        model = models[mid]
        found.append(model)
        children = model.get("state", {}).get("children", [])
        todo += [c.removeprefix("IPY_MODEL_") for c in children if isinstance(c, str)]
    return found


def stage_notebook(path: Path) -> str:
    """The notebook as the site shows it (JSON text): local badge, widgets made static."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    page = f"notebooks/{path.name}"
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            cell["source"] = local_badge(rewrite_links(text, page, link_pages(), page), page)
    static_widgets(nb)
    fold_hidden(nb)
    return json.dumps(nb, ensure_ascii=False, indent=1) + "\n"


def fold_hidden(nb: dict) -> None:
    """Cells folded in JupyterLab (the Colab set-up cell) are folded on the site too.

    JupyterLab keeps the fold in ``metadata.jupyter.source_hidden`` / ``outputs_hidden``; MyST-NB
    reads the tags ``hide-input`` / ``hide-output`` (a "Show code cell source" toggle).
    """
    for cell in nb["cells"]:
        hidden = cell.get("metadata", {}).get("jupyter", {})
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        for key, tag in (("source_hidden", "hide-input"), ("outputs_hidden", "hide-output")):
            if hidden.get(key) and tag not in tags:
                tags.append(tag)


def link_pages() -> dict[str, str]:
    """Repository path -> staged page source, for every file that is a page of the site."""
    return {**PAGES, **{f"notebooks/{p.name}": f"notebooks/{p.name}" for p in notebooks()},
            **{f"docs/{p.name}": f"docs/{p.name}" for p in docs_pages()}}


def module_summary(path: Path) -> str:
    """The first paragraph of a module's docstring, on one line (read, not imported)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def package_map(root: Path = ROOT) -> str:
    """The package map page: every module of txl_minimal, its docstring's summary, its source."""
    lines = ["# Package map", "",
             "Every module of `txl_minimal`, with the first paragraph of its docstring and a link to its "
             "source. A module imports only those above it in the library; `txl_minimal.tutorial` holds "
             "the notebooks' helpers, which import the library and which the library never imports. "
             "The *Layout* page places these files among the repository's other folders.",
             ""]
    for title, folder in (("The library", root / "txl_minimal"),
                          ("The notebooks' helpers", root / "txl_minimal" / "tutorial")):
        lines += [f"## {title}", "", "| module | what it holds |", "|---|---|"]
        for path in sorted(folder.glob("*.py")):
            rel = path.relative_to(root).as_posix()
            summary = module_summary(path).replace("|", "\\|")
            lines.append(f"| [`{rel}`]({github_url(rel)}) | {summary} |")
        lines.append("")
    return "\n".join(lines)


def index_page(root: Path = ROOT) -> str:
    """README.md as the landing page, with the site's table of contents (hidden: the sidebar)."""
    text = local_badge(rewrite_links((root / "README.md").read_text(encoding="utf-8"), "README.md",
                                     link_pages(), "index.md"), "index.md")
    toc = ["", "```{toctree}", ":hidden:", ":caption: Notebooks", ""]
    toc += [f"notebooks/{p.stem}" for p in notebooks(root)]
    toc.append("```")
    for caption, pages in CHAPTERS.items():
        toc += ["", "```{toctree}", ":hidden:", f":caption: {caption}", "", *pages, "```"]
    toc.append("")
    return text.rstrip("\n") + "\n" + "\n".join(toc)


def mathjax_dir() -> Path:
    """MathJax 3's es5 build, from the django-static-mathjax wheel (requirements-book.txt)."""
    try:
        import mathjax  # the wheel's package: only its static files are used
    except ImportError as e:
        raise SystemExit("MathJax is missing: pip install -r requirements-book.txt "
                         "(django-static-mathjax brings MathJax 3's files)") from e
    return Path(mathjax.__file__).parent / "static" / "mathjax"


def write(path: Path, text: str | bytes) -> None:
    """Write only what changed (Sphinx then rebuilds only changed pages), via a temp name."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    if path.is_file() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def markdown_page(path: Path, root: Path = ROOT) -> str:
    """A Markdown file of the repository as the page of the same path: its links for the site."""
    rel = path.relative_to(root).as_posix()
    page = PAGES.get(rel, rel)
    return local_badge(rewrite_links(path.read_text(encoding="utf-8"), rel, link_pages(), page), page)


def check_chapters(pages: dict[str, str], root: Path = ROOT) -> None:
    """Every page is in the table of contents (CHAPTERS), and every page listed there exists."""
    staged = {Path(name).with_suffix("").as_posix() for name in pages}
    listed = [page for chapter in CHAPTERS.values() for page in chapter]
    unlisted = sorted(staged - set(listed) - {"index"} - {f"notebooks/{p.stem}" for p in notebooks(root)})
    missing = [page for page in listed if page not in staged]
    if unlisted:
        raise SystemExit(f"make book: {', '.join(p + '.md' for p in unlisted)} is not in the book's table of "
                         f"contents. Fix: add {unlisted[0]!r} to CHAPTERS in book/build.py, where it belongs "
                         "in reading order.")
    if missing:
        raise SystemExit(f"make book: CHAPTERS in book/build.py lists {', '.join(missing)}, which is not a page "
                         f"(no {missing[0]}.md). Fix: add the file, or remove its line from CHAPTERS.")


def stage(src: Path, root: Path = ROOT) -> list[str]:
    """Write the site's sources into ``src``; returns the pages' source files (relative)."""
    pages = {"index.md": index_page(root), "package_map.md": package_map(root),
             "contributing.md": markdown_page(root / "CONTRIBUTING.md", root)}
    for nb in notebooks(root):
        pages[f"notebooks/{nb.name}"] = stage_notebook(nb)
    for doc in docs_pages(root):
        pages[f"docs/{doc.name}"] = markdown_page(doc, root)
    check_chapters(pages, root)
    for name, text in pages.items():
        write(src / name, text)
    for old in [*src.rglob("*.md"), *src.rglob("*.ipynb")]:  # a page renamed or removed since the last build
        if old.relative_to(src).as_posix() not in pages and "_static" not in old.parts:
            old.unlink()
    write(src / "conf.py", (BOOK / "conf.py").read_bytes())
    write(src / BADGE_FILE, (BOOK / BADGE_FILE).read_bytes())
    write(src / "_static" / "book.css", (BOOK / "book.css").read_bytes())
    copy_mathjax(mathjax_dir(), src / "_static" / "mathjax")
    return sorted(pages)


def copy_mathjax(mj: Path, dest: Path) -> None:
    """MATHJAX_PARTS of the es5 build, and MathJax's licence, into ``dest``."""
    es5 = mj / "es5"
    for part in MATHJAX_PARTS:
        source = es5 / part
        if not source.exists():
            raise SystemExit(f"{source} is missing: reinstall django-static-mathjax "
                             "(pip install --force-reinstall -r requirements-book.txt)")
        files = [source] if source.is_file() else sorted(f for f in source.rglob("*") if f.is_file())
        for f in files:
            write(dest / f.relative_to(es5), f.read_bytes())
    licence = mj / "LICENSE"
    if licence.is_file():
        write(dest / "LICENSE", licence.read_bytes())


def build(out: Path, clean: bool = False, quiet: bool = True) -> Path:
    """Stage the sources in ``out/src`` and build the site into ``out/html``; returns the html folder."""
    try:
        import myst_nb  # noqa: F401
        import sphinx  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"{e.name} is missing: pip install -r requirements-book.txt (make book does it)") from e
    if clean and out.exists():
        shutil.rmtree(out)
    src, html = out / "src", out / "html"
    stage(src)
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-j", "1",
           "-d", str(out / "doctrees"), str(src), str(html)]
    if quiet:
        cmd.insert(3, "-q")
    subprocess.run(cmd, check=True)
    for nb in notebooks():  # the download button gives the notebook as committed, not the staged copy
        write(html / "_sources" / "notebooks" / nb.name, nb.read_bytes())
    (html / ".nojekyll").touch()  # GitHub Pages: serve _static/ and _images/ as they are
    return html


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "book", help="build folder (default build/book)")
    parser.add_argument("--clean", action="store_true", help="remove the build folder first (a full rebuild)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        html = build(args.out, clean=args.clean)
    except subprocess.CalledProcessError as e:
        print(f"make book: Sphinx failed (exit {e.returncode}); its warnings above say where", file=sys.stderr)
        return 1
    pages = len([p for p in html.rglob("*.html") if p.relative_to(html).parts[0] != "_static"])
    print(f"book: {pages} pages in {html}/ ({time.perf_counter() - start:.1f} s); open {html / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
