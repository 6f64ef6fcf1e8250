"""How fast is `ddpcli compare` on big runs? 20 runs of 100,000 metric rows each must take under 2 s; 500 runs
(`--many`: 500 runs of 100 rows) within 15x the floor below.

    python benchmarks/compare_bench.py [--runs 20] [--rows 100000] [--many] [--repetitions 7] [--keep DIR]

Generates a runs root in a temporary directory (run.json as `ddpcli launch` writes it, metrics.jsonl with one row
per optimizer step: step, samples, time, loss, lr and, on some runs, the noise-scale scalars; no parameter files),
then times `ddpcli compare <root>` (the table) and `ddpcli compare <root> --json` as subprocesses, interleaved,
after one warm-up round, and prints the median, min and max. `python -c "import typer, rich, pydantic"` is timed
alongside as the floor any command of this CLI pays.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, time_commands

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from ddpcli.jsonvalues import write_json_atomic  # noqa: E402
from ddpcli.rundir.layout import RUN_FILE  # noqa: E402


def make_runs_root(root: Path, runs: int, rows: int, seed: int = 0) -> None:
    """`runs` runs of distinct names (so compare shows all of them), world sizes 1..8, `rows` metric rows each."""
    rng = random.Random(seed)
    for index in range(runs):
        world = (1, 2, 4, 8)[index % 4]
        per_device = (16, 32, 64, 8, 4)[index // 4 % 5]
        name = f"{world}x{per_device}-{index:02d}"
        run_dir = root / name / f"20260101T{index:06d}Z-{index:06x}"
        run_dir.mkdir(parents=True)
        global_batch = world * per_device
        lr = 0.05 * global_batch / 16
        write_json_atomic(run_dir / RUN_FILE, run_json(name, run_dir.name, world, per_device, lr, rows))
        step_time = 0.004 * per_device / 16 * (1 + 0.1 * math.log2(world))
        noise = index % 3 == 0
        with (run_dir / "metrics.jsonl").open("w", encoding="utf-8") as handle:
            for step in range(1, rows + 1):
                row = {
                    "step": step,
                    "samples": step * global_batch,
                    "time": step * step_time + rng.random() * 1e-3,
                    "loss": 2.5 / math.sqrt(step) + 0.05 * rng.random(),
                    "lr": lr * min(1.0, step / 100),
                }
                if noise:
                    row |= {"noise_scale": 300 + rng.random(), "grad_sq_small": rng.random(), "grad_sq_big": 0.5}
                handle.write(json.dumps(row) + "\n")


def run_json(name: str, run_id: str, world: int, per_device: int, lr: float, rows: int) -> dict[str, object]:
    plan = {
        "name": name, "nnodes": 1, "nproc_per_node": world, "world_size": world,
        "per_device_batch_size": per_device, "grad_accum_steps": 1, "global_batch_size": world * per_device,
        "batch_scale": world * per_device / 16, "scaling": "baseline" if name.startswith("1x16") else "linear",
        "lr": lr, "warmup_steps": 100, "samples_per_rank": None, "padded_samples": None, "dropped_samples": None,
        "steps_per_epoch": None, "total_steps": rows, "notes": [], "min_nnodes": 1, "seed": 0,
        "dataset_size": None, "epochs": None, "max_steps": rows, "optimizer": "sgd", "drop_last": False,
    }  # fmt: skip
    return {
        "schema_version": 1, "run_id": run_id, "name": name, "status": "completed", "plan": plan,
        "argv": ["torchrun", f"--nproc-per-node={world}", "-m", "ddpcli.examples.regression", "--steps", str(rows)],
        "env_added": {"OMP_NUM_THREADS": "1"}, "started_at": "2026-01-01T00:00:00+00:00",
        "ended_at": "2026-01-01T00:10:00+00:00", "wall_time_s": 600.0, "exit_code": 0, "failed_ranks": [],
        "hostname": "bench", "python": sys.version.split()[0], "torch_version": "2.13.0",
        "experiment_file": None, "experiment_file_sha256": None, "restarts": 0,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repetitions", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="generate the runs root here and keep it")
    parser.add_argument("--many", action="store_true", help="500 runs of 100 rows (overrides --runs and --rows)")
    args = parser.parse_args()
    if args.many:
        args.runs, args.rows = 500, 100
    root = args.keep or Path(tempfile.mkdtemp(prefix="ddpcli-compare-bench-"))
    try:
        make_runs_root(root, args.runs, args.rows)
        size = sum(path.stat().st_size for path in root.rglob("metrics.jsonl"))
        print(f"{args.runs} runs x {args.rows:,} rows, {size / 1e6:.0f} MB of metrics.jsonl in {root}")
        ddpcli = [sys.executable, "-m", "ddpcli"]
        commands = {
            f"ddpcli compare <root>  ({args.runs} x {args.rows:,})": [*ddpcli, "compare", str(root)],
            "ddpcli compare <root> --json": [*ddpcli, "compare", str(root), "--json"],
            'python -c "import typer, rich, pydantic"': [sys.executable, "-c", "import typer, rich, pydantic"],
        }
        timings = time_commands(commands, args.repetitions, cwd=REPO, env={**os.environ, "COLUMNS": "200"})
        print(report(timings, reference='python -c "import typer, rich, pydantic"'))
        worst = max(timing.median for timing in timings[:2])
        floor = timings[2].median
        per_run = (timings[0].median - floor) / args.runs * 1000
        print(f"table: {per_run:.2f} ms per run above the floor")
        if args.many:
            ratio = timings[0].median / floor
            print(f"target: table within 15x the floor -> {'OK' if ratio <= 15 else 'TOO SLOW'} ({ratio:.1f}x)")
        else:
            print(f"target: under 2 s -> {'OK' if worst < 2.0 else 'TOO SLOW'} (slowest median {worst:.3f} s)")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
