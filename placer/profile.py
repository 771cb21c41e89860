"""Per-op compute costs for the simulator: profiled on real devices, or estimated by a roofline model.

A `CostTable` maps the ops of one graph (by fingerprint) to seconds on one kind of device. Profiled
tables come from traced steps (median over steps); for device kinds this machine lacks (GPUs), a
roofline estimate uses each op's FLOPs and bytes and the device's peaks (`placer.hardware`).
"""

from __future__ import annotations

import json
import statistics
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from placer.errors import ProfileError
from placer.graph.control_flow import CALL_OPS, CONTROL_FLOW_OPS
from placer.graph.opgraph import OpGraph
from placer.hardware import DeviceModel
from placer.measure.config import ENOUGH_TIMED_SECONDS

FILE_FORMAT = "placer.costs"
FILE_FORMAT_VERSION = 1

# Ops that move no data and compute nothing: metadata, aliasing and bookkeeping. A roofline estimate
# would otherwise charge each a kernel launch it never makes.
FREE_OP_TYPES = frozenset({
    "Const", "NoOp", "Identity", "IdentityN", "VarHandleOp", "ReadVariableOp", "Shape", "ShapeN", "Size",
    "Rank", "Reshape", "Squeeze", "ExpandDims", "StopGradient", "PreventGradient", "Placeholder",
    "BroadcastGradientArgs", "VariableShape", "ZerosLike", "OnesLike",
})


@dataclass(frozen=True)
class CostTable:
    """Compute seconds per op of one graph on one kind of device."""

    graph_fingerprint: str
    device_kind: str
    """What the costs are for: "CPU", a device model ("V100"), or a label such as "testbed-core"."""
    op_seconds: Mapping[str, float]
    source: str
    """"profiled" or "roofline"."""
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def seconds(self, op_name: str) -> float:
        return self.op_seconds.get(op_name, 0.0)

    @property
    def total_seconds(self) -> float:
        return sum(self.op_seconds.values())

    def check_graph(self, graph: OpGraph) -> None:
        if self.graph_fingerprint != graph.fingerprint:
            raise ProfileError(
                f"the {self.device_kind} cost table was made for graph {self.graph_fingerprint[:12]}, not for "
                f"{graph.name!r} ({graph.fingerprint[:12]}): profile this graph"
            )

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({
            "format": FILE_FORMAT, "format_version": FILE_FORMAT_VERSION, "graph_fingerprint": self.graph_fingerprint,
            "device_kind": self.device_kind, "source": self.source, "metadata": dict(self.metadata),
            "op_seconds": dict(self.op_seconds),
        }, indent=1))
        return path


def load_cost_table(path: str | Path, graph: OpGraph | None = None) -> CostTable:
    """Read a saved table; with `graph`, refuse a table made for another graph."""
    from placer.files import read_json_file

    data = read_json_file(path, "cost table", "profile the graph again", ProfileError)
    if not isinstance(data, dict) or data.get("format") != FILE_FORMAT:
        raise ProfileError(f"{path} is not a placer cost table (format {FILE_FORMAT!r})")
    if data.get("format_version") != FILE_FORMAT_VERSION:
        raise ProfileError(f"{path} has cost-table format version {data.get('format_version')}; this placer reads {FILE_FORMAT_VERSION}")
    table = CostTable(data["graph_fingerprint"], data["device_kind"], {k: float(v) for k, v in data["op_seconds"].items()},
                      data["source"], data.get("metadata") or {})
    if graph is not None:
        table.check_graph(graph)
    return table


PROFILE_ROUNDS = 3
"""Separate measurements a profile takes its medians over."""
PROFILE_SPREAD_WARNING = 0.25
"""Rounds whose untraced step times differ by more than this share of their median are warned about."""
PROFILE_WARMUP_ROUNDS = 1
"""Untraced measurements made and discarded before the rounds. A graph's first measurement on a testbed is
slower than its later ones, warm-up steps and all: on `local:2` on 2026-11-25, two-tower 22.2 ms and
Inception-V3 166.6 ms against 18.8-19.8 and 139-160 ms in the seven rounds after (the Transformer +5 %)."""


