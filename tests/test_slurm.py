"""`ddpcli slurm`: the pure script builder, the command, and real jobs on a SLURM cluster.

The `slurm`-marked tests need a cluster with two idle nodes; `scripts/local-slurm.sh up` makes one on this machine
in seconds. Without one they skip and say why. Every wait is bounded: a job that does not end in time is cancelled
and the test fails with the job's log.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ddpcli.cli.app import app
from ddpcli.errors import UserError
from ddpcli.experiment.loading import validate_experiment_data
from ddpcli.experiment.planning import resolve_plan
from ddpcli.experiment.resolved import ResolvedRun
from ddpcli.jsonvalues import read_json
from ddpcli.rundir.layout import PARAMS_FILE, RUN_FILE
from ddpcli.slurm.sbatch import PORT_BASE, PORT_SPAN, SlurmOptions, sbatch_script
from tests.conftest import REPO, write_toml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

GOLDEN = Path(__file__).parent / "golden"
JOB_TIMEOUT_S = 120  # the slowest job here takes 10-25 s on 2 busy CPUs
ACTIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING"}
runner = CliRunner()


# ---------------------------------------------------------------------------------------------------------------
# The pure builder


def _run(**fields: Any) -> ResolvedRun:
    data = {"baseline": {"name": "big", "per_device_batch_size": 4, "lr": 0.1, "module": "train", **fields}}
    source = Path("experiments.toml")
    return resolve_plan(validate_experiment_data(data, source), source).baseline


def _options(**fields: Any) -> SlurmOptions:
    return SlurmOptions(**{"experiment_file": Path("/exp/experiments.toml"), "python": "/venv/bin/python", **fields})


def _bash_syntax_ok(script: str) -> None:
    done = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stderr


def _job_argv(script: str, tmp_path: Path) -> list[str]:
    """What srun would be given, as bash itself parses the script (stand-ins for srun and scontrol)."""
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    stubs = "srun() { printf '%s\\0' \"$@\" >&3; }; scontrol() { printf 'n1\\nn2\\n'; }; source \"$1\" 3>&1 >/dev/null"
    env = {**os.environ, "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "n[1-2]"}
    done = subprocess.run(["bash", "-c", stubs, "bash", str(path)], capture_output=True, env=env, timeout=10)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().split("\0")[:-1]


def test_gpus_per_node_defaults_to_processes_per_node() -> None:
    script = sbatch_script(_run(nnodes=2, nproc_per_node=4), _options())
    assert "#SBATCH --gpus-per-node=4\n" in script
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n" in script


def test_cpu_cluster_has_no_gpus_line() -> None:
    script = sbatch_script(_run(nnodes=2, nproc_per_node=4), _options(gpus_per_node=0))
    assert "gpus" not in script
    _bash_syntax_ok(script)


def test_fewer_gpus_than_processes_is_refused() -> None:
    with pytest.raises(UserError, match="fewer than the run's 4 processes"):
        sbatch_script(_run(nproc_per_node=4), _options(gpus_per_node=2))


def test_elastic_run_asks_for_a_node_range(tmp_path: Path) -> None:
    script = sbatch_script(_run(nnodes="2:4", nproc_per_node=8), _options())
    assert "#SBATCH --nodes=2-4\n" in script
    argv = _job_argv(script, tmp_path)
    assert argv[argv.index("--nnodes") + 1] == "2:4"


def test_partition_time_account_and_log_lines() -> None:
    options = _options(partition="gpu", time="02:00:00", account="proj-7", cpus_per_task=16, job_log="logs/%x-%j.out")
    lines = sbatch_script(_run(), options).splitlines()
    assert [line for line in lines if line.startswith("#SBATCH")] == [
        "#SBATCH --job-name=big",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=1",
        "#SBATCH --cpus-per-task=16",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=proj-7",
        "#SBATCH --time=02:00:00",
        "#SBATCH --output=logs/%x-%j.out",
    ]


def test_directive_value_with_blanks_is_refused() -> None:
    with pytest.raises(UserError, match="sbatch --partition 'gpu nodes': must be one word"):
        sbatch_script(_run(), _options(partition="gpu nodes"))


def test_srun_argv_as_bash_parses_it(tmp_path: Path) -> None:
    """Paths with blanks, `$`, quotes or a newline reach `ddpcli launch` intact; the rendezvous is the job's."""
    options = _options(
        experiment_file=Path("/my exps/$HOME's\n`false`.toml"),
        python="/opt/py 3/bin/python",
        cpus_per_task=8,
        runs_dir=Path("/scratch/my runs"),
    )
    argv = _job_argv(sbatch_script(_run(nnodes=2), options), tmp_path)
    port = PORT_BASE + 4242 % PORT_SPAN
    assert argv == [
        "--kill-on-bad-exit=1", "--cpus-per-task=8",
        "/opt/py 3/bin/python", "-m", "ddpcli", "launch", "/my exps/$HOME's\n`false`.toml", "--only", "big",
        "--nnodes", "2", "--runs-dir", "/scratch/my runs",
        "--rdzv-endpoint", f"n1:{port}", "--rdzv-id", "4242",
    ]  # fmt: skip


