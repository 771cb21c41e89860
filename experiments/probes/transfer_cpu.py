"""Where a transfer's CPU time goes on the local testbed, and why the calibration's sender cost moves.

    python experiments/probes/transfer_cpu.py [--elements 4000000] [--tensors 1] [--rounds 10] [--warmup 2]
        [--steps 5] [--env KEY=VALUE ...] [--out results/transfer_cpu.json]

One free calibration probe (tensors sent from worker 0 to an idle worker 1) against its reference (the same
graph on worker 0 alone), alternated for --rounds, each timed as a calibration times it (`local:2`). Per
measurement it records each worker's CPU time over the timed steps (what `placer calibrate` fits the cores'
costs from) and, over the whole measurement, each worker's minor page faults, the CPU time of the kernel's
`ksoftirqd` threads and the softirq time in /proc/stat (work no task is charged for where the kernel
accounts IRQ time apart; counted in clock ticks, 10 ms here, so per step it moves in steps of 10 ms / the
steps a measurement runs). Reported per round: the probe's extra per step over its reference in each, and
how the sender's extra CPU time follows its extra page faults. --env sets variables in the workers'
environment, e.g. `--env TF_CPU_ALLOCATOR_USE_BFC=true` to pool TensorFlow's CPU memory. Linux only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

import numpy as np  # noqa: E402

from experiments._report import write_report  # noqa: E402

COLUMNS = ("step_ms", "sender_cpu_ms", "receiver_cpu_ms", "sender_faults", "receiver_faults", "ksoftirqd_ms",
           "softirq_ms")


def ksoftirqd_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().startswith("ksoftirqd/"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def minor_faults(pid: int) -> int:
    """Field 10 of /proc/PID/stat, counted after the command name (which may hold spaces)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


def softirq_seconds() -> float:
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[7]) / os.sysconf("SC_CLK_TCK")


def system_counters(worker_pids: Sequence[int], softirq_threads: Sequence[int]) -> dict[str, float]:
    from placer.measure.runner import process_cpu_seconds

    return {"sender_faults": minor_faults(worker_pids[0]), "receiver_faults": minor_faults(worker_pids[1]),
            "ksoftirqd": sum(process_cpu_seconds(pid) for pid in softirq_threads), "softirq": softirq_seconds()}


def per_step(measured: Mapping[str, Any], before: Mapping[str, float], after: Mapping[str, float],
             steps_run: int) -> dict[str, float]:
    """One measurement's numbers per step: CPU times as the runner measured them over the timed steps; page
    faults and kernel time over the whole measurement, divided by the steps it ran."""
    return {"step_ms": 1e3 * measured["median"], "sender_cpu_ms": 1e3 * measured["worker_cpu"][0],
            "receiver_cpu_ms": 1e3 * measured["worker_cpu"][1],
            "sender_faults": (after["sender_faults"] - before["sender_faults"]) / steps_run,
            "receiver_faults": (after["receiver_faults"] - before["receiver_faults"]) / steps_run,
            "ksoftirqd_ms": 1e3 * (after["ksoftirqd"] - before["ksoftirqd"]) / steps_run,
            "softirq_ms": 1e3 * (after["softirq"] - before["softirq"]) / steps_run}


def round_differences(measurements: Sequence[Mapping[str, Any]]) -> list[dict[str, float]]:
    """Per round, the probe's numbers minus its reference's (rows with "round", "side" and `COLUMNS`)."""
    by_round: dict[int, dict[str, Mapping[str, Any]]] = {}
    for row in measurements:
        by_round.setdefault(row["round"], {})[row["side"]] = row
    rows = []
    for index, sides in sorted(by_round.items()):
        if set(sides) != {"reference", "probe"}:
            raise ValueError(f"round {index} needs one reference and one probe measurement, has {sorted(sides)}")
        rows.append({"round": index, **{c: sides["probe"][c] - sides["reference"][c] for c in COLUMNS}})
    return rows


