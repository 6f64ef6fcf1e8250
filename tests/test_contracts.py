"""The contracts other parts and other people's scripts read (docs/contracts.md), pinned as literals here.

Each list is written out in full on purpose: a test that compared the output with the code's own PLAN_KEYS would
pass when two keys swapped places. The real commands' JSON is checked against these literals, and so is the text
of docs/contracts.md (and the README's findings table): changing a contract means changing this file, the docs
and the code together.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddpcli.cli.app import app
from ddpcli.experiment.planning import load_plan
from ddpcli.launch.argv import build_launch
from ddpcli.launch.sweep import start_record
from ddpcli.rundir.record import RUN_FIELDS, Observed
from tests.builders import make_run
from tests.conftest import REPO
from tests.contract_keys import COMPARE_KEYS, FINDING_CODES, LAUNCH_KEYS, OBSERVED_KEYS, RUN_JSON_FIELDS, RUN_KEYS

CONTRACTS = (REPO / "docs" / "contracts.md").read_text(encoding="utf-8")
README = (REPO / "README.md").read_text(encoding="utf-8")


def backticked(text: str) -> list[str]:
    """The names in a run of `a, b, c` code spans, in order (line breaks inside a span allowed)."""
    return [name.strip() for span in re.findall(r"`([^`]*)`", text) for name in span.split(",") if name.strip()]


def section(title: str) -> str:
    """The text of docs/contracts.md from a line starting with `title` up to the next blank-line-separated bullet."""
    start = CONTRACTS.index(title)
    end = CONTRACTS.find("\n- ", start + len(title))
    return CONTRACTS[start : end if end != -1 else len(CONTRACTS)]


def test_plan_json_keys_are_the_contract(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["plan", str(REPO / "experiments.toml"), "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert list(plan) == ["file", "baseline", "experiments"]
    for run in [plan["baseline"], *plan["experiments"]]:
        assert tuple(run) == RUN_KEYS


def test_contracts_md_lists_the_run_keys_in_order() -> None:
    start = CONTRACTS.index("RUN keys")
    text = CONTRACTS[start : CONTRACTS.index("drop_last`", start) + len("drop_last`")]
    listed = [name for name in backticked(text) if not name.startswith("ddpcli.") and not name.isupper()]
    assert tuple(listed) == RUN_KEYS


def test_run_json_fields_are_the_contract_and_documented() -> None:
    assert RUN_FIELDS == RUN_JSON_FIELDS
    documented = set(backticked(section("- `run.json`")))
    assert [field for field in RUN_JSON_FIELDS if field not in documented] == []


def test_run_json_plan_and_launch_are_the_contract_and_documented(tmp_path: Path) -> None:
    """run.json's `plan` is the RUN object and `launch` how to start the run, as `ddpcli launch` writes them."""
    plan = load_plan(REPO / "experiments.toml")
    record = start_record(plan, build_launch(plan.baseline, tmp_path / "run", plan.file), None)
    assert (tuple(record.plan), tuple(record.launch)) == (RUN_KEYS, LAUNCH_KEYS)
    text = section("- `run.json`")
    start = text.index("`launch` (")
    assert tuple(backticked(text[start : text.index("workdir`", start) + len("workdir`")])[1:]) == LAUNCH_KEYS


def test_observed_keys_are_the_contract_and_documented() -> None:
    assert tuple(Observed.model_fields) == OBSERVED_KEYS
    documented = set(backticked(section("- `observed`")))
    assert [key for key in OBSERVED_KEYS if key not in documented] == []


def test_compare_json_keys_are_the_contract(tmp_path: Path) -> None:
    make_run(tmp_path / "runs", "1x16", steps=4)
    result = CliRunner().invoke(app, ["compare", str(tmp_path / "runs"), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert rows and all(tuple(row) == COMPARE_KEYS for row in rows)
    csv = CliRunner().invoke(app, ["compare", str(tmp_path / "runs"), "--csv", str(tmp_path / "rows.csv")])
    assert csv.exit_code == 0, csv.output
    assert tuple((tmp_path / "rows.csv").read_text().splitlines()[0].split(",")) == COMPARE_KEYS[:-4]


def test_contracts_md_lists_the_compare_keys_in_order() -> None:
    text = CONTRACTS[CONTRACTS.index("## `ddpcli compare --json`") : CONTRACTS.index("## Exit codes")]
    rows, json_keys = text.split("then `JSON_KEYS`")
    assert tuple(name for name in backticked(rows) if name.isidentifier()) == COMPARE_KEYS[:-4]
    assert re.search(r"`values_from`.*`plan_followed`.*`observed` and `findings`", json_keys, re.S)


def emitted_finding_codes() -> set[str]:
    """Every finding code the package can write, read with ast: `code=` of a Finding (a string, or a module-level
    name bound to one, `UNEVEN_ACCUMULATION = "uneven_accumulation"`) and the code given to `with_finding`."""
    codes = set()
    for path in (REPO / "ddpcli").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            for target in node.targets
            if isinstance(target, ast.Name) and isinstance(node.value.value, str)
        }
        parameters = {arg.arg for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) for arg in node.args.args}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            called = getattr(node.func, "id", getattr(node.func, "attr", ""))
            given = [kw.value for kw in node.keywords if kw.arg == "code"] if called == "Finding" else []
            if called == "with_finding" and len(node.args) > 1:
                given.append(node.args[1])
            for value in given:
                if isinstance(value, ast.Constant):
                    codes.add(value.value)
                elif isinstance(value, ast.Name) and value.id in constants:
                    codes.add(constants[value.id])
                elif not (isinstance(value, ast.Name) and value.id in parameters):  # a helper passing its argument on
                    codes.add(f"<computed in {path.name}>")
    return codes


def test_every_finding_code_is_the_contract() -> None:
    assert emitted_finding_codes() == FINDING_CODES


@pytest.mark.parametrize("code", sorted(FINDING_CODES))
def test_every_finding_code_is_documented(code: str) -> None:
    assert f"`{code}`" in section("- `findings`"), "docs/contracts.md's findings bullet"
    assert re.search(rf"^\| `{code}` \|", README, re.M), "the README's findings table"
