"""Which modules are the model, and the forwards that reach it: the observer's forward side (hooks.py holds the rest).

Until the first optimizer step every module call goes through a thin wrapper of nn.Module.__call__: a call at
depth 0 with grad enabled is a top-level module (the model, or whatever wraps it: DDP, Lightning's wrapper), whatever
its training flag (a backward decides whether it trained: forwards.py). After the first step only those modules keep
a forward hook (cheaper). Each of their training forwards tells the step timing, the noise watch (a DDP model gets
its comm hook at its first one), AMP's autocast, and the forward tracker (samples, fingerprints of the first batches).
"""

import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

from ddpcli.worker.observer.attribution import skip_in_warnings
from ddpcli.worker.observer.reading import fingerprint, first_tensor, tensors

FINGERPRINT_BATCHES = 4


class TopModules:
    """The top-level modules of the script, found by watching every module call until the first optimizer step."""

    def __init__(self, observer: Any) -> None:
        self.observer = observer
        self.roots: dict[int, weakref.ref[nn.Module]] = {}
        self.discovering = True  # until the first step: every module call is seen, to find the top-level ones
        self.depth = 0
        self.original_call: Callable[..., Any] = nn.Module.__call__

    def install(self) -> None:
        self.original_call = nn.Module.__call__
        nn.Module.__call__ = self._discovering_call()

    def modules(self) -> list[nn.Module]:
        """The top-level modules a backward reached (all of them until one did)."""
        modules = [module for ref in self.roots.values() if (module := ref()) is not None]
        trained = [module for module in modules if id(module) in self.observer.forwards.trained]
        return trained or modules

    def _discovering_call(self) -> Callable[..., Any]:
        """nn.Module.__call__ until the first optimizer step (a plain function, not a bound method: it must bind
        to each module as __call__ does)."""
        guard = self.observer._guard
        original, before, after = self.original_call, guard(self._root_called), guard(self._root_forward)

        def call(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
            top = self.depth == 0 and torch.is_grad_enabled()
            if top:
                before(module, args, kwargs)
            self.depth += 1
            try:
                output = original(module, *args, **kwargs)
            finally:
                self.depth -= 1
            if top:
                after(module, args, kwargs, output)
            return output

        skip_in_warnings(call)
        return call

    def _root_called(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Before a top-level call's forward. One without parameters (a loss module, `criterion(logits.view(-1, V),
        ...)`) is not the model: its leading dimension is no batch size."""
        observer = self.observer
        if observer.forwards.in_backward:  # activation checkpointing recomputes blocks inside the backward: no model
            return
        if id(module) not in self.roots and next(module.parameters(), None) is not None:
            self.roots[id(module)] = weakref.ref(module)
        observer.noise.model_forward(module)
        if id(module) in self.roots:
            observer.timing.forward(module, first_tensor((args, kwargs)))

    def _root_pre_forward(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """After the first step: the start of a forward of the model, for the step's time breakdown."""
        if torch.is_grad_enabled() and not self.observer.forwards.in_backward:
            self.observer.timing.forward(module, first_tensor((args, kwargs)))

    def _root_forward(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        observer = self.observer
        if id(module) not in self.roots or not torch.is_grad_enabled() or observer.forwards.in_backward:
            return
        batch = first_tensor((args, kwargs))
        device = batch.device.type if batch is not None else "cpu"
        if observer.amp is None and torch.is_autocast_enabled(device):
            observer.amp = f"autocast {str(torch.get_autocast_dtype(device)).removeprefix('torch.')}"
        wanted = observer.fingerprints + len(observer.forwards.first_trained) < FINGERPRINT_BATCHES
        prints = (lambda: fingerprint(tensors((args, kwargs)))) if wanted and batch is not None else None
        observer.forwards.forward(module, args, kwargs, output, observer.last_loader, prints)

    def switch_to_root_hooks(self) -> None:
        """After the first step the top-level modules are known: hook them alone from now on (cheaper)."""
        nn.Module.__call__ = self.original_call
        self.discovering = False
        guard = self.observer._guard
        for ref in self.roots.values():
            module = ref()
            if module is not None:
                hook_privately(module, guard(self._root_pre_forward), guard(self._root_forward))


HOOK_DICTS = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks", "_forward_hooks_with_kwargs",
              "_forward_hooks_always_called")  # fmt: skip


class PrivateHooks(OrderedDict):
    """A module's hook dict that holds the observer's hooks beside the script's and leaves them out when it is
    pickled or copied: `torch.save(model)`, `copy.deepcopy(model)` write and copy the script's hooks alone, as a
    plain OrderedDict (a file saved under observation loads without ddpcli, and a copy is not observed)."""

    def __init__(self, items: Any = (), ours: set[int] | None = None) -> None:
        super().__init__(items)
        self.ours = ours if ours is not None else set()

    def __reduce__(self) -> Any:
        return OrderedDict, ([(key, value) for key, value in self.items() if key not in self.ours],)


def hook_privately(module: nn.Module, pre: Callable[..., Any], post: Callable[..., Any]) -> None:
    """module.register_forward_pre_hook(pre) and register_forward_hook(post), both with kwargs, kept out of what
    pickles. The hook dicts are replaced only while they are empty (a handle the script holds refers to the dict it
    was registered in); a module with hooks of its own gets the observer's through torch's global module hooks,
    which only this module answers (slower: every module call then takes the hooked path)."""
    if any(getattr(module, name, None) for name in HOOK_DICTS) or not all(hasattr(module, n) for n in HOOK_DICTS):
        _global_hooks(module, pre, post)
        return
    ours: set[int] = set()
    for name in HOOK_DICTS:
        object.__setattr__(module, name, PrivateHooks(ours=ours))  # nn.Module.__setattr__ would look for modules
    ours.add(module.register_forward_pre_hook(pre, with_kwargs=True).id)
    ours.add(module.register_forward_hook(post, with_kwargs=True).id)


def _global_hooks(module: nn.Module, pre: Callable[..., Any], post: Callable[..., Any]) -> None:
    target = weakref.ref(module)

    def pre_hook(called: nn.Module, args: tuple[Any, ...]) -> None:
        if called is target():
            pre(called, args, {})

    def post_hook(called: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        if called is target():
            post(called, args, kwargs, output)

    register_module_forward_pre_hook(pre_hook)
    register_module_forward_hook(post_hook, with_kwargs=True)
