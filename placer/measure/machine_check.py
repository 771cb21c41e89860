"""Is this machine quiet enough to time on? A short check before measuring: how much of the cores other processes
used, which ones, and how much the time of a fixed piece of work spread meanwhile.

A busy machine is named, with what ran, and the run goes on: its candidates are still timed side by side in
interleaved rounds, which load and drift hit alike, and each row's spread says how much its rounds moved. What the
check adds is the reason a user can act on (another benchmark, a test run, a build), before reading the answer.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

CHECK_SECONDS = 0.5
"""How long the check watches: long enough for a process that keeps a core busy to show (clock ticks are 10 ms),
short beside a budget of minutes."""
BUSY_SHARE = 0.15
"""Other processes using more than this share of the cores this process may use make the machine busy: on 2 cores,
0.3 of a core, about what one idle desktop never uses and one test run or benchmark always does."""
WORK_SECONDS = 0.002
"""About what one piece of timed work takes: a short step's length, so that a preemption shows in its time."""
BUSIEST_SHOWN = 3


@dataclass(frozen=True)
class MachineCheck:
    """What the check saw."""

    cores: int
    """Cores this process may use."""
    others_cores: float
    """Cores' worth of CPU time other processes (not this one, nor any it started) used during the check."""
    busiest: tuple[tuple[str, float], ...]
    """The other processes that used the most, as (command, cores' worth), busiest first."""
    spread: float
    """The timed work's slowest tenth over its fastest tenth, less 1: how much the machine's speed moved."""
    work_seconds: float
    """The timed work's median."""
    seconds: float
    """How long the check watched."""

    @property
    def busy(self) -> bool:
        return self.others_cores > BUSY_SHARE * self.cores

    @property
    def quiet(self) -> bool:
        """Nothing else kept the cores busy. The timer's spread is said but not judged: on a quiet 2-core VM here
        the same 2 ms of work took 1.75 or 3.1 ms in turn (its slowest tenth 13-97 % over its fastest in five
        checks, 2026-11-29), the machine's own noise, which no user action removes."""
        return not self.busy

    def describe(self) -> str:
        """One line: quiet, or busy with what ran, and the timer's spread."""
        using = f"other processes used {self.others_cores:.2f} of its {self.cores} cores"
        if self.busiest:
            using += " (" + ", ".join(f"{command} {cores:.2f}" for command, cores in self.busiest) + ")"
        timer = f"a {self.work_seconds * 1e3:.1f} ms piece of work spread {self.spread * 100:.0f} %"
        if self.quiet:
            return f"machine check: quiet; {using}; {timer}"
        return (f"machine check: BUSY: {using}; {timer}. Timings will be noisier than on a quiet machine: candidates "
                "are still compared side by side, but closer ones may not separate")

    def to_json_dict(self) -> dict:
        return {**asdict(self), "busiest": [list(pair) for pair in self.busiest], "busy": self.busy}


def check_machine(seconds: float = CHECK_SECONDS) -> MachineCheck:
    """Watch the machine for `seconds`, timing a fixed piece of work over and over meanwhile."""
    from placer.host import descendants, processes, usable_cores

    before = processes()
    started = time.monotonic()
    durations = []
    repeats = _calibrated_repeats()
    while time.monotonic() - started < seconds or len(durations) < 10:
        durations.append(_timed_work(repeats))
    elapsed = time.monotonic() - started
    after = processes()
    ours = {os.getpid()} | descendants(after, os.getpid()) | descendants(before, os.getpid())
    ticks = os.sysconf("SC_CLK_TCK")
    used = {}
    for pid, stat in after.items():
        if pid in ours:
            continue
        same = pid in before and before[pid].start_ticks == stat.start_ticks  # not a new process under an old pid
        earlier = before[pid].cpu_ticks if same else 0
        cores = (stat.cpu_ticks - earlier) / ticks / elapsed
        if cores > 0:
            used[pid] = cores
    durations.sort()
    tenth = max(1, len(durations) // 10)
    fastest, slowest = statistics.median(durations[:tenth]), statistics.median(durations[-tenth:])
    busiest = sorted(used, key=lambda pid: -used[pid])[:BUSIEST_SHOWN]
    return MachineCheck(usable_cores(), sum(used.values()),
                        tuple((_command_line(pid, after[pid].command), round(used[pid], 2)) for pid in busiest),
                        slowest / fastest - 1, statistics.median(durations), elapsed)


def _command_line(pid: int, command: str, longest: int = 60) -> str:
    """What `pid` runs, as its command line says (its program's name, then its arguments), cut to `longest`; its
    command name where the command line cannot be read."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError:
        return command
    if not words or not words[0]:
        return command
    text = " ".join([os.path.basename(words[0].decode(errors="replace")),
                     *(word.decode(errors="replace") for word in words[1:])])
    return text if len(text) <= longest else text[: longest - 3] + "..."


def _timed_work(repeats: int) -> float:
    started = time.perf_counter()
    total = 0
    for value in range(repeats):
        total += value * value
    return time.perf_counter() - started


def _calibrated_repeats() -> int:
    """Loop iterations that take about WORK_SECONDS here (the fastest of a few tries of a small loop, scaled)."""
    trial = 20_000
    fastest = min(_timed_work(trial) for _ in range(5))
    return max(1_000, int(trial * WORK_SECONDS / max(fastest, 1e-6)))
