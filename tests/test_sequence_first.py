"""The batch dimension of a sequence-first model (issue 27, item 10), on a word_language_model-like fixture of ours
(tests/observe_scripts/sequence_first.py) under the observer."""

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

SCRIPT = REPO / "tests" / "observe_scripts" / "sequence_first.py"


def observed_of(run_dir: Path, *flags: str):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DDPCLI_", "TORCHELASTIC"))}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env.update({"DDPCLI_RUN_DIR": str(run_dir), "OMP_NUM_THREADS": "1"})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "ddpcli.worker.observer", str(SCRIPT), *flags]
    result = zygote.run(command, env=env, timeout=120)  # a process of its own, torch imported once (zygote)
    assert result.returncode == 0, result.stderr[-3000:]
    observed = summarize(read_observations(run_dir))
    assert observed is not None
    return observed


def test_an_lstm_fed_bptt_by_batch_counts_the_batch_not_the_sequence(tmp_path: Path) -> None:
    """word_language_model: (bptt 8, batch 4) into an LSTM with batch_first=False: 4 sequences a micro-batch."""
    seq = observed_of(tmp_path / "seq")
    assert (seq.optimizer_steps, seq.per_device_batch_size, seq.samples_seen) == (4, 4, 16)
    # token ids: 4 sequences of 8 tokens a micro-batch (build-nanogpt counts its steps in tokens)
    assert (seq.tokens_per_micro_batch, seq.tokens_per_step) == (32, 32)
    first = observed_of(tmp_path / "first", "--batch-first")
    assert (first.optimizer_steps, first.per_device_batch_size, first.samples_seen) == (4, 4, 16)


def test_a_hand_written_sgd_gets_its_steps_lr_and_final_parameters(tmp_path: Path) -> None:
    """word_language_model's default update: `p.data.add_(p.grad, alpha=-lr)`, no torch.optim: 0 steps before."""
    import torch

    observed = observed_of(tmp_path / "hand", "--hand-sgd")
    assert (observed.optimizer_steps, observed.per_device_batch_size, observed.samples_seen) == (4, 4, 16)
    assert observed.lr_base == 0.5
    params = torch.load(tmp_path / "hand" / "final_params.pt", weights_only=True)
    assert len(params) == 7  # embedding, the LSTM's 4 tensors, the head's 2
    with_optimizer = observed_of(tmp_path / "optim")
    assert with_optimizer.optimizer_steps == 4  # a torch optimizer's steps are not counted twice
