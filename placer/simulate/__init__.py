"""Simulated step time: predict what a placement costs from per-op costs, in milliseconds, not seconds.

`Simulator(graph, devices, costs).simulate(placement)` returns a `SimResult` (step time, per-device busy
time and peak memory, bytes per link, out-of-memory devices, and optionally a Chrome-trace timeline).
`step_time_bound(simulator)` is the step time no placement can beat there (`placer.simulate.bound`).
`placer.simulate.fidelity` scores predictions against measured step times (rank correlations, errors).
"""

from placer.simulate.bound import StepTimeBound, gap_closed, step_time_bound, times_bound
from placer.simulate.result import SimResult, SimulatedOp, SimulatedTransfer
from placer.simulate.simulator import Simulator, SimulatorConfig

__all__ = ["SimResult", "SimulatedOp", "SimulatedTransfer", "Simulator", "SimulatorConfig", "StepTimeBound",
           "gap_closed", "step_time_bound", "times_bound"]
