"""EpochLoader: a DataLoader over this rank's shard that sets the sampler's epoch itself."""

import collections
import itertools
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, DistributedSampler


class EpochLoader:
    """A DataLoader that sets the sampler's epoch itself: forgetting `set_epoch` repeats one order every epoch.

    Iterating it gives one epoch (epoch 0, then 1, ...). `steps()` goes on over epochs for a number of
    optimizer steps, grouping micro-batches for gradient accumulation.
    """

    def __init__(self, loader: DataLoader, sampler: DistributedSampler) -> None:
        self.loader, self.sampler, self.epoch = loader, sampler, 0

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        self.sampler.set_epoch(self.epoch)  # the permutation is seeded with seed + epoch
        self.epoch += 1
        return iter(self.loader)

    def steps(self, total: int, accum_steps: int = 1, start: int = 0) -> Iterator[tuple[int, list[Any]]]:
        """Yield (step, micro_batches) for optimizer steps start+1 .. total (1-based), epoch after epoch.

        A step takes `accum_steps` micro-batches; the last step of an epoch takes what is left (with drop_last
        it is skipped instead), the count `ddpcli plan` gives as steps_per_epoch. Micro-batches of one step
        never mix two epochs. `start` (from `ctx.resume`) goes on where a checkpoint left off: the data order is
        a function of the step, so the resumed run sees the samples the uninterrupted one would have.
        """
        needed = accum_steps if self.loader.drop_last else 1
        if len(self) < needed:
            raise ValueError(f"an epoch has {len(self)} micro-batches, fewer than one step of {accum_steps}")
        per_epoch = len(self) // accum_steps if self.loader.drop_last else -(-len(self) // accum_steps)
        self.epoch, skip = divmod(start, per_epoch)
        step = start
        while step < total:
            batches, left = iter(self), len(self)
            if skip:  # resuming mid-epoch: pass over the micro-batches of the steps already done
                collections.deque(itertools.islice(batches, skip * accum_steps), maxlen=0)
                left, skip = left - skip * accum_steps, 0
            while left >= needed and step < total:
                count = min(accum_steps, left)
                left -= count
                step += 1
                yield step, list(itertools.islice(batches, count))
