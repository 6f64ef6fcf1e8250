"""Logs one step, then the last rank raises: torchrun must find that rank's traceback in its error.json."""

import torch

from ddpcli import runtime


@runtime.main
def main() -> None:
    ctx = runtime.init()
    ctx.log(1, loss=torch.tensor(float(ctx.rank)))
    if ctx.rank == ctx.world_size - 1:
        raise RuntimeError(f"deliberate failure on rank {ctx.rank}")
    ctx.finish()


if __name__ == "__main__":
    main()
