"""Build the torchrun command for a resolved run, as data: an argv list and the environment it adds.

Nothing here starts a process (that is `ddpcli.launch.supervisor`), so tests can inspect exactly what would run. No
shell is involved anywhere: arguments go to `subprocess.Popen` as a list.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ddpcli.errors import ConfigError, UserError
from ddpcli.experiment.placeholders import fill_placeholders, placeholder_values
from ddpcli.experiment.resolved import LaunchSettings, ResolvedRun, RunPlan
from ddpcli.rundir.layout import LOGS_DIR

# With --max-restarts, gloo workers of a restarted group can fail or hang in init_process_group on stale
# addresses in the shared rendezvous TCPStore (pytorch/pytorch#135712); a store of their own avoids it.
RESTART_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


# torchrun's entry point when a run is observed: `python -m ddpcli.worker.observer (SCRIPT | -m MODULE) ARGS...`.
OBSERVER_ENTRY = ("-m", "ddpcli.worker.observer")
# Where torchrun's own options end. Its parser (argparse, allow_abbrev) reads every `--word` on the line, the
# script's too, as a possible abbreviation of its options: `--run`, `--n`, `--max` or `--nproc` stopped torchrun with
# "ambiguous option" before the script started. After `--` every word is positional: the script and its arguments.
END_OF_OPTIONS = "--"


@dataclass(frozen=True)
class Rendezvous:
    """Where the nodes of a multi-node run meet (torchrun's c10d rendezvous); None fields mean single node."""

    endpoint: str | None = None
    run_id: str | None = None
    backend: str = "c10d"


@dataclass(frozen=True)
class LaunchSpec:
    run: ResolvedRun
    run_dir: Path
    argv: list[str]
    env_added: dict[str, str] = field(default_factory=dict)
    log_dir: Path = Path()
    node_key: str | None = None  # multi-node: this node's name until its group rank is known
    cwd: Path | None = None  # the script's working directory (workdir = "run"), else where ddpcli runs


def build_launch(
    run: ResolvedRun,
    run_dir: Path,
    experiment_file: str,
    rendezvous: Rendezvous | None = None,
    python: str = sys.executable,
    node_key: str | None = None,
) -> LaunchSpec:
    """The torchrun argv and added env for one run. `experiment_file` only locates errors.

    Nodes of a multi-node run share the run directory, so each keeps its torchrun logs under its own
    `node_key` (host and pid by default) inside logs/; its workers carry it as DDPCLI_NODE_KEY, so that cleaning
    up after this node never touches another node's processes when two nodes share a host.
    """
    where = f"{experiment_file}: {run.name}"
    log_dir = run_dir / LOGS_DIR
    if run.plan.is_multi_node:
        node_key = node_key or f"{socket.gethostname()}-{os.getpid()}"
        log_dir = log_dir / node_key
    values = placeholder_values(run, run_dir)
    argv = [python, "-m", "torch.distributed.run", *_topology_args(run.plan, rendezvous)]
    if run.launch.max_restarts:
        argv += ["--max-restarts", str(run.launch.max_restarts)]
    argv += ["--log-dir", str(log_dir), "--tee", "3"]
    argv += _entry_point(run, experiment_file)
    argv += fill_placeholders(run.launch.args, values, where)
    experiment_dir = Path(experiment_file).resolve().parent
    env = {
        **run.launch.env,
        **_workdir_env(run.launch, experiment_dir),
        "DDPCLI_EXPERIMENT_DIR": str(experiment_dir),
        "DDPCLI_RUN_DIR": str(run_dir),
        **({"DDPCLI_NODE_KEY": node_key} if node_key else {}),
        "DDPCLI_RUN": json.dumps(
            {**run.plan.as_json(), "run_dir": str(run_dir), "noise_scale": run.launch.noise_scale},
            separators=(",", ":"),
            allow_nan=False,
        ),
    }
    if run.launch.max_restarts:
        env = {**RESTART_ENV, **env}
    cwd = run_dir if run.launch.workdir == "run" else None
    return LaunchSpec(run=run, run_dir=run_dir, argv=argv, env_added=env, log_dir=log_dir, node_key=node_key, cwd=cwd)


def _workdir_env(launch: LaunchSettings, experiment_dir: Path) -> dict[str, str]:
    """A module run from the run directory is found where it is found from where ddpcli runs (workdir = "launch"):
    python -m looks in the working directory first, so that folder leads PYTHONPATH, then the experiment file's
    folder; relative PYTHONPATH entries keep meaning what they meant there. Scripts find their own folder anyway."""
    if launch.workdir != "run":
        return {}
    here = os.getcwd()
    inherited = [part for part in launch.env.get("PYTHONPATH", os.environ.get("PYTHONPATH", "")).split(os.pathsep)
                 if part]  # fmt: skip
    kept = [os.path.join(here, part) for part in inherited]  # an absolute entry stays as it is
    if launch.module is None:
        return {"PYTHONPATH": os.pathsep.join(kept)} if kept != inherited else {}
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys([here, str(experiment_dir), *kept]))}


def _topology_args(plan: RunPlan, rendezvous: Rendezvous | None) -> list[str]:
    nnodes = f"{plan.min_nnodes}:{plan.nnodes}" if plan.is_elastic else str(plan.nnodes)
    args = ["--nnodes", nnodes, "--nproc-per-node", str(plan.nproc_per_node)]
    if not plan.is_multi_node:
        return [*args, "--standalone"]  # c10d on localhost with a free port: two launches never collide
    if rendezvous is None or not rendezvous.endpoint or not rendezvous.run_id:
        raise UserError(
            f"run {plan.name!r} spans {nnodes} nodes but no rendezvous is known: set rdzv_endpoint and rdzv_id "
            "in [cluster], or pass --rdzv-endpoint HOST:PORT --rdzv-id ID (the same on every node)"
        )
    return [*args, "--rdzv-backend", rendezvous.backend, "--rdzv-endpoint", rendezvous.endpoint,
            "--rdzv-id", rendezvous.run_id]  # fmt: skip


def _entry_point(run: ResolvedRun, experiment_file: str) -> list[str]:
    """`-m MODULE` or `SCRIPT`, behind the observer (which then runs it as python would) unless observe = false;
    torchrun's `-m` is its own option, so END_OF_OPTIONS comes after it: `-m -- MODULE ARGS`, `-- SCRIPT ARGS`."""
    if run.launch.module:
        target = ["-m", run.launch.module]
    elif run.launch.script:
        target = [run.launch.script]
    else:
        raise ConfigError(experiment_file, run.name, "needs `module` or `script` to launch")
    if run.launch.observe:
        target = [*OBSERVER_ENTRY, *target]
    own = target[:1] if target[0] == "-m" else []  # torchrun's own -m (run the entry point as a module)
    return [*own, END_OF_OPTIONS, *target[len(own) :]]
