"""Side-by-side timing of commands: interleaved repetitions, median and spread, ratios against a reference.

Interleaving (A B C A B C ...) rather than running each command N times in a row keeps a noisy shared machine
from favouring whichever command ran during a quiet spell. hyperfine does the same job where it is installed
(`hyperfine -N --warmup 2 'ddpcli plan' ...`); this module has no dependency beyond Python.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Timing:
    label: str
    seconds: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.seconds), max(self.seconds)


def time_commands(
    commands: dict[str, Sequence[str]], repetitions: int, warmup: int = 1, **run_kwargs: object
) -> list[Timing]:
    timings = {label: Timing(label, []) for label in commands}
    for round_index in range(warmup + repetitions):
        for label, argv in commands.items():
            start = time.perf_counter()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **run_kwargs)  # type: ignore[call-overload]
            elapsed = time.perf_counter() - start
            if round_index >= warmup:
                timings[label].seconds.append(elapsed)
    return list(timings.values())


def report(timings: list[Timing], reference: str) -> str:
    base = next(timing for timing in timings if timing.label == reference).median
    lines = [f"{'command':<48} {'median':>9} {'min':>8} {'max':>8} {'ratio':>7}"]
    for timing in timings:
        low, high = timing.spread
        lines.append(
            f"{timing.label:<48} {timing.median:>8.3f}s {low:>7.3f}s {high:>7.3f}s {timing.median / base:>7.2f}"
        )
    return "\n".join(lines)
