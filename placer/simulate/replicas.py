"""A data-parallel step priced on the simulator: one replica's step simulated on its group of devices, then the
exchange of its gradients with the other replicas on the machine's links, overlapped with the backward as a
bucketed all-reduce overlaps it.

Replicas are alike and run at once, so one replica's simulated timeline is every replica's; what they share is
the exchange. Not modeled: contention of replicas on a device they share (the host CPU of a GPU server, where
the replicas' ops and gradients rarely are), the all-reduce's own compute (its reductions ride on the copy),
and its buffers' memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from placer.devices import DeviceSet, Link
from placer.errors import ReplicaError
from placer.schedule.micro_batch import Gradient
from placer.simulate.result import SimResult

BUCKET_BYTES = 25 * 2**20
"""Gradients are all-reduced in buckets of at least this many bytes, in the order they become ready: the default
bucket of PyTorch's DDP; one ring pass per bucket pays the link's latency once rather than per tensor."""


@dataclass(frozen=True)
class ReplicatedStep:
    """One simulated data-parallel step: seconds, and where they went."""

    step_time: float
    replica_step_time: float
    """One replica's step alone, its gradients not exchanged."""
    exchange: float
    """Seconds the gradients' exchange takes on the busiest ring, back to back (as if nothing overlapped it)."""
    exposed: float
    """Seconds the exchange adds to the replica's step: what the backward did not hide."""
    gradient_bytes: int
    degree: int
    peak_memory: Mapping[str, int] = field(default_factory=dict)
    """Bytes per device of the machine: its replica's peak (each replica holds the weights and the optimizer's
    state); a device the replicas share holds every replica's share."""
    out_of_memory: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.out_of_memory


def ring_all_reduce_seconds(nbytes: float, degree: int, link: Link) -> float:
    """A ring all-reduce of `nbytes` over `degree` devices joined by `link`: reduce-scatter then all-gather, each
    2 (d - 1) / d of the bytes over every link of the ring at once, and 2 (d - 1) steps of its latency."""
    if degree <= 1 or nbytes <= 0:
        return 0.0
    return 2 * (degree - 1) / degree * nbytes / link.bandwidth + 2 * (degree - 1) * link.latency


def ring_link(machine: DeviceSet, ring: Sequence[str], default: Link | None = None) -> Link:
    """The link a ring over `ring`'s devices (in that order) runs at: its slowest hop's bandwidth, its slowest
    hop's latency."""
    links = {(link.source, link.target): link for link in machine.links}
    hops = []
    for a, b in zip(ring, [*ring[1:], ring[0]]):
        link = links.get((a, b), default)
        if link is None:
            raise ReplicaError(f"{machine.name} has no link from {a} to {b}, which a ring all-reduce over "
                               f"{', '.join(ring)} needs")
        hops.append(link)
    return Link(ring[0], ring[-1], min(l.bandwidth for l in hops), max(l.latency for l in hops))


def replicated_step(replica: SimResult, gradients: Sequence[Gradient], machine: DeviceSet,
                    devices: Sequence[Mapping[str, str]], *, default_link: Link | None = None,
                    bucket_bytes: int = BUCKET_BYTES) -> ReplicatedStep:
    """The data-parallel step of `len(devices)` replicas, each simulated as `replica` (a timeline of one replica's
    step: `Simulator.simulate(..., timeline=True)`), whose `gradients` (`placer.schedule.micro_batch.gradients`
    of the replica's graph) are all-reduced, for each device of a replica, over the ring of that device's copies
    (`devices[r]`: replica r's device names -> the machine's, `placer.replicas.replica_devices`).

    Each device's gradients go out in buckets of `bucket_bytes` as they become ready, one bucket at a time on its
    ring, while the backward goes on; the update waits for the exchange: the step ends when the last bucket is
    reduced plus what the replica ran after its last gradient was ready (its updates)."""
    degree = len(devices)
    if not replica.ops:
        raise ValueError("replicated_step needs the replica's timeline: simulate it with timeline=True")
    ended = {op.name: (op.end, op.device) for op in replica.ops}
    per_device: dict[str, list[tuple[float, int]]] = {}
    for gradient in gradients:
        producer = gradient.tensor.rsplit(":", 1)[0]
        if producer not in ended:
            raise ValueError(f"gradient {gradient.tensor} is not in the replica's timeline")
        end, device = ended[producer]
        per_device.setdefault(device, []).append((end, gradient.bytes))
    last_ready = max((end for ready in per_device.values() for end, _ in ready), default=0.0)
    after_gradients = max(replica.step_time - last_ready, 0.0)
    done, busiest = 0.0, 0.0
    for device, ready in per_device.items():
        ring = list(dict.fromkeys(mapping[device] for mapping in devices))
        if len(ring) == 1:  # every replica's copy is this one device: the sum is local
            continue
        link = ring_link(machine, ring, default_link)
        clock, exchange, bucket, bucket_ready = 0.0, 0.0, 0, 0.0
        ready.sort()
        for index, (end, nbytes) in enumerate(ready):
            bucket, bucket_ready = bucket + nbytes, end
            if bucket >= bucket_bytes or index == len(ready) - 1:
                seconds = ring_all_reduce_seconds(bucket, len(ring), link)
                clock = max(clock, bucket_ready) + seconds
                exchange += seconds
                bucket = 0
        done, busiest = max(done, clock), max(busiest, exchange)
    step = max(replica.step_time, done + after_gradients) if done else replica.step_time
    peaks: dict[str, int] = {}
    for device, peak in replica.peak_memory.items():
        used_by = [mapping[device] for mapping in devices]
        for target in set(used_by):
            peaks[target] = int(peak) * used_by.count(target)
    capacity = {d.name: d.memory_bytes for d in machine.devices}
    full = tuple(sorted(d for d, peak in peaks.items() if capacity.get(d) is not None and peak > capacity[d]))
    return ReplicatedStep(step, replica.step_time, busiest, step - replica.step_time,
                          sum(g.bytes for g in gradients), degree, peaks, full)
