"""Data batched by hand, without a DataLoader: `for i in range(0, len(x), batch_size): xb = x[i:i + batch_size]`
in a loop that steps. Under torchrun every rank would train on the same batches. The clear pattern (a range
stepping by the batch, slices that start at the loop variable) is sharded: the loop steps by world size x batch
and each rank slices its own batch, `x[i + _ddp_rank * batch_size : ...]`, up to where every rank still has one;
with one process it is the script's loop. The same loop in a generator of the script's (d2l's `data_iter`: `for i
in range(0, n, bs): yield x[indices[i:i + bs]]`) is sharded so where every call of it is the data of a loop that
steps; one also iterated for evaluation is listed as not ported (sharding it would halve the evaluation).

The order the slices are cut from is one order for the run: a permutation drawn once training has begun (each rank
then draws from its own stream, so that noise differs across ranks), `perm = torch.randperm(n)` or an in-place
`random.shuffle(indices)` in the epoch loop or the generator, is rank 0's on every rank (`_ddp_same`): else each
rank takes its slice of its own permutation, and the shards overlap.

word_language_model's `train_data = batchify(data, bsz)` (its columns are independent streams: `view(bsz, -1).t()`)
is sharded by column, `batchify(data, bsz * _ddp_world)[:, _ddp_rank::_ddp_world].contiguous()`: each rank gets bsz
of the N x bsz streams, so N x bsz/N is 1 x bsz. Any other `batchify` / `get_batch` feeding a step is listed as not
ported, with its line."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.facts import dotted
from ddpcli.port.rules.decisions import DRAWS
from ddpcli.port.rules.training import Training
from ddpcli.script.values import held

BATCH_FUNCTIONS = ("batchify", "get_batch", "get_batches", "iterate_minibatches", "minibatches")
SHUFFLES = ("random.shuffle", "numpy.random.shuffle")  # shuffle the sequence given in place


def _range_by_batch(loop: cst.For) -> tuple[str, cst.Call] | None:
    """`for i in range(0, n, bs)`: the loop variable and the range call."""
    call = loop.iter
    if (isinstance(call, cst.Call) and dotted(call.func) == "range" and len(call.args) == 3
            and isinstance(loop.target, cst.Name)):  # fmt: skip
        return loop.target.value, call
    return None


def _slices(port: Port, loop: cst.For, variable: str, step: str, sharded: set[str]) -> list[cst.Slice]:
    """Slices of the first axis in the loop's body that start at the loop variable, or a fixed offset from it
    (`x[i:i + bs]`, the shifted targets `x[(i+1):(i+1) + bs]`), and span one step (not of data already sharded by
    column: there the slice is a stretch of every stream, not a batch). A slice of a later axis (`x[:, i:i + bs]`,
    time in truncated backpropagation through time) is not a batch."""
    found = []
    for node in port.facts.walk(loop.body):
        if not isinstance(node, cst.Slice) or node.lower is None or node.upper is None:
            continue
        element = port.facts.parents.get(node)
        subscript = port.facts.parents.get(element)
        if not isinstance(subscript, cst.Subscript) or dotted(subscript.value) in sharded:
            continue
        if subscript.slice[0] is not element:
            continue
        lower = port.code(node.lower).replace(" ", "")
        base = lower[1:-1] if lower.startswith("(") and lower.endswith(")") else lower
        if base != variable and not base.startswith(f"{variable}+"):
            continue
        upper = port.code(node.upper).replace(" ", "")
        spans = {f"{lower}+{step}", f"{step}+{lower}", f"{base}+{step}"}
        if upper in spans or upper.startswith(f"min({lower}+{step},"):
            found.append(node)
    return found


def _calls_of(port: Port, function: str) -> list[cst.Call]:
    return [call for call in port.facts.calls if dotted(call.func) == function]


def _in_stepping_iter(port: Port, training: Training, call: cst.Call) -> bool:
    """`for x, y in gen(...)` (or `enumerate(gen(...))`, `tqdm(...)`) where the loop steps."""
    within = {id(call), *map(id, port.facts.ancestors(call))}
    return any(isinstance(loop, cst.For) and training.steps_in(loop) and id(loop.iter) in within
               for loop in port.facts.loops_around(call))  # fmt: skip


def _batch_generators(port: Port, training: Training) -> dict[int, tuple[str, list[cst.Call]]]:
    """Generators of the script's (a `yield` in the body) iterated by a loop that steps: id of each one's loops ->
    (its name, its calls that are not a stepping loop's data: evaluation, a look at one batch)."""
    found: dict[int, tuple[str, list[cst.Call]]] = {}
    for name, function in port.facts.functions.items():
        calls = _calls_of(port, name)
        training_calls = [call for call in calls if _in_stepping_iter(port, training, call)]
        if not training_calls or not any(isinstance(n, cst.Yield) for n in port.facts.walk(function)):
            continue
        others = [call for call in calls if not any(call is seen for seen in training_calls)]
        for node in port.facts.walk(function.body):
            if isinstance(node, cst.For) and port.facts.scope(node) is function:
                found[id(node)] = (name, others)
    return found


def _after_training_starts(port: Port, training: Training, node: cst.CSTNode) -> bool:
    """Drawn where the ranks' streams differ: in a loop that steps, or in a function called from one."""
    if any(training.steps_in(loop) for loop in port.facts.loops_around(node)):
        return True
    scope = port.facts.scope(node)
    if not isinstance(scope, cst.FunctionDef):
        return False
    return any(
        training.steps_in(loop) for call in _calls_of(port, scope.name.value) for loop in port.facts.loops_around(call)
    )


def _one_order(port: Port, training: Training, piece: cst.Slice) -> None:
    """The order a sharded slice is cut from, drawn after the ranks' streams part, made rank 0's on every rank."""
    subscript = port.facts.parents[port.facts.parents[piece]]
    assert isinstance(subscript, cst.Subscript)
    order = dotted(subscript.value)
    for node in held(port.facts, subscript.value):
        if (isinstance(node, cst.Call) and port.facts.resolve(node).startswith(DRAWS)
                and not port.facts.resolve(node).startswith(SHUFFLES)
                and _after_training_starts(port, training, node) and node not in port.same_orders):  # fmt: skip
            port.same_orders.add(node)
            port.edits.rewrite(node, lambda n: cst.Call(func=cst.Name("_ddp_same"), args=[cst.Arg(n)]))
            _said_same(port, node, port.code(node))
    for call in port.facts.calls:
        if (order and port.facts.resolve(call) in SHUFFLES and call.args and dotted(call.args[0].value) == order
                and _after_training_starts(port, training, call) and call not in port.same_orders):  # fmt: skip
            port.same_orders.add(call)
            port.edits.insert_after(port.facts.statement(call), f"{order} = _ddp_same({order})")
            _said_same(port, call, port.code(call))


def _said_same(port: Port, node: cst.CSTNode, drawn: str) -> None:
    port.needs.add("same")
    port.needs_group_here(node)
    port.change(node, "same_draw", f"{drawn}: the order batches are sliced from is rank 0's on every rank under "
                "torchrun (each rank draws from its own stream once training starts, and its slice of its own "
                "permutation would overlap the others'); the draw itself under python")  # fmt: skip


def _streams_by_column(port: Port, call: cst.Call) -> bool:
    """A call of the script's own batchify whose result's columns are the batch (`.view(bsz, -1).t()`), assigned to
    a training name, with the batch as its second argument."""
    function = port.facts.functions.get(dotted(call.func))
    parent = port.facts.parents.get(call)
    if function is None or len(call.args) != 2 or not isinstance(parent, cst.Assign):
        return False
    code = port.code(function).replace(" ", "")
    named = any("train" in dotted(target.target).lower() for target in parent.targets)
    return named and ".view(bsz,-1).t()" in code.replace(function.params.params[-1].name.value, "bsz")


def _shard_columns(port: Port, call: cst.Call) -> None:
    batch = port.code(call.args[1].value)
    port.edits.rewrite(call.args[1].value, lambda n: cst.BinaryOperation(left=n, operator=cst.Multiply(),
                       right=cst.Name("_ddp_world")))  # fmt: skip
    port.edits.rewrite(call, lambda n: cst.parse_expression(
        f"{cst.Module([]).code_for_node(n)}[:, _ddp_rank::_ddp_world].contiguous()"))  # fmt: skip
    port.change(call, "hand_batches", f"{dotted(call.func)}: world size x {batch} streams, each rank its {batch} "
                "columns (_ddp_rank::_ddp_world): the batch stays the script's per device")  # fmt: skip


def _feeds_training(port: Port, training: Training, call: cst.Call) -> bool:
    """In a loop or a function (not the module) that steps, or assigned to a name that says train."""
    scope, parent = port.facts.scope(call), port.facts.parents.get(call)
    if isinstance(scope, cst.FunctionDef) and training.steps_in(scope):
        return True
    if any(training.steps_in(loop) for loop in port.facts.loops_around(call)):
        return True
    return isinstance(parent, cst.Assign) and any("train" in dotted(t.target).lower() for t in parent.targets)


def hand_slices(port: Port) -> list[tuple[cst.Subscript, str]]:
    """The slices a loop that steps cuts the step's data with, by its own variable (`ids[:, i:i+seq_length]` in
    `for i in range(0, ids.size(1) - seq_length, seq_length)`, yunjey's language model), each with where the data
    sliced was assigned: what a step with no DataLoader trains on, to name where no rule could shard it."""
    facts = port.facts
    training = Training(facts)
    found: list[tuple[cst.Subscript, str]] = []
    for source in facts.backward_sources():
        for node in facts.walk(source):
            if not isinstance(node, cst.Subscript) or any(node is seen for seen, _ in found):
                continue
            bounds = {n.value for e in node.slice if isinstance(e.slice, cst.Slice) for n in facts.walk(e.slice)
                      if isinstance(n, cst.Name)}  # fmt: skip
            loops = [loop for loop in facts.loops_around(node) if isinstance(loop, cst.For) and training.steps_in(loop)]
            if any(isinstance(loop.target, cst.Name) and loop.target.value in bounds for loop in loops):
                found.append((node, _assigned_at(port, node.value)))
    return found


def _assigned_at(port: Port, data: cst.BaseExpression) -> str:
    """`ids, from corpus.get_data(...) at line 25`: where the sliced data was last assigned, as far as the file says."""
    name = dotted(data)
    assigned = [node for node in port.facts.walk(port.facts.module) if isinstance(node, cst.Assign)
                and any(dotted(target.target) == name for target in node.targets)]  # fmt: skip
    if not name or not assigned:
        return port.code(data)
    value = port.code(assigned[-1].value)
    value = value if len(value) <= 60 else value[:57] + "..."
    return f"{name}, from {value} at line {port.facts.line(assigned[-1])}"


def apply(port: Port, training: Training | None = None) -> None:
    facts = port.facts
    training = training or Training(facts)
    sharded = [call for call in facts.calls if _streams_by_column(port, call)]
    targets = set()
    for call in sharded:
        _shard_columns(port, call)
        targets |= {dotted(t.target) for t in port.facts.parents[call].targets}  # type: ignore[attr-defined]
    generators = _batch_generators(port, training)
    for node in facts.walk(facts.module):
        if (isinstance(node, cst.For) and (training.steps_in(node) or id(node) in generators)
                and (found := _range_by_batch(node))):  # fmt: skip
            variable, call = found
            step = port.code(call.args[2].value).replace(" ", "")
            slices = _slices(port, node, variable, step, targets)
            if not slices:
                continue
            if id(node) in generators and (others := generators[id(node)][1]):
                name = generators[id(node)][0]
                port.cannot(node, f"data batched by hand in {name}(), which a loop that steps iterates and so does "
                            f"line {facts.line(others[0])}: sharded, that pass would see one rank's share; give each "
                            "rank its share of the training calls by _ddp_rank and _ddp_world (or use DataLoaders, "
                            "which the port shards)")  # fmt: skip
                continue
            stride = call.args[2].value
            port.edits.rewrite(stride, lambda n: cst.BinaryOperation(left=n.with_changes(lpar=[cst.LeftParen()],
                               rpar=[cst.RightParen()]) if isinstance(n, cst.BinaryOperation) else n,
                               operator=cst.Multiply(), right=cst.Name("_ddp_world")))  # fmt: skip
            stop = call.args[1].value
            port.edits.rewrite(stop, lambda n, s=step: cst.parse_expression(
                f"{cst.Module([]).code_for_node(n)} - ({s}) * (_ddp_world - 1)"))  # fmt: skip
            for piece in slices:
                start = port.code(piece.lower)  # type: ignore[arg-type]
                port.edits.rewrite(piece, lambda n, v=start, s=step: n.with_changes(
                    lower=cst.parse_expression(f"{v} + _ddp_rank * {s}"),
                    upper=cst.parse_expression(f"{v} + (_ddp_rank + 1) * {s}")))  # fmt: skip
            for piece in slices:
                _one_order(port, training, piece)
            port.change(node, "hand_batches", f"batches sliced by hand: the loop strides world size x {step} and "
                        f"each rank takes its own {step} (slice from {variable} + _ddp_rank * {step}); the range "
                        "ends where every rank still has a batch, so all ranks step as often")  # fmt: skip
        elif (
            isinstance(node, cst.Call)
            and not sharded
            and dotted(node.func).rsplit(".", 1)[-1] in BATCH_FUNCTIONS
            and _feeds_training(port, training, node)
        ):
            port.cannot(node, f"data batched by hand ({dotted(node.func)}): every rank would train on the same "
                            "batches; give each rank its share by _ddp_rank and _ddp_world (or use a DataLoader, "
                            "which the port shards)")  # fmt: skip
