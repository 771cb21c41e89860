"""Run a placed training step in a TensorFlow session and time it; this is what the worker process does.

Callers use `placer.measure.Measurer`, which runs this behind a process boundary. Every TensorFlow error
is turned into a `Failure`; the placement TF actually used is read from a traced step and compared.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import time
from collections import OrderedDict
from typing import Mapping, Sequence

import tensorflow as tf
from tensorflow.core.protobuf import config_pb2

from placer.host import memory_available, memory_total, own_and_descendants_resident_bytes
from placer.graph.control_flow import LOOP_CONDITION_OP, control_flow_ops, iterations, owner
from placer.measure.config import MAX_TIMED_STEPS, MeasureConfig
from placer.measure.placement_check import PlacementChecks, TracedStep
from placer.measure.result import Failure, Measurement, MovedOp, OpTime


KEPT_SESSIONS_MEMORY_SHARE = 0.25
"""Sessions are kept only while at least this share of the machine's memory is available. A kept session holds
its graph and, on a testbed, each worker's state of the step: about 0.3 GB a worker for a 25M-parameter CNN, in
every process that keeps sessions at once (`placer optimize` runs several); past the machine's memory, the
processes thrash and every timing is wrong."""


def memory_to_spare(next_session_bytes: int = 0) -> bool:
    """Whether the machine has the memory to keep sessions open: `KEPT_SESSIONS_MEMORY_SHARE` of it available once
    a next session took `next_session_bytes` more (a new session of InceptionResNetV2 on a 2-worker testbed grew
    its processes by gigabytes, and kept ones had the kernel kill a server for memory); True where the kernel does
    not say."""
    available, total = memory_available(), memory_total()
    return available is None or not total or available - next_session_bytes >= KEPT_SESSIONS_MEMORY_SHARE * total


def canonical_device(name: str) -> str:
    """TensorFlow's full form of a device name, without GPU stream suffixes found in step stats."""
    base = name.split("/stream:")[0].split("/memcpy")[0]
    return tf.DeviceSpec.from_string(base).to_string()


def session_config_for(config: MeasureConfig, local_cpus: int | None = None,
                       threads: tuple[int | None, int | None] = (None, None)) -> config_pb2.ConfigProto:
    """The session's ConfigProto. TensorFlow sizes its intra-op and inter-op thread pools once per process,
    from the first session's config, so a worker process keeps one thread setting for its whole life."""
    session_config = config_pb2.ConfigProto(allow_soft_placement=config.allow_soft_placement)
    if local_cpus:
        session_config.device_count["CPU"] = local_cpus
    intra, inter = threads
    if intra is not None:
        session_config.intra_op_parallelism_threads = intra
    if inter is not None:
        session_config.inter_op_parallelism_threads = inter
    return session_config


