"""Thread settings against TensorFlow's recommended ones (the IPDPS 2019 comparison), first part.

    python experiments/probes/concurrency.py [--models nmt-2:small inception-v3:tiny rnnlm:small two-tower:small]
        [--rounds 3] [--warmup 3] [--repeats 10] [--out results/concurrency.json]
        [--per-op two-tower:small placer.models.heldout:branchy_1_graph:small] [--widths local:widths=1+1]
        [--per-op-rounds 5] [--fit-only nmt-2:tiny inception-v3:tiny]

Per model, on one in-process CPU device: TensorFlow's default thread pools, the recommended setting
(intra-op = physical cores, inter-op = sockets) and every (intra, inter) pair up to the cores (the best
setting found by hand), each in its own measurement process, timed side by side in interleaved rounds
(`placer.concurrency.tune`). Reported per model: each setting's step time, the sweep's best against the
recommended setting, and how long the choice took. Then the setting the performance model picks
(`placer.concurrency.choose`), fitted leave-one-out: each model's choice comes from a model fitted on the
traced ops of the other models only (profiled at every intra-op thread count), plus those of the --fit-only
models (profiled, never timed), and is read off the same side-by-side timings.

Per-op concurrency through partitioned workers (--per-op, models that are also in --models): on the testbed
of workers of different widths (--widths; each op runs on its worker's threads, ops on different workers
co-run), a few placements (the expert's where the model has one, round-robin, a METIS partition of the
colocation groups), timed side by side with the sweep's two best global in-process settings in
--per-op-rounds interleaved rounds; also each one's step as the simulator predicts it with the leave-one-out
performance model at the devices' widths. The best placement and the best setting are each picked on the
same rounds they are reported from (the same slight optimism for both). With --order STRATEGY, the expert's
placement (METIS's for a model without one) also runs with that op order per worker (`placer.concurrency.
op_order`) over its ops of at least --order-min-op-us (op times: the 1-thread profile), as its own graph on
its own testbed of the same widths.
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
from placer.concurrency import tune, tuning_candidates  # noqa: E402
from placer.concurrency.choose import choose_setting, predicted_step_time  # noqa: E402
from placer.concurrency.performance_model import fit_performance_model, profile_thread_counts  # noqa: E402
from placer.cost import compare, open_target  # noqa: E402
from placer.devices import Link  # noqa: E402
from placer.measure import MeasureConfig  # noqa: E402
from placer.heuristics import make_heuristic  # noqa: E402
from placer.models import MODELS, SIZES, load_model  # noqa: E402
from placer.placement import Placement  # noqa: E402
from placer.simulate import Simulator, SimulatorConfig  # noqa: E402

TESTBED_LINK = Link("", "", bandwidth=1.6e9, latency=5e-4)
"""Roughly what `placer calibrate` measured between two testbed workers (FINDINGS.md: ~1.6 GB/s, 0.3-1.8 ms)."""

DEFAULT_MODELS = ("nmt-2:small", "inception-v3:tiny", "rnnlm:small", "two-tower:small")
"""Sizes whose steps take well under a second here (FINDINGS.md's thread table used the first three)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), metavar="MODEL:SIZE")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", default="results/concurrency.json")
    parser.add_argument("--per-op", nargs="*", default=[], metavar="MODEL:SIZE",
                        help="models (also in --models) to time on partitioned workers, e.g. two-tower:small")
    parser.add_argument("--widths", default="local:widths=1+1", help="the testbed of partitioned workers")
    parser.add_argument("--per-op-rounds", type=int, default=5)
    parser.add_argument("--order", choices=["critical-path", "complementary"],
                        help="with --per-op: also time the expert's (or METIS's) placement with this op order")
    parser.add_argument("--order-min-op-us", type=float, default=50.0,
                        help="with --order: order only ops of at least this many microseconds (default 50)")
    parser.add_argument("--fit-only", nargs="*", default=[], metavar="MODEL:SIZE",
                        help="models profiled only to fit the performance model (never timed)")
    args = parser.parse_args()
    missing = sorted(set(args.per_op) - set(args.models))
    if missing:
        parser.error(f"--per-op {' '.join(missing)}: also give them in --models (their sweep's best is the reference)")

    config = MeasureConfig(warmup_steps=args.warmup, timed_steps=args.repeats)
    candidates = tuning_candidates()
    recommended = next(name for name in candidates if "recommended" in name.split(" = "))
    default = next(name for name in candidates if "default" in name.split(" = "))
    graphs = {spec: load_model(*model_and_size(spec)) for spec in args.models}
    fit_only = {spec: load_model(*model_and_size(spec)) for spec in args.fit_only if spec not in graphs}
    profiles = {}
    for spec, graph in {**graphs, **fit_only}.items():
        profiles[spec] = profile_thread_counts(graph)
        print(f"{graph.name}: ops profiled at {profiles[spec].threads} intra-op threads in {profiles[spec].seconds:.0f} s",
              flush=True)
    setting_names = {setting: name for name, setting in candidates.items()}
    rows, gains, model_gaps, per_op_rows = [], [], [], []
    for spec, graph in graphs.items():
        others = [(other, profiles[o]) for o, other in {**graphs, **fit_only}.items() if o != spec]
        performance_model = fit_performance_model(others)
        choice = choose_setting(graph, performance_model)
        print(f"{graph.name}: {len(candidates)} settings x {args.rounds} rounds", flush=True)
        result = tune(graph, candidates, rounds=args.rounds, measure_config=config)
        print(result.describe(), flush=True)
        picked = setting_names[choice.setting]
        print(f"  the performance model (fitted on the other models) picks {choice.setting}", flush=True)
        gain = result.against(recommended)
        gains.append(gain)
        model_gap = result.medians[picked] / result.medians[result.best] - 1
        model_gaps.append(model_gap)
        row = {"model": graph.name, "recommended_ms": result.medians[recommended] * 1e3,
               "default_ms": result.medians[default] * 1e3, "best": result.best,
               "best_ms": result.medians[result.best] * 1e3, "shorter_than_recommended_pct": 100 * gain,
               "choice_s": result.seconds, "model_picks": str(choice.setting),
               "model_pick_ms": result.medians[picked] * 1e3,
               "model_pick_shorter_than_recommended_pct": 100 * (1 - result.medians[picked] / result.medians[recommended]),
               "model_pick_above_best_pct": 100 * model_gap, "model_choice_s": choice.seconds,
               "profiling_s": profiles[spec].seconds}
        row.update({f"{setting} ms": seconds * 1e3 for setting, seconds in result.medians.items()})
        rows.append(row)
        if spec in args.per_op:
            fastest = sorted((name for name in result.medians if name not in result.failures), key=result.medians.get)
            per_op_rows.append(per_op_concurrency(spec, graph, {name: candidates[name] for name in fastest[:2]},
                                                  performance_model, args, config, profiles[spec]))
    print()
    write_report("concurrency", ["model", "recommended_ms", "default_ms", "best", "best_ms",
                                 "shorter_than_recommended_pct", "choice_s", "model_picks", "model_pick_ms",
                                 "model_pick_shorter_than_recommended_pct", "model_pick_above_best_pct",
                                 "model_choice_s"], rows, args.out,
                 rounds=args.rounds, warmup=args.warmup, repeats=args.repeats, cores=len(os.sched_getaffinity(0)),
                 fit_only=args.fit_only,
                 settings={n: [s.intra_op_threads, s.inter_op_threads] for n, s in candidates.items()},
                 command="python experiments/probes/concurrency.py " + " ".join(sys.argv[1:]))
    print(f"best of the sweep against the recommended setting: {100 * statistics.mean(gains):.1f} % shorter steps "
          f"on average (per model: {', '.join(f'{100 * g:.1f} %' for g in gains)})")
    if per_op_rows:
        print()
        write_report("concurrency_per_op", ["model", "in_process", "in_process_ms", "testbed", "best_placement",
                                            "best_placement_ms", "against_in_process_pct"],
                     per_op_rows, args.out.replace(".json", "_per_op.json"), rounds=args.per_op_rounds,
                     warmup=args.warmup, repeats=args.repeats, widths=args.widths,
                     command="python experiments/probes/concurrency.py " + " ".join(sys.argv[1:]))
    picked = [r["model_pick_shorter_than_recommended_pct"] for r in rows]
    print(f"the performance model's pick against the recommended setting: {statistics.mean(picked):.1f} % shorter "
          f"on average; above the sweep's best by {', '.join(f'{100 * g:.1f} %' for g in model_gaps)}")


def model_and_size(spec: str) -> tuple[str, str]:
    """"two-tower:small" -> ("two-tower", "small"); a module:function spec keeps its colon."""
    head, _, size = spec.rpartition(":")
    return (head, size) if head and size in SIZES else (spec, "tiny")


def per_op_concurrency(spec: str, graph, settings: dict, performance_model, args, config, profile) -> dict:
    """A few placements on the partitioned workers against the sweep's best global settings in-process (the
    `settings`, by name), all side by side; the best of each kind is picked on the same rounds."""
    cores = len(os.sched_getaffinity(0))
    opened, timed, predicted = {}, {}, {}
    try:
        for name, setting in settings.items():
            label = f"in-process {name}"
            opened[label] = open_target(graph, setting.target(), measure_config=config)
            timed[label] = (opened[label], Placement.on_device(graph, opened[label].devices, 0))
            predicted[label] = predicted_step_time(graph, performance_model, setting, cores)
        testbed = opened[args.widths] = open_target(graph, args.widths, measure_config=config)
        devices = testbed.devices
        placements = {"round-robin": Placement.round_robin(graph, devices)}
        name = model_and_size(spec)[0]
        if name in MODELS:
            placements["expert"] = make_heuristic("expert", graph, devices, model=name)
        from placer.heuristics.partitioners import unit_partition

        placements["metis"] = Placement.from_assignment(graph, devices, unit_partition(graph, len(devices)) % len(devices))
        simulator = Simulator(graph, devices, performance_model, SimulatorConfig(default_link=TESTBED_LINK))
        predicted.update({placement: simulator.simulate(p).step_time for placement, p in placements.items()})
        timed.update({placement: (testbed, p) for placement, p in placements.items()})
        if args.order:
            from placer.concurrency.op_order import ordered_step

            base = "expert" if "expert" in placements else "metis"
            ordered = ordered_step(graph, placements[base], devices, profile.op_seconds[min(profile.threads)],
                                   args.order, min_op_seconds=args.order_min_op_us * 1e-6)
            label = f"{base} + {args.order} order"
            opened[label] = open_target(ordered.graph, args.widths, measure_config=config)
            timed[label] = (opened[label], ordered.placement)
            placements[label] = ordered.placement
            ordered_simulator = Simulator(ordered.graph, devices, performance_model,
                                          SimulatorConfig(default_link=TESTBED_LINK))
            predicted[label] = ordered_simulator.simulate(ordered.placement).step_time
            print(f"{graph.name}: {label}: {ordered.order.describe()}", flush=True)
        print(f"{graph.name}: {', '.join(timed)} on {args.widths} ({args.per_op_rounds} interleaved rounds)", flush=True)
        compared = compare(lambda item: item[0].evaluate(item[1]), timed, args.per_op_rounds)
    finally:
        for cost in opened.values():
            cost.close()
    medians = {label: c.median for label, c in compared.items()}
    best = min(placements, key=medians.get)
    in_process = min((label for label in timed if label not in placements), key=medians.get)
    for label in timed:
        print(f"  {label:<40} {medians[label] * 1e3:8.1f} ms  (rounds "
              f"{', '.join(f'{t * 1e3:.1f}' if t else 'failed' for t in compared[label].rounds)}; simulated "
              f"{predicted[label] * 1e3:.1f} ms)", flush=True)
    return {"model": graph.name, "in_process": in_process.removeprefix("in-process "),
            "in_process_ms": medians[in_process] * 1e3, "testbed": args.widths, "best_placement": best,
            "best_placement_ms": medians[best] * 1e3,
            "against_in_process_pct": 100 * (medians[best] / medians[in_process] - 1),
            "medians_ms": {label: round(m * 1e3, 2) for label, m in medians.items()},
            "predicted_ms": {label: round(float(t) * 1e3, 2) for label, t in predicted.items()},
            "rounds_ms": {label: c.rounds for label, c in compared.items()}}


if __name__ == "__main__":
    main()
