"""Hostile but realistic input: every experiment file, flag and run directory ddpcli accepts can really run, and
everything it refuses is one line naming the file (or flag) and the field, exit 2, never a traceback.

The fuzz test at the top generates TOML documents from the schema's fields with hostile values (huge, negative and
non-finite numbers, wrong types, strings with newlines, NUL, quotes, shell syntax and unicode, unknown keys) and
checks that contract for each; the tests after it pin the reproductions from the issue one by one.
"""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ddpcli.cli.app import app
from ddpcli.errors import UserError
from ddpcli.experiment.planning import load_plan
from ddpcli.experiment.schema import RunEntry, is_safe_name
from ddpcli.jsonvalues import write_json_atomic
from ddpcli.launch.argv import Rendezvous
from ddpcli.launch.sweep import SweepOptions, prepare, start_record
from tests.conftest import write_toml
from tests.helpers import assert_one_line_error

runner = CliRunner()

BASE: dict[str, Any] = {
    "defaults": {"module": "ddpcli.examples.regression", "dataset_size": 1000, "epochs": 2, "args": ["{lr}"]},
    "baseline": {"name": "1x16", "per_device_batch_size": 16, "lr": 0.05, "warmup_steps": 10},
    "experiments": [
        {"name": "4x16", "nproc_per_node": 4},
        {"name": "4x4", "nproc_per_node": 4, "global_batch_size": 16},
    ],
    "cluster": {},
}
RUN_KEYS = [name for name in RunEntry.model_fields]
TABLE_KEYS = {
    "defaults": [*RUN_KEYS, "runs_dir"],
    "baseline": RUN_KEYS,
    "experiments": RUN_KEYS,
    "cluster": ["rdzv_endpoint", "rdzv_id", "rdzv_backend"],
}


# ---------------------------------------------------------------------------------------------------------------
# A small TOML writer (tomllib only reads): every document is `key = value` lines with inline tables.


def toml_string(text: str) -> str:
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(toml_value, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_string(key)} = {toml_value(item)}" for key, item in value.items()) + "}"
    raise TypeError(value)


def toml_document(data: dict[str, Any]) -> str:
    return "".join(f"{toml_string(key)} = {toml_value(value)}\n" for key, value in data.items())


# ---------------------------------------------------------------------------------------------------------------
# Hostile values

HOSTILE_TEXT = [
    "b\n", "x\x00y", "", " ", "$(touch INJECTED)", "`id`", "a;b", "A=B", "'", '"', "\\", "{lr:.2f}", "{notes}",
    "{", "}", "{lr", "{{x}}", "1:2", "0:0", "3:1", "1:", "2", "é", "\u2028", "\u0661", "..", ".", "x" * 300,
    "{run_dir}/{name}", "sgd", "adam", "linear", "c10d", "h:1", "--flag", "%j",
]  # fmt: skip
HOSTILE_NUMBERS = [
    0, -1, 1, 2, 3, 1000, 2**31, 2**53 + 1, 2**63 - 1, -(2**63), 10**9, 9007199254740993,
    0.0, -0.0, 0.5, 1e-320, 5e-324, 1e308, 1.7976931348623157e308, math.inf, -math.inf, math.nan, 1e-5, 4.0,
]  # fmt: skip

scalars = st.one_of(
    st.sampled_from(HOSTILE_NUMBERS),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(HOSTILE_TEXT),
    st.text(max_size=12),
    st.booleans(),
)
values = st.one_of(
    scalars,
    scalars,
    st.lists(scalars, max_size=3),
    st.dictionaries(st.one_of(st.sampled_from(HOSTILE_TEXT), st.text(max_size=6)), scalars, max_size=3),
)


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    data = json.loads(json.dumps(BASE))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        table = draw(st.sampled_from(list(TABLE_KEYS)))
        key = draw(st.one_of(st.sampled_from(TABLE_KEYS[table]), st.sampled_from(HOSTILE_TEXT), st.text(max_size=8)))
        target = data[table]
        if table == "experiments":
            target = target[draw(st.integers(min_value=0, max_value=len(target) - 1))]
        if draw(st.integers(min_value=0, max_value=9)) == 0:
            target.pop(key, None)  # a required field gone
        else:
            target[key] = draw(values)
    if draw(st.integers(min_value=0, max_value=19)) == 0:
        data[draw(st.sampled_from(HOSTILE_TEXT))] = draw(values)  # an unknown top-level key or table
    return data