class LoadedGraph:
    """One graph as a worker keeps it between placements: its GraphDef, that GraphDef imported once as a tf.Graph
    whose op devices are changed per placement, and the placement checks traced steps have made so far."""

    def __init__(self, graph_def: tf.compat.v1.GraphDef, train_op: str | Sequence[str], init_op: str,
                 step_ops: frozenset[str] | None = None, op_groups: Mapping[str, int] | None = None):
        self.graph_def = graph_def
        self.train_op = train_op
        self.init_op = init_op
        self.step_ops = step_ops
        self.op_types = {node.name: node.op for node in graph_def.node}
        self.checks = None
        """Placement checks to reuse; only for graphs loaded with their colocation groups."""
        if op_groups is not None:
            inputs = {node.name: [name.lstrip("^").split(":")[0] for name in node.input] for node in graph_def.node}
            self.checks = PlacementChecks(op_groups, inputs, self.op_types,
                                          self.op_types.keys() if step_ops is None else step_ops)
        self.traced_steps = 0
        """Steps traced for a placement check, over all placements of this graph."""
        self._graph: tf.Graph | None = None
        self._ops: dict[str, tf.Operation] = {}
        self._colocated: dict[str, list[str]] = {}
        self._unclosed: tf.compat.v1.Session | None = None
        self._kept: OrderedDict[tuple, tf.compat.v1.Session] = OrderedDict()
        """Open sessions by (placement, target, session config), least recently used first (`kept_sessions`)."""
        self.session_bytes = 0
        """The most a new session of this graph grew this process and its servers (resident bytes)."""

    def placed_graph(self, op_devices: Mapping[str, str], reuse: bool = True) -> tf.Graph:
        """The graph with each op on its device from `op_devices` (unlisted ops: no device).

        reuse: change the devices of the graph imported for an earlier placement instead of importing the GraphDef
        again (0.4 s for Inception-V3's training step). The devices come out as the import would set them:
        TensorFlow's canonical form, and an op colocated with another takes that op's device."""
        if not reuse:
            placed = tf.compat.v1.GraphDef()
            placed.CopyFrom(self.graph_def)
            for node in placed.node:
                node.device = op_devices.get(node.name, "")
            graph = tf.Graph()
            with graph.as_default():
                tf.compat.v1.import_graph_def(placed, name="")
            return graph
        if self._graph is None:
            self._graph = tf.Graph()
            with self._graph.as_default():
                tf.compat.v1.import_graph_def(self.graph_def, name="")
            self._ops = {op.name: op for op in self._graph.get_operations()}
            for node in self.graph_def.node:
                names = [value.decode()[len("loc:@"):] for value in node.attr["_class"].list.s
                         if value.startswith(b"loc:@")] if "_class" in node.attr else []
                names = [name for name in names if name != node.name and name in self._ops]
                if names:
                    self._colocated[node.name] = names
        devices = {name: _import_device(op_devices.get(name, "")) for name in self._ops}
        # import_graph_def's rule: an op colocated with others takes the first of their devices that is set (in
        # node order, seeing devices this loop already set), and no device of its own.
        for name in self._ops:
            if name in self._colocated:
                devices[name] = ""
        for name, colocated in self._colocated.items():
            devices[name] = next((devices[other] for other in colocated if devices[other]), "")
        for name, op in self._ops.items():
            if op.device != devices[name]:
                op._set_device_from_string(devices[name])
        return self._graph

    def close_session(self) -> None:
        """Close the session `measure(..., close_later=True)` left open."""
        if self._unclosed is not None:
            session, self._unclosed = self._unclosed, None
            session.close()

    def close_kept_sessions(self, keep: int = 0) -> None:
        """Close kept sessions, the least recently used first, until at most `keep` are open."""
        while len(self._kept) > keep:
            _, session = self._kept.popitem(last=False)
            session.close()

    def measure(self, op_devices: Mapping[str, str], target: str, config: MeasureConfig,
                local_cpus: int | None = None, threads: tuple[int | None, int | None] = (None, None),
                close_later: bool = False, worker_pids: Sequence[int] = ()) -> Measurement:
        """Run init, W warm-up and K timed steps of this graph placed by `op_devices` on `target`.

        local_cpus: for an in-process target, how many CPU devices the session gets. TF1 sessions ignore
        tf.config's logical devices and make only CPU:0 unless told, and soft placement then silently moves
        everything placed on CPU:1.. to CPU:0 (the placement check caught exactly that).
        threads: for an in-process target, its (intra-op, inter-op) thread pools; None for TensorFlow's default.
        close_later: leave the session of a successful measurement open until `close_session` (or the next
        measurement), so that the caller gets its answer before TensorFlow tears the session down.
        worker_pids: the testbed's worker processes, whose CPU time over the timed steps is recorded.
        """
        self.close_session()  # before the shared graph's devices change under it
        session_config = session_config_for(config, local_cpus, threads)
        kept_key = ((frozenset(op_devices.items()), target, session_config.SerializeToString())
                    if config.kept_sessions > 0 else None)
        session = self._kept.pop(kept_key, None) if kept_key is not None else None
        overhead: dict[str, float] = {}
        started = time.perf_counter()
        if session is None:
            try:
                # A kept session owns its graph: the shared one's devices change with the next placement.
                graph = self.placed_graph(op_devices, reuse=not config.reimport_graph and kept_key is None)
            except (ValueError, tf.errors.OpError) as error:
                return _failed("invalid", f"TensorFlow rejected the placed graph: {_first_line(error)}", overhead,
                               target)
        overhead["graph_rewrite"] = time.perf_counter() - started

        check = ""
        moved: tuple[MovedOp, ...] = ()
        checked = not_traced = 0
        if config.check_placement:
            reused = None if config.trace_every_placement or self.checks is None else self.checks.reusable(op_devices)
            if reused is not None:
                check, checked, not_traced, moved = "reused", reused.ops_checked, reused.ops_not_traced, reused.moved_ops
            elif config.warmup_steps:
                check = "traced"  # the first warm-up step

        step_options = config_pb2.RunOptions(timeout_in_ms=int(config.step_timeout * 1000))
        traced_options = config_pb2.RunOptions(
            timeout_in_ms=int(config.step_timeout * 1000), trace_level=config_pb2.RunOptions.FULL_TRACE
        )
        ran = False
        resident_before = own_and_descendants_resident_bytes() if session is None and kept_key is not None else None
        try:
            started = time.perf_counter()
            reused = session is not None
            if not reused:
                session = tf.compat.v1.Session(target, graph=graph, config=session_config)
            overhead["session"] = time.perf_counter() - started

            started = time.perf_counter()
            if not reused:  # the kept session's variables hold their values; their values change no step time
                session.run(self.init_op, options=step_options)
            overhead["init"] = time.perf_counter() - started

            for step in range(config.warmup_steps):
                started = time.perf_counter()
                if step == 0 and check == "traced":
                    metadata = config_pb2.RunMetadata()
                    session.run(self.train_op, options=traced_options, run_metadata=metadata)
                    self.traced_steps += 1
                    trace = traced_step(metadata)
                    moved, checked, not_traced = compare_traced(trace, op_devices, self.step_ops, self.op_types)
                    if self.checks is not None:
                        self.checks.record(op_devices, trace, moved, _canonical_cached)
                else:
                    session.run(self.train_op, options=step_options)
                if step == 0:
                    overhead["first_step"] = time.perf_counter() - started

            samples = []
            cpu_before = [thread_cpu_seconds(pid) for pid in worker_pids]
            timing_started = time.perf_counter()
            while len(samples) < config.timed_steps or (
                    time.perf_counter() - timing_started < config.timed_seconds and len(samples) < MAX_TIMED_STEPS):
                started = time.perf_counter()
                session.run(self.train_op, options=step_options)
                samples.append(time.perf_counter() - started)
            worker_cpu = tuple(growth_since(before, thread_cpu_seconds(pid)) / max(len(samples), 1)
                               for pid, before in zip(worker_pids, cpu_before))

            traces = []
            for _ in range(config.profile_steps):
                metadata = config_pb2.RunMetadata()
                session.run(self.train_op, options=traced_options, run_metadata=metadata)
                traces.append(metadata)
            op_times = op_times_from_traces(traces, config.profile_cores, self.op_types)
            chrome_traces = tuple(_chrome_trace(trace) for trace in traces) if config.keep_every_trace else ()
            chrome_trace = chrome_traces[-1] if chrome_traces else _chrome_trace(traces[-1]) if traces else ""
            ran = True
        except tf.errors.ResourceExhaustedError as error:
            return _failed("oom", f"out of memory: {_first_line(error)}", overhead, target)
        except tf.errors.DeadlineExceededError:
            return _failed("timeout", f"a step did not finish within {config.step_timeout:g} s", overhead, target)
        except tf.errors.InvalidArgumentError as error:
            return _failed("invalid", _first_line(error), overhead, target)
        except tf.errors.OpError as error:
            return _failed("runtime", f"{type(error).__name__}: {_first_line(error)}", overhead, target)
        finally:
            # close_later: a session that ran fine is closed once the answer is out (`close_session`), off the
            # caller's clock (0.1 s for Inception-V3); a failed one now, so that a close that hangs is charged to the
            # placement that caused it. A session that ran fine is kept instead where sessions are kept.
            if session is not None and ran and kept_key is not None:
                self._kept[kept_key] = session
                session = None
            elif session is not None and not (close_later and ran):
                session.close()
                session = None
        self._unclosed = session
        if resident_before is not None:  # what a new session of this graph took, the worker's and its servers'
            self.session_bytes = max(self.session_bytes, own_and_descendants_resident_bytes() - resident_before)
        self.close_kept_sessions(keep=config.kept_sessions if memory_to_spare(self.session_bytes) else 0)
        return Measurement(
            samples=tuple(samples),
            moved_ops=moved,
            ops_checked=checked,
            ops_not_traced=not_traced,
            placement_check=check,
            overhead=overhead,
            target=target,
            op_times=op_times,
            chrome_trace=chrome_trace, chrome_traces=chrome_traces,
            worker_cpu=worker_cpu,
        )


