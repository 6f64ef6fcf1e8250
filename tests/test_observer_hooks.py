"""The observer inside a real process (python -m ddpcli.worker.observer), on patterns that fooled it before."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ddpcli.rundir.merge import summarize
from ddpcli.rundir.observations import read_observations
from tests import zygote
from tests.conftest import REPO

pytestmark = pytest.mark.interpreters

LM_PROBE = REPO / "tests" / "scripts" / "observer_lm_probe.py"


def observe_script(run_dir: Path, script: Path, *args: str) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DDPCLI_", "TORCHELASTIC"))}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env.update({"DDPCLI_RUN_DIR": str(run_dir), "OMP_NUM_THREADS": "1"})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "ddpcli.worker.observer", str(script), *args]
    result = zygote.run(command, env=env, timeout=120)  # a process of its own, torch imported once (zygote)
    assert result.returncode == 0, result.stderr[-3000:]


def test_a_language_model_script_is_counted_in_sequences_not_tokens(tmp_path: Path) -> None:
    """The loss module sees batch x tokens rows and has no parameters: it is not the model. The first optimizer step
    comes before any forward, yet the model is still found; the real sampler is the batch sampler's."""
    observe_script(tmp_path, LM_PROBE, "--batch-size", "4", "--steps", "5")
    ranks = read_observations(tmp_path)
    observed = summarize(ranks)
    assert observed is not None
    assert observed.per_device_batch_size == 4  # not 40 (4 sequences x 10 tokens)
    assert observed.grad_accum_steps == 1
    assert observed.optimizer_steps == 6  # the warm-up call is an optimizer step too, of no samples
    assert observed.samples_seen == 20
    assert observed.sampler == "RandomSampler"
    assert ranks[0].run["models"] == ["Sequential"]
    steps = ranks[0].steps
    assert (steps[1]["micro_batches"], steps[1]["samples"]) == (0, 0)
    assert all((steps[n]["micro_batches"], steps[n]["samples"]) == (1, 4) for n in range(2, 7))


def test_a_flush_reads_every_kind_of_tensor_in_one_transfer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scalars of several dtypes and vectors come back as the numbers they hold, with one tolist per device."""
    import torch

    from ddpcli.worker.stream import _to_host

    calls = []
    original = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: calls.append(1) or original(self))
    rows = [
        {"loss": torch.tensor(0.25), "lr": [torch.tensor(0.5, dtype=torch.float64), 0.1], "kind": "step"},
        {"count": torch.tensor(3), "half": torch.tensor(1.5, dtype=torch.float16), "nan": torch.tensor(float("nan"))},
        {"values": torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), "row": torch.tensor([[4.0]])},
    ]
    assert _to_host(rows) == [
        {"loss": 0.25, "lr": [0.5, 0.1], "kind": "step"},
        {"count": 3.0, "half": 1.5, "nan": "nan"},
        {"values": [1.0, 2.0, 3.0], "row": [4.0]},
    ]
    assert len(calls) == 1
    assert _to_host([{"lr": float("nan"), "values": [float("inf"), 1.0]}]) == [{"lr": "nan", "values": ["inf", 1.0]}]
