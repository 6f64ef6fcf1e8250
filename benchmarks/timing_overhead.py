"""What does the time breakdown cost per step? One process, a small training loop (DataLoader, MLP, SGD), three
variants in fresh interpreters, interleaved: bare, the observer without the breakdown (its StepTiming replaced by a
no-op, here only), and the observer as `ddpcli launch` installs it.

    python benchmarks/timing_overhead.py [--repetitions 7] [--steps 3000] [--hidden 64]

Each variant reports the CPU time of its process per step (time.process_time: on a shared machine wall time
varies +-50% between rounds with other people's load, CPU time much less; a single-process CPU loop's wall time is
its CPU time when it has a core to itself). The difference observer - observer-without-breakdown is the
breakdown's own cost in microseconds per step: the ratio to a step time says what it costs there (target: the
observer with it within 2% of bare).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("bare", "observer-without-breakdown", "observer")

LOOP = r"""
import os, sys, time
variant, steps, hidden = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
if variant != "bare":
    import ddpcli.worker.observer.hooks as hooks
    if variant == "observer-without-breakdown":
        class NoTiming:
            def __init__(self, observer): pass
            def __getattr__(self, name): return lambda *args, **kwargs: None
        hooks.StepTiming = NoTiming
    observer = hooks.Observer.install()
torch.manual_seed(0)
data = TensorDataset(torch.randn(32 * 64, 64), torch.randn(32 * 64, 1))
model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
step, start = 0, None
while step < steps:
    for x, y in DataLoader(data, batch_size=32):
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        step += 1
        if step == 100:
            start = time.process_time()
        if step == steps:
            break
print((time.process_time() - start) / (steps - 100))
if variant != "bare":
    observer.finish()
"""


def one(variant: str, steps: int, hidden: int, run_dir: Path) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DDPCLI_RUN_DIR": str(run_dir), "RANK": "0"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, "-c", LOOP, variant, str(steps), str(hidden)], env=env,
                            capture_output=True, text=True, check=True)  # fmt: skip
    return float(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repetitions", type=int, default=7)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--hidden", type=int, default=64)
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    with tempfile.TemporaryDirectory() as root:
        for repetition in range(args.repetitions + 1):
            for variant in VARIANTS:
                value = one(variant, args.steps, args.hidden, Path(root) / f"{repetition}-{variant}")
                if repetition:  # the first round warms the file cache
                    seconds[variant].append(value)
    bare = statistics.median(seconds["bare"])
    for variant in VARIANTS:
        median = statistics.median(seconds[variant])
        print(f"{variant:28s} {median * 1e6:8.1f} us CPU a step  ({median / bare:.3f} x bare)  "
              f"rounds {[round(s * 1e6) for s in seconds[variant]]}")  # fmt: skip
    paired = [o - n for o, n in zip(seconds["observer"], seconds["observer-without-breakdown"], strict=True)]
    print(f"the breakdown's own cost: {statistics.median(paired) * 1e6:.1f} us a step (median of paired rounds)")


if __name__ == "__main__":
    main()
