"""Does the simulator send what TensorFlow sends? Transfers per placement against the `_Recv` nodes of the
graphs TensorFlow partitioned for one real step.

    python experiments/probes/partition_transfers.py [--model transformer] [--size tiny] [--out FILE]

Each placement of the fidelity set (`experiments/simulator_fidelity.py`: extremes, splits, baselines) runs one
step on two in-process CPU devices with `RunOptions(output_partition_graphs=True)`; its receive nodes are what
TensorFlow moved between the devices, after grappler. The simulator of the same devices (roofline op costs:
which tensors cross does not depend on them) reports its transfers, data and control apart, by the replication
rule alone (`simulated`) and with the small constants TensorFlow sends anyway learned from the round-robin
placement's step (`simulated_learned`, `placer.measure.partitions.constants_sent_when_cut`, as the calibrated
twin does; the round-robin row is the one it learned from). --model takes any model spec, e.g. a held-out
model (`placer.models.heldout:branchy_0_graph`). Not a timing.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from experiments._report import write_report  # noqa: E402
from experiments.simulator_fidelity import fidelity_placements  # noqa: E402
from placer.measure.partitions import constants_sent_when_cut, partition_receives  # noqa: E402
from placer.models import load_model  # noqa: E402

KINDS = ("extreme", "split", "baseline")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="transformer")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--out")
    args = parser.parse_args(argv)

    from placer.cost import open_target
    from placer.devices import Link, local_devices
    from placer.hardware import HOST_CPU
    from placer.profile import roofline_costs
    from placer.simulate import SimulatorConfig

    graph = load_model(args.model, args.size)
    config = SimulatorConfig(default_link=Link("", "", bandwidth=1e9, latency=50e-6))
    costs = {"CPU": roofline_costs(graph, HOST_CPU)}
    target = open_target(graph, local_devices(logical_cpus=2), costs=costs, simulator_config=config)
    learned = open_target(graph, local_devices(logical_cpus=2), costs=costs,
                          simulator_config=replace(config, sent_constants=constants_sent_when_cut(graph)))
    candidates = [c for c in fidelity_placements(graph, target.devices, model=args.model, simulator=target.simulator)
                  if c.kind in KINDS]
    rows = []
    for candidate in candidates:
        simulated = target.simulator.simulate(candidate.placement, timeline=True)
        control = sum(t.tensor.endswith(":control") for t in simulated.transfers)
        received = len(partition_receives(graph, candidate.placement.op_devices(graph)))
        with_learned = learned.simulator.simulate(candidate.placement, timeline=True)
        rows.append({"placement": candidate.label, "tf_recv": received, "simulated": len(simulated.transfers),
                     "simulated_data": len(simulated.transfers) - control, "simulated_control": control,
                     "simulated_learned": len(with_learned.transfers)})
    write_report("partition_transfers", ["placement", "tf_recv", "simulated", "simulated_data", "simulated_control",
                                         "simulated_learned"],
                 rows, args.out, model=args.model, size=args.size, command=" ".join(["python", *sys.argv]),
                 sent_constants=len(learned.simulator.config.sent_constants))


if __name__ == "__main__":
    main()
