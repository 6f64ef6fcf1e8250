"""One export: the viewer's library and target checked first, then each run written by the viewer's module; a run
that cannot be written is named (the others still are), and the caller exits 2 when none could be.

The runs are written one at a time, each reported as soon as it is written, so that an export stopped halfway
(Ctrl-C) has said which runs it wrote: exporting again writes the rest."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpcli.errors import UserError
from ddpcli.export import targets
from ddpcli.export.runs import ExportRun, Skipped


@dataclass
class Outcome:
    written: list[str] = field(default_factory=list)  # `<name> <run id>: <what was written>`
    warnings: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def fresh(self) -> int:
        """Runs this export wrote something of (the others were up to date)."""
        return sum(not line.endswith(": up to date") for line in self.written)


class Exporter:
    """A viewer and its target, checked when made (exit 2 before any run is read)."""

    def __init__(self, viewer: str, to: str | None) -> None:
        targets.check_library(viewer)
        self.viewer = viewer
        self._target: Any
        if viewer == targets.MLFLOW:
            from ddpcli.export.to_mlflow import Store

            self._target = Store(targets.mlflow_uri(to))
        else:
            if not to:
                raise UserError(f"export {viewer} needs --to DIR: the folder to write the runs into")
            self._target = targets.folder_target(Path(to))

    @property
    def target(self) -> str:
        return getattr(self._target, "uri", str(self._target))

    def export(
        self, runs: Sequence[ExportRun], outcome: Outcome | None = None, on_written: Callable[[str], None] | None = None
    ) -> Outcome:
        """Write `runs` into `outcome` (a new one by default), calling `on_written` with each run's line as soon as
        the run is written. A KeyboardInterrupt goes through, `outcome` holding what was written before it."""
        outcome = Outcome() if outcome is None else outcome
        for run in runs:
            try:
                what = self._one(run)
            except UserError as error:
                outcome.failures.append(str(error))
                continue
            except Skipped as skip:
                outcome.warnings.append(str(skip))
                continue
            line = f"{run.name} {run.run_id}: {what}"
            outcome.written.append(line)
            if on_written is not None:
                on_written(line)
        return outcome

    def _one(self, run: ExportRun) -> str:
        if self.viewer == targets.TENSORBOARD:
            from ddpcli.export import to_tensorboard

            return to_tensorboard.export(run, self._target)
        if self.viewer == targets.MLFLOW:
            from ddpcli.export import to_mlflow

            return to_mlflow.export(run, self._target)
        from ddpcli.export import to_wandb

        return to_wandb.export(run, self._target)
