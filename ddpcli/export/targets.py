"""The three viewers: the libraries each needs (an optional extra of ddpcli) and where it writes.

Checked before any run is read, so that a missing library or an unusable target costs nothing and writes nothing:
one line naming the pip command that adds the library, or what is wrong with the target (exit 2).
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ddpcli.errors import UserError

TENSORBOARD, MLFLOW, WANDB = "tensorboard", "mlflow", "wandb"


@dataclass(frozen=True)
class Viewer:
    name: str
    modules: tuple[str, ...]  # what must be importable
    extra: str  # ddpcli's optional extra that installs them

    @property
    def pip_command(self) -> str:
        return f"pip install 'ddpcli[{self.extra}]'"


LIBRARIES = {
    TENSORBOARD: Viewer(TENSORBOARD, ("tensorboardX",), "tensorboard"),
    MLFLOW: Viewer(MLFLOW, ("mlflow", "sqlalchemy", "alembic"), "mlflow"),
    WANDB: Viewer(WANDB, ("wandb",), "wandb"),
}


def check_library(viewer: str) -> None:
    """A UserError naming the pip command when the viewer's library is not installed (found without importing)."""
    needs = LIBRARIES[viewer]
    missing = [module for module in needs.modules if importlib.util.find_spec(module) is None]
    if missing:
        raise UserError(f"export to {viewer} needs {', '.join(missing)}, an optional extra: {needs.pip_command}")


def folder_target(path: Path) -> Path:
    """A folder to write into, checked writable without making it (it is made when there is a run to write): a
    temporary folder is made and removed in it, or in its nearest existing parent when it is missing."""
    if path.exists() and not path.is_dir():
        raise UserError(f"--to {path}: not a directory")
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"--to {path}: {existing} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".ddpcli-export-check-", dir=existing))
    except OSError as error:
        raise UserError(f"--to {path}: cannot write there: {error.strerror or error}") from None
    return path


def mlflow_uri(given: str | None) -> str:
    """`--to`, else MLFLOW_TRACKING_URI; one of them is needed (MLflow's own default differs between versions)."""
    uri = given or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        raise UserError("export mlflow needs a tracking URI: --to sqlite:///sweep.db (or http://host:5000), "
                        "or MLFLOW_TRACKING_URI")  # fmt: skip
    return uri


def parse_spec(spec: str) -> tuple[str, str]:
    """`tensorboard:DIR` or `mlflow:URI` (launch --export) as (viewer, target)."""
    viewer, sep, target = spec.partition(":")
    if not sep or viewer not in (TENSORBOARD, MLFLOW) or not target:
        raise UserError(f"--export {spec}: give tensorboard:DIR or mlflow:URI (e.g. mlflow:sqlite:///sweep.db)")
    return viewer, target
