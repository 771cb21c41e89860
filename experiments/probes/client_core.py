"""Where should the session's client run on the testbed? The same placements measured with the measuring
process on the first worker's core, on the second's, or free to run on either.

    python experiments/probes/client_core.py [--models placer.models.heldout:branchy_0_graph two-tower] [--size tiny]
        [--rounds 8] [--steps 30] [--out results/client_core.json]

On `local:2` the measuring process (`placer.measure.worker`) is the session's client: it sends each step to the
first worker, which runs the master, and waits for the answer. It shares the machine's two cores with the
workers. Here each model runs with every op on worker 0, split in halves and round-robin, in `--rounds`
interleaved rounds; in each round every placement is measured once with the client's threads pinned to each
of: worker 0's core, worker 1's core, and both (free, as the OS places it). Reported per model, placement and
client: the median of the rounds and their spread (the 10th and 90th percentiles against it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Sequence

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402
from experiments.probes.machine_drift import spread  # noqa: E402


def pin_process(pid: int, cores) -> None:
    """Every thread of process `pid` on `cores` (threads it starts later inherit their creator's)."""
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(thread), set(cores))
        except ProcessLookupError:  # it ended meanwhile
            pass


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["placer.models.heldout:branchy_0_graph", "two-tower"])
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30, help="timed steps per measurement")
    parser.add_argument("--out", default="results/client_core.json")
    args = parser.parse_args(argv)
    if args.rounds < 5:
        parser.error("give at least 5 rounds: the spread is read from their percentiles")
    if len(os.sched_getaffinity(0)) < 2:
        parser.error("this needs two cores: one per testbed worker")

    from tqdm.auto import tqdm

    from experiments.simulator_fidelity import split_assignment
    from placer.measure import MeasureConfig, Measurer, parse_target
    from placer.models import load_model
    from placer.placement import Placement

    graphs = [load_model(model, args.size) for model in args.models]  # a bad spec fails before a testbed starts
    config = MeasureConfig(warmup_steps=3, timed_steps=args.steps)
    medians: dict[tuple[str, str, str], list[float]] = {}
    with Measurer(parse_target("local:2"), config) as measurer:
        worker_cores = [tuple(cores) for cores in measurer.testbed_info["cores"]]
        clients = {"worker 0's core": worker_cores[0], "worker 1's core": worker_cores[1],
                   "free": tuple(sorted({c for cores in worker_cores for c in cores}))}
        placements = {g.name: {"worker 0": Placement.on_device(g, measurer.devices, 0),
                               "split 0.50": Placement.from_assignment(g, measurer.devices,
                                                                       split_assignment(len(g.groups), 0.5)),
                               "round-robin": Placement.round_robin(g, measurer.devices)} for g in graphs}
        for graph in graphs:  # a graph's first measurements on a testbed are slower: one pass thrown away
            for placement in placements[graph.name].values():
                measurer.measure(graph, placement)
        order = list(clients.items())
        for index in tqdm(range(args.rounds), desc="rounds", unit="round"):
            for graph in graphs:
                for label, placement in placements[graph.name].items():
                    for client, cores in order[index % len(order):] + order[:index % len(order)]:
                        pin_process(measurer.worker_pid, cores)
                        result = measurer.measure(graph, placement)
                        if not result.ok:
                            raise SystemExit(f"{graph.name} {label} failed ({result.failure.kind}): "
                                             f"{result.failure.message}")
                        medians.setdefault((graph.name, label, client), []).append(result.median)
        pin_process(measurer.worker_pid, clients["worker 0's core"])  # as the testbed pins it

    rows = []
    for (model, placement, client), values in medians.items():
        low, high = spread(values)
        rows.append({"model": model, "placement": placement, "client": client, "rounds": len(values),
                     "median_ms": 1e3 * statistics.median(values), "p10_pct": low, "p90_pct": high,
                     "p10_p90_pct": high - low})
    write_report("client_core", ["model", "placement", "client", "rounds", "median_ms", "p10_pct", "p90_pct",
                                 "p10_p90_pct"], rows, args.out, models=args.models, size=args.size,
                 rounds=args.rounds, steps=args.steps, clients={k: list(v) for k, v in clients.items()},
                 command=" ".join(["python", "experiments/probes/client_core.py",
                                   *(argv if argv is not None else sys.argv[1:])]))


if __name__ == "__main__":
    main()
