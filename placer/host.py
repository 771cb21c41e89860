"""The machine this process runs on: its processor, the cores it may use, its sockets, and whether a machine
recorded with a calibration or a profile is this one.

Costs measured here (a calibration, a thread profile, a measured target's kind) are this machine's; each
records `this_machine()` so that using them elsewhere is caught (`machine_differences`).
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def processor_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else the architecture (where the kernel does not say more)."""
    for line in _cpuinfo().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return platform.processor() or platform.machine()


def usable_cores() -> int:
    """Cores this process may use: a container's or `taskset`'s share, not the host's."""
    return len(os.sched_getaffinity(0))


def sockets() -> int:
    """CPU sockets among the cores this process may use (1 where /proc/cpuinfo does not say)."""
    allowed = os.sched_getaffinity(0)
    found, processor = set(), None
    for line in _cpuinfo().splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "processor":
            processor = int(value)
        elif key == "physical id" and processor in allowed:
            found.add(value.strip())
    return max(len(found), 1)


def this_machine() -> dict:
    """What costs measured here depend on beyond the device names: the processor and the cores."""
    return {"processor": processor_model(), "architecture": platform.machine(), "cores": usable_cores()}


def machine_differences(recorded: Mapping[str, object], here: Mapping[str, object] | None = None) -> list[str]:
    """How a machine `this_machine()` recorded elsewhere differs from `here` (default: this one), one phrase
    each; empty when they are alike. A record without an architecture is from a placer that stored only the
    architecture, under "processor": it is compared with this machine's architecture, all it can tell."""
    here = this_machine() if here is None else here
    mine = dict(here)
    if "architecture" not in recorded:
        mine["processor"] = here.get("architecture", here.get("processor"))
    return [f"{key} {recorded[key]!r} there, {mine[key]!r} here" for key in ("processor", "architecture", "cores")
            if key in recorded and key in mine and recorded[key] != mine[key]]


def describe_machine(machine: Mapping[str, object]) -> str:
    """A machine `this_machine()` recorded, in words."""
    return f"{machine.get('processor') or 'an unknown processor'}, {machine.get('cores', '?')} cores"


def memory_available() -> int | None:
    """Bytes this machine can still give its processes without swapping (MemAvailable of /proc/meminfo); None
    where the kernel does not say."""
    return _meminfo("MemAvailable")


def memory_total() -> int | None:
    """Bytes of memory this machine has (MemTotal of /proc/meminfo); None where the kernel does not say."""
    return _meminfo("MemTotal")


def _meminfo(key: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name == key:
                return int(value.split()[0]) * 1024  # reported in kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def own_and_descendants_resident_bytes() -> int:
    """Resident memory of this process and every process below it (a measurement worker and the testbed servers
    it started), in bytes; 0 where /proc is missing."""
    return sum(tree_resident_bytes(os.getpid()).values())


def descendants_resident_bytes(pid: int | None = None) -> dict[int, int]:
    """Resident memory of every process below `pid` (default: this one), by pid; empty where /proc is missing.
    The measurement workers and testbed servers placer starts are this process's descendants."""
    table = processes()
    return {child: table[child].resident_bytes for child in descendants(table, os.getpid() if pid is None else pid)}


def tree_resident_bytes(pid: int) -> dict[int, int]:
    """Resident memory of process `pid` and of every process below it, in bytes by pid; empty where /proc is
    missing."""
    table = processes()
    return {member: table[member].resident_bytes for member in {pid} | descendants(table, pid) if member in table}


@dataclass(frozen=True)
class ProcessStat:
    """One process as /proc/PID/stat and statm describe it."""

    parent: int
    command: str
    """Its command name (at most 15 characters, as the kernel keeps it)."""
    cpu_ticks: int
    """User and system CPU time so far, in clock ticks (`os.sysconf("SC_CLK_TCK")` a second)."""
    resident_bytes: int
    start_ticks: int = 0
    """When it started, in clock ticks after boot: with the pid, which process it is (pids are reused)."""


def processes() -> dict[int, ProcessStat]:
    """Every process this one may read, by pid; empty where /proc is missing."""
    table: dict[int, ProcessStat] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            table[int(entry.name)] = ProcessStat(
                parent=int(fields[1]), command=stat[stat.index("(") + 1: stat.rindex(")")],
                cpu_ticks=int(fields[11]) + int(fields[12]),
                resident_bytes=int((entry / "statm").read_text().split()[1]) * page, start_ticks=int(fields[19]))
        except (OSError, ValueError, IndexError):  # gone meanwhile, or not ours to read
            continue
    return table


def descendants(table: Mapping[int, ProcessStat], pid: int) -> set[int]:
    """The pids below `pid` in `table` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for child, stat in table.items():
        children.setdefault(stat.parent, []).append(child)
    found: set[int] = set()
    pending = list(children.get(pid, []))
    while pending:
        child = pending.pop()
        if child not in found:
            found.add(child)
            pending += children.get(child, [])
    return found
