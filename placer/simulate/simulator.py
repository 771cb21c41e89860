"""`Simulator`: compile a graph, its devices and its cost tables into arrays once; simulate placements fast."""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Iterator, Mapping, Protocol, Sequence

import numpy as np

from placer.devices import DeviceSet, Link
from placer.errors import DeviceSpecError, PlacementError, ProfileError
from placer.graph.constants import replicated_tensors
from placer.graph.control import kept_control_inputs
from placer.graph.opgraph import OpGraph, OpNode
from placer.placement import Placement
from placer.profile import CostTable
from placer.simulate.engine import EngineDevices, EngineGraph, Workspace, memory_fits, place_ops, simulate_step
from placer.simulate.result import SimResult, SimulatedOp, SimulatedTransfer
from placer.simulate.thread_pools import shared_pool_costs

# Outputs of these ops alias memory that already exists (a variable, a constant, their input), so
# running them allocates nothing.
ALIAS_OP_TYPES = frozenset({
    "Const", "Identity", "IdentityN", "ReadVariableOp", "VarHandleOp", "Reshape", "Squeeze", "ExpandDims",
    "StopGradient", "PreventGradient", "Snapshot",
})


class OpTimeModel(Protocol):
    """Predicts an op's compute seconds at a number of threads (`placer.concurrency.PerformanceModel`)."""

    def predict(self, graph: OpGraph, op: OpNode, threads: int) -> float: ...


@dataclass(frozen=True)
class SimulatorConfig:
    cpu_slots: int = 1
    """Ops a CPU device runs at once: its inter-op threads that have a core of their own (1 for a testbed
    worker pinned to one core)."""
    gpu_slots: int = 1
    """Ops a GPU runs at once: TensorFlow uses one compute stream."""
    step_overhead: float = 0.0
    """Fixed seconds added to every step (session.run and RPC round trips), from calibration."""
    spanning_overhead: float = 0.0
    """Fixed seconds added per device beyond the first that a step runs ops on (one more worker)."""
    remote_overhead: float = 0.0
    """Fixed seconds added to a step that runs nothing on device 0, the worker whose master the session talks
    to: the master then reaches every worker it runs on by RPC (from calibration; in two fidelity runs on
    2026-11-25 the testbed's small graphs ran 0.5-1.6 ms slower on worker 1 alone than on worker 0 alone)."""
    send_cpu: float = 0.0
    """Seconds of the sending device's compute slot each outgoing transfer takes: on a gRPC worker pinned to
    one core, serializing a tensor competes with the ops (from calibration; 0 on modeled GPUs, whose copy
    engines move bytes without the compute stream)."""
    send_cpu_per_byte: float = 0.0
    """... and per byte sent."""
    recv_cpu: float = 0.0
    """Seconds of the receiving device's compute slot each incoming transfer takes (deserializing it)."""
    recv_cpu_per_byte: float = 0.0
    """... and per byte received."""
    default_link: Link | None = None
    """Link for device pairs the device set has none for; without it such a transfer is an error."""
    bytes_per_parameter: int = 4
    co_running_slowdown: float = 1.0
    """How much slower an op runs while other ops run beside it on the same CPU device's cores, at the same
    threads (shared caches and memory bandwidth; `experiments/probes/co_running.py` measures it). Applies to CPU
    devices timed by an `OpTimeModel` (`placer.simulate.thread_pools`); 1: not slowed."""
    request_delay: float = 0.0
    """Seconds a gRPC worker that keeps computing takes to serve a transfer's bookkeeping: a receiver asks for
    its tensors when it first runs out of ops to run, or this long into the step; once a request is there and
    its tensor made, the sender takes it up when it next runs out of ops, or this long after
    (`experiments/probes/hop_delay.py`: 0.3-8 ms on a one-core worker). A tensor leaves once its request is taken
    up. 0: served at once (links only, or no such delay)."""
    executor_queues: bool = False
    """With a request delay: order sends and receives as TensorFlow's executor queues them on a gRPC worker
    instead of holding every send a computing worker makes. A send runs inline, as its tensor is made, when its
    producer made nothing else ready there (then it leaves at once if its request was taken up before), and is
    queued behind the worker's work otherwise; what a received tensor makes ready waits behind that work too,
    until the worker runs out of it or `request_delay` passes. Off by default: on two decisions runs replayed
    (2026-11-26, `experiments/simulator_fidelity.py --replay ... --executor-queues`) it took two-tower's regret
    from 17.5 and 50.5 % to 2.0 and 0 % (it sees METIS's loss gradient leave at once), but put nmt-2's median
    error at 17.4 and 18.9 % (10.9 and 13.6 % held) and the held-out model's at 9.9 and 10.4 % (7.6 and 9.0 %):
    on nmt-2, sends their producers made alone still wait (`docs/results/simulator-fidelity.md`)."""
    sent_constants: frozenset[str] | None = None
    """Small tensors ("op:port") that the replication rule (`placer.graph.constants.replicated_tensors`) copies
    to every reading CPU, which TensorFlow sends after all: grappler left them one reader. Learned from the
    graphs TensorFlow partitioned for one real step (`placer.measure.partitions.constants_sent_when_cut`).
    None: the calibrated twin learns them once per graph, other simulators send none; a set (empty: the rule
    alone) is used as given."""


