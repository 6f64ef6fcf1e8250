"""A fixed sample of the robustness run (benchmarks/port_robustness.py, issue 37 item 6): every rule of `ddpcli
port` on 40 files of the installed torch nobody here wrote (optimizers, data loading, checkpointing, distributed
tests: `.step(`, DataLoader, torch.save and print in every shape), refused or not. Each must end written or
refused with a reason, never in an internal error."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from ddpcli.port.engine import port_script

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from port_robustness import Tally, port_one

SAMPLE = [
    "torch/_dynamo/callback.py",
    "torch/_functorch/benchmark_utils.py",
    "torch/_inductor/analysis/profile_analysis.py",
    "torch/_inductor/autoheuristic/learned_heuristic_controller.py",
    "torch/_inductor/compile_fx_ext.py",
    "torch/_inductor/compiler_bisector.py",
    "torch/_inductor/fx_passes/auto_chunker/applier.py",
    "torch/_inductor/fx_passes/auto_chunker/propagate_scale_by.py",
    "torch/_inductor/fx_passes/auto_chunker/utils.py",
    "torch/_inductor/mock_cache.py",
    "torch/amp/autocast_mode.py",
    "torch/ao/nn/quantized/modules/embedding_ops.py",
    "torch/ao/pruning/_experimental/data_sparsifier/lightning/callbacks/data_sparsity.py",
    "torch/ao/pruning/scheduler/base_scheduler.py",
    "torch/distributed/algorithms/model_averaging/hierarchical_model_averager.py",
    "torch/distributed/checkpoint/filesystem.py",
    "torch/distributed/checkpoint/format_utils.py",
    "torch/distributed/rpc/internal.py",
    "torch/distributed/utils.py",
    "torch/distributions/__init__.py",
    "torch/export/experimental/__init__.py",
    "torch/fx/_graph_pickler.py",
    "torch/fx/passes/graph_drawer.py",
    "torch/hub.py",
    "torch/nn/modules/linear.py",
    "torch/optim/_adafactor.py",
    "torch/optim/_muon.py",
    "torch/optim/adam.py",
    "torch/optim/sgd.py",
    "torch/optim/sparse_adam.py",
    "torch/optim/swa_utils.py",
    "torch/testing/_internal/distributed/nn/api/remote_module_test.py",
    "torch/testing/_internal/distributed/rpc/dist_optimizer_test.py",
    "torch/testing/_internal/distributed/rpc/examples/parameter_server_test.py",
    "torch/testing/_internal/distributed/rpc/jit/rpc_test.py",
    "torch/testing/_internal/optests/generate_tests.py",
    "torch/utils/data/dataset.py",
    "torch/utils/data/distributed.py",
    "torch/utils/data/sampler.py",
    "torch/utils/flop_counter.py",
]


def test_every_rule_on_a_sample_of_torchs_own_files_ends_written_or_refused(tmp_path: Path) -> None:
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.submodule_search_locations
    root = Path(next(iter(spec.submodule_search_locations))).parent
    files = [root / name for name in SAMPLE if (root / name).is_file()]
    assert len(SAMPLE) == 40 and len(files) >= 35  # a newer torch may move a few
    rules = Tally()
    for path in files:
        port_one(path, tmp_path, rules, rules=True)
    assert dict(rules.errors) == {}
    assert rules.total == len(files)
    assert rules.written >= 30  # the rules read almost all of them through (a few are not Python libcst reads)


def test_an_internal_error_is_counted_with_its_place() -> None:
    tally = Tally()
    missing = Path(port_script.__code__.co_filename)  # a real file (engine.py), ported with a rule made to fail
    import ddpcli.port.engine as engine

    rules = engine.RULES
    engine.RULES = (lambda port: [][0],)
    try:
        port_one(missing, Path("/nonexistent"), tally, rules=True)
    finally:
        engine.RULES = rules
    [(kind, paths)] = tally.errors.items()
    assert kind.startswith("IndexError at engine.py:") and paths == [str(missing)]


def test_an_empty_module_and_one_of_comments_get_the_header_alone() -> None:
    from ddpcli.port.engine import rules_only

    for source in ("", "# only a comment\n"):
        written = rules_only(source, "empty.py").source
        compile(written, "empty_ddp.py", "exec")
        assert '_ddp = "RANK" in os.environ and "WORLD_SIZE" in os.environ' in written
