"""The API reference (the book's page, book/build.py's ``api_page``): every public name of txl_minimal is
documented, and every example the page shows runs; so are the names of the modules a course imports whole
(build.MODULES: the naive reference, the exercises' checkers, the helpers docs/course.md uses), held to the
same standard, and every ``txl_minimal`` name docs/course.md uses is on the page.

The page is written from the docstrings of ``txl_minimal.__all__`` as build.py reads them from the source
(with ast: the book needs no torch). These tests take the docstrings from build.py too, so what the page
shows is what runs here: each example with doctest, in the namespace ``import torch`` and ``from
txl_minimal import *`` give, in a temporary folder. Why not ``pytest --doctest-modules``: it would
collect every docstring of every module (private helpers too), each in its own module's namespace
rather than the one a course imports, and `make test` would need another command; here `make test`
(``pytest tests``) runs the examples as the page shows them, one test per name, and fails a public
name without a one-line summary, a "Returns:" (a class: or "Attributes:"/"Yields:") or an example
that shows a result.
"""
from __future__ import annotations

import ast
import doctest
import importlib
import inspect
import re

import pytest
import torch

import txl_minimal
from book_site import build

ENTRIES = build.api_entries()
PUBLIC = [e for e in ENTRIES if e.imported_from == "txl_minimal"]
METHODS = [m for e in ENTRIES for m in e.methods]
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
# what each kind must say it gives: a function returns (or yields), a class returns an object or is a
# record of attributes; a constant's value is its signature on the page
RESULT = {"function": ("Returns", "Yields"), "class": ("Returns", "Yields", "Attributes"), "constant": ()}


def problems(entry: build.ApiEntry, params: list[str] = ()) -> list[str]:
    """What the docstring of a public name lacks: a one-line summary, the result (RESULT), an example that
    shows something, a mention of each of ``params``; empty when it has all."""
    if not entry.doc.strip():
        return [f"{entry.name}: no docstring"]
    found = []
    lines = entry.doc.splitlines()
    if not lines[0].strip().endswith(".") or (len(lines) > 1 and lines[1].strip()):
        found.append(f"{entry.name}: the first line is not a one-line summary ending with '.' and a blank line")
    intro, sections = build.docstring_sections(entry.doc)
    wanted = RESULT[entry.kind]
    if wanted and not any(sections.get(s, "").strip() for s in wanted):
        found.append(f"{entry.name}: no {' / '.join(s + ':' for s in wanted)} section saying what it gives")
    examples = doctest.DocTestParser().get_examples(sections.get("Examples", ""))
    if not examples:
        found.append(f"{entry.name}: no Examples: section with a >>> example")
    elif not any(e.want or e.exc_msg for e in examples):
        found.append(f"{entry.name}: no example shows a result (each one's output is what the test compares)")
    if ">>>" in intro:
        found.append(f"{entry.name}: an example outside the Examples: section")
    words = set(re.findall(r"\w+", entry.doc))
    found += [f"{entry.name}: the argument {p!r} is not named in the docstring" for p in params if p not in words]
    return found


def imported(entry: build.ApiEntry):
    """The object ``from <entry.imported_from> import <entry.name>`` gives."""
    return getattr(importlib.import_module(entry.imported_from), entry.name)


def arguments(entry: build.ApiEntry) -> list[str]:
    """The parameters a docstring must name: a function's, or a class's that is not a dataclass (a
    dataclass's fields are shown with their comments in its signature)."""
    obj = imported(entry)
    if entry.kind == "constant" or (entry.kind == "class" and hasattr(obj, "__dataclass_fields__")):
        return []
    return [p for p in inspect.signature(obj).parameters if p not in ("self", "kwargs", "args")]


