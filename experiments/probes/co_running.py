"""Do two testbed workers slow each other when both compute at once? A probe, before any model of it.

    python experiments/probes/co_running.py [--target local:2] [--rounds 5] [--matmuls 40] [--calibration FILE]
        [--out results/co_running.json]

The simulator runs each worker's ops at their profiled speed whether or not the other worker is busy. If the
two cores share something (a cache, memory bandwidth, a physical core under the VM), a placement that keeps
both busy runs slower than predicted: the direction of the simulator's error on the placements planners pick.

Each probe is one step with a chain of work per worker and no transfer between them but one scalar each at
the end. Per kind of work (compute-bound: 256x256 matmuls; memory-bound: adds over 16 MB tensors):
- alone: the chain on worker 0, worker 1 idle;
- together: a chain on each worker at once (the same chain twice);
- serial: both chains on worker 0 (the upper bound: no overlap).
The three are timed side by side in interleaved rounds. together / alone is the co-running slowdown (1.0:
the cores are independent; 2.0: they share one core's throughput).

Then transfers while both cores compute: a scalar bounced `--hops` times between the workers (each hop waits
for the previous one: a chain of transfers), timed alone, beside a compute chain on each worker (no data
shared with the hops), and the compute chains alone. If a hop cost what it costs between idle workers, the
hops and the chains would overlap: together = max(hops alone, chains alone). hop_ms_loaded is what each hop
costs beside the chains, (together - chains alone) / hops when the hops outlast the chains.

With --calibration FILE (a calibration of the target), each layout is also predicted by its calibrated twin
(`calibrated:FILE`), so the probe shows which of these effects the simulator already prices.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402

KINDS = ("compute", "memory")
LAYOUTS = ("alone", "together", "serial")


def probe_graph(kind: str, links: int, chains: int, hops: int = 0):
    """`chains` independent chains of `links` steps of `kind` work, each summed to one scalar; and `hops`
    increments of one scalar (op names hop_1, hop_2, ...: placed alternately to bounce it between workers)."""
    import tensorflow as tf

    from placer.graph.build import graph_from_function

    def build():
        outputs = []
        for chain in range(chains):
            with tf.name_scope(f"chain_{chain}"):
                if kind == "compute":
                    h = tf.random.uniform([256, 256], seed=chain)
                    for _ in range(links):
                        h = tf.tanh(tf.matmul(h, h) * 0.01)
                else:
                    h = tf.fill([4_000_000], tf.random.uniform([], seed=chain))
                    for _ in range(links):
                        h = h * 0.5 + 1.0
                outputs.append(h[0] if kind == "memory" else h[0, 0])
        if hops:
            with tf.name_scope("maker"):
                x = tf.random.uniform([1], seed=99)
            for hop in range(1, hops + 1):
                with tf.name_scope(f"hop_{hop}"):
                    x = x + 1.0
            outputs.append(x[0])
        with tf.name_scope("total"):
            total = tf.add_n(outputs) if len(outputs) > 1 else outputs[0]
        return tf.group(total, name="train_op"), total

    return graph_from_function(build, name=f"co-running-{kind}-{chains}x{links}")


def layout_placement(graph, devices, layout: str):
    """Chain 0 on worker 0; chain 1 (if any) on worker 1 ("together") or worker 0 ("serial")."""
    from placer.placement import Placement

    def device(op_name: str) -> str:
        top = op_name.split("/")[0]
        if top.startswith("hop_"):  # odd hops on worker 1, even on worker 0: every hop crosses
            return devices[int(top.split("_")[1]) % 2].name
        if layout == "together" and top == "chain_1":
            return devices[1].name
        return devices[0].name

    return Placement.from_op_devices(graph, devices, {op.name: device(op.name) for op in graph.ops})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="local:2", help="a measured target with two workers (default local:2)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--matmuls", type=int, default=40, help="links per compute chain (default 40)")
    parser.add_argument("--adds", type=int, default=20, help="links per memory chain (default 20)")
    parser.add_argument("--hops", type=int, default=40, help="transfers in the hop chain (default 40)")
    parser.add_argument("--calibration", help="a calibration of the target: also predict every layout on its twin")
    parser.add_argument("--out", default="results/co_running.json")
    args = parser.parse_args(argv)

    from placer.cost import compare
    from placer.measure import Measurer, parse_target

    rows = []
    with Measurer(parse_target(args.target)) as measurer:
        devices = measurer.devices
        if len(devices) < 2:
            parser.error(f"{args.target} has {len(devices)} device; the probe needs two workers")
        for kind in KINDS:
            links = args.matmuls if kind == "compute" else args.adds
            alone = probe_graph(kind, links, chains=1)
            pair = probe_graph(kind, links, chains=2)
            items = {"alone": (alone, layout_placement(alone, devices, "alone")),
                     "together": (pair, layout_placement(pair, devices, "together")),
                     "serial": (pair, layout_placement(pair, devices, "serial"))}

            compared = compare(measuring(measurer, args.target), items, args.rounds)
            medians = {name: compared[name].median for name in LAYOUTS}
            rounds = {name: compared[name].rounds for name in LAYOUTS}
            together_over_alone = [t / a for t, a in zip(rounds["together"], rounds["alone"])]
            rows.append({"kind": kind, "links": links, "alone_ms": medians["alone"] * 1e3,
                         "together_ms": medians["together"] * 1e3, "serial_ms": medians["serial"] * 1e3,
                         "predicted_alone_ms": predicted_ms(args, alone, "alone"),
                         "predicted_together_ms": predicted_ms(args, pair, "together"),
                         "slowdown": medians["together"] / medians["alone"],
                         "slowdown_rounds": together_over_alone,
                         "serial_over_alone": medians["serial"] / medians["alone"]})
            print(f"{kind}: alone {medians['alone'] * 1e3:.2f} ms, together {medians['together'] * 1e3:.2f} ms, "
                  f"serial {medians['serial'] * 1e3:.2f} ms; together/alone per round "
                  + ", ".join(f"{r:.3f}" for r in together_over_alone), flush=True)
        rows.append(hops_beside_chains(measurer, devices, args, compare))
    command = "python experiments/probes/co_running.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report("co_running", ["kind", "links", "alone_ms", "together_ms", "serial_ms", "slowdown",
                                "serial_over_alone", "hop_us_idle", "hop_us_loaded", "predicted_alone_ms",
                                "predicted_together_ms"], rows, args.out, command=command.strip(), target=args.target,
                 rounds=args.rounds, median_slowdown=statistics.median(r["slowdown"] for r in rows if "slowdown" in r))
    return 0


def measuring(measurer, target: str):
    """What `compare` times: one (graph, placement) item measured on `measurer`, as a StepTime."""
    from placer.cost import StepTime

    def evaluate(item):
        graph, placement = item
        return StepTime.from_measurement(measurer.measure(graph, placement), target)

    return evaluate


def predicted_ms(args, graph, layout: str) -> float | None:
    """The layout's step as the calibrated twin predicts it (None without --calibration)."""
    if not args.calibration:
        return None
    from placer.cost import open_target

    with open_target(graph, f"calibrated:{args.calibration}") as twin:
        return twin.evaluate(layout_placement(graph, twin.devices, layout)).seconds * 1e3


