"""What the observer reads from torch objects and how it stands around them: the sampler behind accelerate's and
Lightning's wrappers, each param group's base lr, and warnings that keep their caller's file and line."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, Sampler, TensorDataset

from ddpcli.worker.observer.reading import initial_lrs, loader_info, sampler_epoch, wrap

DATA = TensorDataset(torch.arange(16.0).reshape(16, 1))


class EveryOther(Sampler[int]):
    """A script's own sampler: the one that decides the order."""

    def __iter__(self) -> Iterator[int]:
        return iter(range(0, 16, 2))

    def __len__(self) -> int:
        return 8


def test_a_plain_shuffled_loader() -> None:
    info = loader_info(DataLoader(DATA, batch_size=4, shuffle=True))
    assert (info["sampler"], info["sampler_chain"], info["distributed_sampler"]) == (
        "RandomSampler", ["BatchSampler", "RandomSampler"], False
    )  # fmt: skip


def test_accelerates_batch_sampler_shard_is_unwrapped() -> None:
    from accelerate.data_loader import BatchSamplerShard

    shard = BatchSamplerShard(BatchSampler(RandomSampler(DATA), 4, False), num_processes=2, process_index=1)
    info = loader_info(DataLoader(DATA, batch_sampler=shard))  # .sampler is a placeholder SequentialSampler
    assert info["sampler"] == "RandomSampler"
    assert info["sampler_chain"] == ["BatchSamplerShard", "BatchSampler", "RandomSampler"]
    assert info["distributed_sampler"] is False


def test_lightnings_distributed_sampler_wrapper_is_unwrapped_to_the_scripts_sampler() -> None:
    from lightning.fabric.utilities.distributed import DistributedSamplerWrapper

    wrapper = DistributedSamplerWrapper(EveryOther(), num_replicas=2, rank=0, shuffle=False)
    loader = DataLoader(DATA, batch_size=2, sampler=wrapper)
    info = loader_info(loader)
    assert info["sampler"] == "EveryOther"
    assert info["sampler_chain"] == ["BatchSampler", "DistributedSamplerWrapper", "EveryOther"]
    assert info["distributed_sampler"] is True
    wrapper.set_epoch(3)
    assert sampler_epoch(loader) == 3


def test_base_lr_is_the_schedulers_initial_lr_and_none_without_one() -> None:
    params = [torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))]
    plain = torch.optim.SGD([{"params": params[:1]}, {"params": params[1:], "lr": 0.2}], lr=0.1)
    assert initial_lrs(plain) == [None, None]
    scheduled = torch.optim.SGD(params, lr=torch.tensor(0.1))
    torch.optim.lr_scheduler.LambdaLR(scheduled, lambda done: 0.5)  # lr 0.05 from the start, base 0.1
    assert initial_lrs(scheduled) == [pytest.approx(0.1)]
    assert float(scheduled.param_groups[0]["lr"]) == pytest.approx(0.05)


class Library:
    """A library function that warns for its caller's line (stacklevel=2), and one that warns for its own."""

    def deprecated(self) -> int:
        warnings.warn("old argument", FutureWarning, stacklevel=2)
        return 1

    def own(self) -> int:
        warnings.warn("own line", UserWarning, stacklevel=1)
        return 2


def test_a_warning_through_the_observers_wrapper_names_the_callers_line() -> None:
    wrap(Library, "deprecated", before=lambda *args, **kwargs: None)
    wrap(Library, "own", after=lambda *args, **kwargs: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Library().deprecated()
        line = sys._getframe().f_lineno - 1
        Library().own()
    deprecated, own = caught
    assert (deprecated.filename, deprecated.lineno) == (__file__, line)  # not reading.py
    assert own.filename == __file__ and own.lineno == Library.own.__wrapped__.__code__.co_firstlineno + 1


def test_filters_on_the_callers_module_apply_through_the_wrapper() -> None:
    wrap(Library, "deprecated", before=lambda *args, **kwargs: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=FutureWarning, module=__name__)
        Library().deprecated()
    assert caught == []
