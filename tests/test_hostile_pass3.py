"""Hostile pass 3 (issue 29): placeholders that format into what no argv can hold, scripts that do not exist, and
`extra_args` mistakes named as the user wrote them. Each refused by `plan` and `launch` alike: exit 2, one line
naming the file and the field, nothing started and nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ddpcli.cli.app import app
from tests.conftest import write_toml
from tests.helpers import assert_one_line_error

runner = CliRunner()

FILE = """\
[defaults]
module = "ddpcli.examples.regression"
max_steps = 4
args = ["--steps", "{total_steps}"]
extra_args = ["--seed={seed}"]

[baseline]
name = "a"
per_device_batch_size = 4
lr = 0.1
extra_args = ["--tag=a"]

[[experiments]]
name = "b"
nproc_per_node = 2
extra_args = ["--x", "EXTRA"]
"""

COMMANDS = (["plan", "FILE", "--json"], ["plan", "FILE"], ["launch", "FILE", "--dry-run"], ["launch", "FILE"])


def refused_everywhere(tmp_path: Path, text: str) -> list[str]:
    """Each command's one error line, after checking that nothing was created next to the file."""
    path = write_toml(tmp_path, text)
    lines = []
    for command in COMMANDS:
        result = runner.invoke(app, [str(path) if word == "FILE" else word for word in command])
        assert_one_line_error(result, path)
        lines.append(result.stderr.strip())
    assert sorted(tmp_path.iterdir()) == [path]  # no runs directory, no run started
    return lines


@pytest.mark.parametrize(
    ("placeholder", "message"),
    [
        ("{seed:c}", "NUL byte"),  # seed 0 as a character: a NUL byte no argv can hold
        ("{total_steps * 300000:c}", "{total_steps * 300000:c}"),  # beyond any character: OverflowError
        ("{total_steps * 14000:c}", "cannot be a command-line argument"),  # 56000: a lone surrogate
    ],
)
def test_a_placeholder_no_argv_can_hold_is_one_line(tmp_path: Path, placeholder: str, message: str) -> None:
    for line in refused_everywhere(tmp_path, FILE.replace('"EXTRA"', f'"{placeholder}"')):
        assert ": experiments[0].extra_args[1]: " in line and message in line, line


@pytest.mark.parametrize(
    ("where", "text", "field"),
    [
        ("experiment", FILE.replace('"EXTRA"', '"{nope}"'), "experiments[0].extra_args[1]"),
        ("baseline", FILE.replace('"--tag=a"', '"--tag={nope}"'), "baseline.extra_args[0]"),
        ("defaults", FILE.replace('"--seed={seed}"', '"--seed={nope}"'), "baseline.extra_args[0]"),
        ("defaults args", FILE.replace('"{total_steps}"', '"{nope}"'), "baseline.args[1]"),
        ("own args", FILE.replace('nproc_per_node = 2\n', 'nproc_per_node = 2\nargs = ["{nope}"]\n'),
         "experiments[0].args[0]"),
    ],
)  # fmt: skip
def test_a_bad_placeholder_is_named_by_the_field_the_user_wrote(
    tmp_path: Path, where: str, text: str, field: str
) -> None:
    """The file's own fields: `extra_args[1]` of the entry, never the position in the merged `args` (which the
    file does not have). The first run that fails is reported: the baseline for what [defaults] holds."""
    expected = field.replace("baseline.extra_args[0]", "defaults.extra_args[0]") if where == "defaults" else field
    expected = expected.replace("baseline.args[1]", "defaults.args[1]") if where == "defaults args" else expected
    for line in refused_everywhere(tmp_path, text):
        assert f": {expected}: unknown placeholder {{nope}}" in line, line


def test_a_script_that_does_not_exist_starts_nothing(tmp_path: Path) -> None:
    text = FILE.replace('module = "ddpcli.examples.regression"', 'script = "missing/train.py"')
    for line in refused_everywhere(tmp_path, text):
        assert ": defaults.script: " in line and "no such file" in line and "missing/train.py" in line, line
    (tmp_path / "missing").mkdir()  # a folder is not a script either
    text = text.replace('name = "b"\n', 'name = "b"\nscript = "missing"\n')
    (tmp_path / "missing" / "train.py").write_text("", encoding="utf-8")
    result = runner.invoke(app, ["plan", str(write_toml(tmp_path, text))])
    assert result.exit_code == 2 and ": experiments[0].script: " in result.stderr and "not a file" in result.stderr


# ---------------------------------------------------------------------------------------------------------------
# torchrun's own parser: every script argument reaches the script (item 5); workdir = "run" finds modules (item 6)

