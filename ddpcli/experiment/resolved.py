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

# The keys of one run in `ddpcli plan --json`, in order. Other commands and people's scripts read these names.
PLAN_KEYS = (
    "name", "nnodes", "nproc_per_node", "world_size", "per_device_batch_size", "grad_accum_steps",
    "global_batch_size", "batch_scale", "scaling", "lr", "warmup_steps", "samples_per_rank", "padded_samples",
    "dropped_samples", "steps_per_epoch", "total_steps", "notes",
)  # fmt: skip
# Also in each run's JSON: what the training script needs to reproduce the plan (data, order, stopping).
EXTRA_KEYS = ("min_nnodes", "seed", "dataset_size", "epochs", "max_steps", "optimizer", "drop_last")

# Also in run.json (`launch`), not in the plan's JSON: how to start the run.
# (timeout_s is run.json's own top-level field.)
LAUNCH_KEYS = ("module", "script", "args", "env", "max_restarts", "noise_scale", "observe", "workdir")


@dataclass(frozen=True)
class ResolvedRun:
    """One run with every number decided; `as_json()` is the RUN object of `ddpcli plan --json`."""

    name: str
    nnodes: int
    min_nnodes: int
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
    seed: int
    dataset_size: int | None
    epochs: int | None
    max_steps: int | None
    optimizer: str
    drop_last: bool
    notes: list[str] = field(default_factory=list)
    # How to start it; not part of the plan's JSON.
    module: str | None = None
    script: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float | None = None
    max_restarts: int = 0
    noise_scale: bool = False
    known_noise_scale: float | None = None
    observe: bool = True
    workdir: str = "launch"  # "launch": where ddpcli launch runs; "run": the run directory
    stand_ins: tuple[str, ...] = ()  # fields whose values only stand in for the script's own (plan labels them)

    def launch_fields(self) -> dict[str, Any]:
        """How to start this run, beyond its plan: what a resume rebuilds the command from (run.json `launch`)."""
        return {key: getattr(self, key) for key in LAUNCH_KEYS}

    @property
    def is_elastic(self) -> bool:
        return self.min_nnodes != self.nnodes

    @property
    def is_multi_node(self) -> bool:
        return self.nnodes > 1 or self.is_elastic

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        return {key: data[key] for key in (*PLAN_KEYS, *EXTRA_KEYS)}


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


def samples_kept_warmup(baseline: ResolvedRun, global_batch: int) -> int:
    """ceil(baseline warmup x baseline global batch / global batch), in integers: the warmup steps that keep
    the baseline's number of warmup samples (float division can round 15 up to 16)."""
    return -(-baseline.warmup_steps * baseline.global_batch_size // global_batch)
