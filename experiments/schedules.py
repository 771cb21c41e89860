"""How much do Tessel's schedules gain over sequential, GPipe and 1F1B? Every shape on modeled devices.

    python experiments/schedules.py [--shapes v-shape k-shape] [--devices 2 4 8] [--micro-batches 4 8 16]
                                    [--memory-limits 1x none] [--time-limit 10] [--out FILE]
    python experiments/schedules.py --measure [--cluster local:2] [--models two-tower nmt-2] [--micro-batches 4]
                                    [--rounds 3] [--inference] [--out FILE]

Per shape x devices x micro-batches x memory limit: makespan and bubble rate of each method, its peak
memory, and the search time of Tessel and Tessel-fast. A memory limit "Nx" is N units per device for each
device (1x: what 1F1B keeps on a plain pipeline's first stage); "none" is unlimited. GPipe ignores the limit
(as GPipe does): its row says whether it stayed under it. Spans are Tessel's unit spans (forward 1, backward 2).

With --measure: per model, every method's plan run for real as a micro-batched step on --cluster (the model
built at batch/M, one update; each device runs its blocks in the plan's order), timed side by side in
interleaved rounds (`placer.cost.compare`); measured ms (median of the rounds' medians), predicted ms (the
plan's makespan, spans from op costs profiled on the cluster), their ratio, and whether every traced step
kept the order. With --inference, forward blocks only, run as forward-only steps (no gradients, no
update). Placements: two-tower one tower per device; NMT encoder on the first device, decoder,
attention and softmax on the second (a two-stage pipeline).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from experiments._report import write_report  # noqa: E402
from placer.errors import BlockTemplateError, ScheduleInfeasibleError  # noqa: E402
from placer.schedule.methods import METHODS, make_schedule  # noqa: E402
from placer.schedule.shapes import SHAPES, shape_template  # noqa: E402


def memory_limit(spec: str, devices: int) -> int | None:
    if spec == "none":
        return None
    if not spec.endswith("x") or not spec[:-1].isdigit():
        raise SystemExit(f"--memory-limits takes values like 1x, 2x or none, got {spec!r}")
    return int(spec[:-1]) * devices


def run(shapes, device_counts, micro_batch_counts, limits, time_limit: float, inference: bool = False) -> list[dict]:
    rows = []
    for shape in shapes:
        for devices in device_counts:
            try:
                template = shape_template(shape, devices)
                if inference:
                    template = template.forward_only()
            except BlockTemplateError as error:  # e.g. k-shape on an odd number of devices
                print(f"skipped {shape} on {devices} devices: {error}", file=sys.stderr)
                continue
            for micro_batches in micro_batch_counts:
                for spec in limits:
                    limit = memory_limit(spec, devices)
                    row = {"shape": shape, "devices": devices, "micro_batches": micro_batches, "memory_limit": spec}
                    for method in METHODS:
                        try:
                            plan = make_schedule(method, template, micro_batches, limit, time_limit=time_limit)
                        except ScheduleInfeasibleError:
                            row[f"{method}_makespan"] = "infeasible"
                            continue
                        row[f"{method}_makespan"] = plan.makespan
                        row[f"{method}_bubbles"] = round(plan.bubble_rate, 4)
                        row[f"{method}_peak"] = max(plan.peak_memory().values())
                        if method.startswith("tessel"):
                            row[f"{method}_seconds"] = round(plan.search_seconds, 2)
                            row[f"{method}_status"] = plan.search_status
                    rows.append(row)
                    print(f"  {shape} {devices} devices {micro_batches} micro-batches {spec}: " + ", ".join(
                        f"{m} {row.get(f'{m}_makespan')}" for m in METHODS), file=sys.stderr, flush=True)
    return rows


def pipeline_placement(model: str, graph, devices):
    """Two stages over the first two devices: two-tower's towers, or NMT's encoder and the rest."""
    from placer.heuristics import make_heuristic

    if model == "two-tower":
        return make_heuristic("expert", graph, devices, model=model)
    from placer.models.expert import placement_by_stage
    from placer.models.nmt import stage_of

    stages = {stage for op in graph.ops if (stage := stage_of(op.name)) is not None}
    return placement_by_stage(graph, devices, stage_of, {s: 0 if s.startswith("encoder") else 1 for s in stages},
                              method="pipeline")


def run_measured(models, cluster: str, micro_batches: int, rounds: int, time_limit: float, warmup: int,
                 steps: int, inference: bool = False) -> list[dict]:
    from placer.cost.compare import compare
    from placer.measure import MeasureConfig, Measurer
    from placer.schedule.execute import profiled_template, run_schedule, scheduled_step, step_for_plan
    from placer.schedule.micro_batch import build_micro_batch_graph

    rows = []
    with Measurer(cluster, MeasureConfig(warmup_steps=warmup, timed_steps=steps)) as measurer:
        devices = measurer.devices
        for model in models:
            graph = build_micro_batch_graph(model, "tiny", micro_batches)
            placement = pipeline_placement(model, graph, devices)
            template = profiled_template(measurer, graph, placement, micro_batches)
            if inference:
                template = template.forward_only()
            plans = {method: make_schedule(method, template, micro_batches, None, time_limit=time_limit)
                     for method in METHODS}
            # Every plan of one template orders the same step: the training step, or the forward-only one.
            step, step_placement = step_for_plan(plans[METHODS[0]], graph, placement, devices)
            scheduled = {method: scheduled_step(step, step_placement, devices, plan) for method, plan in plans.items()}
            print(f"  {model}: {len(step.graph.ops)} ops, blocks {[b.name for b in template.blocks]}", file=sys.stderr,
                  flush=True)
            compared = compare(lambda ordered: run_schedule(measurer, ordered), scheduled, rounds)
            for method, result in compared.items():
                runs = result.timings
                measured = result.median if result.ok else None
                predicted = plans[method].seconds()
                kept = [run.order_kept for run in runs]
                rows.append({"model": model, "cluster": cluster, "micro_batches": micro_batches, "method": method,
                             "inference": inference,
                             "measured_ms": None if measured is None else round(measured * 1e3, 2),
                             "predicted_ms": round(predicted * 1e3, 2),
                             "ratio": None if measured is None else round(measured / predicted, 2),
                             "makespan": plans[method].makespan, "bubbles": round(plans[method].bubble_rate, 3),
                             "order_kept": all(k is True for k in kept), "rounds_ms": [None if r is None else round(r * 1e3, 2)
                                                                             for r in result.rounds],
                             "violations": sum(len(run.violations) for run in runs)})
                print(f"  {model} {method}: measured {rows[-1]['measured_ms']} ms, predicted {rows[-1]['predicted_ms']} ms, "
                      f"order kept {rows[-1]['order_kept']}", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--devices", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument("--micro-batches", nargs="+", type=int, default=[4, 8, 16])
    parser.add_argument("--memory-limits", nargs="+", default=["1x", "none"])
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds per Tessel search (default 10)")
    parser.add_argument("--out")
    parser.add_argument("--inference", action="store_true", help="forward blocks only (no backward, no update); "
                        "with --measure, forward-only steps run for real")
    parser.add_argument("--measure", action="store_true", help="run the plans for real on --cluster")
    parser.add_argument("--cluster", default="local:2", help="with --measure: a measured target (default local:2)")
    parser.add_argument("--models", nargs="+", default=["two-tower", "nmt-2"], help="with --measure (default two-tower nmt-2)")
    parser.add_argument("--rounds", type=int, default=3, help="with --measure: interleaved rounds (default 3)")
    parser.add_argument("--warmup", type=int, default=2, help="with --measure: warm-up steps per run (default 2)")
    parser.add_argument("--steps", type=int, default=5, help="with --measure: timed steps per run (default 5)")
    args = parser.parse_args(argv)
    if args.measure:
        micro_batches = args.micro_batches[0] if args.micro_batches != [4, 8, 16] else 4
        rows = run_measured(args.models, args.cluster, micro_batches, args.rounds, args.time_limit, args.warmup, args.steps,
                            args.inference)
        columns = ["model", "method", "measured_ms", "predicted_ms", "ratio", "makespan", "bubbles", "order_kept",
                   "violations", "rounds_ms"]
        write_report("schedules_inference_measured" if args.inference else "schedules_measured", columns, rows, args.out,
                     cluster=args.cluster, rounds=args.rounds, inference=args.inference,
                     warmup=args.warmup, steps=args.steps, time_limit=args.time_limit,
                     note="measured: median over rounds of the median of timed steps; predicted: plan makespan "
                          "with spans from op costs profiled on the cluster (transfers and the update left out)")
        return
    rows = run(args.shapes, args.devices, args.micro_batches, args.memory_limits, args.time_limit, args.inference)
    columns = ["shape", "devices", "micro_batches", "memory_limit"]
    columns += [f"{m}_makespan" for m in METHODS] + [f"{m}_bubbles" for m in METHODS]
    columns += ["gpipe_peak", "tessel_seconds", "tessel_status", "tessel-fast_seconds"]
    write_report("schedules_inference" if args.inference else "schedules", columns, rows, args.out,
                 time_limit=args.time_limit, inference=args.inference,
                 note="makespan in time units (forward 1, backward 2); bubbles: idle fraction of device time")


if __name__ == "__main__":
    main()
