"""The exposed communication of the timing window from the DDP reducer's sampled iterations (ddpcli.rundir.timing,
ddpcli.worker.observer.reducer_samples), and what the all-reduce probe's cost model takes (ddpcli.launch.probe,
ddpcli.prediction.comm.probe_work_s), on hand-written values."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from ddpcli.errors import UserError
from ddpcli.launch.probe import AllReduceProbe, measured_allreduce
from ddpcli.prediction.comm import probe_work_s
from ddpcli.rundir.timing import exposed_comm_in_window, rank_time, time_breakdown
from ddpcli.worker.observer.reducer_samples import MAX_SAMPLES, ReducerSamples
from tests.builders import MS, ddp, row


def sample(iteration: int, comm_ms: float, overlap_ms: float) -> list[int]:
    return [iteration, 5 * MS, 9 * MS, int(comm_ms * MS), int(overlap_ms * MS)]


def test_early_samples_alone_are_averaged() -> None:
    """Iterations 2-4 sampled, exposed 3, 5 and 7 ms: 5 ms a synchronising backward, whatever the window's length."""
    samples = [sample(2, 4, 1), sample(3, 6, 1), sample(4, 9, 2)]
    assert exposed_comm_in_window(samples, 3) == pytest.approx(0.005)
    assert exposed_comm_in_window(samples, 40) == pytest.approx(0.005)


def test_late_samples_stand_for_the_iterations_after_the_first_ten() -> None:
    """9 early samples of 10 ms exposed, then iterations 100 and 200 of 2 and 4 ms, over 300 synchronising
    backwards: (9 x 10 + 291 x 3) / 300 = 3.21 ms."""
    samples = [sample(k, 10, 0) for k in range(2, 11)] + [sample(100, 2, 0), sample(200, 5, 1)]
    assert exposed_comm_in_window(samples, 300) == pytest.approx((9 * 0.010 + 291 * 0.003) / 300)


def test_overlap_beyond_comm_is_no_negative_exposure_and_bad_samples_are_ignored() -> None:
    assert exposed_comm_in_window([sample(2, 1, 3), sample(3, 4, 0)], 10) == pytest.approx(0.002)
    assert exposed_comm_in_window([], 10) is None
    assert exposed_comm_in_window(None, 10) is None
    assert exposed_comm_in_window([[2, 1, 2]], 10) is None
    assert exposed_comm_in_window([sample(2, 4, 1)], 0) is None


def test_rank_time_takes_the_windows_samples_over_the_reducers_averages() -> None:
    """avg_* says 20 ms exposed (iteration 1's 155 ms in it); the window's samples say 3 ms: 10 steps of 60 ms of
    forward + backward with one all-reduce each hold 3 ms of communication, not 20."""
    samples = [sample(k, 4, 1) for k in range(2, 11)]
    timed = rank_time(0, row(fb=0.6, synced_backwards=10, ddp=ddp(20, 0), ddp_samples=samples))
    assert timed is not None and timed.comm_s == pytest.approx(0.003) and timed.compute_s == pytest.approx(0.057)
    old = rank_time(0, row(fb=0.6, synced_backwards=10, ddp=ddp(20, 0)))  # a run from before: the averages
    assert old is not None and old.comm_s == pytest.approx(0.020)
    rows = {0: row(fb=0.6, synced_backwards=10, ddp=ddp(20, 0), ddp_samples=samples)}
    breakdown = time_breakdown(rows)
    assert breakdown is not None and breakdown.comm_from == "ddp_reducer" and breakdown.comm_samples == 9
    assert time_breakdown({0: row(fb=0.6, synced_backwards=10, ddp=ddp(20, 0))}).comm_samples is None  # type: ignore[union-attr]


def logging_data(iteration: int, comm_ms: float = 4, overlap_ms: float = 1) -> dict[str, Any]:
    return {"iteration": iteration, "forward_compute_time": 5 * MS, "backward_compute_time": 9 * MS,
            "backward_comm_time": int(comm_ms * MS), "backward_compute_comm_overlap_time": int(overlap_ms * MS),
            "avg_backward_comm_time": 1}  # fmt: skip


