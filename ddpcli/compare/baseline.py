"""Choosing the baseline: the run every other run is measured against, and how it was chosen."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from ddpcli.compare.runs import ComparedRun, newest, size_key
from ddpcli.errors import ConfigError, OptionError

BaselineCache = dict[str, str | None]  # experiment file and sha256 -> its [baseline].name (None: unreadable)


def choose_baseline(records: Sequence[ComparedRun], requested: str | None = None) -> tuple[ComparedRun, str]:
    """The run the others are measured against, and how it was chosen (said in the table's caption).

    Order: `--baseline NAME`; the baseline of the experiment file the runs came from (as recorded in run.json:
    the file if it is still readable and unchanged, else the run whose plan says `scaling = "baseline"`); the run
    with the smallest world size.
    """
    names = {record.name for record in records}
    if requested is not None:
        matches = [record for record in records if record.name == requested]
        if not matches:
            raise OptionError("baseline", repr(requested), f"no such run here; runs: {', '.join(sorted(names))}")
        return newest(matches), "--baseline"
    votes: Counter[str] = Counter()
    sources: dict[str, str] = {}
    cache: BaselineCache = {}
    for record in sorted(records, key=lambda record: (record.name, record.run_id)):
        name, source = _declared_baseline(record, cache)
        if name in names:
            votes[name] += 1
            sources.setdefault(name, source)
    if votes:
        name = votes.most_common(1)[0][0]
        chosen = newest([record for record in records if record.name == name])
        own_name, own_source = _declared_baseline(chosen, cache)
        return chosen, own_source if own_name == name else sources[name]
    return min(records, key=lambda record: size_key(record, unknown=math.inf)), "smallest world size"


def _declared_baseline(run: ComparedRun, cache: BaselineCache) -> tuple[str | None, str]:
    """The baseline name this run's experiment file declares, or this run's own name if its plan is the baseline."""
    keys = run.keys
    if keys.experiment_file:
        key = f"{keys.experiment_file}\0{keys.experiment_file_sha256}"
        if key not in cache:
            cache[key] = _file_baseline_name(Path(keys.experiment_file), keys.experiment_file_sha256)
        if cache[key]:
            return cache[key], f"baseline of {keys.experiment_file}"
    if keys.scaling == "baseline":
        return keys.name, "the baseline in its run.json plan"
    return None, ""


def _file_baseline_name(path: Path, sha256: str | None) -> str | None:
    """[baseline].name of an experiment file, if it is readable and is still the file the run was launched from."""
    from ddpcli.experiment.loading import load_experiment_file  # here: importing ddpcli.compare stays free of pydantic

    try:
        if sha256 and hashlib.sha256(path.read_bytes()).hexdigest() != sha256:
            return None
        return load_experiment_file(path).baseline.name
    except (OSError, ConfigError):
        return None
