"""A random draw that decides what is built is one draw for the whole run: rank 0's value on every rank.

Each rank draws from its own stream: the port offsets every rank's RNG where training starts (per-sample noise,
dropout and augmentation must differ across ranks), and a script that never seeds draws differently on every rank
from the start. A draw that a trained model's construction reads (a width a search picks, a random architecture, a
trial of a hyperparameter search per fold) would then build models of different shapes on different ranks, and
DistributedDataParallel fails at the wrap. Such a draw, found by what the model's construction holds as the reader
follows it (ddpcli.script.flow.held: names to their bindings, the script's functions to their returns), becomes
`_ddp_same(draw)`: every rank draws, rank 0's value is broadcast; under python, the draw itself."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.facts import dotted, last_name
from ddpcli.script.flow import held

DRAWS = ("random.", "numpy.random.", "torch.rand", "torch.randint", "torch.randn", "torch.randperm",
         "torch.multinomial", "torch.normal")  # fmt: skip
SEARCH = ("suggest_",)  # optuna's trial.suggest_int / suggest_float / suggest_categorical


def _draws(port: Port, call: cst.Call) -> bool:
    name = port.facts.resolve(call)
    return name.startswith(DRAWS) or last_name(call).startswith(SEARCH)


def _built(port: Port, model: str) -> list[cst.CSTNode]:
    """The values the script assigns to the model's name (`model = Net(width)`), wherever it does."""
    return [node.value for node in port.facts.order if isinstance(node, cst.Assign)
            and any(dotted(target.target) == model for target in node.targets)]  # fmt: skip


def apply(port: Port) -> None:
    done: set[cst.CSTNode] = set()
    for model in port.models:
        for value in _built(port, model):
            if isinstance(value, cst.Call) and last_name(value) == "_DDPModel":
                continue
            for node in held(port.facts, value):
                if isinstance(node, cst.Call) and node not in done and _draws(port, node):
                    done.add(node)
                    port.edits.rewrite(node, lambda n: cst.Call(func=cst.Name("_ddp_same"), args=[cst.Arg(n)]))
                    port.needs.add("same")
                    port.needs_group_here(node)
                    port.change(node, "same_draw", f"{port.code(node)} decides how {model} is built: rank 0's draw on "
                                "every rank under torchrun (each rank's own stream would build models of different "
                                "shapes, and DDP fails at the wrap); the draw itself under python")  # fmt: skip
