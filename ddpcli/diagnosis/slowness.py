"""Findings that name why a run is slow, from its time breakdown and each rank's `timing` row. Pure.

Thresholds (docs/contracts.md states them; shares are of the median step time):
- input_bound: the median rank waited on its training DataLoader for >= INPUT_BOUND_SHARE of the step.
- communication_bound: several processes, and even the rank that waited least had exposed (not overlapped)
  all-reduce time >= COMMUNICATION_BOUND_SHARE of the step (the least, so a straggler's victims do not count).
- straggler_rank: one rank's own work (step - exposed communication) is >= STRAGGLER_RATIO x the median of the
  others' and the difference is >= STRAGGLER_GAP_SHARE of the step: the others wait for it at the all-reduce;
  over at least STRAGGLER_MIN_STEPS timed steps; not on a host that cpu_oversubscribed names (there every rank
  waits its turn for a core: the oversubscription is the cause seen, not the rank). The cause is named when it
  was seen: that rank's training thread waited for a CPU (cpu_wait_s) for >= CPU_WAIT_CAUSE of the gap more than
  the others' did.
- accumulation_syncs_every_micro_batch: a DDP model with >= 2 micro-batches per optimizer step all-reduced on
  every one of them (no `no_sync`).
- cpu_oversubscribed: a CPU run whose processes on one host x intra-op threads exceed the cores they may use (the
  union of the CPUs its ranks there may run on).
- find_unused_parameters_unneeded: DDP's find_unused_parameters=True, the reducer found no unused parameter on any
  rank, and every parameter of the DDP model its optimizers step had a gradient at each rank's first steps.
"""

from __future__ import annotations

import statistics
from typing import Any

from ddpcli.diagnosis.framework_advice import find_unused_off
from ddpcli.rundir.cpu_list import parse_cpu_list
from ddpcli.rundir.record import Finding, Observed
from ddpcli.rundir.timing import RankTime, TimeBreakdown

INPUT_BOUND_SHARE = 0.25
COMMUNICATION_BOUND_SHARE = 0.30
STRAGGLER_RATIO = 1.5
STRAGGLER_GAP_SHARE = 0.25
STRAGGLER_MIN_STEPS = 8  # timed steps: in fewer, one stall of a process (a loaded host) looks like a straggler
CPU_WAIT_CAUSE = 0.5  # of the straggler's gap, waited for a CPU beyond the others: the host is the cause named
INPUT_BOUND = "input_bound"
COMMUNICATION_BOUND = "communication_bound"
STRAGGLER_RANK = "straggler_rank"
ACCUMULATION_SYNCS_EVERY_MICRO_BATCH = "accumulation_syncs_every_micro_batch"
CPU_OVERSUBSCRIBED = "cpu_oversubscribed"
FIND_UNUSED_PARAMETERS_UNNEEDED = "find_unused_parameters_unneeded"
# Every code this module writes (each finding takes its code from these names): a run's speed, not its meaning.
SLOWNESS_CODES = (
    INPUT_BOUND,
    COMMUNICATION_BOUND,
    STRAGGLER_RANK,
    ACCUMULATION_SYNCS_EVERY_MICRO_BATCH,
    CPU_OVERSUBSCRIBED,
    FIND_UNUSED_PARAMETERS_UNNEEDED,
)


def slowness_findings(observed: Observed, rows: dict[int, dict[str, Any]]) -> list[Finding]:
    """Every cause seen, from the breakdown (observed.time_breakdown) and the ranks' raw `timing` rows."""
    found: list[Finding] = []
    breakdown = observed.time_breakdown
    if breakdown is not None and breakdown.median.step_s:
        found += _input_bound(breakdown)
        found += _communication_bound(breakdown)
        found += [f for f in _straggler(breakdown, rows) if not _oversubscribed_host(observed, rows, f.observed)]
        found += _accumulation_syncs(breakdown)
    found += _oversubscribed(observed, rows)
    found += _unused_parameters(rows, observed.frameworks)
    return found


def _share(part: float | None, step: float) -> float:
    return (part or 0.0) / step


