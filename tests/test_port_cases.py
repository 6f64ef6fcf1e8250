"""`ddpcli port` on the cases of issues 37 and 39: each a snippet, what the port writes, and that the single-device
path is the script's (every edit under `_ddp` / `_is_main`, or the identity with one process)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ddpcli.port.engine import port_source
from ddpcli.port.records import PortResult

REPO = Path(__file__).resolve().parents[1]


def port(source: str, name: str = "train.py") -> PortResult:
    result = port_source(textwrap.dedent(source), name)
    compile(result.source, "train_ddp.py", "exec")
    return result


def lines_of(result: PortResult) -> list[str]:
    return [line.strip() for line in result.source.splitlines()]


def kinds(result: PortResult) -> list[str]:
    return [change.kind for change in result.changes]


def run(path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python PATH` with this checkout first on the path and no torchrun variables."""
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    environ.update(PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                   OMP_NUM_THREADS="1", **env)  # fmt: skip
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=300,
                          check=False, cwd=path.parent, env=environ)  # fmt: skip


DATA_PARALLEL = """\
import torch
from torch import nn
model = nn.Linear(4, 1)
model = nn.DataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in [torch.randn(2, 4)]:
    optimizer.zero_grad()
    model(x).sum().backward()
    optimizer.step()
"""


def test_data_parallel_is_skipped_under_torchrun_and_kept_under_python() -> None:
    result = port(DATA_PARALLEL)
    lines = lines_of(result)
    assert "model = model if _ddp else nn.DataParallel(model)" in lines
    assert "data_parallel" in kinds(result)
    wrap = lines.index("model = DistributedDataParallel(model)")
    assert lines.index("model = model if _ddp else nn.DataParallel(model)") < wrap