RECONFIGURABLE = frozenset({"send_cpu", "send_cpu_per_byte", "recv_cpu", "recv_cpu_per_byte", "request_delay",
                            "step_overhead", "spanning_overhead", "remote_overhead"})
"""`SimulatorConfig` fields read at simulation time, not compiled into the simulator's arrays (`Simulator.reconfigured`)."""


class Simulator:
    """Predicts the step time, memory and timeline of placements of one graph on one device set.

    `costs` are measured or modeled cost tables (one for all devices, or per device model or kind), or an
    `OpTimeModel`: then each CPU device runs its inter-op threads' worth of ops at once
    (`SimulatorConfig.cpu_slots` where the device does not say), and they share its intra-op pool and cores
    (`placer.simulate.thread_pools`): an op alone takes the model's time at the device's width
    (`Device.width`), ops running together each take it at their share of the threads, slowed down by
    `SimulatorConfig.co_running_slowdown`."""

    def __init__(self, graph: OpGraph, devices: DeviceSet, costs: CostTable | Mapping[str, CostTable] | OpTimeModel,
                 config: SimulatorConfig | None = None):
        self.graph = graph
        self.devices = devices
        self.config = config or SimulatorConfig()
        self._compile(costs)

    # -- compilation -------------------------------------------------------------------------------

    def _compile(self, costs) -> None:
        graph, devices, config = self.graph, self.devices, self.config
        step = graph.step_ops
        index = {op.name: i for i, op in enumerate(step)}
        self._names = [op.name for op in step]
        self.op_group = np.array([op.group for op in step], dtype=np.int32)

        if hasattr(costs, "predict"):
            self.op_cost, slots, self.share_cost, shared = self._modeled_costs(costs)
        else:
            tables = [self._table_for(device, costs) for device in devices]
            self.op_cost = np.array([[table.seconds(op.name) for table in tables] for op in step], dtype=np.float64).reshape(len(step), len(devices))
            slots = [config.gpu_slots if d.kind == "GPU" else config.cpu_slots for d in devices]
            # A cost table holds one time per op and device, whatever runs beside it: no device shares.
            self.share_cost, shared = self.op_cost[:, :, None].copy(), [False] * len(devices)
        self.op_alloc = np.array(
            [0 if op.type in ALIAS_OP_TYPES else sum(op.output_bytes) for op in step], dtype=np.float64
        )

        tensor_ids: dict[tuple[str, str], int] = {}
        tensor_bytes: list[float] = []
        edges: list[tuple[int, int, int]] = []  # (src, dst, tensor)
        # Only the control edges grappler keeps order anything at run time (`placer.graph.control`).
        control_inputs = kept_control_inputs(graph)
        # Small constants are copied to every CPU that reads them (`placer.graph.constants`): their readers
        # need not wait for them, and nothing is sent. Between GPUs, or a CPU and a GPU, they still move.
        all_cpus = all(device.kind == "CPU" for device in devices)
        sent_anyway = config.sent_constants or frozenset()
        replicated = replicated_tensors(graph, control_inputs) - sent_anyway if all_cpus else frozenset()
        for j, op in enumerate(step):
            sources = [(t.rsplit(":", 1)[0], t.rsplit(":", 1)[1]) for t in op.data_inputs if t not in replicated]
            sources += [(c, "control") for c in control_inputs.get(op.name, ())]
            for src, port in sources:
                i = index[src]
                key = (src, port)
                if key not in tensor_ids:
                    tensor_ids[key] = len(tensor_bytes)
                    size = 0 if port == "control" else step[i].output_bytes[int(port)]
                    tensor_bytes.append(float(size))
                edges.append((i, j, tensor_ids[key]))
        self._tensor_names = [f"{src}:{port}" for src, port in tensor_ids]
        edges.sort()
        n, m = len(step), len(edges)
        src = np.array([e[0] for e in edges], dtype=np.int32).reshape(m)
        dst = np.array([e[1] for e in edges], dtype=np.int32).reshape(m)
        self.edge_src = src
        self.out_dst = dst
        self.out_tensor = np.array([e[2] for e in edges], dtype=np.int32).reshape(m)
        self.out_ptr = np.searchsorted(src, np.arange(n + 1)).astype(np.int32)
        by_dst = np.argsort(dst, kind="stable").astype(np.int32)
        self.in_ptr = np.searchsorted(dst[by_dst], np.arange(n + 1)).astype(np.int32)
        self.in_degree = np.diff(self.in_ptr).astype(np.int32)
        self.tensor_bytes = np.array(tensor_bytes, dtype=np.float64).reshape(len(tensor_bytes))

        self.slots = np.array(slots, dtype=np.int32)
        d = len(devices)
        self.link_bandwidth = np.zeros((d, d))
        self.link_latency = np.zeros((d, d))
        if config.default_link is not None:
            self.link_bandwidth[:] = config.default_link.bandwidth
            self.link_latency[:] = config.default_link.latency
        for link in devices.links:
            a, b = devices.index(link.source), devices.index(link.target)
            self.link_bandwidth[a, b] = link.bandwidth
            self.link_latency[a, b] = link.latency
        # Variables stay resident on their group's device all step; parameters count optimizer slots too.
        self.variable_groups = np.array([op.group for op in graph.ops if op.parameters], dtype=np.int32)
        self.variable_bytes = np.array(
            [op.parameters * config.bytes_per_parameter for op in graph.ops if op.parameters], dtype=np.float64
        )
        self.capacity = np.array([d.memory_bytes or np.inf for d in devices], dtype=np.float64)
        tensor_src = np.empty(len(tensor_bytes), dtype=np.int32)
        tensor_src[self.out_tensor] = src  # a tensor is one op's output: every edge carrying it has that source
        tensor_control = np.array([port == "control" for _, port in tensor_ids], dtype=np.bool_).reshape(len(tensor_ids))
        self._engine_graph = EngineGraph(
            self.op_cost, self.op_alloc, self.out_ptr, self.out_dst, self.out_tensor, self.in_ptr, src[by_dst],
            self.out_tensor[by_dst],
            self.edge_src, self.tensor_bytes, self.in_degree, tensor_src, tensor_control, self.share_cost,
        )
        self._engine_devices = EngineDevices(
            self.slots, np.array(shared, dtype=np.bool_).reshape(d), self.link_bandwidth, self.link_latency,
            float(config.send_cpu), float(config.send_cpu_per_byte), float(config.recv_cpu),
            float(config.recv_cpu_per_byte), any(shared), float(config.request_delay), bool(config.executor_queues),
        )
        self._work = Workspace.allocate(self._engine_graph, self._engine_devices)
        self._op_device = np.empty(len(step), dtype=np.int32)
        self._persistent = np.empty(len(devices), dtype=np.float64)
        self._capacity_list = self.capacity.tolist()
        self._memory_bound = np.empty(len(devices), dtype=np.float64)

    def _modeled_costs(self, model: OpTimeModel) -> tuple[np.ndarray, list[int], np.ndarray, list[bool]]:
        """Op seconds per CPU device alone at its width, the ops each runs at once, op seconds per device while
        j + 1 ops run there ([ops, devices, most slots]), and whether that differs from alone (the device shares)."""
        step, slots, shared, per_device = self.graph.step_ops, [], [], []
        for device in self.devices:
            if device.kind != "CPU" or device.width is None:
                raise DeviceSpecError(
                    f"{device.short_name}: a performance model predicts CPU devices of a known width; give the "
                    "device its cores or intra_op_threads (a machine file's `cores:`), or simulate it with a cost table"
                )
            inter = device.inter_op_threads or self.config.cpu_slots
            widths: dict[int, np.ndarray] = {}

            def seconds_at_width(width: int) -> np.ndarray:
                if width not in widths:
                    widths[width] = np.array([model.predict(self.graph, op, width) for op in step], dtype=np.float64)
                return widths[width]

            costs = shared_pool_costs(seconds_at_width, device.cores, device.width, inter,
                                      self.config.co_running_slowdown).reshape(len(step), inter)
            per_device.append(costs)
            slots.append(inter)
            shared.append(bool((costs[:, 1:] != costs[:, :1]).any()))
        share_cost = np.zeros((len(step), len(self.devices), max(slots)), dtype=np.float64)
        for d, costs in enumerate(per_device):
            share_cost[:, d, :costs.shape[1]] = costs
        return share_cost[:, :, 0].copy(), slots, share_cost, shared

    def _table_for(self, device, costs) -> CostTable:
        if isinstance(costs, CostTable):
            table = costs
        else:
            table = next((costs[key] for key in (device.model, device.kind) if key and key in costs), None)
            if table is None:
                raise ProfileError(
                    f"no cost table for {device.short_name} (model {device.model!r}, kind {device.kind!r}); "
                    f"tables given: {', '.join(costs) or 'none'}"
                )
        table.check_graph(self.graph)
        return table

    def reconfigured(self, **changes) -> Simulator:
        """This simulator with `changes` to the config fields `RECONFIGURABLE` names (transfer costs, overheads),
        sharing its compiled graph: a fit that tries many values need not compile a 10,000-op graph for each."""
        unknown = set(changes) - RECONFIGURABLE
        if unknown:
            raise ValueError(f"only {', '.join(sorted(RECONFIGURABLE))} change without compiling the graph again, "
                             f"not {', '.join(sorted(unknown))}")
        other = copy.copy(self)
        config = other.config = replace(self.config, **changes)
        other._engine_devices = self._engine_devices._replace(
            send_fixed=float(config.send_cpu), send_per_byte=float(config.send_cpu_per_byte),
            recv_fixed=float(config.recv_cpu), recv_per_byte=float(config.recv_cpu_per_byte),
            request_delay=float(config.request_delay))
        # What a simulation writes in: its own, so that the two simulators never share a call's scratch.
        other._work = Workspace.allocate(self._engine_graph, other._engine_devices)
        other._op_device, other._persistent = np.empty_like(self._op_device), np.empty_like(self._persistent)
        other._memory_bound = np.empty_like(self._memory_bound)
        return other

    # -- simulation --------------------------------------------------------------------------------

    def simulate(self, placement: Placement | Sequence[int], *, timeline: bool = False) -> SimResult:
        """Simulate one training step. `placement` is a Placement or one device index per colocation group."""
        group_devices = self._group_devices(placement)
        op_device, persistent = self._op_device, self._persistent
        devices_used = self._place(group_devices)
        work = self._work
        # Peak memory is a third of a simulation. Where no device can run out whatever happens, it is left to
        # be computed if and when someone reads it (`DeferredPeaks`); a timeline tracks it anyway.
        track_memory = timeline or not memory_fits(self._engine_graph, op_device, persistent, self.capacity,
                                                   self._memory_bound)
        step_time, finished, missing_link, transfers_made = simulate_step(
            self._engine_graph, self._engine_devices, op_device, persistent, work, track_memory)
        if missing_link >= 0:
            a, b = divmod(int(missing_link), len(self.devices))
            raise DeviceSpecError(
                f"the placement sends tensors from {self.devices[a].short_name} to {self.devices[b].short_name}, "
                "but the device set has no link between them: add one, or set SimulatorConfig.default_link"
            )
        if finished != len(self._names):
            raise PlacementError(f"simulation stalled after {finished} of {len(self._names)} ops: the graph has a cycle")
        names = self.devices.names
        busy, peak, link_bytes = work.busy, work.peak, work.link_bytes
        result_ops: tuple = ()
        transfers: tuple = ()
        if timeline:
            result_ops = tuple(SimulatedOp(self._names[i], names[op_device[i]], float(work.start[i]), float(work.end[i]))
                               for i in range(len(self._names)))
            producer = self._engine_graph.tensor_src
            transfers = tuple(
                SimulatedTransfer(self._tensor_names[t], names[op_device[producer[t]]], names[d],
                                  _transfer_start(work.xfer_start[t, d]), float(work.arrival[t, d]),
                                  int(self.tensor_bytes[t]))
                for t, d in (divmod(int(k), len(names)) for k in np.sort(work.sent[:transfers_made]))
            )
        # Through lists: converting numpy scalars one by one cost more than the rest of this method.
        if track_memory:
            peak_bytes = peak.tolist()
            peak_memory: Mapping[str, int] = {name: int(p) for name, p in zip(names, peak_bytes)}
            out_of_memory = tuple(name for name, p, c in zip(names, peak_bytes, self._capacity_list) if p > c)
        else:
            peak_memory, out_of_memory = DeferredPeaks(self, group_devices.copy()), ()
        sources, targets = np.nonzero(link_bytes)
        remote = self.config.remote_overhead if self.config.remote_overhead and not (group_devices == 0).any() else 0.0
        return SimResult(
            step_time=float(step_time) + self.config.step_overhead
            + self.config.spanning_overhead * max(devices_used - 1, 0) + remote,
            device_busy=dict(zip(names, busy.tolist())),
            peak_memory=peak_memory,
            link_bytes={(names[a], names[b]): int(link_bytes[a, b]) for a, b in zip(sources.tolist(), targets.tolist())},
            out_of_memory=out_of_memory,
            ops=result_ops,
            transfers=transfers,
        )

    def peak_memory(self, placement: Placement | Sequence[int]) -> dict[str, int]:
        """Largest live bytes per device in a step of `placement`: its step simulated with memory tracked."""
        self._place(self._group_devices(placement))
        simulate_step(self._engine_graph, self._engine_devices, self._op_device, self._persistent, self._work, True)
        return {name: int(p) for name, p in zip(self.devices.names, self._work.peak.tolist())}

    def _place(self, group_devices: np.ndarray) -> int:
        """Fills the op devices and resident bytes of a placement; returns how many devices it uses."""
        devices_used, bad_group = place_ops(group_devices, self.op_group, self.variable_groups, self.variable_bytes,
                                            self._op_device, self._persistent)
        if bad_group >= 0:
            raise PlacementError(f"device indices must be in 0..{len(self.devices) - 1}, got "
                                 f"{int(group_devices[bad_group])} for group {bad_group}")
        return devices_used

    def _group_devices(self, placement) -> np.ndarray:
        if isinstance(placement, Placement):
            if placement.graph_fingerprint != self.graph.fingerprint:
                raise PlacementError(f"the placement was made for another graph, not {self.graph.name!r}")
            if tuple(placement.devices) != self.devices.names:
                raise PlacementError("the placement was made for other devices than the simulator's")
            assignment = placement.group_device_array
        else:
            assignment = placement
        group_devices = np.asarray(assignment, dtype=np.int64)
        if group_devices.shape != (len(self.graph.groups),):
            raise PlacementError(f"give one device index per colocation group ({len(self.graph.groups)}), got shape {group_devices.shape}")
        return group_devices  # the range of each index is checked where the placement is read (place_ops)


