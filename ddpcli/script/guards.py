"""When a function trains: the conditions its backward passes run under, read as values of its parameters.

One epoch function often serves training and evaluation: `def run_epoch(model, loader, optimizer=None)` with
`training = optimizer is not None` and `if training: loss.backward(); optimizer.step()`, called as
`run_epoch(model, train_loader, optimizer)` and `run_epoch(model, val_loader)`. The second call back-propagates
nothing: its loader is not training data, and sharding it would halve the evaluation. So for each parameter, the
values (None, True, False, and the literals the function's tests compare with) under which every backward of the
function is behind a test that is then false; a call that passes such a value, as a literal or by the parameter's
default, trains nothing.

The tests are read, never run: names bound once in the function to an expression of its parameters are followed
(`training = optimizer is not None`), `not`, `and`, `or`, `is (not) None`, `==`, `!=`, `in` over literals; anything
else (an attribute, a call) is unknown, and a test whose value is unknown decides nothing.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from ddpcli.script.reader import Reader, literal_value

UNKNOWN: Any = object()
DEPTH = 4  # names followed to their values


def trains_at(reader: Reader, function: cst.FunctionDef, backwards: list[cst.Call], call: cst.Call) -> bool:
    """Whether `call` of `function` (defined in `reader`'s file, the call in any file) can reach one of the
    function's own backward passes (`backwards`: the file's): False only where every one of them is behind a test
    that the call's literal arguments and the parameters' defaults make false."""
    own = [backward for backward in backwards if _function_of(reader, backward) is function]
    env = _call_env(function, call)
    return not own or env is None or not all(_never(reader, function, backward, env) for backward in own)


def can_run(reader: Reader, function: cst.FunctionDef, node: cst.CSTNode, env: dict[str, Any]) -> bool:
    """Whether `node` of `function` can run where the names of `env` hold its values (`split == "train"` around a
    loader, with `split` the value of a loop over literals): False only where a test around it decides against."""
    return not _never(reader, function, node, env)


def _call_env(function: cst.FunctionDef, call: cst.Call) -> dict[str, Any] | None:
    """Each parameter's value at `call`: the literal passed or defaulted, else UNKNOWN; None where the call passes
    *args or **kwargs (which parameter gets what is not written out)."""
    if any(arg.star for arg in call.args):
        return None
    params = list(function.params.params)
    positional_params = params[1:] if params and params[0].name.value in ("self", "cls") else params
    positional = [arg.value for arg in call.args if arg.keyword is None]
    named = {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
    env: dict[str, Any] = {}
    for index, param in enumerate([*positional_params, *function.params.kwonly_params]):
        name = param.name.value
        passed = positional[index] if index < min(len(positional), len(positional_params)) else named.get(name)
        given = passed if passed is not None else param.default
        env[name] = UNKNOWN if given is None else _literal(given)
    return env


def _literal(node: cst.BaseExpression) -> Any:
    if isinstance(node, cst.Name) and node.value == "None":
        return None
    value = literal_value(node)
    return UNKNOWN if value is None else value


def _function_of(reader: Reader, node: cst.CSTNode) -> cst.FunctionDef | None:
    return next((a for a in reader.ancestors(node) if isinstance(a, cst.FunctionDef)), None)


def _never(reader: Reader, function: cst.FunctionDef, call: cst.CSTNode, env: dict[str, Any]) -> bool:
    """`call` (a backward, a loader) cannot run under `env`: an `if` around it, within the function, decides
    against it."""
    node: cst.CSTNode = call
    for ancestor in reader.ancestors(call):
        if ancestor is function:
            return False
        if isinstance(ancestor, cst.If) and node is not ancestor.test:
            value = _value(reader, function, ancestor.test, env, 0)
            if value is not UNKNOWN and bool(value) != (node is ancestor.body):
                return True
        node = ancestor
    return False


def _value(reader: Reader, function: cst.FunctionDef, node: cst.BaseExpression, env: dict[str, Any], depth: int) -> Any:
    """The test's value under `env`, or UNKNOWN."""
    if isinstance(node, cst.Name):
        if node.value in env:
            return env[node.value]
        if node.value in ("None", "True", "False"):
            return literal_value(node)
        return _bound_value(reader, function, node.value, env, depth)
    if isinstance(node, cst.Integer | cst.Float | cst.SimpleString | cst.ConcatenatedString | cst.Tuple | cst.List):
        value = literal_value(node)
        return UNKNOWN if value is None else value
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
        inner = _value(reader, function, node.expression, env, depth)
        return UNKNOWN if inner is UNKNOWN else not inner
    if isinstance(node, cst.BooleanOperation):
        left = _value(reader, function, node.left, env, depth)
        right = _value(reader, function, node.right, env, depth)
        if isinstance(node.operator, cst.And):
            if (left is not UNKNOWN and not left) or (right is not UNKNOWN and not right):
                return False
            return UNKNOWN if UNKNOWN in (left, right) else bool(right)
        if (left is not UNKNOWN and left) or (right is not UNKNOWN and right):
            return True
        return UNKNOWN if UNKNOWN in (left, right) else False
    if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
        left = _value(reader, function, node.left, env, depth)
        right = _value(reader, function, node.comparisons[0].comparator, env, depth)
        if left is UNKNOWN or right is UNKNOWN:
            return UNKNOWN
        return _compare(node.comparisons[0].operator, left, right)
    return UNKNOWN


