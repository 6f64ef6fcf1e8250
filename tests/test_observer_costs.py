"""The observer's cost model, counted rather than timed: no host synchronisation and no collective per step.

tests/scripts/observer_sync_probe.py trains a DDP model for a few steps (with gradient accumulation) under the
observer's entry point and counts every Python-level call of a torch.distributed collective and of a Tensor method
that copies to the host. Without the observer's hooks (DDPCLI_OBSERVE=0: the entry alone) and with them the counts
during training must be the same; the values are read when the stream flushes, in one transfer. The timed counterpart is
benchmarks/observer_overhead.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests import zygote
from tests.conftest import REPO

pytestmark = pytest.mark.interpreters

PROBE = REPO / "tests" / "scripts" / "observer_sync_probe.py"
STEPS = 6


def probe(run_dir: Path, *, observe: bool, noise_scale: bool = False) -> dict[str, dict[str, int]]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DDPCLI_", "TORCHELASTIC"))}
    env.update({
        "DDPCLI_RUN_DIR": str(run_dir),
        "DDPCLI_OBSERVE": "1" if observe else "0",
        "DDPCLI_RUN": json.dumps({"noise_scale": noise_scale}),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    })  # fmt: skip
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    command = [sys.executable, "-m", "ddpcli.worker.observer", str(PROBE), "--steps", str(STEPS)]
    result = zygote.run(command, env=env, timeout=120)  # a process of its own, torch imported once (zygote)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_observing_adds_no_host_copy_and_no_collective_per_step(tmp_path: Path) -> None:
    bare = probe(tmp_path / "bare", observe=False)
    observed = probe(tmp_path / "observed", observe=True)
    assert observed["training"] == bare["training"] == {}
    # The counters do see the observer's reads: the flush copies every step's values in one transfer.
    assert observed["after_flush"] == {"tolist": 1}
    rows = (tmp_path / "observed" / "observed" / "rank-0.jsonl").read_text().splitlines()
    steps = [json.loads(row) for row in rows if '"kind": "step"' in row]
    assert [row["step"] for row in steps] == list(range(1, STEPS + 1))
    assert all(row["micro_batches"] == 2 and row["samples"] == 16 for row in steps)


def test_measuring_the_noise_scale_replaces_ddps_all_reduce_and_adds_no_sync(tmp_path: Path) -> None:
    """The comm hook does DDP's one all-reduce per bucket itself (a tiny model has one bucket): no extra one."""
    observed = probe(tmp_path, observe=True, noise_scale=True)
    assert observed["training"] == {"all_reduce": STEPS}
    assert observed["after_flush"] == {"all_reduce": STEPS, "tolist": 1}
    rows = [json.loads(row) for row in (tmp_path / "observed" / "rank-0.jsonl").read_text().splitlines()]
    assert all(isinstance(row.get("sq_small"), float) for row in rows if row["kind"] == "step")
