"""What ddpcli knows about training frameworks, as data a maintainer extends by adding a row; `ddpcli init` wires
by it and `ddpcli port` refuses by it, so both commands call a script the same thing.

- FRAMEWORKS: per framework (found by its imports and, where a row names its drivers, a call or a class built on
  one: an Accelerator, a Trainer; not a seed helper), the flags every run must set for the run to do what ddpcli
  plans (Lightning's `--devices` must equal the processes torchrun starts), and the CPU switch of a machine without
  GPUs (accelerate's `--cpu`, else `ACCELERATE_USE_CPU=1` in the run's env).
- GENERIC_SWITCHES: device and backend flags any script may have (`--device cuda`, nanoGPT's `backend = 'nccl'`).
- LR_RULES: libraries that scale their own lr by the global batch when no lr is given (timm's `--lr-base`).
- WARMUP_NOT_IN_STEPS: warmups given in epochs or as a ratio: ddpcli cannot rescale them, init says so.
- DATA_PARALLEL_CALLS, TRAINER_MODULES, SELF_LAUNCHING: what makes a script data-parallel already (a call, a
  library's Trainer that is data-parallel by itself under torchrun, a library that starts its own processes).
- OPTIMIZER_CLASSES: optimizer class names as the source constructs them -> ddpcli's optimizer kind.
- LIGHTNING_CLI_TRAINER: the `--trainer.*` flags of LightningCLI with Lightning's defaults, for reading a
  LightningCLI script without running it (where jsonargparse is missing).
Flag names are normalised (lower case, '-' and '.' as '_'); a dotted flag also matches by its last part.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Switch:
    """A flag set to `value` in every run (a `{placeholder}` or a literal; None: a flag given alone)."""

    names: tuple[str, ...]
    value: str | None
    why: str
    cpu_only: bool = False  # only on a machine where nvidia-smi lists no GPU
    when_default: tuple[str, ...] = ()  # only when the script's default contains one of these (lower case)


@dataclass(frozen=True)
class Framework:
    name: str
    imports: tuple[str, ...]  # a script importing one of these modules (or a submodule) uses the framework
    switches: tuple[Switch, ...] = ()
    cpu_env: dict[str, str] = field(default_factory=dict)  # CPU-only machine, no CPU switch flag: set in env
    # what drives the training where the framework does (called, or a class of the script's built on it): a script
    # importing the framework for a helper alone (accelerate's set_seed, Lightning's seed_everything) is not
    # written for it. Empty: the import decides.
    drivers: tuple[str, ...] = ()


FRAMEWORKS = (
    Framework("lightning", ("lightning", "pytorch_lightning"), drivers=(
        "Trainer", "LightningModule", "LightningDataModule", "LightningCLI", "Fabric", "LightningLite"), switches=(
        Switch(("devices", "gpus", "num_devices"), "{nproc_per_node}",
               "Lightning refuses a devices count that differs from the processes torchrun starts"),
        Switch(("num_nodes",), "{nnodes}", "Lightning checks the node count against torchrun's world size"),
        Switch(("strategy",), "ddp", "DistributedDataParallel, as ddpcli plans"),
        Switch(("accelerator",), "cpu", "no GPU on this machine", cpu_only=True),
        Switch(("default_root_dir",), "{run_dir}", "Lightning's logs, checkpoints and LightningCLI's config.yaml "
               "go there: one directory per run, not the shared working directory"),
    )),
    Framework("accelerate", ("accelerate",), drivers=("Accelerator", "notebook_launcher"), switches=(
        Switch(("cpu",), None, "no GPU on this machine: without it accelerate under torchrun on CPU runs one "
               "separate training per process (DistributedType.NO)", cpu_only=True),
        Switch(("mixed_precision",), "no", "fp16 needs a GPU", cpu_only=True, when_default=("fp16", "fp8")),
    ), cpu_env={"ACCELERATE_USE_CPU": "1"}),
    Framework("timm", ("timm",)),
    Framework("transformers", ("transformers",), (
        Switch(("use_cpu",), "True", "no GPU on this machine: the Trainer's CPU switch; without it, under torchrun "
               "on CPU, its ranks are not one data-parallel run (separate trainings, or the same samples on every "
               "rank)", cpu_only=True),
        Switch(("ddp_backend",), "gloo", "the Trainer's process group on CPU: gloo (nccl needs GPUs)", cpu_only=True),
    )),
    Framework("fabric", ("lightning.fabric", "lightning_fabric", "lightning.Fabric")),
)  # fmt: skip

# Lightning Fabric reads its settings from the LT_* variables `fabric run` sets (lightning.fabric.cli, its
# connector's _argument_from_env): under torchrun nothing sets them, Fabric() picks one device, and the processes
# train separately. "{nproc_per_node}" is each run's own process count.
FABRIC_ENV = (
    ("LT_ACCELERATOR", "cpu", True),  # (variable, value, only on a machine without GPUs)
    ("LT_STRATEGY", "ddp", False),
    ("LT_DEVICES", "{nproc_per_node}", False),
    ("LT_NUM_NODES", "1", False),
)
FABRIC_SETTINGS = ("accelerator", "strategy", "devices", "num_nodes")
FABRIC_CLASSES = ("lightning.fabric.Fabric", "lightning_fabric.Fabric", "lightning.Fabric",
                  "lightning.fabric.fabric.Fabric")  # fmt: skip

# Calls that make a script data-parallel by themselves, each with what it does (the reason port names).
DATA_PARALLEL_CALLS = {
    "DistributedDataParallel": "wraps a model in DistributedDataParallel",
    "init_process_group": "starts a process group (init_process_group)",
    "FullyShardedDataParallel": "wraps a model in FullyShardedDataParallel",
    "fully_shard": "shards a model with fully_shard (FSDP2)",
}
# Libraries whose Trainer is data-parallel under torchrun by itself (TrainingArguments reads LOCAL_RANK): one list
# for init (evidence of data parallelism) and port (a refusal).
TRAINER_MODULES = ("transformers", "trl", "sentence_transformers", "setfit")
# Libraries that start their processes or wrap the model themselves when they drive the training.
SELF_LAUNCHING = ("accelerate", "lightning", "pytorch_lightning", "lightning_fabric", "deepspeed", "horovod",
                  "ray.train", "ddpcli")  # fmt: skip


def is_trainer(qualified: str) -> bool:
    """A Trainer class of TRAINER_MODULES (`transformers.Trainer`, `trl.SFTTrainer`), by its qualified name."""
    return qualified.split(".")[0] in TRAINER_MODULES and qualified.endswith("Trainer")


GENERIC_SWITCHES = (
    Switch(("device",), "cpu", "no GPU on this machine", cpu_only=True, when_default=("cuda", "gpu")),
    Switch(("backend", "dist_backend", "ddp_backend"), "gloo", "nccl needs GPUs", cpu_only=True,
           when_default=("nccl",)),
    Switch(("compile",), "False", "torch.compile on CPU only slows a short run down", cpu_only=True,
           when_default=("true",)),
)  # fmt: skip


@dataclass(frozen=True)
class LrRule:
    """`lr = base x (global batch / size)` (or its square root), applied by the script when its lr flag is unset."""

    library: str
    lr: str  # the flag that, when given, turns the library's own rule off
    base: str
    size: str
    scale: str  # the flag naming the rule ("linear", "sqrt"); empty default: decided by the optimizer's name
    sqrt_optimizers: tuple[str, ...]  # optimizer names containing one of these get sqrt by default


LR_RULES = (LrRule("timm", "lr", "lr_base", "lr_base_size", "lr_base_scale", ("ada", "lamb")),)

# A warmup ddpcli cannot express in optimizer steps: noted, and the plan is told the script warms up itself.
WARMUP_NOT_IN_STEPS = ("warmup_epochs", "warmup_ratio", "lr_warmup_epochs", "warmup_epoch")

# Every torch.optim class (torch 2.13) and common third-party ones (bitsandbytes, apex, DeepSpeed, lion-pytorch,
# timm, transformers): the kind decides ddpcli's lr rule (sgd: linear, adam/adamw: square root); "other" has no
# rule ddpcli knows, so its lr is kept. A torch.optim class missing here (a newer torch) is "other" by its module.
OPTIMIZER_CLASSES = {
    **dict.fromkeys(("SGD", "ASGD", "SGDW", "Momentum"), "sgd"),
    **dict.fromkeys(("Adam", "NAdam", "RAdam", "Adamax", "SparseAdam", "FusedAdam", "DeepSpeedCPUAdam", "Adam8bit",
                     "PagedAdam", "PagedAdam8bit", "Adam32bit"), "adam"),
    **dict.fromkeys(("AdamW", "AdamW8bit", "PagedAdamW", "PagedAdamW8bit", "PagedAdamW32bit", "AdamW32bit",
                     "FusedAdamW", "NAdamW", "RAdamW"), "adamw"),
    **dict.fromkeys(("Adadelta", "Adafactor", "Adagrad", "RMSprop", "Rprop", "LBFGS", "Muon", "Lion", "Lion8bit",
                     "PagedLion", "LAMB", "Lamb", "FusedLAMB", "FusedLamb", "Lars", "LARS", "Adan", "Sophia",
                     "SophiaG", "Prodigy", "Shampoo", "SOAP", "AdaBelief", "Novograd", "NovoGrad", "FusedNovoGrad",
                     "AdamWScheduleFree", "SGDScheduleFree", "RAdamScheduleFree", "Adahessian", "AdaHessian",
                     "DAdaptAdam", "DAdaptSGD", "Ranger", "MADGRAD", "LaProp", "AdEMAMix"), "other"),
}  # fmt: skip
TORCH_OPTIM = "torch.optim."

LIGHTNING_CLI_TRAINER = (
    ("--seed_everything", "True"),
    ("--trainer.accelerator", "auto"),
    ("--trainer.strategy", "auto"),
    ("--trainer.devices", "auto"),
    ("--trainer.num_nodes", "1"),
    ("--trainer.max_epochs", None),
    ("--trainer.max_steps", "-1"),
    ("--trainer.accumulate_grad_batches", "1"),
    ("--trainer.default_root_dir", None),
)

# The switch a user of each framework turns, for what a finding advises (ddpcli.rundir.framework_advice): a run under
# transformers' Trainer cannot "turn off" find_unused_parameters in a DDP call it never writes.
FIND_UNUSED_OFF = {
    "transformers": "pass `--ddp_find_unused_parameters False` (TrainingArguments(ddp_find_unused_parameters=False))",
    "lightning": 'use strategy="ddp", not "ddp_find_unused_parameters_true" '
    "(or DDPStrategy(find_unused_parameters=False))",
    "fabric": "pass strategy=DDPStrategy(find_unused_parameters=False) to Fabric",
    "accelerate": "pass kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=False)] to Accelerator",
}
SCHEDULER_PER_PROCESS = {
    "accelerate": "accelerate steps a prepared scheduler once per process per optimizer step: pass "
    "step_scheduler_with_optimizer=False to Accelerator, or scale the scheduler's length by the processes",
}