def hops_beside_chains(measurer, devices, args, compare) -> dict:
    """The hop chain alone, the compute chains alone (one per worker), and both in one step."""
    hops = probe_graph("compute", args.matmuls, chains=0, hops=args.hops)
    chains = probe_graph("compute", args.matmuls, chains=2)
    both = probe_graph("compute", args.matmuls, chains=2, hops=args.hops)
    items = {"hops": (hops, layout_placement(hops, devices, "together")),
             "chains": (chains, layout_placement(chains, devices, "together")),
             "both": (both, layout_placement(both, devices, "together"))}

    compared = compare(measuring(measurer, args.target), items, args.rounds)
    medians = {name: compared[name].median for name in items}
    print(f"hops: {args.hops} hops alone {medians['hops'] * 1e3:.2f} ms, chains alone {medians['chains'] * 1e3:.2f} ms, "
          f"both {medians['both'] * 1e3:.2f} ms", flush=True)
    return {"kind": "hops beside chains", "links": args.hops, "alone_ms": medians["hops"] * 1e3,
            "together_ms": medians["both"] * 1e3, "chains_ms": medians["chains"] * 1e3,
            "hop_us_idle": medians["hops"] / args.hops * 1e6,
            "hop_us_loaded": max(medians["both"] - medians["chains"], 0.0) / args.hops * 1e6,
            "predicted_alone_ms": predicted_ms(args, hops, "together"),
            "predicted_chains_ms": predicted_ms(args, chains, "together"),
            "predicted_together_ms": predicted_ms(args, both, "together"),
            "overlap_expected_ms": max(medians["hops"], medians["chains"]) * 1e3}


if __name__ == "__main__":
    sys.exit(main())
