"""The event loop of the simulator, compiled with numba: arrays in, step time, memory and timeline out.

It behaves like TensorFlow's executor: an op starts when its inputs have arrived and its device has a
free slot (inter-op threads on a CPU, one compute stream on a GPU), ready ops start in the order they
became ready. An op that costs nothing (bookkeeping ops such as Const, Identity, Reshape; ops grappler
folded away) starts and finishes the moment its inputs are there, taking no slot and no place in the
queue: TensorFlow's executor runs inexpensive kernels inline, in the thread that made them ready. A tensor
needed on another device is sent once per destination:
- Over the link between the two devices, which carries one transfer's bytes at a time in the order they
  were requested (bytes / bandwidth), while latency overlaps: it delays a transfer, it does not hold the
  link, so many small tensors in flight pay it once, not once each (probes on the gRPC testbed: 32 small
  tensors at once cost far less than 32 single-tensor latencies). The bytes count on the receiver from the
  transfer's start (TensorFlow allocates the destination before it copies) and on the sender until it ends.
- On gRPC workers, also on both cores: the sender serializes the tensor (a task in the sender's ready
  queue, `send_fixed + send_per_byte * bytes` of one slot) and the receiver deserializes it (`recv_fixed
  + recv_per_byte * bytes`); the receiver starts once the first bytes are in (latency after the send
  starts) and the tensor is there when both ends are done. Probes with a busy chain on one worker
  measured both costs; with both workers idle, one transfer took about the larger of the two, not their
  sum (`placer calibrate`). The bytes count on the receiver once they are there.
  A send also waits for its request: the receiver asks for its tensors when it first runs out of ops to
  run, or `request_delay` into the step, and the sender takes a request up once both the request and the
  tensor are there, when it next runs out of ops, or `request_delay` after (TensorFlow's gRPC workers
  serve these on the inter-op pool that runs the ops; `experiments/probes/hop_delay.py` measured 0.3-8 ms on
  one-core workers that kept computing, `placer calibrate` fits the delay). A request that came early does
  not let the tensor leave a sender that is busy when it is made, nor one that is idle only until the instant
  it is made, when what the same instant makes ready there (an arrival that readies the free op making the
  tensor and a chain beside it) keeps it busy: a device counts as idle only once every event of the instant is
  handled (two-tower's learned placement on `local:2`: the hop traced 3.0 ms late, 0.2 ms in the twin before). On the testbed that holds for a send
  TensorFlow's executor queues (its producer made other ops ready there); one it runs inline leaves at once,
  and `experiments/probes/step_decomposition.py` traced two-tower `tiny`'s loss gradient 0.2 or about 2 ms late by
  that alone. Which one TensorFlow does depends on the graph grappler leaves, which this graph is not, so
  by default every such send is held. With `executor_queues` the loop emulates the executor's queues from
  this graph instead: a send runs inline when its producer made no op that takes a slot ready at the same
  instant (through the free ops grappler folds away), else it is held as above; what a received tensor makes
  ready waits until its worker runs out of other work, or `request_delay` (`SimulatorConfig.executor_queues`
  says where each rule predicts better).

A CPU device whose ops share its cores (`shared`: several inter-op threads and op times from a performance model
at each width, `placer.simulate.thread_pools`) runs them by processor sharing: an op's cost is the seconds it
takes while k ops run there, and each running op's progress rate changes whenever another starts or ends on
the device (its end is re-planned then; the superseded end events are skipped when they come up).

Over links alone an arrival is known when the transfer starts, so it is not an event: an op waits for its
inputs as a count, and one event makes it ready when its last input lands (on cores, receives are work
that competes for slots, so arrivals stay events).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import literally, njit


class EngineGraph(NamedTuple):
    """A graph's arrays for the event loop, built once per simulator."""

    op_cost: np.ndarray      # [n, d] seconds of each op on each device
    op_alloc: np.ndarray     # [n] bytes each op's outputs occupy on its device
    out_ptr: np.ndarray      # [n + 1] CSR over consumer edges of each op
    out_dst: np.ndarray      # [m] consumer op of each edge
    out_tensor: np.ndarray   # [m] tensor id the edge carries (transfers are shared per tensor and destination)
    in_ptr: np.ndarray       # [n + 1] CSR over input edges of each op
    in_src: np.ndarray       # [m] producer op of each input edge (one load where an edge id would take two)
    in_tensor: np.ndarray    # [m] tensor each input edge carries
    edge_src: np.ndarray     # [m] producer op of each edge
    tensor_bytes: np.ndarray  # [t] bytes of each tensor
    in_degree: np.ndarray    # [n] input edges per op
    tensor_src: np.ndarray   # [t] producer op of each tensor
    tensor_control: np.ndarray  # [t] True where the "tensor" is a control edge's (no bytes, only an order)
    share_cost: np.ndarray   # [n, d, k] seconds of each op on a shared device while j + 1 ops run there (j < k)


class EngineDevices(NamedTuple):
    """The devices' arrays and the transfer model's costs (all four 0: links only, as between GPUs)."""

    slots: np.ndarray           # [d] ops a device runs at once
    shared: np.ndarray          # [d] True where its running ops share its cores: op time depends on how many run
    link_bandwidth: np.ndarray  # [d, d] bytes per second (0: no link)
    link_latency: np.ndarray    # [d, d] seconds
    send_fixed: float           # seconds of the sending device's slot per transfer
    send_per_byte: float        # ... and per byte sent
    recv_fixed: float           # seconds of the receiving device's slot per transfer
    recv_per_byte: float        # ... and per byte received
    sharing: bool               # any device shares (`shared.any()`, kept to pick the compiled loop without a scan)
    request_delay: float = 0.0  # on cores: a busy worker serves transfer requests when it idles or after this
    executor_queues: bool = False  # on cores with a request delay: TensorFlow's executor order of sends and receives


