"""How fast is `ddpcli plan`? Timed side by side with importing its own dependencies and with torchrun --help.

    python benchmarks/plan_startup.py [--repetitions 15]

The ratio that matters: `ddpcli plan` against `python -c "import typer, rich, pydantic"` (the floor any typer +
rich + pydantic CLI pays) and against `python -m torch.distributed.run --help` (what importing torch costs).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, time_commands

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repetitions", type=int, default=15)
    args = parser.parse_args()
    ddpcli = shutil.which("ddpcli") or sys.exit("ddpcli is not installed (pip install -e .)")
    commands = {
        "ddpcli plan experiments.toml": [ddpcli, "plan", str(REPO / "experiments.toml")],
        "ddpcli plan experiments.toml --json": [ddpcli, "plan", str(REPO / "experiments.toml"), "--json"],
        'python -c "import typer, rich, pydantic"': [sys.executable, "-c", "import typer, rich, pydantic"],
        "python -m torch.distributed.run --help": [sys.executable, "-m", "torch.distributed.run", "--help"],
    }
    timings = time_commands(commands, args.repetitions)
    print(report(timings, reference='python -c "import typer, rich, pydantic"'))


if __name__ == "__main__":
    main()
