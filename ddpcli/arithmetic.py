"""Integer and float arithmetic inside `{placeholders}`: `{grad_accum_steps * world_size}`, `{total_steps - 1}`,
`{lr / 10:.2e}`.

Evaluated with `ast`, never `eval`: only numbers, the run's numeric keys, + - * / // % and unary minus or plus.
No other names, calls, attributes, subscripts or powers (a power is how a short expression becomes a huge
number); a result that is not finite is refused too. Pure, and a leaf (it imports nothing of ddpcli): used by `plan`
(to check), `launch` (to fill) and `init` (to read the arithmetic a script does on its own values).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
MAX_EXPRESSION_CHARS = 200
MAX_MAGNITUDE = 10**18  # an argument, not a bignum: an integer beyond this is a mistake (floats: finite)


class ExpressionError(ValueError):
    """What is wrong with an expression, in words for the user."""


def is_expression(text: str) -> bool:
    """A placeholder that is more than one key: `{a * b}` rather than `{a}`."""
    return not text.strip().isidentifier()


def evaluate(text: str, values: Mapping[str, object]) -> int | float:
    """The value of `text` over `values`; ExpressionError says what is not allowed or not known."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"expressions are limited to {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ExpressionError("not a placeholder name or arithmetic over the run's keys") from None
    return _value(tree.body, values)


def _value(node: ast.AST, values: Mapping[str, object]) -> int | float:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise ExpressionError(f"{node.value!r}: only numbers and the run's keys may appear")
        return _checked(node.value)
    if isinstance(node, ast.Name):
        return _name(node.id, values)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _checked(_UNARY[type(node.op)](_value(node.operand, values)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left, values), _value(node.right, values)
        if right == 0 and isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod):
            raise ExpressionError("division by zero")
        return _checked(_BINARY[type(node.op)](left, right))
    raise ExpressionError(
        f"{ast.unparse(node)!r} is not allowed: numbers, the run's keys and + - * / // % only "
        "(no calls, attributes, subscripts or powers)"
    )


def _name(name: str, values: Mapping[str, object]) -> int | float:
    if name not in values:
        raise ExpressionError(f"unknown key {name!r}; known: {', '.join(sorted(values))}")
    value = values[name]
    if value is None:
        raise ExpressionError(f"{name} has no value for this run")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ExpressionError(f"{name} is not a number ({value!r}), so it cannot take part in arithmetic")
    return value


def _checked(value: int | float) -> int | float:
    if isinstance(value, float) and not math.isfinite(value):
        raise ExpressionError("the result is not a finite number")
    if isinstance(value, int) and abs(value) > MAX_MAGNITUDE:
        raise ExpressionError(f"the result {value:g} is beyond {MAX_MAGNITUDE:.0e}")
    return value
