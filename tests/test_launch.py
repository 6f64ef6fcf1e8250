"""The torchrun command as data: exact argv and env before anything runs, and the errors found before a start."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from ddpcli.cli.app import app
from ddpcli.errors import ConfigError, UserError
from ddpcli.experiment.placeholders import fill_placeholders
from ddpcli.experiment.planning import load_plan
from ddpcli.launch.argv import Rendezvous, build_launch
from ddpcli.launch.sweep import create_run_dir
from tests.conftest import write_toml

runner = CliRunner()

FILE = """
[defaults]
module = "ddpcli.examples.regression"
args = ["--steps", "{total_steps}", "--lr", "{lr}", "--out", "{run_dir}/extra", "--literal", "{{braces}}"]
dataset_size = 1000
epochs = 1
env = { OMP_NUM_THREADS = "1" }

[baseline]
name = "1x16"
per_device_batch_size = 16
lr = 0.05

[[experiments]]
name = "4x16"
nproc_per_node = 4
"""


def test_build_launch_exact_argv_and_env(tmp_path: Path) -> None:
    plan = load_plan(write_toml(tmp_path, FILE))
    run = plan.experiments[0]
    run_dir = tmp_path / "runs" / "4x16" / "ID"
    spec = build_launch(run, run_dir, plan.file, python="/py")
    assert spec.argv == [
        "/py", "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "4", "--standalone",
        "--log-dir", f"{run_dir}/logs", "--tee", "3", "-m", "--", "ddpcli.worker.observer", "-m",
        "ddpcli.examples.regression", "--steps", "16", "--lr", "0.2", "--out", f"{run_dir}/extra", "--literal",
        "{braces}",
    ]  # fmt: skip
    assert list(spec.env_added) == ["OMP_NUM_THREADS", "DDPCLI_EXPERIMENT_DIR", "DDPCLI_RUN_DIR", "DDPCLI_RUN"]
    assert spec.env_added["DDPCLI_EXPERIMENT_DIR"] == str(tmp_path.resolve()) and spec.cwd is None
    assert spec.env_added["DDPCLI_RUN_DIR"] == str(run_dir)
    resolved = json.loads(spec.env_added["DDPCLI_RUN"])
    assert resolved == {**run.plan.as_json(), "run_dir": str(run_dir), "noise_scale": False}


@pytest.mark.parametrize(("line", "entry"), [
    ('script = "train.py"', ["-m", "--", "ddpcli.worker.observer", "TRAIN"]),
    ('script = "train.py"\nobserve = false', ["--", "TRAIN"]),
    ('module = "pkg.train"\nobserve = false', ["-m", "--", "pkg.train"]),
])  # fmt: skip
def test_the_observer_runs_the_script_unless_observe_is_false(tmp_path: Path, line: str, entry: list[str]) -> None:
    text = FILE.replace('module = "ddpcli.examples.regression"', line)
    (tmp_path / "train.py").write_text("", encoding="utf-8")
    plan = load_plan(write_toml(tmp_path, text))
    argv = build_launch(plan.baseline, tmp_path / "r", plan.file, python="/py").argv
    train = str((tmp_path / "train.py").resolve())
    expected = [train if part == "TRAIN" else part for part in entry]
    assert argv[argv.index("3") + 1 : argv.index("--steps")] == expected


def test_no_observe_runs_every_script_bare(tmp_path: Path) -> None:
    path = write_toml(tmp_path, FILE)
    observed = runner.invoke(app, ["launch", str(path), "--dry-run"])
    bare = runner.invoke(app, ["launch", str(path), "--dry-run", "--no-observe"])
    assert observed.exit_code == bare.exit_code == 0
    assert observed.stdout.count("-m -- ddpcli.worker.observer -m ddpcli.examples.regression") == 2
    assert "ddpcli.worker.observer" not in bare.stdout and bare.stdout.count("-m -- ddpcli.examples.regression") == 2


def test_script_path_and_restarts(tmp_path: Path) -> None:
    text = FILE.replace('module = "ddpcli.examples.regression"', 'script = "train.py"\nmax_restarts = 2')
    (tmp_path / "train.py").write_text("", encoding="utf-8")
    plan = load_plan(write_toml(tmp_path, text))
    spec = build_launch(plan.baseline, tmp_path / "r", plan.file, python="/py")
    assert spec.argv[spec.argv.index("--max-restarts") + 1] == "2"
    assert spec.argv[spec.argv.index("ddpcli.worker.observer") + 1] == str(tmp_path / "train.py")
    assert spec.env_added["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


def test_multi_node_uses_c10d_rendezvous(tmp_path: Path) -> None:
    plan = load_plan(write_toml(tmp_path, FILE.replace("nproc_per_node = 4", "nproc_per_node = 4\nnnodes = 2")))
    run = plan.experiments[0]
    spec = build_launch(run, tmp_path / "r", plan.file, Rendezvous("head:29400", "job7"), python="/py", node_key="n")
    assert spec.log_dir == tmp_path / "r" / "logs" / "n"  # nodes sharing the run directory keep their own logs
    assert spec.env_added["DDPCLI_NODE_KEY"] == "n"
    assert spec.argv[3:13] == [
        "--nnodes", "2", "--nproc-per-node", "4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "head:29400",
        "--rdzv-id", "job7",
    ]  # fmt: skip
    with pytest.raises(UserError, match="no rendezvous is known"):
        build_launch(run, tmp_path / "r", plan.file, Rendezvous(), python="/py")


def test_placeholders() -> None:
    values = {"lr": 0.1, "total_steps": 10, "drop_last": False, "max_steps": None}
    assert fill_placeholders(["{lr}", "x{total_steps}y", "{drop_last}"], values, "f") == ["0.1", "x10y", "false"]
    with pytest.raises(ConfigError, match=r"args\[1\]: unknown placeholder \{steps\}; known: drop_last"):
        fill_placeholders(["ok", "{steps}"], values, "f")
    with pytest.raises(ConfigError, match=r"placeholder \{max_steps\} has no value"):
        fill_placeholders(["{max_steps}"], values, "f")
    with pytest.raises(ConfigError, match="for a brace"):
        fill_placeholders(["{lr"], values, "f")


def test_placeholder_format_specs() -> None:
    values = {"lr": 0.123456, "total_steps": 1280, "drop_last": False, "name": "4x16"}
    assert fill_placeholders(["{lr:.2f}", "{total_steps:,}", "{name:>6}", "{{lr:.2f}}", "{lr:.1e}/{total_steps:05d}"],
                             values, "f") == ["0.12", "1,280", "  4x16", "{lr:.2f}", "1.2e-01/01280"]  # fmt: skip
    assert fill_placeholders(["{drop_last:>6}"], values, "f") == [" false"]  # bools as the lowercase word
    with pytest.raises(ConfigError, match=r"args\[0\]: \{lr:q\}: Unknown format code 'q'"):
        fill_placeholders(["{lr:q}"], values, "f")
    with pytest.raises(ConfigError, match=r"\{lr!r\}: conversions are not supported \(a format spec is: \{lr:.2f\}\)"):
        fill_placeholders(["{lr!r}"], values, "f")
    with pytest.raises(ConfigError, match="widths or precisions over 999"):
        fill_placeholders(["{lr:1000000000}"], values, "f")
    with pytest.raises(ConfigError, match="nested placeholders"):
        fill_placeholders(["{lr:{total_steps}}"], values, "f")


@given(text=st.text(max_size=30))
def test_escaped_braces_are_literal(text: str) -> None:
    escaped = text.replace("{", "{{").replace("}", "}}")
    assert fill_placeholders([escaped], {"lr": 0.1}, "f") == [text]


def test_notes_are_not_a_placeholder(tmp_path: Path) -> None:
    path = write_toml(tmp_path, FILE.replace("{total_steps}", "{notes}"))
    result = runner.invoke(app, ["plan", str(path)])
    assert result.exit_code == 2 and "defaults.args[1]: unknown placeholder {notes}" in result.stderr
    assert "notes" not in result.stderr.split("known: ")[1]


def test_dry_run_prints_commands_and_env_and_starts_nothing(tmp_path: Path) -> None:
    path = write_toml(tmp_path, FILE)
    result = runner.invoke(app, ["launch", str(path), "--dry-run", "--only", "4x16"])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("# 4x16 -> ") and f"{tmp_path}/runs/4x16/" in lines[0]
    argv = shlex.split(lines[1])
    assert argv[:8] == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "4",
        "--standalone",
    ]
    assert argv[-10:] == [
        "-m",
        "ddpcli.examples.regression",
        "--steps",
        "16",
        "--lr",
        "0.2",
        "--out",
        f"{lines[0].split(' -> ')[1]}/extra",
        "--literal",
        "{braces}",
    ]
    assert lines[2] == "#   OMP_NUM_THREADS=1"
    assert lines[3].startswith("#   DDPCLI_EXPERIMENT_DIR=") and lines[4].startswith("#   DDPCLI_RUN_DIR=")
    run = json.loads(shlex.split(lines[5].removeprefix("#   "))[0].removeprefix("DDPCLI_RUN="))
    assert (run["name"], run["world_size"], run["lr"]) == ("4x16", 4, 0.2)
    assert not (tmp_path / "runs").exists()


def test_unknown_placeholder_exits_2_naming_it(tmp_path: Path) -> None:
    path = write_toml(tmp_path, FILE.replace("{total_steps}", "{total_step}"))
    result = runner.invoke(app, ["launch", str(path)])
    assert result.exit_code == 2
    assert "defaults.args[1]: unknown placeholder {total_step}" in result.stderr  # where the file holds it
    assert not (tmp_path / "runs").exists()  # nothing started: every command is built before the first run


def test_multi_node_without_rendezvous_exits_2(tmp_path: Path) -> None:
    path = write_toml(tmp_path, FILE.replace("nproc_per_node = 4", "nproc_per_node = 4\nnnodes = 2"))
    result = runner.invoke(app, ["launch", str(path), "--dry-run"])
    assert result.exit_code == 2 and "--rdzv-endpoint" in result.stderr


def test_existing_run_directory_is_never_overwritten(tmp_path: Path) -> None:
    run_dir = tmp_path / "name" / "ID"
    create_run_dir(run_dir)
    (run_dir / "run.json").write_text("{}")
    with pytest.raises(UserError, match="already exists"):
        create_run_dir(run_dir)
    assert (run_dir / "run.json").read_text() == "{}"


def recorded_run(tmp_path: Path, **changes: object) -> tuple[Path, dict]:
    """A run directory whose run.json is what ddpcli launch writes at start (plus `changes`), as a dict."""
    from ddpcli.launch.sweep import start_record

    plan = load_plan(write_toml(tmp_path, FILE))
    run_dir = tmp_path / "runs" / "1x16" / "ID"
    create_run_dir(run_dir)
    spec = build_launch(plan.baseline, run_dir, plan.file)
    record = {**start_record(plan, spec, None).model_dump(mode="json"), **changes}
    (run_dir / "run.json").write_text(json.dumps(record))
    return run_dir, record


def test_resume_rebuilds_the_run_from_the_records_plan_and_launch(tmp_path: Path) -> None:
    """run.json's `plan` and `launch` are the run's two parts as they were: resuming gives back the same run (the
    plan's numbers, how to start it, its timeout), whatever else the objects hold (a key of `launch` never
    overrides the plan)."""
    from ddpcli.launch.sweep import resume_from

    planned = load_plan(write_toml(tmp_path, FILE.replace('name = "1x16"', 'name = "1x16"\ntimeout_s = 7.5'))).baseline
    run_dir, record = recorded_run(tmp_path, status="failed", timeout_s=7.5)
    assert record["plan"] == planned.plan.as_json() and record["launch"] == planned.launch.as_json()
    record["launch"] = {**record["launch"], "name": "other", "lr": 9.0}
    (run_dir / "run.json").write_text(json.dumps(record))
    spec, _ = resume_from(run_dir)
    assert (spec.run.plan, spec.run.launch, spec.run.timeout_s) == (planned.plan, planned.launch, 7.5)


def test_resume_record_arithmetic_over_two_resumes(tmp_path: Path) -> None:
    """wall_time_s and restarts are totals over every launch, however many resumes."""
    from ddpcli.launch.supervisor import Outcome
    from ddpcli.launch.sweep import finish_record, resume_from

    run_dir, record = recorded_run(tmp_path, status="failed", wall_time_s=10.0, restarts=1, timeout_s=99.0)
    for wall_time, restarts, expected_wall, expected_restarts in ((20.0, 0, 30.0, 1), (30.0, 2, 60.0, 3)):
        (run_dir / "run.json").write_text(json.dumps(record))
        resumed_spec, resumed = resume_from(run_dir)
        assert resumed_spec.env_added["DDPCLI_RESUME"] == "1" and resumed_spec.run.timeout_s == 99.0
        finished = finish_record(resumed, Outcome("failed", 1, wall_time, restarts=restarts))
        assert (finished.wall_time_s, finished.restarts) == (expected_wall, expected_restarts)
        record = finished.model_dump(mode="json")
    assert record["resumes"] == 2


def test_resume_of_a_copied_run_directory_runs_in_the_copy(tmp_path: Path) -> None:
    """A copied or moved run resumes where it was named: its own log dir, DDPCLI_RUN_DIR and {run_dir} args."""
    import shutil

    from ddpcli.launch.sweep import resume_from

    run_dir, _ = recorded_run(tmp_path, status="interrupted")
    copy = tmp_path / "elsewhere" / "1x16" / "ID"
    shutil.copytree(run_dir, copy)
    spec, record = resume_from(copy)
    assert spec.run_dir == copy.resolve() and spec.log_dir == copy.resolve() / "logs"
    assert spec.env_added["DDPCLI_RUN_DIR"] == str(copy.resolve())
    assert str(run_dir) not in " ".join(spec.argv) and f"{copy.resolve()}/extra" in spec.argv
    assert record.argv == spec.argv


@pytest.mark.parametrize(("changes", "field"), [
    ({"plan": {"nnodes": "2"}}, "plan.nnodes"),
    ({"resumes": "x"}, "resumes"),
    ({"argv": "touch X"}, "argv"),
    ({"launch": {"module": 3}}, "launch.module"),
    ({"launch": {"args": ["--x", 1]}}, "launch.args"),
    ({"run_id": None}, "run_id"),
])  # fmt: skip
def test_resume_refuses_a_record_of_the_wrong_shape(tmp_path: Path, changes: dict, field: str) -> None:
    run_dir, record = recorded_run(tmp_path, status="failed")
    if "plan" in changes:
        changes = {"plan": {**record["plan"], **changes["plan"]}}
    if "launch" in changes:
        changes = {"launch": {**record["launch"], **changes["launch"]}}
    (run_dir / "run.json").write_text(json.dumps({**record, **changes}))
    result = runner.invoke(app, ["launch", "--resume", str(run_dir), "--dry-run"])
    assert result.exit_code == 2 and "cannot be resumed" in result.stderr and field in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_resume_errors_and_dry_run(tmp_path: Path) -> None:
    run_dir, record = recorded_run(tmp_path)
    (run_dir / "run.json").write_text(json.dumps({"status": "failed"}))
    result = runner.invoke(app, ["launch", "--resume", str(run_dir)])
    assert result.exit_code == 2 and "cannot be resumed: run_id" in result.stderr
    (run_dir / "run.json").write_text(json.dumps({**record, "status": "failed"}))
    result = runner.invoke(app, ["launch", "--resume", str(run_dir), "--only", "4x16"])
    assert result.exit_code == 2 and "--only cannot change it" in result.stderr
    result = runner.invoke(app, ["launch", "--resume", str(run_dir), "--dry-run"])
    assert result.exit_code == 0 and shlex.split(result.stdout.splitlines()[1]) == record["argv"]
    assert "#   DDPCLI_RESUME=1" in result.stdout
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"  # nothing ran, nothing changed
    (run_dir / "run.json").write_text(json.dumps({**record, "status": "completed"}))
    result = runner.invoke(app, ["launch", "--resume", str(run_dir)])
    assert result.exit_code == 2 and "already completed" in result.stderr


def test_runs_dir_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    result = runner.invoke(app, ["launch", str(write_toml(tmp_path, FILE)), "--runs-dir", str(tmp_path / "file")])
    assert result.exit_code == 2 and "cannot create run directory" in result.stderr
    assert "Traceback" not in result.stderr


def test_metrics_follower_rereads_a_rewritten_file(tmp_path: Path) -> None:
    from ddpcli.rundir.metrics import iter_new_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n')
    rows, offset = iter_new_metrics(path, 0)
    assert [row["step"] for row in rows] == [1, 2, 3]
    path.write_text('{"step": 1}\n')  # a resume cut the rows after its checkpoint
    rows, offset = iter_new_metrics(path, offset)
    assert [row["step"] for row in rows] == [1]
    with path.open("a") as handle:
        handle.write('{"step": 2}\n{"st')
    rows, offset = iter_new_metrics(path, offset)
    assert [row["step"] for row in rows] == [2]  # the partial line waits for the next call


def test_torchrun_never_outlives_an_error_in_the_watch_loop(tmp_path: Path) -> None:
    """If following the run raises, the finally clause still stops torchrun (here: a sleeping stand-in)."""
    import time

    from ddpcli.launch.argv import LaunchSpec
    from ddpcli.launch.supervisor import StopRequest, run_to_end, worker_pids

    plan = load_plan(write_toml(tmp_path, FILE))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "observed").mkdir()
    (run_dir / "observed" / "rank-0.jsonl").write_text('{"kind": "step", "step": 1}\n')
    spec = LaunchSpec(run=plan.baseline, run_dir=run_dir, argv=[sys.executable, "-c", "import time; time.sleep(60)"],
                      env_added={"DDPCLI_RUN_DIR": str(run_dir)}, log_dir=run_dir / "logs")  # fmt: skip

    def broken_reporter(rows: list) -> None:
        raise RuntimeError("reporter bug")

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="reporter bug"):
        run_to_end(spec, None, StopRequest(), on_rows=broken_reporter)
    assert time.monotonic() - started < 30
    assert worker_pids(f"DDPCLI_RUN_DIR={run_dir}".encode()) == []
