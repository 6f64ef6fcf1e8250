"""What the tests share: one `launch` of each sweep per test session, and the readers of what it recorded.

Starting processes is most of what the suite costs (an `import torch` is ~3 CPU-seconds, a two-process torchrun
launch ~10), so a sweep, an experiment file and the `ddpcli launch` flags it is started with, runs once per session
whichever test module asks first. Every pytest-xdist worker finds it in one folder shared by the session, behind a file
lock (pytest-xdist's documented recipe for session-wide fixtures): a second asker waits for the first launch and reads
the same runs. What is launched is never changed by a test: a test that edits run folders copies them first
(`copy_runs`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from ddpcli.rundir.metrics import read_metrics

REPO = Path(__file__).resolve().parent.parent
OBSERVE_SCRIPTS = REPO / "tests" / "observe_scripts"  # scripts of published stacks' shapes that never import ddpcli
RESULT = "launch-result.json"  # beside experiments.toml in a sweep's folder: the launch's exit code and output


@dataclass(frozen=True)
class Sweep:
    """A finished `ddpcli launch`: its root (experiments.toml, runs/) and what the command said."""

    root: Path
    returncode: int
    stdout: str
    stderr: str
    aborted: list[str]  # aborted_at_exit's logs, read once when the sweep was launched

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def runs(self) -> dict[str, dict[str, Any]]:
        """name -> {"dir", "record", "metrics"} for every recorded run (asserts there is one, and that no observed
        run's process aborted at exit)."""
        found = read_runs(self.root)
        assert found, self.output
        assert not self.aborted, self.aborted
        return found


def launch(factory: pytest.TempPathFactory, text: str, *args: str, env: dict[str, str] | None = None) -> Sweep:
    """`ddpcli launch experiments.toml ARGS` of the experiment file `text`, once per session.

    `env` is added to the launcher's environment (part of the sweep's identity, as the text and the flags are);
    `{sweep}` in a flag is the sweep's folder (`--export tensorboard:{sweep}/tb`).
    """
    identity = json.dumps({"text": text, "args": args, "env": env or {}}, sort_keys=True)
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    folder = _shared_folder(factory) / key
    with FileLock(str(folder) + ".lock"):
        done = folder / RESULT
        if not done.is_file():
            shutil.rmtree(folder, ignore_errors=True)  # a launch that died half-way (Ctrl-C) starts over
            folder.mkdir(parents=True)
            path = folder / "experiments.toml"
            path.write_text(text, encoding="utf-8")
            flags = [arg.replace("{sweep}", str(folder)) for arg in args]
            result = subprocess.run(
                [sys.executable, "-m", "ddpcli", "launch", str(path), *flags], cwd=folder, capture_output=True,
                text=True, timeout=900, check=False, env={**os.environ, **(env or {})},
            )  # fmt: skip
            saved = {"returncode": result.returncode, "stdout": result.stdout, "stderr": result.stderr,
                     "aborted": aborted_at_exit(folder)}  # fmt: skip
            done.write_text(json.dumps(saved), encoding="utf-8")
        saved = json.loads(done.read_text(encoding="utf-8"))
    return Sweep(folder, saved["returncode"], saved["stdout"], saved["stderr"], saved["aborted"])


def launched_root(factory: pytest.TempPathFactory, text: str, *args: str) -> Path:
    """The root of a sweep that must have ended 0 (every run completed)."""
    sweep = launch(factory, text, *args)
    assert sweep.returncode == 0, sweep.output
    assert not sweep.aborted, sweep.aborted
    return sweep.root


ABORT_SIGNS = ("terminate called", "SIGABRT")  # libstdc++'s last words, torchrun's name for the signal


def aborted_at_exit(root: Path) -> list[str]:
    """The observed runs of a sweep where a process aborted (gloo's teardown abort of torch 2.13: about 1 plain
    two-process run of 4), each with the log that says so. Every sweep is checked: with the suite's ~50 observed
    multi-process runs this is the soak of the observer's exit (tests/test_clean_exit_soak_e2e.py keeps the bare
    runs of ported scripts, which nothing else launches bare)."""
    found = []
    for record_path in sorted((root / "runs").glob("*/*/run.json")):
        if not json.loads(record_path.read_text()).get("observe"):
            continue
        for log in sorted((record_path.parent / "logs").glob("**/*.log")):
            text = log.read_text(errors="replace")
            if any(sign in text for sign in ABORT_SIGNS):
                found.append(str(log.relative_to(root)))
    return found


def observed_multi_process_runs(sweeps: Path) -> int:
    """The observed runs of more than one process under the session's sweep folders (what aborted_at_exit saw)."""
    count = 0
    for record_path in sweeps.glob("*/runs/*/*/run.json"):
        record = json.loads(record_path.read_text())
        if record.get("observe") and len(list((record_path.parent / "logs").glob("**/stdout.log"))) > 1:
            count += 1
    return count


def _shared_folder(factory: pytest.TempPathFactory) -> Path:
    """One folder for the whole session: under xdist each worker's basetemp is a child of the session's."""
    base = factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "sweeps"


def read_runs(root: Path) -> dict[str, dict[str, Any]]:
    runs = {}
    for record_path in sorted((root / "runs").glob("*/*/run.json")):
        record = json.loads(record_path.read_text())
        run_dir = record_path.parent
        runs[record["name"]] = {"dir": run_dir, "record": record, "metrics": read_metrics(run_dir / "metrics.jsonl")}
    return runs


def copy_runs(root: Path, destination: Path, names: tuple[str, ...] | None = None) -> Path:
    """A copy of a sweep's folder that a test may change (the launched one is every test's): its experiment file
    and the runs of `names` (every run when None)."""
    if names is None:
        shutil.copytree(root, destination, symlinks=True, dirs_exist_ok=True)
        return destination
    destination.mkdir(parents=True, exist_ok=True)
    shutil.copy(root / "experiments.toml", destination / "experiments.toml")
    for name in names:
        shutil.copytree(root / "runs" / name, destination / "runs" / name, symlinks=True)
    return destination


def codes(record: dict[str, Any]) -> list[str]:
    return [finding["code"] for finding in record["findings"]]


def compare_json(root: Path, *args: str) -> list[dict[str, Any]]:
    """`ddpcli compare --json ROOT ARGS`, in this process (what the command prints, through Typer's runner)."""
    from typer.testing import CliRunner

    from ddpcli.cli.app import app

    result = CliRunner().invoke(app, ["compare", "--json", str(root), *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


KEY = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*")'  # a bare key, or a quoted one with escapes
FIELD_PATH = re.compile(rf"{KEY}(?:\.{KEY}|\[[0-9]+\])*: \S")  # experiments[1].env."A=B": message


def assert_one_line_error(result: Any, path: Path) -> None:
    """exit 2, exactly one line on stderr naming the file and a field (what comes after `FILE: ` up to `: `)."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    prefix = f"error: {path}: "
    assert lines[0].startswith(prefix), lines[0]
    assert FIELD_PATH.match(lines[0][len(prefix) :]), lines[0]


def port_command(script: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """`ddpcli port SCRIPT FLAGS` run in this process (Typer's runner: what the command prints, its exit code), not
    a fresh interpreter's start per port; OUT is written beside SCRIPT."""
    from typer.testing import CliRunner

    from ddpcli.cli.app import app

    result = CliRunner().invoke(app, ["port", str(script), *flags])
    assert not isinstance(result.exception, AssertionError), result.exception
    return subprocess.CompletedProcess(["ddpcli", "port", str(script)], result.exit_code, result.stdout, result.stderr)


@contextlib.contextmanager
def terminal_width(width: int) -> Iterator[None]:
    """The commands' shared consoles as a terminal of `width` columns would size them."""
    from ddpcli.cli import console

    saved = (console.stdout._width, console.stderr._width)
    console.stdout.width = console.stderr.width = width
    try:
        yield
    finally:
        console.stdout._width, console.stderr._width = saved


def compare_text(run_dir: Path) -> str:
    """`ddpcli compare` of the runs folder that holds `run_dir` as a reader sees it, on one line per note (a wide
    terminal), in this process (Typer's runner: what the command prints)."""
    from typer.testing import CliRunner

    from ddpcli.cli.app import app

    with terminal_width(400):
        result = CliRunner().invoke(app, ["compare", str(run_dir.parent.parent)])
    assert result.exit_code == 0, result.output
    return result.stdout


# The host layer of tests/test_layers.py: modules that may import torch inside functions or start processes (also
# read by tests/test_startup.py)
HOST_MODULES = (
    "ddpcli.launch.sweep",
    "ddpcli.launch.probe",
    "ddpcli.launch.probe_run",
    "ddpcli.launch.cpu_probe",
    "ddpcli.launch.forecast",
    "ddpcli.launch.supervisor",
    "ddpcli.rundir.params",
    "ddpcli.init.script_help",
    "ddpcli.init.inspect_script",
    "ddpcli.launch.lost",
)


# Runs a ported script under torchrun, keeping every DistributedDataParallel it builds, then saves this rank's
# parameters of each wrapped model (test-side instrumentation: the port knows nothing of it).
RANK_PARAMS = """
import os, runpy, sys, torch
from torch.nn.parallel import DistributedDataParallel
wrapped, init = [], DistributedDataParallel.__init__
def keep(self, module, *args, **kwargs):
    init(self, module, *args, **kwargs)
    wrapped.append(module)
DistributedDataParallel.__init__ = keep
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
state = [{k: v.detach().cpu() for k, v in module.state_dict().items()} for module in wrapped]
torch.save(state, f"rank{os.environ['RANK']}.params")
"""


def torchrun_ranks(port: Path, script: str, *args: str) -> tuple[str, list[dict], list[dict]]:
    """`torchrun --nproc-per-node 2 SCRIPT ARGS` in `port`, with each rank's parameters of every model it wrapped
    in DDP (RANK_PARAMS), and what rank 0 printed."""
    import torch

    (port / "rank_params.py").write_text(RANK_PARAMS, encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "rank_params.py", script, *args], cwd=port, capture_output=True, text=True, timeout=180,
                         check=False)  # fmt: skip
    assert (port / "rank1.params").exists(), run.stderr[-3000:]  # (gloo may abort at exit: the files say it ran)
    return run.stdout, torch.load(port / "rank0.params"), torch.load(port / "rank1.params")


def assert_equal_ranks(zero: list[dict], one: list[dict], models: int) -> None:
    import torch

    assert len(zero) == len(one) == models  # every trained model in DDP
    for mine, theirs in zip(zero, one, strict=True):
        assert all(torch.equal(mine[key], theirs[key]) for key in mine)
