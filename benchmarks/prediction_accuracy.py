"""How close does `ddpcli plan --predict-from` come on this machine? A 1-process baseline, then 2-process runs that
keep the per-device batch, keep the global batch, and accumulate, each launched through `ddpcli launch` (which
records the baseline's prediction before each run); measured samples/s against predicted, per repetition.

    python benchmarks/prediction_accuracy.py [--repetitions 2] [--steps 40] [--batch 1024]

Target: every 2-process prediction within 25% of the measured samples/s. The host's 1-minute load average is
printed with each repetition: on a shared machine other work takes cores from the runs (and the model accounts
for the load it sees when it predicts, not for load that changes after).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tests" / "observe_scripts" / "slow_knobs.py"


def experiments(batch: int, steps: int) -> str:
    half = batch // 2
    args = (
        '["--batch-size", "{per_device_batch_size}", "--grad-accum", "{grad_accum_steps}", "--steps", "{total_steps}"]'
    )
    return f"""
[defaults]
script = "{SCRIPT}"
args = {args}
max_steps = {steps}
dataset_size = 100000000
scaling = "none"
lr = 0.01
per_device_batch_size = {batch}
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "base-1x{batch}"

[[experiments]]
name = "same-device-batch-2x{batch}"
nproc_per_node = 2

[[experiments]]
name = "same-global-2x{half}"
nproc_per_node = 2
per_device_batch_size = {half}

[[experiments]]
name = "accumulate-2x{half}x2"
nproc_per_node = 2
per_device_batch_size = {half}
grad_accum_steps = 2
"""


def one_repetition(folder: Path, batch: int, steps: int) -> list[tuple[str, float, float, float]]:
    """(run, measured samples/s, predicted, load average at its end) for each predicted run."""
    folder.mkdir(parents=True)
    (folder / "experiments.toml").write_text(experiments(batch, steps))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    subprocess.run([sys.executable, "-m", "ddpcli", "launch", "experiments.toml"], cwd=folder, env=env,
                   capture_output=True, check=False)  # fmt: skip
    found = []
    for path in sorted(folder.glob("runs/*/*/run.json")):
        record = json.loads(path.read_text())
        prediction, observed = record.get("prediction"), record["observed"]
        if not prediction:
            continue
        breakdown = observed["time_breakdown"]
        measured = observed["global_batch_size"] / breakdown["median"]["step_s"]
        load = breakdown["ranks"][0].get("load_average") or float("nan")
        found.append((record["name"], measured, prediction["predicted_samples_per_s"], load))
        terms = prediction["prediction"]["step_terms_s"]
        seen = {key: 1000 * (breakdown["median"][key] or 0) for key in terms}
        print(
            f"    {record['name']}: ms a step predicted / measured: "
            + ", ".join(f"{key.removesuffix('_s')} {1000 * terms[key]:.3g}/{seen[key]:.3g}" for key in terms)
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=1024)
    args = parser.parse_args()
    errors: list[float] = []
    with tempfile.TemporaryDirectory() as root:
        os.environ.setdefault("DDPCLI_CACHE_DIR", str(Path(root) / "cache"))
        for repetition in range(args.repetitions):
            for name, measured, predicted, load in one_repetition(Path(root) / str(repetition), args.batch, args.steps):
                error = predicted / measured - 1
                errors.append(error)
                print(f"rep {repetition} {name:28s} measured {measured:9,.0f}/s predicted {predicted:9,.0f}/s "
                      f"error {error:+6.0%}  load average {load:.1f}")  # fmt: skip
    if errors:
        within = sum(abs(error) <= 0.25 for error in errors)
        print(f"{within} of {len(errors)} predictions within 25%; median |error| "
              f"{statistics.median(abs(e) for e in errors):.0%}; 2 cores, load averages above")  # fmt: skip


if __name__ == "__main__":
    main()
