"""A backward that keeps its graph for another where a model is DDP-wrapped: named as not ported."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.facts import keyword
from ddpcli.script.values import backward_calls


def apply(port: Port) -> None:
    """`loss.backward(retain_graph=True)` where a model is wrapped: DistributedDataParallel averages the gradients of
    one backward per forward of the model; a second backward through the same forward (a GAN's generator loss
    through the `fake` its critic's backward kept, an auxiliary loss after the main one) adds gradients each rank
    keeps to itself, and the ranks drift apart with exit 0 (found by the session's helpers on aladdinpersson's
    WGAN-GP: the generators 1.6e-3 apart). Named, not rewritten: the fix is the script's (one backward of the
    summed losses, or the forward run again)."""
    if not (port.models or port.program_trains):
        return
    for call in backward_calls(port.facts):
        kept = keyword(call, "retain_graph")
        if kept is not None and not (isinstance(kept.value, cst.Name) and kept.value.value in ("False", "None")):
            port.cannot(call, "a backward that keeps its graph for another (retain_graph): DistributedDataParallel "
                        "averages gradients once per forward of a wrapped model, so a second backward through the "
                        "same forward leaves its gradients each rank's own and the ranks drift apart; back-propagate "
                        "the losses in one backward, or run the model's forward again before the second")  # fmt: skip