def profile_costs(
    graph: OpGraph, measurer, *, device: str | int = 0, steps: int = 5, rounds: int = PROFILE_ROUNDS, cores: int = 1,
    step_overhead: float = 0.0, label: str | None = None, warmup_rounds: int = PROFILE_WARMUP_ROUNDS,
) -> CostTable:
    """Profile every op of `graph` with the whole graph on one device of `measurer`.

    `cores`: how many cores that device computes on; of more ops in progress at once, the ones that started
    last hold them, and each op is charged the time it held one (see `placer.measure.runner.op_times_from_traces`).

    Traced op spans leave out the executor's own work between ops (scheduling, allocation), which on a
    graph of thousands of small ops is a large part of the step. What the untraced step time has beyond
    `step_overhead` (the fixed cost of a step, see `placer.calibrate`) and the ops' compute is spread
    evenly over the traced nodes that ran, as `dispatch_seconds` per node.

    A loop or conditional (`While`, `If`, `Case`) is one op of the graph, but TensorFlow runs it as its lowered
    body, once per iteration: it is charged every node it ran (its body's compute and each node's dispatch), and
    the table's metadata names it under `control_flow` with its iterations per step and its seconds.

    The graph is measured in `rounds` separate measurements of `steps` traced steps each; each op keeps the
    median of its per-round medians, and the step time the median of the rounds'. One disturbed round
    therefore moves nothing; rounds further apart than `PROFILE_SPREAD_WARNING` are warned about. The rounds
    follow each other within seconds, so a slow minute still shows: in a fidelity run on 2026-11-25 all three
    rounds of a 2 ms held-out graph were 2.6-3.8x the step measured later (RESULTS.md), and every prediction of
    a model carries its profile's level. Before the rounds, `warmup_rounds` untraced measurements are thrown
    away (see `PROFILE_WARMUP_ROUNDS`). Each round times at least `ENOUGH_TIMED_SECONDS` of untraced steps (at
    least the measurer's `timed_steps`): the rounds' steps set every prediction's level, and a short step's
    median of 10 is noisy. Ops grappler fused into another node
    cost 0 and the fused node carries their time; time of nodes grappler created (with names the graph
    lacks) is reported in the table's metadata as `unattributed_seconds`.
    """
    from placer.placement import Placement

    if rounds < 1 or steps < 1 or warmup_rounds < 0:
        raise ProfileError(f"profiling needs at least one round of one step and no negative warm-up, not {rounds} "
                           f"rounds of {steps} after {warmup_rounds}")
    devices = measurer.devices
    placement = Placement.on_device(graph, devices, device)
    # One session for every round: the rounds time the same placement, and a big graph's session set-up costs
    # many times its steps (`MeasureConfig.kept_sessions`).
    kept = replace(measurer.config, kept_sessions=max(measurer.config.kept_sessions, 1))
    config = replace(kept, profile_steps=steps, profile_cores=cores,
                     timed_seconds=max(measurer.config.timed_seconds, ENOUGH_TIMED_SECONDS))
    for _ in range(warmup_rounds):
        result = measurer.measure(graph, placement, replace(kept, profile_steps=0))
        if not result.ok:
            raise ProfileError(f"profiling {graph.name!r} failed ({result.failure.kind}): {result.failure.message}")
    step_medians: list[float] = []
    per_op: dict[str, list[float]] = {}
    per_op_runs: dict[str, list[float]] = {}
    per_loop_iterations: dict[str, list[int]] = {}
    for _ in range(rounds):
        result = measurer.measure(graph, placement, config)
        if not result.ok:
            raise ProfileError(f"profiling {graph.name!r} failed ({result.failure.kind}): {result.failure.message}")
        step_medians.append(result.median)
        for name, op_time in result.op_times.items():
            per_op.setdefault(name, []).append(op_time.seconds)
            per_op_runs.setdefault(name, []).append(op_time.runs)
            if op_time.iterations is not None:
                per_loop_iterations.setdefault(name, []).append(op_time.iterations)
    traced = {name: statistics.median(values) for name, values in per_op.items()}
    runs = {name: statistics.median(values) for name, values in per_op_runs.items()}
    step_median = statistics.median(step_medians)
    spread = (max(step_medians) - min(step_medians)) / step_median if step_median > 0 else 0.0
    target_device = devices[placement.group_devices[0]]
    if spread > PROFILE_SPREAD_WARNING:
        warnings.warn(
            f"profiling {graph.name!r} on {target_device.name}: its step took "
            f"{', '.join(f'{t * 1e3:.3g}' for t in step_medians)} ms in {rounds} rounds ({spread:.0%} apart); the "
            "machine was busy or drifting, so its op costs may be off: profile it again on a quiet machine",
            stacklevel=2)
    step_names = {op.name for op in graph.step_ops}
    op_seconds = {name: seconds for name, seconds in traced.items() if name in step_names}
    unattributed = sum(seconds for name, seconds in traced.items() if name not in step_names and name not in graph)
    ran = sum(runs.values())
    compute = sum(traced.values())
    dispatch = max(step_median - step_overhead - compute * (1 if cores == 1 else 1 / cores), 0.0) / max(ran, 1)
    op_seconds = {name: seconds + dispatch * runs[name] for name, seconds in op_seconds.items()}
    control_flow = {
        op.name: {"type": op.type, "seconds": op_seconds.get(op.name, 0.0), "nodes_per_step": runs.get(op.name, 0),
                  "iterations": (round(statistics.median(per_loop_iterations[op.name]))
                                 if op.name in per_loop_iterations else None)}
        for op in graph.step_ops if op.type in CONTROL_FLOW_OPS}
    return CostTable(
        graph.fingerprint, label or target_device.kind, op_seconds, "profiled",
        {"graph": graph.name, "device": target_device.name, "steps": steps, "rounds": rounds,
         "warmup_rounds": warmup_rounds, "cores": cores,
         "step_time_median": step_median, "round_step_medians": step_medians, "round_spread": spread,
         "unattributed_seconds": unattributed, "ops_traced": len(op_seconds), "step_ops": len(step_names),
         "dispatch_seconds": dispatch, "control_flow": control_flow},
    )


