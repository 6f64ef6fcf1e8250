"""How close does `ddpcli plan --predict-from` come on this machine? A 1-process baseline, then 2-process runs that
keep the per-device batch, keep the global batch, and accumulate, each launched through `ddpcli launch` (which
records the baseline's prediction before each run); measured samples/s against predicted, per repetition.

    python benchmarks/prediction_accuracy.py [--repetitions 3] [--steps 40] [--batch 1024] [--fit]

--fit adds a 1-process run at half the batch right after the baseline: launch then fits the compute line (a fixed
cost per micro-batch + a cost per sample) to both before it predicts the 2-process runs.

Target: every 2-process prediction within 25% of the measured samples/s. On a shared machine the load other jobs
put on the cores changes between the prediction and the run, which no model of the run can foresee: each run
also prints `hindsight`, the error the same model makes when told the share of a core the run's processes really
got (its `cpu_share`) instead of the share the probe measured just before it, and the summary prints the spread of
each run's measured samples/s between repetitions next to the error. The host's 1-minute load average is printed
with each run.

Last measured (2 cores shared with other agents' jobs, three sessions of 3 repetitions): 8 of 9 within 25%,
median error 10%, at load averages 2.1 to 3.3 (the same 2 x 1024 run measured 55k to 92k samples/s between
repetitions); 4 of 9, median 26%, at 2.6 to 4.5; 5 of 9, median 25%, at 4.6 to 5.4. In all 17 of 27, median
22%, most too fast (mean +24%). With the share of a core each run really got (hindsight): 26 of 27, median 6%
(mean +5%): what is left is mostly the load moving between the prediction and the run.

Then the all-reduce probed as a step meets it (after each rank's CPU work, from the last rank's arrival) and the
measured comm split over the timed steps' own reducer samples, measured interleaved with the code before (one
repetition each, alternating, 2 cores shared; load 0.9 to 5.8): before 19 of 30 within 25%, median error 21%, mean
+18%; after 21 of 27, median 15%, mean +9%. At load < 2: before 10 of 18, median 22%, mean +23%; after 16 of 18,
median 15%, mean +16%. At load 4 to 6: before 9 of 12 (mean +10%), after 5 of 9 (mean -5%). The comm term,
predicted / measured ms (median): before 2.0 / 4.0, after 3.9 / 4.4 (at load < 2: 3.7 / 3.8; the measured side
changed too: iteration 1 left out). What is left at low load is compute: 2-process runs computed 1 to 5 ms a step
more than the baseline's line predicts (about the all-reduce time DDP overlaps with backward, which on 2 cores
shared by 2 ranks is not hidden: it takes CPU from the backward), and their cpu_share (0.79 to 0.91 against the
probe's 1.00) counts the time blocked in the all-reduce, so hindsight over-corrects there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tests" / "observe_scripts" / "slow_knobs.py"


def experiments(batch: int, steps: int, fit: bool) -> str:
    half = batch // 2
    second = (
        f"""