def _input_bound(breakdown: TimeBreakdown) -> list[Finding]:
    median = breakdown.median
    share = _share(median.data_s, median.step_s or 1.0)
    if share < INPUT_BOUND_SHARE:
        return []
    return [Finding(
        code=INPUT_BOUND, severity="warning",
        message=f"input-bound: {share:.0%} of each step ({median.data_s:.3g} s of {median.step_s:.3g} s) was spent "
        "waiting for the training DataLoader: raise num_workers, use pin_memory=True and persistent_workers=True, "
        "or make __getitem__ cheaper",
    )]  # fmt: skip


def _communication_bound(breakdown: TimeBreakdown) -> list[Finding]:
    comms = [rank.comm_s for rank in breakdown.ranks if rank.comm_s is not None]
    step = breakdown.median.step_s or 1.0
    if len(breakdown.ranks) < 2 or not comms or _share(min(comms), step) < COMMUNICATION_BOUND_SHARE:
        return []
    return [Finding(
        code=COMMUNICATION_BOUND, severity="warning",
        message=f"communication-bound: {_share(min(comms), step):.0%} of each step ({min(comms):.3g} s of "
        f"{step:.3g} s) was all-reduce time that backward did not hide, on every rank: a larger per-device batch, "
        "gradient accumulation with no_sync, a compression comm hook (fp16/bf16, PowerSGD) or a different "
        "bucket_cap_mb spends less of the step on it",
    )]  # fmt: skip


def _busy(rank: RankTime) -> float:
    return (rank.step_s or 0.0) - (rank.comm_s or 0.0)


def _straggler(breakdown: TimeBreakdown, rows: dict[int, dict[str, Any]]) -> list[Finding]:
    if len(breakdown.ranks) < 2 or min(rank.steps for rank in breakdown.ranks) < STRAGGLER_MIN_STEPS:
        return []
    slowest = max(breakdown.ranks, key=_busy)
    others = statistics.median(_busy(rank) for rank in breakdown.ranks if rank is not slowest)
    gap, step = _busy(slowest) - others, breakdown.median.step_s or 1.0
    if _busy(slowest) < STRAGGLER_RATIO * others or gap < STRAGGLER_GAP_SHARE * step:
        return []
    return [Finding(
        code=STRAGGLER_RANK, severity="warning", observed=slowest.rank,
        message=f"rank {slowest.rank} is a straggler: its own work took {_busy(slowest):.3g} s a step against "
        f"{others:.3g} s on the other ranks, which waited about {gap:.3g} s a step ({gap / step:.0%}) for it at the "
        "all-reduce: " + (_cpu_wait(slowest, breakdown, gap) or _unknown_cause(slowest, rows)),
    )]  # fmt: skip


def _unknown_cause(rank: RankTime, rows: dict[int, dict[str, Any]]) -> str:
    return "find what differs on that rank (its data, its host, another job on its device)" + _host_load(
        rank, rows.get(rank.rank, {})
    )


def _cpu_wait(slowest: RankTime, breakdown: TimeBreakdown, gap: float) -> str:
    """The cause, where it was seen: the slow rank's training thread waited for a CPU (runnable, not running) for
    at least CPU_WAIT_CAUSE of the gap more than the other ranks' did: its host, not its work, made it slow."""
    waits = [rank.cpu_wait_s for rank in breakdown.ranks if rank is not slowest and rank.cpu_wait_s is not None]
    if slowest.cpu_wait_s is None or not waits:
        return ""
    others = statistics.median(waits)
    if slowest.cpu_wait_s - others < CPU_WAIT_CAUSE * gap:
        return ""
    return (
        f"its training thread was ready to run but waited {slowest.cpu_wait_s:.3g} s a step for a CPU (the other "
        f"ranks {others:.3g} s), so other processes on its host had the CPU: give each rank cores of its own "
        "(fewer processes or threads on that host, or stop the other work there)"
    )


def _host_load(rank: RankTime, row: dict[str, Any]) -> str:
    """What the rank's host was doing besides the run, as recorded at its end: a 1-minute load average above both
    the cores and the run's own processes x threads means other work took turns with the ranks."""
    cores, local, threads = (row.get(key) for key in ("cores", "local_world_size", "threads"))
    load = rank.load_average
    if load is None or not all(isinstance(value, int) and value > 0 for value in (cores, local, threads)):
        return ""
    if load <= max(cores, local * threads):
        return ""
    return (
        f"; the host's 1-minute load average at the run's end was {load:.2g} on {cores} cores, above the run's own "
        f"{local} processes x {threads} threads: other work on the host took turns with these ranks"
    )


