"""A random draw that decides what is built is one draw for the whole run: rank 0's value on every rank; and so is
a loop's exit that values of the rank's own data decide.

Each rank draws from its own stream: the port offsets every rank's RNG where training starts (per-sample noise,
dropout and augmentation must differ across ranks), and a script that never seeds draws differently on every rank
from the start. A draw that a trained model's construction reads (a width a search picks, a random architecture, a
trial of a hyperparameter search per fold) would then build models of different shapes on different ranks, and
DistributedDataParallel fails at the wrap. Such a draw, found by what the model's construction holds as the reader
follows it (ddpcli.script.values.held: names to their bindings, the script's functions to their returns), becomes
`_ddp_same(draw)`: every rank draws, rank 0's value is broadcast; under python, the draw itself.

A training loop's `break` or `return` (or a `while` test) decided by what the rank computed from its own share of
the data (an early stop on the training loss, a stopper object handed the loss, `if loss.item() < 0.01: break`)
is decided differently on different ranks: one rank leaves the loop, the others wait in their next all-reduce for
it (gloo fails the run, nccl hangs). Such a test becomes `_ddp_same(bool(test))`: rank 0's decision on every rank.
A test of counters, constants and arguments alone is the same on every rank and is left as it is."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.facts import Facts, dotted, last_name
from ddpcli.port.rules.training import Training
from ddpcli.script.values import held, is_loader, sources

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
    _exits_decided_by_data(port)
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


def _exits_decided_by_data(port: Port) -> None:
    facts = port.facts
    training = Training(facts)
    elsewhere = set(facts.feeding_elsewhere)
    reached = {node for node in facts.backward_sources()  # the rank's data: its batches' loops and its loaders
               if isinstance(node, cst.For | cst.CompFor) or is_loader(facts, node)}  # fmt: skip
    reached |= {call for call in facts.calls if last_name(call) in elsewhere}  # a step of another file's, its value

    def trains(loop: cst.CSTNode) -> bool:
        return training.steps_in(loop) or any(
            isinstance(node, cst.Call) and last_name(node) in elsewhere for node in facts.walk(loop)
        )

    done: set[cst.CSTNode] = set()
    for node in facts.walk(facts.module):
        skip = False
        if isinstance(node, cst.While):
            tests = [node.test] if trains(node) else []
        elif isinstance(node, cst.If) and (loop := _exited_loop(facts, node)) is not None and trains(loop):
            tests = _deciding(facts, node, loop)
        elif isinstance(node, cst.If) and (loop := _continued_loop(facts, node)) is not None:
            skip = _skips_training(facts, training, node, loop)
            tests = _deciding(facts, node, loop) if skip else []
        else:
            tests = []
        for test in tests:
            if test in done or not _rank_local(port, test, reached, set()):
                continue
            done.add(test)
            helper = "_ddp_any" if skip else "_ddp_same"
            port.edits.rewrite(test, lambda t, helper=helper: cst.Call(func=cst.Name(helper), args=[
                cst.Arg(cst.Call(func=cst.Name("bool"), args=[cst.Arg(t)]))]))  # fmt: skip
            port.needs.add("any" if skip else "same")
            port.needs_group_here(test)
            _said(port, node, test, skip)


def _said(port: Port, exit_if: cst.CSTNode, test: cst.BaseExpression, skip: bool) -> None:
    owner, code = port.facts.parents[test], port.code(test)
    if skip:
        said = (
            f"this skip of the training step ({code})"
            if owner is exit_if
            else f"this test ({code}), which decides whether the skip of the training step in it is reached,"
        )
        port.change(owner, "same_decision", f"{said} reads what the rank computed from its own share of the data: "
                    "under torchrun every rank skips when any rank's test says so (a rank skipping alone leaves the "
                    "others waiting in their all-reduce; the global batch holds that rank's samples, and a nan "
                    "there is the whole batch's); the test itself under python")  # fmt: skip
        return
    said = (
        f"the loop's test ({code}) reads"
        if isinstance(owner, cst.While)
        else f"this exit of the training loop ({code}) reads"
        if owner is exit_if
        else f"this test ({code}) decides whether the training loop's exit in it is reached, and reads"
    )
    port.change(owner, "same_decision", f"{said} what the rank computed from its own share of the data: "
                "rank 0's decision on every rank under torchrun (a rank leaving the loop alone leaves the "
                "others waiting in their next all-reduce); the test itself under python")  # fmt: skip


def _continued_loop(facts: Facts, statement: cst.If) -> cst.CSTNode | None:
    """The loop a `continue` directly in `statement`'s body goes on with: the innermost loop around it."""
    if not any(isinstance(small, cst.Continue) for small in _smalls(statement)):
        return None
    return _innermost_loop(facts, statement)


def _skips_training(facts: Facts, training: Training, statement: cst.If, loop: cst.CSTNode) -> bool:
    """Whether what the `continue` skips (the loop's code after `statement`) holds a backward or a training step:
    a collective every rank must join."""
    end = facts.positions[statement].end.line  # type: ignore[attr-defined]
    for node in facts.walk(loop):
        if node in facts.positions and facts.line(node) > end and isinstance(node, cst.Call) and (
            last_name(node) == "backward" or training.steps_in(node)
        ):  # fmt: skip
            return True
    return False