SCRIPT_FIELDS = ["name", "partition", "account", "time", "job_log", "python", "experiment_file", "runs_dir"]
SHELL_TEXT = st.text(
    alphabet=st.sampled_from(list("ab-/:%.\n '\"$()`;\\#&|<>*?~{}!é\t\0")) | st.characters(), max_size=16
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(SCRIPT_FIELDS), value=SHELL_TEXT)
def test_every_script_field_is_refused_or_arrives_intact(tmp_path: Path, field: str, value: str) -> None:
    """Each value written into the script, with newlines, quotes, $(), backticks or ';': a one-line error, or a
    script bash parses in which the value stays a comment, a whole directive or one intact srun argument."""
    try:
        run = _run(nnodes=2, name=value) if field == "name" else _run(nnodes=2)
        given_value: Any = Path(value) if field in {"experiment_file", "runs_dir"} else value
        script = sbatch_script(run, _options(**({} if field == "name" else {field: given_value})))
    except UserError as error:
        assert "\n" not in str(error)
        return
    _bash_syntax_ok(script)
    header = script.split("\nset -euo pipefail\n")[0]
    assert all(line.startswith("#") for line in header.splitlines())  # nothing before `set` runs
    directive = {"name": "job-name", "job_log": "output"}.get(field, field)
    if field in {"name", "partition", "account", "time", "job_log"}:
        assert f"#SBATCH --{directive}={value}\n" in script
    argv = _job_argv(script, tmp_path)
    launch = argv[argv.index("-m") - 1 :]
    expected = {
        "name": launch[launch.index("--only") + 1],
        "python": launch[0],
        "experiment_file": launch[4],
        "runs_dir": launch[launch.index("--runs-dir") + 1] if "--runs-dir" in launch else None,
    }
    if field in expected:
        assert expected[field] == (str(Path(value)) if field in {"experiment_file", "runs_dir"} else value)


