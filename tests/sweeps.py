"""The experiment files that several test modules read the runs of: each is launched once per session
(tests/helpers.launch), however many modules ask for it."""

import json
from pathlib import Path

import pytest

from tests.helpers import OBSERVE_SCRIPTS as SCRIPTS
from tests.helpers import launched_root

# -- why is it slow: one plain DDP script with knobs (tests/test_why_slow_e2e.py, tests/test_predict_e2e.py) --------

KNOB_SCRIPT = SCRIPTS / "slow_knobs.py"
KNOB_ARGS = ["--batch-size", "{per_device_batch_size}", "--grad-accum", "{grad_accum_steps}", "--steps",
             "{total_steps}"]  # fmt: skip
KNOB_HIDDEN = 512  # the script's MLP: Linear(64, H), (H, H), (H, 1)
KNOB_PARAMS = 64 * KNOB_HIDDEN + KNOB_HIDDEN + KNOB_HIDDEN * KNOB_HIDDEN + KNOB_HIDDEN + KNOB_HIDDEN + 1


def knob_defaults(max_steps: int, per_device_batch_size: int) -> str:
    """The `[defaults]` of a sweep of the knob script: one thread a process, a data set no run finishes, the
    plan's lr kept (why-slow and predict launch a sweep each: one of both took longer than the two side by side)."""
    return f"""
[defaults]
script = "{KNOB_SCRIPT}"
args = {json.dumps(KNOB_ARGS)}
max_steps = {max_steps}
dataset_size = 1000000
scaling = "none"
per_device_batch_size = {per_device_batch_size}
lr = 0.01
env = {{ OMP_NUM_THREADS = "1" }}
"""


# -- plain DDP, Lightning (with validation), Hugging Face: 1 process, and 2 processes with accumulation 2 ----------

ARGS = '["--batch-size", "{per_device_batch_size}", "--grad-accum", "{grad_accum_steps}", "--lr", "{lr}", ' \
    '"--steps", "{total_steps}"]'  # fmt: skip
# Lightning with a validation loop and its default sanity check (tests/test_lightning_validation_e2e.py)
LIGHTNING_ARGS = ARGS[:-1] + ', "--validate"]'

FRAMEWORKS = f"""
[defaults]
args = {ARGS}
max_steps = 6
dataset_size = 512
scaling = "none"
noise_scale = true
env = {{ OMP_NUM_THREADS = "1", TOKENIZERS_PARALLELISM = "false", HF_HUB_OFFLINE = "1" }}

[baseline]
name = "plain-1"
script = "{SCRIPTS / "plain.py"}"
per_device_batch_size = 8
lr = 0.05

[[experiments]]
name = "plain-2x2"
script = "{SCRIPTS / "plain.py"}"
nproc_per_node = 2
grad_accum_steps = 2

[[experiments]]
name = "lightning-1"
script = "{SCRIPTS / "lightning_train.py"}"
args = {LIGHTNING_ARGS}

[[experiments]]
name = "lightning-2x2"
script = "{SCRIPTS / "lightning_train.py"}"
args = {LIGHTNING_ARGS}
nproc_per_node = 2
grad_accum_steps = 2

[[experiments]]
name = "hf-1"
script = "{SCRIPTS / "hf_train.py"}"
lr = 0.001

[[experiments]]
name = "hf-2x2"
script = "{SCRIPTS / "hf_train.py"}"
nproc_per_node = 2
grad_accum_steps = 2
lr = 0.001
"""

# name -> (processes, per-device batch, accumulation, lr)
FRAMEWORK_RUNS = {
    "plain-1": (1, 8, 1, 0.05),
    "plain-2x2": (2, 8, 2, 0.05),
    "lightning-1": (1, 8, 1, 0.05),
    "lightning-2x2": (2, 8, 2, 0.05),
    "hf-1": (1, 8, 1, 0.001),
    "hf-2x2": (2, 8, 2, 0.001),
}
FRAMEWORK_STEPS = 6

# -- the bundled example (ddpcli.examples.regression): N x B/N against 1 x B -------------------------------------

# The plan's own learning rates and warmups: the baseline's warmup of 16 steps is 8 at twice the global batch, so
# 2x16 and 1x32 run at lr 0.1 after 8 warmup steps. 2 processes: that N x B/N ends where 1 x B ends holds at any N,
# and 4 processes on 2 cores only make it slower (tests/test_observe_e2e.py keeps one 4-process equivalence).
_REGRESSION_ARGS = ["--steps", "{total_steps}", "--batch-size", "{per_device_batch_size}", "--grad-accum",
                    "{grad_accum_steps}", "--lr", "{lr}", "--warmup", "{warmup_steps}", "--dataset-size",
                    "{dataset_size}", "--seed", "{seed}", "--no-noise-scale"]  # fmt: skip
_BATCHNORM = [*_REGRESSION_ARGS, "--batchnorm"]
REGRESSION_STEPS = 16
# The flags it is launched with: each run exported to TensorBoard as it ends (`launch --export`, the real path,
# read back by tests/test_export_e2e.py)
REGRESSION_FLAGS = ("--export", "tensorboard:{sweep}/tensorboard")
REGRESSION = f"""
[defaults]
module = "ddpcli.examples.regression"
args = {json.dumps(_REGRESSION_ARGS)}
dataset_size = 2048
max_steps = {REGRESSION_STEPS}
timeout_s = 300
env = {{ OMP_NUM_THREADS = "1" }}

[baseline]
name = "1x16"
per_device_batch_size = 16
lr = 0.05
warmup_steps = 16

[[experiments]]
name = "1x32"
per_device_batch_size = 32

[[experiments]]
name = "2x16"
nproc_per_node = 2

[[experiments]]
name = "2x8"
nproc_per_node = 2
global_batch_size = 16

[[experiments]]
name = "2x4x2"
nproc_per_node = 2
per_device_batch_size = 4
grad_accum_steps = 2

[[experiments]]
name = "1x32-bn"
per_device_batch_size = 32
args = {json.dumps(_BATCHNORM)}

[[experiments]]
name = "2x16-bn"
nproc_per_node = 2
args = {json.dumps(_BATCHNORM)}

[[experiments]]
name = "2x16-syncbn"
nproc_per_node = 2
args = {json.dumps([*_BATCHNORM, "--sync-bn"])}
"""


def regression_root(factory: pytest.TempPathFactory) -> Path:
    """The regression sweep's folder (launched once per session, every run completed)."""
    return launched_root(factory, REGRESSION, *REGRESSION_FLAGS)
