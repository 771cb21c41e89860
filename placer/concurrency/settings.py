"""Session thread settings (intra-op and inter-op thread pools) and the choice of one by real timings.

TensorFlow's performance guide recommends intra-op threads = physical cores and inter-op threads = sockets.
On this project's 2-core machine that setting is 40 % slower than the best one on NMT-2 (FINDINGS.md), so it
is worth timing the alternatives: each setting runs in its own measurement process (TensorFlow fixes its
thread pools once per process) and all are timed side by side in interleaved rounds. On the local testbed
a setting applies to every worker, and each setting gets a testbed of its own.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from placer.cost import StepTime, compare, open_target
from placer.devices import DeviceSet
from placer.errors import DeviceSpecError
from placer.graph.opgraph import OpGraph
from placer.host import sockets, usable_cores
from placer.measure import InProcess, LocalTestbed, MeasureConfig
from placer.placement import Placement

TunableTarget = InProcess | LocalTestbed
"""Targets whose thread pools placer sets: the in-process session, and the local testbed's workers."""


@dataclass(frozen=True)
class ThreadSetting:
    """One session's thread pools; None leaves TensorFlow's default (one thread per core for each)."""

    intra_op_threads: int | None = None
    inter_op_threads: int | None = None

    def target(self, logical_cpus: int = 1) -> InProcess:
        """The in-process target with these pools (refuses more threads than cores)."""
        return InProcess(logical_cpus, self.intra_op_threads, self.inter_op_threads)

    def on(self, target: TunableTarget) -> TunableTarget:
        """`target` with these pools. On the testbed every worker gets them; None there keeps the worker's
        own default (intra: its cores; inter: one more). Refuses more threads than a worker's cores, naming them."""
        if isinstance(target, InProcess):
            return InProcess(target.logical_cpus, self.intra_op_threads, self.inter_op_threads)
        if not isinstance(target, LocalTestbed):
            raise DeviceSpecError(f"placer sets the thread pools of inprocess:N and local:... targets, not of {target}")
        from placer.testbed import default_inter_op_threads

        workers = target.layout()
        intra = tuple(self.intra_op_threads or len(w.cores) for w in workers)
        inter = tuple(self.inter_op_threads or default_inter_op_threads(i) for i in intra)
        return dataclasses.replace(target, worker_cores=tuple(w.cores for w in workers), intra_op_threads=intra,
                                   inter_op_threads=inter)

    def explicit(self, cores: int) -> ThreadSetting:
        """These pools with TensorFlow's defaults filled in for a device of `cores` cores: one thread per core
        in each pool (what the simulator prices for a pool left to TensorFlow)."""
        return ThreadSetting(self.intra_op_threads or cores, self.inter_op_threads or cores)

    def __str__(self) -> str:
        if self.intra_op_threads is None and self.inter_op_threads is None:
            return "TensorFlow's default"
        return f"intra {_threads(self.intra_op_threads)} / inter {_threads(self.inter_op_threads)}"


def _threads(count: int | None) -> str:
    return "default" if count is None else str(count)


def recommended_setting() -> ThreadSetting:
    """TensorFlow's performance guide: intra-op threads = physical cores, inter-op threads = sockets. The
    cores are those this process may use (a container's or `taskset`'s share, not the host's)."""
    return ThreadSetting(usable_cores(), sockets())


def global_settings(cores: int | None = None) -> list[ThreadSetting]:
    """Every (intra, inter) pair from 1 to `cores` threads: the exhaustive sweep a user would try by hand."""
    cores = cores or usable_cores()
    return [ThreadSetting(intra, inter) for intra in range(1, cores + 1) for inter in range(1, cores + 1)]


def tuning_candidates(cores: int | None = None, *, on: TunableTarget | None = None) -> dict[str, ThreadSetting]:
    """TensorFlow's default, the recommended setting and the sweep, named; a setting that is two of these is
    timed once, under a name that says both.

    on: a testbed (`LocalTestbed`) to tune instead of the in-process session. Its default is the testbed's
    (each worker: its cores, and one inter-op thread more); the recommended setting gives each worker its own
    cores and one inter-op thread per socket; the sweep goes up to the narrowest worker's cores (inter-op: one
    more, as the testbed allows for transfers)."""
    if isinstance(on, LocalTestbed):
        narrowest = min(len(worker.cores) for worker in on.layout())
        sweep = [ThreadSetting(intra, inter) for intra in range(1, narrowest + 1) for inter in range(1, narrowest + 2)]
        recommended = ThreadSetting(None, sockets())
    else:
        sweep, recommended = global_settings(cores), recommended_setting()
    named: dict[object, tuple[ThreadSetting, list[str]]] = {}

    def add(setting: ThreadSetting, name: str) -> None:
        # Two settings are one candidate when they start the same target (e.g. the testbed's default and its twin).
        key = str(setting.on(on)) if on is not None else setting
        named.setdefault(key, (setting, []))[1].append(name)

    add(ThreadSetting(), "default")
    add(recommended, "recommended")
    for setting in sweep:
        add(setting, f"intra {setting.intra_op_threads} / inter {setting.inter_op_threads}")
    return {" = ".join(names): setting for setting, names in named.values()}


