"""What does `ddpcli launch` add to the user's own torchrun command? A no-op 2-process job, side by side.

    python benchmarks/launch_overhead.py [--nproc 2] [--repetitions 7] [--breakdown] [--runs N]

The job (tests/launch_scripts/noop.py) joins a gloo process group, meets once and leaves, so almost all of its time
is start-up. The reference is what the user would type without ddpcli: `torchrun --nproc-per-node 2 noop.py`.
`ddpcli launch` runs the same script through its whole pipeline: the plan, the run directory, run.json twice,
torchrun with a log directory, the observer entry in every worker, the merge and the cleanup. The ratio is the
median over repetitions of each round's ddpcli / torchrun pair (rounds are interleaved, so a noisy spell on a
shared machine hits both). --breakdown adds ddpcli's torchrun argv run directly (with and without the observer
entry) to show where the difference goes. --runs N makes it a sweep of N such runs, against the user's N torchrun
commands one after the other (a shell loop): each later run's torchrun is forked from the interpreter that imported
torch for the first (ddpcli.launch.prestart), where the user's loop imports it N times.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, time_commands

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tests" / "launch_scripts" / "noop.py"
FILE = """
[defaults]
script = "{script}"
max_steps = 1

[baseline]
name = "noop"
nproc_per_node = {nproc}
per_device_batch_size = 1
lr = 0.1
"""
LATER_RUN = """
[[experiments]]
name = "noop{index}"
"""


def torchrun() -> list[str]:
    """The user's `torchrun` (the console script torch installs), else the module it runs."""
    found = Path(sys.executable).with_name("torchrun")
    return [str(found)] if found.exists() else [sys.executable, "-m", "torch.distributed.run"]


def ddpcli_argv(work: Path) -> tuple[list[str], dict[str, str]]:
    """The torchrun argv and env `ddpcli launch --dry-run` shows, pointed at a scratch run directory."""
    out = subprocess.run([sys.executable, "-m", "ddpcli", "launch", "--dry-run", str(work / "experiments.toml")],
                         capture_output=True, text=True, check=True).stdout.splitlines()  # fmt: skip
    argv = shlex.split(out[1])
    env = dict(shlex.split(line.removeprefix("#   "))[0].split("=", 1) for line in out[2:] if line.startswith("#   "))
    scratch = work / "direct"
    scratch.mkdir()
    argv[argv.index("--log-dir") + 1] = str(scratch / "logs")
    env["DDPCLI_RUN_DIR"] = str(scratch)
    return argv, env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repetitions", type=int, default=7)
    parser.add_argument("--breakdown", action="store_true")
    parser.add_argument("--runs", type=int, default=1, help="runs in the sweep (the user: as many torchrun commands)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        text = FILE.format(script=SCRIPT, nproc=args.nproc)
        text += "".join(LATER_RUN.format(index=index) for index in range(1, args.runs))
        (work / "experiments.toml").write_text(text)
        one = shlex.join([*torchrun(), "--nproc-per-node", str(args.nproc), str(SCRIPT)])
        user = "torchrun --nproc-per-node N noop.py (the user's own)"
        if args.runs > 1:
            user = f"{args.runs} x torchrun ... noop.py (the user's own loop)"
        commands = {
            user: ["sh", "-c", " && ".join([one] * args.runs)],
            "ddpcli launch experiments.toml": [sys.executable, "-m", "ddpcli", "launch", "experiments.toml"],
        }
        if args.breakdown:
            argv, env = ddpcli_argv(work)
            observer = argv.index("ddpcli.worker.observer") - 1  # `-m ddpcli.worker.observer SCRIPT` -> `SCRIPT`
            commands["ddpcli's torchrun argv, direct"] = ["env", *(f"{k}={v}" for k, v in env.items()), *argv]
            commands["  ... without the observer entry"] = [
                "env", *(f"{k}={v}" for k, v in env.items()), *argv[:observer], *argv[observer + 2 :],
            ]  # fmt: skip
        environment = {**os.environ, "OMP_NUM_THREADS": "1"}
        timings = time_commands(commands, args.repetitions, cwd=work, env=environment)
    print(f"no-op job, {args.nproc} gloo processes, {args.runs} run(s), {args.repetitions} interleaved repetitions")
    print(report(timings, reference=user))
    pairs = [ours / theirs for theirs, ours in zip(timings[0].seconds, timings[1].seconds, strict=True)]
    print(f"ddpcli launch / the user's torchrun, median of paired rounds: {statistics.median(pairs):.3f} "
          f"(rounds {min(pairs):.3f}-{max(pairs):.3f}); target <= 1.05")  # fmt: skip


if __name__ == "__main__":
    main()
