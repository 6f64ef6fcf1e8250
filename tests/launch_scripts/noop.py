"""A no-op distributed job: join a gloo process group, meet once, leave. Needs nothing from ddpcli, so the user's
own `torchrun --nproc-per-node 2 noop.py` runs it as well as `ddpcli launch` does (benchmarks/launch_overhead.py)."""

import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
