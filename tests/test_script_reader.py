"""The one script reader (issue 37 item 1): names resolved through imports, aliases and scopes, the training loader
found by where its batches flow, a layer class told from a word. Init and port decide by it, so a script means
the same thing to both."""

from __future__ import annotations

import builtins
import keyword as python_keywords
from pathlib import Path

import libcst as cst
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.metadata import QualifiedNameSource, ScopeProvider

from ddpcli.init.roles import LITERAL_NAMES
from ddpcli.init.script_kind import script_facts
from ddpcli.port.facts import Facts
from ddpcli.script import reader as reader_module
from ddpcli.script.flow import feeding_parameters, training_loaders
from ddpcli.script.reader import Reader, dotted, last_name
from ddpcli.script.values import origins


def resolved(source: str) -> list[tuple[str, str]]:
    """Each call's function as written and what it resolves to, in source order."""
    reader = Reader.read(source)
    return [(reader.module.code_for_node(call.func), reader.resolve(call)) for call in reader.calls]


def loader_lines(source: str) -> list[int]:
    reader = Reader.read(source)
    return [reader.line(call) for call in training_loaders(reader)]


IDENTIFIERS = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda name: not python_keywords.iskeyword(name) and not hasattr(builtins, name)
)


def test_qualified_names_go_through_imports_and_aliases() -> None:
    source = (
        "import torch.nn as nn\nimport torch\nfrom torch.optim import AdamW as A\nfrom torch import optim\n"
        "m = nn.BatchNorm2d(3)\no = A(m.parameters())\np = optim.SGD(m.parameters())\nq = torch.optim.Adam(w)\n"
    )
    assert resolved(source) == [
        ("nn.BatchNorm2d", "torch.nn.BatchNorm2d"),
        ("A", "torch.optim.AdamW"),
        ("m.parameters", "m.parameters"),
        ("optim.SGD", "torch.optim.SGD"),
        ("m.parameters", "m.parameters"),
        ("torch.optim.Adam", "torch.optim.Adam"),
    ]


def test_builtins_and_names_of_the_script_keep_their_spelling() -> None:
    assert resolved("print(1)\nmodel.save(x)\nfrom x import *\nstar()\n") == [
        ("print", "print"),
        ("model.save", "model.save"),
        ("star", "star"),
    ]


@given(alias=IDENTIFIERS)
def test_any_alias_of_a_module_resolves_to_the_module(alias: str) -> None:
    source = f"import torch.nn as {alias}\nlayer = {alias}.BatchNorm2d(3)\n"
    assert resolved(source)[-1] == (f"{alias}.BatchNorm2d", "torch.nn.BatchNorm2d")


@given(alias=IDENTIFIERS)
def test_any_alias_of_an_optimizer_class_is_that_class_for_port(alias: str) -> None:
    source = f"from torch.optim import AdamW as {alias}\nopt = {alias}(model.parameters())\nopt.step()\n"
    facts = Facts.read(source)
    assert [facts.resolve(call) for call in facts.optimizer_calls()] == ["torch.optim.AdamW"]
    assert len(facts.step_calls()) == 1


def test_a_name_shadowed_by_a_local_is_not_the_import() -> None:
    source = (
        "import torch\n"
        "def f(x):\n    torch = Stub()\n    torch.load(x)\n"
        "def g(torch):\n    torch.save(1)\n"
        "torch.load('m.pt')\n"
    )
    calls = dict(resolved(source))
    assert resolved(source)[0][1] == "Stub"
    inner, parameter, outer = (name for code, name in resolved(source) if code != "Stub")
    assert inner != "torch.load" and inner.endswith("torch.load")
    assert parameter != "torch.save"
    assert outer == "torch.load" and calls["torch.load"] == "torch.load"


@settings(max_examples=40, deadline=None)
@given(alias=IDENTIFIERS, attribute=st.sampled_from(["load", "save", "optim.SGD", "nn.Linear"]))
def test_the_imports_alone_resolve_as_the_scopes_do_where_nothing_shadows(alias: str, attribute: str) -> None:
    """The fast path (imports only, no ScopeProvider) gives libcst's own answer for every unshadowed name."""
    source = f"import torch as {alias}\ndef F():\n    return {alias}.{attribute}(1)\nY = {alias}.{attribute}(2)\n"
    reader = Reader.read(source)
    assert reader.shadowable == set()
    for call in reader.calls:
        scope = reader.scope_of(call.func)
        assert scope is not None
        qualified = {q.name for q in scope.get_qualified_names_for(call.func) if q.source is QualifiedNameSource.IMPORT}
        assert qualified == {reader.resolve(call)} == {f"torch.{attribute}"}


