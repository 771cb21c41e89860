"""A calibration: what a transfer between workers and a step's fixed overheads cost on one real target, as
`placer calibrate` fitted them (`placer.calibrate`); the record, its file and how the simulator applies it.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Mapping, Sequence

from placer.devices import DeviceSet, Link
from placer.errors import ProfileError
from placer.files import write_atomically
from placer.host import machine_differences

FILE_FORMAT = "placer.calibration"
FILE_VERSION = 2
"""Version 2: transfers cost core time on both workers (version 1 had one receive cost and a serial link)."""
PARAMETERS = ("step_overhead", "spanning_overhead", "send_cpu", "send_cpu_per_byte", "recv_cpu",
              "recv_cpu_per_byte", "latency", "bandwidth")
FAMILIES = ("free", "sender-busy", "receiver-busy", "ping-pong", "both-ways", "remote")
CHECK_FAMILIES = ("both-ways",)
"""Probes the fit does not use: their residuals test the model on a case it was not fitted to."""
CORE_FITS = ("busy-probes", "cpu-time")
"""Where the cores' transfer costs came from: the busy families' step times, or the free probes' CPU time
per worker (then the busy families are checks too)."""
POOR_FIT = 0.25
"""A probe whose fitted cost misses its measured one by more than this share of the probe's step time is a
miss. A miss whose rounds disagree in sign is noise, which calibrating again on a quiet machine can fix: it
makes the calibration a poor fit, and predictions from it are flagged. A miss the same way in every round is
what the transfer model cannot express (e.g. a per-byte cost that is not linear in the size): calibrating
again would not change it, so it is reported as the model's limit, not as a poor fit."""
LATE_HOP = 1e-3
"""Seconds past which a busy hop of the request probe is late: prompt ones take 0.1-0.9 ms, as idle ones do;
late ones 1.5-5.5 ms, spread over one 4 ms scheduler tick (results/calibration_stability_pooled*.json)."""

