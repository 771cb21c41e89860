"""A thread setting chosen from the performance model instead of timed: each setting's step simulated on one
CPU device whose ops take their predicted time at the intra-op width, `inter` of them at once, slowed down
when the threads of ops running together outnumber the cores."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Mapping

from placer.concurrency.performance_model import PerformanceModel
from placer.concurrency.settings import ThreadSetting, global_settings
from placer.devices import machine_from_dict
from placer.graph.opgraph import OpGraph
from placer.simulate import Simulator


@dataclass(frozen=True)
class ModelChoice:
    """The setting the performance model predicts fastest, every setting's prediction, and how long it took."""

    setting: ThreadSetting
    predicted: Mapping[ThreadSetting, float]
    seconds: float


def predicted_step_time(graph: OpGraph, model: PerformanceModel, setting: ThreadSetting, cores: int) -> float:
    """Seconds of one step of `graph` on one CPU device of `cores` cores under `setting` (both pools given),
    as simulated with the model at the setting's width."""
    intra, inter = setting.intra_op_threads, setting.inter_op_threads
    if intra is None or inter is None:
        raise ValueError("the model predicts explicit settings: give both intra- and inter-op threads")
    machine = machine_from_dict({"devices": [{"name": "CPU:0", "cores": cores, "intra_op_threads": intra,
                                              "inter_op_threads": inter}]})
    return Simulator(graph, machine, model).simulate([0] * len(graph.groups)).step_time


def choose_setting(graph: OpGraph, model: PerformanceModel, cores: int | None = None) -> ModelChoice:
    """Predict every (intra, inter) pair up to `cores` and keep the fastest (ties: fewer threads)."""
    cores = cores or len(os.sched_getaffinity(0))
    started = time.perf_counter()
    predicted = {s: predicted_step_time(graph, model, s, cores) for s in global_settings(cores)}
    best = min(predicted, key=lambda s: (predicted[s], s.intra_op_threads * s.inter_op_threads))
    return ModelChoice(best, predicted, time.perf_counter() - started)
