"""Would long kernel scheduler slices for the workers' compute threads make the testbed serve tensors at once?

    python experiments/probes/compute_slices.py [--target local:2] [--model two-tower] [--sizes tiny small]
        [--placements single-device expert round-robin] [--rounds 5] [--slice-ms 20]
        [--out results/compute_slices.json]

A request probe hop from a worker that keeps computing after making the tensor lands late in a share of rounds
that drifts from minute to minute (`placer.calibrate.REQUEST_TRACED_STEPS`). The kernel here (EEVDF, Linux 6.12
and later) lets a thread that wakes with a shorter slice than the running one's take the core at once; a
worker's compute threads (TensorFlow's `tf_Compute`) and its gRPC threads share the kernel's default slice. Here
both settings run on one testbed, in interleaved rounds (the order of the two alternating from round to round):
before each half-round this script sets every compute thread of both workers to the kernel's default slice or to
`--slice-ms`, checks after it that the setting held, and measures each placement, then the request probe
(`placer.calibrate`'s, two rounds) and the same probe with the receiver busy instead (its chain running on
worker 1 from the step's start; the tensor's arrival there, `placer.calibrate.traced_hop`).

Reported per placement: the median step under each setting and the median over rounds of their ratio (long over
default: below 1, the long slices are faster); for the request probe, the share of busy hops late by more than
1 ms and the delay as `placer calibrate` computes it, from the sender's side and from the receiver's.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import threading
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402

SETTINGS = ("kernel", "long")
LATE_SECONDS = 1e-3
"""Seconds past the median idle hop from which a busy hop counts as late."""

COMPUTE_THREAD_NAME = "tf_Compute"
"""What TensorFlow names the threads of a worker's executor pool, which run its ops."""

_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}
_SCHED_GETATTR = {"x86_64": 315, "aarch64": 275}


class _SchedAttr(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("sched_policy", ctypes.c_uint32), ("sched_flags", ctypes.c_uint64),
                ("sched_nice", ctypes.c_int32), ("sched_priority", ctypes.c_uint32),
                ("sched_runtime", ctypes.c_uint64), ("sched_deadline", ctypes.c_uint64),
                ("sched_period", ctypes.c_uint64), ("sched_util_min", ctypes.c_uint32),
                ("sched_util_max", ctypes.c_uint32)]


def thread_slice(thread: int) -> float | None:
    """The kernel scheduler slice of `thread` (a thread id) in seconds, or None where the kernel does not say
    (no `sched_getattr` for this architecture, or no such thread)."""
    number = _SCHED_GETATTR.get(os.uname().machine)
    attr = _SchedAttr()
    if number is None or ctypes.CDLL(None, use_errno=True).syscall(
            number, thread, ctypes.byref(attr), ctypes.sizeof(attr), 0) != 0:
        return None
    return attr.sched_runtime / 1e9


def set_thread_slice(thread: int, seconds: float) -> bool:
    """Ask the kernel to run `thread` (a SCHED_OTHER thread id) in slices of `seconds` (0: the kernel's
    default); True if it took it, read back (a kernel without EEVDF's custom slices accepts and ignores it)."""
    number = _SCHED_SETATTR.get(os.uname().machine)
    attr = _SchedAttr(size=ctypes.sizeof(_SchedAttr), sched_policy=0, sched_runtime=int(seconds * 1e9))
    if number is None or ctypes.CDLL(None, use_errno=True).syscall(number, thread, ctypes.byref(attr), 0) != 0:
        return False
    return seconds == 0 or thread_slice(thread) == int(seconds * 1e9) / 1e9


def threads_named(name: str, pid: int | str = "self") -> list[int]:
    """Ids of the threads of process `pid` that are called `name`."""
    found = []
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            if Path(f"/proc/{pid}/task/{thread}/comm").read_text().strip() == name:
                found.append(int(thread))
        except OSError:  # a thread that ended meanwhile
            pass
    return found


