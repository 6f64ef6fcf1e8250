"""Every rank's observation file, read (<run_dir>/observed/rank-<rank>.jsonl), without holding its step rows.

Row kinds (ddpcli.worker.observer and ddpcli.worker.runtime write them; docs/contracts.md lists them):
  start        a process began (restart count, pid)
  step         one optimizer step: micro_batches, samples, loss (back-propagated, summed), lr per group, time;
               with noise_scale = true on a DDP model, sq_small and sq_big: this step's squared gradient norms before
               and after the all-reduce (the merge keeps their EMAs and computes the noise scale)
  resume       the runtime helper resumed from a checkpoint: the next step is step + 1
  log          a row of the runtime helper's ctx.log (step, loss, lr, extra scalars), this rank's values
  fingerprint  three numbers of one of the first training batches
  run          world size, backend, device, DDP and its options, models, BatchNorm layers, AMP
  end          training loaders (sampler, epochs seen), AMP, comm hooks
  timing       cumulative seconds of the timed steps (data, forward+backward, optimizer, step), the DDP
               reducer's timers, peak memory, threads and cores, parameter and optimizer-state bytes
  error        something inside the observer failed (training went on)
  spawn        the script started processes of its own (how, count, target), written the moment it did
A process that starts again (a torchrun restart, a resume) appends to the same file. Step numbers are absolute (the
runtime helper tells the observer the step it resumed from), so for a step seen twice the later row wins.


Streaming: step and log rows are never all in memory (ddpcli.rundir.timeline keeps where they are and reads them
back in step order), so reading a million steps needs about as much memory as ten. Every value is untrusted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpcli.jsonvalues import finite_or_none, parse_row, whole_or_none
from ddpcli.rundir.layout import OBSERVED_DIR
from ddpcli.rundir.timeline import TimelineBuilder

MAX_ERRORS = 100  # distinct observer error messages kept per rank (a finding quotes the first)


@dataclass
class RankObservation:
    rank: int
    # step -> row: a Timeline (read from the file when iterated, rising steps) when read from a file.
    steps: Mapping[int, dict[str, Any]] = field(default_factory=dict)
    logs: Mapping[int, dict[str, Any]] = field(default_factory=dict)
    fingerprints: list[list[float]] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)
    end: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, Any] = field(default_factory=dict)  # the last `timing` row (cumulative)
    params: dict[str, dict[str, Any]] = field(default_factory=dict)  # parameter digests by "at" (rundir.parallel)
    errors: list[str] = field(default_factory=list)
    skipped_lines: int = 0
    spawns: list[dict[str, Any]] = field(default_factory=list)  # `spawn` rows: processes the script started


def read_rank_file(path: Path, rank: int) -> RankObservation:
    """One pass over the file: where its step and log rows are (not the rows), and the few other rows."""
    seen = RankObservation(rank)
    builders = {kind: TimelineBuilder(kind) for kind in ("step", "log")}
    resumes: list[tuple[int, int]] = []  # (order, step): a resume drops the rows after its step written before it
    order, offset = 0, 0
    try:
        with path.open("rb") as handle:
            for line in handle:
                start, offset = offset, offset + len(line)
                row = parse_row(line) if line.strip() else None
                if row is None:
                    seen.skipped_lines += bool(line.strip())
                    continue
                kind, step = row.get("kind"), whole_or_none(row.get("step"))
                if kind in builders and step is not None:
                    order += builders[kind].add(step, start, order)
                elif kind == "resume" and step is not None:
                    resumes.append((order, step))  # the attempt that died went further than its last checkpoint
                    for builder in builders.values():
                        builder.close()
                    order += 1
                else:
                    _note(seen, kind, row)
    except OSError:
        pass
    seen.steps = builders["step"].build(path, resumes)
    seen.logs = builders["log"].build(path, resumes)
    return seen


def _note(seen: RankObservation, kind: Any, row: dict[str, Any]) -> None:
    if kind == "fingerprint" and isinstance(row.get("values"), list) and len(seen.fingerprints) < 8:
        seen.fingerprints.append([value for value in row["values"] if finite_or_none(value) is not None])
    elif kind in ("run", "end", "timing"):
        setattr(seen, kind, row)
    elif kind == "spawn" and len(seen.spawns) < MAX_ERRORS:
        seen.spawns.append(row)
    elif kind == "params":
        seen.params[str(row.get("at"))] = row
    elif kind == "error" and len(seen.errors) < MAX_ERRORS:
        message = str(row.get("message", ""))[:500]
        if message not in seen.errors:
            seen.errors.append(message)


def main_rank(ranks: dict[int, RankObservation]) -> RankObservation | None:
    """Rank 0's observations (whose timeline and run description stand for the run), else the lowest rank's."""
    return ranks.get(0) or (ranks[min(ranks)] if ranks else None)


def read_observations(run_dir: Path) -> dict[int, RankObservation]:
    """Every rank's observations, by rank; empty when the run was not observed."""
    folder = run_dir / OBSERVED_DIR
    ranks: dict[int, RankObservation] = {}
    if not folder.is_dir():
        return ranks
    for path in sorted(folder.glob("rank-*.jsonl")):
        number = path.stem.removeprefix("rank-")
        if number.isdigit():
            ranks[int(number)] = read_rank_file(path, int(number))
    return ranks


def lr_of(row: dict[str, Any]) -> float | None:
    """The first param group's lr of a step row (groups may differ; the first is the one people quote)."""
    lrs = row.get("lr")
    return finite_or_none(lrs[0]) if isinstance(lrs, list) and lrs else finite_or_none(lrs)