# Each abbreviates one of torchrun's options or more (argparse's allow_abbrev): "ambiguous option" before the fix.
FLAGS = ["--run", "r", "--n", "1", "--num", "--log", "l", "--s", "--max", "2", "--node", "--nproc", "3",
         "--nnodes", "4", "-m", "x", "--", "--standalone"]  # fmt: skip

ENTRY_FILE = """\
[defaults]
max_steps = 2
args = ARGS

[baseline]
name = "a"
per_device_batch_size = 4
lr = 0.1
ENTRY
"""


@pytest.mark.parametrize(
    "entry",
    ['script = "train.py"', 'script = "train.py"\nobserve = false', 'module = "mypkg.train"',
     'module = "mypkg.train"\nobserve = false\nworkdir = "run"'],
)  # fmt: skip
def test_torchruns_own_parser_hands_every_argument_to_the_script(tmp_path: Path, entry: str) -> None:
    """Read with torch.distributed.run's real parser: its options end before the script, whatever the script's
    flags are called."""
    from torch.distributed.run import parse_args

    from ddpcli.experiment.planning import load_plan
    from ddpcli.launch.argv import build_launch

    (tmp_path / "train.py").write_text("", encoding="utf-8")
    text = ENTRY_FILE.replace("ARGS", str(FLAGS).replace("'", '"')).replace("ENTRY", entry)
    plan = load_plan(write_toml(tmp_path, text))
    spec = build_launch(plan.baseline, tmp_path / "runs" / "a" / "ID", plan.file)
    parsed = parse_args(spec.argv[3:])
    target = [str(tmp_path / "train.py")] if "script" in entry else ["-m", "mypkg.train"]
    if "observe = false" in entry:
        assert (parsed.module, parsed.training_script) == ("module" in entry, target[-1])
        assert parsed.training_script_args == FLAGS
    else:
        assert (parsed.module, parsed.training_script) == (True, "ddpcli.worker.observer")
        assert parsed.training_script_args == [*target, *FLAGS]
    assert parsed.nproc_per_node == "1" and parsed.standalone and parsed.tee == "3"


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_the_all_reduce_probes_arguments_reach_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """nccl's probe under torchrun: torchrun's own parser hands every argument to the probe. gloo's ranks are forked
    by the probe itself: its own parser reads them."""
    from torch.distributed.run import parse_args

    from ddpcli.launch import probe

    monkeypatch.setenv("DDPCLI_CACHE_DIR", str(tmp_path))
    seen: list[list[str]] = []

    def run(command: list[str], **_: object) -> None:
        seen.append(command)
        raise OSError("not started")

    with pytest.raises(Exception, match="not started"):
        probe.measured_allreduce(backend, 2, 1024, 0.0, run=run)
    if backend == "nccl":
        parsed = parse_args(seen[0][3:])
        assert (parsed.module, parsed.training_script, parsed.nproc_per_node) == (
            True, "ddpcli.worker.allreduce_probe", "2"
        )  # fmt: skip
        arguments = parsed.training_script_args
    else:
        assert seen[0][1:5] == ["-m", "ddpcli.worker.allreduce_probe", "--world", "2"]
        arguments = seen[0][5:]
    assert arguments[:4] == ["--bytes", "1024", "--backend", backend]


def test_the_forked_all_reduce_probe_measures_and_leaves_only_its_result(tmp_path: Path) -> None:
    """gloo's probe as `ddpcli launch` and `plan --predict-from` run it: 2 ranks forked from one interpreter, a
    positive time from each kind of round, the rendezvous file gone, exit 0."""
    out = tmp_path / "probe.json"
    command = [sys.executable, "-m", "ddpcli.worker.allreduce_probe", "--world", "2", "--bytes", "4096",
               "--backend", "gloo", "--work", "0.002", "--out", str(out)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    found = json.loads(out.read_text())
    assert found["seconds"] > 0 and found["idle_seconds"] > 0 and found["work_s"] == 0.002
    assert len(found["idle_rounds"]) == len(found["busy_rounds"]) == 15
    assert sorted(path.name for path in tmp_path.iterdir()) == ["probe.json"]
    command[command.index("gloo")] = "no-such-backend"  # every rank fails: exit 1 with why, no rank left waiting
    out.unlink()
    failed = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert failed.returncode == 1 and "no-such-backend" in failed.stderr and not out.exists()


def test_workdir_run_finds_a_module_where_workdir_launch_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """python -m looks in the working directory first: under workdir = "launch" that is where ddpcli runs, so a
    run started in its run directory gets that folder on PYTHONPATH first (then the file's folder), and relative
    PYTHONPATH entries are made absolute from there."""
    from ddpcli.experiment.planning import load_plan
    from ddpcli.launch.argv import build_launch

    experiment, here = tmp_path / "exp", tmp_path / "here"
    experiment.mkdir()
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["src", "/abs/lib"]))
    text = ENTRY_FILE.replace("ARGS", "[]").replace("ENTRY", 'module = "mypkg.train"\nworkdir = "run"')
    plan = load_plan(write_toml(experiment, text))
    spec = build_launch(plan.baseline, tmp_path / "runs" / "a" / "ID", plan.file)
    assert spec.env_added["PYTHONPATH"].split(os.pathsep) == [
        str(here), str(experiment.resolve()), str(here / "src"), "/abs/lib"
    ]  # fmt: skip