def test_a_long_node_list_does_not_kill_the_job_with_sigpipe(tmp_path: Path) -> None:
    """`scontrol show hostnames | head -n 1` under `set -o pipefail` ends the job with 141 (SIGPIPE) when scontrol
    is still writing as head exits: a long node list, or a scontrol writing line by line (seen as a flaky test)."""
    path = tmp_path / "job.sbatch"
    path.write_text(sbatch_script(_run(nnodes=2), _options()))
    stubs = ("srun() { printf '%s\\0' \"$@\" >&3; }; scontrol() { for n in $(seq 1 20000); do echo \"n$n\"; done; }; "
             'source "$1" 3>&1 >/dev/null')  # fmt: skip
    env = {**os.environ, "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "n[1-20000]"}
    done = subprocess.run(["bash", "-c", stubs, "bash", str(path)], capture_output=True, env=env, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr)
    argv = done.stdout.decode().split("\0")[:-1]
    assert argv[argv.index("--rdzv-endpoint") + 1].startswith("n1:")


def test_a_failing_scontrol_stops_the_job(tmp_path: Path) -> None:
    path = tmp_path / "job.sbatch"
    path.write_text(sbatch_script(_run(nnodes=2), _options()))
    stubs = "srun() { printf 'ran\\0' >&3; }; scontrol() { echo 'scontrol: error' >&2; return 1; }; source \"$1\" 3>&1"
    env = {**os.environ, "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "n[1-2]"}
    done = subprocess.run(["bash", "-c", stubs, "bash", str(path)], capture_output=True, env=env, timeout=10)
    assert done.returncode == 1 and b"ran" not in done.stdout and b"scontrol: error" in done.stderr


def test_fixed_port(tmp_path: Path) -> None:
    argv = _job_argv(sbatch_script(_run(nnodes=2), _options(port=29500)), tmp_path)
    assert argv[argv.index("--rdzv-endpoint") + 1] == "n1:29500"


# ---------------------------------------------------------------------------------------------------------------
# The command

TWO_BY_EIGHT = """\
[baseline]
name = "2x8"
module = "ddpcli.examples.regression"
nnodes = 2
nproc_per_node = 8
per_device_batch_size = 32
lr = 0.1
max_steps = 1000
"""


def _experiment_file(tmp_path: Path) -> Path:
    return write_toml(tmp_path, TWO_BY_EIGHT)


def test_golden_two_nodes_by_eight_gpus(tmp_path: Path) -> None:
    """The whole script for a 2 x 8 GPU run, pinned. Rewrite with DDPCLI_UPDATE_GOLDEN=1 and review the diff."""
    file = _experiment_file(tmp_path)
    result = runner.invoke(app, ["slurm", str(file), "--only", "2x8", "--python", "/opt/venv/bin/python"])
    assert result.exit_code == 0, result.output
    script = result.stdout.replace(str(tmp_path.resolve()), "/home/me/project")
    golden = GOLDEN / "slurm_2x8.sbatch"
    if os.environ.get("DDPCLI_UPDATE_GOLDEN"):
        golden.write_text(script)
    assert script == golden.read_text()
    _bash_syntax_ok(script)


def test_output_file_is_the_printed_script(tmp_path: Path) -> None:
    file = _experiment_file(tmp_path)
    printed = runner.invoke(app, ["slurm", str(file), "--only", "2x8"])
    written = runner.invoke(app, ["slurm", str(file), "--only", "2x8", "-o", str(tmp_path / "job.sbatch")])
    assert written.exit_code == 0, written.output
    assert (tmp_path / "job.sbatch").read_text() == printed.stdout
    assert written.stdout == ""  # "wrote X" is a message, on stderr like every command's
    assert f"wrote {tmp_path / 'job.sbatch'}; submit it with: sbatch {tmp_path / 'job.sbatch'}" in written.stderr


@pytest.mark.parametrize("name", ["job[bold].sbatch", "[red]x.sbatch", "--wrap=touch pwned"])
def test_written_path_is_shown_as_it_is_and_as_one_shell_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Rich markup in a path once printed `wrote job.sbatch` for `job[bold].sbatch`; a path that looks like an
    option must be shown so that pasting the command submits the file."""
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["slurm", str(_experiment_file(tmp_path)), "--only", "2x8", "-o", name])
    assert result.exit_code == 0, result.output
    assert (tmp_path / name).is_file()
    shown = result.stderr.replace("\n", "")
    assert f"wrote {name};" in shown
    command = shown.split("submit it with: ", 1)[1].strip()
    assert shlex.split(command) == ["sbatch", name if not name.startswith("-") else f"./{name}"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "--only NAME is required"),
        (["--only", "nope"], "no run named 'nope'; runs in this file: 2x8"),
        (["--only", "2x8", "--gpus-per-node", "3"], "fewer than the run's 8 processes"),
    ],
)
def test_user_errors_exit_2(tmp_path: Path, extra: list[str], message: str) -> None:
    result = runner.invoke(app, ["slurm", str(_experiment_file(tmp_path)), *extra])
    assert result.exit_code == 2
    assert message in result.stderr


def _fake_sbatch(tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An `sbatch` on PATH that records its argv and stdin, then runs `body`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{tmp_path}/argv"\ncat > "{tmp_path}/stdin"\n{body}\n')
    sbatch.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return sbatch


def test_submit_prints_the_job_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_sbatch(tmp_path, 'echo "4242;cluster"', monkeypatch)
    result = runner.invoke(app, ["slurm", str(_experiment_file(tmp_path)), "--only", "2x8", "--submit"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "4242\n"
    assert (tmp_path / "argv").read_text() == "--parsable\n"
    assert (tmp_path / "stdin").read_text().startswith("#!/bin/bash\n#SBATCH --job-name=2x8\n")
    assert str(tmp_path / "runs" / "2x8" / "4242") in result.stderr.replace("\n", "")


def test_submit_written_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_sbatch(tmp_path, "echo 7", monkeypatch)
    job = tmp_path / "job.sbatch"
    result = runner.invoke(app, ["slurm", str(_experiment_file(tmp_path)), "--only", "2x8", "-o", str(job), "--submit"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "7\n"
    assert (tmp_path / "argv").read_text() == f"--parsable\n{job}\n"


def test_submit_passes_a_path_that_sbatch_cannot_read_as_an_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-o "--wrap=touch pwned"` once reached sbatch as a bare argument: sbatch would run the wrap, not the file."""
    _fake_sbatch(tmp_path, "echo 7", monkeypatch)
    monkeypatch.chdir(tmp_path)
    name = "--wrap=touch pwned"
    result = runner.invoke(app, ["slurm", str(_experiment_file(tmp_path)), "--only", "2x8", "-o", name, "--submit"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "argv").read_text() == f"--parsable\n{tmp_path / name}\n"


def test_submit_shows_why_sbatch_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = 'echo "sbatch: error: invalid partition specified: gpu" >&2; exit 1'
    _fake_sbatch(tmp_path, body, monkeypatch)
    result = runner.invoke(app, ["slurm", str(_experiment_file(tmp_path)), "--only", "2x8", "--submit"])
    assert result.exit_code == 2
    assert "sbatch failed (exit 1): sbatch: error: invalid partition specified: gpu" in result.stderr


def test_submit_without_sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    result = runner.invoke(app, ["slurm", str(_experiment_file(tmp_path)), "--only", "2x8", "--submit"])
    assert result.exit_code == 2
    assert "sbatch is not on PATH" in result.stderr


# ---------------------------------------------------------------------------------------------------------------
# Real jobs on a SLURM cluster


@functools.cache
def _cluster_problem() -> str | None:
    """Why no SLURM cluster can take a 2-node job right now, or None if one can."""
    for argv in (["scontrol", "ping"], ["sinfo", "-h", "-N", "-o", "%N %t"]):
        if shutil.which(argv[0]) is None:
            return f"{argv[0]} is not installed"
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:
            return f"`{' '.join(argv)}` gave no answer in 10 s"
        if done.returncode != 0 or "DOWN" in done.stdout:
            lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip("* ")]  # no banners
            return f"`{' '.join(argv)}` failed: {lines[-1] if lines else f'exit {done.returncode}'}"
    idle = {line.split()[0] for line in done.stdout.splitlines() if line.split()[1:] in (["idle"], ["mix"])}
    return None if len(idle) >= 2 else f"fewer than 2 idle nodes: {done.stdout.strip()!r}"


@pytest.fixture
def cluster() -> None:
    problem = _cluster_problem()
    if problem:
        pytest.skip(f"no SLURM cluster reachable ({problem}); start one with `scripts/local-slurm.sh up`")


def _sbatch(script: Path) -> str:
    done = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def _job_state(job_id: str) -> str:
    done = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=10)
    fields = dict(word.split("=", 1) for word in done.stdout.split() if "=" in word)
    return fields.get("JobState", "UNKNOWN")


def _wait_for_job(job_id: str, log: Path, timeout_s: float = JOB_TIMEOUT_S) -> str:
    """Poll every 0.2 s (sbatch --wait polls far slower); past the timeout, cancel the job and fail."""
    deadline = time.monotonic() + timeout_s
    while (state := _job_state(job_id)) in ACTIVE_STATES:
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id], timeout=10, check=False)
            pytest.fail(f"job {job_id} still {state} after {timeout_s} s; log:\n{_tail(log)}")
        time.sleep(0.2)
    return state


