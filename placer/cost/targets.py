"""The two kinds of target behind `open_target`: real execution (`MeasuredCost`) and the simulator
(`SimulatedCost`). Both answer `evaluate(placement)` with a `StepTime` and never raise for a bad placement."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from placer.cost.record import StepTime
from placer.cost.spec import TargetSpec
from placer.devices import DeviceSet
from placer.errors import DeviceSpecError, PlacementError, PlacerError
from placer.graph.opgraph import OpGraph
from placer.placement import Placement

PlacementLike = Placement | Sequence[int] | np.ndarray
"""A `Placement`, or one device index per colocation group (what agents emit)."""


class CostTarget:
    """What every target shares: the graph, the devices, placement validation, and closing."""

    backend: str = ""
    simulator = None
    """The `placer.simulate.Simulator` behind a simulated target (heuristics such as METIS read its op
    costs); None on real execution."""

    def __init__(self, graph: OpGraph, spec: TargetSpec, devices: DeviceSet):
        self.graph = graph
        self.spec = spec
        self.devices = devices

    @property
    def op_cost(self) -> np.ndarray | None:
        """Predicted seconds of every step op on every device ([ops, devices]); None on real execution."""
        return None

    def placement(self, placement: PlacementLike) -> Placement:
        """`placement` as a validated Placement on these devices; raises PlacementError."""
        if isinstance(placement, Placement):
            if placement.graph_fingerprint != self.graph.fingerprint:
                raise PlacementError(f"the placement was made for graph fingerprint {placement.graph_fingerprint[:12]}, "
                                     f"not for {self.graph.name!r} ({self.graph.fingerprint[:12]})")
            if tuple(placement.devices) != self.devices.names:
                return Placement.from_op_devices(self.graph, self.devices, placement.op_devices(self.graph),
                                                 placement.metadata)
            return placement
        return Placement.from_assignment(self.graph, self.devices, placement)

    def evaluate(self, placement: PlacementLike) -> StepTime:
        """The step time of one placement; a placement that cannot run comes back as a failed StepTime."""
        try:
            checked = self.placement(placement)
        except PlacementError as error:
            return StepTime.failed("invalid", str(error), self.backend, str(self.spec))
        return self._evaluate(checked)

    def trace(self, placement: PlacementLike) -> str:
        """One step of the placement as a Chrome trace (JSON for chrome://tracing or Perfetto)."""
        raise NotImplementedError

    def _evaluate(self, placement: Placement) -> StepTime:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.graph.name!r} on {self.spec}>"


class SimulatedCost(CostTarget):
    """Predicted step times from `placer.simulate.Simulator`, in milliseconds per placement."""

    backend = "simulated"

    def __init__(self, graph: OpGraph, spec: TargetSpec, costs: Any = "roofline", config=None):
        from placer.simulate import Simulator

        super().__init__(graph, spec, spec.devices)
        if spec.calibration is not None:  # the simulator of a real target: its links and overheads
            from placer.cost.calibrated import learned_sent_constants
            from placer.simulate import SimulatorConfig

            _, config = spec.calibration.apply(spec.devices, config or SimulatorConfig(cpu_slots=1))
            if config.sent_constants is None:  # not given: what TensorFlow does for this graph
                config = dataclasses.replace(config, sent_constants=learned_sent_constants(graph, spec.calibration_path))
        tables = target_cost_tables(graph, spec, costs)
        self.simulator = Simulator(graph, spec.devices, tables, config)
        self.op_cost_sources = _op_cost_sources(tables)
        """Where each kind of device's op costs come from (measured kernels, a roofline, a profile), to say
        beside every prediction."""

    @property
    def op_cost(self) -> np.ndarray:
        return self.simulator.op_cost

    def _evaluate(self, placement: Placement) -> StepTime:
        result = self.simulator.simulate(placement.group_device_array)
        # The peaks as the simulator gives them: deferred (computed if read) where no device can run out.
        details = {"samples": (result.step_time,), "peak_memory": result.peak_memory, "busy": result.device_busy}
        if not result.ok:
            return StepTime.failed("oom", f"out of memory on {', '.join(result.out_of_memory)}", self.backend,
                                   str(self.spec), **details)
        return StepTime(result.step_time, self.backend, str(self.spec), **details)

    def trace(self, placement: PlacementLike) -> str:
        result = self.simulator.simulate(self.placement(placement).group_devices, timeline=True)
        return json.dumps(result.chrome_trace())