def test_scopes_give_the_bindings_an_access_reaches() -> None:
    source = "lr = 0.1\ndef f():\n    return lr\ndef g(lr):\n    return lr\n"
    reader = Reader.read(source)
    spelled = [node for node in reader.order if isinstance(node, cst.Name) and node.value == "lr"]
    module_level, parameter = spelled[1], spelled[3]  # `return lr` in f, `return lr` in g
    assert [reader.module.code_for_node(v) for v in reader.values_of(module_level)] == ["0.1"]
    assert [type(v) for v in reader.values_of(parameter)] == [cst.Param]


def test_a_chain_on_a_call_spells_no_name_but_resolves_to_its_path() -> None:
    """`dotted()` is one function for init and port: '' for `make().AdamW`; what it is comes from `resolve`."""
    source = "def make():\n    return torch.optim\nopt = make().AdamW(params)\nopt.step()\n"
    facts = Facts.read(source)
    call = next(call for call in facts.calls if last_name(call) == "AdamW")
    assert dotted(call.func) == ""
    assert facts.resolve(call) == "make.AdamW"
    assert facts.optimizer_calls() == [call] and len(facts.step_calls()) == 1
    from ddpcli.init import script_kind
    from ddpcli.port import facts as port_facts

    assert port_facts.dotted is reader_module.dotted
    assert script_kind.optimizer_class_kind(facts.resolve(call)) == "adamw"


def test_batchnorm_is_a_layer_class_not_a_word() -> None:
    assert Reader.read("import torch.nn as nn\nnet = nn.Sequential(nn.BatchNorm2d(3))\n").builds_layer("BatchNorm")
    assert Reader.read("from torch.nn import BatchNorm1d as BN\nlayer = BN(4)\n").builds_layer("BatchNorm")
    words = "# no BatchNorm here\nnote = 'BatchNorm2d'\nBatchNorm_count = 0\nprint(note, BatchNorm_count)\n"
    assert not Reader.read(words).builds_layer("BatchNorm")


TRAIN_AND_TEST = """
from torch.utils.data import DataLoader
def main():
    {a} = DataLoader(ds, batch_size=128)
    {b} = DataLoader(ds, batch_size=100)
    for epoch in range(2):
        for x, y in {a}:
            loss = crit(model(x), y)
            loss.backward()
        for x, y in {b}:
            loss = crit(model(x), y)
            print(loss.item())
"""


@settings(max_examples=30, deadline=None)
@given(names=st.lists(IDENTIFIERS.filter(lambda n: n not in {"x", "y", "ds", "loss", "crit", "model", "epoch"}),
                      min_size=2, max_size=2, unique=True))  # fmt: skip
def test_the_training_loader_is_the_one_whose_batches_reach_backward_whatever_its_name(names: list[str]) -> None:
    assert loader_lines(TRAIN_AND_TEST.format(a=names[0], b=names[1])) == [4]
    assert loader_lines(TRAIN_AND_TEST.format(a="test_loader", b="train_loader")) == [4]


def test_a_loader_in_a_dict_comprehension_is_found_through_the_subscript() -> None:
    source = (
        "from torch.utils.data import DataLoader\n"
        "dataloaders = {x: DataLoader(ds[x], batch_size=4) for x in ['train', 'val']}\n"
        "for phase in ['train', 'val']:\n"
        "    for inputs, labels in dataloaders[phase]:\n"
        "        loss = crit(model(inputs), labels)\n"
        "        loss.backward()\n"
    )
    assert loader_lines(source) == [2]


@pytest.mark.parametrize("order", [("train", "val"), ("val", "train")])
def test_attributes_unpacked_from_a_written_out_tuple_are_each_their_element(order: tuple[str, str]) -> None:
    """jfzhang95/pytorch-deeplab-xception's `self.train_loader, self.val_loader, ... = make_data_loader(args)`:
    an attribute assigned by unpacking was never followed. Written out, each is its own element."""
    first, second = order
    source = (
        "from torch.utils.data import DataLoader\n"
        "class T:\n    def __init__(self):\n"
        f"        self.{first}_loader, self.{second}_loader = DataLoader(a), DataLoader(b)\n"
        "    def fit(self):\n        for x in self.train_loader:\n            model(x).sum().backward()\n"
    )
    facts = Facts.read(source)
    (loader,) = facts.training_loaders()
    assert facts.code(loader) == ("DataLoader(a)" if first == "train" else "DataLoader(b)")


def test_a_loader_iterated_inline_is_the_training_loader() -> None:
    source = (
        "import torch\n"
        "evaluation = torch.utils.data.DataLoader(ds, batch_size=7)\n"
        "for x, y in torch.utils.data.DataLoader(ds, batch_size=8, sampler=s):\n"
        "    scaler.scale(f(x, y)).backward()\n"
    )
    assert loader_lines(source) == [3]


