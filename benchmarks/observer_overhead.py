"""What does observing a run cost? Seconds per optimizer step with and without the observer, side by side.

    python benchmarks/observer_overhead.py [--repetitions 5] [--steps 300] [--only example|plain]

Two jobs, each launched through torchrun twice per repetition, alternating (see common.py for why): once as
`ddpcli launch` starts an observed run (`-m ddpcli.worker.observer SCRIPT ...`) and once bare (the script itself,
what `observe = false` runs):
- example: the bundled example's 4x16 run at 4 processes (ddpcli.examples.regression, which logs each step's time
  through the runtime helper: rank 0's observation file has it with and without the observer);
- plain: tests/observe_scripts/plain.py at 2 processes with batch 16 (a textbook DDP script that prints its own
  seconds per step).
Only the training loop after the first optimizer step is timed, so process start-up, which dominates a short CPU
run, does not dilute the ratio. Target: with / without <= 1.02.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # ddpcli without installing it
from common import Timing, report

from ddpcli.experiment.planning import ResolvedRun, load_plan
from ddpcli.jsonvalues import parse_row
from ddpcli.rundir.layout import OBSERVED_DIR, rank_file_name

REPO = Path(__file__).resolve().parent.parent
PLAIN = REPO / "tests" / "observe_scripts" / "plain.py"
OBSERVER = ["-m", "ddpcli.worker.observer"]
VARIANTS = {"bare": False, "observed": True}


FAILED_EXITS: Counter[str] = Counter()  # variant -> jobs that exited non-zero (the gloo teardown abort)


def torchrun(nproc: int, entry: list[str], run_dir: Path, run: dict[str, object]) -> str:
    """Run one job in a fresh run directory; its stdout. A job that trained but aborted at exit (bare torchrun, about
    one run in twenty here) still timed its steps: counted, not fatal."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *entry]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DDPCLI_RUN_DIR": str(run_dir), "DDPCLI_RUN": json.dumps(run)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    result = subprocess.run(command, cwd=REPO, env=env, check=False, capture_output=True, text=True)
    if result.returncode != 0:
        FAILED_EXITS["observed" if entry[: len(OBSERVER)] == OBSERVER else "bare"] += 1
    return result.stdout


def example_job(experiments: Path, steps: int) -> tuple[str, Callable[[bool, Path], float]]:
    run: ResolvedRun = next(run for run in load_plan(experiments).runs if run.name == "4x16")
    plan = {**run.plan.as_json(), "noise_scale": False}
    args = [arg.format(**plan, run_dir="") for arg in run.launch.args]

    def seconds_per_step(observe: bool, run_dir: Path) -> float:
        entry = [*(OBSERVER if observe else []), "-m", str(run.launch.module), *args, "--steps", str(steps)]
        torchrun(run.plan.nproc_per_node, entry, run_dir, {**plan, "run_dir": str(run_dir)})
        rows = [parse_row(line) for line in (run_dir / OBSERVED_DIR / rank_file_name(0)).read_bytes().splitlines()]
        logs = [row for row in rows if row is not None and row.get("kind") == "log"]
        return (logs[-1]["time"] - logs[0]["time"]) / (logs[-1]["step"] - logs[0]["step"])

    return f"example 4x16, {steps} steps", seconds_per_step


def plain_job(steps: int) -> tuple[str, Callable[[bool, Path], float]]:
    args = [str(PLAIN), "--batch-size", "16", "--steps", str(steps), "--dataset-size", "2048"]

    def seconds_per_step(observe: bool, run_dir: Path) -> float:
        output = torchrun(2, [*(OBSERVER if observe else []), *args], run_dir, {"run_dir": str(run_dir)})
        found = re.search(r"seconds_per_step=([0-9.]+)", output)
        if found is None:
            raise RuntimeError(f"plain.py printed no seconds_per_step: {output[-500:]}")
        return float(found.group(1))

    return f"plain 2x16, {steps} steps", seconds_per_step


def measure(job: Callable[[bool, Path], float], label: str, repetitions: int, warmup: int) -> list[Timing]:
    timings = {name: Timing(f"{label}, {name}", []) for name in VARIANTS}
    with tempfile.TemporaryDirectory() as root:
        for round_index in range(warmup + repetitions):
            for name, observe in VARIANTS.items():
                seconds = job(observe, Path(root) / f"{round_index}-{name}")
                if round_index >= warmup:
                    timings[name].seconds.append(seconds)
    return list(timings.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiments", type=Path, default=REPO / "experiments.toml")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--only", choices=["example", "plain"], default=None)
    args = parser.parse_args()
    jobs = {"example": example_job(args.experiments, args.steps), "plain": plain_job(args.steps)}
    for name, (label, job) in jobs.items():
        if args.only not in (None, name):
            continue
        bare, observed = measure(job, label, args.repetitions, args.warmup)
        print(f"seconds per optimizer step (median of {args.repetitions}):")
        print(report([bare, observed], reference=bare.label))
        print(f"{label}: ms per step, bare {[round(1e3 * s, 3) for s in bare.seconds]}, "
              f"observed {[round(1e3 * s, 3) for s in observed.seconds]}")  # fmt: skip
        paired = statistics.median(o / b for o, b in zip(observed.seconds, bare.seconds, strict=True))
        print(f"{label}: overhead ratio observed / bare: {observed.median / bare.median:.3f} of the medians, "
              f"{paired:.3f} median of the paired rounds, {min(observed.seconds) / min(bare.seconds):.3f} of the "
              f"fastest (target <= 1.02)")  # fmt: skip
    print(f"jobs that exited non-zero: bare {FAILED_EXITS['bare']}, observed {FAILED_EXITS['observed']}")


if __name__ == "__main__":
    main()