def fault_fit(rows: Sequence[Mapping[str, float]]) -> dict[str, float | None]:
    """How the sender's extra CPU time follows its extra page faults: correlation, least-squares microseconds
    per fault, and the fitted CPU time at no extra faults."""
    faults = np.array([r["sender_faults"] for r in rows], dtype=float)
    cpu = np.array([r["sender_cpu_ms"] for r in rows], dtype=float)
    if len(rows) < 3 or np.ptp(faults) == 0 or np.ptp(cpu) == 0:
        return {"correlation": None, "us_per_fault": None, "cpu_ms_without_faults": None}
    slope, intercept = np.polyfit(faults, cpu, 1)
    return {"correlation": float(np.corrcoef(faults, cpu)[0, 1]), "us_per_fault": float(slope * 1e3),
            "cpu_ms_without_faults": float(intercept)}


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--env takes KEY=VALUE, not {pair!r}")
        env[key] = value
    return env


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--elements", type=int, default=4_000_000, help="float32 elements per tensor (16 MB)")
    parser.add_argument("--tensors", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2, help="warm-up steps per measurement (a calibration's)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per measurement (a calibration's)")
    parser.add_argument("--env", nargs="*", default=[], metavar="KEY=VALUE", help="set in the workers' environment")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.rounds < 2 or args.steps < 1 or args.warmup < 0:
        raise SystemExit("give at least 2 rounds of at least 1 timed step")
    if not Path("/proc/stat").exists():
        raise SystemExit("this experiment reads Linux's /proc: it runs on Linux only")
    env = parse_env(args.env)
    os.environ.update(env)  # the testbed's workers inherit it

    from tqdm.auto import tqdm

    from placer.calibrate import Probe, probe_placements
    from placer.cost.spec import parse_target_spec
    from placer.measure import Measurer

    probe = Probe("free", args.elements, args.tensors)
    softirq_threads = ksoftirqd_pids()
    measurements = []
    with Measurer(parse_target_spec("local:2", "measured").measured) as measurer:
        worker_pids = measurer.testbed_info["pids"]
        graph, reference, placed = probe_placements(probe, measurer.devices)
        config = replace(measurer.config, warmup_steps=args.warmup, timed_steps=args.steps, trace_every_placement=True)
        steps_run = args.warmup + args.steps
        for index in tqdm(range(args.rounds), desc=probe.name, unit="round"):
            for side, placement in (("reference", reference), ("probe", placed)):
                before = system_counters(worker_pids, softirq_threads)
                result = measurer.measure(graph, placement, config)
                after = system_counters(worker_pids, softirq_threads)
                if not result.ok:
                    raise SystemExit(f"the {side} placement failed ({result.failure.kind}): {result.failure.message}")
                measured = {"median": result.median, "worker_cpu": result.worker_cpu}
                measurements.append({"round": index, "side": side, **per_step(measured, before, after, steps_run)})
    rows = round_differences(measurements)
    fit = fault_fit(rows)
    print(f"\n{probe.name}: the probe's extra per step over its reference, per round"
          + (f" (workers' environment: {' '.join(args.env)})" if env else ""))
    write_report("transfer_cpu", ["round", *COLUMNS], rows, args.out, probe=probe.name, env=env,
                 warmup=args.warmup, steps=args.steps, fault_fit=fit, measurements=measurements,
                 command=" ".join(["python", *sys.argv]))
    for column in COLUMNS:
        values = [r[column] for r in rows]
        print(f"  {column:<16} median {statistics.median(values):9.2f}  range {min(values):9.2f} .. {max(values):9.2f}")
    if fit["correlation"] is not None:
        print(f"  sender CPU against its page faults: correlation {fit['correlation']:.2f}, "
              f"{fit['us_per_fault']:.2f} us per fault, {fit['cpu_ms_without_faults']:.2f} ms at none")


if __name__ == "__main__":
    main()