def _per_thread(pid: int, name: str, parse) -> dict[int, float]:
    """`parse` of /proc/PID/task/TID/`name` for each live thread of a process, by thread id."""
    values = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return values
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/{name}") as file:
                values[int(task)] = parse(file.read())
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended while we read
    return values


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """CPU seconds each live thread of a process has run, by thread id, from the scheduler's nanosecond
    accounting (schedstat; /proc/PID/stat counts in 10 ms ticks, coarser than a step)."""
    return _per_thread(pid, "schedstat", lambda text: int(text.split()[0]) / 1e9)


def growth_since(before: Mapping[int, float], after: Mapping[int, float]) -> float:
    """How much a per-thread counter of one process (CPU seconds from `thread_cpu_seconds`, context switches)
    grew between two readings, by thread id. Each thread counts what it added since the first reading, or all
    it has if it started since. Differencing two sums instead went negative whenever a thread exited in between,
    taking its whole past with it (−1.3 to −1.9 ms of CPU per step on worker 0 in calibrations on 2026-11-26,
    which zeroed a fitted per-byte send cost). What a departed thread added between the readings is not
    counted."""
    total = 0.0
    for thread, count in after.items():
        earlier = before.get(thread, 0.0)
        total += count - earlier if count >= earlier else count  # lower: the id was reused by a new thread
    return total


