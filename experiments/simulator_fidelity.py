"""How well does the simulator predict real step times? Measured on the local testbed vs simulated.

    python experiments/simulator_fidelity.py [--models rnnlm nmt-2 inception-v3] [--size tiny] [--out FILE]

On `local:2` (two gRPC workers pinned to one core each): calibrate links and overheads with probe
graphs, profile every op of each model on worker 0, then measure and simulate the same placements per
model: each worker alone, round-robin, expert, contiguous topological splits, and random placements
with several shares of groups on worker 1. Prints every pair, Spearman's rank correlation and the
median absolute percentage error per model and overall; writes JSON and a scatter plot (PNG, when
matplotlib is installed).
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
from placer.calibrate import calibrate  # noqa: E402
from placer.measure import LocalTestbed, MeasureConfig, Measurer  # noqa: E402
from placer.models import build_model, reference_placements  # noqa: E402
from placer.placement import Placement  # noqa: E402
from placer.profile import profile_costs  # noqa: E402
from placer.simulate import Simulator, SimulatorConfig  # noqa: E402


def placements_to_compare(name: str, graph, devices, rng: np.random.Generator) -> dict[str, Placement]:
    groups = len(graph.groups)
    chosen = {
        "worker 0": Placement.single_device(graph, devices, 0),
        "worker 1": Placement.single_device(graph, devices, 1),
        "round-robin": Placement.round_robin(graph, devices),
        "expert": reference_placements(name, graph, devices)["expert"],
    }
    for share in (0.25, 0.5, 0.75):  # the first share of groups in topological order on worker 0
        cut = int(groups * share)
        chosen[f"split {share:.2f}"] = Placement.from_assignment(graph, devices, [0] * cut + [1] * (groups - cut))
    for share in (0.1, 0.3, 0.5):
        chosen[f"random {share:.1f}"] = Placement.from_assignment(graph, devices, (rng.random(groups) < share).astype(int))
    return chosen


def spearman(a, b) -> float:
    def ranks(x):
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x))
        return r
    return float(np.corrcoef(ranks(np.asarray(a)), ranks(np.asarray(b)))[0, 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["rnnlm", "nmt-2", "inception-v3"])
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--profile-steps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out")
    parser.add_argument("--plot", default="results/simulator_fidelity.png")
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    rows = []
    with Measurer(LocalTestbed(workers=2), MeasureConfig(warmup_steps=args.warmup, timed_steps=args.repeats)) as measurer:
        calibration = calibrate(measurer)
        print(f"calibration: step overhead {calibration.step_overhead * 1e3:.3f} ms, spanning overhead "
              f"{calibration.spanning_overhead * 1e3:.3f} ms, receive {calibration.transfer_cpu * 1e6:.1f} us of the core per transfer, "
              f"latency {calibration.latency * 1e6:.1f} us, "
              f"bandwidth {calibration.bandwidth / 1e9:.2f} GB/s", flush=True)
        calibration.save("results/simulator_fidelity/calibration.json")
        devices, config = calibration.apply(measurer.devices, SimulatorConfig(cpu_slots=1))
        for name in args.models:
            graph = build_model(name, args.size)
            costs = profile_costs(graph, measurer, steps=args.profile_steps, step_overhead=calibration.step_overhead)
            costs.save(f"results/simulator_fidelity/{name}-{args.size}.costs.json")  # to re-simulate without re-measuring
            print(f"{name}: profiled {costs.metadata['ops_traced']} ops, dispatch {costs.metadata['dispatch_seconds'] * 1e6:.1f} us per op", flush=True)
            simulator = Simulator(graph, devices, costs, config)
            for label, placement in placements_to_compare(name, graph, measurer.devices, rng).items():
                measured = measurer.measure(graph, placement)
                started = time.perf_counter()
                simulated = simulator.simulate(placement.group_devices)
                took = time.perf_counter() - started
                row = {"model": name, "placement": label, "measured_ms": measured.median * 1e3 if measured.ok else None,
                       "simulated_ms": simulated.step_time * 1e3, "sim_ms_per_call": took * 1e3,
                       "on_worker_1": float(np.mean(placement.group_devices))}
                if measured.ok:
                    row["error_pct"] = 100 * (simulated.step_time - measured.median) / measured.median
                print(f"{name:12s} {label:12s} measured {row['measured_ms']} simulated {row['simulated_ms']:.2f}", flush=True)
                rows.append(row)

    ok = [r for r in rows if r["measured_ms"] is not None]
    summary = {}
    for name in [*args.models, "all"]:
        subset = [r for r in ok if name == "all" or r["model"] == name]
        summary[name] = {
            "placements": len(subset),
            "spearman": spearman([r["measured_ms"] for r in subset], [r["simulated_ms"] for r in subset]),
            "median_abs_error_pct": statistics.median(abs(r["error_pct"]) for r in subset),
        }
    write_report("simulator_fidelity", ["model", "placement", "on_worker_1", "measured_ms", "simulated_ms", "error_pct"],
                 rows, args.out, size=args.size, target="local:2", summary=summary, calibration={
                     "step_overhead": calibration.step_overhead, "spanning_overhead": calibration.spanning_overhead,
                     "transfer_cpu": calibration.transfer_cpu, "latency": calibration.latency, "bandwidth": calibration.bandwidth, "samples": calibration.samples})
    print()
    for name, s in summary.items():
        print(f"{name:12s} placements {s['placements']:3d}  Spearman {s['spearman']:.3f}  median |error| {s['median_abs_error_pct']:.1f}%")
    _scatter(ok, args.plot)


def _scatter(rows, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no scatter plot: pip install matplotlib)")
        return
    fig, ax = plt.subplots(figsize=(5, 5))
    for name in sorted({r["model"] for r in rows}):
        subset = [r for r in rows if r["model"] == name]
        ax.scatter([r["measured_ms"] for r in subset], [r["simulated_ms"] for r in subset], label=name, s=18)
    limit = max(max(r["measured_ms"], r["simulated_ms"]) for r in rows) * 1.1
    ax.plot([0, limit], [0, limit], color="grey", linewidth=0.8)
    ax.set(xlabel="measured step time (ms)", ylabel="simulated step time (ms)", xlim=(0, limit), ylim=(0, limit),
           title="simulator vs local testbed")
    ax.legend()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
