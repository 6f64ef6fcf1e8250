"""loss_not_finite: the loss became NaN or inf at some optimizer step. Pure.

A diverged run is a result, not a broken record: every step stays in metrics.jsonl (its loss "nan" or "inf"), the
ranks that averaged the same NaN gradients still count as one data-parallel training (ddpcli.rundir.parallel
compares them as bit patterns), and this finding names the first step whose loss was not finite and whether it
was so from the first step (parameters that were never initialised, inputs with NaN) or became so later (a
learning rate too high, an fp16 overflow). Watched as metrics.jsonl's rows stream by (the mean over ranks is
"nan" when any rank's loss was), or over rank 0's step rows where the script writes its own metrics.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ddpcli.jsonvalues import finite_or_none, whole_or_none
from ddpcli.rundir.record import Finding

NOT_FINITE = ("nan", "inf", "-inf")


class NonFiniteWatch:
    """The first step whose loss was not finite, the steps with a finite loss before it, and how many were not."""

    def __init__(self) -> None:
        self.finite_before = 0  # steps with a finite loss before the first non-finite one
        self.first: tuple[int, str, float | None] | None = None  # (step, "nan" | "inf" | "-inf", lr)
        self.count = 0
        self.steps = 0

    def watch(self, rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for row in rows:
            self.see(row)
            yield row

    def scan(self, rows: Iterable[tuple[int, dict[str, Any]]]) -> None:
        """Rank 0's (step, row) pairs, where no merged metrics were written."""
        for step, row in rows:
            self.see({**row, "step": step})

    def see(self, row: dict[str, Any]) -> None:
        loss, step = row.get("loss"), whole_or_none(row.get("step"))
        if loss is None or step is None:
            return
        self.steps += 1
        kind = _not_finite(loss)
        if kind is None:
            if self.first is None:
                self.finite_before += 1
            return
        self.count += 1
        if self.first is None:
            self.first = (step, kind, _lr(row.get("lr")))

    def finding(self) -> Finding | None:
        if self.first is None:
            return None
        step, kind, lr = self.first
        value = "NaN" if kind == "nan" else kind
        at_lr = f" (lr {lr:g} at that step)" if lr is not None else ""
        if self.finite_before == 0:
            why = (
                "it was not finite from the first step on: the initial parameters or the inputs already give a "
                "non-finite loss (parameters left uninitialised, torch.empty or a model built on the meta device and "
                "never initialised; NaN in the data)"
            )
        else:
            why = (
                f"the {self.finite_before} step{'s' if self.finite_before > 1 else ''} before it had a finite loss, "
                f"so training diverged{at_lr}: a learning rate too high for this batch, an fp16 overflow without a "
                "GradScaler, or a division by zero in the loss"
            )
        return Finding(
            code="loss_not_finite", severity="error",
            message=f"the loss was {value} at optimizer step {step}, {self.count} of the {self.steps} steps with a "
            f"loss were not finite; {why}",
        )  # fmt: skip


def _not_finite(loss: Any) -> str | None:
    """The kind ("nan", "inf" or "-inf") of a loss the stream wrote as not finite; None otherwise."""
    if isinstance(loss, str):
        return loss if loss in NOT_FINITE else None
    if isinstance(loss, float) and finite_or_none(loss) is None:
        return "nan" if loss != loss else ("inf" if loss > 0 else "-inf")
    return None


def _lr(value: Any) -> float | None:
    if isinstance(value, list):
        value = value[0] if value else None
    return finite_or_none(value)