def thread_context_switches(pid: int) -> dict[int, float]:
    """Context switches (voluntary: it waited; involuntary: it was preempted) each live thread of a process has
    made, by thread id (status); differences with `growth_since`."""
    return _per_thread(pid, "status", lambda text: sum(
        int(line.split()[1]) for line in text.splitlines()
        if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"))))


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds a process's live threads have run (`thread_cpu_seconds`): for a process whose threads live as
    long as it does, such as a kernel thread; differences across a thread's exit go wrong (`growth_since`)."""
    return sum(thread_cpu_seconds(pid).values())


@functools.lru_cache(maxsize=None)
def _import_device(name: str) -> str:
    """The device string import_graph_def gives an op requested on `name`."""
    return tf.DeviceSpec.from_string(name).to_string() if name else ""


@functools.lru_cache(maxsize=None)
def _canonical_cached(name: str) -> str:
    return canonical_device(name)


def _chrome_trace(metadata: config_pb2.RunMetadata) -> str:
    from tensorflow.python.client import timeline

    trace = json.loads(timeline.Timeline(metadata.step_stats).generate_chrome_trace_format(show_memory=False))
    # On a cluster TensorFlow lists each device twice, once per worker that reported the step, and one of the two
    # stays empty: a viewer would show two processes of one name. Only processes with events are kept.
    busy = {event["pid"] for event in trace["traceEvents"] if event.get("ph") != "M"}
    trace["traceEvents"] = [event for event in trace["traceEvents"] if event.get("ph") != "M" or event["pid"] in busy]
    return json.dumps(trace)


def op_times_from_traces(traces: list[config_pb2.RunMetadata], cores: int = 1,
                         op_types: Mapping[str, str] | None = None) -> dict[str, OpTime]:
    """Median compute time of every traced op over several traced steps.

    Per node, step stats give the op's start and end. On a CPU device with `cores` cores, more ops in
    progress than cores do not all compute: the ones that started last hold the cores (`core_seconds`),
    so an op's compute time is the part of its span it held one (the raw span of two ops time-sliced on
    one core would count that core twice). On a GPU the kernel times are on the ".../stream:N" entries, and the host
    entry of the same node only covers the launch, so stream times win when a node has them.

    With `op_types` (the graph's op name -> type), every node TensorFlow lowered a loop or conditional into counts
    as that op (`placer.graph.control_flow.owner`): the op's time is its body's over all iterations, its `runs`
    the nodes that ran for it, and a loop's `iterations` come from its condition. Without them a loop's body
    is reported under names the graph lacks, and the loop itself costs nothing.
    """
    owners = control_flow_ops(op_types) if op_types else frozenset()
    seconds: dict[str, list[float]] = {}
    runs: dict[str, list[int]] = {}
    loop_iterations: dict[str, list[int]] = {}
    ran: dict[str, tuple[str, str]] = {}
    for metadata in traces:
        host: dict[str, float] = {}
        kernels: dict[str, float] = {}
        step_runs: dict[str, int] = {}
        condition_runs: dict[str, dict[str, int]] = {}  # loop -> its lowered LoopCond nodes -> runs
        for device_stats in metadata.step_stats.dev_stats:
            if "/memcpy" in device_stats.device or "/stream:all" in device_stats.device:
                continue  # copies are link costs; stream:all repeats the per-stream entries
            on_stream = "/stream:" in device_stats.device
            device = canonical_device(device_stats.device)
            spans = []
            for node in device_stats.node_stats:
                name = node.node_name.split(":")[0]
                if not name or name in ("SOURCE", "_SOURCE"):
                    continue
                label = node.timeline_label.split(" = ", 1)
                ran_as = label[1].split("(", 1)[0] if len(label) == 2 else ""
                loop = owner(name, owners) if owners and name not in op_types else None
                if loop is not None:
                    if ran_as == LOOP_CONDITION_OP and not on_stream:
                        conditions = condition_runs.setdefault(loop, {})
                        conditions[name] = conditions.get(name, 0) + 1
                    name, ran_as = loop, op_types[loop]
                ran.setdefault(name, (device, ran_as))
                if not on_stream:
                    step_runs[name] = step_runs.get(name, 0) + 1
                begin = node.all_start_micros + node.op_start_rel_micros
                spans.append((name, begin, max(begin, node.all_start_micros + node.op_end_rel_micros)))
            into = kernels if on_stream else host
            shared = _span_seconds(spans) if on_stream else core_seconds(spans, cores)
            for name, value in shared.items():
                into[name] = into.get(name, 0.0) + value
        for name in host.keys() | kernels.keys():
            seconds.setdefault(name, []).append(kernels.get(name, host.get(name, 0.0)))
            runs.setdefault(name, []).append(step_runs.get(name, 1))
        for loop, conditions in condition_runs.items():
            counted = iterations(conditions.values())
            if counted is not None:
                loop_iterations.setdefault(loop, []).append(counted)
    return {name: OpTime(ran[name][0], statistics.median(values), ran[name][1], statistics.median(runs[name]),
                         round(statistics.median(loop_iterations[name])) if name in loop_iterations else None)
            for name, values in seconds.items()}


def _span_seconds(spans) -> dict[str, float]:
    totals: dict[str, float] = {}
    for name, begin, end in spans:
        totals[name] = totals.get(name, 0.0) + (end - begin) * 1e-6
    return totals


def core_seconds(spans, cores: int) -> dict[str, float]:
    """Seconds of a core each span's op had, on a device with `cores` cores: while more ops are in progress
    than there are cores, the ones that started last hold them.

    A traced op's start is stamped by its own thread as it begins, so that thread is running then; the OS hands
    a core out in slices of milliseconds, longer than most ops, so the op runs to its end while the thread it
    displaced waits. One op's span can therefore hold another's whole run, and that time was the other op's.
    Sharing the overlap evenly instead charges the inner op part of its time and the outer op the rest. On a
    testbed worker (one core, two inter-op threads), against spans traced with one inter-op thread, which never
    overlap, this attribution is off by a median 6 % per op of 50 µs or more on nmt-2 (even sharing: 28 %) and
    3 % on two-tower (even sharing: 3 %, with a root-mean-square error twice this one's), by
    `experiments/probes/op_attribution.py`. A sweep over the spans' start and end points."""
    points = sorted({t for _, begin, end in spans for t in (begin, end)})
    if not points:
        return {}
    starts: dict[float, list[int]] = {}
    ends: dict[float, list[int]] = {}
    for i, (_, begin, end) in enumerate(spans):
        starts.setdefault(begin, []).append(i)
        ends.setdefault(end, []).append(i)
    held = [0.0] * len(spans)
    active: list[int] = []  # in the order the ops started: the last `cores` of them hold the cores
    for left, right in zip(points, points[1:] + [points[-1]]):
        ending = ends.get(left, ())
        if ending:
            active = [i for i in active if i not in ending]
        for i in starts.get(left, ()):
            if spans[i][2] > spans[i][1]:
                active.append(i)
        if right > left:
            for i in active[-cores:]:
                held[i] += right - left
    totals: dict[str, float] = {}
    for (name, _, _), value in zip(spans, held):
        totals[name] = totals.get(name, 0.0) + value * 1e-6
    return totals


def traced_step(metadata: config_pb2.RunMetadata) -> TracedStep:
    """The device each node of a traced step ran on, and the op type it ran as."""
    ran_on: dict[str, str] = {}
    ran_as: dict[str, str] = {}
    for device_stats in metadata.step_stats.dev_stats:
        device = canonical_device(device_stats.device)
        for node in device_stats.node_stats:
            ran_on.setdefault(node.node_name, device)
            # timeline_label reads "name = OpType(inputs)"
            label = node.timeline_label.split(" = ", 1)
            if len(label) == 2:
                ran_as.setdefault(node.node_name, label[1].split("(", 1)[0])
    return TracedStep(ran_on, ran_as)


def compare_traced(
    trace: TracedStep,
    op_devices: Mapping[str, str],
    step_ops: frozenset[str] | None = None,
    op_types: Mapping[str, str] | None = None,
) -> tuple[tuple[MovedOp, ...], int, int]:
    """Ops of a traced step (`traced_step`) whose device differs from the requested one; counts of ops checked
    and of step ops (default: all placed ops) that did not appear in the trace."""
    ran_on, ran_as = trace.ran_on, trace.ran_as
    moved = []
    checked = 0
    for op, requested in op_devices.items():
        actual = ran_on.get(op)
        if actual is None:
            continue
        checked += 1
        wanted = _canonical_cached(requested)
        if actual != wanted:
            kind = ran_as.get(op, "")
            moved.append(MovedOp(op, wanted, actual, "" if op_types and op_types.get(op) == kind else kind))
    expected = op_devices.keys() if step_ops is None else step_ops
    not_traced = sum(1 for op in expected if op not in ran_on)
    return tuple(sorted(moved, key=lambda m: m.op)), checked, not_traced


def _failed(kind: str, message: str, overhead: Mapping[str, float], target: str) -> Measurement:
    return Measurement(failure=Failure(kind, message), overhead=dict(overhead), target=target)


def _first_line(error: Exception) -> str:
    """The line of a TensorFlow error that says what went wrong, and at which node.

    A session's errors start with "Graph execution error:" and where the node was defined; the runtime's
    own cause comes after a "Node: 'name'" line, so that is the line a failure record needs."""
    lines = [line.strip() for line in (getattr(error, "message", None) or str(error)).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    if lines[0] == "Graph execution error:":
        for line, cause in zip(lines, lines[1:]):
            if line.startswith("Node: "):
                return f"{cause} (at node {line[len('Node: '):]})"
    return lines[0]
