"""The experiment file's pydantic models (ddpcli.experiment.loading reads a file into them).

Every model forbids unknown keys, so a typo (`per_device_batchsize`) is an error with a suggestion instead of a
silently ignored setting. Nothing here imports torch or rich: `ddpcli plan` must start instantly.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from ddpcli.errors import UserError

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover - exercised on Python 3.10 only
    pass

# Every pattern here is used with fullmatch: `$` also matches before a final newline, and "b\n" would pass.
SAFE_NAME = re.compile(r"[A-Za-z0-9._-]+")


def is_safe_name(value: str) -> bool:
    """Usable as one directory name: letters, digits, '.', '_', '-', and not '.' or '..'."""
    return SAFE_NAME.fullmatch(value) is not None and value not in {".", ".."}


ELASTIC_NNODES = re.compile(r"([0-9]+):([0-9]+)")  # ASCII digits: \d also takes other scripts' digits
# Sanity bounds, so that a typo (a world size or a batch size in the wrong field) is an error, not a plan for a
# billion processes. One process per accelerator or CPU core: the largest single machines have a few hundred
# cores and 8-16 accelerators, so 1024 per node leaves room. The largest clusters have about 10,000 nodes
# (Frontier: 9,408), so 100,000 does too.
MAX_NPROC_PER_NODE = 1024
MAX_NNODES = 100_000


def process_counts(values: list[str], minimum: int, why: str = "") -> tuple[int, ...]:
    """`["2,4", "8"]` -> (2, 4, 8): the process counts a flag gives (init's and plan's `--nproc-per-node`), in
    order, without repeats, each from `minimum` to MAX_NPROC_PER_NODE; a bad one is the flag's error (there is no
    file yet to name)."""
    counts: list[int] = []
    for value in values:
        for part in value.split(","):
            text = part.strip()
            if not text.isdigit() or int(text) < minimum:
                raise UserError(f"--nproc-per-node {value!r}: expected whole numbers of {minimum} or more, "
                                f"comma-separated{why}")  # fmt: skip
            if int(text) > MAX_NPROC_PER_NODE:
                raise UserError(f"--nproc-per-node {value!r}: at most {MAX_NPROC_PER_NODE} processes a node (a world "
                                "size in the wrong field?)")  # fmt: skip
            if int(text) not in counts:
                counts.append(int(text))
    return tuple(counts)


BATCH_FIELDS = ("per_device_batch_size", "grad_accum_steps", "global_batch_size")
# Fields an experiment never inherits: they are derived from the baseline by the scaling rules instead.
DERIVED_FIELDS = (*BATCH_FIELDS, "lr", "warmup_steps")

Optimizer = Literal["sgd", "adam", "adamw", "other"]
Scaling = Literal["auto", "linear", "sqrt", "none"]
Workdir = Literal["launch", "run"]
StandIn = Literal["per_device_batch_size", "grad_accum_steps", "lr", "warmup_steps", "max_steps", "epochs"]
PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFinite = Annotated[float, Field(gt=0, allow_inf_nan=False)]


def _no_nul(value: str) -> str:
    if "\0" in value:
        raise ValueError(f"{value!r} holds a NUL byte, which no command line, path or environment variable can")
    return value


def _env_name(value: str) -> str:
    if not value or "=" in value or "\0" in value:
        raise ValueError(f"{value!r} is not an environment variable name (it must be non-empty, without '=' or NUL)")
    return value


def _module_name(value: str) -> str:
    if not all(part.isidentifier() for part in value.split(".")):
        raise ValueError(f"{value!r} is not a Python module name (dotted identifiers, as `python -m` takes)")
    return value


def nnodes_problem(value: object) -> str | None:
    """What is wrong with a node count (N or "MIN:MAX"), or None; shared by the file and `launch --nnodes`."""
    expected = f'a whole number from 1 to {MAX_NNODES}, or "MIN:MAX" with 1 <= MIN <= MAX <= {MAX_NNODES}'
    if isinstance(value, bool) or not isinstance(value, int | str):
        return f"must be {expected}, got {value!r}"
    if isinstance(value, int):
        return None if 1 <= value <= MAX_NNODES else f"must be {expected}, got {value!r}"
    match = ELASTIC_NNODES.fullmatch(value)
    if not match or not 1 <= int(match[1]) <= int(match[2]) <= MAX_NNODES:
        return f"must be {expected}, got {value!r}"
    return None


# Strings that end up in an argv, a path or the environment: a NUL byte would only fail at the start of the run.
Text = Annotated[str, AfterValidator(_no_nul)]
EnvName = Annotated[str, AfterValidator(_env_name)]
ModuleName = Annotated[str, AfterValidator(_no_nul), AfterValidator(_module_name)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class RunFields(_Strict):
    """Settings of one run; each may appear in [defaults], [baseline] or an [[experiments]] entry."""

    module: ModuleName | None = None
    """Python module to run with `python -m` (e.g. `ddpcli.examples.regression`). Exclusive with `script`."""
    script: Text | None = None
    """Path of the training script, relative to the experiment file. Exclusive with `module`."""
    args: list[Text] | None = None
    """Arguments for the script; `{placeholders}` are filled from the resolved run (see `ddpcli plan --json`) and
    take integer/float arithmetic over its numeric keys: `{grad_accum_steps * world_size}`, `{total_steps - 1}`,
    `{lr / 10:.2e}` (numbers, keys and + - * / // % only). A more specific table's `args` replaces the list."""
    extra_args: list[Text] | None = None
    """Arguments appended to the inherited `args` instead of replacing them ([defaults], then [baseline], then the
    experiment's own), with the same `{placeholders}`: `extra_args = ["--compile=False"]`."""
    workdir: Workdir | None = None
    """Working directory of the script: "launch" (default: where `ddpcli launch` runs) or "run" (the run
    directory, so runs never share checkpoints by accident). Either way the script's path is resolved from the
    experiment file's folder, and DDPCLI_EXPERIMENT_DIR names that folder for the script's own relative paths."""
    env: dict[EnvName, Text] | None = None
    """Extra environment variables for every worker (names without `=`; no NUL byte anywhere)."""
    nnodes: PositiveInt | str | None = None
    """Number of nodes (default 1, at most 100,000), or `"MIN:MAX"` for an elastic job."""
    nproc_per_node: Annotated[int, Field(ge=1, le=MAX_NPROC_PER_NODE)] | None = None
    """Processes (GPUs) on each node (default 1, at most 1024). The world size is nnodes x nproc_per_node."""
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
    timeout_s: PositiveFinite | None = None
    """Wall-clock limit of one run in seconds; a run past it is stopped and marked timed_out."""
    max_restarts: NonNegativeInt | None = None
    """torchrun restarts of the worker group after a failure (default 0)."""
    noise_scale: bool | PositiveFinite | None = None
    """true: measure the gradient noise scale during the run. A number: a known B_simple for `plan`."""
    observe: bool | None = None
    """Record what the script really did (batches, steps, lr, samplers; default true). false runs it bare."""
    sample_tokens: PositiveInt | None = None
    """Tokens in one sample (a sequence of T tokens), for a script whose batch is a token budget (build-nanogpt's
    `total_batch_size`): `plan` says each step's tokens beside its samples (`ddpcli init` writes it)."""
    stand_ins: list[StandIn] | None = None
    """Fields whose values here only stand in for what the script decides itself (it has no flag for them, so
    the runs never receive them; `ddpcli init` writes this): `plan` labels them as yours to fill in."""

    @field_validator("lr", mode="before")
    @classmethod
    def _lr_is_positive_finite(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return value  # let the type check report it
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"must be a positive finite number, got {value}")
        return float(value)

    # nnodes and noise_scale are unions: pydantic would report only the first member's complaint ("should be a
    # valid boolean" for noise_scale = inf), so these validators check every form and say what is expected.
    @field_validator("nnodes", mode="before")
    @classmethod
    def _nnodes_form(cls, value: Any) -> Any:
        if value is None:
            return value
        if not isinstance(value, int | str):
            raise ValueError(nnodes_problem(value) or "")
        problem = nnodes_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("noise_scale", mode="before")
    @classmethod
    def _noise_scale_form(cls, value: Any) -> Any:
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int | float) and math.isfinite(value) and value > 0:
            return float(value)
        raise ValueError(f"must be true, false or a positive finite number (a known noise scale), got {value!r}")

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

    runs_dir: Text = "runs"
    """Where run directories go, relative to the experiment file."""


class RunEntry(RunFields):
    """[baseline] or one [[experiments]] entry."""

    name: Text
    """Run name; it becomes a directory name, so letters, digits, '.', '_' and '-' only."""

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not is_safe_name(value):
            raise ValueError(f"{value!r} is not a safe directory name (letters, digits, '.', '_', '-')")
        return value


class Cluster(_Strict):
    """[cluster]: the rendezvous every node of a multi-node run joins (torchrun's c10d)."""

    rdzv_endpoint: Text | None = None
    """host:port of the rendezvous, reachable from every node (usually the first node)."""
    rdzv_id: Text | None = None
    """Job id shared by all nodes; also names the run directory so every node agrees on it."""
    rdzv_backend: Text = "c10d"
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
