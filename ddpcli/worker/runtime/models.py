"""The model side of the runtime helper: one wrapper for every world size, and BatchNorm across processes on CPU.

LocalModel gives world size 1 the same `.module` and `no_sync()` as DistributedDataParallel, so a script has one
code path. CrossProcessBatchNorm is nn.SyncBatchNorm for CPU/gloo, where DDP refuses SyncBatchNorm.
"""

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.parallel import DistributedDataParallel


def unwrap(model: nn.Module) -> nn.Module:
    """The user's module inside a DistributedDataParallel or LocalModel wrapper (or the model itself)."""
    return model.module if isinstance(model, DistributedDataParallel | LocalModel) else model


class LocalModel(nn.Module):
    """World-size-1 stand-in for DistributedDataParallel: the same `.module` and `no_sync()`, no communication.

    Keeping the wrapper (rather than returning the bare model) keeps state_dict keys, `.module` access and the
    accumulation code identical at every world size.
    """

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        yield


class _AllReduceSum(torch.autograd.Function):
    """Differentiable sum over ranks: the backward sums the incoming gradients over ranks too.

    Same maths as `torch.distributed.nn.functional.all_reduce`, which torch 2.13 deprecates (its suggested
    replacement is differentiable only in recent releases); ten lines keep every supported torch working.
    """

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.clone()
        dist.all_reduce(tensor)
        return tensor

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class CrossProcessBatchNorm(_BatchNorm):
    """BatchNorm whose training statistics cover the batch of every process: nn.SyncBatchNorm for CPU/gloo.

    One differentiable all-reduce of (sum x, sum x^2, count) per forward gives the global mean and biased
    variance; gradients flow back through it to every rank's inputs, so 4 x 16 trains like 1 x 64. Running
    statistics follow nn.BatchNorm (momentum, or a cumulative average when momentum is None; unbiased variance);
    eval mode uses them without communicating.
    """

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected an input of at least 2 dimensions (N, C, ...), got {input.dim()}")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        if not self.training and self.running_mean is not None:
            assert self.running_var is not None
            return F.batch_norm(
                input, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
            )
        mean, var, count = self._global_moments(input)
        if self.training and self.track_running_stats:
            self._update_running_stats(mean.detach(), var.detach(), count.detach())
        shape = (1, -1) + (1,) * (input.dim() - 2)
        output = (input - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.weight is not None and self.bias is not None:
            output = output * self.weight.view(shape) + self.bias.view(shape)
        return output

    def _global_moments(self, input: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dims = [0, *range(2, input.dim())]
        channels = input.size(1)
        count = input.new_full((1,), input.numel() // channels)
        stats = _AllReduceSum.apply(torch.cat([input.sum(dims), input.square().sum(dims), count]))
        total = stats[-1]
        mean = stats[:channels] / total
        var = (stats[channels : 2 * channels] / total - mean.square()).clamp_min(0.0)
        return mean, var, total

    @torch.no_grad()
    def _update_running_stats(self, mean: torch.Tensor, var: torch.Tensor, count: torch.Tensor) -> None:
        assert self.running_mean is not None and self.running_var is not None
        assert self.num_batches_tracked is not None
        self.num_batches_tracked.add_(1)
        momentum = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        unbiased = var * count / (count - 1).clamp_min(1.0)
        self.running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
        self.running_var.mul_(1 - momentum).add_(unbiased, alpha=momentum)


def convert_batchnorm(module: nn.Module) -> nn.Module:
    """Replace every BatchNorm layer by a CrossProcessBatchNorm sharing its parameters and running buffers."""
    if isinstance(module, _BatchNorm) and not isinstance(module, CrossProcessBatchNorm):
        converted = CrossProcessBatchNorm(
            module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats
        )
        if module.affine:
            converted.weight, converted.bias = module.weight, module.bias
        if module.track_running_stats:
            converted.running_mean, converted.running_var = module.running_mean, module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
        converted.train(module.training)
        return converted
    for name, child in module.named_children():
        module.add_module(name, convert_batchnorm(child))
    return module