@dataclass(frozen=True)
class Calibration:
    step_overhead: float
    """Seconds a step costs beyond its ops, on one device (session.run, one RPC round trip)."""
    spanning_overhead: float
    """Extra seconds per additional device a step runs on (one more worker to start and wait for)."""
    send_cpu: float
    """Seconds of the sending worker's core per transfer (gRPC serves and serializes the tensor)."""
    send_cpu_per_byte: float
    """... and per byte."""
    recv_cpu: float
    """Seconds of the receiving worker's core per transfer (gRPC receive and deserialization)."""
    recv_cpu_per_byte: float
    """... and per byte."""
    latency: float
    """Seconds a transfer is in flight beyond its cores' time; transfers in flight overlap."""
    bandwidth: float
    """Bytes per second the free transfers' bytes move at between two workers: the wire's where it is slower than
    both cores; where the cores bind, about the busier core's, which predicts about what no wire would (a
    transfer costs the slowest of its cores and the wire). inf where the free transfers did not grow with size."""
    samples: dict
    """The probe measurements the fit came from, for the record: per probe, each round's seconds."""
    target: str = ""
    """The target it was made on (e.g. "local:2")."""
    devices: tuple[str, ...] = ()
    """Full names of the target's devices: a calibration applies to these devices only."""
    intervals: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """90 % bootstrap interval of each parameter (rounds resampled)."""
    residuals: Mapping[str, float] = field(default_factory=dict)
    """Per probe: measured minus modeled extra time, as a share of the probe's step time."""
    rounds: int = 0
    machine: Mapping[str, object] = field(default_factory=dict)
    """`placer.host.this_machine()` where it was made: another processor or core count makes it a stranger's fit."""
    core_fit: str = "busy-probes"
    """Where the cores' costs came from (`CORE_FITS`); files made before the CPU-time fit are "busy-probes"."""
    remote_overhead: float = 0.0
    """Seconds a step costs beyond its ops when device 0 (the master's worker) runs none of it, over one
    that runs on device 0 alone; 0 in files made before the remote probes."""
    residual_rounds: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    """Per probe, each round's residual (as `residuals`); empty in files made before they were kept."""
    request_delay: float = 0.0
    """Seconds a worker that keeps computing takes to serve a transfer's request (`SimulatorConfig.
    request_delay`), from the request probe (`placer.calibrate.measure_request_delay`); 0 in files made before
    it."""
    request_hops: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    """The request probe's traced hops, "idle" and "busy" seconds (`placer.calibrate.REQUEST_TRACED_STEPS` less
    the skipped ones a round; one a round in files made before), and the "sender" device of each pair (absent in
    files made before both devices sent: device 0 sent them all)."""
    first_misses: Mapping[str, float] = field(default_factory=dict)
    """Where the first rounds' fit missed probes by noise, those misses: the probes were then timed as many rounds
    again and this fit pools both (`placer.calibrate.fit_repeating_a_poor_fit`); empty where the first fit held."""

    @property
    def late_hops(self) -> tuple[float, float] | None:
        """(share, mean seconds) of the request probe's busy hops that were late (`LATE_HOP`): the delay is about
        their product beyond an idle hop. The wait of a late hop holds from calibration to calibration; the share
        moves with the scheduler's state from minute to minute (docs/results/calibration.md). None without hops."""
        busy = self.request_hops.get("busy", ())
        if not busy:
            return None
        late = [hop for hop in busy if hop > LATE_HOP]
        return len(late) / len(busy), (sum(late) / len(late) if late else 0.0)

    @property
    def check_families(self) -> tuple[str, ...]:
        return CHECK_FAMILIES + (("sender-busy", "receiver-busy") if self.core_fit == "cpu-time" else ())

    @property
    def fitted_residuals(self) -> dict[str, float]:
        return {name: r for name, r in self.residuals.items() if name.split()[0] not in self.check_families}

    @property
    def check_residuals(self) -> dict[str, float]:
        return {name: r for name, r in self.residuals.items() if name.split()[0] in self.check_families}

    @property
    def misses(self) -> dict[str, float]:
        """Fitted probes the model misses by more than `POOR_FIT` of their step time."""
        return {name: r for name, r in self.fitted_residuals.items() if abs(r) > POOR_FIT}

    @property
    def model_limits(self) -> dict[str, float]:
        """Misses the same way in every round (at least 3): what the model cannot express, not noise."""
        consistent = {}
        for name, residual in self.misses.items():
            rounds = self.residual_rounds.get(name, ())
            if len(rounds) >= 3 and all(r * residual > 0 for r in rounds):
                consistent[name] = residual
        return consistent

    @property
    def poor_fit(self) -> bool:
        """Misses that calibrating again on a quiet machine may fix: their rounds disagree."""
        return bool(set(self.misses) - set(self.model_limits))

    def send_seconds(self, nbytes: float) -> float:
        return self.send_cpu + self.send_cpu_per_byte * nbytes

    def recv_seconds(self, nbytes: float) -> float:
        return self.recv_cpu + self.recv_cpu_per_byte * nbytes

    def links(self, devices: DeviceSet) -> tuple[Link, ...]:
        bandwidth = self.bandwidth if math.isfinite(self.bandwidth) else 1e300  # no wire limit: cores bound it
        return tuple(Link(a.name, b.name, bandwidth, self.latency) for a in devices for b in devices if a is not b)

    def check_machine(self) -> None:
        """Warn when used on another machine than the one it was made on: its costs are that machine's."""
        differ = machine_differences(self.machine)
        if differ:
            warnings.warn(f"the calibration of {self.target or 'this target'} was made on another machine "
                          f"({'; '.join(differ)}): its predictions describe that machine; run `placer calibrate "
                          "--target TARGET --out FILE` here", RuntimeWarning, stacklevel=3)

    def check_devices(self, devices: DeviceSet) -> None:
        """Refuse devices the calibration was not made for (other worker names or another device count)."""
        if self.devices and tuple(self.devices) != tuple(devices.names):
            raise ProfileError(
                f"this calibration was made on {self.target or 'another target'} with devices "
                f"{', '.join(self.devices)}, not on {', '.join(devices.names)}: run `placer calibrate "
                "--target TARGET --out FILE` on the target you simulate")

    def apply(self, devices: DeviceSet, config=None):
        """The device set with fitted links, and a simulator config carrying the overheads."""
        from placer.simulate import SimulatorConfig

        self.check_devices(devices)
        self.check_machine()
        if self.poor_fit:
            warnings.warn(f"the calibration of {self.target or 'this target'} fits its probes poorly "
                          f"({self.describe_residuals()}): predictions from it are unreliable; calibrate again "
                          "on a quiet machine", RuntimeWarning, stacklevel=2)
        config = config or SimulatorConfig()
        return (DeviceSet(devices.devices, self.links(devices), devices.name),
                replace(config, step_overhead=self.step_overhead, spanning_overhead=self.spanning_overhead,
                        remote_overhead=self.remote_overhead, request_delay=self.request_delay,
                        send_cpu=self.send_cpu, send_cpu_per_byte=self.send_cpu_per_byte, recv_cpu=self.recv_cpu,
                        recv_cpu_per_byte=self.recv_cpu_per_byte))

    def describe_residuals(self) -> str:
        worst = sorted(self.fitted_residuals.items(), key=lambda item: -abs(item[1]))[:3]
        return "worst probes: " + ", ".join(f"{name} {100 * value:+.0f}%" for name, value in worst)

    def describe(self) -> str:
        """The fit and its quality, for a person."""
        units = {"step_overhead": (1e3, "ms"), "spanning_overhead": (1e3, "ms"), "remote_overhead": (1e3, "ms"),
                 "send_cpu": (1e6, "us"),
                 "send_cpu_per_byte": (1e9 * 1e3, "us/MB"), "recv_cpu": (1e6, "us"),
                 "recv_cpu_per_byte": (1e9 * 1e3, "us/MB"), "latency": (1e6, "us"), "bandwidth": (1e-9, "GB/s")}
        source = "the workers' CPU time" if self.core_fit == "cpu-time" else "busy-core probes"
        lines = [f"calibration of {self.target or 'a target'} ({self.rounds} interleaved rounds; "
                 f"core costs from {source})"]
        for name in PARAMETERS + ("remote_overhead",) * bool(self.intervals.get("remote_overhead")):
            scale, unit = units[name]
            low, high = self.intervals.get(name, (math.nan, math.nan))
            lines.append(f"  {name:<18} {getattr(self, name) * scale:10.3f} {unit:<5}  90% interval "
                         f"[{low * scale:.3f}, {high * scale:.3f}]")
        if self.request_hops:
            low, high = self.intervals.get("request_delay", (math.nan, math.nan))
            share, wait = self.late_hops
            senders = ", ".join(f"from device {sender} {delay * 1e3:.2f} ms"
                                for sender, delay in request_delay_by_sender(self.request_hops).items())
            lines.append(f"  {'request_delay':<18} {self.request_delay * 1e3:10.3f} ms     90% interval "
                         f"[{low * 1e3:.3f}, {high * 1e3:.3f}]: a hop from a busy worker beyond one from an idle one, "
                         f"{senders} (request probe: {100 * share:.0f} % of the busy hops late, by {wait * 1e3:.1f} ms on "
                         "average; the share moves from minute to minute)")
        if self.first_misses:
            lines.append(f"  timed twice: the first {self.rounds // 2} rounds missed "
                         + ", ".join(f"{name} {100 * value:+.0f}%" for name, value in self.first_misses.items())
                         + f" by noise, so every probe ran {self.rounds // 2} rounds more and the fit pools them")
        lines.append(f"  fit: {self.describe_residuals()}"
                     + ("  POOR FIT: calibrate again on a quiet machine" if self.poor_fit else ""))
        if self.model_limits:
            lines.append("  the model misses in every round (a limit of the transfer model, which calibrating again "
                         "will not change): " + ", ".join(f"{name} {100 * value:+.0f}%"
                                                          for name, value in self.model_limits.items()))
        if self.check_residuals:
            lines.append("  model check (probes not fitted): " + ", ".join(
                f"{name} {100 * value:+.0f}%" for name, value in self.check_residuals.items()))
        return "\n".join(lines)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"format": FILE_FORMAT, "version": FILE_VERSION, **asdict(self)}
        data["bandwidth"] = self.bandwidth if math.isfinite(self.bandwidth) else None  # JSON has no inf
        data["intervals"] = {k: [x if math.isfinite(x) else None for x in v] for k, v in self.intervals.items()}
        return write_atomically(path, json.dumps(data, indent=1))


