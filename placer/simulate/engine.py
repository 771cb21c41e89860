"""The event loop of the simulator, compiled with numba: arrays in, step time, memory and timeline out.

It behaves like TensorFlow's executor: an op starts when its inputs have arrived and its device has a
free slot (inter-op threads on a CPU, one compute stream on a GPU), ready ops start in the order they
became ready; a tensor needed on another device is sent once per destination over the link between the
two devices, and a link carries one transfer at a time in the order they were requested.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Events are keyed id * 4 + kind, so that simultaneous events are handled in a fixed order.
EVENT_OP_DONE = 0  # a real op, or a receive (id n + tensor * d + device), finished
EVENT_ARRIVAL = 1  # one consumer edge's input is available on the consumer's device
EVENT_RECEIVED = 2  # a transfer reached its device; its receive now waits for a compute slot


@njit(cache=True)
def _push(heap_time, heap_key, size, time, key):
    """Binary min-heap on (time, key) in two arrays; returns the new size."""
    i = size
    heap_time[i] = time
    heap_key[i] = key
    while i > 0:
        parent = (i - 1) >> 1
        if heap_time[parent] < heap_time[i] or (heap_time[parent] == heap_time[i] and heap_key[parent] <= heap_key[i]):
            break
        heap_time[i], heap_time[parent] = heap_time[parent], heap_time[i]
        heap_key[i], heap_key[parent] = heap_key[parent], heap_key[i]
        i = parent
    return size + 1


@njit(cache=True)
def _pop(heap_time, heap_key, size):
    """Removes the smallest (time, key); returns (time, key, new size)."""
    time = heap_time[0]
    key = heap_key[0]
    size -= 1
    heap_time[0] = heap_time[size]
    heap_key[0] = heap_key[size]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        smallest = left
        right = left + 1
        if right < size and (heap_time[right] < heap_time[left] or (heap_time[right] == heap_time[left] and heap_key[right] < heap_key[left])):
            smallest = right
        if heap_time[i] < heap_time[smallest] or (heap_time[i] == heap_time[smallest] and heap_key[i] <= heap_key[smallest]):
            break
        heap_time[i], heap_time[smallest] = heap_time[smallest], heap_time[i]
        heap_key[i], heap_key[smallest] = heap_key[smallest], heap_key[i]
        i = smallest
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
    transfer_cpu,   # seconds of the receiving device's compute slot each transfer takes (0: none)
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

    ready_time = np.empty((d, n + t_count))
    ready_key = np.empty((d, n + t_count), dtype=np.int64)
    ready_size = np.zeros(d, dtype=np.int64)
    event_time = np.empty(n + 3 * m + 1)
    event_key = np.empty(n + 3 * m + 1, dtype=np.int64)
    events = 0

    for i in range(n):
        if pending[i] == 0:
            dev = op_device[i]
            ready_size[dev] = _push(ready_time[dev], ready_key[dev], ready_size[dev], 0.0, i)

    now = 0.0
    finished = 0
    while True:
        # Start every ready op that has a free slot on its device.
        for dev in range(d):
            while free_slots[dev] > 0 and ready_size[dev] > 0:
                ready_at, i, ready_size[dev] = _pop(ready_time[dev], ready_key[dev], ready_size[dev])
                free_slots[dev] -= 1
                if i >= n:  # a receive
                    busy[dev] += transfer_cpu
                    events = _push(event_time, event_key, events, now + transfer_cpu, i * 4 + EVENT_OP_DONE)
                    continue
                start[i] = now
                cost = op_cost[i, dev]
                busy[dev] += cost
                live[dev] += op_alloc[i]
                if live[dev] > peak[dev]:
                    peak[dev] = live[dev]
                events = _push(event_time, event_key, events, now + cost, i * 4 + EVENT_OP_DONE)
        if events == 0:
            break
        now, key, events = _pop(event_time, event_key, events)
        kind = key & 3
        if kind == EVENT_RECEIVED:
            i = key >> 2
            target = (i - n) % d
            ready_size[target] = _push(ready_time[target], ready_key[target], ready_size[target], now, i)
        elif kind == EVENT_OP_DONE and (key >> 2) >= n:
            i = key >> 2
            tensor = (i - n) // d
            target = (i - n) % d
            free_slots[target] += 1
            src = edge_src[first_edge[tensor]]
            for e in range(out_ptr[src], out_ptr[src + 1]):
                if out_tensor[e] == tensor and op_device[out_dst[e]] == target:
                    events = _push(event_time, event_key, events, now, e * 4 + EVENT_ARRIVAL)
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
                if target == dev:
                    events = _push(event_time, event_key, events, now, e * 4 + EVENT_ARRIVAL)
                    continue
                tensor = out_tensor[e]
                first = arrival[tensor, target] < 0.0
                if first:
                    bandwidth = link_bandwidth[dev, target]
                    if bandwidth <= 0.0:
                        missing_link = dev * d + target
                        bandwidth = 1e300
                    begin = max(now, link_free[dev, target])
                    done = begin + link_latency[dev, target] + tensor_bytes[tensor] / bandwidth
                    link_free[dev, target] = done
                    link_bytes[dev, target] += tensor_bytes[tensor]
                    arrival[tensor, target] = done
                    xfer_start[tensor, target] = begin
                if transfer_cpu > 0.0:
                    if first:
                        receive = n + tensor * d + target
                        events = _push(event_time, event_key, events, arrival[tensor, target], receive * 4 + EVENT_RECEIVED)
                else:
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
