"""Fit what the simulator cannot profile op by op: link costs and fixed per-step overheads, on a real target.

`calibrate(measurer)` runs small probe graphs between the first two devices of a target and returns a
`Calibration`: per-step overhead of one device, extra overhead of a step that spans two devices,
the receiving core's time per transfer, and the link's latency and bandwidth. `Calibration.apply(devices, config)` turns it into links and a
`SimulatorConfig` for those devices.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from placer.devices import DeviceSet, Link
from placer.errors import ProfileError


@dataclass(frozen=True)
class Calibration:
    step_overhead: float
    """Seconds a step costs beyond its ops, on one device (session.run, one RPC round trip)."""
    spanning_overhead: float
    """Extra seconds per additional device a step runs on (one more worker to start and wait for)."""
    transfer_cpu: float
    """Seconds of the receiving device's core each transfer takes (gRPC receive and deserialization)."""
    latency: float
    """Seconds per transfer on the link beyond bytes / bandwidth and the receiving core's time."""
    bandwidth: float
    """Bytes per second between two devices."""
    samples: dict
    """The probe measurements the fit came from, for the record."""

    def links(self, devices: DeviceSet) -> tuple[Link, ...]:
        return tuple(Link(a.name, b.name, self.bandwidth, self.latency) for a in devices for b in devices if a is not b)

    def apply(self, devices: DeviceSet, config=None):
        """The device set with fitted links, and a simulator config carrying the overheads."""
        from placer.simulate import SimulatorConfig

        config = config or SimulatorConfig()
        return (DeviceSet(devices.devices, self.links(devices), devices.name),
                replace(config, step_overhead=self.step_overhead, spanning_overhead=self.spanning_overhead,
                        transfer_cpu=self.transfer_cpu))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"format": "placer.calibration", **asdict(self)}, indent=1))
        return path


def load_calibration(path: str | Path) -> Calibration:
    data = json.loads(Path(path).read_text())
    if data.pop("format", None) != "placer.calibration":
        raise ProfileError(f"{path} is not a placer calibration file")
    return Calibration(**data)


def calibrate(
    measurer,
    *,
    sizes: Sequence[int] = (1_000, 100_000, 1_000_000, 4_000_000),
    counts: Sequence[int] = (1, 8, 32),
) -> Calibration:
    """Fit overheads and link costs between devices 0 and 1 of `measurer` from probe graphs.

    Size probes send one float32 tensor of each size (elements) from device 0 to device 1; count probes
    send k small tensors at once. Each probe also runs with everything on device 0, and the difference is
    what the transfer costs.
    """
    from placer.placement import Placement

    if len(measurer.devices) < 2:
        raise ProfileError("calibrating links needs a target with at least two devices (e.g. local:2)")

    def cost(elements: int, tensors: int) -> tuple[float, float]:
        graph = _probe_graph(elements, tensors)
        devices = measurer.devices
        local = Placement.single_device(graph, devices, 0)
        split = Placement.from_op_devices(
            graph, devices, {op.name: devices[1 if op.name.startswith("receiver") else 0].name for op in graph.ops}
        )
        results = [measurer.measure(graph, p) for p in (local, split)]
        for result in results:
            if not result.ok:
                raise ProfileError(f"a calibration probe failed: {result.describe()}")
        return results[0].median, results[1].median

    by_size = {n: cost(n, 1) for n in sizes}
    by_count = {k: cost(1_000, k) for k in counts}
    # Transfer time of one tensor versus its bytes: slope 1 / bandwidth.
    size_bytes = np.array([4.0 * n for n in sizes])
    size_extra = np.array([split - local for local, split in by_size.values()])
    slope, one_transfer = np.polyfit(size_bytes, size_extra, 1)
    # Extra time versus the number of small transfers sent at once: they queue on the receiving core
    # (slope: its time per transfer); the intercept is the cost of running a step on a second worker.
    count_extra = np.array([split - local for local, split in by_count.values()])
    per_transfer, spanning = np.polyfit(np.array(counts, dtype=float), count_extra, 1)
    per_transfer, spanning = max(per_transfer, 0.0), max(spanning, 0.0)
    trivial = min(local for local, _ in by_count.values())
    return Calibration(
        step_overhead=float(trivial),
        spanning_overhead=float(spanning),
        transfer_cpu=float(per_transfer),
        latency=float(max(one_transfer - spanning - per_transfer, 0.0)),
        bandwidth=float(1.0 / slope) if slope > 0 else float("inf"),
        samples={"by_size": {str(k): v for k, v in by_size.items()}, "by_count": {str(k): v for k, v in by_count.items()}},
    )


def _probe_graph(elements: int, tensors: int):
    import tensorflow as tf

    from placer.graph.build import graph_from_function

    def build():
        sums = []
        for i in range(tensors):
            with tf.name_scope(f"sender_{i}"):
                x = tf.random.uniform([elements], seed=i)
            with tf.name_scope(f"receiver_{i}"):
                # Read one element: the whole tensor is still sent, but receiving costs no compute that
                # moving off the sender's core would save.
                sums.append(x[0])
        with tf.name_scope("receiver_total"):
            total = tf.add_n(sums) if len(sums) > 1 else sums[0]
        # Fetched as the loss: grappler prunes side-effect-free ops that only a control edge would run.
        return tf.group(total, name="train_op"), total

    return graph_from_function(build, name=f"probe-{elements}x{tensors}")
