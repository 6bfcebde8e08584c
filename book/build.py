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
import inspect
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import tokenize
from dataclasses import dataclass, field
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
# the API reference, a page this script writes (api_page); a link to the package's __init__.py (its
# list of names, on GitHub) from a page of docs/ leads to it in the site
API_PAGE = "api"
API_SOURCE = "txl_minimal/__init__.py"
# The book's chapters after the notebooks, in reading order: caption -> pages. A page is its staged
# source without the suffix: a Markdown file of docs/ (staged as itself), CONTRIBUTING, or a page
# this script writes (package_map). Adding a page is one line here (stage() refuses a page of docs/
# that is not listed, and a listed page that is not there).
CHAPTERS: dict[str, tuple[str, ...]] = {
    "Guide": (
        "docs/setup",
        "docs/package",
        "docs/course",
        "api",
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
    return {**PAGES, API_SOURCE: f"{API_PAGE}.md",
            **{f"notebooks/{p.name}": f"notebooks/{p.name}" for p in notebooks()},
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
    titles = {"txl_minimal": "The library", "txl_minimal/tutorial": "The notebooks' helpers",
              "txl_minimal/tutorial/exercises": "The exercises' checkers"}
    for folder in sorted(p.parent for p in (root / "txl_minimal").rglob("__init__.py")):  # every package
        name = folder.relative_to(root).as_posix()
        lines += [f"## {titles.get(name, f'`{name}/`')}", "", "| module | what it holds |", "|---|---|"]
        for path in sorted(folder.glob("*.py")):
            rel = path.relative_to(root).as_posix()
            summary = module_summary(path).replace("|", "\\|")
            lines.append(f"| [`{rel}`]({github_url(rel)}) | {summary} |")
        lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the API reference page
# Written from the docstrings of txl_minimal.__all__, read with ast as the package map is (nothing is
# imported: the book needs no torch). tests/test_api.py runs every example this page shows and checks
# that each public name has a summary line, a "Returns:" and an "Examples:" block.

SECTIONS = ("Args", "Attributes", "Returns", "Yields", "Raises", "Examples")
SECTION = re.compile(rf"^({'|'.join(SECTIONS)}):[ \t]*$")
# module paths dropped from type hints (torch. is kept: torch.Tensor, torch.device read better whole)
_PREFIXES = re.compile(r"\b(?:typing|collections\.abc|os|pathlib|np|numpy|txl_minimal(?:\.\w+)*)\.")
ONE_LINE = 96  # characters: a longer signature is shown one parameter a line
# Functions a course imports from their modules: the package's own names ``train`` and ``evaluate`` are
# those modules (the command lines, ``python -m txl_minimal.train``). Documented, and tested, as the others.
FROM_MODULES = (("txl_minimal.train", "train"), ("txl_minimal.evaluate", "evaluate"))
# Modules a course imports whole (docs/course.md names each): their names are documented, and tested, as the
# others, under the module's name. None: every name of the module's ``__all__``; a tuple: the names a course
# uses (the module's docstring lists its others).
MODULES = (("txl_minimal.reference", None),
           ("txl_minimal.tutorial.exercises", None),
           ("txl_minimal.tutorial.solutions", ("mask", "rel_shift", "attention_layer")),
           ("txl_minimal.tutorial.attention_maps", ("read_with_memory", "SegmentAttention", "attention_by_distance",
                                                    "mean_attention_distance", "memory_share", "normalized_entropy")),
           ("txl_minimal.tutorial.ablation", ("Variant", "variants", "model_config", "train_config", "contexts",
                                              "load_results", "results_table")))


@dataclass
class ApiEntry:
    """One documented name: a public name of txl_minimal, or a public method of a public class."""
    name: str  # "load_corpus"; a method: "Corpus.encode"
    module: str  # where it is defined: "txl_minimal.data"
    line: int
    kind: str  # "function", "class", "constant", "method", "property"
    signature: str  # as the page shows it, a Python code block
    doc: str  # the docstring, cleaned as inspect.getdoc does ("" if none)
    methods: list[ApiEntry] = field(default_factory=list)
    params: list[str] = field(default_factory=list)  # the parameters' names, in order (a dataclass: its fields)
    imported_from: str = "txl_minimal"  # ``from <this> import <name>``: the package, or a module (FROM_MODULES)
    group: str = ""  # the module of MODULES it is documented under ("": the package's names, FROM_MODULES)

    @property
    def path(self) -> str:
        return self.module.replace(".", "/") + ".py"

    @property
    def title(self) -> str:
        """Its heading: the name; under a module of MODULES, with the module (``tutorial.exercises.check_mask``)."""
        return f"{self.group.removeprefix('txl_minimal.')}.{self.name}" if self.group else self.name

    @property
    def anchor(self) -> str:
        """Its heading's anchor, as MyST (and GitHub) make it: lowercase, punctuation but "_" and "-" dropped."""
        return re.sub(r"[^\w\- ]", "", self.title.lower()).replace(" ", "-")


def _module_file(module: str, root: Path = ROOT) -> Path:
    """The file of a module of the package, by its dotted name ("txl_minimal.data")."""
    path = root.joinpath(*module.split("."))
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else path / "__init__.py"


def _literal(node: ast.AST, env: dict):
    """The value of an expression of literals, names bound to earlier ones, ``+`` and ``list()``/``tuple()``."""
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _literal(node.left, env) + _literal(node.right, env)
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("list", "tuple") and len(node.args) == 1:
        return list(_literal(node.args[0], env))
    return ast.literal_eval(node)


def _literals(tree: ast.Module) -> dict:
    """A module's top-level names bound to literals (``__all__``, ``_LAZY``), with their values."""
    env = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            try:
                env[stmt.targets[0].id] = _literal(stmt.value, env)
            except (ValueError, TypeError, SyntaxError):
                pass  # not a literal: not one of the names read here
    return env


def public_names(root: Path = ROOT) -> list[str]:
    """``txl_minimal.__all__``, read from txl_minimal/__init__.py."""
    names = _literals(ast.parse(_module_file("txl_minimal", root).read_text(encoding="utf-8"))).get("__all__")
    if not names:
        raise SystemExit("make book: txl_minimal/__init__.py has no __all__ of literals. Fix: write __all__ as a "
                         "list of strings (+ list(_LAZY)), which the API reference reads without importing")
    return list(names)


def find_definition(name: str, module: str = "txl_minimal", root: Path = ROOT) -> tuple[str, str, ast.Module, int]:
    """(module, its source, its tree, the index in its body of the statement) that defines ``name`` as
    ``module`` exports it: a def, class or assignment there, else the module it imports ``name`` from
    (``from .x import name``; ``_LAZY``'s module in txl_minimal/__init__.py), followed to the definition."""
    source = _module_file(module, root).read_text(encoding="utf-8")
    tree = ast.parse(source)
    for i, stmt in enumerate(tree.body):
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) and stmt.name == name:
            return module, source, tree, i
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and any(getattr(t, "id", None) == name for t in targets):
            return module, source, tree, i
    package = module if _module_file(module, root).name == "__init__.py" else module.rsplit(".", 1)[0]
    inside_if = [s for stmt in tree.body if isinstance(stmt, ast.If) for s in stmt.body + stmt.orelse]
    for stmt in tree.body + inside_if:  # (model.py imports its package's modules under an if)
        for alias in stmt.names if isinstance(stmt, ast.ImportFrom) else []:
            if (alias.asname or alias.name) == name:
                base = package.rsplit(".", stmt.level - 1)[0] if stmt.level else ""
                return find_definition(alias.name, ".".join(p for p in (base, stmt.module) if p), root)
    lazy = _literals(tree).get("_LAZY", {})
    if name in lazy:
        return find_definition(name, f"{package}.{lazy[name]}", root)
    raise SystemExit(f"make book: {module}.{name} is exported but neither defined nor imported at the top level of "
                     f"{_module_file(module, root).relative_to(root)}. Fix: define or import it there (the API "
                     "reference reads the package's source without importing it)")


class _ShortTypes(ast.NodeTransformer):
    """``Optional[X]`` -> ``X | None``, ``Union[A, B]`` -> ``A | B``; a quoted annotation read as code."""

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        node = self.generic_visit(node)
        kind = _PREFIXES.sub("", ast.unparse(node.value))
        if kind not in ("Optional", "Union"):
            return node
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        args = args + [ast.Constant(None)] if kind == "Optional" else args
        out = args[0]
        for arg in args[1:]:
            out = ast.BinOp(out, ast.BitOr(), arg)
        return out

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, str):
            try:
                return self.visit(ast.parse(node.value, mode="eval").body)
            except SyntaxError:
                pass
        return node


def short_type(node: ast.AST | None) -> str:
    """An annotation as the page shows it: ``Optional[np.ndarray]`` -> ``ndarray | None``."""
    return "" if node is None else _PREFIXES.sub("", ast.unparse(_ShortTypes().visit(copy.deepcopy(node))))


def _parameter(arg: ast.arg, default: ast.AST | None) -> str:
    text = arg.arg + (f": {short_type(arg.annotation)}" if arg.annotation else "")
    return text + ("" if default is None else f" = {ast.unparse(default)}")


def parameters(fn: ast.FunctionDef, method: bool = False) -> list[str]:
    """A def's parameters as written (``name: type = default``, ``*``, ``**kwargs``), ``self`` left out."""
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + a.defaults
    shown = []
    for i, (arg, default) in enumerate(zip(positional, defaults)):
        if not (method and i == 0):
            shown.append(_parameter(arg, default))
        if a.posonlyargs and arg is a.posonlyargs[-1]:
            shown.append("/")
    if a.vararg or a.kwonlyargs:
        shown.append("*" + _parameter(a.vararg, None) if a.vararg else "*")
    shown += [_parameter(arg, default) for arg, default in zip(a.kwonlyargs, a.kw_defaults)]
    return shown + (["**" + _parameter(a.kwarg, None)] if a.kwarg else [])


def _comments(source: str) -> dict[int, str]:
    """Line number -> the comment on that line (``# ...``), found by tokenize (a "#" in a string is none)."""
    return {tok.start[0]: tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT}


def _is_dataclass(cls: ast.ClassDef) -> bool:
    return any(ast.unparse(d.func if isinstance(d, ast.Call) else d).endswith("dataclass") for d in cls.decorator_list)


def dataclass_fields(cls: ast.ClassDef, source: str) -> list[tuple[list[str], str, str]]:
    """(the comment lines above it, ``name: type = default``, its line's comment) of each field of a dataclass."""
    comments, lines = _comments(source), source.splitlines()
    out, previous = [], cls.body[0].end_lineno if cls.body else cls.lineno
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and \
                "ClassVar" not in ast.unparse(stmt.annotation):
            above = [lines[n - 1].strip() for n in range(previous + 1, stmt.lineno)
                     if lines[n - 1].strip().startswith("#")]
            default = stmt.value
            if isinstance(default, ast.Call) and getattr(default.func, "id", "") == "field":
                given = {k.arg: k.value for k in default.keywords}
                factory = ast.unparse(given["default_factory"]) if "default_factory" in given else None
                default = given.get("default") or (None if factory is None else ast.parse(
                    {"list": "[]", "dict": "{}"}.get(factory, f"{factory}()"), mode="eval").body)
            text = _parameter(ast.arg(stmt.target.id, stmt.annotation), default)
            out.append((above, text, comments.get(stmt.end_lineno, "") if stmt.lineno == stmt.end_lineno else ""))
        previous = stmt.end_lineno
    return out


def signature(name: str, params: list, returns: str = "") -> str:
    """``name(params) -> returns`` on one line, or one parameter a line (with its comments) if long or commented.
    ``params``: strings, or (comment lines above, parameter, comment after) as ``dataclass_fields`` gives."""
    params = [p if isinstance(p, tuple) else ([], p, "") for p in params]
    tail = f") -> {returns}" if returns else ")"
    flat = f"{name}({', '.join(p for _, p, _ in params)}{tail}"
    if len(flat) <= ONE_LINE and not any(above or after for above, _, after in params):
        return flat
    lines = [f"{name}("]
    for above, text, after in params:
        lines += [f"    {c}" for c in above] + [f"    {text},{'  ' + after if after else ''}"]
    return "\n".join(lines + [tail])


def _names(params: list) -> list[str]:
    """The names of ``parameters`` or ``dataclass_fields``' parameters (no ``*`` or ``/`` markers)."""
    texts = [p[1] if isinstance(p, tuple) else p for p in params]
    return [re.match(r"\**(\w+)", t)[1] for t in texts if t not in ("*", "/")]


def _docstring_after(tree: ast.Module, index: int) -> str:
    """The string statement right after a module-level assignment: the constant's docstring (PEP 257)."""
    following = tree.body[index + 1] if index + 1 < len(tree.body) else None
    if isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant) and \
            isinstance(following.value.value, str):
        return inspect.cleandoc(following.value.value)
    return ""


