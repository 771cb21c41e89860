"""How fast is the simulator? Timed against TensorFlow's grappler virtual cluster on the same placements.

    python experiments/simulator_speed.py [--models inception-v3 nmt-4] [--size paper] [--gpus 4] [--out FILE]

Both predict the step time of paper-size graphs on a modeled 4 x V100 machine (NVLink between GPUs):
placer's simulator from roofline op costs, grappler from its own analytical cost model
(`tensorflow.python.grappler.cluster.Cluster(devices=...).MeasureCosts`). Per placement, the simulator's
time is the median of many calls after a first, compiling one; grappler's is one call (building its
GrapplerItem is timed apart). Their predicted step times are printed too: they model different things
(grappler ignores link contention and memory), so only their speeds are compared like for like.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from experiments._report import write_report  # noqa: E402
from placer.hardware import GPUS, HOST_CPU, modeled_machine  # noqa: E402
from placer.heuristics import make_heuristic  # noqa: E402
from placer.models import build_model  # noqa: E402
from placer.placement import Placement  # noqa: E402
from placer.profile import roofline_costs  # noqa: E402
from placer.simulate import Simulator  # noqa: E402

# What grappler's virtual devices need: clock (MHz), cores (SMs for a GPU), bandwidth (KB/s).
GRAPPLER_DEVICES = {
    "V100": {"type": "GPU", "frequency": 1530, "num_cores": 80, "bandwidth": 900_000_000, "architecture": "7"},
    "host-cpu": {"type": "CPU", "frequency": 2300, "num_cores": 16, "bandwidth": 60_000_000},
}


def grappler_cluster(devices):
    from tensorflow.core.protobuf import device_properties_pb2
    from tensorflow.python.grappler import cluster as grappler

    named = []
    for device in devices:
        spec = GRAPPLER_DEVICES[device.model]
        properties = device_properties_pb2.DeviceProperties(
            type=spec["type"], frequency=spec["frequency"], num_cores=spec["num_cores"],
            bandwidth=spec["bandwidth"], memory_size=device.memory_bytes or 0,
        )
        if "architecture" in spec:
            properties.environment["architecture"] = spec["architecture"]
        named.append(device_properties_pb2.NamedDevice(name=device.name, properties=properties))
    return grappler.Cluster(devices=named)


def grappler_item(graph, placement):
    import tensorflow as tf
    from tensorflow.python.grappler import item as grappler_items

    with tf.Graph().as_default() as tf_graph:
        tf.import_graph_def(placement.apply(graph), name="")
        meta_graph = tf.compat.v1.train.export_meta_graph(graph=tf_graph)
    meta_graph.collection_def["train_op"].node_list.value.append(graph.train_op)
    return grappler_items.Item(meta_graph)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["inception-v3", "nmt-4"])
    parser.add_argument("--size", default="paper")
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--random", type=int, default=5, help="random placements per model")
    parser.add_argument("--calls", type=int, default=20, help="simulator calls per placement")
    parser.add_argument("--out")
    args = parser.parse_args()

    machine = modeled_machine(args.gpus, "V100", "nvlink2")
    cluster = grappler_cluster(machine)
    rng = np.random.default_rng(0)
    rows = []
    for name in args.models:
        graph = build_model(name, args.size)
        started = time.perf_counter()
        simulator = Simulator(graph, machine, {"V100": roofline_costs(graph, GPUS["V100"]),
                                               "host-cpu": roofline_costs(graph, HOST_CPU)})
        compile_s = time.perf_counter() - started
        gpus = [i for i, d in enumerate(machine) if d.kind == "GPU"]
        placements = {k: make_heuristic(k, graph, machine, model=name) for k in ("expert", "single-device")}
        for i in range(args.random):
            placements[f"random {i}"] = Placement.from_assignment(graph, machine, rng.choice(gpus, size=len(graph.groups)))
        simulator.simulate(placements["expert"])  # the first call compiles the event loop (cached on disk after)
        for label, placement in placements.items():
            calls, from_assignment = [], []
            assignment = np.array(placement.group_devices)
            for _ in range(args.calls):
                started = time.perf_counter()
                result = simulator.simulate(placement)
                calls.append(time.perf_counter() - started)
                # What an agent's sample costs: its assignment array checked into a Placement, then simulated.
                started = time.perf_counter()
                simulator.simulate(Placement.from_assignment(graph, machine, assignment))
                from_assignment.append(time.perf_counter() - started)
            started = time.perf_counter()
            item = grappler_item(graph, placement)
            item_s = time.perf_counter() - started
            started = time.perf_counter()
            _, grappler_step, _ = cluster.MeasureCosts(item)
            grappler_s = time.perf_counter() - started
            sim_s = statistics.median(calls)
            rows.append({
                "model": name, "step_ops": len(graph.step_ops), "placement": label,
                "placer_step_ms": result.step_time * 1e3, "grappler_step_ms": grappler_step * 1e3,
                "placer_ms_per_call": sim_s * 1e3, "placer_ms_from_assignment": statistics.median(from_assignment) * 1e3,
                "grappler_ms_per_call": grappler_s * 1e3,
                "grappler_item_ms": item_s * 1e3, "speedup": grappler_s / sim_s, "simulator_compile_s": compile_s,
            })
            print(rows[-1], flush=True)
    write_report("simulator_speed", ["model", "step_ops", "placement", "placer_step_ms", "grappler_step_ms",
                                     "placer_ms_per_call", "placer_ms_from_assignment", "grappler_ms_per_call",
                                     "speedup"], rows, args.out,
                 machine=machine.name, size=args.size)
    for name in args.models:
        subset = [r for r in rows if r["model"] == name]
        randoms = [r for r in subset if r["placement"].startswith("random")]
        if randoms:
            print(f"{name}, random placements: placer {statistics.median(r['placer_ms_per_call'] for r in randoms):.2f} ms "
                  f"({statistics.median(r['placer_ms_from_assignment'] for r in randoms):.2f} ms from an assignment array)")
        print(f"{name}: placer {statistics.median(r['placer_ms_per_call'] for r in subset):.2f} ms per placement, grappler "
              f"{statistics.median(r['grappler_ms_per_call'] for r in subset):.1f} ms (+{statistics.median(r['grappler_item_ms'] for r in subset):.0f} ms "
              f"to build its item): {statistics.median(r['speedup'] for r in subset):.0f}x")


if __name__ == "__main__":
    main()
