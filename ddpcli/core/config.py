"""The experiment file: pydantic models and a loader whose errors a user can act on.

Every model forbids unknown keys, so a typo (`per_device_batchsize`) is an error with a suggestion instead of a
silently ignored setting. Nothing here imports torch or rich: `ddpcli plan` must start instantly.
"""

from __future__ import annotations

import difflib
import math
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ddpcli.core.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def is_safe_name(value: str) -> bool:
    """Usable as one directory name: letters, digits, '.', '_', '-', and not '.' or '..'."""
    return bool(SAFE_NAME.match(value)) and value not in {".", ".."}


ELASTIC_NNODES = re.compile(r"^(\d+):(\d+)$")
BATCH_FIELDS = ("per_device_batch_size", "grad_accum_steps", "global_batch_size")
# Fields an experiment never inherits: they are derived from the baseline by the scaling rules instead.
DERIVED_FIELDS = (*BATCH_FIELDS, "lr", "warmup_steps")

Optimizer = Literal["sgd", "adam", "adamw", "other"]
Scaling = Literal["auto", "linear", "sqrt", "none"]
PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class RunFields(_Strict):
    """Settings of one run; each may appear in [defaults], [baseline] or an [[experiments]] entry."""

    module: str | None = None
    """Python module to run with `python -m` (e.g. `ddpcli.examples.regression`). Exclusive with `script`."""
    script: str | None = None
    """Path of the training script, relative to the experiment file. Exclusive with `module`."""
    args: list[str] | None = None
    """Arguments for the script; `{placeholders}` are filled from the resolved run (see `ddpcli plan --json`)."""
    env: dict[str, str] | None = None
    """Extra environment variables for every worker."""
    nnodes: PositiveInt | str | None = None
    """Number of nodes (default 1), or `"MIN:MAX"` for an elastic job."""
    nproc_per_node: PositiveInt | None = None
    """Processes (GPUs) on each node (default 1). The world size is nnodes x nproc_per_node."""
    per_device_batch_size: PositiveInt | None = None
    """Samples each process takes per forward/backward (the DataLoader's batch_size)."""
    grad_accum_steps: PositiveInt | None = None
    """Micro-batches accumulated per optimizer step (default 1)."""
    global_batch_size: PositiveInt | None = None
    """Samples per optimizer step over all processes: per_device x accumulation x world size."""
    lr: float | None = None
    """Learning rate. Given on an experiment it is used as is; left out, it is scaled from the baseline's."""
    warmup_steps: NonNegativeInt | None = None
    """Warmup in optimizer steps. Left out on an experiment, the baseline's warmup sample count is kept."""
    optimizer: Optimizer | None = None
    """sgd | adam | adamw | other: decides what `scaling = "auto"` means (default sgd)."""
    scaling: Scaling | None = None
    """auto | linear | sqrt | none: how the learning rate follows the global batch (default auto)."""
    drop_last: bool | None = None
    """DistributedSampler and DataLoader drop_last (default false: the sampler pads by repeating samples)."""
    dataset_size: PositiveInt | None = None
    """Samples in one epoch of the training set."""
    epochs: PositiveInt | None = None
    """Epochs to train; exclusive with max_steps."""
    max_steps: PositiveInt | None = None
    """Optimizer steps to train; exclusive with epochs."""
    seed: int | None = None
    """Seed for model initialisation and data order (default 0), identical on every rank."""
    timeout_s: Annotated[float, Field(gt=0)] | None = None
    """Wall-clock limit of one run in seconds; a run past it is stopped and marked timed_out."""
    max_restarts: NonNegativeInt | None = None
    """torchrun restarts of the worker group after a failure (default 0)."""
    noise_scale: bool | Annotated[float, Field(gt=0)] | None = None
    """true: measure the gradient noise scale during the run. A number: a known B_simple for `plan`."""
    observe: bool | None = None
    """Record what the script really did (batches, steps, lr, samplers; default true). false runs it bare."""

    @field_validator("lr", mode="before")
    @classmethod
    def _lr_is_positive_finite(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return value  # let the type check report it
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"must be a positive finite number, got {value}")
        return float(value)

    @field_validator("nnodes")
    @classmethod
    def _nnodes_form(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, str):
            match = ELASTIC_NNODES.match(value)
            if not match or not 1 <= int(match[1]) <= int(match[2]):
                raise ValueError(f'must be a positive integer or "MIN:MAX" with 1 <= MIN <= MAX, got {value!r}')
        return value

    @field_validator("timeout_s", mode="before")
    @classmethod
    def _int_timeout_is_fine(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _exclusive_pairs(self) -> RunFields:
        if self.module is not None and self.script is not None:
            raise ValueError("set either module or script, not both")
        if self.epochs is not None and self.max_steps is not None:
            raise ValueError("set either epochs or max_steps, not both")
        return self


class Defaults(RunFields):
    """[defaults]: applies to the baseline and every experiment unless they set the field themselves."""

    runs_dir: str = "runs"
    """Where run directories go, relative to the experiment file."""


class RunEntry(RunFields):
    """[baseline] or one [[experiments]] entry."""

    name: str
    """Run name; it becomes a directory name, so letters, digits, '.', '_' and '-' only."""

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not is_safe_name(value):
            raise ValueError(f"{value!r} is not a safe directory name (letters, digits, '.', '_', '-')")
        return value


class Cluster(_Strict):
    """[cluster]: the rendezvous every node of a multi-node run joins (torchrun's c10d)."""

    rdzv_endpoint: str | None = None
    """host:port of the rendezvous, reachable from every node (usually the first node)."""
    rdzv_id: str | None = None
    """Job id shared by all nodes; also names the run directory so every node agrees on it."""
    rdzv_backend: str = "c10d"
    """torchrun rendezvous backend."""

    @field_validator("rdzv_id")
    @classmethod
    def _safe_id(cls, value: str | None) -> str | None:
        if value is not None and not is_safe_name(value):
            raise ValueError(f"{value!r} names the run directory, so letters, digits, '.', '_', '-' only")
        return value


class ExperimentFile(_Strict):
    """The whole experiment file."""

    defaults: Defaults = Field(default_factory=Defaults)
    baseline: RunEntry
    experiments: list[RunEntry] = Field(default_factory=list)
    cluster: Cluster = Field(default_factory=Cluster)

    @model_validator(mode="after")
    def _unique_names(self) -> ExperimentFile:
        seen = {self.baseline.name}
        for entry in self.experiments:
            if entry.name in seen:
                raise ValueError(f"duplicate run name {entry.name!r}")
            seen.add(entry.name)
        return self


def load_experiment_file(path: Path) -> ExperimentFile:
    """Read and validate an experiment file, raising ConfigError with the file and field path."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            path,
            None,
            "no such file; write one with `ddpcli init SCRIPT` (from your training script) "
            "or `ddpcli init --example` (the bundled example)",
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(path, None, f"cannot read it: {error}") from None
    return parse_experiment_text(text, path)


def parse_experiment_text(text: str, path: Path) -> ExperimentFile:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(path, None, f"invalid TOML: {error}") from None
    return validate_experiment_data(data, path)


def validate_experiment_data(data: dict[str, Any], path: Path) -> ExperimentFile:
    try:
        return ExperimentFile.model_validate(data)
    except ValidationError as error:
        raise _config_error(path, data, error) from None


def _config_error(path: Path, data: dict[str, Any], error: ValidationError) -> ConfigError:
    """Turn pydantic's first error into one message: field path, what was wrong, what was expected."""
    detail = error.errors(include_url=False)[0]
    location = tuple(part for part in detail["loc"] if not _is_union_tag(part))
    field_path = format_field_path(location)
    kind = detail["type"]
    if kind == "extra_forbidden":
        return ConfigError(path, field_path, _unknown_key_message(location))
    if kind == "missing":
        return ConfigError(path, field_path, "is required but missing")
    message = detail["msg"].removeprefix("Value error, ")
    if kind not in {"value_error", "assertion_error"}:
        message = f"{message} (got {_lookup(data, location)!r})"
    return ConfigError(path, field_path or _model_level_path(detail["loc"]), message)


def _is_union_tag(part: Any) -> bool:
    # pydantic puts the tried union member into the location: ("nnodes", "int") or ("noise_scale", "bool").
    return isinstance(part, str) and (part in {"int", "str", "bool", "float"} or part.startswith("constrained-"))


def _model_level_path(loc: tuple[Any, ...]) -> str | None:
    return format_field_path(loc) or None


def format_field_path(location: tuple[Any, ...]) -> str:
    """("experiments", 1, "lr") -> "experiments[1].lr"."""
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _lookup(data: Any, location: tuple[Any, ...]) -> Any:
    for part in location:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _unknown_key_message(location: tuple[Any, ...]) -> str:
    key = str(location[-1])
    allowed = _allowed_keys(location[:-1])
    message = "is not a known key"
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if close:
        message += f"; did you mean {close[0]!r}?"
    elif allowed:
        message += f"; allowed here: {', '.join(sorted(allowed))}"
    return message


def _allowed_keys(parent: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] = ExperimentFile
    for part in parent:
        if isinstance(part, int):
            continue
        annotation = model.model_fields[part].annotation
        model = {"defaults": Defaults, "baseline": RunEntry, "experiments": RunEntry, "cluster": Cluster}.get(
            part, annotation if isinstance(annotation, type) else model
        )
    return list(model.model_fields)
