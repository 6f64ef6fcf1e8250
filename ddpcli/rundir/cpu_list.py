"""CPU ids as Linux writes a CPU list ("0-3,8,10-11", as in /sys/devices/system/cpu/online): what each rank's
`timing` row records of the cores it may use, short even on a machine of hundreds of cores. Pure."""

from __future__ import annotations

from typing import Any


def format_cpu_list(cpus: list[int] | set[int]) -> str:
    spans: list[list[int]] = []
    for cpu in sorted(cpus):
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(f"{low}" if low == high else f"{low}-{high}" for low, high in spans)


def parse_cpu_list(text: Any) -> set[int]:
    """The CPU ids of a CPU list; empty for anything that is not one."""
    if not isinstance(text, str) or not text:
        return set()
    cpus: set[int] = set()
    for span in text.split(","):
        low, dash, high = span.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()) or (dash and int(high) < int(low)):
            return set()
        cpus.update(range(int(low), int(high if dash else low) + 1))
    return cpus
