"""The numeric regime two runs trained in, named before generic float32 rounding when they differ. Pure.

build-nanogpt under autocast bfloat16 differed from its bare single-process partner by 3.6e-4; without autocast,
4.2e-7. A note blaming float32 rounding sends the reader to the wrong place: bfloat16 keeps 8 bits of mantissa
(float16 11), so reducing gradients in another order moves far more than float32's 24 bits would. TF32 matmuls
(10 bits) and non-deterministic CUDA kernels do the same on GPUs; on CPU neither applies.
"""

from __future__ import annotations

from ddpcli.diagnosis.advice import GPU_DEVICES
from ddpcli.diagnosis.compared import ComparedRun


def numeric_regime(run: ComparedRun, partner: ComparedRun) -> str | None:
    """What, of the regime the observer recorded for either run, rounds coarser than float32; None: nothing."""
    parts: list[str] = []
    for each in (run, partner):
        observed = each.record.observed
        if observed is None:
            continue
        seen = []
        if observed.amp:
            seen.append(observed.amp)
        numerics = observed.numerics or {}
        if observed.device in GPU_DEVICES:
            if numerics.get("tf32_matmul") is True or numerics.get("float32_matmul_precision") in ("high", "medium"):
                seen.append("TF32 matmuls")
            if numerics.get("deterministic") is False:
                seen.append("deterministic algorithms off")
        if seen:
            parts.append(f"{each.name} trained under {', '.join(seen)}")
    if not parts:
        return None
    return (
        f"{'; '.join(parts)} (as observed): "
        "those round far coarser than float32 (bfloat16 keeps 8 bits of mantissa, float16 11, TF32 10), so summing "
        "gradients across processes in another order than one large batch moves the parameters by more; compare "
        "with them off to see what DDP itself changes, or raise --atol if this is acceptable"
    )
