"""Do schedules' predicted step times match what they measure? Op-level and block-span prices against local:2.

    python experiments/probes/schedule_fidelity.py [--calibration FILE] [--models two-tower nmt-2] [--size tiny]
        [--micro-batches 4] [--methods sequential gpipe 1f1b tessel] [--modes training inference]
        [--rounds 3] [--warmup 2] [--steps 5] [--time-limit 10] [--zero-bubble] [--out results/schedule_fidelity.json]
        [--dry-run]

Per model and mode (training; inference, forward-only steps): the model placed in two stages (two-tower one
tower per worker; NMT's encoder on the first, the rest on the second), its block template from op costs
profiled on the testbed, its spans priced from the sequential plan's step simulated on the calibrated target
(`placer.schedule.predict.priced_template`: each block's ops, the transfers it receives and the cores' costs of
them, with the merge, update and per-step overheads as a tail), and each method's plan of those spans. Each
plan's micro-batched step, held to the plan's order, is priced twice: op by op on the calibrated simulator
(`calibrated:FILE`: its transfers, barriers, the update and the fitted overheads; `placer.schedule.predict`)
and by the plan's makespan and the tail; then it is measured on local:2 with every plan of the model and mode
side by side in interleaved rounds (medians of the rounds' medians). Reported per plan: measured, both predictions and their errors; per model and mode, the
fastest plan measured and the fastest each price picks, and of the plans' pairs measured more than 5 % apart,
how many each price orders right (a predicted tie counts as wrong). --zero-bubble adds, in training, plans over the
backward split into input and weight gradients (`blocks_from_placement(..., split_weight_gradients=True)`):
ZB-H1 (`zb-h1`) and Tessel's search over those blocks (`tessel-zb`), priced and measured side by side with the
others. Without --calibration the testbed is calibrated first
(into results/schedule_fidelity/calibration.json). --dry-run prices every plan (costs cached beside the
calibration, else roofline estimates of a host CPU on its links) and measures nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import print_table, write_report  # noqa: E402
from experiments.schedules import pipeline_placement  # noqa: E402

MEASURED_TARGET = "local:2"
DEFAULT_CALIBRATION = "results/schedule_fidelity/calibration.json"
METHODS = ("sequential", "gpipe", "1f1b", "tessel")
ZERO_BUBBLE_PLANS = {"zb-h1": "zb-h1", "tessel-zb": "tessel"}
"""With --zero-bubble: plan name -> the method that schedules the template with weight-gradient blocks."""
MODES = ("training", "inference")


def op_costs(graph, calibration: str, measurer) -> tuple[dict, str]:
    """The op costs of `graph` the calibrated simulator uses, and where they come from: cached beside the
    calibration or profiled on `measurer` (the testbed, open for the measurements); in a dry run (no
    measurer) without a cache, roofline estimates of a host CPU."""
    from placer.cost import parse_target_spec
    from placer.cost.calibrated import cost_cache, profiled_costs
    from placer.hardware import HOST_CPU
    from placer.profile import roofline_costs

    spec = parse_target_spec(f"calibrated:{calibration}")
    if measurer is None and not cost_cache(calibration, graph).exists():
        return {"CPU": roofline_costs(graph, HOST_CPU)}, "roofline (dry run)"
    return {"CPU": profiled_costs(graph, spec.calibration, spec.calibration_path, measurer)}, "profiled"


def scheduled_plans(model: str, mode: str, args, measurer) -> tuple[dict, dict, str]:
    """Each method's plan of `model` in `mode`, its ordered step on the calibrated target's devices, and both
    prices: {method: (scheduled step, op-level StepTime, plan)}, facts, and the costs' source. Every method
    searches the same block spans, priced from the step simulated on the calibrated target
    (`placer.schedule.predict.priced_template`)."""
    from placer.cost import open_target, parse_target_spec
    from placer.models import build_model
    from placer.schedule.execute import scheduled_step, step_for_plan
    from placer.schedule.from_placement import blocks_from_placement
    from placer.schedule.methods import make_schedule
    from placer.schedule.micro_batch import build_micro_batch_graph, placement_at_micro_batch
    from placer.schedule.predict import predict_scheduled_step, priced_template
    from placer.schedule.standard import sequential

    spec = parse_target_spec(f"calibrated:{args.calibration}")
    graph = build_model(model, args.size)
    costs, source = op_costs(graph, args.calibration, measurer)
    split_variants = (False, True) if args.zero_bubble and mode == "training" else (False,)
    with open_target(graph, spec, costs=costs) as target:
        placement = pipeline_placement(model, graph, target.devices)
        templates = {split: blocks_from_placement(target.simulator, placement, args.micro_batches,
                                                  split_weight_gradients=split) for split in split_variants}
    if mode == "inference":
        templates = {False: templates[False].forward_only()}
    micro_batch_graph = build_micro_batch_graph(model, args.size, args.micro_batches)
    at_micro_batch = placement_at_micro_batch(placement, graph, micro_batch_graph, spec.devices)
    priced, facts, sources = {}, {}, []
    for split, template in templates.items():
        # One step (training, forward-only, or training with the gradient gates between B and W dropped)
        # serves every plan of a template; its op costs price the spans and each plan.
        step, step_placement = step_for_plan(sequential(template, args.micro_batches), micro_batch_graph,
                                             at_micro_batch, spec.devices)
        step_costs, step_source = op_costs(step.graph, args.calibration, measurer)
        template = priced_template(template, micro_batch_graph, at_micro_batch, spec, costs=step_costs)
        methods = ZERO_BUBBLE_PLANS if split else {method: method for method in args.methods}
        plans = {name: make_schedule(method, template, args.micro_batches, None, time_limit=args.time_limit)
                 for name, method in methods.items()}
        for name, plan in plans.items():
            scheduled = scheduled_step(step, step_placement, spec.devices, plan)
            priced[name] = (scheduled, predict_scheduled_step(scheduled, spec, costs=step_costs), plan)
        print(f"  {model} {mode}: {len(step.graph.ops)} ops, blocks {[b.name for b in template.blocks]}",
              file=sys.stderr, flush=True)
        key = "split" if split else "whole"
        facts[key] = {"blocks": [b.name for b in template.blocks], "spans": {b.name: b.span for b in template.blocks},
                      "time_unit": template.time_unit, "tail_seconds": template.tail_seconds}
        facts.setdefault("orders", {}).update({name: plan_orders(plan) for name, plan in plans.items()})
        sources.append(step_source)
    if len(templates) == 1:  # no split: the facts as before, at the top level
        facts = {**facts["whole"], "orders": facts["orders"]}
    return priced, facts, f"{source}; step {', '.join(sources)}"


def plan_orders(plan) -> dict[str, list[str]]:
    """Per device, the plan's blocks in the order it runs them ("f@worker:0/CPU:0 mb1"): what the measured step
    is held to, so that a plan searched again can be told apart from the one measured."""
    from placer.schedule.execute import device_blocks

    return {device: [f"{b.spec.name} mb{b.micro_batch}" for b in device_blocks(plan, device)]
            for device in plan.template.devices}


def rows_of(model: str, mode: str, priced: dict, measured: dict[str, Any] | None) -> list[dict[str, Any]]:
    rows = []
    for method, (scheduled, predicted, plan) in priced.items():
        result = None if measured is None else measured[method]
        seconds = result.median if result is not None and result.ok else None
        span = plan.seconds()
        row = {"model": model, "mode": mode, "method": method, "makespan": plan.makespan,
               "bubbles": round(plan.bubble_rate, 3),
               "predicted_ms": round(predicted.seconds * 1e3, 3) if predicted.ok else None,
               "span_ms": round(span * 1e3, 3),
               "measured_ms": None if seconds is None else round(seconds * 1e3, 3)}
        if seconds is not None:
            if predicted.ok:
                row["error_pct"] = round(100 * (predicted.seconds - seconds) / seconds, 1)
            row["span_error_pct"] = round(100 * (span - seconds) / seconds, 1)
            row["rounds_ms"] = [None if r is None else round(r * 1e3, 3) for r in result.rounds]
            row["order_kept"] = all(run.order_kept is True for run in result.timings)
        rows.append(row)
    return rows


def fastest(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per model and mode: the plan each price picks and the one measured fastest, and of the plans' pairs
    measured more than 5 % apart (closer ones the rounds' noise orders), how many each price orders right."""
    from placer.simulate.fidelity import pair_order_agreement

    summary = []
    for key in dict.fromkeys((r["model"], r["mode"]) for r in rows):
        group = [r for r in rows if (r["model"], r["mode"]) == key]

        def pick(column: str) -> str | None:
            known = [r for r in group if r.get(column) is not None]
            return min(known, key=lambda r: r[column])["method"] if known else None

        def ordered(column: str) -> str | None:
            known = [r for r in group if r.get(column) is not None and r.get("measured_ms") is not None]
            if len(known) < 2:
                return None
            share, pairs = pair_order_agreement([r["measured_ms"] for r in known], [r[column] for r in known])
            return f"{round(share * pairs)} of {pairs}" if pairs else "0 of 0"

        summary.append({"model": key[0], "mode": key[1], "measured_fastest": pick("measured_ms"),
                        "op_level_picks": pick("predicted_ms"), "block_spans_pick": pick("span_ms"),
                        "op_level_pairs_ordered": ordered("predicted_ms"),
                        "block_spans_pairs_ordered": ordered("span_ms")})
    return summary


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calibration", help=f"a calibration of {MEASURED_TARGET} (`placer calibrate --target "
                        f"{MEASURED_TARGET} --out FILE`); default: calibrate now into {DEFAULT_CALIBRATION}")
    parser.add_argument("--models", nargs="+", default=["two-tower", "nmt-2"])
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds timing every plan once (default 3)")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up steps per timing (default 2)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per timing (default 5)")
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds per Tessel search (default 10)")
    parser.add_argument("--zero-bubble", action="store_true", help="in training, also the plans over the backward "
                        f"split into input and weight gradients: {', '.join(ZERO_BUBBLE_PLANS)}")
    parser.add_argument("--out", default="results/schedule_fidelity.json")
    parser.add_argument("--dry-run", action="store_true", help="price every plan; measure nothing, start nothing")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        raise SystemExit(f"--rounds must be at least 1, got {args.rounds}")
    if args.calibration and not Path(args.calibration).is_file():
        raise SystemExit(f"no calibration file {args.calibration}: make one with `placer calibrate --target "
                         f"{MEASURED_TARGET} --out FILE`, or leave --calibration out to calibrate now")
    if not args.calibration:
        if args.dry_run:
            raise SystemExit("--dry-run prices plans on a calibration: give --calibration FILE")
        from experiments.simulator_fidelity import calibrate_testbed

        args.calibration = DEFAULT_CALIBRATION
        calibrate_testbed(args.calibration)

    rows, facts = [], {}
    if args.dry_run:
        for model in args.models:
            for mode in args.modes:
                priced, facts[f"{model} {mode}"], source = scheduled_plans(model, mode, args, None)
                facts[f"{model} {mode}"]["costs"] = source
                rows += rows_of(model, mode, priced, None)
    else:
        from placer.cost import compare
        from placer.measure import MeasureConfig, Measurer
        from placer.schedule.execute import run_schedule

        with Measurer(MEASURED_TARGET, MeasureConfig(warmup_steps=args.warmup, timed_steps=args.steps)) as measurer:
            for model in args.models:
                for mode in args.modes:
                    priced, facts[f"{model} {mode}"], source = scheduled_plans(model, mode, args, measurer)
                    facts[f"{model} {mode}"]["costs"] = source
                    scheduled = {method: entry[0] for method, entry in priced.items()}
                    measured = compare(lambda ordered: run_schedule(measurer, ordered), scheduled, args.rounds)
                    rows += rows_of(model, mode, priced, measured)
                    for row in rows[-len(priced):]:
                        print(f"  {model} {mode} {row['method']}: measured {row['measured_ms']} ms, op by op "
                              f"{row['predicted_ms']} ms, block spans {row['span_ms']} ms", file=sys.stderr, flush=True)
    summary = fastest(rows)
    write_report("schedule_fidelity", ["model", "mode", "method", "measured_ms", "predicted_ms", "error_pct", "span_ms",
                                       "span_error_pct", "makespan", "bubbles", "order_kept"],
                 rows, args.out, target=MEASURED_TARGET, calibration=args.calibration, size=args.size,
                 micro_batches=args.micro_batches, rounds=args.rounds, warmup=args.warmup, steps=args.steps,
                 time_limit=args.time_limit, zero_bubble=args.zero_bubble, dry_run=args.dry_run, plans=facts, fastest=summary,
                 command=" ".join(["python", *sys.argv]),
                 note="measured: median over interleaved rounds of each run's median step; predicted: op by op on "
                      "calibrated:FILE (transfers, barriers, update, overheads); span: the plan's makespan over "
                      "block spans priced on calibrated:FILE, and the tail (merge, update, overheads); errors: "
                      "predicted minus measured, in % of measured")
    print()
    print_table(["model", "mode", "measured_fastest", "op_level_picks", "block_spans_pick", "op_level_pairs_ordered",
                 "block_spans_pairs_ordered"], summary)
    print("pairs ordered: of the plans' pairs measured more than 5 % apart, those each price orders the same way")


if __name__ == "__main__":
    main()
