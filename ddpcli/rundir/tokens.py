"""Tokens, beside sequences, for a model fed token ids: what a language model's own script counts. Pure.

build-nanogpt counts tokens (512 an optimizer step); ddpcli counted its 4-sequence micro-batches and never said
that a sample is a 32-token sequence. The observer adds `tokens` to a step row whose micro-batches were integer
[B, T] tensors; here the usual tokens per micro-batch (one process) and per optimizer step (every rank that
reported the step), the values most steps had.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from ddpcli.jsonvalues import whole_or_none

if TYPE_CHECKING:
    from ddpcli.rundir.observations import RankObservation


def token_counts(ranks: dict[int, RankObservation], main: RankObservation | None) -> tuple[int | None, int | None]:
    """(tokens per micro-batch of one process, tokens per optimizer step over every rank); None where not seen."""
    if main is None:
        return None, None
    per_micro: Counter[int] = Counter()
    for row in main.steps.values():
        tokens, micro = whole_or_none(row.get("tokens")), whole_or_none(row.get("micro_batches"))
        if tokens and micro:
            per_micro[tokens // micro] += 1
    if not per_micro:
        return None, None
    by_step: dict[int, int] = {}
    reported: Counter[int] = Counter()
    for seen in ranks.values():
        for step, row in seen.steps.items():
            tokens = whole_or_none(row.get("tokens"))
            if tokens:
                by_step[step] = by_step.get(step, 0) + tokens
                reported[step] += 1
    totals = Counter(tokens for step, tokens in by_step.items() if reported[step] == len(ranks))
    return per_micro.most_common(1)[0][0], (totals.most_common(1)[0][0] if totals else None)
