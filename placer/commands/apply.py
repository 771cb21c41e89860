"""`placer apply PLACEMENT.json [MODEL] [--schedule PLAN.json]`: check a placement file against its model, run
real training steps with it, and compare their step time with the one the file records; with a schedule
plan, run them over the plan's micro-batches in its order and compare with what the plan predicted (op by
op, when `placer schedule` priced it on a simulated target, and its blocks' makespan).
"""

from __future__ import annotations

import json

from placer.apply import run_training
from placer.apply.run import APPLY_CONFIG, check_apply_config
from placer.errors import PlacementError
from placer.placement import check_same_graph, read_placement_file
from placer.schedule.origin import check_plan_calibration, check_plan_fits
from placer.schedule.plan import read_schedule_file


def apply_command(args) -> int:
    """`placer apply PLACEMENT.json MODEL`: check, run, and compare with the recorded step time."""
    from placer.cost import parse_target_spec
    from placer.measure import parse_target
    from placer.measure.config import measure_config
    from placer.models import load_model

    config = measure_config(args, APPLY_CONFIG)
    check_apply_config(config)
    exported = read_placement_file(args.placement)
    plan = None
    if args.schedule:
        plan = read_schedule_file(args.schedule)
        check_plan_fits(plan, exported, args.schedule)  # before any model is built
    model = args.model or exported.metadata.get("model")
    if not model:
        raise PlacementError(f"{exported.source} does not record its model: name it (placer apply FILE MODEL)")
    recorded_target = str(exported.metadata.get("cluster") or exported.metadata.get("target") or "")
    default_target = recorded_target if recorded_target.startswith(("inprocess:", "local:")) else "inprocess:1"
    target = parse_target(args.target or default_target, allow_exposed_ports=args.allow_exposed_ports)
    if plan is not None:  # a plan priced on another target's calibration: refused before any model is built
        check_plan_calibration(plan, parse_target_spec(target, "measured"), args.schedule)
    size = args.size or str(exported.metadata.get("size") or "tiny")
    graph = load_model(str(model), size)
    check_same_graph(exported, graph)
    if plan is not None:
        return _apply_with_schedule(args, str(model), size, graph, exported, plan, target, config)
    result = run_training(graph, exported, target, config)
    recorded = exported.recorded_step_time
    steps_run = config.warmup_steps + len(result.samples) if result.ok else 0
    if args.json:
        print(json.dumps({"graph": graph.name, "fingerprint": graph.fingerprint, "placement": str(args.placement),
                          "target": str(target), "steps_run": steps_run, "recorded_step_time": recorded,
                          "result": result.to_dict()}, indent=1))
        return 0 if result.ok else 1
    print(graph.summary())
    method = exported.metadata.get("method")
    print(f"placement {args.placement}" + (f" ({method})" if method else "") + f" on {target}: "
          f"{steps_run} training steps ({config.warmup_steps} warm-up)")
    print(result.describe())
    if recorded is None:
        print("the placement file records no step time to compare with")
    elif result.ok:
        kind = exported.metadata.get("step_time_kind")
        where = exported.metadata.get("target") or exported.metadata.get("cluster")
        print(f"recorded step time {recorded * 1e3:.2f} ms" + (f" ({kind})" if kind else "")
              + (f" on {where}" if where else "") + f"; this run {result.seconds / recorded:.2f}x that")
    return 0 if result.ok else 1


def _apply_with_schedule(args, model: str, size: str, graph, exported, plan, target, config) -> int:
    """Run the placement over the plan's micro-batches in its order; print measured against predicted, and
    whether the traced step kept the order. Exit status 1 unless the step ran and kept the order."""
    from placer.apply import run_with_schedule

    run = run_with_schedule(model, size, graph, exported, plan, target, config)
    if args.json:
        print(json.dumps({"graph": graph.name, "fingerprint": graph.fingerprint, "placement": str(args.placement),
                          "schedule": str(args.schedule), "micro_batches": plan.micro_batches, "target": str(target),
                          **run.to_json_dict()}, indent=1))
    else:
        print(graph.summary())
        kind = "training" if plan.template.trains else "inference (forward-only)"
        print(f"placement {args.placement} with the {plan.method} schedule {args.schedule} ({plan.micro_batches} "
              f"micro-batches) on {target}: {config.warmup_steps + config.timed_steps} {kind} steps ({config.warmup_steps} warm-up), then one "
              "traced to check the order")
        print(run.describe())
    return 0 if run.ok and run.order_kept else 1