ARGV_SCRIPT = """\
import json, os, sys
with open(os.path.join(os.environ["DDPCLI_RUN_DIR"], "argv.json"), "w") as out:
    json.dump(sys.argv[1:], out)
"""


@pytest.mark.e2e
def test_real_torchrun_hands_the_flags_to_the_script_and_finds_the_module_under_workdir_run(tmp_path: Path) -> None:
    """One launch, two runs (one process each): an observed script, and a bare module found from where ddpcli
    runs while it runs in its run directory."""
    import subprocess
    import sys

    experiment, here = tmp_path / "exp", tmp_path / "here"
    (here / "mypkg").mkdir(parents=True)
    experiment.mkdir()
    (here / "mypkg" / "__init__.py").write_text("", encoding="utf-8")
    (here / "mypkg" / "train.py").write_text(ARGV_SCRIPT, encoding="utf-8")
    (experiment / "train.py").write_text(ARGV_SCRIPT, encoding="utf-8")
    text = ENTRY_FILE.replace("ARGS", str(FLAGS).replace("'", '"')).replace("ENTRY", 'script = "train.py"')
    text += '\n[[experiments]]\nname = "m"\nmodule = "mypkg.train"\nobserve = false\nworkdir = "run"\n'
    path = write_toml(experiment, text)
    result = subprocess.run([sys.executable, "-m", "ddpcli", "launch", str(path)], cwd=here, capture_output=True,
                            text=True, timeout=300, check=False)  # fmt: skip
    for name in ("a", "m"):
        (run_dir,) = (experiment / "runs" / name).iterdir()
        assert json.loads((run_dir / "argv.json").read_text()) == FLAGS, (name, result.stderr)
    assert result.returncode == 0, result.stderr


# ---------------------------------------------------------------------------------------------------------------
# The probe: its cache holds only finite positive numbers (item 2); nothing outlives it (items 3, 4)


@pytest.mark.parametrize("bad", [float("nan"), -0.0064, 0.0, float("inf"), "1", True])
def test_a_cache_value_that_is_not_a_finite_positive_number_is_probed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: object
) -> None:
    import socket

    from ddpcli.launch import probe

    monkeypatch.setenv("DDPCLI_CACHE_DIR", str(tmp_path))
    key = f"v2/gloo/2/1024/{socket.gethostname()}/0ms"
    entry = {"seconds": bad, "idle_seconds": 0.001, "work_s": 0.0}
    (tmp_path / "allreduce.json").write_text(json.dumps({key: entry}), encoding="utf-8")  # json writes NaN, Infinity
    calls = []

    def run(command: list[str], **_: object) -> object:
        calls.append(command)
        out = Path(command[command.index("--out") + 1])
        out.write_text(json.dumps({"seconds": 0.002, "idle_seconds": 0.001, "work_s": 0.0}), encoding="utf-8")
        return None

    assert probe.measured_allreduce("gloo", 2, 1024, 0.0, run=run).seconds == 0.002
    assert len(calls) == 1
    assert json.loads((tmp_path / "allreduce.json").read_text())[key]["seconds"] == 0.002


