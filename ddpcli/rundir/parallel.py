"""Whether a multi-process run was data-parallel, judged from the ranks' parameters rather than assumed. Pure.

Every rank's observer digests the parameters its optimizer updates (ddpcli.worker.observer.parallel): before the
first optimizer step, after it and at the end. Processes that average their gradients (a DDP wrapper, or the
script's own all-reduce of the gradients) hold the very same parameters after every step; processes that do not
each train a model of their own, and their parameters drift apart from the first step on. So the number of
processes whose gradients were averaged together, `data_parallel_size`, is the number of ranks whose parameters
match rank 0's at the end (after the first step when the end was not recorded); 1 without a process group.
Where the ranks hold shards of the parameters (FSDP, ZeRO-3, tensor parallelism) the comparison does not apply.

Equal parameters are no proof of averaging: ranks that start from one seed and train on the very same batches end
equal too, each a copy of one training (transformers' Trainer on CPU without --use_cpu never wraps its model). So
equal ranks count as data-parallel only with evidence that something averaged them: a DDP wrapper, or the script's
own collectives on the gradients (both observed); without either, and with the same first batches on every rank,
they are `copies` of one training: data_parallel_size 1.

A diverged run compares like any other: values are compared as bit patterns where they are not finite (a NaN on
rank 0 equals a NaN on rank 1: both ranks averaged the same inf into the same NaN), and where the observer recorded
each tensor's bits (an integer sum of its raw bits, `bits`) equal bits mean equal tensors whatever they hold.

The check is a measurement (run.json's data_parallel_size, the ranks whose samples count); the findings that
say what it means for the run are ddpcli.diagnosis.parallel's.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from typing import Any

from ddpcli.jsonvalues import finite_or_none, text_or_none, whole_or_none
from ddpcli.rundir.observations import main_rank

# Ranks that average gradients hold bit-identical parameters; this leaves room for a float64 sum taken on
# different hardware, far below what one step of independent training moves a parameter.
RELATIVE_TOLERANCE = 1e-6
AT_ORDER = ("end", "first_step")


@dataclass(frozen=True)
class ParallelCheck:
    """What the comparison of the ranks' parameters found."""

    processes: int  # ranks that wrote observations
    process_group: bool | None  # some rank called init_process_group (None: not recorded)
    size: int | None  # data_parallel_size
    synchronized: bool | None  # every rank ended with rank 0's parameters (None: not checked)
    largest_difference: float | None = None  # over the sampled parameters, between rank 0 and another rank
    at: str | None = None  # which digest was compared
    sharded: str | None = None  # what shards the parameters (the check does not apply)
    group_ranks: tuple[int, ...] | None = None  # the ranks that trained rank 0's model (None: all of them)
    copies: bool = False  # equal parameters, nothing averaged them, the same batches: N copies of one training
    frameworks: tuple[str, ...] = ()  # what the script imported (the switch that makes it data-parallel)


def check_run(ranks: dict[int, Any]) -> ParallelCheck:
    """The run's check, made once (ddpcli.diagnosis.finish) for the merge, rank 0's metrics and the findings: the ranks
    against the world size torch gave rank 0, as its observer recorded it."""
    main = main_rank(ranks)
    return check_data_parallel(ranks, whole_or_none(main.run.get("world_size")) if main is not None else None)


def check_data_parallel(ranks: dict[int, Any], world_size: int | None) -> ParallelCheck:
    """`ranks`: rank -> RankObservation (its `params` by "at", its `run` and `end` rows)."""
    processes = len(ranks)
    group = _process_group(ranks)
    if processes < 2:  # nothing to compare: torch's world size (the other ranks' files are on other nodes)
        return ParallelCheck(processes, group, max(world_size or 1, 1) if processes else None, None)
    if group is False and not any(seen.steps or seen.params for seen in ranks.values()):
        return ParallelCheck(processes, False, None, None)  # nothing trained (a crash at start): nothing to judge
    if group is False:
        return ParallelCheck(processes, False, 1, False, group_ranks=(min(ranks),), frameworks=_frameworks(ranks))
    sharded = next((text for seen in ranks.values() for row in seen.params.values()
                    if (text := text_or_none(row.get("sharded")))), None)  # fmt: skip
    fallback = world_size if world_size is not None else processes
    if sharded:
        return ParallelCheck(processes, group, fallback, None, sharded=sharded)
    for at in AT_ORDER:
        digests = {rank: _values(seen.params.get(at)) for rank, seen in ranks.items()}
        if all(values is not None for values in digests.values()):
            compared = replace(_compared(processes, group, digests, at, fallback), frameworks=_frameworks(ranks))  # type: ignore[arg-type]
            return _unless_copies(compared, ranks)
    return ParallelCheck(processes, group, fallback, None)


def _unless_copies(check: ParallelCheck, ranks: dict[int, Any]) -> ParallelCheck:
    """Equal ranks with no evidence of averaging and the same first batches: copies of one training."""
    if check.synchronized is not True or check.processes < 2 or averaged(ranks) is not False:
        return check
    if _same_batches(ranks) is not True:
        return check  # different batches and still equal: something averaged them that the observer missed
    return replace(check, size=1, group_ranks=(min(ranks),), copies=True, frameworks=_frameworks(ranks))


def _frameworks(ranks: dict[int, Any]) -> tuple[str, ...]:
    """The frameworks rank 0's script imported (its end row's `stacks.imported`, worker/observer/stacks.py)."""
    main = main_rank(ranks)
    stacks = main.end.get("stacks") if main is not None else None
    imported = stacks.get("imported") if isinstance(stacks, dict) else None
    return tuple(str(name) for name in imported) if isinstance(imported, list) else ()


