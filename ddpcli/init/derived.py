"""Values a script derives from the world size, read from its syntax tree: what it keeps constant across runs.

Two published patterns, and any spelling of them:
- a global batch split over the ranks: the DDP tutorial's `bsz = 128 // size` (`size = dist.get_world_size()`);
  the per-device batch is 128 at 1 process, 64 at 2: the script keeps 128 samples per step;
- a token budget split into accumulation: build-nanogpt's
  `grad_accum_steps = total_batch_size // (B * T * ddp_world_size)` with `B = 4` (sequences per micro-batch) and
  `T = 32` (tokens per sequence): the script keeps total_batch_size tokens per optimizer step.

Pure (read by ddpcli.script's reader). `derivations(tree)` is what init plans from;
`derived_per_rank(derivation, world_size)` is the value the script computes at a world size, for anyone who must
explain an observed number (a plan_mismatch cause).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ddpcli.arithmetic import ExpressionError, evaluate
from ddpcli.script.reader import Reader, dotted

BATCH_WORDS = ("batch", "bsz", "bs")
ACCUM_WORDS = ("accum", "grad_acc")
BATCH_KEYWORDS = ("batch_size", "B", "bsz", "micro_batch_size")


@dataclass(frozen=True)
class Derivation:
    """`name = total // (factors x world)`: the role `name` plays, the kept total and where it is computed."""

    role: str  # "per_device_batch_size" (a global batch / world) or "grad_accum_steps" (a budget / (B x T x world))
    name: str
    total: int  # what the script keeps constant: samples (bsz) or, with tokens_per_sample, tokens
    total_name: str | None  # `total_batch_size`, None for a literal
    line: int
    text: str  # the assignment as written (unparsed)
    batch: int | None = None  # B (sequences per micro-batch), for an accumulation
    batch_name: str | None = None
    tokens_per_sample: int | None = None  # T: the budget is in tokens

    @property
    def global_samples(self) -> int:
        """Samples per optimizer step over all ranks (sequences, for a token budget)."""
        return self.total // (self.tokens_per_sample or 1)

    def where(self) -> str:
        return f"`{self.text}` at line {self.line}"


def derived_per_rank(derivation: Derivation, world_size: int) -> int | None:
    """What the script computes at `world_size` (its per-device batch, or its accumulation), None where it does
    not divide evenly (build-nanogpt asserts; `128 // 3` truncates, so the global batch is no longer kept)."""
    divisor = world_size * (derivation.batch or 1) * (derivation.tokens_per_sample or 1)
    value, rest = divmod(derivation.total, divisor)
    return value if rest == 0 and value >= 1 else None


def derivations(tree: Reader) -> list[Derivation]:
    """Every `x = N // world` (batch) and `accum = total // (B * T * world)` in the script, in source order."""
    numbers = _numbers(tree)
    worlds = _world_names(tree)
    batch_keywords = _batch_keyword_values(tree)
    found = []
    for node in tree.order:
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            name = node.targets[0].target.value
            derivation = _derivation(tree, name, node, numbers, worlds, batch_keywords)
            if derivation is not None:
                found.append(derivation)
    return sorted(found, key=lambda derivation: derivation.line)


@dataclass(frozen=True)
class _Split:
    """`total // (factors)` as the assignment writes it."""

    total: int
    total_name: str | None
    others: list[cst.BaseExpression]


def _split(tree: Reader, node: cst.Assign, numbers: dict[str, int], worlds: set[str]) -> _Split | None:
    """The kept total and the factors beside the one world-size factor, or None where it is not that shape."""
    value = node.value
    if isinstance(value, cst.Call) and dotted(value.func) in ("int", "round") and len(value.args) == 1:
        value = value.args[0].value
    if not isinstance(value, cst.BinaryOperation) or not isinstance(value.operator, cst.FloorDivide | cst.Divide):
        return None
    total = _number(value.left, numbers)
    factors = _factors(value.right)
    world_factors = [factor for factor in factors if isinstance(factor, cst.Name) and factor.value in worlds]
    if total is None or len(world_factors) != 1:
        return None
    total_name = value.left.value if isinstance(value.left, cst.Name) else None
    return _Split(total, total_name, [factor for factor in factors if factor is not world_factors[0]])


def _derivation(
    tree: Reader, name: str, node: cst.Assign, numbers: dict[str, int], worlds: set[str], batch_keywords: set[str]
) -> Derivation | None:
    split = _split(tree, node, numbers, worlds)
    if split is None:
        return None
    text, lower, line = tree.code(node), name.lower(), tree.line(node)
    if not split.others:
        if any(word in lower for word in BATCH_WORDS) or name in batch_keywords:
            return Derivation("per_device_batch_size", name, split.total, split.total_name, line, text)
        return None
    if not any(word in lower for word in ACCUM_WORDS):
        return None
    named = [(factor.value, _number(factor, numbers)) for factor in split.others if isinstance(factor, cst.Name)]
    if len(named) != len(split.others) or any(number is None for _, number in named):
        return None
    batch = next((pair for pair in named if _is_batch_name(pair[0], batch_keywords)), None)
    if batch is None:
        return None
    tokens = 1
    for other, number in named:
        if other != batch[0]:
            tokens *= number or 1
    return Derivation("grad_accum_steps", name, split.total, split.total_name, line, text, batch[1], batch[0],
                      tokens if tokens > 1 else None)  # fmt: skip


def _is_batch_name(name: str, batch_keywords: set[str]) -> bool:
    lower = name.lower()
    return lower in ("b", "mbs") or any(word in lower for word in BATCH_WORDS) or name in batch_keywords


def _factors(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """`B * T * world` -> [B, T, world]; `float(size)` -> [size]; parentheses are the tree's own."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        return [*_factors(node.left), *_factors(node.right)]
    if isinstance(node, cst.Call) and dotted(node.func) in ("int", "float"):
        return _factors(node.args[0].value) if len(node.args) == 1 else [node]
    return [node]