def run_examples(entry: build.ApiEntry) -> tuple[doctest.TestResults, str]:
    """Run the examples of ``entry``'s docstring in the namespace ``import torch`` and ``from txl_minimal
    import *`` give: (failed, attempted), and doctest's report of the failures."""
    names = {"torch": torch, **{name: getattr(txl_minimal, name) for name in txl_minimal.__all__}}
    test = doctest.DocTestParser().get_doctest(entry.doc, names, entry.name, entry.path, entry.line)
    runner, report = doctest.DocTestRunner(optionflags=FLAGS), []
    return runner.run(test, out=report.append, clear_globs=True), "".join(report)


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """Examples write their files (a text, a checkpoint) and caches in a temporary folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TXL_DATA_DIR", str(tmp_path / "data"))
    return tmp_path


def test_the_reference_documents_every_public_name_in_order_then_train_and_evaluate_then_the_modules():
    assert [e.name for e in PUBLIC] == list(txl_minimal.__all__) and len(PUBLIC) >= 25
    extra = [(e.imported_from, e.name) for e in ENTRIES[len(PUBLIC):] if not e.group]
    assert extra == [m for m in build.FROM_MODULES if m[1] not in txl_minimal.__all__]
    grouped = [(e.group, e.name) for e in ENTRIES if e.group]
    assert grouped == [(m, n) for m, names in build.MODULES for n in names or importlib.import_module(m).__all__]
    assert ENTRIES[len(PUBLIC) + len(extra):] == [e for e in ENTRIES if e.group]  # the modules' names come last


def test_the_checkers_and_the_reference_are_documented_whole():
    """Every checker (and grading) and every function of txl_minimal.reference is on the page."""
    from txl_minimal.tutorial import exercises
    shown = {(e.group, e.name) for e in ENTRIES}
    checkers = {n for n in dir(exercises) if n.startswith("check_")} | {"grading"}
    assert {("txl_minimal.tutorial.exercises", n) for n in checkers} <= shown
    reference = importlib.import_module("txl_minimal.reference")
    functions = {n for n, f in vars(reference).items() if inspect.isfunction(f) and f.__module__ == reference.__name__
                 and not n.startswith("_")}
    assert functions and {("txl_minimal.reference", n) for n in functions} <= shown


COURSE = build.ROOT / "docs" / "course.md"


def course_names(text: str) -> set[str]:
    """The ``txl_minimal`` names docs/course.md uses, dotted (``txl_minimal.tutorial.exercises.check_mask``): what
    its code imports from the package, the names and modules its table's "import" column gives, every dotted
    ``txl_minimal.…`` it writes (a command, ``python -m txl_minimal.train``, is no name), and what it calls on
    a module it imported (``exercises.check_rel_shift``).
    A bare name of the table is the package's; ``model.…`` there is a ``TransformerXL`` method."""
    found, modules = set(), {}
    code = "\n".join(m[1] for m in re.finditer(r"^```python\n(.*?)^```$", text, flags=re.S | re.M))
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("txl_minimal"):
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                found.add(dotted)
                modules[alias.asname or alias.name] = dotted
    for node in ast.walk(ast.parse(code)):  # solutions.mask, exercises.grading: names of an imported module
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules and \
                _is_module(modules[node.value.id]):
            found.add(f"{modules[node.value.id]}.{node.attr}")
    prose = re.sub(r"^```.*?^```$", "", text, flags=re.S | re.M)  # the code: read above
    prose = re.sub(r"\]\([^)]*\)|python -m txl_minimal\.\w+", "]", prose)  # not the links, nor the commands
    found |= set(re.findall(r"\btxl_minimal(?:\.\w+)+", prose))
    table = text.split("## What to import for which assignment")[1].split("\n## ")[0]
    for row in table.splitlines()[2:]:
        if not row.startswith("| "):
            continue
        module = "txl_minimal"  # a bare name is the package's, else the module's named before it (read_with_memory)
        for span in re.findall(r"`([^`]+)`", row.rstrip(" |").split(" | ")[-1]):
            if span.startswith("python -m "):  # a command, not a name
                continue
            name = re.match(r"[\w.]+", span)[0].removesuffix(".")
            if name.startswith("txl_minimal."):
                found.add(name)
                module = name if _is_module(name) else module
            else:
                found.add(f"txl_minimal.TransformerXL.{name.split('.', 1)[1]}" if name.startswith("model.") else
                          "txl_minimal.TransformerXL" if name == "model" else
                          f"txl_minimal.{name}" if name in txl_minimal.__all__ else f"{module}.{name}")
    return found - {"txl_minimal"}  # the package itself: the page


def _is_module(dotted: str) -> bool:
    try:
        importlib.import_module(dotted)
    except ImportError:
        return False
    return True


def shown_names() -> set[str]:
    """What the page documents, dotted as a course imports it: names, methods, and the modules of MODULES."""
    names = {f"{e.imported_from}.{e.name}" for e in ENTRIES} | {m for m, _ in build.MODULES}
    names |= {f"{e.imported_from}.{m.name}" for e in ENTRIES for m in e.methods}
    names |= {f"{m}" for m, _ in build.FROM_MODULES}  # txl_minimal.train: the module of train()
    return names


def test_every_name_the_course_page_uses_is_in_the_reference():
    """docs/course.md says every name it uses is in the API reference: each is (its code's imports, its table,
    every txl_minimal.… it writes but a command, what it calls on the modules it imports)."""
    used = course_names(COURSE.read_text(encoding="utf-8"))
    assert {"txl_minimal.tutorial.exercises.grading", "txl_minimal.tutorial.attention_maps.read_with_memory",
            "txl_minimal.tutorial.ablation", "txl_minimal.TransformerXL.lengths"} <= used
    assert sorted(used - shown_names()) == []