def calibration_digest(path: str | Path) -> str:
    """Which calibration a file holds: a digest of its bytes, so that one redone into the same file differs."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration file; ProfileError naming what is wrong with a malformed one."""
    from placer.files import read_json_file

    data = read_json_file(path, "calibration file", "make one with `placer calibrate --target local:2 --out FILE`",
                          ProfileError)
    if not isinstance(data, dict) or data.pop("format", None) != FILE_FORMAT:
        raise ProfileError(f"{path} is not a placer calibration file (no \"format\": \"{FILE_FORMAT}\"): "
                           "make one with `placer calibrate --target local:2 --out FILE`")
    if data.pop("version", 1) != FILE_VERSION:
        raise ProfileError(f"{path} was made by an older placer, whose transfer model is gone: calibrate again "
                           "with `placer calibrate --target TARGET --out FILE`")
    if data.get("bandwidth", 0) is None:
        data["bandwidth"] = math.inf
    known = {name for name in Calibration.__dataclass_fields__}
    missing = [name for name in PARAMETERS if not isinstance(data.get(name), (int, float))]
    if missing or set(data) - known:
        raise ProfileError(f"{path} is a damaged calibration: "
                           + (f"no number for {', '.join(missing)}" if missing else
                              f"unknown field(s) {', '.join(sorted(set(data) - known))}")
                           + "; calibrate again")
    if data.get("core_fit", CORE_FITS[0]) not in CORE_FITS:
        raise ProfileError(f"{path} is a damaged calibration: unknown core_fit {data['core_fit']!r}; calibrate again")
    data["devices"] = tuple(data.get("devices") or ())
    data["intervals"] = {k: tuple(math.inf if x is None else x for x in v) for k, v in (data.get("intervals") or {}).items()}
    data["residual_rounds"] = {k: tuple(v) for k, v in (data.get("residual_rounds") or {}).items()}
    return Calibration(**data)


