"""`placer schedule SHAPE`, `placer schedule MODEL [--placement P]` or `placer schedule PLACEMENT.json`: schedule micro-batches of one of
Tessel's placement shapes, or of a placed model (spans priced on a simulated target with the transfers each
block receives, or profiled on a measured target), with every method; print makespan, bubble rate and peak
memory (on a simulated target, each plan's step priced op by op), save a plan and its timeline; `--measure`
runs the plans.
"""

from __future__ import annotations

import json

from placer.commands.placement_option import check_placement_name, placement_named
from placer.errors import PlacerError


def add_schedule_arguments(parser) -> None:
    from placer.commands.target_option import add_target_argument
    from placer.measure.config import add_measure_arguments
    from placer.schedule.methods import ALL_METHODS, METHODS, SPLIT_METHODS
    from placer.schedule.shapes import SHAPES
    from placer.models.loader import MODEL_HELP

    parser.add_argument("shape", nargs="?", metavar="SHAPE|MODEL|PLACEMENT.json",
                        help=f"what to schedule: one of Tessel's placement shapes ({', '.join(sorted(SHAPES))}; "
                        "pipeline: stage i on device i), a model (same as --model), or a placement file (same as "
                        "--placement FILE, its model read from the file)")
    parser.add_argument("--devices", type=int, default=4, help="modeled devices of the shape (default 4)")
    parser.add_argument("--model", help=f"instead of a shape: {MODEL_HELP}, placed by --placement on --target; one "
                        "forward and one backward block per device, spans from op costs (see --target), memory in MiB of activations")
    parser.add_argument("--size", help="size of a built-in model (default: the placement file's, else tiny)")
    parser.add_argument("--placement", default="expert", help="with --model: a placement file or a heuristic's name "
                        "(default expert)")
    add_target_argument(parser, "with --model: a simulated target, spans from the model's micro-batched step "
                        "simulated there (a built-in model: each block's ops, the transfers it receives, and the "
                        "merge, update and overheads as a tail; another model: its op costs alone), and each "
                        "plan's micro-batched step (its order, transfers and update) simulated op by op there (default "
                        "modeled:2xV100; calibrated:FILE for the twin of a real target); or a measured one (inprocess:2, "
                        "local:2), spans from op costs profiled there on the model built at batch/M: the plan `placer "
                        "apply PLACEMENT.json --schedule PLAN` runs there", default="modeled:2xV100")
    parser.add_argument("--micro-batches", type=int, default=8, help="micro-batches per training step (default 8)")
    parser.add_argument("--memory-limit", type=int, help="memory units per device; a forward block keeps 1 "
                        "(default: unlimited)")
    parser.add_argument("--method", "--strategy", action="append", choices=ALL_METHODS,
                        help=f"give several times (default: all of {', '.join(METHODS)}, and with "
                        f"--split-weight-gradients {', '.join(SPLIT_METHODS)}); {', '.join(SPLIT_METHODS)} implies "
                        "--split-weight-gradients")
    parser.add_argument("--split-weight-gradients", action="store_true", help="with --model: split each device's "
                        "backward into its input-gradient chain (b@DEVICE, what another device's backward waits for) "
                        "and its weight gradients (w@DEVICE, read only by the update), which every method then "
                        "schedules as blocks of their own (ZeroBubble); refused where no device has both")
    parser.add_argument("--time-limit", type=float, default=30.0, help="seconds each Tessel search may take; when "
                        "it runs out, the best plan so far is kept and marked (default 30)")
    parser.add_argument("--save", metavar="FILE", help="write the plan of the first --method (default tessel) as a "
                        "placer.schedule JSON file; with --model it records the model and placement it was made for, "
                        "and its op-level prediction, which `placer apply --schedule` checks and prints")
    parser.add_argument("--save-plan", metavar="FILE", help="with --model and a target that can run it (inprocess:N, "
                        "local:..., or calibrated:FILE, the twin of the real target it was calibrated on): write a "
                        "placer.plan file holding the machine use (the target's processes, cores and thread pools), "
                        "the placement and the first --method's schedule, with its op-level prediction (else its "
                        "makespan) as the predicted step time; `placer apply PLAN` runs it")
    parser.add_argument("--timeline", metavar="FILE", help="write that plan as a Chrome trace")
    parser.add_argument("--measure", action="store_true", help="with --model and a measured --target (inprocess:2, "
                        "local:2): run each plan for real as a micro-batched step (the model built at batch/M, its "
                        "forward and backward copied per micro-batch, one update) whose devices keep the plan's order; "
                        "print measured vs predicted step time and whether the traced step kept the order")
    add_measure_arguments(parser)
    parser.add_argument("--inference", action="store_true", help="schedule forward blocks only (inference: no "
                        "backward, no activations kept); with --measure each plan runs as a forward-only micro-batched "
                        "step (no gradients, no update)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def schedule_command(args) -> int:
    from placer.cost import parse_target_spec
    from placer.schedule.origin import with_prediction
    from placer.schedule.shapes import shape_template

    from placer.files import check_output_file

    if args.micro_batches < 1:
        raise PlacerError(f"--micro-batches must be at least 1, got {args.micro_batches}")
    if args.memory_limit is not None and args.memory_limit < 0:  # 0 is refused by the search, with what it needs
        raise PlacerError(f"--memory-limit is a count of memory units per device (a forward block keeps 1), not "
                          f"{args.memory_limit}; leave it out for no limit")
    if not args.time_limit > 0:
        raise PlacerError(f"--time-limit must be a positive number of seconds, got {args.time_limit}")
    for flag, path in (("--save", args.save), ("--save-plan", args.save_plan), ("--timeline", args.timeline)):
        check_output_file(path, flag)
    _read_subject(args)
    _check_split(args)
    if args.save_plan:
        _check_plan_target(args)
    measured = args.model is not None and parse_target_spec(args.target).backend == "measured"
    if args.model is not None:
        check_placement_name(args.placement, args.model, "measured" if measured else "simulated")
    if args.measure and not measured:
        if args.model is None:
            raise PlacerError("--measure needs --model with a built-in model (placer models), which can be built at a "
                              "micro-batch size")
        raise PlacerError(f"--measure runs the plans for real: give a measured --target (inprocess:2, local:2), "
                          f"not {args.target}")
    if measured:
        return _real_target_command(args)
    reference = None
    if args.shape:
        template, placed, price = shape_template(args.shape, args.devices), None, None
        if args.inference:
            template = template.forward_only()
    else:
        template, placed, price = _model_template(args)
    plans = _make_plans(args, template, placed)
    if price is not None:
        predictions, reference = price(plans)
        plans = {method: with_prediction(plan, predictions[method]) for method, plan in plans.items()}
    _save_first(args, plans, placed)
    return _report_plans(args, template, plans, reference)


def _check_split(args) -> None:
    """--split-weight-gradients, set by a method that needs it; refused for a shape or --inference."""
    from placer.schedule.methods import SPLIT_METHODS

    asked = [method for method in args.method or () if method in SPLIT_METHODS]
    args.split_weight_gradients = bool(args.split_weight_gradients or asked)
    if not args.split_weight_gradients:
        return
    why = ("--split-weight-gradients" if not asked else f"--method {asked[0]}")
    if args.shape is not None:
        raise PlacerError(f"{why} splits a placed model's backward: give a model (`placer schedule two-tower`), not "
                          "a shape")
    if args.inference:
        raise PlacerError(f"{why} splits the backward, and --inference schedules forward blocks only: drop one")


def _read_subject(args) -> None:
    """Sorts the positional SHAPE|MODEL|PLACEMENT.json into `args.shape`, or `args.model` and `args.placement`."""
    from pathlib import Path

    from placer.models import is_builtin_model
    from placer.placement import read_placement_file
    from placer.schedule.shapes import SHAPES

    subject = args.shape
    if subject is not None and subject not in SHAPES:
        if args.model is not None:
            raise PlacerError(f"give {subject!r} or --model {args.model}, not both")
        args.shape = None
        if subject.endswith(".json") or Path(subject).is_file():
            metadata = read_placement_file(subject).metadata
            if not metadata.get("model"):
                raise PlacerError(f"{subject} does not record its model: give it as --placement {subject} --model MODEL")
            args.model, args.placement = str(metadata["model"]), subject
            args.size = args.size or metadata.get("size")
        elif is_builtin_model(subject) or ":" in subject:
            args.model = subject
        else:
            raise PlacerError(f"{subject!r} is not a shape ({', '.join(sorted(SHAPES))}), a built-in model (placer "
                              "models), module:function, file.py:function or a placement file")
    args.size = str(args.size or "tiny")
    if (args.shape is None) == (args.model is None):
        raise PlacerError("give a shape (e.g. `placer schedule v-shape`) or a model (`placer schedule two-tower`, "
                          "or --model MODEL), not both")


def _check_plan_target(args) -> None:
    """Refuse --save-plan where the plan could not run, before any work."""
    from placer.cost import parse_target_spec

    if args.shape is not None:
        raise PlacerError("--save-plan writes a plan of a placed model: give --model (or a model or placement file), "
                          "not a shape")
    spec = parse_target_spec(args.target)
    if spec.backend != "measured" and spec.calibration is None:
        raise PlacerError(f"--save-plan writes a plan that `placer apply` runs, so it needs a target that can run it: "
                          f"inprocess:N, local:..., or calibrated:FILE (the twin of a real target), not {args.target}")


def _make_plans(args, template, placed=None) -> dict:
    """Every --method's plan of `template`, each recording what it was made for. placed: (graph, placement file)
    of a placed model."""
    from placer.schedule.methods import make_schedule, methods_for
    from placer.schedule.origin import PlanOrigin, with_origin

    plans = {method: make_schedule(method, template, args.micro_batches, args.memory_limit, time_limit=args.time_limit)
             for method in args.method or methods_for(template)}
    if placed is not None:
        origin = PlanOrigin.of(args.model, args.size, placed[1])
        plans = {method: with_origin(plan, origin) for method, plan in plans.items()}
    return plans


def _save_first(args, plans: dict, placed) -> None:
    """The first --method's plan to --save, its timeline to --timeline, and a plan file to --save-plan."""
    first = plans[_kept(args)]
    if args.save:
        first.save(args.save)
    if args.timeline:
        first.save_chrome_trace(args.timeline)
    if args.save_plan:
        _save_plan(args, first, *placed)


def _save_plan(args, schedule, graph, placement_file) -> None:
    """The plan of the placed model on --target with `schedule`, its op-level prediction (else its makespan) as
    the predicted step time."""
    import shlex

    from placer.cost import StepTime
    from placer.plan import Plan
    from placer.schedule.origin import plan_prediction

    prediction, seconds = plan_prediction(schedule), schedule.seconds()
    if prediction is not None:
        predicted = prediction.step_time
    else:
        predicted = None if seconds is None else StepTime(seconds, "simulated", args.target, samples=(seconds,))
    command = ["placer", "schedule", args.model, "--size", args.size, "--placement", args.placement, "--target",
               args.target, "--micro-batches", str(args.micro_batches), "--method", _kept(args)]
    command += ["--memory-limit", str(args.memory_limit)] if args.memory_limit is not None else []
    command += ["--inference"] if args.inference else []
    command += ["--split-weight-gradients"] if args.split_weight_gradients else []
    Plan.made_for(args.model, args.size, graph, placement_file, args.target, schedule=schedule, predicted=predicted,
                  made_by="placer schedule", command=shlex.join([*command, "--save-plan", args.save_plan])
                  ).save(args.save_plan)


def _kept(args) -> str:
    """The method whose plan --save and --timeline write."""
    return args.method[0] if args.method else "tessel"


def _report_plans(args, template, plans: dict, reference: tuple | None = None) -> int:
    """Each plan's row; `reference`, for a built-in model priced op by op: (the placement's step without a
    schedule, the bound of any schedule of these micro-batches), what a schedule must beat and cannot."""
    from placer.schedule.origin import plan_prediction

    rows = []
    for method, plan in plans.items():
        prediction = plan_prediction(plan)
        rows.append({"method": method, "makespan": plan.makespan, "makespan_seconds": plan.seconds(),
                     "bubble_rate": plan.bubble_rate, "peak_memory": max(plan.peak_memory().values()),
                     "search_status": plan.search_status, "search_seconds": plan.search_seconds,
                     "predicted": None if prediction is None else prediction.to_json_dict()})
    unscheduled, bound = reference if reference is not None else (None, None)
    if args.json:
        print(json.dumps({"shape": args.shape, "model": args.model, "template": template.to_json_dict(), "devices": args.devices, "micro_batches": args.micro_batches,
                          "memory_limit": args.memory_limit, "plans": rows,
                          "unscheduled": None if unscheduled is None else unscheduled.to_dict(),
                          "schedule_bound": None if bound is None else bound.to_dict()}, indent=1))
        return 0
    limit = "unlimited memory" if args.memory_limit is None else f"memory limit {args.memory_limit} units per device"
    where = f"{args.shape} on {args.devices} devices" if args.shape else f"{template.name} ({args.placement} on {args.target})"
    print(f"{where}, {args.micro_batches} micro-batches, {limit}")
    for row in rows:
        over = (" (over the limit: GPipe ignores it)" if args.memory_limit is not None
                and row["peak_memory"] > args.memory_limit else "")
        searched = f", searched {row['search_seconds']:.2f} s ({row['search_status']})" if row["search_seconds"] else ""
        seconds = f" ({row['makespan_seconds'] * 1e3:.3f} ms)" if row["makespan_seconds"] is not None else ""
        predicted = ""
        if row["predicted"] is not None:
            predicted = (f"  op by op {row['predicted']['seconds'] * 1e3:.3f} ms" if row["predicted"]["ok"]
                         else f"  op by op FAILED ({row['predicted']['failure']})")
        print(f"  {row['method']:<12} makespan {row['makespan']:>5}{seconds}{predicted}  bubbles "
              f"{row['bubble_rate']:6.1%}  peak memory {row['peak_memory']}{over}{searched}")
    if unscheduled is not None:
        whole = (f"{unscheduled.seconds * 1e3:.3f} ms" if unscheduled.ok
                 else f"FAILED ({unscheduled.failure})")
        print(f"  {'none':<12} the whole batch at once, no schedule: op by op {whole}")
        best = min((row["predicted"]["seconds"] for row in rows if row["predicted"] and row["predicted"]["ok"]),
                   default=None)
        if unscheduled.ok and best is not None and best >= unscheduled.seconds:
            print(f"no schedule beats the whole batch here: no schedule of {args.micro_batches} micro-batches can go "
                  f"below the schedules' {bound.describe()}; micro-batches run each op on fewer samples, nearer its "
                  "kernel's fixed cost" if bound.value >= unscheduled.seconds
                  else f"no schedule found beats the whole batch here (the schedules' {bound.describe()})")
    if any(row["predicted"] is not None for row in rows):
        print(f"makespan: the blocks' spans, priced on {args.target} with the transfers each block receives, and the "
              f"tail (merge, update, overheads); op by op: the micro-batched step in each plan's order simulated on "
              f"{args.target} with its transfers, barriers and update (what `placer apply --schedule` runs)")
    for path, what in ((args.save, "plan"), (args.timeline, "timeline (chrome://tracing or https://ui.perfetto.dev)"),
                       (args.save_plan, "schedule in a plan file (run it with `placer apply`)")):
        if path:
            print(f"wrote the {_kept(args)} {what}: {path}")
    return 0


def _model_template(args):
    """The block template of a placed model (forward blocks only with --inference), the graph and placement
    file it was made for, and for a model that can be built at the micro-batch size (`placer.models.
    rebuildable_batch`: a built-in one, a model function with a `batch` parameter or a Keras model's open batch)
    how to price its plans op by op on the simulated target (None for another). Such a model's spans are priced
    from its micro-batched step simulated on that target (`priced_template`: transfers, barriers, the update and
    overheads included); another model's are its op costs there alone."""
    from placer.cost import open_target, parse_target_spec
    from placer.models import load_model, rebuildable_batch
    from placer.schedule.from_placement import blocks_from_placement

    graph = load_model(args.model, args.size)
    spec = parse_target_spec(args.target)
    with open_target(graph, spec) as target:
        placement = placement_named(args.placement, args.model, graph, target.devices, target.simulator)
        template = blocks_from_placement(target.simulator, placement, args.micro_batches,
                                         split_weight_gradients=args.split_weight_gradients)
    if args.inference:
        template = template.forward_only()
    placed = (graph, placement.to_file(graph, args.placement))
    if rebuildable_batch(args.model, args.size) is None:
        return template, placed, None
    from placer.schedule.micro_batch import build_micro_batch_graph, placement_at_micro_batch
    from placer.schedule.predict import predict_plans, priced_template

    micro_batch_graph = build_micro_batch_graph(args.model, args.size, args.micro_batches)
    micro_batch_placement = placement_at_micro_batch(placement, graph, micro_batch_graph, spec.devices)
    template = priced_template(template, micro_batch_graph, micro_batch_placement, spec)

    def price(plans: dict) -> tuple[dict, tuple]:
        """Each plan's prediction op by op, and what they are read against: the whole batch unscheduled, and the
        bound of any schedule of these micro-batches."""
        from placer.schedule.predict import schedule_bound

        with open_target(graph, spec) as whole:
            unscheduled = whole.evaluate(placement)
        reference = (unscheduled, schedule_bound(micro_batch_graph, args.micro_batches, spec))
        return predict_plans(plans, micro_batch_graph, micro_batch_placement, spec), reference

    return template, placed, price


def _real_target_command(args) -> int:
    """Every method's plan of the model placed on the measured --target, its spans profiled there on the model
    built at the micro-batch size; with --measure each plan is run there for real."""
    from placer.cost import parse_target_spec
    from placer.measure import Measurer
    from placer.measure.config import measure_config
    from placer.models import load_model, require_rebuildable_batch
    from placer.schedule.execute import profiled_template, run_schedule, scheduled_step, step_for_plan
    from placer.schedule.micro_batch import build_micro_batch_graph, placement_at_micro_batch

    config = measure_config(args)
    graph = load_model(args.model, args.size)
    try:
        require_rebuildable_batch(args.model, args.size)
    except PlacerError as error:
        raise PlacerError(f"--target {args.target} profiles the model built at a micro-batch size: {error}; or "
                          "schedule on a simulated --target (modeled:2xV100)") from None
    micro_batch_graph = build_micro_batch_graph(args.model, args.size, args.micro_batches)
    with Measurer(parse_target_spec(args.target).measured, config) as measurer:
        devices = measurer.devices
        placement = placement_named(args.placement, args.model, graph, devices)
        placed = (graph, placement.to_file(graph, args.placement))
        placement = placement_at_micro_batch(placement, graph, micro_batch_graph, devices)
        template = profiled_template(measurer, micro_batch_graph, placement, args.micro_batches,
                                     split_weight_gradients=args.split_weight_gradients)
        if args.inference:
            template = template.forward_only()
        plans = _make_plans(args, template, placed)
        _save_first(args, plans, placed)
        if not args.measure:
            return _report_plans(args, template, plans)
        # Every plan orders the same template's blocks, so one step (training, or forward-only) serves them all.
        step, placement = step_for_plan(next(iter(plans.values())), micro_batch_graph, placement, devices)
        rows = []
        for plan in plans.values():
            run = run_schedule(measurer, scheduled_step(step, placement, devices, plan))
            rows.append(run.to_json_dict())
            if not args.json:
                print(run.describe(), flush=True)
    if args.json:
        print(json.dumps({"model": args.model, "size": args.size, "target": args.target,
                          "micro_batches": args.micro_batches, "template": template.to_json_dict(), "runs": rows}, indent=1))
    return 0 if all(row["order_kept"] for row in rows) else 1
