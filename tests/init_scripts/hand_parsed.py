"""A script that reads sys.argv by hand and ignores --help: started, it trains and overwrites its checkpoint.
It mentions argparse and options only in comments and strings: ddpcli init must run nothing."""

import sys
from pathlib import Path

# Options: no argparse here, "--lr" and "--steps" are read by hand below.
steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 10
Path("checkpoint.pt").write_text(f"trained {steps} steps", encoding="utf-8")
print("usage: hand_parsed.py [--steps N] [--lr LR]  (this is training output, not help)")
