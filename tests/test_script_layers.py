"""ddpcli.script.layers: which layers a model class builds that its training forward may not reach, the question
that decides DDP's find_unused_parameters (MorvanZhou's batch normalization net calls its input BatchNorm only when
its flag is set); and the port asking it of a model whose class is in another file of the program."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ddpcli.port.engine import port_program
from ddpcli.script.layers import classes_of, unreached_in
from ddpcli.script.reader import Reader

CLASS = """\
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, flag=False):
        super().__init__()
        self.flag = flag
        self.extra = nn.Linear(4, 4)
        self.body = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.1)
        self.loss = nn.MSELoss()

    def forward(self, x):
        FORWARD
        return self.drop(self.body(x))

    def helper(self, x):
        return self.extra(x)
"""


def unreached(forward: str) -> list[str]:
    classes = classes_of(Reader.read(CLASS.replace("FORWARD", forward)))
    return unreached_in(classes, ["Net"]).get("Net", [])


@pytest.mark.parametrize(
    ("forward", "expected"),
    [
        ("x = self.extra(x)", []),  # reached on every call
        ("if self.flag: x = self.extra(x)", ["extra"]),  # only under a condition
        ("x = self.extra(x) if self.flag else x", ["extra"]),
        ("x = self.flag and self.extra(x)", ["extra"]),
        ("if self.training: x = self.extra(x)", []),  # DDP's backward follows a training forward
        ("if not self.training: x = self.extra(x)", ["extra"]),
        ("x = self.helper(x)", []),  # through a method forward calls
        ("if self.flag: x = self.helper(x)", ["extra"]),
        ("try:\n            x = x + 1\n        except ValueError:\n            x = self.extra(x)", ["extra"]),
        ("pass", ["extra"]),  # never: built and not called (the Dropout and the loss have no parameters)
        ("x = getattr(self, 'extra')(x) if self.flag else x", []),  # by name at run time: not judged
        ("for layer in self.children(): pass", []),
        # after an early return: the rest of the forward, the class's own last line too
        ("if x.sum() > 0:\n            return x\n        x = self.extra(x)", ["body", "extra"]),
        ("if self.training:\n            return self.extra(x)\n        x = self.body(x)", []),
    ],
)
def test_a_layer_is_unreached_where_the_forward_calls_it_only_under_a_condition(
    forward: str, expected: list[str]
) -> None:
    assert unreached(forward) == expected


def test_an_inherited_forward_is_not_judged() -> None:
    source = CLASS.replace("FORWARD", "pass").replace("def forward(self, x):", "def predict(self, x):")
    assert unreached_in(classes_of(Reader.read(source)), ["Net"]) == {}


def test_the_blocks_a_model_builds_are_asked_too() -> None:
    """`self.block = Net(flag)` in a larger model: the block's optional layer is the model's unused parameter."""
    source = CLASS.replace("FORWARD", "if self.flag: x = self.extra(x)") + textwrap.dedent("""
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Net(flag=False)

            def forward(self, x):
                return self.block(x)
        """)
    assert unreached_in(classes_of(Reader.read(source)), ["Model"]) == {"Net": ["extra"]}


@pytest.mark.parametrize("built", ["Net(flag=False)", "Net(flag=False).to('cpu')"])
def test_a_model_whose_class_is_in_another_file_is_wrapped_with_find_unused(tmp_path: Path, built: str) -> None:
    """The class decides, wherever the program defines it: models.py's Net, the script's `model = Net(...)`; moved
    as it is built (`Generator(...).to(config.DEVICE)`, ProGAN's: its class was taken for `to`)."""
    (tmp_path / "models.py").write_text(CLASS.replace("FORWARD", "if self.flag: x = self.extra(x)"))
    (tmp_path / "train.py").write_text(
        textwrap.dedent(f"""\
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from models import Net

        model = {built}
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 4)), batch_size=4)
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        """)
    )
    result = port_program(tmp_path / "train.py").script
    assert "model = _DDPModel(model, find_unused_parameters=True)" in result.source
    assert any("Net.extra" in change.text for change in result.changes), result.changes
    plain = CLASS.replace("FORWARD", "x = self.extra(x)")
    (tmp_path / "models.py").write_text(plain)
    assert "model = _DDPModel(model)\n" in port_program(tmp_path / "train.py").script.source


BLOCKS = """\
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
        self.head = nn.Linear(4, 1)

    def forward(self, x, steps):
        FORWARD
        return self.head(x)
"""


@pytest.mark.parametrize(
    ("forward", "expected"),
    [
        ("for step in range(steps):\n            x = self.blocks[step](x)", ["blocks"]),  # ProGAN's progressive blocks
        ("x = self.blocks[steps - 1](x)", ["blocks"]),  # the entry a forward argument picks
        ("for block in self.blocks[:steps]:\n            x = block(x)", ["blocks"]),
        ("for block in self.blocks:\n            x = block(x)", []),  # every entry
        ("for i in range(len(self.blocks)):\n            x = self.blocks[i](x)", []),
        ("for i, block in enumerate(self.blocks):\n            x = self.blocks[i](x)", []),
        ("x = self.blocks[-1](self.blocks[0](x))", []),  # numbers written out (entry 1 unused: not judged)
    ],
)
def test_a_container_indexed_by_what_the_call_decides_may_leave_layers_unreached(forward: str, expected: list) -> None:
    """Found by the session's helpers on aladdinpersson's ProGAN: `self.prog_blocks[step]` for the first `steps`
    blocks, and the RGB layers at `steps - 1` and `steps`; the reference to the container counted as reaching every
    entry, the wrap had no find_unused_parameters, and the 2-process run failed ("Expected to have finished
    reduction in the prior iteration")."""
    classes = classes_of(Reader.read(BLOCKS.replace("FORWARD", forward)))
    assert unreached_in(classes, ["Net"]).get("Net", []) == expected


def test_layers_built_in_one_tuple_assignment_are_each_built() -> None:
    """ProGAN's `self.prog_blocks, self.rgb_layers = (nn.ModuleList([]), nn.ModuleList([...]))`: neither was counted
    as built, so no entry of either could be unreached (its corpus run failed as before the indexing was read)."""
    one = "self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])"
    source = BLOCKS.replace(one, "self.blocks, self.rgb = (nn.ModuleList([nn.Linear(4, 4)]), nn.ModuleList([]))")
    source = source.replace("FORWARD", "for step in range(steps):\n            x = self.blocks[step](x)")
    assert unreached_in(classes_of(Reader.read(source)), ["Net"]).get("Net", []) == ["blocks", "rgb"]
