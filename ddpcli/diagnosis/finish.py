"""The end of a run's record: what the observers saw merged into it, by `ddpcli launch` when torchrun ends, or by
any later command that finds the run lost (its launcher killed before it could). No torch, no rich.

`port_advice`: how `ddpcli port` would make a script with no DDP data-parallel, in the port's own words, which the
command finishing the run hands in (ddpcli.diagnosis.parallel); the plain pointer without it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ddpcli.diagnosis.constant_loss import LossWatch
from ddpcli.diagnosis.findings import run_findings
from ddpcli.diagnosis.nonfinite import NonFiniteWatch
from ddpcli.diagnosis.parallel import PortAdvice, plain_port_clause
from ddpcli.rundir.layout import METRICS_FILE
from ddpcli.rundir.merge import summarize
from ddpcli.rundir.merged_rows import iter_merged_metrics
from ddpcli.rundir.metrics import write_metrics
from ddpcli.rundir.observations import main_rank, read_observations
from ddpcli.rundir.parallel import check_run
from ddpcli.rundir.record import Finding, RunRecord
from ddpcli.rundir.timeline import ascending


def observe_or_say_why(
    record: RunRecord,
    run_dir: Path,
    port_advice: PortAdvice = plain_port_clause,
    begin: Callable[[], None] = lambda: None,
) -> RunRecord:
    """`observe`, which must never lose the run: whatever fails in the merge (a full disk, a bug, no memory), the
    record keeps how training ended and gets an `observer_error` finding with the error in one line. `begin` runs
    first, inside that protection (launch's: a stop that came since torchrun ended stops the merge there)."""
    try:
        begin()
        return observe(record, run_dir, port_advice=port_advice)
    except Exception as error:  # training is over and recorded; the merge is extra (a stop signal ends it too)
        return with_finding(record, "observer_error", "warning", f"merging what the observers recorded failed, "
                            f"training was not affected: {one_line(error)}")  # fmt: skip


def observe(
    record: RunRecord, run_dir: Path, write: bool = True, port_advice: PortAdvice = plain_port_clause
) -> RunRecord:
    """The record with what the run did (`observed`, `findings`), and metrics.jsonl merged from every rank
    (streamed from the rank files to the file: memory does not grow with the steps). `write=False`: the record
    only (its workers may still be writing)."""
    ranks = read_observations(run_dir)
    parallel = check_run(ranks)  # once: the merge, rank 0's metrics and the findings all need it
    observed = summarize(ranks, parallel)
    if observed is None:
        return record
    main = main_rank(ranks)
    metrics = run_dir / METRICS_FILE
    ours = record.metrics_from_observations or not metrics.exists()  # a script that writes its own keeps it
    written = write and ours and main is not None and bool(main.logs or main.steps)
    loss, finite = LossWatch(), NonFiniteWatch()
    if written:
        rows = iter_merged_metrics(ranks, parallel)  # rank 0's model's
        write_metrics(metrics, finite.watch(loss.watch(rows)))
    elif main is not None:
        finite.scan(ascending(main.steps))
    script = record.launch.get("script") or record.launch.get("module")
    args = record.launch.get("args")
    args = [str(arg) for arg in args] if isinstance(args, list) else None
    completed = record.status == "completed"
    findings = run_findings(record.plan, observed, ranks, completed, parallel, script, args, port_advice)
    findings += [found for found in (finite.finding(), loss.finding()) if found is not None]
    return record.model_copy(update={"observed": observed, "findings": findings, "metrics_from_observations": written})


def not_written(record: RunRecord, path: Path, error: OSError) -> RunRecord:
    """The record whose final run.json could not be written (a full disk), with a `record_not_written` finding: the
    run's result still reaches the user (the file stays as written at the start: `running`)."""
    return with_finding(record, "record_not_written", "error", f"{path} could not be written: {one_line(error)}")


def with_finding(record: RunRecord, code: str, severity: str, message: str) -> RunRecord:
    finding = Finding(code=code, severity=severity, message=message)  # type: ignore[arg-type]
    return record.model_copy(update={"findings": [*record.findings, finding]})


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or "(no message)"
    return f"{type(error).__name__}: {text[:300]}"
