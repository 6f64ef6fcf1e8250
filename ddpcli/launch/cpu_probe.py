"""What share of a core a planned CPU run's processes will get on this host now, and how long its ranks will wait
for the slowest: measured, not inferred. No torch.

    python -m ddpcli.launch.cpu_probe --processes 2 --threads 1 --work 0.02 --rounds 12

forks one process per rank, each in a session of its own as torchrun starts its workers (start_new_session), each
with T busy-loop workers (a process of T threads is T workers), and runs ROUNDS rounds: all start together (a
barrier, as ranks start a step after an all-reduce), each spins until it has used WORK seconds of CPU, and the
round's duration per rank is its slowest worker's. Sessions matter: Linux with autogroups (the default) shares the
cores between sessions before it shares them between a session's threads, so how many ranks a run has and how many
other sessions are busy decide each rank's share, not the count of runnable threads. Printed as
JSON: `share` (cores' worth per rank: CPU seconds / wall seconds, times its threads) and `wait` (the mean over
rounds of the slowest rank's duration minus the ranks' mean, as a fraction of the mean round). The first round
(forks settling) is left out.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROBE_TIMEOUT_S = 60


@dataclass(frozen=True)
class CpuProbe:
    share: float  # cores' worth of CPU one rank got
    wait: float  # excess of the slowest rank's round over the mean, as a fraction of the mean round


def _die_with_parent(parent: int) -> None:
    """In a forked child: SIGTERM when `parent` (the process that forked it) dies (ddpcli.launch.parent_death)."""
    from ddpcli.launch.parent_death import die_with_parent

    arm = die_with_parent(parent)
    if arm is not None:
        arm()


def spin(work_s: float, rounds: int, barrier: Any, results: Any, index: int) -> None:
    """One worker: each round, wait for all, then burn `work_s` of CPU time; send back each round's wall seconds."""
    walls = []
    for _ in range(rounds):
        barrier.wait()
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        while time.process_time() - start_cpu < work_s:
            sum(range(200))
        walls.append(time.perf_counter() - start_wall)
    results.put((index, walls))


def summarize(walls: dict[int, list[float]], processes: int, threads: int, work_s: float) -> CpuProbe:
    """The share and the wait from each worker's round durations (workers rank x threads + thread)."""
    ranks = [[max(walls[rank * threads + thread][r] for thread in range(threads)) for r in range(len(walls[0]))]
             for rank in range(processes)]  # fmt: skip
    rounds = list(zip(*ranks, strict=True))[1:] or list(zip(*ranks, strict=True))
    means = [sum(durations) / len(durations) for durations in rounds]
    excess = [max(durations) - mean for durations, mean in zip(rounds, means, strict=True)]
    per_worker = [sum(values[1:] or values) / len(values[1:] or values) for values in walls.values()]
    share = threads * work_s * len(per_worker) / sum(per_worker)
    return CpuProbe(share=share, wait=sum(excess) / sum(means) if sum(means) > 0 else 0.0)


def rank(rank_index: int, threads: int, work_s: float, rounds: int, barrier: Any, results: Any, parent: int) -> None:
    """One rank: a session of its own (as torchrun's workers), its threads as busy-loop workers forked in it. It
    dies with the probe (a parent-death signal): a stopped probe leaves no rank waiting at the barrier."""
    _die_with_parent(parent)
    os.setsid()
    context = multiprocessing.get_context("fork")
    others = [context.Process(target=_spin_with_parent, args=(work_s, rounds, barrier, results,
                                                              rank_index * threads + thread, os.getpid()))
              for thread in range(1, threads)]  # fmt: skip
    for worker in others:
        worker.start()
    spin(work_s, rounds, barrier, results, rank_index * threads)
    for worker in others:
        worker.join()


def _spin_with_parent(work_s: float, rounds: int, barrier: Any, results: Any, index: int, parent: int) -> None:
    _die_with_parent(parent)
    spin(work_s, rounds, barrier, results, index)


def run_workers(processes: int, threads: int, work_s: float, rounds: int) -> CpuProbe:
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(processes * threads), context.Queue()
    ranks = [context.Process(target=rank, args=(index, threads, work_s, rounds, barrier, results, os.getpid()))
             for index in range(processes)]  # fmt: skip
    for process in ranks:
        process.start()
    walls = dict(results.get(timeout=PROBE_TIMEOUT_S) for _ in range(processes * threads))
    for process in ranks:
        process.join()
    return summarize(walls, processes, threads, work_s)


def env_importing_ddpcli(env: dict[str, str]) -> dict[str, str]:
    """`env` with this ddpcli first on PYTHONPATH, for a probe started as `python -m ddpcli...` (or by torchrun)
    wherever the launcher runs."""
    package_root = str(Path(__file__).resolve().parents[2])
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))}


def measure(processes: int, threads: int, work_s: float, rounds: int) -> CpuProbe | None:
    """Run the probe (module docstring) in a session of its own, as `ddpcli launch` starts torchrun; None when it
    could not run (not Linux, a failure)."""
    if sys.platform != "linux":
        return None
    command = [sys.executable, "-m", "ddpcli.launch.cpu_probe", "--processes", str(processes), "--threads",
               str(threads), "--work", repr(work_s), "--rounds", str(rounds)]  # fmt: skip
    from ddpcli.launch.probe_run import ProbeTimedOut, run_probe  # host: only the launching side runs probes

    env = env_importing_ddpcli(dict(os.environ))
    try:  # its ranks, each in a session of its own, carry the probe's marker: none outlives a stop or a timeout
        result = run_probe(command, env, PROBE_TIMEOUT_S, what="the CPU probe")
        found = json.loads(result.stdout)
        return CpuProbe(share=float(found["share"]), wait=float(found["wait"]))
    except (OSError, ValueError, KeyError, TypeError, ProbeTimedOut):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--work", type=float, default=0.02)
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    found = run_workers(args.processes, args.threads, args.work, args.rounds)
    print(json.dumps({"share": found.share, "wait": found.wait}, allow_nan=False))


if __name__ == "__main__":
    main()
