"""What does `ddpcli launch` add to torchrun? A zero-step job, timed side by side with the same torchrun command.

    python benchmarks/launch_overhead.py [--nproc 2] [--repetitions 7]

The job (tests/launch_scripts/steps.py with 0 steps) joins a gloo process group, synchronises once and leaves,
so almost all of its time is torchrun's and Python's start-up. `ddpcli launch` runs it through the whole
pipeline (plan, run directory, run.json twice, log following, cleanup); the direct command is the exact argv and
environment `ddpcli launch --dry-run` prints, run in a fresh run directory each time.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, time_commands

REPO = Path(__file__).resolve().parent.parent
FILE = """
[defaults]
script = "{script}"
args = ["0"]
max_steps = 1
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "zero"
nproc_per_node = {nproc}
per_device_batch_size = 1
lr = 0.1
"""


def direct_command(work: Path) -> tuple[list[str], dict[str, str]]:
    """The argv and env `ddpcli launch --dry-run` shows, pointed at a scratch run directory."""
    ddpcli = shutil.which("ddpcli") or sys.exit("ddpcli is not installed (pip install -e .)")
    out = subprocess.run([ddpcli, "launch", "--dry-run", str(work / "experiments.toml")], capture_output=True,
                         text=True, check=True).stdout.splitlines()  # fmt: skip
    argv = shlex.split(out[1])
    env = dict(shlex.split(line.removeprefix("#   "))[0].split("=", 1) for line in out[2:] if line.startswith("#   "))
    scratch = work / "direct"
    argv[argv.index("--log-dir") + 1] = str(scratch / "logs")
    env["DDPCLI_RUN_DIR"] = str(scratch)
    env["DDPCLI_RUN"] = json.dumps({**json.loads(env["DDPCLI_RUN"]), "run_dir": str(scratch)})
    scratch.mkdir()
    return argv, env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repetitions", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        script = REPO / "tests" / "launch_scripts" / "steps.py"
        (work / "experiments.toml").write_text(FILE.format(script=script, nproc=args.nproc))
        argv, env = direct_command(work)
        commands = {
            "torchrun (same argv and env, direct)": argv,
            "ddpcli launch experiments.toml": [shutil.which("ddpcli") or "ddpcli", "launch", "experiments.toml"],
        }
        timings = time_commands(commands, args.repetitions, cwd=work, env={**os.environ, **env})
    print(f"zero-step job, {args.nproc} gloo processes, {args.repetitions} interleaved repetitions")
    print(report(timings, reference="torchrun (same argv and env, direct)"))


if __name__ == "__main__":
    main()
