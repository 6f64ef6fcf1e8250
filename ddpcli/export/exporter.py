"""One export: the viewer's library and target checked first, then each run written by the viewer's module; a run
that cannot be written is named (the others still are), and the caller exits 2 when none could be."""

from __future__ import annotations

from collections.abc import Sequence
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

    def export(self, runs: Sequence[ExportRun]) -> Outcome:
        outcome = Outcome()
        for run in runs:
            try:
                what = self._one(run)
            except UserError as error:
                outcome.failures.append(str(error))
                continue
            except Skipped as skip:
                outcome.warnings.append(str(skip))
                continue
            outcome.written.append(f"{run.name} {run.run_id}: {what}")
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
