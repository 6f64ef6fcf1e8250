"""`ddpcli compare` at scale: 500 and 5,000 run directories, as ratios to the `import typer, rich, pydantic` floor,
measured side by side (interleaved rounds after one warm-up, which also writes each run's summary.json).

    python benchmarks/compare_scale.py [--from RUN_DIR] [--record RUN_JSON] [--rows 100] [--repetitions 3]
                                       [--keep DIR] [--against DIR]

The runs are synthesized from one finished run directory (--from: a real one, e.g. runs/<name>/<run_id> of the
bundled sweep; default: one generated as compare_bench.py writes them, run.json as `ddpcli launch` writes it):
copied N times, each copy's run.json edited to a distinct name and run_id and a world size of 1, 2, 4 or 8 (so
compare keeps every one and pairs the multi-process runs with single-process ones), its metrics rows at its own
global batch; --record gives the template another run.json (an observed one: what compare reads of a real run).
Prints the medians and ratios, and each command's peak memory (ru_maxrss of one more run), first without summaries
(cold: every metrics.jsonl parsed) and then with them; every command at COLUMNS=200 (the table fits one line a run).
--against DIR times another checkout's compare (e.g. `git archive e13c9bc | tar -x -C DIR`) in the same rounds, over
copies of the same runs.

Measured on the 2-core machine, 100 rows a run, 3 interleaved repetitions (medians), this version and e13c9bc
(--against: before the rows streamed, the index and the schedule check's early stop) side by side, each checkout
on its own copies. Peak memory is one more run's ru_maxrss.

compare_bench's synthetic record (~6 KB in memory), floor 0.076 s:
  compare, 500 runs (table)    0.44 s   5.7x the floor  cold 1.06 s  peak 41 MB  (e13c9bc: 0.41 s, 5.4x, 44 MB)
  compare, 500 runs --json     0.39 s   5.1x            cold 0.96 s  peak 38 MB  (0.39 s, 5.1x, 42 MB)
  compare, 5,000 runs (table)  1.87 s  24.6x            cold 8.10 s  peak 59 MB  (1.77 s, 23x, 98 MB)
  compare, 5,000 runs --json   1.63 s  21.3x            cold 7.64 s  peak 46 MB  (1.65 s, 22x, 90 MB)
--record tests/fixtures/run_records/observed-4x16.json (a real observed record, ~40 KB in memory), floor 0.088 s:
  compare, 500 runs (table)    0.89 s  10.1x            cold 1.46 s  peak 43 MB  (0.93 s, 10.6x, 62 MB)
  compare, 500 runs --json     0.74 s   8.5x            cold 1.32 s  peak 38 MB  (0.84 s, 9.6x, 59 MB)
  compare, 5,000 runs (table)  5.56 s    63x            cold 12.4 s  peak 70 MB  (7.00 s, 80x, 268 MB)
  compare, 5,000 runs --json   4.67 s    53x            cold 12.2 s  peak 46 MB  (5.72 s, 65x, 257 MB)
Memory per run, 500 to 5,000 runs: table 4.0 KB (synthetic) and 6.0 KB (real), --json 1.8 KB and 1.8 KB; e13c9bc
12 and 10.7 KB, 45 and 44 KB. What is left is what gets printed (the table's compact cells, the notes: two finding
notes a run with the real record) and each run's keys, directory and label; one record is held at a time.
Before the copies logged their own global batch's samples, every copy of the real record got an
lr_schedule_mismatch, and trying 30 time factors on each took 53 s for 5,000 runs (both versions); the factors' checks
now stop at the step that rejects them (500 such runs: 5.5 s -> 1.5 s).
Issue 29 measured before: 500 runs 1.79 s (24x); 5,000 runs 15.6 s / 278 MB (table), 4.3 s / 365 MB (--json).
Not met: 5,000 real records in "a few seconds" is 5.6 s for the table (the lr-schedule check and the notes'
wrapping are most of a row's ~1 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, time_commands
from compare_bench import make_runs_root

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from ddpcli.compare.summary_cache import RACY_S  # noqa: E402
from ddpcli.rundir.layout import METRICS_FILE, RUN_FILE, SUMMARY_FILE  # noqa: E402

FLOOR = 'python -c "import typer, rich, pydantic"'


def synthesize(template: Path, root: Path, runs: int) -> None:
    """`runs` copies of the run directory `template` under `root`, each with its own name, run_id and world size."""
    base = json.loads((template / RUN_FILE).read_text(encoding="utf-8"))
    per_device = base["plan"].get("per_device_batch_size") or 16
    for index in range(runs):
        world = (1, 2, 4, 8)[index % 4]
        name, run_id = f"{world}x{per_device}-{index:05d}", f"20260101T{index:06d}Z-{index:06x}"
        run_dir = root / name / run_id
        shutil.copytree(template, run_dir, ignore=shutil.ignore_patterns(SUMMARY_FILE))
        record = json.loads(json.dumps(base))
        record.update(name=name, run_id=run_id)
        record["plan"].update(name=name, nproc_per_node=world, world_size=world)
        record["plan"]["global_batch_size"] = world * per_device * (record["plan"].get("grad_accum_steps") or 1)
        if record.get("observed"):  # an observed record: what the run did is what compare shows
            record["observed"].update(world_size=world, processes=world,
                                      global_batch_size=record["plan"]["global_batch_size"])  # fmt: skip
        (run_dir / RUN_FILE).write_text(json.dumps(record, indent=2), encoding="utf-8")
        _scale_samples(run_dir / METRICS_FILE, record["plan"]["global_batch_size"])


def _scale_samples(path: Path, global_batch: int) -> None:
    """The copy's metrics rows at its own global batch (samples = step x global batch), as the run would have
    logged them: a copy that kept the template's samples would not have run the schedule its plan says (compare
    would find an lr_schedule_mismatch on every copy of an observed record, whose lr schedule it checks)."""
    if not path.is_file():
        return
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for row in rows:
        if isinstance(row.get("step"), int) and "samples" in row:
            row["samples"] = row["step"] * global_batch
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def peak_memory_mb(argv: list[str], env: dict[str, str]) -> float:
    """Peak resident memory of one run of `argv`, in MB (its own process, measured by a fresh parent)."""
    probe = "import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True); " \
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=True, cwd=REPO, env=env
    )
    return int(out.stdout.strip()) / 1024


def seconds(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, env=env)
    return time.perf_counter() - start


def compare_argv(checkout: Path | None) -> list[str]:
    """`ddpcli compare` of this checkout, or of another one (its package first on the path)."""
    if checkout is None:
        return [sys.executable, "-m", "ddpcli", "compare"]
    start = f"import sys; sys.path.insert(0, {str(checkout.resolve())!r}); from ddpcli.cli.app import main; main()"
    return [sys.executable, "-c", start, "compare"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="template", type=Path, help="a finished run directory to copy")
    parser.add_argument("--rows", type=int, default=100, help="metrics rows of the generated template run")
    parser.add_argument(
        "--record", type=Path, help="a run.json to give the template instead (e.g. the observed record of "
        "tests/fixtures/run_records: ~40 KB in memory, where compare_bench's is ~6 KB)",
    )  # fmt: skip
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="generate the runs roots here and keep them")
    parser.add_argument(
        "--against", type=Path, help="another checkout of ddpcli (an older commit, e.g. `git archive` of it), timed "
        "side by side in the same rounds over the same runs",
    )  # fmt: skip
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="ddpcli-compare-scale-"))
    try:
        template = args.template
        if template is None:
            make_runs_root(work / "template", 1, args.rows)
            (template,) = (work / "template").glob("*/*")
        if args.record is not None:  # on a copy: --from names someone's run
            template = Path(
                shutil.copytree(template, work / "template-record", ignore=shutil.ignore_patterns(SUMMARY_FILE))
            )
            shutil.copy(args.record, template / RUN_FILE)
        checkouts = {"": None, **({" (against)": args.against} if args.against else {})}
        # Each checkout its own copies: their summaries differ (another VERSION), and one shared root would have
        # each checkout rewrite the other's summaries at every command.
        roots = {(count, suffix): work / f"runs-{count}{suffix.strip(' ()')}" for count in (500, 5000)
                 for suffix in checkouts}  # fmt: skip
        for (count, _), root in roots.items():
            synthesize(template, root, count)
        time.sleep(RACY_S + 0.5)  # the copies' files settle, so the warm-up round writes their summaries
        env = {**os.environ, "COLUMNS": "200"}
        commands = {FLOOR: [sys.executable, "-c", "import typer, rich, pydantic"]}
        for count in (500, 5000):
            for mode in ("", " --json"):
                for suffix, checkout in checkouts.items():
                    argv = [*compare_argv(checkout), str(roots[count, suffix]), *mode.split()]
                    commands[f"ddpcli compare{mode}  ({count:,} runs){suffix}"] = argv
        cold = {}
        for label, argv in commands.items():
            if label != FLOOR:
                for path in Path(argv[-1] if argv[-1] != "--json" else argv[-2]).glob(f"*/*/{SUMMARY_FILE}"):
                    path.unlink()
                cold[label] = seconds(argv, env)  # every metrics.jsonl parsed (and the summaries written)
        timings = time_commands(commands, args.repetitions, cwd=REPO, env=env)
        print(f"runs copied from {template}")
        print(report(timings, reference=FLOOR))
        floor = timings[0].median
        for timing in timings[1:]:
            argv = commands[timing.label]
            print(f"{timing.label:<50} {timing.median / floor:5.1f}x the floor; cold (no summaries) "
                  f"{cold[timing.label]:.2f} s; peak {peak_memory_mb(argv, env):.0f} MB")  # fmt: skip
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