def _compare(operator: cst.BaseCompOp, left: Any, right: Any) -> Any:
    if isinstance(operator, cst.Is):
        return left is right
    if isinstance(operator, cst.IsNot):
        return left is not right
    if isinstance(operator, cst.Equal):
        return left == right
    if isinstance(operator, cst.NotEqual):
        return left != right
    if isinstance(operator, cst.In | cst.NotIn) and isinstance(right, tuple | list | str):
        inside = left in right if isinstance(right, tuple | list) or isinstance(left, str) else UNKNOWN
        return inside if inside is UNKNOWN or isinstance(operator, cst.In) else not inside
    return UNKNOWN


def _bound_value(reader: Reader, function: cst.FunctionDef, name: str, env: dict[str, Any], depth: int) -> Any:
    """A name the function binds once, to an expression (`training = optimizer is not None`): that expression's
    value; a parameter not in `env`, a name bound twice or elsewhere: UNKNOWN."""
    if depth >= DEPTH:
        return UNKNOWN
    bound = [
        node.value
        for node in reader.walk(function.body)
        if isinstance(node, cst.Assign | cst.AnnAssign | cst.AugAssign)
        and any(isinstance(t, cst.Name) and t.value == name for t in _targets(node))
    ]
    looped = any(isinstance(node, cst.For | cst.CompFor | cst.WithItem | cst.NamedExpr) and _names(reader, node, name)
                 for node in reader.walk(function.body))  # fmt: skip
    if len(bound) != 1 or bound[0] is None or looped or any(p.name.value == name for p in function.params.params):
        return UNKNOWN
    return _value(reader, function, bound[0], env, depth + 1)


def _names(reader: Reader, node: cst.For | cst.CompFor | cst.WithItem | cst.NamedExpr, name: str) -> bool:
    """The binding `node` makes (a loop's target, `as`, `:=`) includes `name`."""
    target = node.asname.name if isinstance(node, cst.WithItem) and node.asname else getattr(node, "target", None)
    return target is not None and any(
        isinstance(inner, cst.Name) and inner.value == name for inner in reader.walk(target)
    )


def _targets(node: cst.Assign | cst.AnnAssign | cst.AugAssign) -> list[cst.BaseExpression]:
    if isinstance(node, cst.Assign):
        return [target.target for target in node.targets]
    return [node.target]
