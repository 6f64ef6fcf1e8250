"""Findings from what the script did outside its training: processes it started, files every rank wrote. Pure.

- `script_spawned_processes`: from the `spawn` rows each observer writes the moment the script starts a process
  (multiprocessing.Process/Pool, torch.multiprocessing.spawn, a Python subprocess), so a run that then hung until
  its timeout (dist_tuto's own `mp.Process` workers waiting on port 29500) still says why; older observations
  have only the end row's count of torch.multiprocessing.spawn.
- `same_file_written_by_ranks`: two or more ranks wrote one path (torch.save, open(.., "w")): each overwrites the
  others' (mnist at 2 processes: both save mnist_cnn.pt).
"""

from __future__ import annotations

from ddpcli.jsonvalues import text_or_none, whole_or_none
from ddpcli.rundir.observations import RankObservation, main_rank
from ddpcli.rundir.record import Finding

SPAWNED = "script_spawned_processes"
SAME_FILE = "same_file_written_by_ranks"
LISTED_PATHS = 3


def spawn_findings(ranks: dict[int, RankObservation], steps: int | None) -> list[Finding]:
    main = main_rank(ranks)
    if main is None:
        return []
    counts: dict[str, int] = {}
    targets: list[str] = []
    for row in main.spawns:
        how = text_or_none(row.get("how")) or "an unknown call"
        counts[how] = counts.get(how, 0) + (whole_or_none(row.get("count")) or 1)
        target = text_or_none(row.get("target"))
        if target and target not in targets:
            targets.append(target)
    if not counts and (spawned := whole_or_none(main.end.get("spawned"))):
        counts["torch.multiprocessing.spawn"] = spawned
    total = sum(counts.values())
    if not total:
        return []
    ways = ", ".join(f"{count} with {how}" for how, count in counts.items())
    runs = f" running {', '.join(targets[:3])}" if targets else ""
    others = sorted(
        rank for rank, seen in ranks.items() if seen is not main and (seen.spawns or seen.end.get("spawned"))
    )
    where = f" (ranks {', '.join(map(str, [main.rank, *others]))} each did)" if others else ""
    return [Finding(
        code=SPAWNED, severity="warning",
        message=f"the script started {total} process{'es' if total > 1 else ''} of its own ({ways}){runs}{where}: "
        f"the training in them is not observed (optimizer steps {steps or 0} here), and processes that start a "
        "process group of their own wait for peers torchrun never starts; under torchrun, call the training "
        "function directly: torchrun already starts one process per rank",
    )]  # fmt: skip


def same_file_findings(ranks: dict[int, RankObservation]) -> list[Finding]:
    writers: dict[str, list[int]] = {}
    shown: dict[str, str] = {}
    for rank, seen in sorted(ranks.items()):
        written = seen.end.get("written")
        for entry in written if isinstance(written, list) else []:
            path = text_or_none(entry.get("path")) if isinstance(entry, dict) else None
            if path is None:
                continue
            if rank not in writers.setdefault(path, []):
                writers[path].append(rank)
            shown.setdefault(path, f"{text_or_none(entry.get('given')) or path} ({text_or_none(entry.get('how'))})")
    shared = {path: found for path, found in writers.items() if len(found) > 1}
    if not shared:
        return []
    listed = "; ".join(
        f"{shown[path]} by ranks {', '.join(map(str, found))}" for path, found in list(shared.items())[:LISTED_PATHS]
    )
    more = f" and {len(shared) - LISTED_PATHS} more" if len(shared) > LISTED_PATHS else ""
    return [Finding(
        code=SAME_FILE, severity="warning",
        message=f"{len(shared)} file{'s were' if len(shared) > 1 else ' was'} written by several ranks: "
        f"{listed}{more}: "
        "each rank overwrites what the others wrote (the same checkpoint N times, or a torn file); write it from "
        "rank 0 only (`if dist.get_rank() == 0:`), or give each rank its own path",
    )]  # fmt: skip