class MeasuredCost(CostTarget):
    """Real step times from `placer.measure.Measurer` (a worker process: crashes and hangs are failures)."""

    backend = "measured"

    def __init__(self, graph: OpGraph, spec: TargetSpec, config=None):
        from placer.measure import Measurer

        self.measurer = Measurer(spec.measured, config)
        self.measurer.start()
        super().__init__(graph, spec, self.measurer.devices)

    def _evaluate(self, placement: Placement, config=None) -> StepTime:
        try:
            result = self.measurer.measure(self.graph, placement, config)
        except PlacerError as error:
            return StepTime.failed("runtime", str(error), self.backend, str(self.spec))
        return StepTime.from_measurement(result, str(self.spec))

    def trace(self, placement: PlacementLike) -> str:
        config = dataclasses.replace(self.measurer.config, timed_steps=1, profile_steps=1)
        result = self.measurer.measure(self.graph, self.placement(placement), config)
        if not result.ok:
            raise PlacerError(f"tracing a step failed ({result.failure.kind}): {result.failure.message}")
        if not result.chrome_trace:
            raise PlacerError("TensorFlow returned an empty trace for the step")
        return result.chrome_trace

    def close(self) -> None:
        self.measurer.close()


def close_together(targets: Iterable[CostTarget]) -> None:
    """Close `targets` at once. A measured target waits for its worker process to shut down, a second or more with a
    big graph's sessions: one after another, seven machine uses of a 10,063-op Keras MobileNetV3 kept `placer
    optimize` 9 s past its budget (2026-11-29)."""
    from concurrent.futures import ThreadPoolExecutor

    targets = list(targets)
    if len(targets) < 2:
        for target in targets:
            target.close()
        return
    with ThreadPoolExecutor(len(targets)) as pool:
        closing = [pool.submit(target.close) for target in targets]
    for done in closing:  # every one was closed; a failure to close is still said
        done.result()


def _op_cost_sources(tables: Any) -> dict[str, str]:
    tables = tables if isinstance(tables, Mapping) else {tables.device_kind: tables}
    sources = {}
    for key, table in tables.items():
        kernels = table.metadata.get("kernels")
        if table.source == "roofline" and kernels:
            sources[key] = kernels["source"] + ("; TF32 on" if kernels.get("tensor_float_32") else "")
        else:
            sources[key] = table.source
    return sources


def target_cost_tables(graph: OpGraph, spec: TargetSpec, costs: Any = "roofline") -> Any:
    """The op costs a simulated target's simulator uses for `graph`: `costs` when given (a CostTable or a
    mapping of device model/kind to one); for "roofline", the costs profiled on the real target of a
    "calibrated:FILE" spec (cached beside FILE), else roofline estimates of the modeled devices."""
    if not (isinstance(costs, str) and costs == "roofline"):
        if not isinstance(costs, Mapping) and not hasattr(costs, "op_seconds"):
            raise PlacerError("costs must be 'roofline', a CostTable, or a mapping of device model/kind to CostTable")
        return costs
    if spec.calibration is not None:
        from placer.cost.calibrated import profiled_costs

        return {"CPU": profiled_costs(graph, spec.calibration, spec.calibration_path)}
    return roofline_tables(graph, spec.devices)


def roofline_tables(graph: OpGraph, devices: DeviceSet) -> dict[str, Any]:
    """A roofline cost table per kind of device in `devices`, from `placer.hardware` or the devices' own peaks."""
    from placer.hardware import GPUS, HOST_CPU, DeviceModel
    from placer.kernel_model import KernelModel
    from placer.profile import roofline_costs

    tables = {}
    for device in devices:
        key = device.model or device.kind
        if key in tables:
            continue
        known = GPUS.get(device.model) or (HOST_CPU if device.model == HOST_CPU.name else None)
        if device.peak_flops and device.memory_bandwidth:
            kernels = device.kernels or (known.kernels if known else KernelModel(launch_overhead=5e-6))
            model = DeviceModel(key, device.kind, device.memory_bytes or 0, device.peak_flops, device.memory_bandwidth,
                                kernels)
        elif known:
            model = dataclasses.replace(known, kernels=device.kernels or known.kernels)
        else:
            raise DeviceSpecError(
                f"{device.short_name} has no known model and no peak_flops/memory_bandwidth: give the simulated "
                "target cost tables (costs=...) or describe the device")
        tables[key] = roofline_costs(graph, model)
    return tables