REQUEST_TRIM = 0.1
"""Share of the request probe's hops left out at each end before averaging: a stray hop (a worker descheduled
for a while) does not move the delay."""


def request_delay(hops: Mapping[str, Sequence[float]]) -> float:
    """The request probe's delay: the mean busy hop minus the mean idle hop, each without the `REQUEST_TRIM`
    share of its hops at either end, and 0 when it is not later. A mean, not a median: the busy hops spread
    evenly over milliseconds, and the simulator's one delay stands for their average."""
    return max(trimmed_mean(hops["busy"], REQUEST_TRIM) - trimmed_mean(hops["idle"], REQUEST_TRIM), 0.0)


def trimmed_mean(values: Sequence[float], share: float) -> float:
    """The mean of `values` without the lowest and highest `share` of them (none left out of fewer than
    1 / share values)."""
    ordered = sorted(float(value) for value in values)
    if not ordered:
        raise ValueError("a trimmed mean of no values")
    cut = int(share * len(ordered))
    kept = ordered[cut:len(ordered) - cut]
    return sum(kept) / len(kept)


def request_delay_by_sender(hops: Mapping[str, Sequence[float]]) -> dict[int, float]:
    """`request_delay` of the hops from each sender alone (`hops["sender"]`; all from device 0 where absent)."""
    senders = hops.get("sender") or (0,) * len(hops["busy"])
    return {sender: request_delay({side: [hop for hop, s in zip(hops[side], senders) if s == sender]
                                   for side in ("idle", "busy")})
            for sender in sorted(set(senders))}
