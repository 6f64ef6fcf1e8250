"""The port's `_DDPModel` (ddpcli.port.rules.header.MODEL, the text every port writes) in a real process group of
one gloo rank: the wrapper is still the script's model (attributes read and written, methods, state_dict's names,
deepcopy, pickling that loads without a process group), and where the script used nn.DataParallel it keeps
DataParallel's `module.` names and answers for DataParallel's own methods. Issue 48, class 2; the two-process runs
are tests/test_port_program_e2e.py.

Cost: two python processes forked from tests/zygote (about 1 s)."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

from ddpcli.port.rules.header import DATA_PARALLEL, MODEL
from tests import zygote

NET = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.n_classes = 3
        self.scale = 1.0
        self.body = nn.Linear(4, 3)

    def forward(self, x):
        return self.body(x) * self.scale

    def describe(self):
        return f"net of {self.n_classes}"
"""
CHECKS = """
import copy, json, os, sys, weakref
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from net import Net

dist.init_process_group("gloo", rank=0, world_size=1)
MODEL_AND_DATA_PARALLEL
torch.manual_seed(0)
facts = {}
model = _DDPModel(Net())
plain_model = model
model.scale = 2.0
x = torch.randn(2, 4)
facts["plain"] = {
    "ddp": isinstance(model, DistributedDataParallel),
    "read": model.n_classes, "method": model.describe(),
    "written": [model.module.scale, "scale" in vars(model)],
    "forward_sees_it": torch.equal(model(x), model.module.body(x) * 2),
    "state_dict": list(model.state_dict()),
    "named_parameters": [name for name, _ in model.named_parameters()],
    "copy": type(copy.deepcopy(model)).__name__,
}
model.load_state_dict(Net().state_dict())
torch.save(model, "whole.pt")
marked = _DDPModel(_ddp_data_parallel(Net()))
copied = copy.deepcopy(marked)
same_output = torch.equal(copied(x), marked.module(x))
try:
    marked.load_state_dict(Net().state_dict())
    plain_keys = "loaded"
except RuntimeError:
    plain_keys = "refused, as nn.DataParallel refuses them"
marked.load_state_dict(torch.nn.DataParallel(Net()).state_dict())
# pytorch-deeplab-xception's vendored patch_replication_callback: reads DataParallel's replicate off the model the
# script put in nn.DataParallel and sets its own in its place (DDP never calls either)
old_replicate = marked.replicate
marked.replicate = lambda module, device_ids: old_replicate(module, device_ids)
try:
    plain_model.replicate
    plain_replicate = "read"
except AttributeError:
    plain_replicate = "AttributeError"
facts["data_parallel"] = {
    "state_dict": list(marked.state_dict()),
    "named_parameters": [name for name, _ in marked.named_parameters()],
    "copy": [type(copied).__name__, list(copied.state_dict()), same_output],
    "plain_keys": plain_keys,
    "replicate": [callable(old_replicate), plain_replicate, torch.equal(marked(x), marked.module(x))],
}
dist.destroy_process_group()
print(json.dumps(facts))
"""


def _run(folder: Path, code: str, **env: str) -> str:
    (folder / "check.py").write_text(code, encoding="utf-8")
    run = zygote.run([sys.executable, "check.py"], env={**os.environ, **env}, cwd=folder, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout


def _free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def test_the_wrapper_is_the_scripts_model_and_keeps_data_parallels_names(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(NET, encoding="utf-8")
    checks = CHECKS.replace("MODEL_AND_DATA_PARALLEL", MODEL + DATA_PARALLEL)
    facts = json.loads(_run(tmp_path, checks, MASTER_ADDR="127.0.0.1", MASTER_PORT=_free_port()))
    assert facts["plain"] == {
        "ddp": True, "read": 3, "method": "net of 3", "written": [2.0, False], "forward_sees_it": True,
        "state_dict": ["body.weight", "body.bias"], "named_parameters": ["body.weight", "body.bias"], "copy": "Net",
    }  # fmt: skip
    assert facts["data_parallel"] == {
        "state_dict": ["module.body.weight", "module.body.bias"],
        "named_parameters": ["module.body.weight", "module.body.bias"],
        "copy": ["DataParallel", ["module.body.weight", "module.body.bias"], True],
        "plain_keys": "refused, as nn.DataParallel refuses them",
        "replicate": [True, "AttributeError", True],  # DataParallel's methods on its stand-in only
    }
    # what torch.save wrote is the script's Net, loaded where no process group exists
    loaded = _run(tmp_path, "import torch\nm = torch.load('whole.pt', weights_only=False)\nprint(type(m).__name__, "
                  "sorted(m.state_dict()))\n")  # fmt: skip
    assert loaded == "Net ['body.bias', 'body.weight']\n"