def test_a_loader_built_in_a_function_and_passed_on_is_followed() -> None:
    source = (
        "from torch.utils.data import DataLoader as DL\n"
        "def make(bs):\n    return DL(ds, batch_size=bs)\n"
        "def fit(model, loader):\n    for i, (x, y) in enumerate(loader):\n        crit(model(x), y).backward()\n"
        "def evaluate(model, loader):\n    for x, y in loader:\n        model(x)\n"
        "train_eval = DL(ds, batch_size=100)\nfit(net, make(128))\nevaluate(net, train_eval)\n"
    )
    assert loader_lines(source) == [3]


def test_a_loss_function_the_evaluation_also_calls_does_not_make_its_loader_a_training_one() -> None:
    """The VAE example's shape: `vae_loss(...)` is back-propagated in train() and only summed in test(); the walk
    leaves the loss function through the call it came in by."""
    source = (
        "from torch.utils.data import DataLoader\n"
        "train_loader = DataLoader(a, batch_size=32, shuffle=True)\ntest_loader = DataLoader(b, batch_size=32)\n"
        "def vae_loss(recon, x):\n    return ((recon - x) ** 2).sum()\n"
        "def train():\n    for (x,) in train_loader:\n        loss = vae_loss(model(x), x)\n        loss.backward()\n"
        "def test():\n    total = 0.0\n    for (x,) in test_loader:\n        total += vae_loss(model(x), x).item()\n"
    )
    assert loader_lines(source) == [2]


def test_a_loss_function_reached_through_two_calls_leaves_by_the_same_two() -> None:
    source = (
        "from torch.utils.data import DataLoader\n"
        "fit_data = DataLoader(a)\nheld_out = DataLoader(b)\n"
        "def inner(out, y):\n    return (out - y).abs().sum()\n"
        "def outer(out, y):\n    return inner(out, y) * 2\n"
        "for x, y in fit_data:\n    outer(model(x), y).backward()\n"
        "for x, y in held_out:\n    print(outer(model(x), y))\n"
    )
    assert loader_lines(source) == [2]


def test_no_backward_no_training_loader() -> None:
    assert loader_lines("from torch.utils.data import DataLoader\nfor x in DataLoader(ds):\n    print(x)\n") == []


def test_an_optimizer_step_is_decided_by_what_the_receiver_is_not_by_its_name() -> None:
    source = (
        "import torch\n"
        "def fit(model, thing, opt_sched):\n    thing.step()\n    opt_sched.step()\n"
        "w = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "s = torch.optim.lr_scheduler.StepLR(w, 1)\n"
        "fit(net, w, s)\n"
    )
    facts = Facts.read(source)
    assert [facts.line(call) for call in facts.step_calls()] == [3]


def test_a_step_of_an_optimizer_from_a_loop_or_an_attribute_is_one() -> None:
    source = (
        "import torch\n"
        "d = torch.optim.Adam(a.parameters())\ng = torch.optim.Adam(b.parameters())\n"
        "for o in [d, g]:\n    o.step()\n"
        "class T:\n    def __init__(self, o):\n        self.o = o\n    def run(self):\n        self.o.step()\n"
        "T(d).run()\n"
    )
    facts = Facts.read(source)
    assert [facts.line(call) for call in facts.step_calls()] == [5, 10]
    receiver = facts.step_calls()[0].func
    assert isinstance(receiver, cst.Attribute)
    assert {facts.line(end) for end in origins(facts, receiver.value)} == {2, 3}


def test_init_reads_the_training_loaders_batch_not_the_first_loaders(tmp_path: Path) -> None:
    """The ported CIFAR script of issue 37: the test loader (100) comes first in the file, the training loader
    (128) is hidden in `_ddp_shard(...)`: the batch init plans from is the one the loss is computed on."""
    script = tmp_path / "main.py"
    script.write_text(
        "import torch\nfrom torch.utils.data import DataLoader\n"
        "testloader = DataLoader(testset, batch_size=100, shuffle=False)\n"
        "trainloader = _ddp_shard(DataLoader(trainset, batch_size=128, shuffle=True))\n"
        "optimizer = make().AdamW(net.parameters(), lr=0.1)\n"
        "def train(epoch):\n    for inputs, targets in trainloader:\n"
        "        loss = criterion(net(inputs), targets)\n        loss.backward()\n        optimizer.step()\n"
        "def test(epoch):\n    for inputs, targets in testloader:\n        print(net(inputs))\n",
        encoding="utf-8",
    )
    facts = script_facts(script, LITERAL_NAMES)
    assert facts.literals["per_device_batch_size"].value == 128
    assert facts.literals["per_device_batch_size"].line == 4
    assert [(found.value, found.line) for found in facts.optimizers] == [("adamw", 5)]
    assert facts.literals["lr"].value == 0.1


