"""The gradient noise scale of any script's DDP model: what `noise_scale = true` asks the observer for.

A DDP communication hook sees each gradient bucket before the average-all-reduce (this rank's gradient over its
per_device_batch_size x grad_accum_steps samples: the small batch) and after it (the global batch's gradient: the
big batch). Per optimizer step the observer puts the two squared norms, still tensors on the device, into the
rank's stream; the host averages the small one over ranks, keeps the EMAs and computes B_simple after the run
(ddpcli.rundir.merge, ddpcli.noise_scale). No host sync and no collective beyond the all-reduce DDP does
anyway. Same measurement as the runtime helper's NoiseMeter (ddpcli.worker.runtime.noise), which the observer
leaves alone when a script measures with it.

No `from __future__ import annotations` here: DDP checks a comm hook's annotations against the real classes.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ddpcli.worker.tensors import squared_norm


class BucketNorms:
    """The squared norms of the last reduction's buckets, before and after averaging. A reduction starts at bucket 0
    (DDP reduces buckets in index order); only the last one before an optimizer step counts, which is the whole
    accumulated gradient when the script skips the others with no_sync()."""

    def __init__(self) -> None:
        self.small: list[torch.Tensor] = []
        self.big: list[torch.Tensor] = []

    def attach(self, model: DistributedDataParallel) -> None:
        model.register_comm_hook(None, self.comm_hook)

    def comm_hook(
        self, process_group: dist.ProcessGroup | None, bucket: dist.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        """DDP's default average-all-reduce (divide, then sum, as torch's allreduce_hook), plus the two norms."""
        group = process_group if process_group is not None else dist.group.WORLD
        if bucket.index() == 0:
            self.small, self.big = [], []
        small, big = self.small, self.big
        buffer = bucket.buffer()
        small.append(squared_norm(buffer))
        buffer.div_(group.size())

        def averaged(future: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
            reduced = future.value()[0]
            big.append(squared_norm(reduced))  # list.append: safe from gloo's callback threads
            return reduced

        return dist.all_reduce(buffer, group=group, async_op=True).get_future().then(averaged)

    def take(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """This step's |G_small|^2 and |G_big|^2 as device tensors (no sync); None when no reduction completed."""
        small, big = self.small, self.big
        self.small, self.big = [], []
        if not small or len(big) != len(small):
            return None
        return torch.stack(small).sum(), torch.stack(big).sum()
