"""Every libcst node the port builds is a node libcst can build: each `cst.X(...)` in ddpcli/port names only X's
fields (libcst renames them between versions: IfExp's `whitespace_before_test` became `whitespace_before_if`), each
`.with_changes(...)` only fields some node has, and each construction runs while porting the scripts below, so a
wrong field is an error of this test, not of a user's port."""

from __future__ import annotations

import ast
import dataclasses
import sys
import textwrap
from pathlib import Path
from types import FrameType
from typing import Any

import libcst as cst

from ddpcli.port.engine import port_program, rules_only

REPO = Path(__file__).resolve().parents[1]
SOURCES = sorted((REPO / "ddpcli" / "port").rglob("*.py"))
NODE_CLASSES = {name: getattr(cst, name) for name in dir(cst) if dataclasses.is_dataclass(getattr(cst, name))}
ALL_FIELDS = {f.name for node in NODE_CLASSES.values() for f in dataclasses.fields(node)}


def constructions() -> list[tuple[Path, int, ast.Call]]:
    """Each `cst.X(...)` of a node class and each `.with_changes(...)` in the port's source."""
    found = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                func = node.func
                builds = isinstance(func.value, ast.Name) and func.value.id == "cst" and func.attr in NODE_CLASSES
                if builds or func.attr == "with_changes":
                    found.append((path, node.lineno, node))
    return found


def test_each_construction_names_only_fields_of_its_node() -> None:
    wrong = []
    for path, line, call in constructions():
        assert isinstance(call.func, ast.Attribute)
        if call.func.attr == "with_changes":
            allowed = ALL_FIELDS
        else:
            fields = [f.name for f in dataclasses.fields(NODE_CLASSES[call.func.attr])]
            allowed = set(fields)
            if len(call.args) > len(fields):
                wrong.append(f"{path.name}:{line}: {call.func.attr} takes {len(fields)} fields")
        wrong += [f"{path.name}:{line}: {call.func.attr}({k.arg}=)" for k in call.keywords
                  if k.arg is not None and k.arg not in allowed]  # fmt: skip
    assert wrong == []


def test_the_checker_sees_a_wrong_field() -> None:
    call = ast.parse("cst.IfExp(test=a, body=b, orelse=c, whitespace_before_test=d)").body[0].value  # type: ignore[attr-defined]
    fields = {f.name for f in dataclasses.fields(NODE_CLASSES[call.func.attr])}
    assert [k.arg for k in call.keywords if k.arg not in fields] == ["whitespace_before_test"]


HEAD = "import torch\nimport torch.nn.functional as F\nfrom torch import nn\nfrom torch.utils.data import DataLoader\n"
SCRIPTS = {
    # wrap, unwrap, sampler, rank0 (print, save, writer, wandb.init, a writer rank 0 alone builds, tqdm, open outside
    # a with, a path's open, a log file's handler, a logging configuration), DataParallel, .cuda(), device, a pinned GPU
    "many": HEAD
    + textwrap.dedent("""\
        from torch.utils.tensorboard import SummaryWriter
        from tqdm import tqdm
        import wandb
        writer = SummaryWriter()
        wandb.init(project="p")
        with open("notes.txt", "w") as notes:
            side = SummaryWriter("side")
        log = open("log.txt", "w")
        from pathlib import Path
        record = Path("record.txt").open("a")
        import logging
        import logging.config
        logging.config.dictConfig({"version": 1})
        handler = logging.FileHandler("train.log")
        device = torch.device("cuda")
        pinned = torch.device("cuda", 0)
        model = nn.DataParallel(nn.Linear(4, 1))
        model.cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_loader = DataLoader(torch.randn(8, 4), batch_size=2)
        for epoch in range(2):
            for x in tqdm(train_loader):
                optimizer.zero_grad()
                loss = F.mse_loss(model(x), x[:, :1], reduction="sum")
                loss.backward()
                optimizer.step()
            print(epoch, len(train_loader), model(x).sum())
        torch.save(model.state_dict(), "m.pt")
        model.load_state_dict(torch.load("m.pt"))
        writer.add_graph(model.eval(), x)
        traced = torch.jit.trace(model, x)
        plain = model.module if isinstance(model, nn.DataParallel) else model
        """),
    # accumulation, hand batching by slices, batchify by column, an exit the loss decides, a main that exits (teardown
    # in a finally)
    "by_hand": HEAD
    + textwrap.dedent("""\
        import sys
        def batchify(data, bsz):
            nbatch = data.size(0) // bsz
            return data[: nbatch * bsz].view(bsz, -1).t().contiguous()
        def main():
            model = nn.Linear(4, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            train_data = batchify(torch.randn(64), 4)
            x = torch.randn(64, 4)
            for i in range(0, len(x), 8):
                loss = model(x[i:i + 8]).sum() / 2
                loss.backward()
                if (i + 1) % 2 == 0:
                    optimizer.step()
                    optimizer.zero_grad()
                if loss.item() < 1e-6:
                    break
            return 0
        if __name__ == "__main__":
            sys.exit(main())
        """),
    # batches sliced by hand from an order drawn each epoch: rank 0's (_ddp_same)
    "shuffled": HEAD
    + textwrap.dedent("""\
        model = nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(64, 4)
        for epoch in range(2):
            perm = torch.randperm(64)
            for i in range(0, len(x), 8):
                model(x[perm[i:i + 8]]).sum().backward()
                optimizer.step()
        """),
    # names the port adds that the script takes: renamed in the port's code, the script's own kept
    "taken": HEAD
    + textwrap.dedent("""\
        from os import path as _ddp
        _is_main = dict(dist=1)
        model = nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in [torch.randn(2, 4)]:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
        print(_is_main, _ddp.sep)
        for epoch in range(2):
            for x in DataLoader(torch.randn(8, 4), batch_size=2, shuffle=True):
                optimizer.zero_grad()
                model(x).sum().backward()
                optimizer.step()
        """),
    # loaders in a dict by phase: the phase that steps sharded
    "phases": HEAD
    + textwrap.dedent("""\
        loaders = {x: DataLoader(torch.randn(8, 4), batch_size=2) for x in ["train", "val"]}
        model = nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            for phase in ["train", "val"]:
                for x in loaders[phase]:
                    if phase == "train":
                        model(x).sum().backward()
                        optimizer.step()
        """),
    # a draw that decides how the model is built (a search's width)
    "search": HEAD
    + textwrap.dedent("""\
        import random
        for fold in range(2):
            model = nn.Linear(4, random.randint(1, 8))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in [torch.randn(2, 4)]:
                optimizer.zero_grad()
                model(x).sum().backward()
                optimizer.step()
        """),
    # a loss from a method of the model, run as DDP's forward
    "method": HEAD
    + textwrap.dedent("""\
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.layer = nn.Linear(4, 1)

            def loss(self, x):
                return self.layer(x).sum()
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in DataLoader(torch.randn(8, 4), batch_size=2):
            optimizer.zero_grad()
            model.loss(x).backward()
            optimizer.step()
        torch.save(model, "model.pt")
        """),
    "empty": "# nothing but a comment\n",  # the header alone (the rules run on it as the robustness run does)
}