def test_argv_and_exec_are_read_by_what_the_names_are(tmp_path: Path) -> None:
    hand = tmp_path / "hand.py"
    hand.write_text("from sys import argv as a\nsteps = int(a[1])\n", encoding="utf-8")
    words = tmp_path / "words.py"
    words.write_text("# reads sys.argv? no\nclass O:\n    argv = 1\nprint(O().argv, 'sys.argv')\n", encoding="utf-8")
    assert script_facts(hand, {}).kind == "hand"
    assert script_facts(words, {}).kind == "none"


@settings(max_examples=20, deadline=None)
@given(count=st.integers(min_value=1, max_value=6), asked=st.integers(min_value=0, max_value=5))
def test_a_functions_scope_alone_gives_what_the_whole_modules_does(count: int, asked: int) -> None:
    """Scopes are computed per top-level function (the others as bare names): the bindings an access reaches are
    those libcst finds over the whole module."""
    source = "".join(f"lr_{i} = {i}.5\ndef f_{i}(x):\n    y = lr_{i} * x\n    return f_{(i + 1) % count}(y)\n"
                     for i in range(count))  # fmt: skip
    reader = Reader.read(source)
    function = reader.functions[f"f_{asked % count}"]
    whole = reader.wrapper.resolve(ScopeProvider)
    for name in (n for n in reader.walk(function) if isinstance(n, cst.Name) and n.value.startswith(("lr_", "x"))):
        if not reader.is_variable(name) or isinstance(reader.parents.get(name), cst.Param):
            continue
        expected = {reader.code(reader._binder(a.node)) for access in whole[name].accesses[name]
                    if access.node is name for a in access.referents}  # fmt: skip
        assert {reader.code(value) for value in reader.values_of(name)} == expected != set()


BRANCHES = """\
class Solver:
    def __init__(self, celeba_loader, rafd_loader, steps):
        self.celeba_loader = celeba_loader
        self.rafd_loader = rafd_loader
        self.steps = steps

    def train(self):
        CHOICE
        for x, y in data_loader:
            loss = self.model(x).sub(y).pow(2).mean()
            loss.backward()
"""


@pytest.mark.parametrize(
    ("choice", "feeding"),
    [
        ("if self.steps:\n            data_loader = self.celeba_loader\n        elif self.steps > 1:\n"
         "            data_loader = self.rafd_loader", {"celeba_loader", "rafd_loader"}),
        ("data_loader = self.celeba_loader\n        if self.steps:\n            data_loader = self.rafd_loader",
         {"celeba_loader", "rafd_loader"}),  # the if may not run: the binding before it reaches too
        ("if self.steps:\n            data_loader = self.celeba_loader\n        else:\n"
         "            data_loader = self.rafd_loader", {"celeba_loader", "rafd_loader"}),
        ("data_loader = self.celeba_loader\n        data_loader = self.rafd_loader", {"rafd_loader"}),
    ],
)  # fmt: skip
def test_the_bindings_of_every_branch_of_an_if_reach_a_name_after_it(choice: str, feeding: set[str]) -> None:
    """StarGAN's Solver.train (the corpus): `if CelebA: data_loader = self.celeba_loader elif RaFD: data_loader =
    self.rafd_loader`: only the last binding before the loop was read, so the CelebA loader the script hands to the
    Solver fed nothing and was never sharded."""
    facts = Facts.read(BRANCHES.replace("CHOICE", choice))
    params, feeds = feeding_parameters(facts)["Solver"][:2]
    assert params == ("celeba_loader", "rafd_loader", "steps")
    assert set(feeds) & {"celeba_loader", "rafd_loader"} == feeding


@pytest.mark.parametrize("kept", ['kwargs["optimizer"]', "kwargs.get('optimizer')", "kw['optimizer']"])
def test_an_optimizer_handed_through_keyword_arguments_is_followed_to_its_step(kept: str) -> None:
    """sthalles/SimCLR (tried, held by no test before): `SimCLR(model=model, optimizer=optimizer, ...)` keeps
    `kwargs['optimizer']` in `__init__(self, *args, **kwargs)` and steps it as `scaler.step(self.optimizer)`: the
    keyword argument named at each call is what the subscript of `**kwargs` is."""
    star = "kw" if kept.startswith("kw[") else "kwargs"
    source = (
        "import torch\n"
        f"class Trainer:\n    def __init__(self, *args, **{star}):\n        self.optimizer = {kept}\n"
        "    def fit(self, scaler):\n        scaler.step(self.optimizer)\n        self.thing.step()\n"
        "optimizer = torch.optim.Adam(net.parameters())\n"
        "Trainer(model=net, optimizer=optimizer).fit(torch.amp.GradScaler())\n"
    )
    facts = Facts.read(source)
    assert [facts.line(call) for call in facts.step_calls()] == [6]
    argument = facts.step_calls()[0].args[0].value
    assert [facts.line(end) for end in origins(facts, argument)] == [8]
