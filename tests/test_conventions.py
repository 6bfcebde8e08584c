"""A maintained project's files: CITATION.cff (the paper as the preferred citation), CONTRIBUTING.md
(its commands and paths exist), and the issue forms (the bug form asks for the doctor's block and
the notebook and cell, its notebooks are the repository's)."""
from __future__ import annotations

import re

import pytest

from tiny import ROOT

yaml = pytest.importorskip("yaml")  # PyYAML comes with JupyterLab (jupyter_events)

FORMS = ROOT / ".github" / "ISSUE_TEMPLATE"
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9]*.ipynb"))
FIELDS = {"markdown", "textarea", "input", "dropdown", "checkboxes"}  # GitHub's issue-form elements


def pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_citation_prefers_the_paper_and_names_this_repository():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert cff["version"] == pyproject()["version"] and cff["license"] == "MIT"
    assert cff["repository-code"] == pyproject()["urls"]["Repository"]
    paper = cff["preferred-citation"]
    assert paper["type"] == "conference-paper" and paper["doi"] == "10.18653/v1/P19-1285"
    assert paper["title"].startswith("Transformer-XL: Attentive Language Models")
    assert [a["family-names"] for a in paper["authors"]] == ["Dai", "Yang", "Yang", "Carbonell", "Le",
                                                             "Salakhutdinov"]  # the README's order
    assert (paper["year"], paper["start"], paper["end"]) == (2019, 2978, 2988)
    assert "arXiv:1901.02860" in [i["value"] for i in paper["identifiers"]]


def test_citation_is_valid_cff_where_cffconvert_is_installed():
    """The Citation File Format's own schema (cffconvert ships it); CI has no cffconvert, so this
    skips there, and the file was checked with cffconvert 2.0.0's schema when written."""
    import importlib.util
    import json
    from pathlib import Path

    jsonschema = pytest.importorskip("jsonschema")
    found = importlib.util.find_spec("cffconvert")  # its schema file only: the package itself is not imported
    if found is None:
        pytest.skip("cffconvert is not installed (pip install cffconvert==2.0.0 to run this check)")
    schema = json.loads((Path(found.origin).parent / "schemas" / "1.2.0" / "schema.json").read_text())
    jsonschema.validate(yaml.safe_load((ROOT / "CITATION.cff").read_text()), schema)


def test_contributing_names_real_make_targets_and_files():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z0-9-]+):", makefile, re.M))
    named = set(re.findall(r"\bmake ([a-z0-9-]+)", text))
    assert {"test", "test-fast", "test-min", "notebooks", "setup", "e2e"} <= named <= targets
    for path in re.findall(r"`((?:txl_minimal|tests|notebooks|benchmarks)/[\w./-]+)`", text):
        assert (ROOT / path.replace("*.safetensors", "txl.safetensors")).exists(), path
    assert "python -m txl_minimal.doctor" in text and "nbval" in text and "OMP_NUM_THREADS=1" in text


def forms() -> dict[str, dict]:
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted(FORMS.glob("*.yml"))}


def test_the_issue_forms_are_well_formed():
    assert set(forms()) == {"bug_report.yml", "question.yml"}
    for name, form in forms().items():
        assert {"name", "description", "body"} <= set(form), name
        ids = [e["id"] for e in form["body"] if "id" in e]
        assert len(ids) == len(set(ids)) and all(re.fullmatch(r"[\w-]+", i) for i in ids), name
        for element in form["body"]:
            assert element["type"] in FIELDS, (name, element)
            if element["type"] == "dropdown":
                options = element["attributes"]["options"]
                assert len(options) == len(set(options)) and "none" not in {o.lower() for o in options}
        labels = [e["attributes"]["label"] for e in form["body"] if e["type"] != "markdown"]
        assert len(labels) == len(set(labels)), name


def test_the_bug_form_asks_for_the_doctor_and_the_notebook_and_cell():
    body = {e.get("id"): e for e in forms()["bug_report.yml"]["body"]}
    doctor = body["doctor"]
    assert doctor["type"] == "textarea" and doctor["validations"]["required"]
    assert doctor["attributes"]["render"] == "text"
    assert "python -m txl_minimal.doctor" in doctor["attributes"]["label"]
    assert body["notebook"]["attributes"]["options"][:-1] == NOTEBOOKS  # every notebook, kept in step
    assert body["notebook"]["validations"]["required"] and body["cell"]["validations"]["required"]


def test_the_question_form_asks_a_question():
    body = {e.get("id"): e for e in forms()["question.yml"]["body"]}
    assert body["question"]["type"] == "textarea" and body["question"]["validations"]["required"]
    assert body["notebook"]["attributes"]["options"][:-1] == NOTEBOOKS