def _class_bodies(cls: ast.ClassDef, module: str, root: Path = ROOT) -> list[tuple[str, list[ast.stmt]]]:
    """(module, class body) of ``cls``, then of each of its bases defined in the package (TransformerXL's
    ModelControls, RelMultiHeadAttn's AttentionControls, in controls.py): the page lists the methods a class
    inherits from there under it."""
    bodies = [(module, cls.body)]
    for base in cls.bases:
        if not (isinstance(base, ast.Name) and _module_file(module, root).is_file()):
            continue  # (nn.Module: an attribute, not the package's)
        try:
            where, _, tree, i = find_definition(base.id, module, root)
        except (SystemExit, OSError):  # defined nowhere in the package, or imported from outside it
            continue
        if isinstance(tree.body[i], ast.ClassDef):
            bodies += _class_bodies(tree.body[i], where, root)
    return bodies


def api_entry(name: str, module: str, source: str, stmt: ast.stmt, tree: ast.Module | None = None,
              index: int = 0, owner: str = "", root: Path = ROOT) -> ApiEntry:
    """What the page shows of one definition (``owner``: the class of a method; ``root``: the package's)."""
    shown = f"{owner}.{name}" if owner else name
    if isinstance(stmt, ast.FunctionDef):
        decorators = [ast.unparse(d) for d in stmt.decorator_list]
        if "property" in decorators:
            return ApiEntry(shown, module, stmt.lineno, "property", f"{shown}: {short_type(stmt.returns)}".rstrip(": "),
                            ast.get_docstring(stmt) or "")
        params = parameters(stmt, method=bool(owner) and "staticmethod" not in decorators)
        return ApiEntry(shown, module, stmt.lineno, "method" if owner else "function",
                        signature(shown, params, short_type(stmt.returns)), ast.get_docstring(stmt) or "",
                        params=_names(params))
    if isinstance(stmt, ast.ClassDef):
        init = next((s for s in stmt.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
        params = dataclass_fields(stmt, source) if _is_dataclass(stmt) else parameters(init, True) if init else []
        methods = [api_entry(s.name, where, source, s, owner=name, root=root)
                   for where, body in _class_bodies(stmt, module, root) for s in body
                   if isinstance(s, ast.FunctionDef) and not s.name.startswith("_")
                   and not any(ast.unparse(d).endswith((".setter", ".deleter")) for d in s.decorator_list)]
        return ApiEntry(name, module, stmt.lineno, "class", signature(name, params), ast.get_docstring(stmt) or "",
                        methods, _names(params))
    value = ast.get_source_segment(source, stmt.value) if stmt.value is not None else "..."
    return ApiEntry(name, module, stmt.lineno, "constant", f"{name} = {value}",
                    _docstring_after(tree, index) if tree is not None else "")


def module_names(module: str, names: tuple | None = None, root: Path = ROOT) -> list[str]:
    """The names the reference documents of a module of MODULES: ``names``, or (None) its ``__all__``."""
    if names is not None:
        return list(names)
    found = _literals(ast.parse(_module_file(module, root).read_text(encoding="utf-8"))).get("__all__")
    if not found:
        raise SystemExit(f"make book: {module} has no __all__ of literals. Fix: write one, or list the names "
                         "in book/build.py's MODULES")
    return list(found)


def api_entries(root: Path = ROOT, extra: tuple = FROM_MODULES, modules: tuple = MODULES) -> list[ApiEntry]:
    """Every name of ``txl_minimal.__all__``, in its order, then ``extra``'s (module, name) pairs whose name
    it does not export, then the names of each module of ``modules``, as the API reference shows them."""
    public = public_names(root)
    wanted = [("txl_minimal", n, "") for n in public] + [(*m, "") for m in extra if m[1] not in public]
    wanted += [(m, n, m) for m, names in modules for n in module_names(m, names, root)]
    entries = []
    for where, name, group in wanted:
        module, source, tree, index = find_definition(name, where, root)
        entries.append(api_entry(name, module, source, tree.body[index], tree, index, root=root))
        entries[-1].imported_from, entries[-1].group = where, group
    return entries


def docstring_sections(doc: str) -> tuple[str, dict[str, str]]:
    """(the text before the first section, {"Returns": its body, ...}): sections are SECTIONS' names
    alone on a line ("Examples:"), their bodies indented under them (dedented here)."""
    intro, sections, current = [], {}, None
    for line in doc.splitlines():
        m = SECTION.match(line)
        if m:
            current = m[1]
            sections[current] = []
        elif current is None:
            intro.append(line)
        else:
            sections[current].append(line)
    return "\n".join(intro).strip("\n"), {k: textwrap.dedent("\n".join(v)).strip("\n") for k, v in sections.items()}


_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
_MARKDOWN = re.compile(r"([\\*_<>\[\]$|])")


def md_text(text: str) -> str:
    """Docstring prose as Markdown: ``code`` spans kept, and every character Markdown (or MyST's
    ``$`` math) would read as markup escaped outside them (``<unk>``, ``$TXL_CORPUS``, ``a*b``)."""
    out, at = [], 0
    for m in _CODE_SPAN.finditer(text):
        out += [_MARKDOWN.sub(r"\\\1", text[at:m.start()]), m[0]]
        at = m.end()
    return "".join(out + [_MARKDOWN.sub(r"\\\1", text[at:])])


def _blocks(text: str) -> list[str]:
    """Prose as Markdown: paragraphs and "- " items as text, indented runs of lines as code blocks
    (a table or code in a docstring; ``>>>`` lines as a Python session)."""
    out, prose, code = [], [], []

    def flush() -> None:
        if prose:
            out.append(md_text("\n".join(prose)))
            prose.clear()
        if code:
            body = textwrap.dedent("\n".join(code)).strip("\n")
            out.append(f"```{'pycon' if body.startswith('>>>') else 'text'}\n{body}\n```")
            code.clear()

    item = False  # inside a "- " item, whose continuation lines are indented
    for line in text.splitlines():
        if not line.strip():
            if code:
                code.append("")
            else:
                flush()
            item = False
        elif line.startswith((" ", "\t")) and not item:
            if prose:
                flush()
            code.append(line)
        else:
            if code:
                flush()
            item = item or line.startswith("- ")
            prose.append(line)
    flush()
    return out


def _items(body: str) -> str:
    """An Args/Attributes section as a list: ``name: text`` lines, continued by indented ones."""
    items = []
    for line in body.splitlines():
        if line and not line[0].isspace() and ":" in line:
            name, text = line.split(":", 1)
            items.append([f"`{name.strip()}`", text.strip()])
        elif items and line.strip():
            items[-1][1] += " " + line.strip()
    return "\n".join(f"- {name}: {md_text(text)}" for name, text in items)


def docstring_markdown(doc: str) -> str:
    """A docstring as the page shows it: its prose, then each section under a bold label."""
    intro, sections = docstring_sections(doc)
    parts = _blocks(intro)
    for name, body in sections.items():
        if name == "Examples":
            parts.append(f"**{name}:**\n\n```pycon\n{body}\n```")
        elif name in ("Args", "Attributes"):
            parts.append(f"**{name}:**\n\n{_items(body)}")
        else:
            parts.append(f"**{name}:** " + "\n\n".join(_blocks(body)))
    return "\n\n".join(parts)


def _summary(doc: str) -> str:
    """A docstring's first line, for the index (``—`` if there is none)."""
    return md_text(doc.strip().splitlines()[0]).replace("|", "\\|") if doc.strip() else "—"


def _entry_markdown(entry: ApiEntry, level: int = 2) -> list[str]:
    where = f"[`{entry.path}`]({github_url(entry.path)}#L{entry.line})"
    how = f"`from {entry.imported_from} import {entry.name}` · {entry.kind} in {where}" if level == 2 else \
        f"{entry.kind} of `{entry.name.split('.')[0]}`"
    lines = [f"{'#' * level} {md_text(entry.title)}", "", how, "", f"```python\n{entry.signature}\n```", ""]
    if entry.doc:
        lines += [docstring_markdown(entry.doc), ""]
    if entry.methods:  # under one "Methods" heading: the page's contents list the names, not every method
        lines += [f"{'#' * (level + 1)} Methods", ""]
    for method in entry.methods:
        lines += _entry_markdown(method, level + 2)
    return lines


def _index(entries: list[ApiEntry]) -> list[str]:
    """The table at the top of the page: each name (a link to its entry), its summary, its file."""
    rows = [f"| [`{e.name}`](#{e.anchor}) | `{e.imported_from}` | {_summary(e.doc)} | "
            f"[`{e.path}`]({github_url(e.path)}#L{e.line}) |" for e in entries]
    return ["| name | import from | what it is | defined in |", "|---|---|---|---|", *rows, ""]


def api_page(root: Path = ROOT) -> str:
    """The API reference page: an index of the public names, then each with its signature and docstring."""
    entries = api_entries(root)
    public = [e for e in entries if e.imported_from == "txl_minimal"]
    from_modules = [e for e in entries[len(public):] if not e.group]
    groups = {e.group: [g for g in entries if g.group == e.group] for e in entries if e.group}
    lines = ["# API reference", "",
             "Every name `txl_minimal` exports (its `__all__`): its signature, what it returns and an example, "
             "written from its docstring when the book is built. Every example runs as written after "
             "`import torch` and `from txl_minimal import *`, and `make test` runs each of them "
             f"([`tests/test_api.py`]({github_url('tests/test_api.py')})), so this page cannot drift from the "
             "code. Type hints are shortened (`X | None` for `Optional[X]`, `ndarray` for `np.ndarray`). "
             "[Use it in your course](docs/course.md) says what to import for which assignment; the "
             "[package map](package_map.md) lists every module, where the names not exported here live.",
             "", *_index(public)]
    if from_modules:
        lines += ["Two functions a course uses are imported from their modules, whose names the package gives to "
                  "the modules themselves (they are also the command lines, `python -m txl_minimal.train`):", "",
                  *_index(from_modules)]
    if groups:
        lines += ["Modules a course imports whole: the naive reference the tests trust, the exercises' checkers "
                  "(in a notebook or a grader), their worked answers and the notebooks' helpers a course page uses. "
                  "Their entries are headed with the module, and their examples import what they use:", ""]
    for group, members in groups.items():
        summary = md_text(module_summary(_module_file(group, root)))
        lines += [f"**`{group}`**: {summary}", "", *_index(members)]
    shown = ""
    for e in entries:
        if e.group != shown and e.group:  # a module's entries under its own heading
            lines += [f"## {md_text(e.group)}", "", f"`import {e.group}` · "
                      f"[`{_module_file(e.group, root).relative_to(root).as_posix()}`]"
                      f"({github_url(_module_file(e.group, root).relative_to(root).as_posix())})", ""]
        shown = e.group
        lines += _entry_markdown(e)
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
    pages = {"index.md": index_page(root), "package_map.md": package_map(root), f"{API_PAGE}.md": api_page(root),
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
