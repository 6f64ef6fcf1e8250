"""A backward that keeps its graph for another through the same forward of a DDP-wrapped model: named as not
ported. DistributedDataParallel averages gradients once per forward; a graph kept out of habit, with no later
backward going back through it, is harmless and not named."""

from __future__ import annotations

import libcst as cst

from ddpcli.port.context import Port
from ddpcli.port.facts import keyword, last_name
from ddpcli.script.values import backward_calls, sources


def apply(port: Port) -> None:
    """`loss.backward(retain_graph=True)` where a model is wrapped: DistributedDataParallel averages the gradients of
    one backward per forward of the model; a second backward through the same forward (a GAN's generator loss
    through the `fake` its critic's backward kept, an auxiliary loss after the main one) adds gradients each rank
    keeps to itself, and the ranks drift apart with exit 0 (found by the session's helpers on aladdinpersson's
    WGAN-GP: the generators 1.6e-3 apart). Named, not rewritten: the fix is the script's (one backward of the
    summed losses, or the forward run again)."""
    if not (port.models or port.program_trains):
        return
    backwards = backward_calls(port.facts)
    for call in backwards:
        kept = keyword(call, "retain_graph")
        if kept is None or (isinstance(kept.value, cst.Name) and kept.value.value in ("False", "None")):
            continue
        if any(_through_the_same_forward(port, call, other) for other in backwards if other is not call):
            port.cannot(call, "a backward that keeps its graph for another (retain_graph): DistributedDataParallel "
                        "averages gradients once per forward of a wrapped model, so a second backward through the "
                        "same forward leaves its gradients each rank's own and the ranks drift apart; back-propagate "
                        "the losses in one backward, or run the model's forward again before the second")  # fmt: skip


def _through_the_same_forward(port: Port, kept: cst.Call, other: cst.Call) -> bool:
    """`other` (a backward of the same function) goes back through a forward `kept`'s loss is computed from: a call
    of a wrapped model both losses reach (`fake = gen(z)` under the critic's loss and the generator's), or, where
    another file of the program wraps the models, any call both reach."""
    function = port.facts.scope(kept)
    if port.facts.scope(other) is not function:
        return False
    shared = _calls_reached(port, kept) & _calls_reached(port, other)
    wrapped = {model.rsplit(".", 1)[-1] for model in port.models}  # `self.gen` is called as `self.gen(z)`
    return any(last_name(call) in wrapped or not port.models for call in shared)


def _calls_reached(port: Port, backward: cst.Call) -> set[cst.Call]:
    assert isinstance(backward.func, cst.Attribute)
    return {node for node in sources(port.facts, backward.func.value) if isinstance(node, cst.Call)}
