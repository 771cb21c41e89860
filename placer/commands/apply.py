"""`placer apply PLACEMENT.json [MODEL] [--schedule PLAN]` or `placer apply PLAN.json`: check a placement file (or
a plan file: machine use, placement and schedule) against its model and target, run real training steps with it,
and compare their step time with the one the file records or predicts; with a schedule, run them over its
micro-batches in its order, check the traced order, and compare with what it predicted (op by op, when
`placer schedule` priced it on a simulated target, and its blocks' makespan).
"""

from __future__ import annotations

import json

from placer.apply import run_training
from placer.apply.run import APPLY_CONFIG, check_apply_config
from placer.errors import PlacementError, PlanFileError
from placer.placement import check_same_graph, read_placement_file
from placer.plan import describe_machine, is_plan_file, read_plan_file
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
    if is_plan_file(args.placement):
        return _apply_plan(args, config)
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
        what = (f"placement {args.placement} with the {plan.method} schedule {args.schedule} ({plan.micro_batches} "
                "micro-batches)")
        return _apply_with_schedule(args, str(model), size, graph, exported, plan, target, config, what,
                                    {"placement": str(args.placement), "schedule": str(args.schedule)})
    method = exported.metadata.get("method")
    recorded = exported.recorded_step_time
    compared = None
    if recorded is not None:
        kind = exported.metadata.get("step_time_kind")
        where = exported.metadata.get("target") or exported.metadata.get("cluster")
        compared = (recorded, "recorded step time", (f" ({kind})" if kind else "") + (f" on {where}" if where else ""))
    return _apply_placement(args, graph, exported, target, config,
                            f"placement {args.placement}" + (f" ({method})" if method else ""),
                            {"placement": str(args.placement), "recorded_step_time": recorded}, compared,
                            "the placement file records no step time to compare with")


def _apply_plan(args, config) -> int:
    """`placer apply PLAN.json`: every refusal (another model, target or calibration, a machine use this machine
    cannot give) before any graph is built; then the plan's placement on its machine use, over its schedule if
    it has one, measured against its prediction."""
    from placer.models import load_model

    plan = read_plan_file(args.placement)
    if args.schedule:
        raise PlanFileError(f"{args.placement} is a plan, which holds its own schedule (or none): leave out --schedule, "
                            f"or {plan.remake}")
    plan.check_model(args.model, args.size)
    target = plan.check_target(args.target, allow_exposed_ports=args.allow_exposed_ports)
    # A plan with replicas places one replica: the step built at its slice of the batch.
    graph = load_model(plan.model, plan.size, batch=None if plan.replicas is None else plan.replicas.batch)
    plan.check_graph(graph)
    identity = {"plan": str(args.placement), "machine": describe_machine(target),
                "predicted": None if plan.predicted is None else plan.predicted.to_dict()}
    if plan.schedule is not None:
        what = (f"plan {args.placement} ({plan.schedule.method} schedule, {plan.schedule.micro_batches} micro-batches, "
                f"{describe_machine(target)})")
        return _apply_with_schedule(args, plan.model, plan.size, graph, plan.placement, plan.schedule, target, config,
                                    what, identity)
    predicted = plan.predicted
    compared = None
    measured = plan.provenance.get("measured") or {}
    if predicted is not None and predicted.ok:
        compared = (predicted.seconds, "predicted step time", f" ({predicted.backend} on {predicted.target or plan.target})")
    elif isinstance(measured.get("median"), (int, float)):
        # A plan nothing could price (one process: the calibrated twin models the testbed's workers) still
        # carries what its maker measured: the number to hold this run against.
        compared = (float(measured["median"]), "step time measured when the plan was made",
                    f" (by {plan.provenance.get('made_by', 'its maker')} on {measured.get('target', plan.target)})")
    what = f"plan {args.placement} ({describe_machine(target)})"
    nothing = "the plan records no predicted or measured step time to compare with"
    if plan.replicas is None:
        return _apply_placement(args, graph, plan.placement, target, config, what, identity, compared, nothing)
    from placer.measure import Measurer
    from placer.replicas import data_parallel_step, first_group

    degree = plan.replicas.degree
    with Measurer(target, config) as measurer:
        machine = measurer.devices
        replica = plan.placement.to_placement(graph, first_group(machine, degree))
        step_graph, placement = data_parallel_step(graph, replica, machine, degree)
        return _apply_placement(args, step_graph, placement, target, config,
                                f"plan {args.placement} ({degree} replicas of {plan.replicas.batch} samples, "
                                f"{describe_machine(target)})", identity, compared, nothing, run_on=measurer)


def _apply_placement(args, graph, placement_file, target, config, what: str, identity: dict,
                     compared: tuple[float, str, str] | None, nothing_to_compare: str, run_on=None) -> int:
    """Run the placement (on `run_on`, a Measurer already started, else on `target`); print its step time against
    `compared` (seconds, what they are, where they came from)."""
    result = run_training(graph, placement_file, run_on or target, config)
    steps_run = config.warmup_steps + len(result.samples) if result.ok else 0
    if args.json:
        print(json.dumps({"graph": graph.name, "fingerprint": graph.fingerprint, **identity, "target": str(target),
                          "steps_run": steps_run, "result": result.to_dict()}, indent=1))
        return 0 if result.ok else 1
    print(graph.summary())
    print(f"{what} on {target}: {steps_run} training steps ({config.warmup_steps} warm-up)")
    print(result.describe())
    if compared is None:
        print(nothing_to_compare)
    elif result.ok:
        seconds, name, origin = compared
        print(f"{name} {seconds * 1e3:.2f} ms{origin}; this run {result.seconds / seconds:.2f}x that")
    return 0 if result.ok else 1


def _apply_with_schedule(args, model: str, size: str, graph, exported, plan, target, config, what: str,
                         identity: dict) -> int:
    """Run the placement over the plan's micro-batches in its order; print measured against predicted, and
    whether the traced step kept the order. Exit status 1 unless the step ran and kept the order."""
    from placer.apply import run_with_schedule

    run = run_with_schedule(model, size, graph, exported, plan, target, config)
    if args.json:
        print(json.dumps({"graph": graph.name, "fingerprint": graph.fingerprint, **identity,
                          "micro_batches": plan.micro_batches, "target": str(target), **run.to_json_dict()}, indent=1))
    else:
        print(graph.summary())
        kind = "training" if plan.template.trains else "inference (forward-only)"
        print(f"{what} on {target}: {config.warmup_steps + config.timed_steps} {kind} steps ({config.warmup_steps} "
              "warm-up), then one traced to check the order")
        print(run.describe())
    return 0 if run.ok and run.order_kept else 1
