"""Why is it slow: one plain DDP script (tests/observe_scripts/slow_knobs.py) with one cause switched on per run,
launched through `ddpcli launch`; each cause gets its finding, the clean runs get none, every run has its time
breakdown. Generous thresholds in the code (ddpcli.rundir.slowness); the knobs are far past them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ddpcli.diagnosis.slowness import SLOWNESS_CODES
from tests.helpers import codes, compare_json, launch
from tests.sweeps import KNOB_ARGS, KNOB_PARAMS, knob_defaults

pytestmark = pytest.mark.e2e


def _run(name: str, procs: int, *knobs: str, batch: int = 2048, accumulation: int = 1, steps: int = 10) -> str:
    return f"""
[[experiments]]
name = "{name}"
nproc_per_node = {procs}
per_device_batch_size = {batch}
grad_accum_steps = {accumulation}
max_steps = {steps}
args = {json.dumps(KNOB_ARGS + list(knobs))}
"""


# The communication-bound run: batch 4 through a dense embedding of 65536 x 64 rows (16 MiB of gradient each step,
# all but one row zeros). Its exposed all-reduce is about half of a step here, quiet or with 3 busy loops beside it,
# where the MLP of hidden 2048 it replaced measured 36-43% against the 30% threshold and missed it once in a CI run
# under load. 30 steps: one stall of a rank is spread over 29 timed steps, not 9.
EMBEDDING_ROWS, EMBEDDING_STEPS = 65536, 30
# The input-bound run: 2048 samples of 0.1 ms each, 0.21 s of loading in a 0.30 s step here (70%; 60% with 3 busy
# loops beside it). The 0.03 ms it replaced measured 42% (38% beside 3 busy loops) and fell under the 25% threshold
# once in a CI run, where the other test jobs slowed the step's compute and not the loader's sleeps.
SLOW_GETITEM_S = "0.0001"
# The straggler run: rank 1 sleeps 0.1 s a forward. At batch 2048 the step's own work was 0.086 s here, quiet: a CI
# run under load made it about 3x slower, the sleeper's work fell under STRAGGLER_RATIO x the other's, and the
# finding (rightly) went. At 512 the work is about a quarter: the sleep stays the larger part under that load.
STRAGGLER_BATCH = 512


KNOBS = knob_defaults(max_steps=10, per_device_batch_size=2048) + """
[baseline]
name = "clean-1"
""" + "".join([
    _run("clean-2", 2),
    _run("slow-data-1", 1, "--slow-getitem", SLOW_GETITEM_S),
    _run("straggler-2", 2, "--sleepy-rank", "1", "--sleep", "0.1", batch=STRAGGLER_BATCH),
    _run("crowded-2", 2, "--crowded-rank", "1", batch=1024),
    _run("accumulation-sync-2", 2, "--sync-every-micro-batch", accumulation=2),
    _run("accumulation-no-sync-unused-2", 2, "--find-unused", accumulation=2),
    _run("dense-embedding-2", 2, "--embedding-rows", str(EMBEDDING_ROWS), batch=4, steps=EMBEDDING_STEPS),
    _run("four-procs", 4),
])  # fmt: skip

EXPECTED = {
    "clean-1": set(),
    "clean-2": set(),
    "slow-data-1": {"input_bound"},
    "straggler-2": {"straggler_rank"},
    "crowded-2": {"straggler_rank"},
    "accumulation-sync-2": {"accumulation_syncs_every_micro_batch"},
    "accumulation-no-sync-unused-2": {"find_unused_parameters_unneeded"},
    "dense-embedding-2": {"communication_bound"},
}


@pytest.fixture(scope="module")
def knobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return launch(tmp_path_factory, KNOBS).runs()


def comm_shares(record: dict[str, Any]) -> list[str]:
    """Each rank's exposed all-reduce over the median step, as the finding reads them: what a failure shows."""
    breakdown = record["observed"]["time_breakdown"]
    step = breakdown["median"]["step_s"]
    return [f"rank {rank['rank']}: {rank['comm_s']:.4f} s of {step:.4f} s" for rank in breakdown["ranks"]]


def slow_codes(record: dict[str, Any]) -> set[str]:
    return {code for code in codes(record) if code in SLOWNESS_CODES}


CPU_CAUSE = "its training thread was ready to run but waited"
LOAD_CAUSE = "other work on the host took turns with these ranks"  # the load average above the run's own threads


def straggler(record: dict[str, Any]) -> dict[str, Any]:
    (finding,) = [f for f in record["findings"] if f["code"] == "straggler_rank"]
    return finding


def slow_codes_of_the_run(record: dict[str, Any]) -> set[str]:
    """The slowness codes less a straggler whose cause named is the host's CPUs (the rank waited for one, as
    recorded, or the host's load was above the run's own threads): other test jobs share this machine's cores and
    can make any rank of a clean run lag."""
    found = slow_codes(record)
    if "straggler_rank" in found and any(cause in straggler(record)["message"] for cause in (CPU_CAUSE, LOAD_CAUSE)):
        found.remove("straggler_rank")
    return found


