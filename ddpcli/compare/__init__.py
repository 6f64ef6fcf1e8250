"""Line finished runs up against each other: throughput, loss at equal samples seen, and parameter equivalence.

Pure logic on purpose (no torch, no rich): `ddpcli compare` parses flags, calls `collect_runs` and `compare_runs`,
and renders what they return. Parameter files are the one thing that needs torch; they are read through
`ddpcli.rundir.params`, imported only when two parameter files really have to be compared.

Modules, in the order they build on each other:
- runs: RunRecord (run.json), finding run directories, the newest run of each name, why a run did not complete.
- baseline: choosing the run the others are measured against.
- curve: a loss curve read lazily or from parsed rows; loss at a sample count, evenly spaced points.
- metrics: MetricsSummary of a metrics.jsonl (the fast reader and its careful fallback), RunSummary.
- equivalence: ParamDiff, the single-process partner of a multi-process run, the verdict.
- row: ComparisonRow (ROW_KEYS of --json and --csv) and its sparkline.
- notes: the plain-word notes under the table.
- table: Comparison and compare_runs, speedup and scaling efficiency.

Definitions (the numbers people quote, so they are fixed here and documented in `ddpcli compare --help`):
- samples_per_s = (samples of the last row - samples of the first) / (time of the last - time of the first):
  steady training throughput. The first logged step is left out because its `time` (seconds since
  `runtime.init()`) carries the one-off costs that do not scale (process-group set-up, data loading start, the
  first forward/backward, DDP's bucket building); `wall_time_s` (run.json) includes everything. With a single
  row it is samples / time.
- speedup = samples_per_s / the baseline's samples_per_s.
- scaling_efficiency = speedup / (world_size / the baseline's world_size): 1.0 is perfect linear scaling.
- loss_at_baseline_samples: the run's loss linearly interpolated (on samples seen) at the baseline's final sample
  count; null when the run did not get that far (or had not logged a row before it).
- equivalence: a multi-process run is checked against a single-process run with the same global batch, lr
  (math.isclose) and steps; `equivalent` when the largest absolute difference over every tensor of the two final
  state_dicts is <= atol, `diverged` otherwise (or when their names or shapes differ).
"""

from ddpcli.compare.baseline import choose_baseline
from ddpcli.compare.curve import Curve, Row, loss_at, resample
from ddpcli.compare.equivalence import (
    DEFAULT_ATOL,
    DIVERGED,
    EQUIVALENT,
    ParamDiff,
    ParamDiffFn,
    compare_params,
    find_partner,
    verdict,
)
from ddpcli.compare.metrics import (
    PLOT_POINTS,
    SPARK_POINTS,
    MetricsSummary,
    RunSummary,
    load_run,
    resolve_restarts,
    summarize_metrics,
    summarize_run,
)
from ddpcli.compare.notes import STATUS_WORDS, comparison_notes, divergence_causes, divergence_note
from ddpcli.compare.row import JSON_KEYS, ROW_KEYS, SPARK_BLOCKS, SPARK_WIDTH, ComparisonRow, sparkline
from ddpcli.compare.runs import (
    BATCHNORM_FLAGS,
    NO_FILE,
    SYNC_BN_FLAGS,
    RunRecord,
    collect_runs,
    read_run_record,
    select_newest,
    status_reason,
)
from ddpcli.compare.table import Comparison, compare_runs, scaling_efficiency, speedup

__all__ = [
    "BATCHNORM_FLAGS",
    "DEFAULT_ATOL",
    "DIVERGED",
    "EQUIVALENT",
    "JSON_KEYS",
    "NO_FILE",
    "PLOT_POINTS",
    "ROW_KEYS",
    "SPARK_BLOCKS",
    "SPARK_POINTS",
    "SPARK_WIDTH",
    "STATUS_WORDS",
    "SYNC_BN_FLAGS",
    "Comparison",
    "ComparisonRow",
    "Curve",
    "MetricsSummary",
    "ParamDiff",
    "ParamDiffFn",
    "Row",
    "RunRecord",
    "RunSummary",
    "choose_baseline",
    "collect_runs",
    "compare_params",
    "compare_runs",
    "comparison_notes",
    "divergence_causes",
    "divergence_note",
    "find_partner",
    "load_run",
    "loss_at",
    "read_run_record",
    "resample",
    "resolve_restarts",
    "scaling_efficiency",
    "select_newest",
    "sparkline",
    "speedup",
    "status_reason",
    "summarize_metrics",
    "summarize_run",
    "verdict",
]
