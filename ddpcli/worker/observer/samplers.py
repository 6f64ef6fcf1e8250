"""Which sampler decides a DataLoader's order, seen through the wrappers that shard or batch it.

Stacks put their own layers around the sampler a script chose: accelerate draws through
`BatchSamplerShard(BatchSampler(SeedableRandomSampler))` (its DataLoader keeps a placeholder SequentialSampler in
`.sampler`), Lightning wraps a custom sampler in `DistributedSamplerWrapper`, whose dataset holds the original one.
The layer that decides the order is the innermost one: the chain is followed from the batch sampler inwards.
"""

from typing import Any

from torch.utils.data import DataLoader, DistributedSampler

# Where each kind of wrapper keeps what it wraps, in the order they are tried.
_INNER = ("batch_sampler", "sampler", "base_sampler", "_sampler")
_CHAIN_LIMIT = 8


def sampler_chain(loader: DataLoader) -> list[Any]:
    """The objects a batch's indices pass through, outermost first; the last one decides the order."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    current = batch_sampler if batch_sampler is not None else getattr(loader, "sampler", None)
    chain: list[Any] = []
    while current is not None and len(chain) < _CHAIN_LIMIT and all(current is not seen for seen in chain):
        chain.append(current)
        current = _inner(current)
    return chain


def _inner(sampler: Any) -> Any:
    """What a wrapper wraps: an attribute, or (Lightning's DistributedSamplerWrapper) its dataset's sampler."""
    for name in _INNER:
        inner = getattr(sampler, name, None)
        if inner is not None and inner is not sampler and hasattr(inner, "__iter__"):
            return inner
    wrapped = getattr(sampler, "dataset", None)
    if isinstance(sampler, DistributedSampler) and type(wrapped).__name__.endswith("SamplerWrapper"):
        return getattr(wrapped, "_sampler", None)
    return None


def chain_names(chain: list[Any]) -> list[str]:
    return [type(sampler).__name__ for sampler in chain]


def distributed(chain: list[Any]) -> bool:
    return any(isinstance(sampler, DistributedSampler) for sampler in chain)
