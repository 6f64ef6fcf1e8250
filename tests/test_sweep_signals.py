"""A signal at any moment of a sweep ends it with 128 + the signal's number and says which runs were not started:
during a run (tests/test_launch_e2e.py), during the merge after torchrun has ended, and between runs."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from ddpcli.jsonvalues import read_json
from tests.conftest import REPO, write_toml

ROWS = REPO / "tests" / "launch_scripts" / "many_rows.py"
FILE = f"""
[defaults]
script = "{ROWS}"
args = ["300000"]
max_steps = 6
observe = false
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "long-merge"
per_device_batch_size = 4
lr = 0.1

[[experiments]]
name = "next"
per_device_batch_size = 4
args = ["3"]

[[experiments]]
name = "last"
per_device_batch_size = 4
args = ["3"]
"""


def children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def grandchildren(pid: int) -> list[int]:
    """The launcher's grandchildren: torchrun forked by the prestart server (ddpcli.launch.prestart), or a started
    torchrun's workers. The server itself, a child, lives as long as the launcher."""
    return [grandchild for child in children(pid) for grandchild in children(child)]


@pytest.mark.e2e
@pytest.mark.parametrize("signum", [signal.SIGINT])
def test_a_signal_during_the_merge_ends_the_sweep(tmp_path: Path, signum: int) -> None:
    """The first run's torchrun has ended and the launcher is merging its 300k rows when the signal comes: the
    launcher used to finish that run, skip the rest silently and exit 0. Now the merge stops at once, the record
    says so, and the sweep ends."""
    path = write_toml(tmp_path, FILE)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "ddpcli", "launch", str(path)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    started = False
    while time.monotonic() < deadline:  # torchrun started, then ended: the merge is under way
        started = started or bool(grandchildren(launcher.pid))
        if started and not grandchildren(launcher.pid):
            break
        assert launcher.poll() is None, launcher.communicate()
        time.sleep(0.05)
    else:
        raise AssertionError("torchrun never ended")
    (run_dir,) = (tmp_path / "runs" / "long-merge").iterdir()
    time.sleep(0.2)  # past the few milliseconds between torchrun's end and the merge; 300k rows take longer (1 s: a
    # loaded machine (3 test workers on 2 cores) had finished the merge before the signal)
    assert read_json(run_dir / "run.json")["status"] == "running"  # not finished yet: still merging
    launcher.send_signal(signum)
    _, err = launcher.communicate(timeout=120)
    assert launcher.returncode == 128 + signum, err
    assert f"stopped by {signal.Signals(signum).name}; not started: next, last" in " ".join(err.split())
    assert not (tmp_path / "runs" / "next").exists()
    record = read_json(run_dir / "run.json")  # training completed; the merge was stopped where it was
    assert (record["status"], record["exit_code"], record["observed"]) == ("completed", 0, None)
    (finding,) = record["findings"]
    assert finding["code"] == "observer_error" and "MergeStopped: stopped by SIGINT" in finding["message"]
    assert not list(run_dir.glob(".*.tmp")) and not (run_dir / "metrics.jsonl").exists()


def test_a_signal_between_runs_ends_the_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SIGTERM arrives as a run ends (here: while it is reported): the next runs are not started, and launch exits
    with 143 naming them."""
    import typer

    from ddpcli.cli.commands.launch import _finish
    from ddpcli.experiment.planning import load_plan
    from ddpcli.launch.supervisor import StopRequest
    from ddpcli.launch.sweep import SweepOptions, prepare, run_sweep
    from tests.builders import WRITER, Reporter

    plan = load_plan(write_toml(tmp_path, FILE))
    options = SweepOptions(runs_dir=tmp_path / "runs")
    specs = [replace(spec, argv=[sys.executable, "-c", WRITER, "3"]) for spec in prepare(plan, plan.runs, options)]
    stop = StopRequest()

    class StoppedAtTheEnd(Reporter):
        def run_ended(self, spec, record) -> None:  # type: ignore[no-untyped-def]
            stop.request(signum=signal.SIGTERM)

    results = run_sweep(plan, specs, options, StoppedAtTheEnd(), stop)
    assert [result.status for result in results] == ["completed"]
    with pytest.raises(typer.Exit) as exit_:
        _finish(results, stop, [spec.run.name for spec in specs[len(results) :]])
    assert exit_.value.exit_code == 128 + signal.SIGTERM
    assert "stopped by SIGTERM; not started: next, last" in " ".join(capsys.readouterr().err.split())


def test_a_stop_before_the_merge_ends_it_before_it_begins() -> None:
    """A signal between torchrun's end and the merge (the record being finished; on a loaded machine, longer than a
    second) is the merge's stop too: the merge used to run to its end, as if no signal had come."""
    from ddpcli.launch.supervisor import MergeStopped, StopRequest

    stop = StopRequest()
    stop.request(signum=signal.SIGINT)  # not merging yet: only noted
    with pytest.raises(MergeStopped, match="stopped by SIGINT"):
        stop.begin_merge()
    assert not stop.merging and stop.reason == "interrupted"
    quiet = StopRequest()
    quiet.begin_merge()  # no stop: the merge begins, and a stop now ends it where it is
    assert quiet.merging
    with pytest.raises(MergeStopped):
        quiet.request(signum=signal.SIGTERM)