[[experiments]]
name = "one-device-1x{half}"
per_device_batch_size = {half}
"""
        if fit
        else ""
    )
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
{second}
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


@dataclass
class Scored:
    run: str
    measured: float  # samples/s
    predicted: float
    hindsight: float  # predicted, had the model known the share of a core the run got
    load: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1

    @property
    def hindsight_error(self) -> float:
        return self.hindsight / self.measured - 1


def hindsight(prediction: dict[str, Any], baseline_share: float | None, share: float | None) -> float:
    """Predicted samples/s with the host terms (and the wait, a fraction of them) scaled from the predicted share
    of a core to the share the run got: everything but the all-reduce itself scales by predicted / actual time."""
    model = prediction["prediction"]
    contention = model.get("cpu_contention") or 1.0
    if not baseline_share or not share:
        return prediction["predicted_samples_per_s"]
    ratio = (baseline_share / share) / contention
    terms = model["step_terms_s"]
    allreduce = terms["comm_s"] - (model.get("slowest_rank_wait_s") or 0.0)
    step = (sum(terms.values()) - allreduce) * ratio + allreduce
    return prediction["predicted_samples_per_s"] * prediction["predicted_step_time_s"] / step


def one_repetition(folder: Path, batch: int, steps: int, fit: bool) -> list[Scored]:
    """Each 2-process run's measured samples/s, its prediction, and the load average at its end."""
    folder.mkdir(parents=True)
    (folder / "experiments.toml").write_text(experiments(batch, steps, fit))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    subprocess.run([sys.executable, "-m", "ddpcli", "launch", "experiments.toml"], cwd=folder, env=env,
                   capture_output=True, check=False)  # fmt: skip
    records = [json.loads(path.read_text()) for path in sorted(folder.glob("runs/*/*/run.json"))]
    base = next(record for record in records if record["name"].startswith("base-"))
    base_share = base["observed"]["time_breakdown"]["median"].get("cpu_share")
    found = []
    for record in records:
        prediction, observed = record.get("prediction"), record["observed"]
        if not prediction or (observed.get("world_size") or 1) < 2:
            continue
        breakdown = observed["time_breakdown"]
        measured = observed["global_batch_size"] / breakdown["median"]["step_s"]
        load = breakdown["ranks"][0].get("load_average") or float("nan")
        share = breakdown["median"].get("cpu_share")
        scored = Scored(record["name"], measured, prediction["predicted_samples_per_s"],
                        hindsight(prediction, base_share, share), load)  # fmt: skip
        found.append(scored)
        terms = prediction["prediction"]["step_terms_s"]
        seen = {key: 1000 * (breakdown["median"][key] or 0) for key in terms}
        print(
            f"    {record['name']}: ms a step predicted / measured: "
            + ", ".join(f"{key.removesuffix('_s')} {1000 * terms[key]:.3g}/{seen[key]:.3g}" for key in terms)
            + f"; a core each: {share or float('nan'):.2f} measured (baseline {base_share or float('nan'):.2f})"
        )
        for assumption in prediction["prediction"]["assumptions"]:
            print(f"      assumed: {assumption}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--fit", action="store_true", help="a second 1-process run at half the batch first")
    parser.add_argument("--keep", type=Path, help="an empty folder to keep the runs in (else a temporary one)")
    args = parser.parse_args()
    scores: list[Scored] = []
    with tempfile.TemporaryDirectory() as temporary:
        root = args.keep or Path(temporary)
        os.environ.setdefault("DDPCLI_CACHE_DIR", str(Path(root) / "cache"))
        for repetition in range(args.repetitions):
            for found in one_repetition(Path(root) / str(repetition), args.batch, args.steps, args.fit):
                scores.append(found)
                print(f"rep {repetition} {found.run:28s} measured {found.measured:9,.0f}/s predicted "
                      f"{found.predicted:9,.0f}/s error {found.error:+6.0%} hindsight {found.hindsight_error:+6.0%}"
                      f"  load average {found.load:.1f}")  # fmt: skip
    if not scores:
        return
    within = sum(abs(found.error) <= 0.25 for found in scores)
    print(f"{within} of {len(scores)} predictions within 25%; median |error| "
          f"{statistics.median(abs(found.error) for found in scores):.0%}; with the share each run got "
          f"(hindsight): {sum(abs(found.hindsight_error) <= 0.25 for found in scores)} within 25%, median |error| "
          f"{statistics.median(abs(found.hindsight_error) for found in scores):.0%}")  # fmt: skip
    for run in sorted({found.run for found in scores}):
        measured = [found.measured for found in scores if found.run == run]
        middle = statistics.median(measured)
        print(
            f"  {run:28s} measured {min(measured):,.0f} to {max(measured):,.0f}/s between repetitions "
            f"(spread {(max(measured) - min(measured)) / middle:.0%} of the median {middle:,.0f})"
        )


if __name__ == "__main__":
    main()
