"""Whether two runs started from the same parameters: the first thing to rule out when they diverge. Pure.

The observer hashes rank 0's parameters before the first optimizer step (`observed.initial_params_fingerprint`);
DDP starts every rank from rank 0's, so a seeded model starts alike at every world size. Different fingerprints
mean the runs never trained the same model, whatever else they share: nothing later can make them end alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddpcli.rundir.record import RunRecord


def initial_params_cause(run: RunRecord, partner: RunRecord) -> str | None:
    mine = run.observed.initial_params_fingerprint if run.observed is not None else None
    theirs = partner.observed.initial_params_fingerprint if partner.observed is not None else None
    if not mine or not theirs or mine == theirs:
        return None
    seeds = run.plan.get("seed"), partner.plan.get("seed")
    resumed = [
        record.name
        for record in (run, partner)
        if any(finding.code == "resumed_from_other_run" for finding in record.findings)
    ]
    if resumed:
        why = f"{' and '.join(resumed)} loaded another run's checkpoint at start"
    elif None not in seeds and seeds[0] != seeds[1]:
        why = f"the seeds differ: {seeds[0]} vs {seeds[1]}"
    else:
        why = "the model initialisation is not seeded"
    return f"The runs started from different initial parameters ({why})"