class Workspace(NamedTuple):
    """Arrays one simulation works in, allocated once per simulator and reused by every call: fresh arrays of
    this size cost hundreds of page faults per call, a third of a random placement's time on NMT-2. After a
    call, `start`, `end`, `busy`, `peak`, `link_bytes` hold its answer and `sent[:count]` its transfers."""

    start: np.ndarray
    end: np.ndarray
    pending: np.ndarray
    uses: np.ndarray           # outstanding readers of each op's outputs on its own device
    deferred: np.ndarray       # ops made ready by a same-device input, not yet queued
    cost_of: np.ndarray        # [n] seconds of each op on its device in this placement
    finishing: np.ndarray      # ops finishing at this instant: i, or -1 - i for a free op that starts too
    busy: np.ndarray
    free_slots: np.ndarray
    live: np.ndarray
    peak: np.ndarray
    link_free: np.ndarray
    link_bytes: np.ndarray
    arrival: np.ndarray        # [t, d] when tensor t reached device d (-1: not sent); reset per call where used
    xfer_start: np.ndarray     # [t, d] when its transfer started (-2 - start once its memory is counted)
    arrival_floor: np.ndarray  # [t, d] a received tensor is there no earlier than its last byte
    recv_uses: np.ndarray      # [t, d] outstanding readers of a received tensor
    control_pending: np.ndarray  # [n, d] cross-device control inputs of op i from device d not yet done
    control_grouped: np.ndarray  # [m] a cross-device control edge whose order another edge's transfer carries
    sent: np.ndarray           # [t * d] tensor * d + target of each transfer, in the order they started
    last_time: np.ndarray      # [n] links only: the latest input arrival of each op from another device...
    last_key: np.ndarray       # ... and its event key (-1: none), the event that makes the op ready
    release_time: np.ndarray   # [t * d] links only: when each transfer's sender copy may be released...
    release_src: np.ndarray    # ... the op whose output it is,
    release_next: np.ndarray   # ... and the next transfer on the same link (-1: none)
    link_head: np.ndarray      # [d * d] first and last unreleased transfer of each link (-1: none)
    link_tail: np.ndarray
    next_release: np.ndarray   # [d] when the earliest unreleased sender copy of each device may go
    ready_time: np.ndarray     # [d, capacity] each device's ready queue, sorted, from ready_head[d] on
    ready_key: np.ndarray
    ready_size: np.ndarray
    ready_head: np.ndarray
    event_time: np.ndarray     # the event heap
    event_key: np.ndarray
    remaining: np.ndarray      # [n] shared devices: the fraction of each running op's work still to do...
    finish_at: np.ndarray      # ... and when it ends at the current rates (an end event at another time is stale)
    running: np.ndarray        # [d, max slots] the ops running on each shared device...
    running_count: np.ndarray  # ... how many,
    settled_at: np.ndarray     # ... when their remaining work was last brought up to date,
    replan: np.ndarray         # ... and whether their ends must be planned again (the running set changed)
    first_idle: np.ndarray     # [d] on cores with a request delay: when each device first had nothing to run...
    last_idle: np.ndarray      # ... and last had nothing to run
    held: np.ndarray           # [t * d (+ n)] sends whose request is not yet taken up (and, with the executor's
                               # queues, ops a receive made ready)...
    held_timer: np.ndarray     # ... the time of the re-check event pushed for each...
    held_ready: np.ndarray     # ... and when each was made (ready to send)
    send_made: np.ndarray      # [t * d] when each send's tensor was made; -1 once its request is taken up
    send_queued: np.ndarray    # [t * d] True where the executor queued the send behind other work (not inline)
    instant_sends: np.ndarray  # sends made in the cascade of ops finishing at this instant

    @classmethod
    def allocate(cls, graph: EngineGraph, devices: EngineDevices) -> "Workspace":
        n, m = graph.op_cost.shape[0], graph.out_dst.shape[0]
        t, d = graph.tensor_bytes.shape[0], devices.slots.shape[0]
        on_cores = max(devices.send_fixed, devices.send_per_byte, devices.recv_fixed, devices.recv_per_byte) > 0
        # A device's queue holds its ops, a receive per tensor and, on cores, a send per tensor and destination.
        capacity = n + t * (d if on_cores else 1)
        # Indices, counts and event keys are 32-bit: the loop's working set (about 2 MB on NMT-2 at paper size)
        # is 4x a core's L2, and halving its index arrays made a random placement about 11 % faster (median 4.04 ->
        # 3.58 ms side by side). Keys are
        # id * 4 + kind, ids up to n + 2 * t * d (sends on cores) or m (edges).
        if 4 * (n + 2 * t * d + m) + 4 >= 2**31:
            raise ValueError(f"a graph of {n} ops, {m} edges and {t} tensors on {d} devices is too large for the "
                             "simulator's 32-bit event keys")
        # Each change of a shared device's running set plans its running ops' ends again: up to two changes per
        # op, each pushing at most one event per slot, the superseded ones left in the heap until they come up.
        replanned = 2 * n * int(devices.slots.max()) if devices.sharing else 0
        # A held send pushes a re-check event when held and at most twice more (when the receiver asks, when the
        # request is there beside an idle sender, then the sender's deadline); with the executor's queues an op a
        # receive made ready is held too, and pushes one.
        held_ops = n if devices.executor_queues else 0
        rechecks = 3 * (t * d + held_ops) if on_cores and devices.request_delay > 0 else 0
        return cls(
            start=np.empty(n), end=np.empty(n), pending=np.empty(n, dtype=np.int32),
            uses=np.empty(n, dtype=np.int32), deferred=np.empty(n, dtype=np.int32),
            finishing=np.empty(n, dtype=np.int32), cost_of=np.empty(n),
            busy=np.empty(d), free_slots=np.empty(d, dtype=np.int32), live=np.empty(d), peak=np.empty(d),
            link_free=np.empty((d, d)), link_bytes=np.empty((d, d)),
            arrival=np.full((t, d), -1.0), xfer_start=np.full((t, d), -1.0), arrival_floor=np.zeros((t, d)),
            recv_uses=np.zeros((t, d), dtype=np.int32), sent=np.empty(t * d, dtype=np.int32),
            control_pending=np.zeros((n, d), dtype=np.int32), control_grouped=np.zeros(m, dtype=np.bool_),
            last_time=np.empty(n), last_key=np.empty(n, dtype=np.int32), release_time=np.empty(t * d),
            release_src=np.empty(t * d, dtype=np.int32), release_next=np.empty(t * d, dtype=np.int32),
            link_head=np.empty(d * d, dtype=np.int32), link_tail=np.empty(d * d, dtype=np.int32),
            next_release=np.empty(d),
            ready_time=np.empty((d, capacity)), ready_key=np.empty((d, capacity), dtype=np.int32),
            ready_size=np.empty(d, dtype=np.int32), ready_head=np.empty(d, dtype=np.int32),
            event_time=np.empty(n + 4 * m + 1 + replanned + rechecks),
            event_key=np.empty(n + 4 * m + 1 + replanned + rechecks, dtype=np.int32),
            remaining=np.empty(n), finish_at=np.empty(n),
            running=np.empty((d, max(int(devices.slots.max()), 1)), dtype=np.int32),
            running_count=np.zeros(d, dtype=np.int32), settled_at=np.zeros(d), replan=np.zeros(d, dtype=np.bool_),
            first_idle=np.empty(d), last_idle=np.empty(d), held=np.empty(t * d + held_ops if on_cores else 1, dtype=np.int32),
            held_timer=np.empty(t * d + held_ops if on_cores else 1),
            held_ready=np.empty(t * d + held_ops if on_cores else 1),
            send_made=np.empty(t * d if on_cores else 1), send_queued=np.zeros(t * d if on_cores else 1, dtype=np.bool_),
            instant_sends=np.empty(t * d if on_cores else 1, dtype=np.int32),
        )

