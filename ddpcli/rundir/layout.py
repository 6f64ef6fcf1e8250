"""The run directory's layout: every path and name `launch` writes and `compare`, `slurm` and the worker read.

One run lives in `<runs_dir>/<name>/<run_id>/`:
  run.json          the record: plan, command, status, timings, failures, observed, findings (ddpcli.rundir.record)
  metrics.jsonl     one JSON object per optimizer step, merged from every rank's observations after the run
  observed/         rank-<r>.jsonl: what each rank's observer recorded (ddpcli.rundir.merge reads them)
  logs/             torchrun's per-rank stdout/stderr (and error.json files)
  final_params.pt   rank 0's final parameters on CPU
  checkpoint.pt     the runtime helper's checkpoint (resume)
  summary.json      compare's summary of a finished run's metrics, valid while run.json and metrics.jsonl are unchanged
docs/contracts.md is the public description; this module is the one place the names are spelled.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

RUN_FILE = "run.json"
METRICS_FILE = "metrics.jsonl"
PARAMS_FILE = "final_params.pt"
SHARDS_SUFFIX = ".shards.json"  # a parameter file's shard map: its name with .pt replaced by this


def rank_params_file(rank: int) -> str:
    """Where a rank other than 0 saves its local shards (sharded runs only), so compare can gather the full tensors
    from every rank's pieces on one node."""
    return f"final_params.rank-{rank}.pt"


def shards_file(params: Path) -> Path:
    """Beside a parameter file of local shards (FSDP2's DTensors, as plain tensors): per name, the shard's offset in
    the full tensor and the full shape (final_params.pt -> final_params.shards.json)."""
    return params.with_name(params.name.removesuffix(".pt") + SHARDS_SUFFIX)


SUMMARY_FILE = "summary.json"  # compare's cache (ddpcli.compare.summary_cache)
CHECKPOINT_FILE = "checkpoint.pt"  # written by runtime.Context.checkpoint, read by resume
LOGS_DIR = "logs"
OBSERVED_DIR = "observed"
PROGRESS_KINDS = ("step", "log")  # the rows `ddpcli launch` shows progress from while the run goes on


def rank_file_name(rank: int) -> str:
    return f"rank-{rank}.jsonl"


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def new_run_id(now: datetime | None = None) -> str:
    """`20261130T120501Z-3fa2c1`: sorts by start time; the random part keeps two launches apart."""
    stamp = (now or utc_now()).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}"


def is_run_dir(path: Path) -> bool:
    return (path / RUN_FILE).is_file()


def find_run_dirs(root: Path) -> Iterator[Path]:
    """Run directories under a runs root (`<root>/<name>/<run_id>/`), or the root itself if it is one."""
    if is_run_dir(root):
        yield root
        return
    for candidate in sorted(root.glob(f"*/*/{RUN_FILE}")):
        yield candidate.parent