# A stand-in for torchrun: it starts two children in sessions of their own (as torchrun starts its workers, so a
# signal to its process group misses them), writes their pids, and waits.
LAUNCHER = """\
import subprocess, sys, time
children = [subprocess.Popen(["sleep", "600"], start_new_session=True) for _ in range(2)]
with open(sys.argv[1], "w") as out:
    out.write(" ".join(str(child.pid) for child in children))
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"  # a zombie has ended; only its parent's wait is missing


def wait_for(path: Path, deadline_s: float = 60) -> list[int]:
    import time

    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if path.exists() and path.read_text().strip():
            return [int(pid) for pid in path.read_text().split()]
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_a_stop_signal_during_a_probe_leaves_nothing_running(tmp_path: Path, signum: str) -> None:
    import signal
    import sys
    import threading

    from ddpcli.launch.probe_run import ProbeStopped, run_probe, stopping_on_signals

    pids_file = tmp_path / "pids"
    number = getattr(signal, signum)
    threading.Thread(target=lambda: (wait_for(pids_file), os.kill(os.getpid(), number)), daemon=True).start()
    with pytest.raises(ProbeStopped) as stopped, stopping_on_signals():
        run_probe([sys.executable, "-c", LAUNCHER, str(pids_file)], dict(os.environ), timeout=120)
    assert stopped.value.exit_code == 128 + number and signum in str(stopped.value)
    children = wait_for(pids_file)
    assert len(children) == 2 and not any(alive(pid) for pid in children)
    assert signal.getsignal(number) is not None and signal.getsignal(number) != signal.SIG_IGN


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_a_probe_past_its_timeout_is_one_line_and_leaves_nothing_running(tmp_path: Path) -> None:
    import sys

    from ddpcli.launch.probe_run import ProbeTimedOut, run_probe

    pids_file = tmp_path / "pids"
    with pytest.raises(ProbeTimedOut, match=r"the test probe did not finish in 3 s; it was stopped"):
        run_probe([sys.executable, "-c", LAUNCHER, str(pids_file)], dict(os.environ), timeout=3,
                  what="the test probe")  # fmt: skip
    if pids_file.exists():  # under heavy load the stand-in may not have started its children in 3 s
        assert not any(alive(pid) for pid in wait_for(pids_file))


def processes_with(marker: bytes) -> list[int]:
    from ddpcli.launch.supervisor import worker_pids

    return [pid for pid in worker_pids(marker) if alive(pid)]


def command_line(pid: int) -> bytes:
    """The process's command line, or nothing where it exited since it was listed (a loaded host's race)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return b""


@pytest.mark.e2e
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_plan_stopped_during_the_real_all_reduce_probe_leaves_nothing(tmp_path: Path, signum: str) -> None:
    """`plan --predict-from` with an empty cache runs the CPU probe, then the all-reduce probe (2 ranks, one forked
    from the other); the signal comes once both ranks run. Every process carries the test's cache folder in its
    environment: none may remain, nor a probe folder in the test's TMPDIR."""
    import signal
    import subprocess
    import sys
    import time

    from tests.builders import write_baseline

    write_baseline(tmp_path / "runs" / "base" / "r1")
    (tmp_path / "train.py").write_text("", encoding="utf-8")
    (tmp_path / "tmp").mkdir()
    path = write_toml(tmp_path, '[defaults]\nscript = "train.py"\nper_device_batch_size = 64\nlr = 0.1\n'
                      '[baseline]\nname = "base"\n[[experiments]]\nname = "2x64"\nnproc_per_node = 2\n')  # fmt: skip
    cache = tmp_path / "cache"
    env = {**os.environ, "DDPCLI_CACHE_DIR": str(cache), "TMPDIR": str(tmp_path / "tmp")}
    plan = subprocess.Popen([sys.executable, "-m", "ddpcli", "plan", str(path), "--predict-from",
                             str(tmp_path / "runs" / "base" / "r1")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    marker = f"DDPCLI_CACHE_DIR={cache}".encode()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and plan.poll() is None:
        workers = [pid for pid in processes_with(marker) if b"allreduce_probe" in command_line(pid)]
        if len(workers) == 2:  # rank 0 and the rank it forked
            break
        time.sleep(0.05)
    assert plan.poll() is None and len(workers) == 2, plan.communicate()
    plan.send_signal(getattr(signal, signum))
    _, stderr = plan.communicate(timeout=60)
    assert plan.returncode == 128 + getattr(signal, signum), stderr
    assert stderr.strip().splitlines() == [
        f"error: stopped by {signum}; the probe and every process it started are gone"
    ]
    assert processes_with(marker) == [] and list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="Linux")
def test_the_cpu_probes_ranks_die_with_their_parent_yet_measure() -> None:
    """Its ranks and their threads' processes arm a parent-death signal naming the process that forked them (armed
    with their own pid, each killed itself at once and the probe hung for its timeout)."""
    from ddpcli.launch import cpu_probe

    found = cpu_probe.measure(2, 2, work_s=0.002, rounds=3)
    assert found is not None and found.share > 0 and found.wait >= 0


def test_the_all_reduce_probes_time_limit_grows_with_the_bytes_it_all_reduces() -> None:
    """36 all-reduces of a ~1B-parameter model (4 GiB of fp32 gradients) at the 0.7 s a GiB measured on a 2-core
    host take 100 s: the flat 120 s limit left no room for torchrun's start on a loaded host."""
    from ddpcli.launch.probe import PROBE_TIMEOUT_S, probe_timeout_s

    assert probe_timeout_s(0) == PROBE_TIMEOUT_S == 120
    assert probe_timeout_s(4 * 2**30) == pytest.approx(120 + 36 * 2.8 * 4)
    assert probe_timeout_s(4 * 2**30) > 4 * (36 * 0.7 * 4)
