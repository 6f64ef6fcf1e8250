"""`ddpcli compare` at scale: 500 and 5,000 run directories, as ratios to the `import typer, rich, pydantic` floor,
measured side by side (interleaved rounds after one warm-up, which also writes each run's summary.json).

    python benchmarks/compare_scale.py [--from RUN_DIR] [--rows 100] [--repetitions 3] [--keep DIR]

The runs are synthesized from one finished run directory (--from: a real one, e.g. runs/<name>/<run_id> of the
bundled sweep; default: one generated as compare_bench.py writes them, run.json as `ddpcli launch` writes it): copied
N times, each copy's run.json edited to a distinct name and run_id and a world size of 1, 2, 4 or 8 (so compare
keeps every one and pairs the multi-process runs with single-process ones). Prints the medians and ratios, and each
command's peak memory (ru_maxrss of one more run), first without summaries (cold: every metrics.jsonl parsed) and
then with them.

Measured on the 2-core machine (load ~2), 100 rows a run, 3 interleaved repetitions (medians):
  python -c "import typer, rich, pydantic"   0.080 s
  compare, 500 runs (table)                  1.08 s   13.5x the floor   cold (no summaries) 1.74 s   peak 54 MB
  compare, 500 runs --json                   0.48 s    6.0x             cold 0.96 s                  peak 50 MB
  compare, 5,000 runs (table)                9.50 s    119x             cold 15.8 s                  peak 192 MB
  compare, 5,000 runs --json                 2.16 s     27x             cold 7.35 s                  peak 167 MB
Issue 29 measured before: 500 runs 1.79 s (24x); 5,000 runs 15.6 s / 278 MB (table), 4.3 s / 365 MB (--json).
Not met: the 5,000-row table is rich laying out and rendering 5,000 rows (rich.Console.print is ~70% of the cached
run under cProfile), and memory still grows with the runs (every row is held until the table is laid out: ~30 KB a
run).
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
from ddpcli.rundir.layout import RUN_FILE, SUMMARY_FILE  # noqa: E402

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
        (run_dir / RUN_FILE).write_text(json.dumps(record, indent=2), encoding="utf-8")


def peak_memory_mb(argv: list[str]) -> float:
    """Peak resident memory of one run of `argv`, in MB (its own process, measured by a fresh parent)."""
    probe = "import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True); " \
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"  # fmt: skip
    out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=True, cwd=REPO)
    return int(out.stdout.strip()) / 1024


def seconds(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="template", type=Path, help="a finished run directory to copy")
    parser.add_argument("--rows", type=int, default=100, help="metrics rows of the generated template run")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="generate the runs roots here and keep them")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="ddpcli-compare-scale-"))
    try:
        template = args.template
        if template is None:
            make_runs_root(work / "template", 1, args.rows)
            (template,) = (work / "template").glob("*/*")
        roots = {count: work / f"runs-{count}" for count in (500, 5000)}
        for count, root in roots.items():
            synthesize(template, root, count)
        time.sleep(RACY_S + 0.5)  # the copies' files settle, so the warm-up round writes their summaries
        env = {**os.environ, "COLUMNS": "200"}
        ddpcli = [sys.executable, "-m", "ddpcli", "compare"]
        commands = {FLOOR: [sys.executable, "-c", "import typer, rich, pydantic"]}
        for count, root in roots.items():
            commands[f"ddpcli compare  ({count:,} runs)"] = [*ddpcli, str(root)]
            commands[f"ddpcli compare --json  ({count:,} runs)"] = [*ddpcli, str(root), "--json"]
        cold = {}
        for label, argv in commands.items():
            if label != FLOOR:
                for path in Path(argv[-1] if argv[-1] != "--json" else argv[-2]).glob(f"*/*/{SUMMARY_FILE}"):
                    path.unlink()
                cold[label] = seconds(argv)  # every metrics.jsonl parsed (and the summaries written)
        timings = time_commands(commands, args.repetitions, cwd=REPO, env=env)
        print(f"runs copied from {template}")
        print(report(timings, reference=FLOOR))
        floor = timings[0].median
        for timing in timings[1:]:
            argv = commands[timing.label]
            print(f"{timing.label:<40} {timing.median / floor:5.1f}x the floor; cold (no summaries) "
                  f"{cold[timing.label]:.2f} s; peak {peak_memory_mb(argv):.0f} MB")  # fmt: skip
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
