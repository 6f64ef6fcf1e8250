"""Writes ROWS step rows into this rank's observation file, as an observer would, then exits: a run whose merge
takes seconds (observe = false for it, so the observer does not write the same file).

    many_rows.py ROWS
"""

import json
import os
import sys

rank = int(os.environ.get("RANK", "0"))
folder = os.path.join(os.environ["DDPCLI_RUN_DIR"], "observed")
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, f"rank-{rank}.jsonl"), "w") as handle:
    for step in range(1, int(sys.argv[1]) + 1):
        row = {"kind": "step", "step": step, "micro_batches": 1, "samples": 4, "loss": 1.0 / step, "lr": [0.1],
               "time": step * 0.01}  # fmt: skip
        handle.write(json.dumps(row) + "\n")