def _accumulation_syncs(breakdown: TimeBreakdown) -> list[Finding]:
    first = breakdown.ranks[0]
    micro, syncs = first.micro_batches_per_step, first.all_reduces_per_step
    if micro is None or syncs is None or micro < 2 or syncs < micro - 1e-9:
        return []
    return [Finding(
        code=ACCUMULATION_SYNCS_EVERY_MICRO_BATCH, severity="warning",
        message=f"gradient accumulation all-reduced on every micro-batch: {syncs:g} all-reduces per optimizer step "
        f"where 1 is needed (exposed communication {first.comm_s or 0:.3g} s a step): wrap the forward and backward "
        "of all but the last micro-batch in `with model.no_sync():`",
    )]  # fmt: skip


def _oversubscribed_host(observed: Observed, rows: dict[int, dict[str, Any]], rank: Any) -> bool:
    """The rank's host runs more processes x threads than it has cores: there every rank waits its turn for a core,
    so one that lags is the oversubscription's doing (cpu_oversubscribed names it), not a straggler of its own."""
    return observed.device == "cpu" and any(
        rank in ranks and local * threads > cores for ranks, (local, threads, cores) in _node_budgets(rows)
    )


def _oversubscribed(observed: Observed, rows: dict[int, dict[str, Any]]) -> list[Finding]:
    if observed.device != "cpu":
        return []
    for _, (local, threads, cores) in _node_budgets(rows):
        if local * threads > cores:
            return [Finding(
                code=CPU_OVERSUBSCRIBED, severity="warning", observed=local * threads, planned=cores,
                message=f"CPU oversubscribed: {local} processes x {threads} threads on {cores} cores: the processes "
                f"take turns on the cores, so more of them cannot be faster; use at most {cores} processes, or "
                f"OMP_NUM_THREADS = cores / processes",
            )]  # fmt: skip
    return []


BUDGET_KEYS = ("local_world_size", "threads", "cores")


def _node_budgets(rows: dict[int, dict[str, Any]]) -> list[tuple[set[int], tuple[int, int, int]]]:
    """Each node's ranks and their (processes, threads, cores): the cores are the union of the CPUs its ranks may use
    (ranks pinned to cores of their own share none); a row without its CPU list (an older run) counts alone."""
    nodes: dict[Any, dict[int, dict[str, Any]]] = {}
    for rank, row in rows.items():
        if not all(isinstance(row.get(name), int) and row[name] > 0 for name in BUDGET_KEYS):
            continue  # a rank that timed nothing (killed before its first `timing` row)
        node = row["node"] if isinstance(row.get("node"), int) else 0
        nodes.setdefault(node if isinstance(row.get("cpus"), str) else ("rank", rank), {})[rank] = row
    budgets = []
    for group in nodes.values():
        cpus = [parse_cpu_list(row.get("cpus")) for row in group.values()]
        cores = len(set().union(*cpus)) if all(cpus) else min(row["cores"] for row in group.values())
        local, threads = (max(row[key] for row in group.values()) for key in ("local_world_size", "threads"))
        budgets.append((set(group), (local, threads, cores)))
    return budgets


def _unused_parameters(rows: dict[int, dict[str, Any]], frameworks: dict[str, Any] | None) -> list[Finding]:
    stats = [row["ddp"] for row in rows.values() if isinstance(row.get("ddp"), dict)]
    if not stats or not all(
        s.get("find_unused_parameters") == 1 and s.get("unused_parameter_size") == 0 for s in stats
    ):
        return []
    # The reducer counts as used every parameter its traversal reaches from the forward's outputs, an output the loss
    # drops included: that every parameter it steps had a gradient is what each rank recorded at its first steps.
    if not all(row.get("ddp_params_without_grad") == 0 for row in rows.values() if isinstance(row.get("ddp"), dict)):
        return []
    return [Finding(
        code=FIND_UNUSED_PARAMETERS_UNNEEDED, severity="info",
        message="find_unused_parameters=True, but every parameter got a gradient (the DDP reducer found none "
        "unused): the flag costs an extra traversal of the autograd graph every backward; "
        + find_unused_off(frameworks),
    )]  # fmt: skip
