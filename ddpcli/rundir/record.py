"""run.json as one typed model: the only place that writes it and the only place that reads it.

`ddpcli launch` writes it (ddpcli.launch.sweep), `--resume` validates it strictly (a record that does not fit is refused
with the field that is wrong), `ddpcli compare` reads it tolerantly (a field of the wrong type is dropped and
shown as unknown; unknown keys are kept, so a newer ddpcli's records still load). Adding a field is one line here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ddpcli.jsonvalues import read_json, write_json_atomic
from ddpcli.rundir.layout import RUN_FILE
from ddpcli.rundir.timing import ModelState, TimeBreakdown

SCHEMA_VERSION = 2
Severity = Literal["error", "warning", "info"]
# The status compare shows for a run whose launcher is gone while run.json says running: derived, never written.
LOST = "lost"


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow", validate_assignment=True)


class FailedRank(_Record):
    rank: int | None = None
    exit_code: int | None = None
    error: str | None = None
    log_tail: str | None = None
    root_cause: bool = False


class Finding(_Record):
    """Something the observer saw that changes what the run means. `code` is a contract (docs/contracts.md)."""

    code: str
    severity: Severity
    message: str
    field: str | None = None  # plan_mismatch: which number
    planned: float | int | None = None
    observed: float | int | None = None


class Observed(_Record):
    """What the run did, from every rank's observer: the values most optimizer steps had."""

    world_size: int | None = None
    processes: int | None = None  # launched by torchrun (its WORLD_SIZE), whether or not they trained together
    data_parallel_size: int | None = None
    per_device_batch_size: int | None = None
    grad_accum_steps: int | None = None
    global_batch_size: int | None = None
    ranges: dict[str, list[int]] = Field(default_factory=dict)  # [min, max] of the batch numbers that varied
    optimizer_steps: int | None = None
    samples_seen: int | None = None
    lr_first: float | None = None
    lr_peak: float | None = None
    lr_last: float | None = None
    lr_base: float | None = None  # initial_lr where a scheduler set it, else the peak
    sampler: str | None = None
    sampler_chain: list[str] | None = None  # outermost first, down to `sampler`
    distinct_samples_across_ranks: bool | None = None
    batchnorm_layers: int | None = None
    batchnorm_synchronized: bool | None = None
    amp: str | None = None
    backend: str | None = None
    device: str | None = None
    ddp: bool | None = None
    initial_params_fingerprint: str | None = None  # rank 0's parameters before the first step (rundir.parallel)
    optimizer: dict[str, Any] | None = None  # class and hyper-parameters of the first param group
    time_breakdown: TimeBreakdown | None = None  # seconds per optimizer step, per rank (ddpcli.rundir.timing)
    model_state: ModelState | None = None  # bytes of parameters, gradients, optimizer state on one device
    frameworks: dict[str, Any] | None = None  # imported, optimizer_stepped_by, schedulers (rundir.frameworks)
    numerics: dict[str, Any] | None = None  # TF32, float32 matmul precision, deterministic algorithms
    tokens_per_micro_batch: int | None = None  # one process's, where micro-batches were token ids [B, T]
    tokens_per_step: int | None = None  # over every rank, per optimizer step (rundir.tokens)
    dropout_layers: int | None = None  # nn.Dropout modules with p > 0, in training mode at the first step


class RunRecord(_Record):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    name: str
    status: str = "running"
    plan: dict[str, Any] = Field(default_factory=dict)  # the RUN object of `ddpcli plan --json`
    launch: dict[str, Any] = Field(default_factory=dict)  # how to start it again: module, script, args, env, ...
    argv: list[str] = Field(default_factory=list)
    env_added: dict[str, str] = Field(default_factory=dict)
    started_at: str | None = None
    ended_at: str | None = None
    wall_time_s: float | None = None
    exit_code: int | None = None
    failed_ranks: list[FailedRank] = Field(default_factory=list)
    hostname: str | None = None
    python: str | None = None
    torch_version: str | None = None
    experiment_file: str | None = None
    experiment_file_sha256: str | None = None
    restarts: int = 0
    timeout_s: float | None = None
    supervisor_pid: int | None = None  # the ddpcli process watching the run: gone while `running` means lost
    observe: bool = True
    observed: Observed | None = None
    metrics_from_observations: bool = False  # ddpcli wrote metrics.jsonl from them (else the script wrote it)
    findings: list[Finding] = Field(default_factory=list)
    prediction: dict[str, Any] | None = None  # from the baseline, before it ran (ddpcli.launch.forecast)
    resumes: int = 0
    previous_wall_time_s: float = 0.0
    previous_restarts: int = 0
    group_rank: int | None = None

    def write(self, path: Path) -> None:
        write_json_atomic(path, self.model_dump(mode="json", exclude_none=False))

    @classmethod
    def load(cls, run_dir: Path) -> RunRecord:
        """Strict: every field must have its type (what --resume rebuilds a command from)."""
        return cls.model_validate(read_json(run_dir / RUN_FILE), strict=True)

    @classmethod
    def load_tolerant(cls, run_dir: Path) -> RunRecord:
        """Lenient: a field of the wrong type is dropped (shown as unknown); name and id fall back to the path."""
        data = read_json(run_dir / RUN_FILE)
        data.setdefault("run_id", run_dir.name)
        data.setdefault("name", run_dir.parent.name)
        for _ in range(len(data) + 1):
            try:
                return cls.model_validate(data)
            except ValidationError as error:
                bad = {entry["loc"][0] for entry in error.errors() if entry["loc"]}
                if not bad or not bad & data.keys():
                    raise
                for key in bad:
                    data.pop(key, None)
                data.setdefault("run_id", run_dir.name)
                data.setdefault("name", run_dir.parent.name)
        raise ValueError(f"{run_dir / RUN_FILE}: no field could be read")  # pragma: no cover


def validation_message(error: ValidationError) -> str:
    """`plan.nnodes: Input should be a valid integer` for the first problem, as one line."""
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"]) or "(record)"
    return f"{location}: {first['msg']}"


# Every key of run.json, in the order it is written (docs/contracts.md).
RUN_FIELDS = tuple(RunRecord.model_fields)
