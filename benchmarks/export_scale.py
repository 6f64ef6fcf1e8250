"""`ddpcli export tensorboard` of 500 synthetic runs x 100 metrics rows, as a ratio to `python -c "import
tensorboardX"` measured in the same interleaved rounds (one warm-up round first, which also writes each run's
summary.json, as a first compare would).

    python benchmarks/export_scale.py [--runs 500] [--rows 100] [--repetitions 3]

The runs are compare_bench.py's synthetic ones (run.json as `ddpcli launch` writes it, metrics.jsonl rows of
step, samples, time, loss, lr); each round exports into a fresh folder (a second export into the same folder
writes nothing: that is the idempotency, not the cost).

Measured on the 2-core machine (3 rounds, medians), load average 3 to 4 from other jobs: import tensorboardX 1.68 s,
export 9.54 s (8.94-9.86) = 5.7x the floor, 19 ms a run. An earlier session with this machine's tests running beside
it: 2.93 s and 23.0 s (7.9x). No target was set for it; where the time goes (compare's rows, the event writer per
run) is not profiled yet.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_bench import make_runs_root

FLOOR = [sys.executable, "-c", "import tensorboardX"]


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        make_runs_root(root, args.runs, args.rows)
        floor, export = [], []
        for round_index in range(1 + args.repetitions):
            target = Path(tmp) / f"tb-{round_index}"
            seconds = timed(FLOOR), timed([sys.executable, "-m", "ddpcli", "export", "tensorboard", str(root),
                                            "--to", str(target)])  # fmt: skip
            events = sum(1 for _ in target.glob("*/*/events.out.tfevents.*"))
            assert events == args.runs, f"{events} event files for {args.runs} runs"
            if round_index:
                floor.append(seconds[0])
                export.append(seconds[1])
    floor_s, export_s = statistics.median(floor), statistics.median(export)
    print(f"import tensorboardX  {floor_s:.3f} s (median of {args.repetitions}; {min(floor):.3f}-{max(floor):.3f})")
    print(f"export {args.runs} runs x {args.rows} rows  {export_s:.3f} s ({min(export):.3f}-{max(export):.3f})"
          f"  = {export_s / floor_s:.1f}x the floor, {export_s / args.runs * 1000:.1f} ms a run")  # fmt: skip


if __name__ == "__main__":
    main()