@pytest.mark.parametrize("name", EXPECTED)
def test_each_cause_gets_its_finding_and_the_clean_runs_none(knobs: dict[str, dict[str, Any]], name: str) -> None:
    record = knobs[name]["record"]
    assert record["status"] == "completed", record["failed_ranks"]
    if name == "dense-embedding-2":  # the all-reduce dominates; other causes may show beside it on a loaded machine
        assert "communication_bound" in slow_codes(record), comm_shares(record)
    elif name == "accumulation-sync-2":  # its all-reduce per micro-batch can also be 40% of a step under load
        found = slow_codes_of_the_run(record) - {"communication_bound"}
        assert found == EXPECTED[name], (record["findings"], record["observed"]["time_breakdown"])
    elif "straggler_rank" in EXPECTED[name]:
        assert slow_codes(record) == EXPECTED[name], (record["findings"], record["observed"]["time_breakdown"])
    else:
        found = slow_codes_of_the_run(record)
        assert found == EXPECTED[name], (record["findings"], record["observed"]["time_breakdown"]["median"])


def test_the_straggler_is_named(knobs: dict[str, dict[str, Any]]) -> None:
    record = knobs["straggler-2"]["record"]
    finding = straggler(record)
    assert finding["observed"] == 1 and finding["message"].startswith("rank 1 is a straggler")
    assert CPU_CAUSE not in finding["message"]  # it sleeps: not waiting for a CPU, so the host is not blamed
    ranks = {rank["rank"]: rank for rank in record["observed"]["time_breakdown"]["ranks"]}
    assert ranks[1]["compute_s"] > ranks[0]["compute_s"] + 0.08  # it sleeps 0.1 s in every forward
    assert ranks[0]["comm_s"] > ranks[1]["comm_s"] + 0.06  # rank 0 waits for it in the all-reduce


def test_four_processes_on_fewer_cores_are_oversubscribed(knobs: dict[str, dict[str, Any]]) -> None:
    record = knobs["four-procs"]["record"]
    rows = [json.loads(line) for line in (knobs["four-procs"]["dir"] / "observed" / "rank-0.jsonl").open()]
    cores = [row for row in rows if row["kind"] == "timing"][-1]["cores"]
    assert ("cpu_oversubscribed" in slow_codes(record)) is (cores < 4)


def test_every_run_has_a_time_breakdown_that_adds_up(knobs: dict[str, dict[str, Any]]) -> None:
    for name, run in knobs.items():
        observed = run["record"]["observed"]
        breakdown = observed["time_breakdown"]
        assert len(breakdown["ranks"]) == observed["world_size"], name
        assert breakdown["clock"] == "host" and breakdown["memory_source"] == "peak_rss"
        steps = EMBEDDING_STEPS if name == "dense-embedding-2" else 10
        for rank in breakdown["ranks"]:
            assert rank["steps"] == steps - 1  # the first step is left out
            parts = sum(rank[key] for key in ("data_s", "compute_s", "comm_s", "optimizer_s", "other_s"))
            assert parts == pytest.approx(rank["step_s"], rel=0.02) or parts >= rank["step_s"]
            assert rank["peak_memory_bytes"] > 50 * 2**20  # a Python process with torch
        assert (breakdown["comm_from"] == "ddp_reducer") is (observed["world_size"] > 1), name
        if observed["world_size"] > 1:  # the reducer's samples of the window's iterations: 2-10 at most
            assert 1 <= breakdown["comm_samples"] <= 9, name
    slow, clean = (knobs[name]["record"]["observed"]["time_breakdown"]["median"] for name in ("slow-data-1", "clean-1"))
    assert slow["data_s"] > 2048 * float(SLOW_GETITEM_S) * 0.9 > clean["data_s"]


def test_accumulation_counts_all_reduces_per_step(knobs: dict[str, dict[str, Any]]) -> None:
    per_step = {
        name: knobs[name]["record"]["observed"]["time_breakdown"]["ranks"][0]["all_reduces_per_step"]
        for name in ("clean-2", "accumulation-sync-2", "accumulation-no-sync-unused-2", "clean-1")
    }
    assert per_step == {"clean-2": 1, "accumulation-sync-2": 2, "accumulation-no-sync-unused-2": 1, "clean-1": None}


def test_model_state_is_the_exact_byte_count(knobs: dict[str, dict[str, Any]]) -> None:
    """nn.Linear(64, H), (H, H), (H, 1) in float32 (after an nn.Embedding(R, 64) where the run has one), SGD with
    momentum: one buffer per parameter."""
    for name, run in knobs.items():
        count = KNOB_PARAMS + (EMBEDDING_ROWS * 64 if name == "dense-embedding-2" else 0)
        state = run["record"]["observed"]["model_state"]
        assert state["param_count"] == count
        assert state["param_bytes"] == state["grad_bytes"] == state["optimizer_state_bytes"] == 4 * count
        assert state["optimizer"] == "SGD"


def test_compare_shows_where_the_time_went(knobs: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    root = knobs["clean-1"]["dir"].parent.parent
    rows = {row["name"]: row for row in compare_json(root)}
    assert rows["straggler-2"]["observed"]["time_breakdown"]["median"]["step_s"] > 0.05


def test_a_rank_that_waited_for_its_cpu_is_a_straggler_named_for_its_host(knobs: dict[str, dict[str, Any]]) -> None:
    """Rank 1 shares its one CPU with a busy loop of a higher priority: it lags, and the finding says the rank's
    training thread waited for a CPU, with the seconds each rank recorded."""
    record = knobs["crowded-2"]["record"]
    finding = straggler(record)
    assert finding["observed"] == 1 and CPU_CAUSE in finding["message"], finding["message"]
    ranks = {rank["rank"]: rank for rank in record["observed"]["time_breakdown"]["ranks"]}
    assert ranks[1]["cpu_wait_s"] > ranks[0]["cpu_wait_s"] + 0.5 * (ranks[1]["compute_s"] - ranks[0]["compute_s"])
    assert f"waited {ranks[1]['cpu_wait_s']:.3g} s a step for a CPU" in finding["message"]