def _deciding(facts: Facts, exit_if: cst.If, loop: cst.CSTNode) -> list[cst.BaseExpression]:
    """The tests that decide whether `exit_if`'s break, return, exit or continue runs: its own and those of the
    `if`s (and the `elif`s before it) between it and the loop it leaves. Rank 0's decision for the exit alone would
    leave a rank that took another branch of an enclosing `if` out of the collective that decides it."""
    tests = [exit_if.test]
    for ancestor in facts.ancestors(exit_if):
        if ancestor is loop:
            break
        if isinstance(ancestor, cst.If):
            tests.append(ancestor.test)
    return tests


def _exited_loop(facts: Facts, statement: cst.If) -> cst.CSTNode | None:
    """The loop a `break` (or the function a `return`, the process a `sys.exit()`) directly in `statement`'s body
    leaves: the innermost loop around the `if` for a break, the innermost loop around it for a return or an exit
    (it leaves every loop of the function)."""
    if not any(
        isinstance(small, cst.Break | cst.Return) or _ends_process(facts, small) for small in _smalls(statement)
    ):
        return None
    return _innermost_loop(facts, statement)


def _innermost_loop(facts: Facts, statement: cst.CSTNode) -> cst.CSTNode | None:
    """The innermost loop around `statement` within its function (None: none there)."""
    for ancestor in facts.ancestors(statement):
        if isinstance(ancestor, cst.FunctionDef | cst.ClassDef):
            return None
        if isinstance(ancestor, cst.For | cst.While):
            return ancestor
    return None


def _ends_process(facts: Facts, small: cst.BaseSmallStatement) -> bool:
    """`sys.exit(0)`, `exit()`, `quit()`, `os._exit(0)`, `raise SystemExit`: the rank that takes it ends alone (a
    rank that ends with 0 leaves the others waiting in their next all-reduce; torchrun waits for them)."""
    if isinstance(small, cst.Raise):
        raised = small.exc.func if isinstance(small.exc, cst.Call) else small.exc
        return raised is not None and dotted(raised) == "SystemExit"
    if not isinstance(small, cst.Expr) or not isinstance(small.value, cst.Call):
        return False
    return facts.resolve(small.value) in ("sys.exit", "os._exit") or dotted(small.value.func) in ("exit", "quit")


def _smalls(statement: cst.If) -> list[cst.BaseSmallStatement]:
    """The simple statements directly in an `if`'s body (`break`, `continue`, `return`)."""
    if isinstance(statement.body, cst.SimpleStatementSuite):
        return list(statement.body.body)
    return [small for line in statement.body.body if isinstance(line, cst.SimpleStatementLine) for small in line.body]


def _rank_local(port: Port, test: cst.CSTNode, reached: set[cst.CSTNode], asked: set[cst.CSTNode]) -> bool:
    """Whether `test` reads what the training computed from the rank's data: it is computed from the batches a
    backward is computed from (their loops, their loaders: the loss, the outputs), or from what another file's
    training step returns, or it reads an object the script hands such a value to (`stopper(val_loss, model)`,
    then `stopper.early_stop`), or a value bound in a branch that such a test chose (`patience += 1` under `if
    loss > best: ... else:`: the count is each rank's own). The arguments and the config the training also reads
    are the same on every rank; `asked` holds the tests already asked, so that a loop of branches ends."""
    facts = port.facts
    asked.add(test)
    read = list(sources(facts, test))
    if any(node in reached for node in read):
        return True
    if isinstance(facts.parents.get(test), cst.While):  # evaluated after the body too: every binding of its names
        names = {n.value for n in facts.walk(test) if isinstance(n, cst.Name) and facts.is_variable(n)}
        scope = facts.scope(test)
        bound = [statement for name in names for statement in facts.assigned_in(scope, name)]
        if any(node in reached for statement in bound for node in sources(facts, statement)):
            return True
    heads = {dotted(n).split(".")[0] for n in facts.walk(test) if isinstance(n, cst.Name | cst.Attribute) and dotted(n)}
    for call in facts.calls:
        head = dotted(call.func).split(".")[0] if dotted(call.func) else ""
        if head in heads and any(node in reached for arg in call.args for node in sources(facts, arg.value)):
            return True
    inside = set(facts.walk(test))
    choices = {choice: None for node in read if node not in inside for choice in _choosing(facts, node)}
    return any(_rank_local(port, choice, reached, asked) for choice in choices if choice not in asked)


def _choosing(facts: Facts, bound: cst.CSTNode) -> list[cst.BaseExpression]:
    """The tests of the `if`s and `while`s around a binding, within its function: whether it runs is theirs."""
    tests: list[cst.BaseExpression] = []
    child = bound
    for ancestor in facts.ancestors(bound):
        if isinstance(ancestor, cst.FunctionDef | cst.ClassDef):
            break
        if isinstance(ancestor, cst.If | cst.While) and child is not ancestor.test:  # a binding in the test itself
            tests.append(ancestor.test)  # (a walrus) is not chosen by it
        child = ancestor
    return tests