def set_compute_slices(pids, seconds: float) -> int:
    """Every compute thread of the processes `pids` at slices of `seconds` (0: the kernel's default); how many.
    Exits with one line where the kernel does not take them."""
    threads = [thread for pid in pids for thread in threads_named(COMPUTE_THREAD_NAME, pid)]
    refused = [thread for thread in threads if not set_thread_slice(thread, seconds)]
    if refused:
        raise SystemExit(f"the kernel refused a {seconds * 1e3:g} ms slice for threads {refused}: it has no custom "
                         "scheduler slices (EEVDF, Linux 6.12+), so there is nothing to compare")
    return len(threads)


def slices_hold(pids, seconds: float) -> bool:
    """Whether every compute thread of `pids` still runs at `seconds`, or for 0 at the kernel's default (TensorFlow
    may start a thread meanwhile: it starts at the default)."""
    found = [thread_slice(thread) for pid in pids for thread in threads_named(COMPUTE_THREAD_NAME, pid)]
    found = [value for value in found if value is not None]
    if seconds:
        return all(abs(value - seconds) < 1e-6 for value in found)
    return len({round(value, 6) for value in found}) <= 1


def late_share(idle, busy) -> float:
    """Share of the `busy` hops later than the median `idle` hop by more than `LATE_SECONDS`."""
    middle = statistics.median(idle)
    return sum(hop - middle > LATE_SECONDS for hop in busy) / len(busy)


