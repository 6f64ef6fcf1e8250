"""Soak: ten two-process gloo runs of a `ddpcli port`-written script under `ddpcli launch`, run bare (`observe =
false`, as a user's torchrun runs it), every one of which must exit cleanly.

With torch 2.13 a plain gloo script aborts at interpreter teardown in about one run of four. A ported script must exit
cleanly by itself: its model lives at module level until the interpreter ends, which aborted 4 of 36 bare runs before
the port's header held the group (0 of 46 after). The observer's exit (ddpcli/worker/process_group.py) prevents the
abort for any script it runs; that half of the soak is every sweep of the suite: tests/helpers.launch checks each
observed run's logs for an abort (52 observed multi-process runs a session, where this file had 10), and the
session's summary says how many were checked. Minutes of launches for a rare failure: CI runs it (CI=true), a
developer's `pytest` skips it (tests/conftest.py); a file of its own, so that pytest-xdist gives it a worker of its
own (`--dist loadfile`).
"""

from __future__ import annotations

import time

import pytest

from ddpcli.port.engine import port_source
from tests.helpers import launch

pytestmark = pytest.mark.e2e

PORTED_RUNS = 10  # at the rate seen before the header held the group (4 in 36): caught with 69%
# A single-device script as tutorials write it: module level, a BatchNorm model that lives until the interpreter ends.
MODULE_LEVEL = """\
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=4, shuffle=True)
model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    F.mse_loss(model(x), y).backward()
    optimizer.step()
print(f"loss {F.mse_loss(model(x), y).item():.4f}")
"""


@pytest.mark.slow  # a soak test (about a minute): CI runs it, a developer's `pytest` skips it (conftest.py)
def test_ported_two_process_runs_all_exit_cleanly_bare(tmp_path_factory: pytest.TempPathFactory) -> None:
    ported = tmp_path_factory.mktemp("soak") / "module_level_ddp.py"
    ported.write_text(port_source(MODULE_LEVEL, "module_level.py").source, encoding="utf-8")
    bare = "".join(f'\n[[experiments]]\nname = "ported{index:02d}"\n' for index in range(1, PORTED_RUNS))
    text = f"""
[defaults]
script = "{ported}"
args = []
observe = false
nproc_per_node = 2
max_steps = 2
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "ported00"
per_device_batch_size = 4
lr = 0.1
{bare}
"""
    started = time.perf_counter()
    sweep = launch(tmp_path_factory, text)
    runs = sweep.runs()
    elapsed = time.perf_counter() - started
    assert len(runs) == PORTED_RUNS
    statuses = {name: (run["record"]["status"], run["record"]["exit_code"]) for name, run in runs.items()}
    assert set(statuses.values()) == {("completed", 0)}, statuses
    logs = [path.read_text(errors="replace") for path in sweep.root.glob("runs/*/*/logs/**/*.log")]
    assert not [text for text in logs if "terminate called" in text or "SIGABRT" in text]
    ported_logs = [path.read_text(errors="replace") for path in sweep.root.glob("runs/ported*/*/logs/**/stdout.log")]
    assert sum(text.count("loss ") for text in ported_logs) == PORTED_RUNS  # rank 0 alone printed, in every run
    print(f"{len(runs)} runs of 2 processes in {elapsed:.1f} s")