def test_a_course_name_missing_from_the_reference_is_found():
    page = ("## What to import for which assignment\n\n| a | b | import |\n|---|---|---|\n"
            "| x | y | `load_corpus`, `model.lengths(...)`, `txl_minimal.tutorial.context` |\n\n## Next\n"
            "```python\nfrom txl_minimal.tutorial import exercises\nexercises.check_nothing(f)\n```\n")
    used = course_names(page)
    assert used == {"txl_minimal.load_corpus", "txl_minimal.TransformerXL.lengths", "txl_minimal.tutorial.context",
                    "txl_minimal.tutorial.exercises", "txl_minimal.tutorial.exercises.check_nothing"}
    assert sorted(used - shown_names()) == ["txl_minimal.tutorial.context",
                                            "txl_minimal.tutorial.exercises.check_nothing"]


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.title)
def test_the_reference_reads_the_definition_python_imports(entry):
    obj = imported(entry)
    if entry.kind == "constant":
        assert not callable(obj)
        return
    assert obj.__module__ == entry.module
    assert inspect.getdoc(obj) == entry.doc
    assert entry.params == list(inspect.signature(obj).parameters)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.title)
def test_each_public_name_has_a_summary_its_result_its_arguments_and_an_example(entry):
    assert problems(entry, arguments(entry)) == []


@pytest.mark.parametrize("entry", ENTRIES + [m for m in METHODS if ">>>" in m.doc], ids=lambda e: e.title)
def test_every_example_of_the_reference_runs(entry, scratch):
    (failed, attempted), report = run_examples(entry)
    assert attempted > 0
    assert failed == 0, report


@pytest.mark.parametrize("method", [m for m in METHODS if ">>>" in m.doc], ids=lambda m: m.name)
def test_a_methods_example_is_in_its_examples_section_so_the_page_shows_it_as_code(method):
    """An example above "Examples:" is dedented with the docstring (inspect.cleandoc) and reaches the page as
    prose, its quotes made curly (Corpus.decode's did): it would not paste as Python."""
    intro, sections = build.docstring_sections(method.doc)
    assert ">>>" not in intro and all(">>>" not in body for name, body in sections.items() if name != "Examples")


def entry(doc: str, kind: str = "function") -> build.ApiEntry:
    return build.ApiEntry("f", "txl_minimal.x", 1, kind, "f()", doc)


GOOD = "What f is.\n\nReturns:\n    Two.\n\nExamples:\n    >>> 1 + 1\n    2\n"


@pytest.mark.parametrize("doc, problem", [
    ("", "f: no docstring"),
    (GOOD.replace("What f is.", "What f\nis."), "f: the first line is not a one-line summary"),
    (GOOD.replace("What f is.", "What f is"), "f: the first line is not a one-line summary"),
    (GOOD.replace("Returns:\n    Two.\n", ""), "f: no Returns: / Yields: section"),
    (GOOD.replace("Examples:\n    >>> 1 + 1\n    2\n", ""), "f: no Examples: section"),
    (GOOD.replace("    2\n", ""), "f: no example shows a result"),
    (GOOD.replace("What f is.", "What f is.\n\n    >>> f()\n    1"), "f: an example outside the Examples"),
])
def test_a_docstring_without_a_summary_a_result_or_an_example_is_refused(doc, problem):
    assert problems(entry(GOOD)) == []
    found = problems(entry(doc))
    assert len(found) == 1 and found[0].startswith(problem), found


def test_an_unnamed_argument_is_refused_and_a_class_may_list_attributes_and_a_constant_needs_no_result():
    assert problems(entry(GOOD), ["n_new"]) == ["f: the argument 'n_new' is not named in the docstring"]
    assert problems(entry(GOOD.replace("Two.", "Two ``n_new``.")), ["n_new"]) == []
    record = GOOD.replace("Returns:\n    Two.", "Attributes:\n    a: one.")
    assert problems(entry(record, "class")) == [] and problems(entry(record))[0].startswith("f: no Returns:")
    assert problems(entry(GOOD.replace("Returns:\n    Two.\n", ""), "constant")) == []


def test_an_example_that_fails_or_raises_is_reported(scratch):
    (failed, attempted), report = run_examples(entry(GOOD.replace("    2\n", "    3\n")))
    assert (failed, attempted) == (1, 1) and "Expected:\n    3\nGot:\n    2" in report
    (failed, _), report = run_examples(entry(GOOD.replace(">>> 1 + 1", ">>> encode('The')")))
    assert failed == 1 and "ValueError: encode: character 'T' at position 0 is not in VOCAB" in report
