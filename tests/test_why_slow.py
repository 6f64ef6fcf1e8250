"""The time breakdown's arithmetic (ddpcli.rundir.timing) and the why-slow findings' thresholds
(ddpcli.rundir.slowness), on hand-written `timing` rows."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddpcli.diagnosis.slowness import slowness_findings
from ddpcli.rundir.cpu_list import format_cpu_list, parse_cpu_list
from ddpcli.rundir.record import Observed
from ddpcli.rundir.timing import model_state, rank_time, time_breakdown
from tests.builders import ddp, row


def test_exposed_communication_comes_out_of_forward_backward() -> None:
    """10 steps of 0.1 s: 6 ms of backward+forward per step hold 2 all-reduces of 3 ms comm, 1 ms hidden, each."""
    timed = rank_time(0, row(step=1.0, data=0.1, fb=0.6, opt=0.1, synced_backwards=20, ddp=ddp(3, 1)))
    assert timed is not None
    assert timed.step_s == pytest.approx(0.1)
    assert timed.comm_s == pytest.approx(0.004)  # 2 x (3 - 1) ms
    assert timed.compute_s == pytest.approx(0.056)
    assert timed.data_s == pytest.approx(0.01) and timed.optimizer_s == pytest.approx(0.01)
    assert timed.other_s == pytest.approx(0.02)
    assert timed.all_reduces_per_step == 2


def test_no_ddp_no_communication_and_no_steps_no_breakdown() -> None:
    timed = rank_time(0, row())
    assert timed is not None and timed.comm_s == 0 and timed.all_reduces_per_step is None
    assert time_breakdown({0: row(steps=0)}) is None
    assert time_breakdown({0: {}}) is None


@given(
    st.floats(0, 10), st.floats(0, 10), st.floats(0, 10), st.floats(0, 10), st.floats(0, 100), st.floats(0, 100),
    st.integers(0, 8),
)  # fmt: skip
def test_parts_are_never_negative(data: float, fb: float, opt: float, step: float, comm: float, overlap: float,
                                  syncs: int) -> None:  # fmt: skip
    timed = rank_time(0, row(steps=4, step=step, data=data, fb=fb, opt=opt, synced_backwards=syncs,
                             ddp=ddp(comm, overlap)))  # fmt: skip
    assert timed is not None
    assert min(timed.data_s, timed.compute_s, timed.comm_s, timed.optimizer_s, timed.other_s) >= 0  # type: ignore[type-var]
    assert timed.compute_s + timed.comm_s == pytest.approx(fb / 4)  # type: ignore[operator]


def test_the_median_is_over_ranks() -> None:
    breakdown = time_breakdown({0: row(step=1.0), 1: row(step=2.0), 2: row(step=6.0)})
    assert breakdown is not None and breakdown.median.step_s == pytest.approx(0.2)
    assert [rank.rank for rank in breakdown.ranks] == [0, 1, 2]


def codes_for(rows: dict[int, dict[str, Any]], device: str = "cpu") -> set[str]:
    observed = Observed(world_size=len(rows), device=device, time_breakdown=time_breakdown(rows))
    return {finding.code for finding in slowness_findings(observed, rows)}


def test_thresholds() -> None:
    assert codes_for({0: row(data=0.24)}) == set()
    assert codes_for({0: row(data=0.26, fb=0.5)}) == {"input_bound"}
    # 36% exposed comm on both ranks (threshold 30%): communication-bound; on one rank only: not.
    bound = {rank: row(fb=0.7, synced_backwards=10, ddp=ddp(36, 0)) for rank in (0, 1)}
    assert codes_for(bound) == {"communication_bound"}
    assert codes_for({0: bound[0], 1: row(fb=0.7, synced_backwards=10, ddp=ddp(10, 0))}) == set()
    below = {rank: row(fb=0.7, synced_backwards=10, ddp=ddp(29, 0)) for rank in (0, 1)}  # 29% of the step
    assert codes_for(below) == set()
    # rank 1 computes 0.07 s a step, rank 0 0.01 s and waits 0.06 s for it
    slow = {0: row(fb=0.7, synced_backwards=10, ddp=ddp(60, 0)), 1: row(fb=0.7, synced_backwards=10, ddp=ddp(1, 0))}
    assert codes_for(slow) == {"straggler_rank"}
    short = {rank: {**timed, "steps": 5, "micro_batches": 5, "synced_backwards": 5} for rank, timed in slow.items()}
    assert codes_for(short) == set()


def straggler_message(rows: dict[int, dict[str, Any]]) -> str:
    observed = Observed(world_size=len(rows), device="cpu", time_breakdown=time_breakdown(rows))
    [finding] = [found for found in slowness_findings(observed, rows) if found.code == "straggler_rank"]
    return finding.message


def test_a_straggler_on_a_loaded_host_says_what_the_load_was() -> None:
    """Seen on a published script while another job shared the 2 cores: a rank lagged because other work took its
    turns, which the run recorded (the load average at its end), so the finding names it; a quiet host adds nothing."""

    def slow(load: float) -> dict[int, dict[str, Any]]:
        return {0: row(fb=0.7, synced_backwards=10, ddp=ddp(60, 0), load_average=load, local_world_size=2),
                1: row(fb=0.7, synced_backwards=10, ddp=ddp(1, 0), load_average=load, local_world_size=2)}  # fmt: skip

    loaded = straggler_message(slow(4.41))
    assert loaded.endswith(
        "; the host's 1-minute load average at the run's end was 4.4 on 2 cores, above the run's own 2 processes x 1 "
        "threads: other work on the host took turns with these ranks"
    )
    assert straggler_message(slow(1.9)).endswith("another job on its device)")


def test_a_straggler_that_waited_for_a_cpu_is_named_for_its_host() -> None:
    """Seen in CI: a clean 2-process run on a host where another test job held the cores got a straggler finding
    that said to look for what differs on that rank. Its training thread had been runnable and waiting for a CPU;
    that wait, recorded per rank, is the cause to name. Rank 1 lags 0.06 s a step (rank 0 waits 0.06 s for it)."""

    def slow(wait_0: float, wait_1: float) -> dict[int, dict[str, Any]]:
        return {0: row(fb=0.7, synced_backwards=10, ddp=ddp(60, 0), cpu_wait_s=wait_0),
                1: row(fb=0.7, synced_backwards=10, ddp=ddp(1, 0), cpu_wait_s=wait_1)}  # fmt: skip

    timed = time_breakdown(slow(0.05, 0.45))
    assert timed is not None and [rank.cpu_wait_s for rank in timed.ranks] == pytest.approx([0.005, 0.045])
    named = straggler_message(slow(0.05, 0.45))  # 0.04 s a step more than rank 0: 2/3 of the 0.059 s gap
    assert named.endswith(
        "all-reduce: its training thread was ready to run but waited 0.045 s a step for a CPU (the other ranks "
        "0.005 s), so other processes on its host had the CPU: give each rank cores of its own (fewer processes or "
        "threads on that host, or stop the other work there)"
    )
    assert straggler_message(slow(0.05, 0.3)).endswith("another job on its device)")  # 0.025 s: under half the gap
    assert straggler_message({0: slow(0, 0)[0], 1: row(fb=0.7, synced_backwards=10, ddp=ddp(1, 0))}).endswith(
        "another job on its device)"
    )  # the straggler's wait not recorded: no cause claimed


def test_a_rank_that_lags_on_an_oversubscribed_host_is_the_oversubscription_not_a_straggler() -> None:
    """Issue 49: the bundled example, 4 processes on 2 cores, got `straggler_rank: rank 2 ... find what differs on
    that rank` beside cpu_oversubscribed. Where the ranks outnumber the cores every rank waits its turn: the cause
    seen is the oversubscription, named once; a host of its own (the other node) keeps its straggler."""

    def lagging(local: int, node_of_slow: int) -> dict[int, dict[str, Any]]:
        return {0: row(fb=0.7, synced_backwards=10, ddp=ddp(60, 0), local_world_size=local, cores=2, cpus="0-1",
                       node=0),
                1: row(fb=0.7, synced_backwards=10, ddp=ddp(1, 0), local_world_size=local, cores=2, cpus="0-1",
                       node=node_of_slow)}  # fmt: skip

    assert codes_for(lagging(4, 0)) == {"cpu_oversubscribed"}
    assert codes_for(lagging(2, 0)) == {"straggler_rank"}
    one_each = lagging(1, 1)
    one_each[0] = {**one_each[0], "local_world_size": 4}  # node 0 oversubscribed, the slow rank's node 1 is not
    assert codes_for(one_each) == {"cpu_oversubscribed", "straggler_rank"}
    assert codes_for(lagging(4, 0), device="cuda") == {"straggler_rank"}


def test_accumulation_oversubscription_and_unused_parameters() -> None:
    accumulating = dict(micro_batches=20, synced_backwards=20, ddp=ddp(1, 0))
    assert codes_for({0: row(**accumulating), 1: row(**accumulating)}) == {"accumulation_syncs_every_micro_batch"}
    assert codes_for({0: row(**{**accumulating, "synced_backwards": 10})}) == set()
    assert codes_for({0: row(local_world_size=4)}) == {"cpu_oversubscribed"}
    assert codes_for({0: row(local_world_size=4)}, device="cuda") == set()
    assert codes_for({0: row(local_world_size=2, threads=2, cores=4)}) == set()
    unused = ddp(1, 0, find_unused_parameters=1)
    graded = dict(ddp=unused, ddp_params_without_grad=0)
    assert codes_for({0: row(**graded), 1: row(**graded)}) == {"find_unused_parameters_unneeded"}
    assert codes_for({0: row(**graded), 1: row(ddp={**unused, "unused_parameter_size": 4})}) == set()
    # The reducer's traversal from the forward's outputs reaches a head whose output the loss drops (infogan's
    # `validity, _, _ = D(x)`): unused_parameter_size 0, yet its parameters got no gradient, and without the flag
    # the next forward fails. What the parameters held at the step decides; a run that did not record it, nothing.
    assert codes_for({0: row(**graded), 1: row(ddp=unused, ddp_params_without_grad=2)}) == set()
    assert codes_for({0: row(ddp=unused), 1: row(ddp=unused)}) == set()


def test_model_state_is_rank_zeros_bytes() -> None:
    state = model_state({1: row(param_bytes=8), 0: row(param_bytes=4, optimizer="AdamW", optimizer_state_bytes=12,
                                                        ddp=ddp(1, 0, bucket_cap_bytes=25 * 2**20))})  # fmt: skip
    assert state is not None
    assert (state.param_bytes, state.optimizer, state.optimizer_state_bytes) == (4, "AdamW", 12)
    assert state.bucket_cap_bytes == 25 * 2**20
    assert model_state({0: row()}) is None


@pytest.mark.parametrize(
    ("stepped_by", "says"),
    [
        (["accelerate", "transformers"], "under transformers, pass `--ddp_find_unused_parameters False`"),
        (["lightning"], 'under lightning, use strategy="ddp", not "ddp_find_unused_parameters_true"'),
        (["accelerate"], "DistributedDataParallelKwargs(find_unused_parameters=False)"),
        ([], "turn it off (DistributedDataParallel(..., find_unused_parameters=False))"),
    ],
)
def test_unused_parameters_advice_is_in_the_framework_that_stepped(stepped_by: list[str], says: str) -> None:
    """A Trainer user cannot 'turn off' a DDP argument Trainer passes: the switch is its own flag."""
    unused = ddp(1, 0, find_unused_parameters=1)
    rows = {0: row(ddp=unused, ddp_params_without_grad=0), 1: row(ddp=unused, ddp_params_without_grad=0)}
    frameworks = {"imported": stepped_by, "optimizer_stepped_by": stepped_by, "schedulers": []}
    observed = Observed(world_size=2, device="cpu", time_breakdown=time_breakdown(rows), frameworks=frameworks)
    (finding,) = [f for f in slowness_findings(observed, rows) if f.code == "find_unused_parameters_unneeded"]
    assert finding.message.endswith(says) or says in finding.message


@given(st.sets(st.integers(0, 300)))
def test_a_cpu_list_reads_back_as_the_cpus_it_was_written_from(cpus: set[int]) -> None:
    assert parse_cpu_list(format_cpu_list(cpus)) == cpus
    assert parse_cpu_list("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11} and format_cpu_list({5, 1, 2, 3}) == "1-3,5"
    assert parse_cpu_list("3-1") == parse_cpu_list("a") == parse_cpu_list(None) == parse_cpu_list("1,") == set()


def test_ranks_pinned_to_cores_of_their_own_are_not_oversubscribed() -> None:
    """Found by the crowded-rank knob: its rank pinned itself to one CPU, and the finding said 2 processes took
    turns on 1 core, while the other rank ran on the other core. The cores are the union over a node's ranks."""
    pinned = {rank: row(local_world_size=2, cores=1, cpus=str(rank), node=0) for rank in (0, 1)}
    assert codes_for(pinned) == set()
    shared = {rank: row(local_world_size=2, cores=1, cpus="0", node=0) for rank in (0, 1)}
    assert codes_for(shared) == {"cpu_oversubscribed"}
    two_nodes = {rank: row(local_world_size=1, cores=1, cpus="0", node=rank) for rank in (0, 1)}
    assert codes_for(two_nodes) == set()  # one process on each node's core
    older = {0: row(local_world_size=2, cores=1), 1: row(local_world_size=2, cores=2)}  # no CPU list: each alone
    assert codes_for(older) == {"cpu_oversubscribed"}
    killed = {0: row(local_world_size=2, cores=1, cpus="0", node=0), 1: {}}  # rank 1 killed before timing a step
    assert codes_for(killed) == {"cpu_oversubscribed"}  # failed the merge of a killed run before it was caught


@given(st.dictionaries(st.integers(0, 3), st.dictionaries(
    st.sampled_from(["local_world_size", "threads", "cores", "cpus", "node"]),
    st.one_of(st.integers(-1, 4), st.text(max_size=5), st.none(), st.lists(st.integers(0, 2), max_size=2)),
)))  # fmt: skip
def test_any_timing_rows_get_an_answer_not_an_error(rows: dict[int, dict[str, Any]]) -> None:
    observed = Observed(world_size=max(len(rows), 1), device="cpu", time_breakdown=None)
    assert {found.code for found in slowness_findings(observed, rows)} <= {"cpu_oversubscribed"}
