"""The hyper-parameters ddpcli plans and the spellings scripts use for them: a table, extended by adding a name.

A flag plays a role when one of its spellings (all of it, or a dotted flag's last part: `--data.batch_size`) is
one of the role's names; where several options could, the earlier name in the role's list wins.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpcli.init.help_text import HelpOption, spellings


@dataclass(frozen=True)
class Role:
    """A hyper-parameter ddpcli knows, the spellings scripts use for it (normalised: lower case, '_')."""

    key: str
    placeholder: str | None
    names: tuple[str, ...]
    missing: str


ROLES = (
    Role("per_device_batch_size", "per_device_batch_size",
         ("per_device_batch_size", "per_device_train_batch_size", "batch_size", "bs", "per_gpu_train_batch_size",
          "train_batch_size", "micro_batch_size", "local_batch_size", "batch", "batchsize", "mbs",
          "train_micro_batch_size_per_gpu"),
         "no batch-size flag found: the runs will use the script's own batch; the observer will show it"),
    Role("grad_accum_steps", "grad_accum_steps",
         ("grad_accum_steps", "gradient_accumulation_steps", "grad_accum", "gradient_accumulation", "accum_steps",
          "accumulation_steps", "accumulate_grad_batches", "grad_accumulation_steps", "grad_acc_steps", "grad_acc",
          "accum", "accumulate"),
         "no gradient-accumulation flag found: runs that keep the global batch can only shrink the per-device batch"),
    Role("lr", "lr",
         ("lr", "learning_rate", "base_lr", "peak_lr", "max_lr", "learningrate"),
         "no learning-rate flag found: the runs will use the script's own lr, not the scaled one; the observer "
         "will show it"),
    Role("warmup_steps", "warmup_steps",
         ("warmup_steps", "warmup", "num_warmup_steps", "lr_warmup_steps", "warmup_iters", "n_warmup_steps"),
         "no warmup flag found: the runs will use the script's own warmup, not the rescaled one"),
    Role("max_steps", "total_steps",
         ("max_steps", "steps", "total_steps", "num_steps", "train_steps", "num_train_steps", "max_train_steps",
          "iterations", "iters", "max_iters", "num_iterations", "max_iterations", "n_steps", "training_steps",
          "max_train_steps"),
         "no steps or epochs flag found: every run trains as long as the script decides"),
    Role("epochs", "epochs",
         ("epochs", "num_epochs", "num_train_epochs", "n_epochs", "max_epochs", "train_epochs", "epoch", "nepochs"),
         ""),
    Role("dataset_size", "dataset_size",
         ("dataset_size", "num_samples", "n_samples", "train_size", "num_train_samples", "train_samples",
          "dataset_len"),
         ""),
    Role("seed", "seed", ("seed", "random_seed", "manual_seed", "rng_seed", "seed_everything"),
         "no seed flag found: the runs use the script's own seeding"),
    Role("run_dir", "run_dir",
         ("output_dir", "out_dir", "outdir", "output", "save_dir", "checkpoint_dir", "ckpt_dir", "run_dir",
          "output_path", "logdir", "log_dir"),
         ""),
    Role("optimizer", None, ("optimizer", "optim", "opt"), ""),
)  # fmt: skip
ROLE_BY_KEY = {role.key: role for role in ROLES}


@dataclass(frozen=True)
class FoundFlag:
    """A script option that plays a role: the flag to write in `args` and the default it shows."""

    role: str
    flag: str
    default: str | None
    option: HelpOption | None = None


def find_flags(options: list[HelpOption]) -> dict[str, FoundFlag]:
    """For each role, the option with its most usual spelling (earlier in Role.names wins); long flags only."""
    found: dict[str, tuple[int, FoundFlag]] = {}
    for option in options:
        long_flags = [flag for flag in option.flags if flag.startswith("--") and flag != "--help"]
        if not option.takes_value or not long_flags:
            continue
        names = set().union(*(spellings(flag) for flag in long_flags))
        for role in ROLES:
            ranks = [role.names.index(name) for name in names if name in role.names]
            if ranks and (role.key not in found or min(ranks) < found[role.key][0]):
                found[role.key] = (min(ranks), FoundFlag(role.key, long_flags[0], option.default, option))
    return {key: flag for key, (_, flag) in found.items()}


def find_option(options: list[HelpOption], names: tuple[str, ...]) -> HelpOption | None:
    """The first option with one of `names` (normalised) among its spellings."""
    for option in options:
        if any(spellings(flag) & set(names) for flag in option.flags if flag.startswith("--")):
            return option
    return None


# Literal names a script may hard-code instead of taking a flag (`config = {"lr": 2e-5, "batch_size": 16}`).
LITERAL_NAMES = {
    name: role.key
    for role in ROLES
    if role.key in ("per_device_batch_size", "lr", "warmup_steps")
    for name in role.names
    if len(name) > 2 or name == "lr"
}
