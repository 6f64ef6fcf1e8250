"""Which optimizer's steps are the run's optimizer steps, even when the script replaces it or its `step`.

- A second optimizer over other parameters (a GAN's generator and discriminator) is extra: the first one that
  stepped defines the optimizer step. One over (some of) the same parameters replaced it (train the head, then
  unfreeze everything with a fresh optimizer): its steps are the run's from then on.
- torch's global step hooks live in the class's `step`. A script that puts its own function on the instance
  (`opt.step = my_step`) may never call the class's: the observer wraps the instance's function and counts the step
  itself when no hook saw it (an lr scheduler's wrapper calls the class's step, so nothing is counted twice).
"""

import functools
import inspect
import types
import weakref
from typing import Any

import torch


def _param_ids(optimizer: torch.optim.Optimizer) -> set[int]:
    return {id(param) for group in optimizer.param_groups for param in group["params"]}


def replaces(new: torch.optim.Optimizer, first: torch.optim.Optimizer, extra: set[int]) -> bool:
    """Whether `new` took over from `first`: it updates parameters `first` updates. `extra` caches the others."""
    if id(new) in extra:
        return False
    if _param_ids(new) & _param_ids(first):
        return True
    extra.add(id(new))
    return False


def watch_instance_steps(created: list[weakref.ref[torch.optim.Optimizer]], observer: Any) -> None:
    """Wrap every optimizer's instance-level `step` not wrapped yet (cheap: a dict lookup per optimizer)."""
    for ref in created:
        optimizer = ref()
        replaced = vars(optimizer).get("step") if optimizer is not None else None
        if replaced is None or getattr(replaced, "_ddpcli_counts", False) or not callable(replaced):
            continue
        optimizer.step = _counting(optimizer, replaced, observer)  # type: ignore[method-assign]


def _counting(optimizer: torch.optim.Optimizer, replaced: Any, observer: Any) -> Any:
    """A function like `replaced` that counts the step when torch's hooks did not. A bound method stays a bound
    method (an lr scheduler created later unwraps `opt.step.__func__`)."""
    reference = weakref.ref(optimizer)  # the function lives on the optimizer: no cycle through a strong reference

    @functools.wraps(replaced)  # keeps the attributes an lr scheduler marks its own wrapper with
    def step(*args: Any, **kwargs: Any) -> Any:
        return _counted(*args, **kwargs)

    @functools.wraps(replaced)
    def bound_step(_self: Any, *args: Any, **kwargs: Any) -> Any:
        return _counted(*args, **kwargs)

    def _counted(*args: Any, **kwargs: Any) -> Any:
        before = observer.hooked_steps
        target = reference()
        if target is not None:
            observer.step_starting(target)
        result = replaced(*args, **kwargs)
        if observer.hooked_steps == before and target is not None:
            observer.step_without_hooks(target)
        return result

    if inspect.ismethod(replaced):
        bound_step._ddpcli_counts = True  # type: ignore[attr-defined]
        return types.MethodType(bound_step, optimizer)
    step._ddpcli_counts = True  # type: ignore[attr-defined]
    return step
