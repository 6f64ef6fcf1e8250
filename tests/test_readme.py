"""The README is the contract with a newcomer: its field table must be the models' own documentation."""

from __future__ import annotations

from ddpcli.experiment.reference import BEGIN, END, field_docstrings, field_table
from ddpcli.experiment.schema import Cluster, Defaults, RunEntry
from tests.conftest import REPO


def test_readme_field_table_is_generated_from_the_models() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    embedded = text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()
    assert embedded == field_table(), "README is stale: paste the output of `python -m ddpcli.experiment.reference`"


def test_every_field_has_a_docstring() -> None:
    documented = {name for fields in field_docstrings().values() for name, _ in fields}
    for model in (RunEntry, Defaults, Cluster):
        assert set(model.model_fields) <= documented, set(model.model_fields) - documented


def test_readme_has_the_two_setup_commands() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert 'pip install torch==2.13.0 -e ".[dev]" && ddpcli launch experiments.toml' in text
    assert "\npython -m pytest\n" in text
    assert "python -m pytest" in (REPO / ".ci" / "run").read_text(encoding="utf-8")
