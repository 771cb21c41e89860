"""The event loop of the simulator, compiled with numba: arrays in, step time, memory and timeline out.

It behaves like TensorFlow's executor: an op starts when its inputs have arrived and its device has a
free slot (inter-op threads on a CPU, one compute stream on a GPU), ready ops start in the order they
became ready. A tensor needed on another device is sent once per destination:
- Over the link between the two devices, which carries one transfer's bytes at a time in the order they
  were requested (bytes / bandwidth), while latency overlaps: it delays a transfer, it does not hold the
  link, so many small tensors in flight pay it once, not once each (probes on the gRPC testbed: 32 small
  tensors at once cost far less than 32 single-tensor latencies).
- On gRPC workers, also on both cores: the sender serializes the tensor (a task in the sender's ready
  queue, `send_fixed + send_per_byte * bytes` of one slot) and the receiver deserializes it (`recv_fixed
  + recv_per_byte * bytes`); the receiver starts once the first bytes are in (latency after the send
  starts) and the tensor is there when both ends are done. Probes with a busy chain on one worker
  measured both costs; with both workers idle, one transfer took about the larger of the two, not their
  sum (`placer calibrate`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Events are keyed id * 4 + kind, so that simultaneous events are handled in a fixed order.
EVENT_OP_DONE = 0  # a real op, or a receive (id n + tensor * d + device), finished
EVENT_ARRIVAL = 1  # one consumer edge's input is available on the consumer's device
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


@njit(cache=True)
def simulate_step(
    op_device,      # [n] device index of each op
    op_cost,        # [n, d] seconds of each op on each device
    op_alloc,       # [n] bytes each op's outputs occupy on its device
    out_ptr,        # [n + 1] CSR over consumer edges of each op
    out_dst,        # [m] consumer op of each edge
    out_tensor,     # [m] tensor id the edge carries (transfers are shared per tensor and destination)
    in_ptr,         # [n + 1] CSR over input edges of each op
    in_edge,        # [m] edge index (into out_*) of each input edge
    edge_src,       # [m] producer op of each edge
    tensor_bytes,   # [t] bytes of each tensor
    in_degree,      # [n] input edges per op
    slots,          # [d] ops a device runs at once
    link_bandwidth,  # [d, d] bytes per second (0: no link)
    link_latency,   # [d, d] seconds
    persistent,     # [d] bytes resident all step (variables)
    send_fixed,     # seconds of the sending device's slot per transfer (all four 0: links only)
    send_per_byte,  # ... and per byte sent
    recv_fixed,     # seconds of the receiving device's slot per transfer
    recv_per_byte,  # ... and per byte received
):
    n = op_device.shape[0]
    m = out_dst.shape[0]
    d = slots.shape[0]
    t_count = tensor_bytes.shape[0]

    start = np.full(n, -1.0)
    end = np.full(n, -1.0)
    pending = in_degree.copy()
    busy = np.zeros(d)
    free_slots = slots.copy()
    link_free = np.zeros((d, d))
    link_bytes = np.zeros((d, d))
    arrival = np.full((t_count, d), -1.0)  # when tensor t reached device d (-1: not sent)
    xfer_start = np.full((t_count, d), -1.0)
    live = persistent.astype(np.float64).copy()
    peak = live.copy()
    uses = np.zeros(n, dtype=np.int64)  # outstanding readers of each op's outputs on its own device
    recv_uses = np.zeros((t_count, d), dtype=np.int64)  # outstanding readers of a received tensor
    missing_link = -1
    on_cores = send_fixed > 0.0 or send_per_byte > 0.0 or recv_fixed > 0.0 or recv_per_byte > 0.0
    arrival_floor = np.zeros((t_count, d))  # a received tensor is there no earlier than its last byte
    first_edge = np.full(t_count, -1, dtype=np.int64)
    for e in range(m):
        if first_edge[out_tensor[e]] < 0:
            first_edge[out_tensor[e]] = e

    # Readers that keep memory alive: same-device consumers and each distinct transfer.
    for i in range(n):
        for e in range(out_ptr[i], out_ptr[i + 1]):
            j = out_dst[e]
            if op_device[j] == op_device[i]:
                uses[i] += 1
            else:
                tensor = out_tensor[e]
                if recv_uses[tensor, op_device[j]] == 0:
                    uses[i] += 1
                recv_uses[tensor, op_device[j]] += 1

    # A device's queue holds its ops, a receive per tensor and, on cores, a send per tensor and destination.
    capacity = n + t_count * (d if on_cores else 1)
    ready_time = np.empty((d, capacity))
    ready_key = np.empty((d, capacity), dtype=np.int64)
    ready_size = np.zeros(d, dtype=np.int64)
    send_base = n + t_count * d
    event_time = np.empty(n + 4 * m + 1)
    event_key = np.empty(n + 4 * m + 1, dtype=np.int64)
    events = 0

    for i in range(n):
        if pending[i] == 0:
            dev = op_device[i]
            ready_size[dev] = _push(ready_time[dev], ready_key[dev], ready_size[dev], 0.0, i)

    deferred = np.empty(n, dtype=np.int64)  # ops made ready by a same-device input, not yet queued
    deferred_count = 0
    now = 0.0
    finished = 0
    while True:
        # Start every ready op that has a free slot on its device.
        for dev in range(d):
            while free_slots[dev] > 0 and ready_size[dev] > 0:
                ready_at, i, ready_size[dev] = _pop(ready_time[dev], ready_key[dev], ready_size[dev])
                free_slots[dev] -= 1
                if i >= send_base:  # a send: serialize, and put the bytes on the link
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
                    arrival_floor[tensor, target] = max(now + cost, begin + size / bandwidth) + link_latency[dev, target]
                    receive = n + tensor * d + target
                    events = _push(event_time, event_key, events, begin + link_latency[dev, target],
                                   receive * 4 + EVENT_RECEIVED)
                    events = _push(event_time, event_key, events, now + cost, i * 4 + EVENT_SEND_DONE)
                    continue
                if i >= n:  # a receive
                    tensor = (i - n) // d
                    cost = recv_fixed + recv_per_byte * tensor_bytes[tensor]
                    busy[dev] += cost
                    events = _push(event_time, event_key, events, now + cost, i * 4 + EVENT_OP_DONE)
                    continue
                start[i] = now
                cost = op_cost[i, dev]
                busy[dev] += cost
                live[dev] += op_alloc[i]
                if live[dev] > peak[dev]:
                    peak[dev] = live[dev]
                events = _push(event_time, event_key, events, now + cost, i * 4 + EVENT_OP_DONE)
        if deferred_count > 0:
            # Ops an op just made ready join the queue only after the ops already waiting had their chance
            # at the slot it freed, as when their inputs arrived by events at the same time.
            for k in range(deferred_count):
                j = deferred[k]
                dev = op_device[j]
                ready_size[dev] = _push(ready_time[dev], ready_key[dev], ready_size[dev], now, j)
            deferred_count = 0
            continue
        if events == 0:
            break
        now, key, events = _pop(event_time, event_key, events)
        kind = key & 3
        if kind == EVENT_SEND_DONE:
            tensor = ((key >> 2) - send_base) // d
            free_slots[op_device[edge_src[first_edge[tensor]]]] += 1
        elif kind == EVENT_RECEIVED:
            i = key >> 2
            target = (i - n) % d
            ready_size[target] = _push(ready_time[target], ready_key[target], ready_size[target], now, i)
        elif kind == EVENT_OP_DONE and (key >> 2) >= n:
            i = key >> 2
            tensor = (i - n) // d
            target = (i - n) % d
            free_slots[target] += 1
            there = max(now, arrival_floor[tensor, target])
            arrival[tensor, target] = there
            src = edge_src[first_edge[tensor]]
            for e in range(out_ptr[src], out_ptr[src + 1]):
                if out_tensor[e] == tensor and op_device[out_dst[e]] == target:
                    events = _push(event_time, event_key, events, there, e * 4 + EVENT_ARRIVAL)
        elif kind == EVENT_OP_DONE:
            i = key >> 2
            dev = op_device[i]
            end[i] = now
            finished += 1
            free_slots[dev] += 1
            # Inputs this op was the last reader of are freed.
            for k in range(in_ptr[i], in_ptr[i + 1]):
                e = in_edge[k]
                src = edge_src[e]
                if op_device[src] == dev:
                    uses[src] -= 1
                    if uses[src] == 0:
                        live[dev] -= op_alloc[src]
                else:
                    tensor = out_tensor[e]
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
                        deferred[deferred_count] = j
                        deferred_count += 1
                    continue
                tensor = out_tensor[e]
                first = arrival[tensor, target] < 0.0
                if on_cores:
                    if first:  # the sender serializes it when a slot frees; the receive follows
                        arrival[tensor, target] = np.inf
                        send = send_base + tensor * d + target
                        # Ahead of the ops waiting there: gRPC threads serve a tensor as soon as it exists.
                        ready_size[dev] = _push(ready_time[dev], ready_key[dev], ready_size[dev], -1.0, send)
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
                events = _push(event_time, event_key, events, arrival[tensor, target], e * 4 + EVENT_ARRIVAL)
        else:
            e = key >> 2
            j = out_dst[e]
            target = op_device[j]
            src = edge_src[e]
            if op_device[src] != target:
                tensor = out_tensor[e]
                # The sender's copy is released once the transfer is done (first arrival event of it).
                if xfer_start[tensor, target] >= 0.0:
                    xfer_start[tensor, target] = -2.0 - xfer_start[tensor, target]  # mark counted, keep start
                    live[target] += tensor_bytes[tensor]
                    if live[target] > peak[target]:
                        peak[target] = live[target]
                    uses[src] -= 1
                    if uses[src] == 0:
                        live[op_device[src]] -= op_alloc[src]
            pending[j] -= 1
            if pending[j] == 0:
                ready_size[target] = _push(ready_time[target], ready_key[target], ready_size[target], now, j)

    step_time = 0.0
    for i in range(n):
        if end[i] > step_time:
            step_time = end[i]
    transfer_start = -2.0 - xfer_start  # back to start times; -1 where nothing was sent
    return step_time, start, end, busy, peak, link_bytes, arrival, transfer_start, finished, missing_link
