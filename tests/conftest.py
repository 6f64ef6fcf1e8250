"""Deterministic output for CLI tests: no colour, a fixed wide terminal (set before ddpcli's consoles exist)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

os.environ["NO_COLOR"] = "1"
os.environ["COLUMNS"] = "200"
os.environ.pop("FORCE_COLOR", None)

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C and Ctrl-\\ as a terminal gives them, in this process and what it starts: a job started in the
    background of a non-interactive shell (`.ci/run &`, nohup) inherits SIGINT and SIGQUIT ignored, and the tests
    that press them on a launch, a probe or an export then wait for ever (seen: a worker blocked in flock)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker more than half again the cores. A worker launching a sweep keeps about 0.7 of a core
    busy (torchrun's start and a rank's `import torch` are one process each, the rendezvous and teardown wait): two
    workers held a 2-core machine at a load of 1.4 through the launches, three fill it."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores * 3 // 2)


HEAVIEST_FIRST = ("slow", "e2e", "interpreters")  # the markers of the modules that start processes, longest first


def _weight(item: pytest.Item) -> int:
    return next((rank for rank, marker in enumerate(HEAVIEST_FIRST) if marker in item.keywords), len(HEAVIEST_FIRST))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules that launch first, the soak before all (pytest-xdist's loadfile hands modules out in this order): the
    last minutes of a run are short unit modules that even out the workers, not one worker launching alone while
    the other has ended. Each module stays whole and in its own order. Then: soak tests (`@pytest.mark.slow`) run
    in CI only, or with DDPCLI_SLOW=1: minutes each, for a rare failure."""
    heaviest = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        heaviest[module] = min(heaviest.get(module, len(HEAVIEST_FIRST)), _weight(item))
    first_seen = {module: index for index, module in enumerate(dict.fromkeys(i.nodeid.split("::")[0] for i in items))}
    items.sort(key=lambda item: (heaviest[item.nodeid.split("::")[0]], first_seen[item.nodeid.split("::")[0]]))
    if os.environ.get("CI") or os.environ.get("DDPCLI_SLOW"):
        return
    skip = pytest.mark.skip(reason="soak test: runs in CI (CI=true) or with DDPCLI_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """How many observed multi-process runs the session's shared sweeps held, each checked for an abort at exit
    by tests/helpers.launch: the observer's half of the exit soak (tests/test_clean_exit_soak_e2e.py)."""
    from tests.helpers import observed_multi_process_runs

    if hasattr(config, "workerinput"):
        return
    sweeps = config._tmp_path_factory.getbasetemp() / "sweeps"  # type: ignore[attr-defined]
    if sweeps.is_dir():
        count = observed_multi_process_runs(sweeps)
        terminalreporter.write_line(f"exit soak: {count} observed multi-process runs checked for an abort at exit")


def write_toml(directory: Path, text: str, name: str = "experiments.toml") -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


# Runs `ddpcli <args>` in a fresh interpreter and reports its exit code and which modules it loaded.
_PROBE = """
import json, sys
from ddpcli.cli.app import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
loaded = sorted(name for name in sys.modules if name.split(".")[0] in ("ddpcli", "torch"))
print(json.dumps({"code": code, "modules": loaded}), file=sys.stderr)
"""


def probe_cli(*args: str | Path, cwd: Path = REPO) -> tuple[int, list[str]]:
    """(exit code, ddpcli and torch modules loaded) of `ddpcli <args>` run in a fresh interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    report = json.loads(result.stderr.strip().splitlines()[-1])
    return report["code"], report["modules"]


def loads_torch(modules: list[str]) -> bool:
    return any(name == "torch" or name.startswith("torch.") for name in modules)


@pytest.fixture
def repo_root() -> Path:
    return REPO


def final_params(run_dir: Path) -> dict:
    """A run's final_params.pt (torch imported here, not at collection: the fast tests never need it)."""
    import torch

    return torch.load(run_dir / "final_params.pt", weights_only=True)


def max_abs_diff(first: dict, second: dict) -> float:
    """The largest absolute difference over every tensor of two state_dicts with the same keys."""
    assert first.keys() == second.keys()
    return max(float((first[key].double() - second[key].double()).abs().max()) for key in first)


def merge_observations(run_dir: Path) -> list[dict]:
    """What `ddpcli launch` does after a run, for tests that start a script themselves: metrics.jsonl merged from
    every rank's observation file (returned, and written where ddpcli would write it)."""
    from ddpcli.rundir.layout import METRICS_FILE
    from ddpcli.rundir.merged_rows import iter_merged_metrics
    from ddpcli.rundir.metrics import write_metrics
    from ddpcli.rundir.observations import read_observations

    rows = list(iter_merged_metrics(read_observations(run_dir)))
    write_metrics(run_dir / METRICS_FILE, rows)
    return rows
