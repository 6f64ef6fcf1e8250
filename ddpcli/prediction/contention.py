"""CPU contention: how many times slower a planned CPU run's host work is than the baseline's. Pure.

    contention = p0 / p

p0: the cores' worth of CPU the baseline's process got (its CPU seconds / wall seconds over the timed steps). p: the
cores' worth one of the planned run's processes will get, from a fair share per thread
p = T x min(1, cores / (processes x T + E)) for T threads per process, E the cores' worth of other work:

- measured: HostNow.shares, from ddpcli.launch.cpu_probe: that many busy-loop processes of that many threads, each
  in a session of its own as torchrun's workers are, spun on this host just before the prediction (the scheduler's
  answer now, whatever it shares cores by: threads, sessions (Linux autogroups) or cgroups), about a second;
- inferred: E from p0 (other_load: the baseline shared the cores with E runnable threads if it got less than its
  threads could use), which covers the whole baseline run rather than a second.

Both are measurements of the same share with errors of their own (the other jobs' load moves from second to
second), so with both p is their mean; else whichever is known; else E from busy cores in /proc/stat. Recomputed
over 54 runs of benchmarks/prediction_accuracy.py (18 repetitions, load average 2.1 to 6.1 on 2 cores shared with
other jobs), the mean brought 38 predictions within 25% of the measured samples/s against 34 with the probe alone
(median error 15% against 17%; on the last 27 runs alone, 17 and 17, median 21% and 15%: a small gain, not a
settled one). 1 on GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddpcli.prediction.baseline import Baseline
    from ddpcli.prediction.target import Target


@dataclass(frozen=True)
class HostNow:
    """What this host gives a run now, measured just before the prediction (empty: nothing measured)."""

    busy_cores: float | None = None  # cores' worth other processes use (/proc/stat)
    shares: dict[tuple[int, int], float] = field(default_factory=dict)  # (processes, threads): cores' worth each
    waits: dict[tuple[int, int], float] = field(default_factory=dict)  # (processes, threads): excess of the max

    def share(self, processes: int, threads: int) -> float | None:
        return self.shares.get((processes, threads))


def parallelism(device: str, threads: int, processes: int, cores: int) -> float:
    """The cores' worth of work one process gets: min(threads, cores / processes) on CPU; 1 on an accelerator."""
    return 1.0 if device != "cpu" else min(float(threads), cores / processes)


def cpu_share(threads: int, processes: int, cores: int, others: float) -> float:
    """The cores' worth one process gets when `processes` processes of `threads` busy threads share `cores` with
    `others` cores' worth of other work: threads x min(1, cores / (our threads + others))."""
    return threads * min(1.0, cores / (processes * threads + others))


def other_load(baseline: Baseline) -> float:
    """Runnable threads of other work the baseline shared its cores with, inferred from the share it got (0 when it
    got what its threads could use: it was limited by its threads, not by the cores)."""
    alone = cpu_share(baseline.threads, baseline.nproc_per_node, baseline.cores, 0.0)
    if not baseline.cpu_share or baseline.cpu_share >= 0.9 * alone:
        return 0.0
    return max(baseline.threads * baseline.cores / baseline.cpu_share - baseline.nproc_per_node * baseline.threads, 0.0)


def other_work(baseline: Baseline, busy_cores: float | None) -> float:
    """Cores' worth of other work the planned run will share the cores with: what other processes use now (busy
    cores measured while none of ours runs), else what the baseline met (inferred from its share of a core)."""
    return busy_cores if busy_cores is not None else other_load(baseline)


def target_threads(baseline: Baseline, target: Target) -> int:
    """OMP_NUM_THREADS of the planned run: its env's, else torchrun's 1 when nproc > 1, else the baseline's."""
    return target.threads or (1 if target.nproc_per_node > 1 else baseline.threads)


def contention_of(baseline: Baseline, target: Target, host: HostNow | None = None) -> tuple[float, list[str]]:
    """How many times slower the planned run's host work is than the baseline's (module docstring), and why."""
    if baseline.device != "cpu":
        return 1.0, []
    host = host or HostNow()
    threads = target_threads(baseline, target)
    others = other_work(baseline, host.busy_cores)
    before = baseline.cpu_share or cpu_share(baseline.threads, baseline.nproc_per_node, baseline.cores, others)
    measured = host.share(target.nproc_per_node, threads)
    inferred = cpu_share(threads, target.nproc_per_node, baseline.cores, other_load(baseline))
    if measured and baseline.cpu_share:
        after = (measured + inferred) / 2
    else:
        after = measured or cpu_share(threads, target.nproc_per_node, baseline.cores, others)
    factor = before / after
    why = []
    if measured:
        mean = f"the mean of {measured:.2f}, " if baseline.cpu_share else ""
        and_inferred = (
            f", and {inferred:.2f}, what the baseline's {before:.2f} leaves each of {target.nproc_per_node} processes "
            "(the other work inferred from it)"
            if baseline.cpu_share
            else ""
        )
        why.append(
            f"CPU contention x{factor:.3g}: each process will get about {after:.2f} of a core: {mean}what "
            f"{target.nproc_per_node} busy-loop processes of {threads} threads got each on this host just before"
            f"{and_inferred}"
        )
    elif abs(factor - 1) > 0.01:
        why.append(
            f"CPU contention x{factor:.3g}: {target.nproc_per_node} x {threads}-thread processes on "
            f"{baseline.cores} cores, each about {after:.2f} of a core, next to {others:.2f} cores of other work ("
            + ("measured now" if host.busy_cores is not None else "inferred from the baseline's share")
            + f"; the baseline got {before:.2f} of a core)"
        )
    if target.nproc_per_node * threads > baseline.cores:
        why.append(
            "oversubscribed (processes x threads > cores): every step waits for each process to be scheduled, "
            "which this model leaves out: expect a slower run than predicted"
        )
    return factor, why
