"""Does a transfer's core time depend on how many tensors leave together? The same tensors sent in one burst
or spread over several, on the local testbed.

    python experiments/probes/transfer_bursts.py [--tensors 32] [--bursts 1 4 16 32] [--elements 1000]
        [--rounds 5] [--out results/transfer_bursts.json]

The simulator charges every transfer the same core time on each end (`send_cpu`, `recv_cpu`), which `placer
calibrate` fits from its free probes: k tensors made at once. Planners' placements cross in other patterns: a
contiguous split sends a hundred tensors at one cut, a partitioner's cut a few at a time all through the step.
Here worker 0 runs a chain of `--chain` matmuls (256 x 256) and makes `--tensors` tensors of `--elements` float32
elements in `b` bursts, each after its share of the chain, for each `b` of `--bursts`; worker 1 reads one
element of each. The reference runs the same graph on worker 0 alone, so the probe's extra CPU time per step on
each worker is what its transfers cost there (plus the fixed cost of a step spanning two workers, the same for
every `b`). Every graph and both placements are measured side by side in `--rounds` interleaved rounds; per
`b` the medians over rounds of each worker's extra CPU time and of the extra step time are reported, and a line
through the bursts: the CPU time one more burst costs each worker.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import replace
from typing import Mapping, Sequence

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

import numpy as np  # noqa: E402

from experiments._report import write_report  # noqa: E402


def burst_graph(tensors: int, bursts: int, elements: int, chain: int, busy_receiver: bool = False):
    """Worker 0's chain with `tensors` tensors made in `bursts` groups, evenly along it; the readers of those
    tensors are the ops named `reader...`. With `busy_receiver`, a second chain as long, named `busy...`,
    runs beside it from the step's start (on worker 1 in the probe)."""
    import tensorflow as tf

    from placer.graph.build import graph_from_function

    def build():
        with tf.name_scope("chain_start"):
            h = tf.random.uniform([256, 256], seed=7)
        made = []
        per_burst = [tensors // bursts + (1 if b < tensors % bursts else 0) for b in range(bursts)]
        made_after = {round(b * chain / bursts): count for b, count in enumerate(per_burst)}
        for step in range(chain + 1):
            if step in made_after:
                for _ in range(made_after[step]):
                    with tf.name_scope(f"maker_{len(made)}"):
                        # A fill of a value read off the chain: made when the chain gets there, a memset.
                        made.append(tf.fill([elements], h[0, 0] + float(len(made))))
            if step < chain:
                with tf.name_scope(f"chain_{step}"):
                    h = tf.tanh(tf.matmul(h, h) * 0.01)
        with tf.name_scope("reader"):
            read = tf.add_n([x[1] for x in made]) if len(made) > 1 else made[0][1]
        outputs = [read, h[0, 0]]
        if busy_receiver:
            with tf.name_scope("busy_start"):
                g = tf.random.uniform([256, 256], seed=8)
            for step in range(chain):
                with tf.name_scope(f"busy_{step}"):
                    g = tf.tanh(tf.matmul(g, g) * 0.01)
            outputs.append(g[0, 0])
        with tf.name_scope("total"):
            total = tf.add_n(outputs)
        return tf.group(total, name="train_op"), total

    return graph_from_function(build, name=f"bursts-{tensors}x{elements}-in-{bursts}" + ("-busy" if busy_receiver else ""))


def placements(graph, devices):
    """The reference (the readers on worker 0) and the probe (the readers on worker 1); a busy receiver's chain
    on worker 1 in both."""
    from placer.placement import Placement

    def worker(name: str, probe: bool) -> str:
        return devices[1 if name.startswith("busy") or (probe and name.startswith("reader")) else 0].name

    return tuple(Placement.from_op_devices(graph, devices, {op.name: worker(op.name, probe) for op in graph.ops})
                 for probe in (False, True))


def burst_line(rows: Sequence[Mapping[str, float]], column: str) -> tuple[float, float]:
    """Least-squares (slope per burst, intercept) of `column` against the burst count."""
    bursts = np.array([r["bursts"] for r in rows], dtype=float)
    values = np.array([r[column] for r in rows], dtype=float)
    if len(rows) < 2 or np.ptp(bursts) == 0:
        raise ValueError("a line through the bursts needs at least two different burst counts")
    slope, intercept = np.polyfit(bursts, values, 1)
    return float(slope), float(intercept)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tensors", type=int, default=32)
    parser.add_argument("--bursts", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--elements", type=int, default=1000, help="float32 elements per tensor")
    parser.add_argument("--chain", type=int, default=32, help="matmuls in worker 0's chain")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--busy-receiver", action="store_true",
                        help="worker 1 runs a chain as long as worker 0's in both placements: the step's extra is "
                             "then what the transfers take from a busy receiver's core")
    parser.add_argument("--out", default="results/transfer_bursts.json")
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("give at least 2 rounds")
    if len(set(args.bursts)) < 2 or min(args.bursts) < 1 or max(args.bursts) > min(args.tensors, args.chain + 1):
        parser.error(f"give at least two burst counts between 1 and {min(args.tensors, args.chain + 1)} "
                     "(no more than the tensors, nor the chain's steps + 1)")
    if args.elements < 2:
        parser.error("each tensor needs at least 2 elements (its reader takes element 1)")

    from tqdm.auto import tqdm

    from placer.measure import Measurer, parse_target

    extra: dict[int, list[tuple[float, float, float]]] = {b: [] for b in args.bursts}
    with Measurer(parse_target("local:2")) as measurer:
        config = replace(measurer.config, trace_every_placement=True)
        items = []
        for bursts in args.bursts:
            graph = burst_graph(args.tensors, bursts, args.elements, args.chain, args.busy_receiver)
            items.append((bursts, graph, *placements(graph, measurer.devices)))
        for index in tqdm(range(args.rounds), desc="rounds", unit="round"):
            order = items[index % len(items):] + items[:index % len(items)]  # each graph first in turn
            for bursts, graph, reference, probe in order:
                sides = []
                for placement in (reference, probe):
                    result = measurer.measure(graph, placement, config)
                    if not result.ok:
                        raise SystemExit(f"{graph.name} failed ({result.failure.kind}): {result.failure.message}")
                    if len(result.worker_cpu) < 2:
                        raise SystemExit("the testbed reported no CPU time per worker: this needs local workers")
                    sides.append((result.median, *result.worker_cpu[:2]))
                extra[bursts].append(tuple(p - r for p, r in zip(sides[1], sides[0])))
    rows = []
    for bursts in args.bursts:
        step, sender, receiver = (statistics.median(v[i] for v in extra[bursts]) for i in range(3))
        rows.append({"bursts": bursts, "tensors": args.tensors, "step_extra_ms": 1e3 * step,
                     "sender_cpu_extra_ms": 1e3 * sender, "receiver_cpu_extra_ms": 1e3 * receiver})
    lines = {column: burst_line(rows, column) for column in ("sender_cpu_extra_ms", "receiver_cpu_extra_ms")}
    command = "python experiments/probes/transfer_bursts.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report("transfer_bursts", ["bursts", "tensors", "step_extra_ms", "sender_cpu_extra_ms",
                                     "receiver_cpu_extra_ms"], rows, args.out, command=command.strip(),
                 elements=args.elements, chain=args.chain, rounds=args.rounds, busy_receiver=args.busy_receiver,
                 per_burst_us={c: 1e3 * slope for c, (slope, _) in lines.items()},
                 rounds_extra_ms={str(b): [[1e3 * x for x in v] for v in values] for b, values in extra.items()})
    for column, (slope, intercept) in lines.items():
        print(f"  {column}: {1e3 * slope:.1f} us per burst more (at one burst {intercept + slope:.3f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
