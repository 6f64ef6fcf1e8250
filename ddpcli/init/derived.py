"""Values a script derives from the world size, read from its syntax tree: what it keeps constant across runs.

Two published patterns, and any spelling of them:
- a global batch split over the ranks: the DDP tutorial's `bsz = 128 // size` (`size = dist.get_world_size()`);
  the per-device batch is 128 at 1 process, 64 at 2: the script keeps 128 samples per step;
- a token budget split into accumulation: build-nanogpt's
  `grad_accum_steps = total_batch_size // (B * T * ddp_world_size)` with `B = 4` (sequences per micro-batch) and
  `T = 32` (tokens per sequence): the script keeps total_batch_size tokens per optimizer step.

Pure (ast only). `derivations(tree)` is what init plans from; `derived_per_rank(derivation, world_size)` is the
value the script computes at a world size, for anyone who must explain an observed number (a plan_mismatch cause).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ddpcli.arithmetic import ExpressionError, evaluate

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


def derivations(tree: ast.Module) -> list[Derivation]:
    """Every `x = N // world` (batch) and `accum = total // (B * T * world)` in the script, in source order."""
    numbers = _numbers(tree)
    worlds = _world_names(tree)
    batch_keywords = _batch_keyword_values(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            derivation = _derivation(node.targets[0].id, node, numbers, worlds, batch_keywords)
            if derivation is not None:
                found.append(derivation)
    return sorted(found, key=lambda derivation: derivation.line)


def _derivation(
    name: str, node: ast.Assign, numbers: dict[str, int], worlds: set[str], batch_keywords: set[str]
) -> Derivation | None:
    value = node.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ("int", "round"):
        value = value.args[0] if len(value.args) == 1 else value
    if not isinstance(value, ast.BinOp) or not isinstance(value.op, ast.FloorDiv | ast.Div):
        return None
    total = _number(value.left, numbers)
    factors = _factors(value.right)
    world_factors = [factor for factor in factors if isinstance(factor, ast.Name) and factor.id in worlds]
    if total is None or len(world_factors) != 1:
        return None
    others = [factor for factor in factors if factor is not world_factors[0]]
    total_name = value.left.id if isinstance(value.left, ast.Name) else None
    text, lower = ast.unparse(node), name.lower()
    if not others:
        if any(word in lower for word in BATCH_WORDS) or name in batch_keywords:
            return Derivation("per_device_batch_size", name, total, total_name, node.lineno, text)
        return None
    if not any(word in lower for word in ACCUM_WORDS):
        return None
    named = [(factor.id, _number(factor, numbers)) for factor in others if isinstance(factor, ast.Name)]
    values = [_number(factor, numbers) for factor in others]
    if len(named) != len(others) or any(number is None for number in values):
        return None
    batch = next((pair for pair in named if _is_batch_name(pair[0], batch_keywords)), None)
    if batch is None:
        return None
    tokens = 1
    for other, number in named:
        if other != batch[0]:
            tokens *= number or 1
    return Derivation(
        "grad_accum_steps",
        name,
        total,
        total_name,
        node.lineno,
        text,
        batch[1],
        batch[0],
        tokens if tokens > 1 else None,
    )


def _is_batch_name(name: str, batch_keywords: set[str]) -> bool:
    lower = name.lower()
    return lower in ("b", "mbs") or any(word in lower for word in BATCH_WORDS) or name in batch_keywords


def _factors(node: ast.expr) -> list[ast.expr]:
    """`B * T * world` -> [B, T, world]; `float(size)` -> [size]; parentheses are the tree's own."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return [*_factors(node.left), *_factors(node.right)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "float"):
        return _factors(node.args[0]) if len(node.args) == 1 else [node]
    return [node]


def _number(node: ast.expr, numbers: dict[str, int]) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return numbers.get(node.id)
    return None


def _numbers(tree: ast.Module) -> dict[str, int]:
    """Names bound to a whole number anywhere (`B = 4`, `B, T = 4, 32`, `total: int = 2**19`), first binding wins;
    a name bound twice to different numbers is not one value."""
    seen: dict[str, set[int]] = {}
    for node in ast.walk(tree):
        pairs: list[tuple[ast.expr, ast.expr]] = []
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
                pairs = list(zip(target.elts, value.elts, strict=True))
            else:
                pairs = [(target, value)]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            pairs = [(node.target, node.value)]
        for target, value in pairs:
            number = _constant_int(value)
            if isinstance(target, ast.Name) and number is not None:
                seen.setdefault(target.id, set()).add(number)
    return {name: values.pop() for name, values in seen.items() if len(values) == 1}


def _constant_int(node: ast.expr) -> int | None:
    """4, 64 * 1024: whole-number arithmetic on literals only (ddpcli's own bounded evaluator, never eval)."""
    if isinstance(node, ast.Constant):
        value = node.value
    elif isinstance(node, ast.BinOp):
        try:
            value = evaluate(ast.unparse(node), {})
        except ExpressionError:
            return None
    else:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 62 else None


def _world_names(tree: ast.Module) -> set[str]:
    """Names that hold the world size: bound from `dist.get_world_size()` / `WORLD_SIZE`, or named so."""
    names: set[str] = set()
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [element for target in node.targets for element in _names_in(target)]
            source = ast.unparse(node.value)
            if "get_world_size" in source or "WORLD_SIZE" in source:
                names |= {target.id for target in targets if isinstance(target, ast.Name)}
        for target in targets:
            if isinstance(target, ast.Name) and "world" in target.id.lower():
                names.add(target.id)
        if isinstance(node, ast.arg) and "world" in node.arg.lower():
            names.add(node.arg)
    return names


def _names_in(target: ast.expr) -> list[ast.expr]:
    return list(target.elts) if isinstance(target, ast.Tuple) else [target]


def _batch_keyword_values(tree: ast.Module) -> set[str]:
    """Names passed as a batch keyword (`DataLoader(batch_size=bsz)`, `DataLoaderLite(B=B)`)."""
    return {
        keyword.value.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for keyword in node.keywords
        if keyword.arg in BATCH_KEYWORDS and isinstance(keyword.value, ast.Name)
    }