def strict_json(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def assert_arithmetic(run: dict[str, Any]) -> None:
    """The plan's numbers as DistributedSampler and DataLoader make them, in exact integers."""
    world, size = run["world_size"], run["dataset_size"]
    assert world == run["nnodes"] * run["nproc_per_node"]
    assert run["global_batch_size"] == run["per_device_batch_size"] * run["grad_accum_steps"] * world
    assert run["lr"] > 0 and run["batch_scale"] > 0
    if size is not None:
        if run["drop_last"]:
            assert (run["samples_per_rank"], run["dropped_samples"]) == (size // world, size % world)
        else:
            assert run["samples_per_rank"] == -(-size // world)
            assert run["padded_samples"] == run["samples_per_rank"] * world - size >= 0


def assert_launchable(path: Path, runs_dir: Path) -> None:
    """What plan accepted can be started: argv and env that execve takes, records that are strict JSON."""
    plan = load_plan(path)
    runs = [run for run in plan.runs if not run.plan.is_multi_node]  # multi-node ones need a rendezvous (tested below)
    if any(not (run.launch.module or run.launch.script) for run in runs):
        with pytest.raises(UserError, match="needs `module` or `script` to launch"):  # plan needs neither
            prepare(plan, runs, SweepOptions(runs_dir=runs_dir))
        return
    for spec in prepare(plan, runs, SweepOptions(runs_dir=runs_dir)):
        assert all("\0" not in arg for arg in spec.argv)
        for key, value in spec.env_added.items():
            assert key and "=" not in key and "\0" not in key and "\0" not in value
        json.dumps(start_record(plan, spec, None).model_dump(mode="json"), allow_nan=False)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=documents())
def test_fuzz_experiment_file_contract(data: dict[str, Any], tmp_path: Path) -> None:
    """Every document: exit 0 with strict JSON (and a launchable plan), or exit 2 with one line naming a field."""
    path = write_toml(tmp_path, toml_document(data))
    result = runner.invoke(app, ["plan", str(path), "--json"])
    if result.exit_code == 0:
        plan = strict_json(result.stdout)
        for run in [plan["baseline"], *plan["experiments"]]:
            assert_arithmetic(run)
        assert_launchable(path, tmp_path / "runs")
    else:
        assert_one_line_error(result, path)
    text = runner.invoke(app, ["plan", str(path)])
    assert text.exit_code == result.exit_code, (text.stdout, text.stderr, text.exception)
    assert "Traceback" not in text.stderr
    for word in ("inf", "nan", "Infinity", "NaN"):
        assert not re.search(rf"\b{word}\b", text.stdout), text.stdout


def test_the_toml_writer_round_trips() -> None:
    import tomllib

    data = {"a": {"b\n": ["x\x00\"'\\", 1.5, math.inf, True, 2**63 - 1]}}
    parsed = tomllib.loads(toml_document(data))
    assert parsed["a"]["b\n"][:2] == ["x\x00\"'\\", 1.5] and parsed["a"]["b\n"][2:] == [math.inf, True, 2**63 - 1]


# ---------------------------------------------------------------------------------------------------------------
# The reproductions, one by one

SMALL = """\
[defaults]
module = "ddpcli.examples.regression"
max_steps = 1

[baseline]
name = "a"
per_device_batch_size = 4
lr = 0.1

[[experiments]]
name = "b"
nproc_per_node = 4
"""


def with_baseline(extra: str) -> str:
    return SMALL.replace("lr = 0.1\n", f"lr = 0.1\n{extra}\n")


CANNOT_START = [
    ('env = { "A=B" = "1" }', 'baseline.env."A=B"', "not an environment variable name"),
    ('env = { "" = "1" }', 'baseline.env.""', "not an environment variable name"),
    ('env = { A = "x\\u0000" }', "baseline.env.A", "NUL byte"),
    ('args = ["ok", "x\\u0000y"]', "baseline.args[1]", "NUL byte"),
    ('module = "a\\u0000b"', "baseline.module", "NUL byte"),
    ('script = "t\\u0000.py"', "baseline.script", "NUL byte"),
    ("timeout_s = inf", "baseline.timeout_s", "finite"),
    ("timeout_s = nan", "baseline.timeout_s", "finite"),
    ("noise_scale = inf", "baseline.noise_scale", "positive finite number"),
    ("noise_scale = nan", "baseline.noise_scale", "positive finite number"),
    ("noise_scale = -2", "baseline.noise_scale", "positive finite number"),
]


@pytest.mark.parametrize(("extra", "field", "message"), CANNOT_START, ids=[case[0] for case in CANNOT_START])
def test_what_launch_cannot_start_is_refused_by_plan_and_launch(
    tmp_path: Path, extra: str, field: str, message: str
) -> None:
    path = write_toml(tmp_path, with_baseline(extra))
    for command in (["plan", str(path), "--json"], ["launch", str(path), "--dry-run"], ["launch", str(path)]):
        result = runner.invoke(app, command)
        assert_one_line_error(result, path)
        assert f": {field}: " in result.stderr and message in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == [path]  # nothing created, not even a runs directory


def test_an_lr_that_scaling_overflows_is_an_error(tmp_path: Path) -> None:
    path = write_toml(tmp_path, SMALL.replace("lr = 0.1", "lr = 1e308"))
    for command in (["plan", str(path), "--json"], ["launch", str(path)]):
        result = runner.invoke(app, command)
        assert_one_line_error(result, path)
        assert "experiments[0].lr: linear scaling gives lr 1e+308 x 4 = inf" in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == [path]
    result = runner.invoke(app, ["plan", "--lr", "1e308", "--nproc-per-node", "4", "--per-device-batch-size", "2"])
    assert result.exit_code == 2 and result.stderr.startswith("error: --lr: linear scaling gives"), result.stderr


def test_quick_form_lr_must_be_finite() -> None:
    for value in ("inf", "nan", "-1"):
        result = runner.invoke(app, ["plan", "--lr", value, "--nproc-per-node", "4", "--per-device-batch-size", "2"])
        assert result.exit_code == 2 and result.stderr.startswith("error: --lr: must be a positive finite"), value


def test_every_json_ddpcli_writes_is_strict() -> None:
    """json.dump(s)(..., allow_nan=False) on every path that prints or writes JSON: no NaN or Infinity can pass."""
    calls = []
    for path in Path(__file__).parent.parent.joinpath("ddpcli").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in {"json.dump", "json.dumps"}:
                strict = any(kw.arg == "allow_nan" and ast.unparse(kw.value) == "False" for kw in node.keywords)
                calls.append((f"{path.name}:{node.lineno}", strict))
    assert len(calls) >= 5 and all(strict for _, strict in calls), calls


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_a_non_finite_timeout_flag_is_one_line(tmp_path: Path, value: str) -> None:
    """inf passes click's range check (min 0.001) and is ddpcli's to refuse; nan and -inf are click's usage error."""
    result = runner.invoke(app, ["launch", str(write_toml(tmp_path, SMALL)), "--timeout", value, "--dry-run"])
    assert result.exit_code == 2 and "Traceback" not in result.output and "--timeout" in result.stderr
    if value == "inf":
        assert len(result.stderr.strip().splitlines()) == 1


def test_run_directory_clash_is_found_before_anything_starts(tmp_path: Path) -> None:
    path = write_toml(tmp_path, SMALL)
    (tmp_path / "runs" / "b" / "JOB42").mkdir(parents=True)
    result = runner.invoke(app, ["launch", str(path), "--rdzv-id", "JOB42"])
    assert result.exit_code == 2, result.output
    assert "runs/b/JOB42 already exists" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs" / "a").exists()  # run a never started
    plan = load_plan(path)
    with pytest.raises(UserError, match="already exists"):
        prepare(
            plan,
            plan.runs,
            SweepOptions(tmp_path / "runs", rendezvous=Rendezvous(run_id="JOB42"), name_by_rdzv_id=True),
        )


@given(name=st.text(max_size=8).map(lambda text: text + "\n") | st.sampled_from(["b\n", "a/b", "..", "", "é"]))
def test_names_are_matched_whole(name: str) -> None:
    assert not is_safe_name(name)


def test_newline_in_a_name_or_rdzv_id_or_partition_is_refused(tmp_path: Path) -> None:
    path = write_toml(tmp_path, SMALL.replace('name = "b"', 'name = "b\\n"'))
    result = runner.invoke(app, ["plan", str(path)])
    assert_one_line_error(result, path)
    assert "experiments[0].name" in result.stderr
    path = write_toml(tmp_path, SMALL)
    result = runner.invoke(app, ["launch", str(path), "--dry-run", "--rdzv-id", "x\n"])
    assert result.exit_code == 2 and "--rdzv-id 'x\\n'" in result.stderr
    result = runner.invoke(app, ["slurm", str(path), "--only", "b", "--partition", "gpu\n"])
    assert result.exit_code == 2 and "--partition 'gpu\\n'" in result.stderr
    result = runner.invoke(app, ["slurm", str(path), "--only", "b\n"])
    assert result.exit_code == 2 and "no run named 'b\\n'" in result.stderr


@pytest.mark.parametrize("value", [0.0, -3.5])
def test_a_non_positive_measured_noise_scale_is_one_line(tmp_path: Path, value: float) -> None:
    run_dir = tmp_path / "runs" / "a" / "ID"
    run_dir.mkdir(parents=True)
    write_json_atomic(run_dir / "run.json", {})
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "noise_scale": value}) + "\n")
    result = runner.invoke(app, ["plan", str(write_toml(tmp_path, SMALL)), "--noise-scale-from", str(run_dir)])
    assert result.exit_code == 2, result.output
    assert "its metrics.jsonl has no noise_scale" in result.stderr  # a non-positive one is no measurement
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_dataset_smaller_than_one_global_batch_is_said(tmp_path: Path) -> None:
    text = SMALL.replace("max_steps = 1", "dataset_size = 3\nepochs = 1").replace(
        "per_device_batch_size = 4", "per_device_batch_size = 16"
    )
    text = text.replace("nproc_per_node = 4", "nproc_per_node = 8")
    result = runner.invoke(app, ["plan", str(write_toml(tmp_path, text)), "--json"])
    assert result.exit_code == 0, result.stderr
    run = strict_json(result.stdout)["experiments"][0]
    assert (run["samples_per_rank"], run["padded_samples"], run["steps_per_epoch"]) == (1, 5, 1)
    assert run["notes"][0] == (
        "dataset_size 3 is smaller than one global batch of 128: each of 8 processes gets 1 sample per epoch, not "
        "16, so each optimizer step uses the mean gradient of 8 samples (3 distinct; DistributedSampler repeats 5), "
        "and the lr scaled for a batch of 128 is scaled for a batch that never happens."
    )
    result = runner.invoke(app, ["plan", str(write_toml(tmp_path, text + "drop_last = true\n"))])
    assert result.exit_code == 2
    assert "experiments[0].dataset_size: dataset_size 3 is smaller than the world size 8" in result.stderr


