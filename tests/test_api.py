"""The API reference (the book's page, book/build.py's ``api_page``): every public name of txl_minimal is
documented, and every example the page shows runs.

The page is written from the docstrings of ``txl_minimal.__all__`` as build.py reads them from the source
(with ast: the book needs no torch). These tests take the docstrings from build.py too, so what the page
shows is what runs here: each example with doctest, in the namespace ``from txl_minimal import *`` gives,
in a temporary folder. Why not ``pytest --doctest-modules``: it would collect every docstring of every
module (private helpers too), each in its own module's namespace rather than the one a course imports,
and `make test` would need another command; here `make test` (``pytest tests``) runs the examples as
the page shows them, one test per name, and fails a public name without a one-line summary, a
"Returns:" (a class: or "Attributes:"/"Yields:") or an example that shows a result.
"""
from __future__ import annotations

import doctest
import importlib
import inspect
import re

import pytest

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
    """Run the examples of ``entry``'s docstring in ``from txl_minimal import *``'s namespace:
    (failed, attempted), and doctest's report of the failures."""
    names = {name: getattr(txl_minimal, name) for name in txl_minimal.__all__}
    test = doctest.DocTestParser().get_doctest(entry.doc, names, entry.name, entry.path, entry.line)
    runner, report = doctest.DocTestRunner(optionflags=FLAGS), []
    return runner.run(test, out=report.append, clear_globs=True), "".join(report)


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """Examples write their files (a text, a checkpoint) and caches in a temporary folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TXL_DATA_DIR", str(tmp_path / "data"))
    return tmp_path


def test_the_reference_documents_every_public_name_in_order_then_train_and_evaluate():
    assert [e.name for e in PUBLIC] == list(txl_minimal.__all__) and len(PUBLIC) >= 25
    extra = [(e.imported_from, e.name) for e in ENTRIES[len(PUBLIC):]]
    assert extra == [m for m in build.FROM_MODULES if m[1] not in txl_minimal.__all__]


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_the_reference_reads_the_definition_python_imports(entry):
    obj = imported(entry)
    if entry.kind == "constant":
        assert not callable(obj)
        return
    assert obj.__module__ == entry.module
    assert inspect.getdoc(obj) == entry.doc
    assert entry.params == list(inspect.signature(obj).parameters)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_each_public_name_has_a_summary_its_result_its_arguments_and_an_example(entry):
    assert problems(entry, arguments(entry)) == []


@pytest.mark.parametrize("entry", ENTRIES + [m for m in METHODS if ">>>" in m.doc], ids=lambda e: e.name)
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
