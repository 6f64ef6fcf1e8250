"""The DDP reducer's own timers of single iterations, kept for the iterations the observer's timing window covers.

torch's DDP logger (torch/csrc/distributed/c10d/logger.cpp) samples its runtime timers at the forward after a
sampled iteration: iterations 1 to 10, then every 100th (TORCH_DDP's sample rate). Each sample sets the
iteration's own `forward_compute_time, backward_compute_time, backward_comm_time,
backward_compute_comm_overlap_time` (ns) and the running averages `avg_*` over every sample since iteration 1,
and `iteration` (the reducer's count of synchronising forwards: k is the k-th one). The averages hold iteration 1,
the first all-reduce (gloo's first use of its pairs, the buckets not yet rebuilt), which the observer's window
(the steps after the first) leaves out: measured on 2 shared cores with slow_knobs' model at 2 x 1024, iteration
1's exposed communication was 32 and 82 ms against a window mean of 7 and 13 ms, so avg over 1-10 overstated it by
60-66%, and the mean of the samples in the window (2-10) by 6-33% (benchmarks/reducer_sampling.py). Keeping each
sample of the window lets the host average the same iterations the rest of the breakdown covers
(ddpcli.rundir.timing). Read only when the observer reads the logging data anyway: no call, sync or setting added.
"""

from __future__ import annotations

from typing import Any

SAMPLE_KEYS = (
    "forward_compute_time", "backward_compute_time", "backward_comm_time", "backward_compute_comm_overlap_time",
)  # fmt: skip
MAX_SAMPLES = 128  # 9 early samples, then one per 100 iterations: 12,000 iterations before this is reached


class ReducerSamples:
    """Each sampled iteration after `first_window_iteration - 1`, as [iteration, *SAMPLE_KEYS] (ns), once."""

    def __init__(self) -> None:
        self.samples: list[list[int]] = []
        self.last_iteration: int | None = None

    def add(self, data: dict[str, Any], first_window_iteration: int) -> None:
        iteration = data.get("iteration")
        if not isinstance(iteration, int) or iteration == self.last_iteration:
            return
        self.last_iteration = iteration
        values = [data.get(key) for key in SAMPLE_KEYS]
        if iteration < first_window_iteration or len(self.samples) >= MAX_SAMPLES:
            return
        if all(isinstance(value, int) and not isinstance(value, bool) for value in values):
            self.samples.append([iteration, *values])  # type: ignore[list-item]
