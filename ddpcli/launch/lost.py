"""A lost run (its launcher killed before the run ended, so nothing merged what its observers wrote) is shown with
what they wrote: steps, samples, loss and findings, never as unobserved.

Its record is finished in passing (observed, findings and metrics.jsonl written, the status left `running`, which
compare shows as `lost`: nobody knows how it ended) once no process of the run is left on this host; while some
are (workers orphaned by an older ddpcli), the merge is shown but nothing is written under their feet.

Launch's: it finishes what a launch could not, and which processes are still the run's is the supervisor's
knowledge. compare and export get it from the command (`finish_lost`), so compare reaches into no launch module.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ddpcli.diagnosis.parallel import PortAdvice, plain_port_clause
from ddpcli.rundir.layout import OBSERVED_DIR, RUN_FILE
from ddpcli.rundir.record import RunRecord


def with_observations(record: RunRecord, run_dir: Path, port_advice: PortAdvice = plain_port_clause) -> RunRecord:
    """The record of a lost run with its observations merged (and written back when it is safe); `port_advice` as
    a launch's (ddpcli.diagnosis.finish)."""
    if record.observed is not None or not (run_dir / OBSERVED_DIR).is_dir():
        return record
    # Imported here: most compares meet no lost run, and the merge's modules cost start-up time.
    from ddpcli.diagnosis.finish import observe, observe_or_say_why
    from ddpcli.launch.supervisor import run_dir_marker, worker_pids

    if worker_pids(run_dir_marker(run_dir)):
        try:
            return observe(record, run_dir, write=False, port_advice=port_advice)
        except Exception:  # shown as it is; the launch that finishes it will say what failed
            return record
    finished = observe_or_say_why(record, run_dir, port_advice)
    if finished.observed is not None or finished.findings != record.findings:
        with contextlib.suppress(OSError):  # a read-only runs dir: shown, not written
            finished.write(run_dir / RUN_FILE)
    return finished
