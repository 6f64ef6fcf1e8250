"""Line finished runs up against each other: throughput, loss at equal samples seen, and parameter equivalence.

Pure logic on purpose (no torch, no rich): `ddpcli compare` parses flags, calls `collect_runs` and `compare_runs`,
and renders what they return. Parameter files are the one thing that needs torch; they are read through
`ddpcli.rundir.params`, imported only when two parameter files really have to be compared.

Modules, in the order they build on each other:
- run_keys: RunKeys, what a run is sorted, paired and chosen by (kept in summary.json: a later compare parses
  each run.json once, for its row).
- runs: ComparedRun (a run's keys, its directory, and its record read when asked and let go after its row),
  finding run directories, the newest run of each name.
- baseline: choosing the run the others are measured against.
- curve: a loss curve read lazily or from parsed rows; loss at a sample count, evenly spaced points.
- metrics: MetricsSummary of a metrics.jsonl (the fast reader and its careful fallback), RunSummary.
- equivalence: the single-process partner of a multi-process run, their parameters compared (ParamDiff).
- row: ComparisonRow (ROW_KEYS of --json and --csv) and its sparkline.
- table: ComparisonStream (the rows one at a time, what `ddpcli compare` prints from: memory does not grow by a
  record a run), Comparison and compare_runs (every row held), speedup and scaling efficiency.
What the comparison concludes (the notes under the table and their causes, lr_schedule_mismatch, the verdict's
words, the `!` and `?` marks, a prediction's score, why a run did not complete) is ddpcli.diagnosis's.

Definitions (the numbers people quote, so they are fixed here and documented in `ddpcli compare --help`):
- samples_per_s = (samples of the last row - samples of the first) / (time of the last - time of the first):
  steady training throughput. The first logged step is left out because its `time` (seconds since
  `runtime.init()`) carries the one-off costs that do not scale (process-group set-up, data loading start, the
  first forward/backward, DDP's bucket building); `wall_time_s` (run.json) includes everything. With a single
  row it is null (so are speedup and prediction error), and a note says why (diagnosis.throughput).
- speedup = samples_per_s / the baseline's samples_per_s.
- scaling_efficiency = speedup / (world_size / the baseline's world_size): 1.0 is perfect linear scaling; none where
  the world size is the baseline's (a larger batch on as many processes is not scaling).
- loss_at_baseline_samples: the run's loss linearly interpolated (on samples seen) at the baseline's final sample
  count; null when the run did not get that far (or had not logged a row before it).
- equivalence: a multi-process run is checked against a single-process run with the same global batch, lr
  (math.isclose) and steps; `equivalent` when the largest absolute difference over every tensor of the two final
  state_dicts is <= atol, `diverged` otherwise (or when their names or shapes differ).
"""

from ddpcli.compare.baseline import choose_baseline
from ddpcli.compare.equivalence import DEFAULT_ATOL, ParamDiff, find_partner
from ddpcli.compare.metrics import PLOT_POINTS, SPARK_POINTS, MetricsSummary, load_run, summarize_metrics
from ddpcli.compare.row import ROW_KEYS, SPARK_WIDTH, ComparisonRow, sparkline
from ddpcli.compare.runs import ComparedRun, collect_runs, read_run_record
from ddpcli.compare.table import Comparison, ComparisonStream, compare_runs, scaling_efficiency, speedup
from ddpcli.diagnosis.equivalence import DIVERGED, EQUIVALENT, verdict
from ddpcli.diagnosis.notes import divergence_causes
from ddpcli.diagnosis.status import status_reason

# What the CLI, the tests and the benchmarks use; anything else is imported from its module.
__all__ = [
    "DEFAULT_ATOL", "DIVERGED", "EQUIVALENT", "PLOT_POINTS", "ROW_KEYS", "SPARK_POINTS", "SPARK_WIDTH",
    "ComparedRun", "Comparison", "ComparisonRow", "ComparisonStream", "MetricsSummary", "ParamDiff",
    "choose_baseline", "collect_runs", "compare_runs", "divergence_causes", "find_partner", "load_run",
    "read_run_record", "scaling_efficiency", "sparkline", "speedup", "status_reason", "summarize_metrics", "verdict",
]  # fmt: skip