@dataclass(frozen=True)
class TuneResult:
    """Step times of one graph under several thread settings, timed side by side."""

    graph: str
    settings: Mapping[str, ThreadSetting]
    medians: Mapping[str, float]
    """Median step time in seconds per setting (inf where it failed)."""
    rounds: Mapping[str, tuple[float | None, ...]]
    step_times: Mapping[str, StepTime]
    """Per setting, the `StepTime` of its median round, or of the round that failed."""
    seconds: float
    """Wall time of the whole choice: starting a measurement process per setting, and the timings."""
    targets: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """The target spec each setting ran on, e.g. "local:widths=1+1,intra=1+1,inter=2+2"."""
    predicted: bool = False
    """True where the step times were simulated (`placer.concurrency.choose.price_settings`), not timed."""

    @property
    def failures(self) -> dict[str, StepTime]:
        """The settings that failed, with their failed `StepTime`."""
        return {name: step_time for name, step_time in self.step_times.items() if not step_time.ok}

    @property
    def best(self) -> str:
        return min(self.medians, key=self.medians.get)

    def against(self, name: str) -> float:
        """How much shorter the best setting's step is than `name`'s, as a fraction of `name`'s."""
        return 1.0 - self.medians[self.best] / self.medians[name]

    def describe(self) -> str:
        width = max(map(len, self.medians))
        reference = next((name for name in self.medians if "recommended" in name.split(" = ")), None)
        how = ("simulated from op costs profiled at each width" if self.predicted
               else "median of interleaved rounds")
        lines = [f"{self.graph}: {'predicted ' * self.predicted}step time per thread setting ({how})"]
        for name, seconds in sorted(self.medians.items(), key=lambda item: item[1]):
            mark = "  best" if name == self.best else ""
            if name in self.failures:
                failure = self.failures[name]
                lines.append(f"  {name:<{width}}  failed ({failure.failure}): {failure.message}")
                continue
            versus = ""
            if reference and name != reference:
                versus = f"  {100 * (seconds / self.medians[reference] - 1):+.1f}% step time vs recommended"
            where = f"  ({self.targets[name]})" if name in self.targets else ""
            lines.append(f"  {name:<{width}}  {seconds * 1e3:9.2f} ms{versus}{mark}{where}")
        lines.append(f"  {'predicted' if self.predicted else 'chosen'} in {self.seconds:.0f} s")
        return "\n".join(lines)


def tune(graph: OpGraph, settings: Mapping[str, ThreadSetting] | None = None, *, rounds: int = 3,
         measure_config: MeasureConfig | None = None, on: TunableTarget | None = None,
         place: Callable[[OpGraph, DeviceSet], Placement] | None = None,
         progress: Callable[[Iterable[int]], Iterable[int]] | None = None) -> TuneResult:
    """Time `graph` under each thread setting, side by side in interleaved rounds.

    on: where (default: one in-process CPU device; a `LocalTestbed` gives each setting a testbed of its
    own, every worker with the setting's pools). place: the placement on each setting's devices (default:
    all on the first device). Every setting gets its own measurement process (started before any timing, so
    a setting that cannot start fails first)."""
    on = on or InProcess(1)
    settings = dict(settings or tuning_candidates(on=on))
    targets = {name: setting.on(on) for name, setting in settings.items()}  # refuses impossible settings now
    place = place or (lambda graph, devices: Placement.on_device(graph, devices, 0))
    started = time.perf_counter()
    opened = {}
    try:
        for name, target in targets.items():
            opened[name] = open_target(graph, target, measure_config=measure_config)
        placements = {name: place(graph, cost.devices) for name, cost in opened.items()}
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
        step_times={name: c.failure or c.median_timing for name, c in compared.items()},
        seconds=time.perf_counter() - started,
        targets={name: str(target) for name, target in targets.items()},
    )
