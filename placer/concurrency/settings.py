"""Session thread settings (intra-op and inter-op thread pools) and the choice of one by real timings.

TensorFlow's performance guide recommends intra-op threads = physical cores and inter-op threads = sockets.
On this project's 2-core machine that setting is 40 % slower than the best one on NMT-2 (FINDINGS.md), so it
is worth timing the alternatives: each setting runs in its own measurement process (TensorFlow fixes its
thread pools once per process) and all are timed side by side in interleaved rounds.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

from placer.cost import StepTime, compare, open_target
from placer.graph.opgraph import OpGraph
from placer.measure import InProcess, MeasureConfig
from placer.placement import Placement


@dataclass(frozen=True)
class ThreadSetting:
    """One session's thread pools; None leaves TensorFlow's default (one thread per core for each)."""

    intra_op_threads: int | None = None
    inter_op_threads: int | None = None

    def target(self, logical_cpus: int = 1) -> InProcess:
        """The in-process target with these pools (refuses more threads than cores)."""
        return InProcess(logical_cpus, self.intra_op_threads, self.inter_op_threads)

    def __str__(self) -> str:
        if self.intra_op_threads is None and self.inter_op_threads is None:
            return "TensorFlow's default"
        return f"intra {_threads(self.intra_op_threads)} / inter {_threads(self.inter_op_threads)}"


def _threads(count: int | None) -> str:
    return "default" if count is None else str(count)


def sockets() -> int:
    """CPU sockets among the cores this process may use (1 where /proc/cpuinfo does not say)."""
    allowed = os.sched_getaffinity(0)
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return 1
    found, processor = set(), None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "processor":
            processor = int(value)
        elif key == "physical id" and processor in allowed:
            found.add(value.strip())
    return max(len(found), 1)


def recommended_setting() -> ThreadSetting:
    """TensorFlow's performance guide: intra-op threads = physical cores, inter-op threads = sockets. The
    cores are those this process may use (a container's or `taskset`'s share, not the host's)."""
    return ThreadSetting(len(os.sched_getaffinity(0)), sockets())


def global_settings(cores: int | None = None) -> list[ThreadSetting]:
    """Every (intra, inter) pair from 1 to `cores` threads: the exhaustive sweep a user would try by hand."""
    cores = cores or len(os.sched_getaffinity(0))
    return [ThreadSetting(intra, inter) for intra in range(1, cores + 1) for inter in range(1, cores + 1)]


def tuning_candidates(cores: int | None = None) -> dict[str, ThreadSetting]:
    """TensorFlow's default, the recommended setting and the sweep, named; a setting that is two of these is
    timed once, under a name that says both."""
    named: dict[ThreadSetting, list[str]] = {ThreadSetting(): ["default"]}
    named.setdefault(recommended_setting(), []).append("recommended")
    for setting in global_settings(cores):
        named.setdefault(setting, []).append(f"intra {setting.intra_op_threads} / inter {setting.inter_op_threads}")
    return {" = ".join(names): setting for setting, names in named.items()}


@dataclass(frozen=True)
class TuneResult:
    """Step times of one graph under several thread settings, timed side by side."""

    graph: str
    settings: Mapping[str, ThreadSetting]
    medians: Mapping[str, float]
    """Median step time in seconds per setting (inf where it failed)."""
    rounds: Mapping[str, tuple[float | None, ...]]
    failures: Mapping[str, StepTime]
    seconds: float
    """Wall time of the whole choice: starting a measurement process per setting, and the timings."""

    @property
    def best(self) -> str:
        return min(self.medians, key=self.medians.get)

    def against(self, name: str) -> float:
        """How much shorter the best setting's step is than `name`'s, as a fraction of `name`'s."""
        return 1.0 - self.medians[self.best] / self.medians[name]

    def describe(self) -> str:
        width = max(map(len, self.medians))
        reference = next((name for name in self.medians if "recommended" in name.split(" = ")), None)
        lines = [f"{self.graph}: step time per thread setting (median of interleaved rounds)"]
        for name, seconds in sorted(self.medians.items(), key=lambda item: item[1]):
            mark = "  best" if name == self.best else ""
            if name in self.failures:
                failure = self.failures[name]
                lines.append(f"  {name:<{width}}  failed ({failure.failure}): {failure.message}")
                continue
            versus = ""
            if reference and name != reference:
                versus = f"  {100 * (seconds / self.medians[reference] - 1):+.1f}% step time vs recommended"
            lines.append(f"  {name:<{width}}  {seconds * 1e3:9.2f} ms{versus}{mark}")
        lines.append(f"  chosen in {self.seconds:.0f} s")
        return "\n".join(lines)


def tune(graph: OpGraph, settings: Mapping[str, ThreadSetting] | None = None, *, rounds: int = 3,
         measure_config: MeasureConfig | None = None,
         progress: Callable[[Iterable[int]], Iterable[int]] | None = None) -> TuneResult:
    """Time `graph` on one in-process CPU device under each thread setting, side by side in interleaved rounds.

    Every setting gets its own measurement process (started before any timing, so a setting that cannot
    start fails first); the graph is placed on the single CPU device."""
    settings = dict(settings or tuning_candidates())
    targets = {name: setting.target() for name, setting in settings.items()}  # refuses impossible settings now
    started = time.perf_counter()
    opened = {}
    try:
        for name, target in targets.items():
            opened[name] = open_target(graph, target, measure_config=measure_config)
        placements = {name: Placement.single_device(graph, cost.devices) for name, cost in opened.items()}
        compared = compare(lambda name: opened[name].evaluate(placements[name]), {name: name for name in opened},
                           rounds, progress=progress)
    finally:
        for cost in opened.values():
            cost.close()
    return TuneResult(
        graph=graph.name,
        settings=settings,
        medians={name: c.median for name, c in compared.items()},
        rounds={name: tuple(c.rounds) for name, c in compared.items()},
        failures={name: c.failure for name, c in compared.items() if c.failure is not None},
        seconds=time.perf_counter() - started,
    )
