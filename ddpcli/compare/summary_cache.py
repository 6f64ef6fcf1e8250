"""compare's summary of a run's metrics, kept in the run directory (summary.json) so a later compare reads one small
file instead of metrics.jsonl.

A cache of whatever ddpcli.compare.metrics derives, never a second derivation: the file holds the MetricsSummary
and noise-scale reading that summarize_run returned, and is used only while everything it was derived from is the
same: run.json and metrics.jsonl (size, mtime and ctime in ns, inode), the directory's path (warnings name it), the
baseline sample count it was asked for, whether every line was parsed, the global batch that fills in missing
`samples`, and this module's VERSION (bump it whenever what compare derives changes). Anything else (a missing,
truncated, foreign or unparsable file, a field of the wrong type) is no summary: compare derives it again and
rewrites the file, so a stale or corrupt summary never shows a number. Plots (--plot) always
derive. Writing is best effort (a read-only runs root just derives each time), atomic (a temporary file renamed),
and never done for a run still running or lost (its files still change) nor while a source changed less than RACY_S
ago: a file rewritten at the same size within one tick of the filesystem's coarse clock keeps its stamps (git's
"racily clean" entries), so only a file that has been still for longer than a tick is trusted by its stamps.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ddpcli.rundir.layout import METRICS_FILE, RUN_FILE, SUMMARY_FILE

VERSION = 3  # 2: the run's keys kept beside the metrics summary, under `index`; 3: a row of no finite samples warns
RACY_S = 2.0  # a source changed more recently than this is not summarised into the file (see above)
SOURCES = (RUN_FILE, METRICS_FILE)
INDEX_START = '{"index": '  # how json.dumps begins a summary whose first key is the index
_DECODER = json.JSONDecoder()
FIELDS = (
    "rows", "steps", "samples_seen", "final_loss", "last_time", "first_samples", "first_time", "loss_at_target",
    "loss_points", "lr_points", "skipped", "full_parse",
)  # fmt: skip


def cache_key(run_dir: Path, derived_with: dict[str, Any]) -> dict[str, Any] | None:
    """What a summary of this run is valid for; None when a source cannot be read (then nothing is cached)."""
    stamps = _stamps(run_dir, SOURCES)
    return {"version": VERSION, "sources": stamps, **derived_with} if stamps is not None else None


def _stamps(run_dir: Path, names: tuple[str, ...]) -> dict[str, list[int] | None] | None:
    """Each file's size, mtime and ctime in ns, inode (None: no such file); None when one cannot be read."""
    stamps: dict[str, list[int] | None] = {}
    for name in names:
        try:
            stat = (run_dir / name).stat()
        except FileNotFoundError:
            stamps[name] = None
            continue
        except OSError:
            return None
        stamps[name] = [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]
    return stamps


def index_key(run_dir: Path, summary_key: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """What the run's keys are valid for: run.json unchanged, read through a path ending in the same two names
    (a record without a name or id takes them from there). run.json's stamp is the one in `summary_key` (the
    summary the keys are written with), else read now; None without a run.json."""
    stamps = summary_key["sources"] if summary_key is not None else _stamps(run_dir, (RUN_FILE,))
    if stamps is None or stamps[RUN_FILE] is None:
        return None
    return {"version": VERSION, "sources": {RUN_FILE: stamps[RUN_FILE]}, "path": [run_dir.parent.name, run_dir.name]}


def read_index(run_dir: Path, key: dict[str, Any]) -> Any:
    """The run's keys kept for `key` (to be checked by ddpcli.compare.run_keys), or None.

    `write_summary` writes the index first, so only it is parsed (`raw_decode` stops at its end): choosing the runs
    does not parse every summary's curve points a second time. A file that does not start so has no index."""
    try:
        text = (run_dir / SUMMARY_FILE).read_text(encoding="utf-8")
        index, _ = _DECODER.raw_decode(text, len(INDEX_START)) if text.startswith(INDEX_START) else (None, 0)
    except (OSError, ValueError):
        return None
    return index.get("values") if isinstance(index, dict) and index.get("key") == key else None


def _read(run_dir: Path) -> Any:
    try:
        return json.loads((run_dir / SUMMARY_FILE).read_bytes())
    except (OSError, ValueError):
        return None


def settled(key: dict[str, Any]) -> bool:
    """Every source has been unchanged for RACY_S: a summary written now cannot hide a same-tick rewrite."""
    now = time.time_ns()
    stamps = [stamp for stamp in key["sources"].values() if stamp is not None]
    return all(now - max(stamp[1], stamp[2]) > RACY_S * 1e9 for stamp in stamps)


def read_summary(run_dir: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """The cached values for `key`, or None (no file, another key, anything malformed)."""
    data = _read(run_dir)
    if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("values"), dict):
        return None
    values = data["values"]
    return values if _well_formed(values) else None


def write_summary(
    run_dir: Path, key: dict[str, Any], values: dict[str, Any], index: tuple[dict[str, Any], dict[str, Any]] | None
) -> bool:
    """Keep `values` for `key`, and the run's keys (`index`: key, values), when the sources have settled; a failure
    to write is no error (derived next time). Whether they were kept."""
    if not settled(key):
        return False
    path = run_dir / SUMMARY_FILE
    temporary = path.with_name(f".{SUMMARY_FILE}.{os.getpid()}.tmp")
    kept: dict[str, Any] = {"index": {"key": index[0], "values": index[1]}} if index is not None else {}
    kept.update(key=key, values=values)  # after the index: read_index parses only what comes first
    try:
        text = json.dumps(kept, allow_nan=False)  # a NaN loss: not kept, derived each time
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except (OSError, ValueError):
        temporary.unlink(missing_ok=True)
        return False
    return True


# json.loads makes exactly these types (no subclass but bool, which is its own type): a type test is exact here,
# and several times faster than isinstance over the ~260 numbers of a summary (5,000 summaries a compare).
OPTIONAL_NUMBERS = frozenset({int, float, type(None)})
OPTIONAL_INT = frozenset({int, type(None)})


def _well_formed(values: dict[str, Any]) -> bool:
    """Every field present with the type compare's summary has (numbers may be NaN: json reads NaN back)."""
    checks = {
        "rows": lambda v: type(v) is int,
        "steps": lambda v: type(v) in OPTIONAL_INT,
        "full_parse": lambda v: type(v) is bool,
        "skipped": lambda v: type(v) is list and all(type(item) is str for item in v),
        "loss_points": lambda v: type(v) is list and all(type(item) in OPTIONAL_NUMBERS for item in v),
        "lr_points": _lr_points,
        "noise_scale": lambda v: type(v) in OPTIONAL_NUMBERS,
        "noise_problem": lambda v: v is None or type(v) is str,
    }
    for name in (*FIELDS, "noise_scale", "noise_problem"):
        if name not in values:
            return False
        check = checks.get(name, lambda v: type(v) in OPTIONAL_NUMBERS)
        if not check(values[name]):
            return False
    return True


def _lr_points(value: Any) -> bool:
    """A list of [samples, lr, step]: numbers or null, the step a whole number."""
    if type(value) is not list:
        return False
    for item in value:
        if type(item) is not list or len(item) != 3:
            return False
        samples, lr, step = item
        if type(samples) not in OPTIONAL_NUMBERS or type(lr) not in OPTIONAL_NUMBERS or type(step) not in OPTIONAL_INT:
            return False
    return True