def test_the_observer_keeps_each_sampled_iteration_of_the_window_once() -> None:
    """The first step's iteration (1) is before the window; a second read of the same sample adds nothing; a read
    without the per-iteration timers (an older torch) adds nothing."""
    kept = ReducerSamples()
    for iteration in (1, 2, 2, 3):
        kept.add(logging_data(iteration, comm_ms=iteration), first_window_iteration=2)
    kept.add({"iteration": 4, "avg_backward_comm_time": 3}, first_window_iteration=2)
    assert kept.samples == [[2, 5 * MS, 9 * MS, 2 * MS, MS], [3, 5 * MS, 9 * MS, 3 * MS, MS]]
    accumulating = ReducerSamples()  # 2 synchronising micro-batches in the first step: iterations 1 and 2 before
    for iteration in (2, 4, 6):
        accumulating.add(logging_data(iteration), first_window_iteration=3)
    assert [found[0] for found in accumulating.samples] == [4, 6]
    full = ReducerSamples()
    for iteration in range(2, MAX_SAMPLES + 10):
        full.add(logging_data(iteration), first_window_iteration=2)
    assert len(full.samples) == MAX_SAMPLES


def test_probe_work_is_the_compute_before_an_all_reduce_in_cpu_seconds_rounded() -> None:
    """35 ms of wall compute at 0.42 of a core: 14.7 ms of CPU, probed as 15 ms; bounded to 5..30 ms."""
    assert probe_work_s(0.035, 0.42) == pytest.approx(0.015)
    assert probe_work_s(0.035, None) == pytest.approx(0.03)  # a core of its own: 35 ms, capped at 30
    assert probe_work_s(0.001, 1.0) == pytest.approx(0.005)
    assert probe_work_s(0.0124, 1.0) == pytest.approx(0.010)


def test_the_probe_result_is_cached_under_version_2_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A version-1 entry (idle seconds) is not reused: the probe runs (here a fake torchrun writing its JSON), its
    result is cached under the v2 key with its work, and the second call reads the cache."""
    monkeypatch.setenv("DDPCLI_CACHE_DIR", str(tmp_path))
    host = socket.gethostname()
    (tmp_path / "allreduce.json").write_text(json.dumps({f"gloo/2/4096/{host}": 0.0026}))
    calls: list[list[str]] = []

    def fake_torchrun(command: list[str], **_: Any) -> object:
        calls.append(command)
        assert command[command.index("--work") + 1] == "0.02"
        out = Path(command[command.index("--out") + 1])
        out.write_text(json.dumps({"seconds": 0.0045, "idle_seconds": 0.0026, "busy_seconds": 0.0045,
                                   "work_s": 0.02, "timed_from": "last_arrival"}))  # fmt: skip
        return object()

    found = measured_allreduce("gloo", 2, 4096, 0.02, run=fake_torchrun)
    assert found == AllReduceProbe(seconds=0.0045, idle_seconds=0.0026, work_s=0.02)
    assert measured_allreduce("gloo", 2, 4096, 0.02, run=fake_torchrun) == found and len(calls) == 1
    cache = json.loads((tmp_path / "allreduce.json").read_text())
    assert cache[f"v2/gloo/2/4096/{host}/20ms"]["seconds"] == 0.0045
    assert found.describe() == "4.5 ms after 20 ms of CPU work a rank, from the last rank's arrival (2.6 ms idle)"
    assert measured_allreduce("gloo", 1, 4096, 0.02, run=fake_torchrun).seconds == 0 and len(calls) == 1


def test_a_probe_that_wrote_nothing_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPCLI_CACHE_DIR", str(tmp_path))

    class Failed:
        stderr = "RuntimeError: gloo connect timed out\n"

    with pytest.raises(UserError, match="gloo connect timed out"):
        measured_allreduce("gloo", 2, 4096, 0.01, run=lambda *_, **__: Failed())