def roofline_costs(graph: OpGraph, model: DeviceModel) -> CostTable:
    """Estimated seconds per step op on `model`: its FLOPs and bytes against the peaks, as the model's
    `KernelModel` has it (per-op-type efficiencies, a floor, TF32); bookkeeping ops (`FREE_OP_TYPES`) cost
    nothing."""
    output_bytes = {op.name: sum(op.output_bytes) for op in graph.ops}
    bodies = [op.name for op in graph.step_ops if op.type in CONTROL_FLOW_OPS or op.type in CALL_OPS]
    if bodies:
        warnings.warn(
            f"{model.name} prices each op from its FLOPs and bytes, but {len(bodies)} loops, conditionals or calls "
            f"compiled with XLA of {graph.name!r} ({', '.join(bodies[:3])}{', ...' if len(bodies) > 3 else ''}) "
            "run bodies whose ops it does not see: they are priced as one cheap op "
            "each, so simulated step times of this graph are too short; profile it on a real target "
            "(`calibrated:FILE`) for their cost", stacklevel=2)
    kernels = model.kernels
    op_seconds = {}
    for op in graph.step_ops:
        if op.type in FREE_OP_TYPES:
            continue
        moved = output_bytes[op.name] + sum(output_bytes.get(src, 0) for src in op.producers)
        op_seconds[op.name] = kernels.op_seconds(op.type, op.flops, moved, model.peak_flops, model.memory_bandwidth)
    return CostTable(graph.fingerprint, model.name, op_seconds, "roofline",
                     {"graph": graph.name, "peak_flops": model.peak_flops, "memory_bandwidth": model.memory_bandwidth,
                      "kernels": kernels.to_json_dict(), "control_flow_not_priced": bodies})
