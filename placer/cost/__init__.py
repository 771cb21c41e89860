"""What a placement costs: one way to open a target from its spec, one record, one side-by-side comparison.

    from placer.cost import open_target
    with open_target(graph, "local:2") as target:            # or "modeled:2xV100", "inprocess:2", a cluster spec
        result = target.evaluate(placement)                  # a StepTime, measured or simulated
        print(result.describe())

Everything above `placer/` (environments, agents, experiments) costs placements through this package.
"""

from __future__ import annotations

from typing import Any

from placer.cost.compare import Compared, compare, compare_and_retime_leaders
from placer.cost.record import BACKENDS, StepTime
from placer.cost.spec import DEFAULT_TARGETS, TargetSpec, parse_target_spec
from placer.cost.targets import CostTarget, MeasuredCost, SimulatedCost, roofline_tables, target_cost_tables
from placer.graph.opgraph import OpGraph

__all__ = [
    "BACKENDS", "DEFAULT_TARGETS", "Compared", "CostTarget", "MeasuredCost", "SimulatedCost", "StepTime",
    "TargetSpec", "compare", "compare_and_retime_leaders", "open_target", "parse_target_spec", "roofline_tables",
    "target_cost_tables",
]


def open_target(graph: OpGraph, spec: Any = None, *, backend: str | None = None, costs: Any = "roofline",
                measure_config: Any = None, simulator_config: Any = None,
                allow_exposed_ports: bool = False) -> CostTarget:
    """The target `spec` ready to cost placements of `graph`. Close it (or use `with`) when done.

    spec: "modeled:2xV100", a machine file or a DeviceSet (simulated); "calibrated:FILE", the simulator of the
    real target `placer calibrate` made FILE on (op costs profiled there, and the small constants TensorFlow
    sends learned from one in-process step, once per graph, cached next to FILE);
    "inprocess:N", "local:N", "env" or a cluster spec (measured); None: the default target of `backend`
    (simulated when that is None too).
    backend: "simulated" or "measured" to insist on one (a spec of the other kind is refused).
    costs: the simulator's per-op costs: "roofline", a CostTable, or a mapping of device model/kind to one.
    measure_config, simulator_config: `placer.measure.MeasureConfig`, `placer.simulate.SimulatorConfig`."""
    parsed = parse_target_spec(spec, backend, allow_exposed_ports=allow_exposed_ports)
    if parsed.backend == "simulated":
        return SimulatedCost(graph, parsed, costs, simulator_config)
    return MeasuredCost(graph, parsed, measure_config)
