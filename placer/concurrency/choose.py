"""Thread settings priced by the event simulator instead of timed, and the one predicted fastest.

A setting (intra, inter) on a machine of N cores is one simulated CPU device of N cores with those pools: up to
`inter` ops run at once and share its intra-op pool and cores (`placer.simulate.thread_pools`), each taking its
time at its share of the threads from an `OpTimeModel` (op costs profiled at each width, `WidthCosts`, or the
performance model). The simulator's own path, nothing beside it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable, Mapping

from placer.concurrency.settings import ThreadSetting, TuneResult, global_settings
from placer.concurrency.width_costs import WidthCosts, profile_widths
from placer.devices import DeviceSet, machine_from_dict
from placer.errors import DeviceSpecError, ProfileError
from placer.graph.opgraph import OpGraph
from placer.host import usable_cores
from placer.simulate import Simulator, SimulatorConfig
from placer.simulate.simulator import OpTimeModel


@dataclass(frozen=True)
class ModelChoice:
    """The setting the simulator predicts fastest, every setting's prediction, and how long it took."""

    setting: ThreadSetting
    predicted: Mapping[ThreadSetting, float]
    seconds: float


def thread_setting_device(setting: ThreadSetting, cores: int) -> DeviceSet:
    """The simulated CPU device of `cores` cores running `setting` (a pool left to TensorFlow: one thread per
    core). An op runs on at most the cores' threads, so a wider intra-op pool is refused; more inter-op threads
    than cores are allowed, the ops running at once sharing the cores."""
    explicit = setting.explicit(cores)
    if explicit.intra_op_threads > cores:
        raise DeviceSpecError(
            f"{setting} asks for {explicit.intra_op_threads} threads per op on a device of {cores} cores: price "
            f"settings of up to {cores} intra-op threads, or price it for a machine with the cores for it "
            f"(cores={explicit.intra_op_threads})")
    return machine_from_dict({"name": f"{cores} cores, {setting}", "devices": [
        {"name": "CPU:0", "cores": cores, "intra_op_threads": explicit.intra_op_threads,
         "inter_op_threads": explicit.inter_op_threads}]})


def predicted_step_time(graph: OpGraph, op_times: OpTimeModel, setting: ThreadSetting, cores: int, *,
                        co_running_slowdown: float = 1.0) -> float:
    """Seconds of one step of `graph`, all on one CPU device of `cores` cores under `setting`, as the simulator
    predicts it with `op_times` at the threads each op gets, its ops `co_running_slowdown` times slower while
    others run beside them (`SimulatorConfig.co_running_slowdown`). A width `op_times` was not profiled or
    fitted at is refused, naming the setting and what to profile."""
    devices = thread_setting_device(setting, cores)
    if isinstance(op_times, WidthCosts):
        op_times.check_graph(graph)
    try:
        simulator = Simulator(graph, devices, op_times, SimulatorConfig(co_running_slowdown=co_running_slowdown))
    except ProfileError as error:
        raise ProfileError(f"cannot price {setting} on {cores} cores: {error}") from None
    return simulator.simulate([0] * len(graph.groups)).step_time


def choose_setting(graph: OpGraph, op_times: OpTimeModel, cores: int | None = None,
                   settings: Iterable[ThreadSetting] | None = None, *, co_running_slowdown: float = 1.0) -> ModelChoice:
    """Price every setting (default: each (intra, inter) pair up to `cores`, this process's cores by default;
    `predicted_step_time`) and keep the fastest (ties: fewer threads in all)."""
    cores = cores or usable_cores()
    started = time.perf_counter()
    settings = list(settings) if settings is not None else global_settings(cores)
    predicted = {s: predicted_step_time(graph, op_times, s, cores, co_running_slowdown=co_running_slowdown)
                 for s in settings}

    def threads(setting: ThreadSetting) -> int:
        explicit = setting.explicit(cores)
        return explicit.intra_op_threads * explicit.inter_op_threads

    best = min(predicted, key=lambda s: (predicted[s], threads(s)))
    return ModelChoice(best, predicted, time.perf_counter() - started)


def price_settings(graph: OpGraph, settings: Mapping[str, ThreadSetting], op_times: OpTimeModel | None = None, *,
                   cores: int | None = None, measure_config=None, co_running_slowdown: float = 1.0) -> TuneResult:
    """`placer.concurrency.tune`'s answer priced instead of timed: each named setting of one in-process CPU device
    simulated from `op_times` (default: `graph`'s op costs profiled now at each width up to the cores, with
    `measure_config`; `predicted_step_time`)."""
    from placer.cost import StepTime

    here = usable_cores()
    cores = cores or here
    started = time.perf_counter()
    op_times = op_times or profile_widths(graph, range(1, cores + 1), measure_config=measure_config)
    predicted = {name: predicted_step_time(graph, op_times, setting, cores, co_running_slowdown=co_running_slowdown)
                 for name, setting in settings.items()}
    # The in-process spec to run a setting with exists only for this machine's cores.
    targets = {name: str(setting.target()) for name, setting in settings.items()} if cores == here else {}
    return TuneResult(
        graph=graph.name, settings=dict(settings), medians=predicted, rounds={name: () for name in settings},
        step_times={name: StepTime(seconds, "simulated", thread_setting_device(settings[name], cores).name,
                                   samples=(seconds,)) for name, seconds in predicted.items()},
        seconds=time.perf_counter() - started, targets=targets, predicted=True)
