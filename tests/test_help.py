"""What ``help(txl_minimal)`` shows a student: every public name, the lazily imported ones included."""
from __future__ import annotations

import pydoc
import re

import txl_minimal


def test_help_lists_every_public_name_first_and_documents_each():
    shown = pydoc.plain(pydoc.render_doc(txl_minimal))
    description = shown.split("\nDESCRIPTION\n", 1)[1].split("\nPACKAGE CONTENTS\n", 1)[0]
    first = shown.split("\nDESCRIPTION\n", 1)[1][:4000]  # the list a reader meets first
    missing = [n for n in txl_minimal.__all__ if not re.search(rf"\b{n}\b", first)]
    assert missing == [], f"not in the first lines of help(txl_minimal): {missing}"
    rest = shown.split("\nPACKAGE CONTENTS\n", 1)[1]
    entries = set(re.findall(r"^    (?:class )?(\w+)(?: = |\(| =|$)", rest, re.M))
    assert [n for n in txl_minimal.__all__ if n not in entries] == []  # each documented as an entry of its own
    assert len(description.splitlines()) < 80


def test_dir_of_the_package_holds_every_public_name():
    assert set(txl_minimal.__all__) <= set(dir(txl_minimal))
