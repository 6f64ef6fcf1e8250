"""What does measuring the gradient noise scale cost? The bundled example at 4 processes, with and without it.

    python benchmarks/noise_scale_overhead.py [--run 4x16] [--steps 300] [--repetitions 5]

Each repetition launches the run of the bundled experiments.toml twice through torchrun, once with DDPCLI_RUN's
`noise_scale` false and once true, alternating (see common.py for why). The time compared is the training loop's
seconds per optimizer step, read from metrics.jsonl (first logged step to last), so process start-up, which
dominates a short CPU run, does not dilute the ratio. Target: with / without <= 1.03.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # ddpcli without installing it
from common import Timing, report

from ddpcli.experiment.planning import load_plan
from ddpcli.experiment.resolved import ResolvedRun
from ddpcli.rundir.layout import METRICS_FILE
from ddpcli.rundir.metrics import read_metrics

REPO = Path(__file__).resolve().parent.parent

VARIANTS = {"noise_scale = false": False, "noise_scale = true": True}


def seconds_per_step(run: ResolvedRun, steps: int, noise_scale: bool, run_dir: Path) -> float:
    plan = {**run.plan.as_json(), "run_dir": str(run_dir), "noise_scale": noise_scale}
    args = [arg.format(**plan) for arg in run.launch.args]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
               str(run.plan.nproc_per_node), "-m", str(run.launch.module), *args, "--steps", str(steps)]  # fmt: skip
    env = {**os.environ, **run.launch.env, "DDPCLI_RUN_DIR": str(run_dir), "DDPCLI_RUN": json.dumps(plan)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    subprocess.run(command, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = read_metrics(run_dir / METRICS_FILE).rows
    if noise_scale != ("noise_scale" in rows[-1]):
        raise RuntimeError(f"{run_dir}: noise_scale={noise_scale} but the last row is {rows[-1]}")
    return (rows[-1]["time"] - rows[0]["time"]) / (rows[-1]["step"] - rows[0]["step"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiments", type=Path, default=REPO / "experiments.toml")
    parser.add_argument("--run", default="4x16", help="run name in the experiment file")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args()
    run = next(run for run in load_plan(args.experiments).runs if run.name == args.run)
    timings = {label: Timing(f"{run.name} x {args.steps} steps, {label}", []) for label in VARIANTS}
    with tempfile.TemporaryDirectory() as root:
        for round_index in range(args.warmup + args.repetitions):
            for label, noise_scale in VARIANTS.items():
                run_dir = Path(root) / f"{round_index}-{noise_scale}"
                seconds = seconds_per_step(run, args.steps, noise_scale, run_dir)
                if round_index >= args.warmup:
                    timings[label].seconds.append(seconds)
    results = list(timings.values())
    print(f"{run.plan.world_size} processes, seconds per optimizer step (median of {args.repetitions}):")
    print(report(results, reference=results[0].label))
    ratio = results[1].median / results[0].median
    print(f"overhead ratio with / without: {ratio:.3f} (target <= 1.03)")


if __name__ == "__main__":
    main()