def _transfer_start(recorded: float) -> float:
    """The event loop marks a transfer whose bytes it counted on the receiver as -2 - start."""
    return float(-2.0 - recorded if recorded <= -2.0 else recorded)


class DeferredPeaks(Mapping[str, int]):
    """A simulated step's peak memory per device, computed on first read: `Simulator.simulate` proved that no
    device can run out (`memory_fits`), so the exact peaks were not tracked. Reading one simulates the step
    again with memory tracked (its placement is kept, so later simulations do not change the answer)."""

    def __init__(self, simulator: Simulator, group_devices: np.ndarray):
        self._simulator: Simulator | None = simulator
        self._group_devices = group_devices
        self._peaks: dict[str, int] | None = None

    def _load(self) -> dict[str, int]:
        if self._peaks is None:
            self._peaks = self._simulator.peak_memory(self._group_devices)
            self._simulator = None  # the simulator's arrays need not outlive it for this result's sake
        return self._peaks

    def __getitem__(self, device: str) -> int:
        return self._load()[device]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __repr__(self) -> str:
        return repr(self._load())

    def __reduce__(self):
        # Pickled as the plain dict it stands for, so pickling computes the peaks: an async vector env, which
        # sends each step's info to the main process, pays a second simulation per step for them.
        return dict, (self._load(),)
