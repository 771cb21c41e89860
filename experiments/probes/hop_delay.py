"""When does a tensor leave a busy worker? A probe of one hop beside the sender's own work, before any model of it.

    python experiments/probes/hop_delay.py [--target local:2] [--sizes 64 256 1024] [--chain-ms 2 6] [--receiver]
        [--rounds 3] [--out results/hop_delay.json]

On two-tower `tiny`'s expert split, the gradient worker 1 waits for left worker 0 about 1.9 ms after it was
made, when worker 0's backward chain of short ops had run; at `small`, with ops of several milliseconds, the
same hop took 0.2-0.35 ms (`experiments/probes/step_decomposition.py`). This probe separates the two factors: per
matmul size S and chain length (about `--chain-ms` of work on worker 0), one step in which worker 0 makes a
small tensor and sends it to worker 1, then runs a chain of SxS matmuls that depend on it; worker 1 waits for
the tensor and adds to it. From each traced step: the hop, from the end of the op that made the tensor on
worker 0 to the start of its consumer on worker 1, and the chain's own span on worker 0. Also the same step
with no chain (the hop between an idle sender and an idle receiver). With --receiver the chain runs on worker
1 from the step's start instead, independent of the tensor, and worker 0 idles after making it: then
arrival_ms (the tensor's receive starting on worker 1) shows when worker 1 asked for it.

If a hop waits for its sender's chain to end, hop_ms follows chain_ms; if it is served beside the chain, it
stays near the idle hop whatever the chain. The graphs are `placer calibrate`'s request probe
(`placer.calibrate.request_probe_graph`), which measures the delay for the simulator.
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

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="local:2", help="a measured target with two workers (default local:2)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024], help="matmul sizes of the chain")
    parser.add_argument("--chain-ms", type=float, nargs="+", default=[2.0, 6.0],
                        help="about this much work in the chain after the send (default 2 and 6 ms)")
    parser.add_argument("--receiver", action="store_true",
                        help="the chain runs on the receiver instead, from the step's start; the sender idles")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--steps", type=int, default=5, help="traced steps per measurement (default 5)")
    parser.add_argument("--out", default="results/hop_delay.json")
    args = parser.parse_args(argv)

    from dataclasses import replace

    from placer.calibrate import request_probe_graph as probe_graph
    from placer.calibrate import request_probe_placement as placement_of
    from placer.calibrate import traced_hop as hop_and_chain
    from placer.measure import Measurer, parse_target

    samples: dict[tuple[int, float], list[tuple[float, float, float]]] = {}
    with Measurer(parse_target(args.target)) as measurer:
        config = replace(measurer.config, profile_steps=args.steps)
        # One link's time per size, from a chain of 4: how many links make the asked-for chain.
        link_ms = {}
        for size in args.sizes:
            graph = probe_graph(size, 4, args.receiver)
            result = measurer.measure(graph, placement_of(graph, measurer.devices), config)
            link_ms[size] = max(hop_and_chain(result.chrome_trace)[2] * 1e3 / 4, 1e-3)
        cases = [(size, 0.0, 0) for size in args.sizes[:1]]
        for size in args.sizes:
            for chain_ms in args.chain_ms:
                links = max(1, round(chain_ms / link_ms[size]))
                if all((s, l) != (size, links) for s, _, l in cases):  # one long op may be every chain asked for
                    cases.append((size, chain_ms, links))
        graphs = {(size, chain_ms): probe_graph(size, links, args.receiver) for size, chain_ms, links in cases}
        for _ in range(args.rounds):
            for key, graph in graphs.items():
                result = measurer.measure(graph, placement_of(graph, measurer.devices), config)
                if not result.ok:
                    raise SystemExit(f"{graph.name} failed: {result.failure.describe()}")
                hop, arrival, chain = hop_and_chain(result.chrome_trace)
                samples.setdefault(key, []).append((hop, chain, result.median, arrival))
    rows = []
    for (size, chain_ms), values in samples.items():
        links = next(links for s, c, links in cases if (s, c) == (size, chain_ms))
        rows.append({"matmul": size if links else "none", "links": links,
                     "op_ms": link_ms[size] if links else 0.0,
                     "chain_ms": statistics.median(v[1] for v in values) * 1e3,
                     "hop_ms": statistics.median(v[0] for v in values) * 1e3,
                     "hop_rounds_ms": "/".join(f"{v[0] * 1e3:.2f}" for v in values),
                     "arrival_ms": statistics.median(v[3] for v in values) * 1e3,
                     "step_ms": statistics.median(v[2] for v in values) * 1e3})
    command = "python experiments/probes/hop_delay.py " + " ".join(argv if argv is not None else sys.argv[1:])
    write_report("hop_delay", ["matmul", "links", "op_ms", "chain_ms", "hop_ms", "hop_rounds_ms", "arrival_ms",
                               "step_ms"], rows, args.out, command=command.strip(), target=args.target,
                 chain_on="receiver" if args.receiver else "sender", rounds=args.rounds, steps=args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
