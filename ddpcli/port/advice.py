"""What `ddpcli port SCRIPT` would change, said where a run shows that SCRIPT has no DDP: the port's own plan for
that script (its rules run on the source; nothing is written), so the sentence names what the user would get."""

from __future__ import annotations

from pathlib import Path

from ddpcli.errors import UserError
from ddpcli.port.output import default_output
from ddpcli.script import source as script_source

# The changes that make a run data-parallel, in the order a reader needs them; the rest are counted.
PHRASES = (
    ("process_group", "a process group from torchrun's environment"),
    ("ddp_wrap", "the model wrapped in DistributedDataParallel (gradients averaged every step)"),
    ("sampler", "a DistributedSampler giving each process its own share of the data"),
    ("hand_batches", "its hand-made batches split across the processes"),
    ("set_epoch", "set_epoch each epoch"),
    ("no_sync", "no all-reduce on the accumulated micro-batches but the last"),
)


def port_clause(script: str | None) -> str:
    """The clause ending a finding about a script with no DDP (it starts with "; ")."""
    generic = f"; `ddpcli port {script or 'SCRIPT'}` makes a single-device script data-parallel"
    if not script or not script.endswith(".py"):
        return generic
    path = Path(script)
    try:
        source = script_source.read(path).text  # as Python reads it, as the port does
    except UserError:
        return generic
    from ddpcli.port.engine import port_source
    from ddpcli.port.records import PortRefused

    try:
        result = port_source(source, path.name, path)
    except PortRefused as refused:
        return f"; `ddpcli port {script}` cannot port it as it is: {refused.reasons[0]}"
    except Exception:  # the port's rules on a script they cannot read: the pointer without the plan
        return generic
    kinds = {change.kind for change in result.changes}
    named = [words for kind, words in PHRASES if kind in kinds]
    if not named:
        return generic
    total = len(result.changes)
    return (
        f"; `ddpcli port {script}` writes {default_output(path).name}, a data-parallel copy with "
        f"{', '.join(named)} ({total} change{'s' if total != 1 else ''} in all; --diff shows each)"
    )
