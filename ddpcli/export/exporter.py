"""One export: the viewer's library and target checked first, then each run written by the viewer's module; a run
that cannot be written is named (the others still are), and the caller exits 2 when none could be.

Nothing is made before there is a run to write (a folder target, a new SQLite store); the runs are written under
the target's lock (ddpcli.export.lock), one at a time, each reported as soon as it is written, so that an export
stopped halfway (Ctrl-C) has said which runs it wrote: exporting again writes the rest. A Ctrl-C while a run is
written takes effect once it is written (a second one at once): the viewers' libraries write from threads that a
KeyboardInterrupt raised inside their calls can leave waiting for ever (tensorboardX's queue: 8 of 40 writers
interrupted at random times hung)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddpcli.errors import UserError
from ddpcli.export import targets
from ddpcli.export.lock import held
from ddpcli.export.runs import ExportRun, Skipped

FOLDER_LOCK = ".ddpcli-export.lock"  # in a TensorBoard or W&B target


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
    """A viewer and its target, checked when made (exit 2 before any run is read); `notify` hears what the user
    should know while it works (another export holds the target)."""

    def __init__(self, viewer: str, to: str | None, notify: Callable[[str], None] = lambda message: None) -> None:
        targets.check_library(viewer)
        self.viewer = viewer
        self.notify = notify
        self._target: Any
        if viewer == targets.MLFLOW:
            from ddpcli.export.to_mlflow import Store

            self._target = Store(targets.mlflow_uri(to), notify)
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
        if not runs:
            return outcome
        with self._lock():
            for run in runs:
                what: str | None = None
                with ctrl_c_after() as came:
                    try:
                        what = self._one(run)
                    except UserError as error:
                        outcome.failures.append(str(error))
                    except Skipped as skip:
                        outcome.warnings.append(str(skip))
                if what is not None:
                    line = f"{run.name} {run.run_id}: {what}"
                    outcome.written.append(line)
                    if on_written is not None:
                        on_written(line)
                if came:
                    raise KeyboardInterrupt
        return outcome

    def _lock(self) -> Any:
        if self.viewer == targets.MLFLOW:
            path = self._target.lock_path
            return nullcontext() if path is None else held(path, self.target, self.notify)
        return held(self._target / FOLDER_LOCK, self.target, self.notify)

    def _one(self, run: ExportRun) -> str:
        if self.viewer == targets.TENSORBOARD:
            from ddpcli.export import to_tensorboard

            return to_tensorboard.export(run, self._target)
        if self.viewer == targets.MLFLOW:
            from ddpcli.export import to_mlflow

            return to_mlflow.export(run, self._target)
        from ddpcli.export import to_wandb

        return to_wandb.export(run, self._target)


@contextmanager
def ctrl_c_after() -> Iterator[list[int]]:
    """Hold a Ctrl-C (SIGINT) that comes inside the block: the list yielded gets its signal number, for the caller
    to raise KeyboardInterrupt once the block is done; a second Ctrl-C raises at once (the default handler is back
    after the first). Only where Python's own handler is in place, in the main thread: elsewhere the block runs
    as it is (a signal handler can be set in the main thread alone, and a caller's own handler is theirs)."""
    came: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield came
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        yield came
        return

    def hold(signum: int, frame: object) -> None:
        came.append(signum)
        signal.signal(signal.SIGINT, previous)

    signal.signal(signal.SIGINT, hold)
    try:
        yield came
    finally:
        signal.signal(signal.SIGINT, previous)
