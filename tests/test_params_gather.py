"""compare's check of a sharded run (issue 34): every rank's shard file put together into the full tensors, the way
FSDP2 splits them (torch.chunk along dim 0, the last pieces smaller or empty), and checked against a full run."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ddpcli.rundir.layout import PARAMS_FILE, rank_params_file, shards_file
from ddpcli.rundir.params import param_diff


def save_sharded(run_dir: Path, full: dict[str, torch.Tensor], ranks: int, keep: set[int] | None = None) -> None:
    """Each rank's files as the observer writes them: its dim-0 chunk of every tensor and where it sits."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        if keep is not None and rank not in keep:
            continue
        state, shards = {}, {}
        for name, tensor in full.items():
            pieces = list(torch.chunk(tensor, ranks, dim=0))
            offset = sum(piece.shape[0] for piece in pieces[:rank])
            local = pieces[rank].clone() if rank < len(pieces) else tensor[tensor.shape[0] :].clone()
            state[name] = local
            shards[name] = {"offset": [offset] + [0] * (tensor.dim() - 1), "shape": list(tensor.shape),
                            "local_shape": list(local.shape)}  # fmt: skip
        path = run_dir / (PARAMS_FILE if rank == 0 else rank_params_file(rank))
        torch.save(state, path)
        shards_file(path).write_text(json.dumps({"what": "this rank's local shards", "shards": shards}))


def save_full(run_dir: Path, full: dict[str, torch.Tensor]) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.save(full, run_dir / PARAMS_FILE)
    return run_dir / PARAMS_FILE


shapes = st.lists(st.tuples(st.integers(2, 9), st.integers(1, 5)), min_size=1, max_size=4)


@settings(max_examples=40, deadline=None)
@given(shapes=shapes, ranks=st.integers(2, 4), seed=st.integers(0, 2**16))
def test_every_ranks_shards_put_together_are_the_full_tensors(
    shapes: list[tuple[int, int]], ranks: int, seed: int
) -> None:
    generator = torch.Generator().manual_seed(seed)
    full = {f"0.0.{index}": torch.randn(shape, generator=generator) for index, shape in enumerate(shapes)}
    with tempfile.TemporaryDirectory() as folder:
        sharded, single = Path(folder) / "sharded", Path(folder) / "single"
        save_sharded(sharded, full, ranks)
        diff = param_diff(sharded / PARAMS_FILE, save_full(single, full))
        assert (diff.max_abs_diff, diff.mismatch, diff.error) == (0.0, None, None)
        assert diff.scope == f"every parameter, gathered from the {ranks} ranks' shards"
        # A change on the last rank's piece, which rank 0's shard alone would never see.
        name = next(iter(full))
        changed = {**full, name: full[name].clone()}
        changed[name][-1, 0] += 0.25
        moved = param_diff(sharded / PARAMS_FILE, save_full(Path(folder) / "changed", changed)).max_abs_diff
        assert moved == pytest.approx(0.25, abs=1e-6)


def test_without_every_piece_only_rank_zeros_shard_is_checked_and_said_so(tmp_path: Path) -> None:
    full = {"0.0.0": torch.arange(12.0).reshape(6, 2), "0.0.1": torch.arange(4.0)}
    save_sharded(tmp_path / "sharded", full, ranks=3, keep={0, 1})  # rank 2 was on another node
    changed = {**full, "0.0.0": full["0.0.0"].clone()}
    changed["0.0.0"][5, 1] = 100.0  # rank 2's part
    diff = param_diff(tmp_path / "sharded" / PARAMS_FILE, save_full(tmp_path / "single", changed))
    assert diff.max_abs_diff == 0.0
    assert diff.scope is not None and diff.scope.startswith("rank 0's shard of each sharded parameter")


def test_an_unreadable_piece_falls_back_to_rank_zeros_shard(tmp_path: Path) -> None:
    full = {"0.0.0": torch.arange(8.0).reshape(4, 2)}
    save_sharded(tmp_path / "sharded", full, ranks=2)
    (tmp_path / "sharded" / rank_params_file(1)).write_bytes(b"not a torch file")
    diff = param_diff(tmp_path / "sharded" / PARAMS_FILE, save_full(tmp_path / "single", full))
    assert diff.max_abs_diff == 0.0 and diff.scope is not None and diff.scope.startswith("rank 0's shard")