def test_sample_counts_are_exact_integers_beyond_2_to_53(tmp_path: Path) -> None:
    text = SMALL.replace("max_steps = 1", "dataset_size = 9007199254740993\nepochs = 1")
    result = runner.invoke(app, ["plan", str(write_toml(tmp_path, text)), "--json"])
    assert result.exit_code == 0, result.stderr
    base, four = (lambda plan: (plan["baseline"], plan["experiments"][0]))(strict_json(result.stdout))
    assert (base["samples_per_rank"], base["padded_samples"]) == (9007199254740993, 0)
    assert base["steps_per_epoch"] == 2251799813685249  # ceil(9007199254740993 / 4)
    assert (four["samples_per_rank"], four["padded_samples"]) == (2251799813685249, 3)


def test_absurd_process_and_node_counts_are_errors(tmp_path: Path) -> None:
    path = write_toml(tmp_path, SMALL.replace("nproc_per_node = 4", "nproc_per_node = 1000000000"))
    result = runner.invoke(app, ["plan", str(path)])
    assert_one_line_error(result, path)
    assert "experiments[0].nproc_per_node: Input should be less than or equal to 1024" in result.stderr
    path = write_toml(tmp_path, SMALL.replace("nproc_per_node = 4", "nnodes = 1000000"))
    assert (
        "experiments[0].nnodes: must be a whole number from 1 to 100000"
        in runner.invoke(app, ["plan", str(path)]).stderr
    )


