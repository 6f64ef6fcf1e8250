"""Ctrl-C during an export: it takes effect once the run being written is written, a second one at once.

The viewers' libraries write from threads; a KeyboardInterrupt raised inside one of their calls can leave the export
waiting for ever (tensorboardX's writer, interrupted at random times, hung in 8 of 40 tries: a clean-clone CI run
timed out on it). The first tests signal this process from inside a write (no library, no timing); the last
interrupts the real tensorboardX writer in a child, again and again, each Ctrl-C at a random time. Cost: about 10 s.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from unittest import mock

import pytest

from ddpcli.export.exporter import Exporter, Outcome, ctrl_c_after
from ddpcli.export.runs import ExportRun
from tests.conftest import REPO


def run(number: int) -> ExportRun:
    return ExportRun(Path("."), f"r{number}", f"run{number}", "experiments", "completed", {}, {}, {})


def ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def writer_interrupted(at: dict[str, int], started: list[str], finished: list[str]) -> object:
    """`Exporter._one` that presses Ctrl-C `at[run id]` times halfway through that run's write."""

    def one(self: Exporter, export_run: ExportRun) -> str:
        started.append(export_run.run_id)
        for _ in range(at.get(export_run.run_id, 0)):
            ctrl_c()
        finished.append(export_run.run_id)
        return "6 points, its end"

    return one


@pytest.fixture
def exporter(tmp_path: Path) -> Exporter:
    pytest.importorskip("tensorboardX")
    return Exporter("tensorboard", str(tmp_path / "tb"))


def test_ctrl_c_while_a_run_is_written_stops_once_it_is_written(exporter: Exporter) -> None:
    started: list[str] = []
    finished: list[str] = []
    outcome, lines = Outcome(), []
    one = writer_interrupted({"r2": 1}, started, finished)
    with mock.patch.object(Exporter, "_one", one), pytest.raises(KeyboardInterrupt):
        exporter.export([run(1), run(2), run(3)], outcome, on_written=lines.append)
    assert started == finished == ["r1", "r2"]  # the second was written whole, the third never begun
    assert lines == outcome.written == ["run1 r1: 6 points, its end", "run2 r2: 6 points, its end"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_ctrl_c_stops_at_once(exporter: Exporter) -> None:
    started: list[str] = []
    finished: list[str] = []
    outcome = Outcome()
    one = writer_interrupted({"r2": 2}, started, finished)
    with mock.patch.object(Exporter, "_one", one), pytest.raises(KeyboardInterrupt):
        exporter.export([run(1), run(2), run(3)], outcome)
    assert started == ["r1", "r2"] and finished == ["r1"]  # the second Ctrl-C came inside the write
    assert outcome.written == ["run1 r1: 6 points, its end"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_export_without_ctrl_c_leaves_the_handler_as_it_was(exporter: Exporter) -> None:
    started: list[str] = []
    finished: list[str] = []
    with mock.patch.object(Exporter, "_one", writer_interrupted({}, started, finished)):
        outcome = exporter.export([run(1), run(2)])
    assert finished == ["r1", "r2"] and len(outcome.written) == 2
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_callers_own_handler_and_other_threads_are_left_alone() -> None:
    """A handler of the caller's (launch's, which exports each run as it ends) stays the one called; a thread
    other than the main one cannot set a handler, and its block runs as it is."""
    heard: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: heard.append(signum))
    try:
        with ctrl_c_after() as came:
            ctrl_c()
        assert heard == [signal.SIGINT] and came == []
    finally:
        signal.signal(signal.SIGINT, previous)
    seen: list[object] = []

    def in_a_thread() -> None:
        with ctrl_c_after() as came:
            seen.append(signal.getsignal(signal.SIGINT))
        seen.append(came)

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert seen == [signal.default_int_handler, []]


_CHILD = """
import sys, tempfile
from pathlib import Path
from ddpcli.export.exporter import Exporter
from ddpcli.export.points import Point
from ddpcli.export.runs import ExportRun

points = [Point(step * 16, 1.0e9 + step, {"loss": 1.0 / (step + 1), "lr": 0.1}) for step in range(1500)]
runs = [ExportRun(Path("."), f"r{n}", "run", "experiments", "completed", {}, {"final_loss": 0.5}, {}, points, 1.0e9)
        for n in range(1000)]
for attempt in range(int(sys.argv[1])):
    target = tempfile.mkdtemp(dir=sys.argv[2])
    print(f"writing {attempt}", flush=True)
    try:
        Exporter("tensorboard", target).export(runs)
    except KeyboardInterrupt:
        print(f"interrupted {attempt}", flush=True)
"""


def test_the_tensorboard_writer_interrupted_at_random_times_never_hangs(tmp_path: Path) -> None:
    """20 exports in one child, each Ctrl-C'd at a random time in its first second: each says it was interrupted
    within 30 s (before the fix, one of five hung in tensorboardX's queue)."""
    pytest.importorskip("tensorboardX")
    attempts, chance = 20, random.Random(os.environ.get("PYTEST_XDIST_WORKER", "seed"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-c", textwrap.dedent(_CHILD), str(attempts), str(tmp_path)]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None
    try:
        for attempt in range(attempts):
            assert child.stdout.readline() == f"writing {attempt}\n"
            time.sleep(chance.uniform(0.05, 1.0))
            child.send_signal(signal.SIGINT)
            answered = threading.Timer(30, child.kill)
            answered.start()
            line = child.stdout.readline()
            answered.cancel()
            assert line == f"interrupted {attempt}\n", f"attempt {attempt} hung after its Ctrl-C"
        assert child.wait(timeout=30) == 0
    finally:
        child.kill()