def _tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else f"({path} was not written)"


def _job_script(tmp_path: Path, body: str) -> tuple[Path, Path]:
    """A 2-node job script with a 2-minute limit (the cluster's own safety net), and where its log goes."""
    log = tmp_path / "job.out"
    script = tmp_path / "job.sbatch"
    header = f"#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --time=2\n#SBATCH --output={log}\n"
    script.write_text(header + "set -euo pipefail\n" + body)
    return script, log


@pytest.mark.slurm
def test_cluster_runs_one_task_on_each_of_two_nodes(cluster: None, tmp_path: Path) -> None:
    script, log = _job_script(tmp_path, "srun bash -c 'echo \"task $SLURM_PROCID on $SLURMD_NODENAME $(hostname)\"'\n")
    job_id = _sbatch(script)
    assert _wait_for_job(job_id, log) == "COMPLETED", _tail(log)
    lines = log.read_text().splitlines()
    assert sorted(line.split()[1] for line in lines) == ["0", "1"], lines
    assert len({line.split()[3] for line in lines}) == 2, lines


ALLREDUCE = """\
import torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum {total.item():g}", flush=True)
dist.barrier()
dist.destroy_process_group()  # left to interpreter exit, gloo's teardown aborted 1 run in ~20 here
"""


@pytest.mark.slurm
def test_torchrun_rendezvous_across_two_nodes(cluster: None, tmp_path: Path) -> None:
    """The cluster and c10d rendezvous work on their own, independent of `ddpcli launch`."""
    (tmp_path / "allreduce.py").write_text(ALLREDUCE)
    body = f"""\
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
port=$(({PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN}))
export OMP_NUM_THREADS=1
srun --kill-on-bad-exit=1 {sys.executable} -m torch.distributed.run --nnodes 2 --nproc-per-node 1 \\
  --rdzv-backend c10d --rdzv-endpoint "$head_node:$port" --rdzv-id "$SLURM_JOB_ID" {tmp_path / "allreduce.py"}
"""
    script, log = _job_script(tmp_path, body)
    job_id = _sbatch(script)
    assert _wait_for_job(job_id, log) == "COMPLETED", _tail(log)
    results = sorted(line for line in log.read_text().splitlines() if line.startswith("rank "))
    assert results == ["rank 0 of 2: sum 3", "rank 1 of 2: sum 3"], _tail(log)