# a program of several files (ddpcli.port.program): each import spelling a copy is pointed at, in the script and a
# package's module, and a package's __init__ copied inside it; training data a configuration names
PROGRAM = {
    "train.py": HEAD
    + "import utils\nimport utils as u\nfrom pkg import io\nfrom pkg.io import save\n"
    + "from pkg import save as psave, VERSION\nfrom pkg import save as qsave\n"
    + "from box import keep, part, plain\nfrom box import *\nimport box\nbox.keep('k.pt')\n"
    + SCRIPTS["phases"]
    + "utils.save(model, 'a.pt'); u.save(model, 'b.pt'); io.save(model, 'c.pt')\n"
    + "from pkg.data import make\nfor x in make():\n    model(x).sum().backward()\n    optimizer.step()\n"
    + "from conf import Conf\nfrom steps import fit\nfrom pkg import data as datasets\n"
    + "fit(model, optimizer, Conf().init_obj('make', datasets))\n",
    # training data a configuration names (a builder by name), handed to another file's step
    "conf.py": "class Conf:\n    def init_obj(self, name, module, *args):\n"
    "        return getattr(module, name)(*args)\n",
    "steps.py": "def fit(model, optimizer, loader):\n    for x in loader:\n        optimizer.zero_grad()\n"
    "        model(x).sum().backward()\n        optimizer.step()\n",
    "pkg/data.py": "import torch\nfrom torch.utils.data import DataLoader\n\n\ndef make():\n"
    "    return DataLoader(torch.randn(8, 4), batch_size=2)\n",
    "utils.py": "import torch\n\n\ndef save(model, path):\n    torch.save(model.state_dict(), path)\n",
    "pkg/__init__.py": "from .io import *\nVERSION = 1\n",
    "pkg/io.py": "import torch\nfrom . import helper\nfrom .helper import hold\n\n\ndef save(model, path):\n"
    "    torch.save(model.state_dict(), path)\n",
    "pkg/helper.py": "import torch\n\n\ndef hold(path):\n    torch.save({}, path)\n",
    # a package whose __init__ a rule changes: its copy inside it, beside a copied and an unchanged submodule
    "box/__init__.py": "import torch\n\n\ndef keep(path):\n    torch.save({}, path)\n",
    "box/part.py": "import torch\n\n\ndef put(path):\n    torch.save({}, path)\n",
    "box/plain.py": "X = 1\n",
}


def test_every_construction_is_built_while_porting(tmp_path: Path) -> None:
    wanted = {(str(path), line) for path, line, _ in constructions()}
    ran: set[tuple[str, int]] = set()
    files = {str(path) for path in SOURCES}

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename not in files:
            return None
        if event == "line":
            ran.add((frame.f_code.co_filename, frame.f_lineno))
        return trace

    sys.settrace(trace)
    try:
        for name, source in SCRIPTS.items():
            compile(rules_only(source, f"{name}.py").source, name, "exec")
        for name, source in PROGRAM.items():
            (tmp_path / name).parent.mkdir(exist_ok=True)
            (tmp_path / name).write_text(source, encoding="utf-8")
        ported = port_program(tmp_path / "train.py")
        for module in ported.modules:
            compile(module.result.source, module.name, "exec")  # type: ignore[union-attr]
    finally:
        sys.settrace(None)
    missing = sorted(f"{Path(path).relative_to(REPO)}:{line}" for path, line in wanted - ran)
    assert missing == []
