"""Peak memory of the post-run merge: does the launcher's memory grow with the steps? Goal: < 150 MB for 1M x 4.

    python benchmarks/merge_memory.py [--steps 1000000] [--ranks 4] [--against /path/to/other/checkout] [--keep DIR]

Writes observed/rank-<r>.jsonl as the observer does (one step row per optimizer step: micro_batches, samples,
loss, lr per group, time, and the noise-scale norms), then runs what `ddpcli launch` runs when torchrun ends
(`ddpcli.diagnosis.finish.observe`: read the rank files, summarize, write metrics.jsonl, findings) in a fresh
interpreter per checkout and prints its peak resident memory (VmHWM) and time. The floor (the same interpreter
having imported the launcher's modules, before merging) is printed alongside.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = """
import sys, time
from pathlib import Path
from ddpcli.diagnosis.finish import observe
from ddpcli.rundir.record import RunRecord

def peak_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024

floor = peak_mb()
run_dir = Path(sys.argv[1])
(run_dir / "metrics.jsonl").unlink(missing_ok=True)
plan = {"per_device_batch_size": 8, "grad_accum_steps": 1, "global_batch_size": 8 * int(sys.argv[2]),
        "world_size": int(sys.argv[2]), "total_steps": int(sys.argv[3]), "lr": 0.1}
started = time.perf_counter()
record = observe(RunRecord(run_id="bench", name="bench", plan=plan, status="completed"), run_dir)
seconds = time.perf_counter() - started
assert record.observed is not None and record.observed.optimizer_steps == int(sys.argv[3]), record.observed
print(f"{floor:.1f} {peak_mb():.1f} {seconds:.1f}")
"""


def write_rank_files(run_dir: Path, steps: int, ranks: int) -> int:
    folder = run_dir / "observed"
    folder.mkdir(parents=True, exist_ok=True)
    size = 0
    for rank in range(ranks):
        path = folder / f"rank-{rank}.jsonl"
        with path.open("w") as handle:
            handle.write(json.dumps({"kind": "start", "restart": 0, "pid": 1000 + rank}) + "\n")
            handle.write(json.dumps({"kind": "run", "world_size": ranks, "backend": "gloo", "ddp": True}) + "\n")
            for step in range(1, steps + 1):
                loss = 2.0 / (1 + step * 1e-4) + rank * 1e-3
                row = {"kind": "step", "step": step, "micro_batches": 1, "samples": 8, "loss": round(loss, 6),
                       "lr": [0.1], "time": round(step * 0.0123, 4), "sq_small": 1.5 + rank, "sq_big": 1.1}  # fmt: skip
                handle.write(json.dumps(row) + "\n")
        size += path.stat().st_size
    return size


def measure(checkout: Path, run_dir: Path, ranks: int, steps: int) -> tuple[float, float, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(run_dir), str(ranks), str(steps)],
        env=env, capture_output=True, text=True, check=True, cwd=checkout,
    )  # fmt: skip
    floor, peak, seconds = map(float, result.stdout.split())
    return floor, peak, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--against", type=Path, action="append", default=[], help="another checkout to measure")
    parser.add_argument("--keep", type=Path, help="write the run directory here and keep it")
    args = parser.parse_args()
    run_dir = args.keep or Path(tempfile.mkdtemp(prefix="ddpcli-merge-"))
    try:
        size = write_rank_files(run_dir, args.steps, args.ranks)
        print(f"{args.steps:,} steps x {args.ranks} ranks: {size / 1e6:.0f} MB of rank files")
        print(f"{'checkout':<40} {'floor MB':>9} {'peak MB':>9} {'merge s':>8}")
        for checkout in (REPO, *args.against):
            floor, peak, seconds = measure(checkout.resolve(), run_dir, args.ranks, args.steps)
            print(f"{checkout!s:<40} {floor:>9.1f} {peak:>9.1f} {seconds:>8.1f}")
    finally:
        if args.keep is None:
            shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