def test_plan_shows_a_multi_node_run_without_an_endpoint_and_launch_refuses(tmp_path: Path) -> None:
    path = write_toml(tmp_path, SMALL.replace("nproc_per_node = 4", "nproc_per_node = 8\nnnodes = 32"))
    result = runner.invoke(app, ["plan", str(path), "--json"])
    assert result.exit_code == 0, result.stderr
    run = strict_json(result.stdout)["experiments"][0]
    assert (run["world_size"], run["global_batch_size"]) == (256, 1024)
    assert any("No rendezvous endpoint is known yet" in note for note in run["notes"])
    assert "No rendezvous endpoint is known yet" in runner.invoke(app, ["plan", str(path)]).stdout
    result = runner.invoke(app, ["launch", str(path), "--dry-run"])
    assert result.exit_code == 2 and "no rendezvous is known" in result.stderr
    result = runner.invoke(app, ["plan", str(path), "--rdzv-endpoint", "head:29400", "--json"])
    assert not any("rendezvous" in note for note in strict_json(result.stdout)["experiments"][0]["notes"])


def test_misleading_messages(tmp_path: Path) -> None:
    path = write_toml(tmp_path, SMALL)
    result = runner.invoke(app, ["launch", str(path), "--dry-run", "--nnodes", "0"])
    assert result.exit_code == 2 and result.stderr.startswith("error: --nnodes 0: must be a whole number"), (
        result.stderr
    )
    quick = ["plan", "--per-device-batch-size", "16", "--lr", "0.1", "--nproc-per-node", "4"]
    result = runner.invoke(app, [*quick, "--optimizer", "lion"])
    assert result.exit_code == 2 and result.stderr.startswith("error: --optimizer: Input should be 'sgd'"), (
        result.stderr
    )
    assert "defaults" not in result.stderr
    duplicate = write_toml(tmp_path, SMALL.replace('name = "b"', 'name = "a"'))
    result = runner.invoke(app, ["plan", str(duplicate)])
    assert_one_line_error(result, duplicate)
    assert "experiments[0].name: duplicate run name 'a' (also baseline's name)" in result.stderr
