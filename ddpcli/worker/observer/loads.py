"""The files a script reads with torch.load before its first optimizer step: the checkpoint it resumed from.

A script that resumes from a file left by another run (the DDP tutorial's `snapshot.pt` in the shared working
directory) trains fewer steps than planned, from other weights. Each file is recorded with its path and
modification time, and with what ddpcli can tell about who wrote it: the run whose directory holds it, or the run
of this sweep that was running when it was written (from the sibling run.json files), and whether it was written
after this sweep began (run ids start with the sweep's UTC start time); a file in the run's own directory is its
own checkpoint (`own_run`: a restart or a resume goes on from it). Read once per torch.load: no cost per step.
"""

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ddpcli.rundir.layout import RUN_FILE


def loaded_file(source: Any, run_dir: Path) -> dict[str, Any] | None:
    """What torch.load(source) read, or None for a buffer without a name."""
    name = source if isinstance(source, str | os.PathLike) else getattr(source, "name", None)
    if not isinstance(name, str | os.PathLike):
        return None
    path = Path(name).resolve()
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return None
    found: dict[str, Any] = {"path": str(path), "mtime": round(mtime, 3)}
    if run_dir.resolve() in path.parents:  # its own checkpoint: a torchrun restart or `ddpcli launch --resume`
        found["own_run"] = True
        return found
    sweep_start = _sweep_start(run_dir.name)
    if sweep_start is not None:
        found["during_sweep"] = mtime >= sweep_start
    writer = _run_holding(path, run_dir) or _run_running_at(mtime, run_dir)
    if writer:
        found["written_by"] = writer
    return found


def _sweep_start(run_id: str) -> float | None:
    try:
        stamp = datetime.strptime(run_id.split("-")[0], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    return stamp.timestamp()


def _describe(record_path: Path) -> str | None:
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        return f"{record['name']} ({record['run_id']})"
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _run_holding(path: Path, run_dir: Path) -> str | None:
    """The other run whose directory holds the file."""
    for parent in path.parents:
        if parent == run_dir.resolve():
            return None
        if (parent / RUN_FILE).is_file():
            return _describe(parent / RUN_FILE)
    return None


def _run_running_at(mtime: float, run_dir: Path) -> str | None:
    """The run of these runs' directory (`<runs>/<name>/<id>`) that was running when the file was written."""
    root = run_dir.resolve().parent.parent
    for record_path in sorted(root.glob(f"*/*/{RUN_FILE}")):
        if record_path.parent == run_dir.resolve():
            continue
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
            started = datetime.fromisoformat(record["started_at"]).timestamp()
            ended = datetime.fromisoformat(record["ended_at"]).timestamp() if record.get("ended_at") else None
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if started <= mtime and (ended is None or mtime <= ended + 1.0):
            return f"{record.get('name')} ({record.get('run_id')})"
    return None