# Events are keyed id * 4 + kind, so that simultaneous events are handled in a fixed order.
EVENT_OP_DONE = 0  # a real op, or a receive (id n + tensor * d + device), finished
EVENT_ARRIVAL = 1  # an edge's input is on the consumer's device (links only: its last input, so it is ready)
EVENT_RECEIVED = 2  # a transfer reached its device; its receive now waits for a compute slot
EVENT_SEND_DONE = 3  # the sender finished serializing a tensor (id n + t * d + tensor * d + target)


@njit(cache=True, inline="always")
def _before(time_a, key_a, time_b, key_b):
    return time_a < time_b or (time_a == time_b and key_a < key_b)


@njit(cache=True)
def _push(heap_time, heap_key, size, time, key):
    """Binary min-heap on (time, key) in two arrays; returns the new size. Sifts a hole up instead of
    swapping at each level: half the writes, and the heaps are the event loop's hottest code."""
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if not _before(time, key, heap_time[parent], heap_key[parent]):
            break
        heap_time[i] = heap_time[parent]
        heap_key[i] = heap_key[parent]
        i = parent
    heap_time[i] = time
    heap_key[i] = key
    return size + 1


@njit(cache=True)
def _pop(heap_time, heap_key, size):
    """Removes the smallest (time, key); returns (time, key, new size)."""
    time = heap_time[0]
    key = heap_key[0]
    size -= 1
    last_time = heap_time[size]
    last_key = heap_key[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        right = child + 1
        if right < size and _before(heap_time[right], heap_key[right], heap_time[child], heap_key[child]):
            child = right
        if not _before(heap_time[child], heap_key[child], last_time, last_key):
            break
        heap_time[i] = heap_time[child]
        heap_key[i] = heap_key[child]
        i = child
    heap_time[i] = last_time
    heap_key[i] = last_key
    return time, key, size


@njit(cache=True, inline="always")
def _queue(queue_time, queue_key, queue_head, queue_size, dev, time, key):
    """Adds (time, key) to device `dev`'s ready queue, kept sorted in place: entries come at the current
    instant or later, so a new one passes only same-instant entries with larger keys (few, once free ops
    finish inline)."""
    position = queue_head[dev] + queue_size[dev]
    while position > queue_head[dev] and _before(time, key, queue_time[dev, position - 1], queue_key[dev, position - 1]):
        queue_time[dev, position] = queue_time[dev, position - 1]
        queue_key[dev, position] = queue_key[dev, position - 1]
        position -= 1
    queue_time[dev, position] = time
    queue_key[dev, position] = key
    queue_size[dev] += 1


@njit(cache=True, inline="always")
def _has_deferred(dev, deferred, deferred_count, op_device):
    """True if an op that just became ready waits to join `dev`'s queue."""
    for k in range(deferred_count):
        if op_device[deferred[k]] == dev:
            return True
    return False


@njit(cache=True, inline="always")
def _taken_up_at(sender, target, now, made, queued, first_idle, last_idle, request_delay, link_latency):
    """When the send of a tensor `sender` made at time `made` for `target` leaves: -1 if by `now`, else the time
    to look again. The target asks for its tensors when it first runs out of ops, or `request_delay` into the
    step; the sender's threads take the request up when they next run out of ops after it arrives, or
    `request_delay` after. An inline send (not `queued`) leaves as its tensor is made if the request was taken up
    before; a queued one waits, like the request, for the sender to run out of ops after the tensor is made, or
    `request_delay`."""
    asked = min(first_idle[target], request_delay)
    if asked > now:
        return asked
    both_there = max(asked + link_latency[target, sender], made) if queued else asked + link_latency[target, sender]
    if last_idle[sender] >= both_there:
        return -1.0
    if last_idle[sender] == now:  # idle now, before the request is there: it takes it up then if still idle
        return both_there
    deadline = both_there + request_delay
    return deadline if deadline > now else -1.0


@njit(cache=True, inline="always")
def _idle_apart_from_sends(dev, free_slots, slots, ready_key, ready_head, ready_size, send_base, deferred,
                           deferred_count, op_device):
    """True if `dev` runs nothing and has nothing but sends waiting: its threads are free to serve requests."""
    if free_slots[dev] != slots[dev] or _has_deferred(dev, deferred, deferred_count, op_device):
        return False
    for k in range(ready_head[dev], ready_head[dev] + ready_size[dev]):
        if ready_key[dev, k] < send_base:
            return False
    return True


@njit(cache=True, inline="always")
def _release_sent_copies(dev, now, d, uses, live, op_alloc, release_time, release_src, release_next, link_head,
                         next_release):
    """Releases the sender copies of `dev`'s transfers completed by `now` (links only), before memory grows on
    `dev`, so that its peak sees them freed. A link's transfers complete in the order they started, so each
    link's list is in time order and `next_release[dev]` is the earliest of their heads."""
    earliest = np.inf
    for target in range(d):
        link = dev * d + target
        k = link_head[link]
        while k >= 0 and release_time[k] <= now:
            src = release_src[k]
            uses[src] -= 1
            if uses[src] == 0:
                live[dev] -= op_alloc[src]
            k = release_next[k]
        link_head[link] = k
        if k >= 0 and release_time[k] < earliest:
            earliest = release_time[k]
    next_release[dev] = earliest


@njit(cache=True, inline="always")
def _allocate_outputs(i, dev, now, d, uses, live, peak, op_alloc, release_time, release_src, release_next, link_head,
                      next_release):
    """Op `i` starts on `dev` at `now`: its outputs take memory there, after the sender copies whose transfers
    are done by now are released (links only), so that the peak sees them gone."""
    if op_alloc[i] > 0.0 and next_release[dev] <= now:
        _release_sent_copies(dev, now, d, uses, live, op_alloc, release_time, release_src, release_next, link_head,
                             next_release)
    live[dev] += op_alloc[i]
    if live[dev] > peak[dev]:
        peak[dev] = live[dev]


@njit(cache=True, inline="always")
def _settle(dev, now, share_cost, running, running_count, settled_at, remaining):
    """Brings the remaining work of the ops running on shared device `dev` up to `now`, at the rate each had
    while the current number of ops ran there."""
    k = running_count[dev]
    elapsed = now - settled_at[dev]
    if k > 0 and elapsed > 0.0:
        for s in range(k):
            j = running[dev, s]
            cost = share_cost[j, dev, k - 1]
            left = remaining[j] - elapsed / cost if cost > 0.0 else 0.0
            # An op due now must end now, not a rounding error later, behind events it ties with.
            remaining[j] = left if left > 1e-9 else 0.0
    settled_at[dev] = now


@njit(cache=True, inline="always")
def _replan(dev, now, share_cost, running, running_count, remaining, finish_at, event_time, event_key, events):
    """Plans the end of every op running on shared device `dev` at the rates of the current running set;
    returns the heap's new size."""
    k = running_count[dev]
    for s in range(k):
        j = running[dev, s]
        finish_at[j] = now + remaining[j] * share_cost[j, dev, k - 1]
        events = _push(event_time, event_key, events, finish_at[j], j * 4 + EVENT_OP_DONE)
    return events


@njit(cache=True)
def place_ops(group_devices, op_group, variable_groups, variable_bytes, op_device, persistent):
    """Fills `op_device` (each op's device, from its colocation group's) and `persistent` (variable bytes resident
    on each device) for a placement given as one device per group. Returns (devices that run ops, the first
    group whose device index is out of range or -1): one pass in compiled code, where numpy's gather, bincounts
    and range checks cost a tenth of a simulation."""
    d = persistent.shape[0]
    bad = -1
    for g in range(group_devices.shape[0]):
        if group_devices[g] < 0 or group_devices[g] >= d:
            bad = g
            break
    if bad >= 0:
        return 0, bad
    used = np.zeros(d, dtype=np.bool_)
    for g in range(group_devices.shape[0]):
        used[group_devices[g]] = True
    for i in range(op_group.shape[0]):
        op_device[i] = group_devices[op_group[i]]
    persistent[:] = 0.0
    for v in range(variable_groups.shape[0]):
        persistent[group_devices[variable_groups[v]]] += variable_bytes[v]
    return int(used.sum()), -1


@njit(cache=True)
def memory_fits(graph, op_device, persistent, capacity, bound):
    """Whether no device can run out of memory in this placement, whatever the order ops run in: `bound[d]`
    (filled here) is its resident bytes, plus every output of its ops, plus every tensor an edge brings it
    from another device, as if nothing were ever freed; true if that is within `capacity[d]` everywhere.
    Then the exact peaks need not be tracked to know the step fits (they are a third of a simulation)."""
    bound[:] = persistent
    out_ptr, out_dst, out_tensor = graph.out_ptr, graph.out_dst, graph.out_tensor
    for i in range(op_device.shape[0]):
        dev = op_device[i]
        bound[dev] += graph.op_alloc[i]
        for e in range(out_ptr[i], out_ptr[i + 1]):
            target = op_device[out_dst[e]]
            if target != dev:
                bound[target] += graph.tensor_bytes[out_tensor[e]]
    for dev in range(bound.shape[0]):
        if bound[dev] > capacity[dev]:
            return False
    return True


def simulate_step(graph, devices, op_device, persistent, work, track_memory=True):
    """Simulates one step of `graph` with op i on device `op_device[i]` and `persistent[d]` bytes resident on
    device d, in `work` (a `Workspace`). Returns (step time, ops finished, missing link as source * d + target
    or -1, transfers made). Without `track_memory`, `work.peak` is not computed (left at `persistent`)."""
    on_cores = max(devices.send_fixed, devices.send_per_byte, devices.recv_fixed, devices.recv_per_byte) > 0.0
    loop = _LOOPS[on_cores, bool(track_memory), devices.sharing]
    return loop(graph, devices, op_device, persistent, work)


# One compiled loop per transfer model, memory mode and whether any device shares its cores, each with those
# three as constants so that the branches it does not take are compiled out.
@njit(cache=True)
def _simulate_on_links(graph, devices, op_device, persistent, work):
    return _event_loop(graph, devices, op_device, persistent, work, False, True, False)


@njit(cache=True)
def _simulate_on_cores(graph, devices, op_device, persistent, work):
    return _event_loop(graph, devices, op_device, persistent, work, True, True, False)


@njit(cache=True)
def _simulate_on_links_untracked(graph, devices, op_device, persistent, work):
    return _event_loop(graph, devices, op_device, persistent, work, False, False, False)


@njit(cache=True)
def _simulate_on_cores_untracked(graph, devices, op_device, persistent, work):
    return _event_loop(graph, devices, op_device, persistent, work, True, False, False)


@njit(cache=True)
def _simulate_on_links_shared(graph, devices, op_device, persistent, work):
    return _event_loop(graph, devices, op_device, persistent, work, False, True, True)


@njit(cache=True)
def _simulate_on_cores_shared(graph, devices, op_device, persistent, work):
    return _event_loop(graph, devices, op_device, persistent, work, True, True, True)


@njit(cache=True)
def _simulate_on_links_untracked_shared(graph, devices, op_device, persistent, work):
    return _event_loop(graph, devices, op_device, persistent, work, False, False, True)


@njit(cache=True)
def _simulate_on_cores_untracked_shared(graph, devices, op_device, persistent, work):
    return _event_loop(graph, devices, op_device, persistent, work, True, False, True)


_LOOPS = {
    (False, True, False): _simulate_on_links, (True, True, False): _simulate_on_cores,
    (False, False, False): _simulate_on_links_untracked, (True, False, False): _simulate_on_cores_untracked,
    (False, True, True): _simulate_on_links_shared, (True, True, True): _simulate_on_cores_shared,
    (False, False, True): _simulate_on_links_untracked_shared, (True, False, True): _simulate_on_cores_untracked_shared,
}


@njit(cache=True)
def _event_loop(graph, devices, op_device, persistent, work, on_cores, track_memory, sharing):
    """The loop, compiled once per transfer model, memory mode and sharing: with `on_cores`, `track_memory`
    and `sharing` constants, the other branches are compiled out. The links-only loop (modeled GPUs) is a third
    shorter than the one on cores, which makes it 15-20 % faster; without memory, `peak` is left at
    `persistent`; without `sharing` (no device's ops share its cores), the processor-sharing bookkeeping costs
    nothing."""
    literally(on_cores)
    literally(track_memory)
    literally(sharing)
    op_cost, op_alloc, tensor_bytes = graph.op_cost, graph.op_alloc, graph.tensor_bytes
    out_ptr, out_dst, out_tensor, edge_src = graph.out_ptr, graph.out_dst, graph.out_tensor, graph.edge_src
    in_ptr, in_src, in_tensor, tensor_src = graph.in_ptr, graph.in_src, graph.in_tensor, graph.tensor_src
    tensor_control = graph.tensor_control
    slots, link_bandwidth, link_latency = devices.slots, devices.link_bandwidth, devices.link_latency
    shared, share_cost = devices.shared, graph.share_cost
    send_fixed, send_per_byte = devices.send_fixed, devices.send_per_byte
    recv_fixed, recv_per_byte = devices.recv_fixed, devices.recv_per_byte
    n = op_device.shape[0]
    d = slots.shape[0]

    start, end, pending, uses, deferred = work.start, work.end, work.pending, work.uses, work.deferred
    finishing = work.finishing
    busy, free_slots, live, peak = work.busy, work.free_slots, work.live, work.peak
    link_free, link_bytes, sent = work.link_free, work.link_bytes, work.sent
    arrival, xfer_start, arrival_floor, recv_uses = work.arrival, work.xfer_start, work.arrival_floor, work.recv_uses
    control_pending, control_grouped = work.control_pending, work.control_grouped  # all 0 between calls
    ready_time, ready_key, ready_size = work.ready_time, work.ready_key, work.ready_size
    event_time, event_key = work.event_time, work.event_key
    remaining, finish_at, running, running_count = work.remaining, work.finish_at, work.running, work.running_count
    settled_at, replan = work.settled_at, work.replan

    start[:] = -1.0
    end[:] = -1.0
    last_time, last_key = work.last_time, work.last_key
    release_time, release_src, release_next = work.release_time, work.release_src, work.release_next
    link_head, link_tail, next_release = work.link_head, work.link_tail, work.next_release
    last_key[:] = -1
    link_head[:] = -1
    link_tail[:] = -1
    next_release[:] = np.inf
    pending[:] = graph.in_degree
    uses[:] = 0
    busy[:] = 0.0
    free_slots[:] = slots
    link_free[:] = 0.0
    link_bytes[:] = 0.0
    live[:] = persistent
    peak[:] = persistent
    ready_size[:] = 0
    running_count[:] = 0
    replan[:] = False
    ready_head = work.ready_head
    ready_head[:] = 0
    sent_count = 0
    missing_link = -1

    cost_of = work.cost_of
    for i in range(n):
        dev = op_device[i]
        cost_of[i] = op_cost[i, dev]
        # Only the (tensor, device) entries a cross-device edge uses are reset: the [t, d] tables are the
        # workspace's largest, and a placement touches a few of their entries. A tensor's edges all leave its
        # producer, so its entries are reset before they are counted below.
        for e in range(out_ptr[i], out_ptr[i + 1]):
            target = op_device[out_dst[e]]
            if target != dev:
                tensor = out_tensor[e]
                arrival[tensor, target] = -1.0
                xfer_start[tensor, target] = -1.0
                recv_uses[tensor, target] = 0
                control_grouped[e] = False
                if not track_memory and tensor_control[tensor]:  # nothing else to count: one pass
                    control_pending[out_dst[e], dev] += 1
        if not track_memory:
            continue
        # Readers that keep memory alive: same-device consumers and each distinct transfer of data.
        for e in range(out_ptr[i], out_ptr[i + 1]):
            target = op_device[out_dst[e]]
            if target == dev:
                uses[i] += 1
            else:
                tensor = out_tensor[e]
                if tensor_control[tensor]:
                    control_pending[out_dst[e], dev] += 1
                elif recv_uses[tensor, target] == 0:
                    uses[i] += 1
                recv_uses[tensor, target] += 1

    send_base = n + tensor_bytes.shape[0] * d
    holding = on_cores and devices.request_delay > 0.0
    request_delay = devices.request_delay
    first_idle, last_idle, held, held_timer = work.first_idle, work.last_idle, work.held, work.held_timer
    held_ready, send_made, send_queued = work.held_ready, work.send_made, work.send_queued
    executor_queues = holding and devices.executor_queues
    instant_sends = work.instant_sends
    instant_send_count = 0
    made_ready = np.zeros(d, dtype=np.bool_)  # per device: an op that takes a slot was made ready this instant
    recheck_key = (send_base + tensor_bytes.shape[0] * d) * 4 + EVENT_RECEIVED  # past every send id
    held_count = 0
    recheck = False
    if holding:
        first_idle[:] = np.inf
        last_idle[:] = -np.inf
    events = 0
    finishing_head = 0
    finishing_tail = 0
    for i in range(n):
        if pending[i] == 0:
            dev = op_device[i]
            if cost_of[i] == 0.0:
                finishing[finishing_tail] = -1 - i
                finishing_tail += 1
            else:
                _queue(ready_time, ready_key, ready_head, ready_size, dev, 0.0, i)

    deferred_count = 0
    now = 0.0
    key = -1  # the event being handled: what finishes now finishes with its key, for ties with later inputs
    finished = 0
    while True:
        # Finish the ops that finish now, in the order they did. An op that costs nothing (bookkeeping: Const,
        # Identity, Reshape...) starts and finishes the moment its inputs are there, without waiting for a
        # slot: TensorFlow's executor runs such inexpensive kernels inline, in the thread that made them ready.
        if holding and finishing_tail > 0:
            made_ready[:] = False
            instant_send_count = 0
        while finishing_head < finishing_tail:
            i = finishing[finishing_head]
            finishing_head += 1
            if i < 0:
                i = -1 - i
                dev = op_device[i]
                start[i] = now
                if track_memory:
                    _allocate_outputs(i, dev, now, d, uses, live, peak, op_alloc, release_time, release_src,
                                      release_next, link_head, next_release)
            else:
                dev = op_device[i]
            end[i] = now
            finished += 1
            if track_memory:
                # Inputs this op was the last reader of are freed.
                for k in range(in_ptr[i], in_ptr[i + 1]):
                    src = in_src[k]
                    if op_device[src] == dev:
                        uses[src] -= 1
                        if uses[src] == 0:
                            live[dev] -= op_alloc[src]
                    else:
                        tensor = in_tensor[k]
                        recv_uses[tensor, dev] -= 1
                        if recv_uses[tensor, dev] == 0:
                            live[dev] -= tensor_bytes[tensor]
                if uses[i] == 0:
                    live[dev] -= op_alloc[i]
            for e in range(out_ptr[i], out_ptr[i + 1]):
                j = out_dst[e]
                target = op_device[j]
                if target == dev:  # available at once, without an event round trip (most edges)
                    pending[j] -= 1
                    if pending[j] == 0:
                        if last_key[j] >= 0 and _before(now, key, last_time[j], last_key[j]):
                            # an input from another device is still on its way: ready when it lands
                            events = _push(event_time, event_key, events, last_time[j], last_key[j])
                        elif cost_of[j] == 0.0:
                            finishing[finishing_tail] = -1 - j
                            finishing_tail += 1
                        else:
                            deferred[deferred_count] = j
                            deferred_count += 1
                            made_ready[dev] = True
                    continue
                tensor = out_tensor[e]
                if tensor_control[tensor]:
                    # Grappler groups an op's control inputs from one other device behind a NoOp there, so one
                    # transfer orders them all: the last of them to finish carries it, the others only count.
                    control_pending[j, dev] -= 1
                    if control_pending[j, dev] > 0:
                        control_grouped[e] = True
                        pending[j] -= 1  # never the last: the carrying edge is still to come
                        continue
                first = arrival[tensor, target] < 0.0
                if on_cores:
                    if first:  # the sender serializes it when a slot frees; the receive follows
                        arrival[tensor, target] = np.inf
                        send = send_base + tensor * d + target
                        # Ahead of the ops waiting there: gRPC threads serve a tensor as soon as it exists.
                        _queue(ready_time, ready_key, ready_head, ready_size, dev, -1.0, send)
                        if holding:
                            send_made[send - send_base] = now
                            send_queued[send - send_base] = True
                            if executor_queues:  # inline or queued: known once the cascade is done
                                instant_sends[instant_send_count] = send - send_base
                                instant_send_count += 1
                    # Later consumers of the same tensor get their arrival when the receive is done.
                    continue
                if first:
                    bandwidth = link_bandwidth[dev, target]
                    if bandwidth <= 0.0:
                        missing_link = dev * d + target
                        bandwidth = 1e300
                    begin = max(now, link_free[dev, target])
                    link_free[dev, target] = begin + tensor_bytes[tensor] / bandwidth
                    link_bytes[dev, target] += tensor_bytes[tensor]
                    arrival[tensor, target] = link_free[dev, target] + link_latency[dev, target]
                    xfer_start[tensor, target] = begin
                    # The receiver holds the bytes from the transfer's start (TensorFlow allocates the
                    # destination before it copies); the sender's copy is released when the copy is done.
                    if track_memory and not tensor_control[tensor]:
                        if next_release[target] <= now:
                            _release_sent_copies(target, now, d, uses, live, op_alloc, release_time, release_src,
                                                 release_next, link_head, next_release)
                        live[target] += tensor_bytes[tensor]
                        if live[target] > peak[target]:
                            peak[target] = live[target]
                        link = dev * d + target
                        release_time[sent_count] = arrival[tensor, target]
                        release_src[sent_count] = i
                        release_next[sent_count] = -1
                        if link_head[link] >= 0:
                            release_next[link_tail[link]] = sent_count
                        else:
                            link_head[link] = sent_count
                        link_tail[link] = sent_count
                        if release_time[sent_count] < next_release[dev]:
                            next_release[dev] = release_time[sent_count]
                    sent[sent_count] = tensor * d + target
                    sent_count += 1
                # No event per edge: the consumer waits for its inputs as a count, and one event makes it
                # ready when its last input lands (keyed like that input's edge, so ties keep their order).
                landed = arrival[tensor, target]
                landed_key = e * 4 + EVENT_ARRIVAL
                if last_key[j] < 0 or _before(last_time[j], last_key[j], landed, landed_key):
                    last_time[j] = landed
                    last_key[j] = landed_key
                pending[j] -= 1
                if pending[j] == 0:
                    events = _push(event_time, event_key, events, last_time[j], last_key[j])
        # TensorFlow's executor runs a send inline, the moment its tensor is made, only when its producer made
        # nothing else ready on that thread (through the Identity and NoOp ops grappler folds away, which
        # cost nothing here); otherwise the send is queued behind the work the thread goes on with.
        for k in range(instant_send_count):
            send = instant_sends[k]
            send_queued[send] = made_ready[op_device[tensor_src[send // d]]]
        instant_send_count = 0
        finishing_head = 0
        finishing_tail = 0
        # Start every ready op that has a free slot on its device.
        while True:
          for dev in range(d):
            while free_slots[dev] > 0 and ready_size[dev] > 0:
                i = ready_key[dev, ready_head[dev]]
                if holding and i >= send_base and send_made[i - send_base] >= 0.0:  # -1: its request was taken up
                    made = send_made[i - send_base]
                    # Idle only once every event of this instant is handled: what they make ready runs first.
                    if not (events > 0 and event_time[0] <= now) and _idle_apart_from_sends(
                            dev, free_slots, slots, ready_key, ready_head, ready_size, send_base, deferred,
                            deferred_count, op_device):
                        last_idle[dev] = now
                        if first_idle[dev] == np.inf:
                            first_idle[dev] = now
                    wait = _taken_up_at(dev, (i - send_base) % d, now, made, send_queued[i - send_base], first_idle,
                                        last_idle, request_delay, link_latency)
                    if wait >= 0.0:  # its request is not taken up yet: hold it, and look again then
                        ready_head[dev] += 1
                        ready_size[dev] -= 1
                        held[held_count] = i
                        held_timer[held_count] = wait
                        held_ready[held_count] = made
                        held_count += 1
                        events = _push(event_time, event_key, events, wait, recheck_key)
                        continue
                ready_head[dev] += 1
                ready_size[dev] -= 1
                free_slots[dev] -= 1
                if on_cores and i >= send_base:  # a send: serialize, and put the bytes on the link
                    tensor = (i - send_base) // d
                    target = (i - send_base) % d
                    size = tensor_bytes[tensor]
                    cost = send_fixed + send_per_byte * size
                    busy[dev] += cost
                    bandwidth = link_bandwidth[dev, target]
                    if bandwidth <= 0.0:
                        missing_link = dev * d + target
                        bandwidth = 1e300
                    begin = max(now, link_free[dev, target])
                    link_free[dev, target] = begin + size / bandwidth
                    link_bytes[dev, target] += size
                    xfer_start[tensor, target] = begin
                    sent[sent_count] = tensor * d + target
                    sent_count += 1
                    arrival_floor[tensor, target] = max(now + cost, begin + size / bandwidth) + link_latency[dev, target]
                    receive = n + tensor * d + target
                    events = _push(event_time, event_key, events, begin + link_latency[dev, target],
                                   receive * 4 + EVENT_RECEIVED)
                    events = _push(event_time, event_key, events, now + cost, i * 4 + EVENT_SEND_DONE)
                    continue
                if on_cores and i >= n:  # a receive
                    tensor = (i - n) // d
                    cost = recv_fixed + recv_per_byte * tensor_bytes[tensor]
                    busy[dev] += cost
                    events = _push(event_time, event_key, events, now + cost, i * 4 + EVENT_OP_DONE)
                    continue
                start[i] = now
                if track_memory:
                    _allocate_outputs(i, dev, now, d, uses, live, peak, op_alloc, release_time, release_src,
                                      release_next, link_head, next_release)
                if sharing and shared[dev]:  # it slows the ops running beside it; their ends are planned below
                    _settle(dev, now, share_cost, running, running_count, settled_at, remaining)
                    running[dev, running_count[dev]] = i
                    running_count[dev] += 1
                    remaining[i] = 1.0
                    replan[dev] = True
                    continue
                cost = cost_of[i]
                busy[dev] += cost
                events = _push(event_time, event_key, events, now + cost, i * 4 + EVENT_OP_DONE)
            if sharing and replan[dev]:
                events = _replan(dev, now, share_cost, running, running_count, remaining, finish_at, event_time,
                                 event_key, events)
                replan[dev] = False
            # A device idle between two events of one instant is not idle: the later event may give it work
            # (an arrival that makes ops ready beside a send's tensor), which TensorFlow's executor runs first.
            if holding and not (events > 0 and event_time[0] <= now) and _idle_apart_from_sends(
                    dev, free_slots, slots, ready_key, ready_head, ready_size, send_base, deferred, deferred_count,
                    op_device):
                last_idle[dev] = now
                if first_idle[dev] == np.inf:
                    first_idle[dev] = now
                recheck = recheck or held_count > 0
          if not recheck:
              break
          # Held sends whose requests are now taken up go to the front of their sender's queue; held ops whose
          # device ran out of other work, or waited `request_delay`, to the back of its queue.
          recheck = False
          kept = 0
          released = 0
          for k in range(held_count):
              i = held[k]
              if i < n:
                  dev = op_device[i]
                  wait = held_ready[k] + request_delay
                  if last_idle[dev] >= held_ready[k] or now >= wait:
                      if cost_of[i] == 0.0:
                          finishing[finishing_tail] = -1 - i
                          finishing_tail += 1
                      else:
                          _queue(ready_time, ready_key, ready_head, ready_size, dev, now, i)
                      released += 1
                      continue
                  held[kept] = i
                  held_timer[kept] = wait
                  held_ready[kept] = held_ready[k]
                  kept += 1
                  continue
              tensor = (i - send_base) // d
              sender = op_device[tensor_src[tensor]]
              wait = _taken_up_at(sender, (i - send_base) % d, now, held_ready[k], send_queued[i - send_base],
                                  first_idle, last_idle, request_delay, link_latency)
              if wait < 0.0:
                  _queue(ready_time, ready_key, ready_head, ready_size, sender, -1.0, i)
                  send_made[i - send_base] = -1.0
                  released += 1
                  continue
              if wait != held_timer[k]:
                  events = _push(event_time, event_key, events, wait, recheck_key)
              held[kept] = i
              held_timer[kept] = wait
              held_ready[kept] = held_ready[k]
              kept += 1
          held_count = kept
          if released == 0:
              break
        if deferred_count > 0:
            # Ops an op just made ready join the queue only after the ops already waiting had their chance
            # at the slot it freed, as when their inputs arrived by events at the same time.
            for k in range(deferred_count):
                j = deferred[k]
                dev = op_device[j]
                _queue(ready_time, ready_key, ready_head, ready_size, dev, now, j)
            deferred_count = 0
            continue
        if finishing_tail > 0:  # free ops a released hold made ready
            continue
        if events == 0:
            break
        now, key, events = _pop(event_time, event_key, events)
        kind = key & 3
        if on_cores and kind == EVENT_SEND_DONE:
            tensor = ((key >> 2) - send_base) // d
            free_slots[op_device[tensor_src[tensor]]] += 1
        elif on_cores and kind == EVENT_RECEIVED:
            if holding and key == recheck_key:
                recheck = held_count > 0
                continue
            i = key >> 2
            target = (i - n) % d
            _queue(ready_time, ready_key, ready_head, ready_size, target, now, i)
        elif on_cores and kind == EVENT_OP_DONE and (key >> 2) >= n:
            i = key >> 2
            tensor = (i - n) // d
            target = (i - n) % d
            free_slots[target] += 1
            there = max(now, arrival_floor[tensor, target])
            arrival[tensor, target] = there
            src = tensor_src[tensor]
            for e in range(out_ptr[src], out_ptr[src + 1]):
                if out_tensor[e] == tensor and op_device[out_dst[e]] == target:
                    if control_grouped[e]:  # counted when its source finished
                        control_grouped[e] = False
                        continue
                    events = _push(event_time, event_key, events, there, e * 4 + EVENT_ARRIVAL)
        elif kind == EVENT_OP_DONE:
            i = key >> 2
            dev = op_device[i]
            if sharing and shared[dev]:
                if end[i] >= 0.0 or now != finish_at[i]:
                    continue  # an end planned before the running set changed
                # The ops left running speed up: bring them up to now, remove this one, plan theirs again.
                _settle(dev, now, share_cost, running, running_count, settled_at, remaining)
                for s in range(running_count[dev]):
                    if running[dev, s] == i:
                        running_count[dev] -= 1
                        running[dev, s] = running[dev, running_count[dev]]
                        break
                busy[dev] += now - start[i]
                replan[dev] = True
            free_slots[dev] += 1
            finishing[finishing_tail] = i
            finishing_tail += 1
        else:
            e = key >> 2
            j = out_dst[e]
            target = op_device[j]
            if not on_cores:  # links only: the op's last input landed, it is ready
                if cost_of[j] == 0.0:
                    finishing[finishing_tail] = -1 - j
                    finishing_tail += 1
                else:
                    _queue(ready_time, ready_key, ready_head, ready_size, target, now, j)
                continue
            src = edge_src[e]
            if op_device[src] != target:
                tensor = out_tensor[e]
                # The sender's copy is released once the transfer is done (first arrival event of it).
                if xfer_start[tensor, target] >= 0.0:
                    xfer_start[tensor, target] = -2.0 - xfer_start[tensor, target]  # mark counted, keep start
                    if track_memory and not tensor_control[tensor]:
                        live[target] += tensor_bytes[tensor]
                        if live[target] > peak[target]:
                            peak[target] = live[target]
                        uses[src] -= 1
                        if uses[src] == 0:
                            live[op_device[src]] -= op_alloc[src]
            pending[j] -= 1
            if pending[j] == 0:
                if executor_queues:
                    # A gRPC worker schedules what a received tensor made ready from its RPC thread, behind the
                    # work its inter-op threads go on with: it runs when the worker runs out of that work, or
                    # when another thread takes it up (`request_delay`), as a request does.
                    held[held_count] = j
                    held_timer[held_count] = now + request_delay
                    held_ready[held_count] = now
                    held_count += 1
                    events = _push(event_time, event_key, events, now + request_delay, recheck_key)
                    recheck = True
                elif cost_of[j] == 0.0:
                    finishing[finishing_tail] = -1 - j
                    finishing_tail += 1
                else:
                    _queue(ready_time, ready_key, ready_head, ready_size, target, now, j)

    if finished < n:  # ops that never ran left counts behind; the next call expects zeros
        control_pending[:, :] = 0
    step_time = 0.0
    for i in range(n):
        if end[i] > step_time:
            step_time = end[i]
    return step_time, finished, missing_link, sent_count