def averaged(ranks: dict[int, Any]) -> bool | None:
    """Whether something averaged the ranks' gradients: a DDP wrapper, or collectives of the script on `.grad`
    tensors; None when the observer did not record the script's collectives (an older record)."""
    if any(seen.run.get("ddp") is True for seen in ranks.values()):
        return True
    told = [seen.end.get("collectives") for seen in ranks.values()]
    if not told or not all(isinstance(entry, dict) for entry in told):
        return None
    return any((whole_or_none(entry.get("grad_calls")) or 0) > 0 for entry in told)


def _same_batches(ranks: dict[int, Any]) -> bool | None:
    """True when every rank's first training batches had the same fingerprints (None: not recorded)."""
    prints = [seen.fingerprints for seen in ranks.values()]
    if len(prints) < 2 or not all(prints):
        return None
    count = min(len(each) for each in prints)
    return all(each[:count] == prints[0][:count] for each in prints[1:])


def _compared(
    processes: int, group: bool | None, digests: dict[int, tuple[list[float], list[float], int]], at: str,
    fallback: int,
) -> ParallelCheck:  # fmt: skip
    main = digests[min(digests)]
    if any(values[2] != main[2] or len(values[0]) != len(main[0]) for values in digests.values()):
        shards = "ranks hold parameters of different sizes"
        return ParallelCheck(processes, group, fallback, None, at=at, sharded=shards)
    same = tuple(rank for rank, values in digests.items() if rank == min(digests) or _close(main, values))
    largest: float | None = 0.0
    for values in digests.values():
        difference = _largest_difference(main, values)
        largest = max(largest, difference) if difference is not None and largest is not None else None
    synchronized = len(same) == len(digests)
    size = max(len(same), fallback) if synchronized else len(same)  # ranks of other nodes are not here to compare
    return ParallelCheck(processes, group, size, synchronized, largest, at, group_ranks=same)


def _values(row: dict[str, Any] | None) -> tuple[list[float], list[float], int] | None:
    if not isinstance(row, dict):
        return None
    sums, samples, numel = row.get("sums"), row.get("samples"), whole_or_none(row.get("numel"))
    if not isinstance(sums, list) or not isinstance(samples, list) or numel is None:
        return None
    bits = row.get("bits")
    values = [_number(v) for v in sums], [_number(v) for v in samples], numel
    if isinstance(bits, list) and all(whole_or_none(v) is not None for v in bits):
        return (*values, [int(v) for v in bits])  # type: ignore[return-value]
    return values


def _number(value: Any) -> float:
    """A digest's value: a finite number, or the non-finite one the stream wrote ("nan", "inf", "-inf"); anything
    else is no number (NaN, which compares equal to nothing but another NaN here)."""
    number = finite_or_none(value)
    if number is not None:
        return number
    if value in ("inf", "-inf"):
        return float(value)
    return float("nan")


def _close(first: tuple[list[float], ...], second: tuple[list[float], ...]) -> bool:
    """Equal within the tolerance, non-finite values equal when they are the same (NaN and NaN, inf and inf); equal
    raw bits, where both ranks recorded them, are equal tensors whatever their values."""
    if len(first) > 3 and len(second) > 3:
        return first[3] == second[3]  # type: ignore[misc]
    pairs = [*zip(first[0], second[0], strict=True), *zip(first[1], second[1], strict=True)]
    return all(_same_value(a, b) for a, b in pairs)


def _same_value(a: float, b: float) -> bool:
    if not (math.isfinite(a) and math.isfinite(b)):
        return (a != a and b != b) or a == b  # NaN and NaN, or the same infinity
    return abs(a - b) <= RELATIVE_TOLERANCE * max(1.0, abs(a), abs(b))


def _largest_difference(first: tuple[list[float], ...], second: tuple[list[float], ...]) -> float | None:
    differences = [0.0 if _same_value(a, b) else abs(a - b) for a, b in zip(first[1], second[1], strict=False)]
    if any(difference != difference for difference in differences):  # NaN
        return None
    return max(differences, default=0.0)


def _process_group(ranks: dict[int, Any]) -> bool | None:
    """True when a rank used a process group, False when every rank recorded that none existed."""
    told = [seen.end.get("process_group") for seen in ranks.values()]
    worlds = [whole_or_none(seen.run.get("world_size")) for seen in ranks.values()]
    if any(value is True for value in told) or any(world is not None and world > 1 for world in worlds):
        return True
    if told and all(value is False for value in told):
        return False
    return None


def trained_together(ranks: dict[int, Any], check: ParallelCheck) -> dict[int, Any]:
    """The ranks whose samples fed rank 0's model: all of them, unless the check found separate trainings."""
    if check.group_ranks is None or (check.synchronized is not False and not check.copies):
        return ranks
    return {rank: seen for rank, seen in ranks.items() if rank in check.group_ranks}


def initial_fingerprint(main: Any) -> str | None:
    """A short hash of rank 0's parameters before its first optimizer step: equal for runs that started from the
    same initial parameters (a seeded initialisation, whatever the world size: DDP starts every rank from rank 0's)."""
    values = _values(main.params.get("initial")) if main is not None else None
    if values is None:
        return None
    text = repr([values[0], values[1], values[2]])  # floats' repr round-trips; a NaN is "nan", not JSON
    return hashlib.sha256(text.encode()).hexdigest()[:16]
