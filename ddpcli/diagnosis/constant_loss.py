"""loss_constant: the loss was one and the same number at every optimizer step. Pure.

Different batches give different losses for any loss that depends on the model's output; a loss that never
moved over several steps measures nothing the run trains. The DDP tutorial's toy is the case that made this a
finding: cross_entropy over a one-unit output is 0 whatever the model does, and its flat curve at 0 looked like a
run that had converged. Watched as metrics.jsonl's rows stream to the file (the loss there is the mean over
ranks), so it costs no second pass over the rank files.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ddpcli.jsonvalues import finite_or_none
from ddpcli.rundir.record import Finding

MIN_STEPS = 3  # a float loss equal to the bit on 3 different batches is no coincidence


class LossWatch:
    """The finite losses of metrics rows as they pass: their count and whether any differed from the first."""

    def __init__(self) -> None:
        self.rows = 0
        self.count = 0
        self.first: float | None = None
        self.varied = False

    def watch(self, rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for row in rows:
            self.rows += 1
            loss = finite_or_none(row.get("loss"))
            if loss is not None:
                self.count += 1
                if self.first is None:
                    self.first = loss
                elif loss != self.first:
                    self.varied = True
            yield row

    def finding(self) -> Finding | None:
        if self.varied or self.first is None or self.count < MIN_STEPS:
            return None
        steps = f"{self.count} optimizer steps" + (" with a loss" if self.count < self.rows else "")
        return Finding(
            code="loss_constant",
            severity="warning",
            message=f"the loss was {self.first:g} at every one of the {steps}: it does not depend on what the "
            "model outputs for these batches, so it trains nothing it measures (cross_entropy over a single "
            "class is always 0; a constant, or a tensor detached from the model)",
        )
