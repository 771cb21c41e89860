"""What does a tensor sent between the testbed's workers cost, by the pattern of the placement that sends it?

    python experiments/probes/transfer_pattern.py --report results/simulator_fidelity_decisions_learned_8.json
        [--model branchy-0] [--placements "worker 0" "split 0.50" metis ...] [--rounds 4] [--repeats 30]
        [--out results/transfer_pattern.json]

Placements of one model from a finished `simulator_fidelity.py` run (their assignments and the tensors each sends,
as the twin counts them, are in its rows) are measured again on `local:2`, side by side in `--rounds` interleaved
rounds, with each worker's CPU time and its threads' context switches per step (each placement is measured
with `--repeats` and with three times as many timed steps, and the switches of the difference are the steps'
own, without the session's setup). The first placement must keep every op on one worker: the others are
reported against it, per tensor sent: the step's extra wall time, the two workers' extra CPU time and their
extra context switches. The twin charges every transfer the same core time on each end; if the extra CPU per
tensor differs between placements, what a transfer costs depends on the placement's pattern, not only on the
count.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402

DEFAULT_PLACEMENTS = ("worker 0", "split 0.25", "split 0.50", "split 0.75", "metis", "scotch", "m-etf", "random 30%")


@dataclass(frozen=True)
class Timed:
    """One measurement of a placement: its median step, and each worker's CPU seconds and context switches per step."""

    seconds: float
    worker_cpu: tuple[float, ...]
    switches: tuple[float, ...] = (0.0, 0.0)
    ok: bool = True


def per_tensor_rows(measured: Mapping[str, Sequence[Timed]], sent: Mapping[str, int], reference: str) -> list[dict]:
    """One row per placement: medians over the rounds of its step and of each worker's CPU time, and, beyond
    `reference` (a placement that sends nothing), the extra wall time, CPU time and context switches per tensor
    it sends."""
    def medians(label: str) -> tuple[float, float, float]:
        rounds = measured[label]
        return (statistics.median(t.seconds for t in rounds), statistics.median(sum(t.worker_cpu[:2]) for t in rounds),
                statistics.median(sum(t.switches[:2]) for t in rounds))

    base_wall, base_cpu, base_switches = medians(reference)
    rows = []
    for label in measured:
        wall, cpu, switches = medians(label)
        tensors = sent[label]
        row = {"placement": label, "tensors_sent": tensors, "step_ms": 1e3 * wall, "workers_cpu_ms": 1e3 * cpu,
               "switches_per_step": switches, "extra_wall_per_tensor_us": None, "extra_cpu_per_tensor_us": None,
               "extra_switches_per_tensor": None}
        if tensors:
            row["extra_wall_per_tensor_us"] = 1e6 * (wall - base_wall) / tensors
            row["extra_cpu_per_tensor_us"] = 1e6 * (cpu - base_cpu) / tensors
            row["extra_switches_per_tensor"] = (switches - base_switches) / tensors
        rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", required=True, help="a simulator_fidelity.py report whose rows keep assignments")
    parser.add_argument("--model", default="branchy-0")
    parser.add_argument("--placements", nargs="+", default=list(DEFAULT_PLACEMENTS),
                        help="labels of the report's rows; the first keeps every op on one worker")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=30,
                        help="timed steps of the shorter of each placement's two measurements (the longer: 3x)")
    parser.add_argument("--out", default="results/transfer_pattern.json")
    args = parser.parse_args(argv)

    report = json.loads(Path(args.report).read_text())
    rows = {r["placement"]: r for r in report.get("rows", []) if r["model"] == args.model}
    missing = [label for label in args.placements if label not in rows or "assignment" not in rows[label]]
    if missing:
        raise SystemExit(f"{args.report} has no {args.model} row with an assignment for {', '.join(map(repr, missing))}")
    reference = args.placements[0]
    if rows[reference]["on_worker_1"] not in (0.0, 1.0):
        raise SystemExit(f"the first placement ({reference!r}) must keep every op on one worker: the others are "
                         "reported against it")
    if args.rounds < 1 or args.repeats < 1:
        raise SystemExit("--rounds and --repeats must be at least 1")

    from experiments.simulator_fidelity import model_builders
    from placer.cost import compare
    from placer.measure import LocalTestbed, MeasureConfig, Measurer
    from placer.measure.runner import growth_since, thread_context_switches
    from placer.placement import Placement

    heldout = bool(rows[reference]["heldout"])
    [(_, _, build)] = model_builders([] if heldout else [args.model], [args.model] if heldout else [])
    graph = build(report.get("size", "tiny"))
    fingerprint = (report.get("graphs") or {}).get(args.model)
    if fingerprint and fingerprint != graph.fingerprint:
        raise SystemExit(f"{args.model}'s graph has changed since the run: its assignments no longer apply")

    short, long = (MeasureConfig(warmup_steps=3, timed_steps=steps) for steps in (args.repeats, 3 * args.repeats))
    with Measurer(LocalTestbed(workers=2), short) as measurer:
        workers = measurer.testbed_info["pids"][:2]
        placements = {label: Placement.from_assignment(graph, measurer.devices, rows[label]["assignment"])
                      for label in args.placements}

        def switched(placement, config) -> tuple[list[float], object]:
            before = [thread_context_switches(pid) for pid in workers]
            result = measurer.measure(graph, placement, config)
            if not result.ok:
                raise SystemExit(f"a placement failed ({result.failure.kind}): {result.failure.message}")
            return [growth_since(b, thread_context_switches(pid)) for pid, b in zip(workers, before)], result

        def evaluate(placement) -> Timed:
            fewer, _ = switched(placement, short)
            more, result = switched(placement, long)
            steps = long.timed_steps - short.timed_steps
            return Timed(result.median, tuple(result.worker_cpu[:2]), tuple((m - f) / steps for m, f in zip(more, fewer)))

        compared = compare(evaluate, placements, args.rounds)
    measured = {label: compared[label].timings for label in args.placements}
    result = per_tensor_rows(measured, {label: int(rows[label]["tensors_sent"]) for label in args.placements},
                             reference)
    write_report("transfer_pattern", ["placement", "tensors_sent", "step_ms", "workers_cpu_ms", "switches_per_step",
                                      "extra_wall_per_tensor_us", "extra_cpu_per_tensor_us", "extra_switches_per_tensor"],
                 result, args.out,
                 target="local:2", model=args.model, source=args.report, rounds=args.rounds, repeats=args.repeats,
                 command=" ".join(["python", *sys.argv]))


if __name__ == "__main__":
    main()
