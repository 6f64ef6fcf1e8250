"""The resolved run and the plan: the types every layer reads (planning makes them, notes explain them, launcher
starts them, sweep records them).

A leaf module on purpose: planning imports notes and launcher, and they all need ResolvedRun, so it lives here
rather than in planning (which once made planning and notes import each other through a deferred import).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddpcli.errors import ConfigError

if TYPE_CHECKING:  # only an annotation: importing the run types must not load pydantic (see tests/test_layers.py)
    from ddpcli.experiment.schema import Cluster


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """The plan's numbers of one run: `as_json()` is the RUN object of `ddpcli plan --json` and run.json's `plan`.

    The fields are the JSON's keys in its order (a contract, docs/contracts.md): the plan's numbers, then what the
    training script needs to reproduce them (data, order, stopping)."""

    name: str
    nnodes: int
    nproc_per_node: int
    world_size: int
    per_device_batch_size: int
    grad_accum_steps: int
    global_batch_size: int
    batch_scale: float
    scaling: str
    lr: float
    warmup_steps: int
    samples_per_rank: int | None
    padded_samples: int | None
    dropped_samples: int | None
    steps_per_epoch: int | None
    total_steps: int | None
    notes: list[str] = field(default_factory=list)
    min_nnodes: int
    seed: int
    dataset_size: int | None
    epochs: int | None
    max_steps: int | None
    optimizer: str
    drop_last: bool

    @property
    def is_elastic(self) -> bool:
        return self.min_nnodes != self.nnodes

    @property
    def is_multi_node(self) -> bool:
        return self.nnodes > 1 or self.is_elastic

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LaunchSettings:
    """How to start one run, beyond its plan: `as_json()` is run.json's `launch`, what `--resume` rebuilds the
    command from."""

    module: str | None = None
    script: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    max_restarts: int = 0
    noise_scale: bool = False
    observe: bool = True
    workdir: str = "launch"  # "launch": where ddpcli launch runs; "run": the run directory

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ResolvedRun:
    """One run with every number decided: its plan and how to start it, as run.json records them (`plan`,
    `launch`, `timeout_s`), plus what only `ddpcli plan` reads from the file and nothing records."""

    plan: RunPlan
    launch: LaunchSettings
    timeout_s: float | None = None  # run.json's own top-level field
    known_noise_scale: float | None = None  # the file's `noise_scale` as a number: a known B_simple for the outlook
    stand_ins: tuple[str, ...] = ()  # plan fields whose values only stand in for the script's own (plan labels them)
    sample_tokens: int | None = None  # tokens per sample, where the script counts its batch in tokens
    arg_fields: tuple[str, ...] = ()  # where the file holds each of launch.args (`defaults.extra_args[0]`), for errors

    @property
    def name(self) -> str:
        """The run's name (its plan's): what directories, records and messages call it by."""
        return self.plan.name


@dataclass(frozen=True)
class Plan:
    file: str
    baseline: ResolvedRun
    experiments: list[ResolvedRun]
    runs_dir: Path
    cluster: Cluster

    @property
    def runs(self) -> list[ResolvedRun]:
        return [self.baseline, *self.experiments]

    def select(self, names: list[str] | None) -> list[ResolvedRun]:
        """The runs named (in file order, baseline first), or all of them; unknown names are an error."""
        if not names:
            return self.runs
        known = {run.name for run in self.runs}
        unknown = [name for name in names if name not in known]
        if unknown:
            raise ConfigError(
                self.file,
                None,
                f"no run named {', '.join(map(repr, unknown))}; "
                f"runs in this file: {', '.join(run.name for run in self.runs)}",
            )
        return [run for run in self.runs if run.name in names]


def samples_kept_warmup(baseline: RunPlan, global_batch: int) -> int:
    """ceil(baseline warmup x baseline global batch / global batch), in integers: the warmup steps that keep
    the baseline's number of warmup samples (float division can round 15 up to 16)."""
    return -(-baseline.warmup_steps * baseline.global_batch_size // global_batch)
