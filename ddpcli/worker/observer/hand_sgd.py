"""Optimizer steps of a script that updates its parameters by hand, with no torch.optim (a hand-written SGD).

word_language_model's default loop: `model.zero_grad(); loss.backward(); for p in model.parameters():
p.data.add_(p.grad, alpha=-lr)`. No optimizer's step ever runs, so ddpcli recorded 0 steps and no final
parameters. `.data.add_` does not move the parameter's version counter, so the observer looks at values: at the
end of a backward it keeps 4 values of the first and the last parameter that got a gradient (no optimizer has
been created in the process); at the start of the next backward (and at the end of the script) values that
changed are an update of the trained parameters after their gradients were written: one optimizer step, counted
through a stand-in with the parameters as its one param group, and the script's `lr` where the frame that called
backward holds a number by that name. Only in a process without any torch optimizer (then it costs a compare of 8
numbers per backward; on a GPU, a synchronisation).
"""

import sys
from typing import Any

import torch

from ddpcli.worker.observer.parallel import params_row

PROBE = 4  # values kept per probed parameter


class HandUpdate:
    """What the observer reads of an optimizer: param_groups (params, lr) and state."""

    def __init__(self, params: list[torch.Tensor], lr: float | None) -> None:
        self.param_groups = [{"params": params, "lr": lr if lr is not None else float("nan")}]
        self.state: dict[Any, Any] = {}
        self.defaults: dict[str, Any] = {}


class HandSteps:
    def __init__(self, observer: Any) -> None:
        self.observer = observer
        self.params: list[torch.Tensor] = []
        self.probes: list[torch.Tensor] = []
        self.stand_in: HandUpdate | None = None
        self.off = False

    def _active(self) -> bool:
        if not self.off and self.observer.habits.optimizers:  # a torch optimizer exists: its steps are the steps
            self.off = True
        return not self.off

    def backward_ended(self) -> None:
        if not self._active():
            return
        params = [p for m in self.observer.models.modules() for p in m.parameters() if p.grad is not None]
        if not params:
            return
        if self.stand_in is None:
            self.stand_in = HandUpdate(params, _script_lr())
            self.observer.stream.add(params_row([self.stand_in], self.observer.models.modules(), "initial"))
        self.params = [params[0], params[-1]]
        self.probes = [p.detach().reshape(-1)[:PROBE].clone() for p in self.params]

    def check(self) -> None:
        """Before the next backward, and at the end: did the parameters change since the last backward ended?"""
        if not self.probes or not self._active() or self.stand_in is None:
            return
        pairs = zip(self.params, self.probes, strict=True)
        changed = any(not torch.equal(p.detach().reshape(-1)[:PROBE], probe) for p, probe in pairs)
        self.probes = []
        if changed:
            lr = _script_lr()
            if lr is not None:
                self.stand_in.param_groups[0]["lr"] = lr
            self.observer.step_without_hooks(self.stand_in)


def _script_lr() -> float | None:
    """A number named `lr` in the nearest frame outside ddpcli and torch (the script's loop)."""
    frame = sys._getframe(1)
    for _ in range(40):
        if frame is None:
            return None
        name = str(frame.f_globals.get("__name__", ""))
        if not name.startswith(("ddpcli.", "torch")):
            value = frame.f_locals.get("lr", frame.f_globals.get("lr"))
            return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        frame = frame.f_back
    return None