def _toml(tables: dict[str, Any]) -> str:
    """Enough TOML for an experiment file: tables of strings, numbers, booleans, lists and inline tables."""

    def value(item: Any) -> str:
        if isinstance(item, dict):
            return "{ " + ", ".join(f"{key} = {value(inner)}" for key, inner in item.items()) + " }"
        return json.dumps(item)  # a string, number, boolean or list of them reads the same in TOML

    lines = []
    for name, table in tables.items():
        for entry in table if isinstance(table, list) else [table]:
            lines.append(f"[[{name}]]" if isinstance(table, list) else f"[{name}]")
            lines += [f"{key} = {value(item)}" for key, item in entry.items()]
    return "\n".join(lines) + "\n"


def _regression_file(tmp_path: Path) -> Path:
    """The bundled example's [defaults], cut to 10 steps: one run on 1 node x 2 processes, one on 2 nodes x 1."""
    bundled = tomllib.loads((REPO / "experiments.toml").read_text())
    defaults = {key: item for key, item in bundled["defaults"].items() if key not in {"epochs", "noise_scale"}}
    defaults |= {"max_steps": 10, "runs_dir": "runs"}
    baseline = {**bundled["baseline"], "name": "one-node", "nnodes": 1, "nproc_per_node": 2, "warmup_steps": 2}
    experiment = {"name": "two-nodes", "nnodes": 2, "nproc_per_node": 1}
    return write_toml(tmp_path, _toml({"defaults": defaults, "baseline": baseline, "experiments": [experiment]}))


def _final_params(run_dir: Path) -> dict[str, Any]:
    import torch  # only this test needs it

    return torch.load(run_dir / PARAMS_FILE, map_location="cpu", weights_only=True)


@pytest.mark.slurm
@pytest.mark.e2e
def test_two_node_slurm_job_matches_one_node_run(cluster: None, tmp_path: Path) -> None:
    """`ddpcli slurm --submit` of a 2-node x 1-process run ends where `ddpcli launch` on 1 node x 2 ends.

    The one-node run goes while the job runs: both spend most of their time starting Python and torch.
    """
    file, runs = _regression_file(tmp_path), tmp_path / "runs"
    submit = ["slurm", str(file), "--only", "two-nodes", "--gpus-per-node", "0", "--time", "3", "--submit"]
    result = runner.invoke(app, [*submit, "--job-log", str(tmp_path / "job-%j.out"), "--runs-dir", str(runs)])
    assert result.exit_code == 0, result.output
    job_id = result.stdout.strip()
    job_log, local_log = tmp_path / f"job-{job_id}.out", tmp_path / "local.out"
    launch = [sys.executable, "-m", "ddpcli", "launch", str(file), "--only", "one-node", "--runs-dir", str(runs)]
    with local_log.open("w") as sink:
        local = subprocess.Popen(launch, stdout=sink, stderr=subprocess.STDOUT)
    try:
        assert _wait_for_job(job_id, job_log) == "COMPLETED", _tail(job_log)
        assert local.wait(timeout=JOB_TIMEOUT_S) == 0, _tail(local_log)
    finally:
        if local.poll() is None:  # a failed or timed-out test: stop it the way Ctrl-C would
            local.send_signal(signal.SIGINT)
            local.wait(timeout=30)

    two_nodes = runs / "two-nodes" / job_id
    (one_node,) = (path.parent for path in (runs / "one-node").glob(f"*/{RUN_FILE}"))
    for run_dir in (two_nodes, one_node):
        assert read_json(run_dir / RUN_FILE)["status"] == "completed", run_dir
    expected, got = _final_params(one_node), _final_params(two_nodes)
    assert got.keys() == expected.keys()
    differences = {name: (got[name].double() - expected[name].double()).abs().max().item() for name in expected}
    assert max(differences.values()) <= 1e-6, differences