def _number(node: cst.BaseExpression, numbers: dict[str, int]) -> int | None:
    if isinstance(node, cst.Integer):
        value = node.evaluated_value
        return value if isinstance(value, int) else None
    if isinstance(node, cst.Name):
        return numbers.get(node.value)
    return None


def _numbers(tree: Reader) -> dict[str, int]:
    """Names bound to a whole number anywhere (`B = 4`, `B, T = 4, 32`, `total: int = 2**19`), first binding wins;
    a name bound twice to different numbers is not one value."""
    seen: dict[str, set[int]] = {}
    for node in tree.order:
        for target, value in _pairs(node):
            number = _constant_int(tree, value)
            if isinstance(target, cst.Name) and number is not None:
                seen.setdefault(target.value, set()).add(number)
    return {name: values.pop() for name, values in seen.items() if len(values) == 1}


def _pairs(node: cst.CSTNode) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """(target, value) of `x = v`, `a, b = u, v` and `x: T = v`."""
    if isinstance(node, cst.Assign) and len(node.targets) == 1:
        target, value = node.targets[0].target, node.value
        if (
            isinstance(target, cst.Tuple)
            and isinstance(value, cst.Tuple)
            and len(target.elements) == len(value.elements)
        ):
            return [(t.value, v.value) for t, v in zip(target.elements, value.elements, strict=True)]
        return [(target, value)]
    if isinstance(node, cst.AnnAssign) and node.value is not None:
        return [(node.target, node.value)]
    return []


def _constant_int(tree: Reader, node: cst.BaseExpression) -> int | None:
    """4, 64 * 1024: whole-number arithmetic on literals only (ddpcli's own bounded evaluator, never eval)."""
    if isinstance(node, cst.Integer):
        value: object = node.evaluated_value
    elif isinstance(node, cst.BinaryOperation):
        try:
            value = evaluate(tree.code(node), {})
        except ExpressionError:
            return None
    else:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 62 else None


def _world_names(tree: Reader) -> set[str]:
    """Names that hold the world size: bound from `dist.get_world_size()` / `WORLD_SIZE`, or named so."""
    names: set[str] = set()
    for node in tree.order:
        targets: list[cst.BaseExpression] = []
        if isinstance(node, cst.Assign):
            targets = [element for target in node.targets for element in _names_in(target.target)]
            source = tree.code(node.value)
            if "get_world_size" in source or "WORLD_SIZE" in source:
                names |= {target.value for target in targets if isinstance(target, cst.Name)}
        for target in targets:
            if isinstance(target, cst.Name) and "world" in target.value.lower():
                names.add(target.value)
        if isinstance(node, cst.Param) and "world" in node.name.value.lower():
            names.add(node.name.value)
    return names


def _names_in(target: cst.BaseExpression) -> list[cst.BaseExpression]:
    return [element.value for element in target.elements] if isinstance(target, cst.Tuple) else [target]


def _batch_keyword_values(tree: Reader) -> set[str]:
    """Names passed as a batch keyword (`DataLoader(batch_size=bsz)`, `DataLoaderLite(B=B)`)."""
    return {
        arg.value.value
        for node in tree.calls
        for arg in node.args
        if arg.keyword is not None and arg.keyword.value in BATCH_KEYWORDS and isinstance(arg.value, cst.Name)
    }