def receiver_hops(measurer, rounds: int) -> dict[str, list[float]]:
    """The request probe with the receiver busy instead, beside both idle: each traced step's arrival of the
    tensor on worker 1 after it was made ("idle", "busy"), read as `placer.calibrate.measure_request_delay` reads
    its hops (the first traced step of each measurement left out)."""
    from dataclasses import replace

    from placer.calibrate import (REQUEST_SKIPPED_STEPS, REQUEST_TRACED_STEPS, request_probe_graph,
                                  request_probe_placement, traced_hop)

    config = replace(measurer.config, profile_steps=REQUEST_TRACED_STEPS, trace_every_placement=True,
                     keep_every_trace=True)
    graphs = {"idle": request_probe_graph(256, 0), "busy": request_probe_graph(256, 40, on_receiver=True)}
    arrivals: dict[str, list[float]] = {"idle": [], "busy": []}
    for _ in range(rounds):
        for side, graph in graphs.items():
            result = measurer.measure(graph, request_probe_placement(graph, measurer.devices), config)
            if not result.ok:
                raise SystemExit(f"the request probe ({graph.name}) failed: {result.failure}")
            arrivals[side] += [traced_hop(trace)[1] for trace in result.chrome_traces[REQUEST_SKIPPED_STEPS:]]
    return arrivals


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="local:2", help="a testbed target with two workers (default local:2)")
    parser.add_argument("--model", default="two-tower")
    parser.add_argument("--sizes", nargs="+", default=["tiny", "small"])
    parser.add_argument("--placements", nargs="+", default=["single-device", "expert", "round-robin"],
                        help="heuristics whose placements are measured, those real execution can make "
                        "(default: single-device expert round-robin)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--slice-ms", type=float, default=20.0,
                        help="the compute threads' long slice, 0.1-100 ms (default 20; the kernel's here: 1.4)")
    parser.add_argument("--out", default="results/compute_slices.json")
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("give at least 2 rounds: the settings are compared round by round")
    if not 0.1 <= args.slice_ms <= 100:
        parser.error(f"the kernel takes slices of 0.1-100 ms, not {args.slice_ms:g}")
    if not set_thread_slice(threading.get_native_id(), args.slice_ms / 1e3):
        parser.error("this kernel has no custom scheduler slices (EEVDF, Linux 6.12+): there is nothing to compare")
    set_thread_slice(threading.get_native_id(), 0)

    from placer.calibrate import measure_request_delay
    from placer.calibration import request_delay
    from placer.heuristics import make_heuristic
    from placer.measure import Measurer, parse_target
    from placer.models import build_model

    long_slice = args.slice_ms / 1e3
    steps: dict[tuple[str, str, str], list[float]] = {}
    probe: dict[str, dict[str, list[float]]] = {setting: {"sender": [], "sender_late": [], "receiver": [],
                                                          "receiver_late": []} for setting in SETTINGS}
    held = {setting: True for setting in SETTINGS}
    with Measurer(parse_target(args.target)) as measurer:
        pids = measurer.testbed_info.get("pids")
        if not pids or len(pids) != 2:
            raise SystemExit(f"{args.target} is not a testbed of two workers started here")
        graphs = {size: build_model(args.model, size) for size in args.sizes}
        placements = {(size, name): make_heuristic(name, graphs[size], measurer.devices, model=args.model)
                      for size in args.sizes for name in args.placements}
        for (size, name), placement in placements.items():  # warm-up: every session made before timing
            measurer.measure(graphs[size], placement)
        for round_index in range(args.rounds):
            order = SETTINGS if round_index % 2 == 0 else SETTINGS[::-1]
            for setting in order:
                seconds = long_slice if setting == "long" else 0.0
                set_compute_slices(pids, seconds)
                for (size, name), placement in placements.items():
                    result = measurer.measure(graphs[size], placement)
                    if not result.ok:
                        raise SystemExit(f"{args.model} {size} {name} failed: {result.failure}")
                    steps.setdefault((size, name, setting), []).append(result.median)
                _, hops = measure_request_delay(measurer, 2)
                asked = receiver_hops(measurer, 2)
                record = probe[setting]
                record["sender"].append(request_delay(hops) * 1e3)
                record["sender_late"].append(late_share(hops["idle"], hops["busy"]))
                record["receiver"].append(request_delay(asked) * 1e3)
                record["receiver_late"].append(late_share(asked["idle"], asked["busy"]))
                held[setting] &= slices_hold(pids, seconds)
                print(f"round {round_index + 1}, {setting} slices: busy sender {record['sender'][-1]:.2f} ms, "
                      f"busy receiver {record['receiver'][-1]:.2f} ms", file=sys.stderr, flush=True)
        set_compute_slices(pids, 0.0)

    rows = []
    for size, name in placements:
        kernel, long = steps[(size, name, "kernel")], steps[(size, name, "long")]
        ratios = [b / a for a, b in zip(kernel, long)]
        rows.append({"what": f"{args.model} {size} {name}", "kernel_ms": statistics.median(kernel) * 1e3,
                     "long_ms": statistics.median(long) * 1e3, "long_over_kernel": statistics.median(ratios),
                     "ratio_range": f"{min(ratios):.3f}-{max(ratios):.3f}",
                     "kernel_rounds_ms": [round(v * 1e3, 3) for v in kernel],
                     "long_rounds_ms": [round(v * 1e3, 3) for v in long]})
    for side in ("sender", "receiver"):
        rows.append({"what": f"request probe, busy {side}: delay (ms), share of hops late",
                     "kernel_ms": statistics.median(probe["kernel"][side]),
                     "long_ms": statistics.median(probe["long"][side]),
                     "late_share": f"{statistics.median(probe['kernel'][side + '_late']):.2f} / "
                                   f"{statistics.median(probe['long'][side + '_late']):.2f}",
                     "kernel_rounds_ms": [round(v, 3) for v in probe["kernel"][side]],
                     "long_rounds_ms": [round(v, 3) for v in probe["long"][side]]})
    write_report("compute_slices", ["what", "kernel_ms", "long_ms", "long_over_kernel", "ratio_range", "late_share"],
                 rows, args.out, target=args.target, rounds=args.rounds, long_slice_s=long_slice,
                 settings_held=held)
    if not all(held.values()):
        print(f"warning: a setting did not hold through its half-round: {held}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
