"""Fit what the simulator cannot profile op by op: link costs and fixed per-step overheads, on a real target.

`calibrate(measurer)` runs small probe graphs between the first two devices of a target, every probe
timed with everything on device 0 and split over devices 0 and 1, side by side in interleaved rounds
(`placer.cost.compare`), and returns a `Calibration`: per-step overhead of one device, extra overhead of
a step that spans two devices, the receiving core's time per transfer, and the link's latency and
bandwidth, each with a bootstrap confidence interval, plus every probe's residual. The lines are fitted
with Theil-Sen (the median of pairwise slopes), so one disturbed probe does not move the fit.
`Calibration.apply(devices, config)` turns it into links and a `SimulatorConfig` for those devices.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from placer.devices import DeviceSet, Link
from placer.errors import ProfileError

FILE_FORMAT = "placer.calibration"
PARAMETERS = ("step_overhead", "spanning_overhead", "transfer_cpu", "latency", "bandwidth")
POOR_FIT = 0.25
"""A probe whose fitted transfer cost misses its measured one by more than this share of the probe's
step time makes the calibration a poor fit: predictions from it are flagged."""


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
    """The probe measurements the fit came from, for the record: per probe, each round's seconds."""
    target: str = ""
    """The target it was made on (e.g. "local:2")."""
    devices: tuple[str, ...] = ()
    """Full names of the target's devices: a calibration applies to these devices only."""
    intervals: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """90 % bootstrap interval of each parameter (rounds resampled)."""
    residuals: Mapping[str, float] = field(default_factory=dict)
    """Per probe: measured minus fitted transfer cost, as a share of the probe's split step time."""
    rounds: int = 0

    @property
    def poor_fit(self) -> bool:
        return any(abs(r) > POOR_FIT for r in self.residuals.values())

    def links(self, devices: DeviceSet) -> tuple[Link, ...]:
        return tuple(Link(a.name, b.name, self.bandwidth, self.latency) for a in devices for b in devices if a is not b)

    def check_devices(self, devices: DeviceSet) -> None:
        """Refuse devices the calibration was not made for (other worker names or another device count)."""
        if self.devices and tuple(self.devices) != tuple(devices.names):
            raise ProfileError(
                f"this calibration was made on {self.target or 'another target'} with devices "
                f"{', '.join(self.devices)}, not on {', '.join(devices.names)}: run `placer calibrate "
                "--cluster TARGET --out FILE` on the target you simulate")

    def apply(self, devices: DeviceSet, config=None):
        """The device set with fitted links, and a simulator config carrying the overheads."""
        from placer.simulate import SimulatorConfig

        self.check_devices(devices)
        if self.poor_fit:
            warnings.warn(f"the calibration of {self.target or 'this target'} fits its probes poorly "
                          f"({self.describe_residuals()}): predictions from it are unreliable; calibrate again "
                          "on a quiet machine", RuntimeWarning, stacklevel=2)
        config = config or SimulatorConfig()
        return (DeviceSet(devices.devices, self.links(devices), devices.name),
                replace(config, step_overhead=self.step_overhead, spanning_overhead=self.spanning_overhead,
                        transfer_cpu=self.transfer_cpu))

    def describe_residuals(self) -> str:
        worst = sorted(self.residuals.items(), key=lambda item: -abs(item[1]))[:3]
        return "worst probes: " + ", ".join(f"{name} {100 * value:+.0f}%" for name, value in worst)

    def describe(self) -> str:
        """The fit and its quality, for a person."""
        units = {"step_overhead": (1e3, "ms"), "spanning_overhead": (1e3, "ms"), "transfer_cpu": (1e6, "us"),
                 "latency": (1e6, "us"), "bandwidth": (1e-9, "GB/s")}
        lines = [f"calibration of {self.target or 'a target'} ({self.rounds} interleaved rounds)"]
        for name in PARAMETERS:
            scale, unit = units[name]
            low, high = self.intervals.get(name, (math.nan, math.nan))
            lines.append(f"  {name:<18} {getattr(self, name) * scale:10.3f} {unit:<5}  90% interval "
                         f"[{low * scale:.3f}, {high * scale:.3f}]")
        lines.append(f"  fit: {self.describe_residuals()}"
                     + ("  POOR FIT: calibrate again on a quiet machine" if self.poor_fit else ""))
        return "\n".join(lines)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"format": FILE_FORMAT, **asdict(self)}
        data["intervals"] = {k: list(v) for k, v in self.intervals.items()}
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)
        return path


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration file; ProfileError naming what is wrong with a malformed one."""
    try:
        data = json.loads(Path(path).read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ProfileError(f"cannot read calibration {path}: {getattr(error, 'strerror', None) or error}") from None
    if not isinstance(data, dict) or data.pop("format", None) != FILE_FORMAT:
        raise ProfileError(f"{path} is not a placer calibration file (no \"format\": \"{FILE_FORMAT}\"): "
                           "make one with `placer calibrate --cluster local:2 --out FILE`")
    known = {name for name in Calibration.__dataclass_fields__}
    missing = [name for name in PARAMETERS if not isinstance(data.get(name), (int, float))]
    if missing or set(data) - known:
        raise ProfileError(f"{path} is a damaged calibration: "
                           + (f"no number for {', '.join(missing)}" if missing else
                              f"unknown field(s) {', '.join(sorted(set(data) - known))}")
                           + "; calibrate again")
    data["devices"] = tuple(data.get("devices") or ())
    data["intervals"] = {k: tuple(v) for k, v in (data.get("intervals") or {}).items()}
    return Calibration(**data)


@dataclass(frozen=True)
class _ProbeTiming:
    seconds: float
    ok: bool


def calibrate(
    measurer,
    *,
    sizes: Sequence[int] = (1_000, 10_000, 100_000, 1_000_000, 4_000_000),
    counts: Sequence[int] = (1, 4, 16, 32),
    rounds: int = 5,
    progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
    seed: int = 0,
) -> Calibration:
    """Fit overheads and link costs between devices 0 and 1 of `measurer` from probe graphs.

    Size probes send one float32 tensor of each size (elements) from device 0 to device 1; count probes
    send k small tensors at once. Each probe also runs with everything on device 0; the difference,
    taken within one round so that the machine's drift cancels, is what the transfers cost.
    """
    from placer.cost import compare
    from placer.placement import Placement

    if len(measurer.devices) < 2:
        raise ProfileError("calibrating links needs a target with at least two devices (e.g. local:2)")
    if rounds < 2:
        raise ProfileError(f"calibrating needs at least 2 rounds for its intervals, got {rounds}")
    devices = measurer.devices
    probes = {f"size {n}": (n, 1) for n in sizes}
    probes.update({f"count {k}": (1_000, k) for k in counts})
    graphs = {name: _probe_graph(elements, tensors) for name, (elements, tensors) in probes.items()}
    placements = {}
    for name, graph in graphs.items():
        placements[(name, "local")] = (graph, Placement.single_device(graph, devices, 0))
        split = {op.name: devices[1 if op.name.startswith("receiver") else 0].name for op in graph.ops}
        placements[(name, "split")] = (graph, Placement.from_op_devices(graph, devices, split))

    def evaluate(item) -> _ProbeTiming:
        graph, placement = item
        result = measurer.measure(graph, placement)
        if not result.ok:
            raise ProfileError(f"a calibration probe ({graph.name}) failed: {result.describe()}")
        return _ProbeTiming(result.median, True)

    compared = compare(evaluate, placements, rounds, progress=progress)
    timings = {name: {side: [t.seconds for t in compared[(name, side)].timings] for side in ("local", "split")}
               for name in probes}
    return fit_calibration(probes, timings, target=str(getattr(measurer, "target", "")),
                           devices=tuple(devices.names), seed=seed)


def fit_calibration(probes: Mapping[str, tuple[int, int]], timings: Mapping[str, Mapping[str, Sequence[float]]], *,
                    target: str = "", devices: tuple[str, ...] = (), seed: int = 0, resamples: int = 200) -> Calibration:
    """The calibration from probe timings: probes maps a name to (elements, tensors) — one tensor for a size
    probe, 1,000 elements for a count probe — and timings maps it to each round's "local" and "split"
    seconds. A pure function, so the fit can be checked on timings whose answer is known."""
    names = list(probes)
    local = np.array([timings[n]["local"] for n in names], dtype=float)  # [probe, round]
    split = np.array([timings[n]["split"] for n in names], dtype=float)
    if local.ndim != 2 or local.shape != split.shape or local.shape[1] < 1:
        raise ProfileError("every probe needs the same number of local and split timings")
    sizes = [i for i, n in enumerate(names) if n.startswith("size")]
    counts = [i for i, n in enumerate(names) if n.startswith("count")]
    if len(sizes) < 2 or len(counts) < 2:
        raise ProfileError("calibrating needs at least two size probes and two count probes")

    def fit(rounds: np.ndarray) -> dict[str, float]:
        extra = np.median(split[:, rounds] - local[:, rounds], axis=1)  # paired within a round: drift cancels
        slope, one_transfer = _theil_sen(np.array([4.0 * probes[names[i]][0] for i in sizes]), extra[sizes])
        per_transfer, spanning = _theil_sen(np.array([float(probes[names[i]][1]) for i in counts]), extra[counts])
        per_transfer, spanning = max(per_transfer, 0.0), max(spanning, 0.0)
        return {"step_overhead": float(np.min(np.median(local[counts][:, rounds], axis=1))),
                "spanning_overhead": spanning, "transfer_cpu": per_transfer,
                "latency": max(one_transfer - spanning - per_transfer, 0.0),
                "bandwidth": 1.0 / slope if slope > 0 else math.inf, "_slope": max(slope, 0.0)}

    all_rounds = np.arange(local.shape[1])
    best = fit(all_rounds)
    rng = np.random.default_rng(seed)
    draws = [fit(rng.choice(all_rounds, size=len(all_rounds))) for _ in range(resamples)]
    intervals = {name: (float(np.percentile([d[name] for d in draws], 5)),
                        float(np.percentile([d[name] for d in draws], 95))) for name in PARAMETERS}
    extra = np.median(split - local, axis=1)
    split_time = np.median(split, axis=1)
    residuals = {}
    for i in sizes:
        fitted = best["spanning_overhead"] + best["transfer_cpu"] + best["latency"] + 4.0 * probes[names[i]][0] * best["_slope"]
        residuals[names[i]] = float((extra[i] - fitted) / split_time[i])
    for i in counts:
        fitted = best["spanning_overhead"] + best["transfer_cpu"] * probes[names[i]][1]
        residuals[names[i]] = float((extra[i] - fitted) / split_time[i])
    return Calibration(
        **{name: float(best[name]) for name in PARAMETERS},
        samples={n: {"local": list(map(float, timings[n]["local"])), "split": list(map(float, timings[n]["split"]))}
                 for n in names},
        target=target, devices=tuple(devices), intervals=intervals, residuals=residuals, rounds=local.shape[1],
    )


def _theil_sen(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Slope and intercept of the median of pairwise slopes: one outlying point moves it little."""
    slopes = [(y[j] - y[i]) / (x[j] - x[i]) for i in range(len(x)) for j in range(i + 1, len(x)) if x[j] != x[i]]
    slope = float(np.median(slopes))
    return slope, float(np.median(y - slope * x))


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
