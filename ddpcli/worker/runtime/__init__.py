"""The helper a training script may import: the DDP details that silently change results, done once.

    from ddpcli import runtime

    @runtime.main
    def main() -> None:
        ctx = runtime.init()
        model = ctx.wrap(ctx.sync_batchnorm(build_model()))
        optimizer = torch.optim.SGD(model.parameters(), lr=ctx.run["lr"] if ctx.run else 0.1)
        loader = ctx.dataloader(dataset, batch_size=ctx.run["per_device_batch_size"] if ctx.run else 4)
        for step, micro_batches in loader.steps(total_steps, accum_steps):
            for index, (x, y) in enumerate(micro_batches):
                with ctx.accumulate(model, index, len(micro_batches)):
                    loss = loss_fn(model(x), y) / len(micro_batches)
                    loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            ctx.log(step, loss=loss.detach(), lr=optimizer.param_groups[0]["lr"])
        ctx.finish(model)

    main()

`ddpcli launch` observes any script, with or without this helper (ddpcli.worker.observer). What the helper adds:
each piece exists because the plain version has a trap. A sampler whose epoch is never set repeats one order
(`ctx.dataloader`, `EpochLoader`), a forward outside `no_sync()` all-reduces every micro-batch (`ctx.accumulate`),
BatchNorm on CPU cannot be synchronised by `nn.SyncBatchNorm` (`ctx.sync_batchnorm`), a rank that tears down the
process group while rank 0 still saves can hang (`ctx.finish`), and a restart must resume where the data order
left off (`ctx.checkpoint`, `ctx.resume`). The same script runs under `ddpcli launch`, plain `torchrun` and plain
`python` (world size 1, no process group). The file names and RUN keys follow docs/contracts.md.

Modules: context (Context, init), checkpoints (checkpoint and resume), data (EpochLoader), models (LocalModel,
CrossProcessBatchNorm), noise (the noise-scale meter, with the observer's comm hook class). Like the observer, this
is worker-side code: the only part of ddpcli that imports torch.
"""

from collections.abc import Callable
from typing import ParamSpec, TypeVar

from torch.distributed.elastic.multiprocessing.errors import record

from ddpcli.worker.runtime.context import Context, init
from ddpcli.worker.runtime.data import EpochLoader
from ddpcli.worker.runtime.models import CrossProcessBatchNorm, LocalModel, convert_batchnorm, unwrap

__all__ = [
    "Context",
    "CrossProcessBatchNorm",
    "EpochLoader",
    "LocalModel",
    "convert_batchnorm",
    "init",
    "main",
    "unwrap",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")


def main(fn: Callable[_P, _R]) -> Callable[_P, _R | None]:
    """Decorate the script's entry point: torchrun then writes each failing rank's traceback to its error.json.

    Without it torchrun's failure report says `error_file: <N/A>` and the traceback is only in that rank's
    stderr. This is `torch.distributed.elastic.multiprocessing.errors.record`; outside torchrun it only re-raises.
    (Under `ddpcli launch` the observer already records every script's failures; this is for plain torchrun.)
    """
    return record(fn)
