"""`placer schedule SHAPE` or `placer schedule --model MODEL --placement P`: schedule micro-batches of one of
Tessel's placement shapes, or of a placed model on a simulated target, with every method; print makespan,
bubble rate and peak memory, and save a plan and its timeline.
"""

from __future__ import annotations

import json

from placer.errors import PlacerError


def add_schedule_arguments(parser) -> None:
    from placer.schedule.methods import METHODS
    from placer.schedule.shapes import SHAPES

    parser.add_argument("shape", nargs="?", choices=sorted(SHAPES), help="the placement shape (pipeline: stage i on "
                        "device i); or give --model")
    parser.add_argument("--devices", type=int, default=4, help="modeled devices of the shape (default 4)")
    parser.add_argument("--model", help="instead of a shape: a built-in model or module:function / file.py:function "
                        "returning an OpGraph, placed by --placement on --cluster; one forward and one backward "
                        "block per device, spans from the simulator's op costs, memory in MiB of activations")
    parser.add_argument("--size", default="tiny", help="size of a built-in --model (default tiny)")
    parser.add_argument("--placement", default="expert", help="with --model: a placement file or a baseline name "
                        "(default expert)")
    parser.add_argument("--cluster", default="modeled:2xV100", help="with --model: a simulated target "
                        "(default modeled:2xV100)")
    parser.add_argument("--micro-batches", type=int, default=8, help="micro-batches per training step (default 8)")
    parser.add_argument("--memory-limit", type=int, help="memory units per device; a forward block keeps 1 "
                        "(default: unlimited)")
    parser.add_argument("--method", action="append", choices=METHODS, help=f"give several times (default: all of {', '.join(METHODS)})")
    parser.add_argument("--time-limit", type=float, default=30.0, help="seconds each Tessel search may take; when "
                        "it runs out, the best plan so far is kept and marked (default 30)")
    parser.add_argument("--save", metavar="FILE", help="write the plan of the first --method (default tessel) as a "
                        "placer.schedule JSON file")
    parser.add_argument("--timeline", metavar="FILE", help="write that plan as a Chrome trace")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def schedule_command(args) -> int:
    from placer.schedule.methods import METHODS, make_schedule
    from placer.schedule.shapes import shape_template

    if args.micro_batches < 1:
        raise PlacerError(f"--micro-batches must be at least 1, got {args.micro_batches}")
    if (args.shape is None) == (args.model is None):
        raise PlacerError("give a shape (e.g. `placer schedule v-shape`) or --model MODEL, not both")
    template = shape_template(args.shape, args.devices) if args.shape else _model_template(args)
    methods = args.method or list(METHODS)
    plans = {method: make_schedule(method, template, args.micro_batches, args.memory_limit, time_limit=args.time_limit)
             for method in methods}
    kept = args.method[0] if args.method else "tessel"
    first = plans[kept]
    if args.save:
        first.save(args.save)
    if args.timeline:
        first.save_chrome_trace(args.timeline)
    rows = [{"method": method, "makespan": plan.makespan, "bubble_rate": plan.bubble_rate,
             "peak_memory": max(plan.peak_memory().values()), "search_status": plan.search_status,
             "search_seconds": plan.search_seconds} for method, plan in plans.items()]
    if args.json:
        print(json.dumps({"shape": args.shape, "model": args.model, "template": template.to_json_dict(), "devices": args.devices, "micro_batches": args.micro_batches,
                          "memory_limit": args.memory_limit, "plans": rows}, indent=1))
        return 0
    limit = "unlimited memory" if args.memory_limit is None else f"memory limit {args.memory_limit} units per device"
    where = f"{args.shape} on {args.devices} devices" if args.shape else f"{template.name} ({args.placement} on {args.cluster})"
    print(f"{where}, {args.micro_batches} micro-batches, {limit}")
    for row in rows:
        over = (" (over the limit: GPipe ignores it)" if args.memory_limit is not None
                and row["peak_memory"] > args.memory_limit else "")
        searched = f", searched {row['search_seconds']:.2f} s ({row['search_status']})" if row["search_seconds"] else ""
        seconds = f" ({row['makespan'] * template.time_unit * 1e3:.3f} ms)" if template.time_unit else ""
        print(f"  {row['method']:<12} makespan {row['makespan']:>5}{seconds}  bubbles {row['bubble_rate']:6.1%}  "
              f"peak memory {row['peak_memory']}{over}{searched}")
    for path, what in ((args.save, "plan"), (args.timeline, "timeline (chrome://tracing or https://ui.perfetto.dev)")):
        if path:
            print(f"wrote the {kept} {what}: {path}")
    return 0


def _model_template(args):
    """The block template of a placed model, its op costs from the simulated target's simulator."""
    from pathlib import Path

    from placer.baselines import make_baseline
    from placer.cost import open_target, parse_target_spec
    from placer.models import is_builtin_model, load_model
    from placer.placement import load_placement
    from placer.schedule.from_placement import blocks_from_placement

    spec = parse_target_spec(args.cluster)
    if spec.backend != "simulated":
        raise PlacerError(f"--cluster {args.cluster} is measured; scheduling needs op costs from a simulated target "
                          "(modeled:2xV100, a machine file or calibrated:FILE)")
    graph = load_model(args.model, args.size)
    with open_target(graph, spec) as target:
        if Path(args.placement).exists():
            placement = load_placement(args.placement, graph, target.devices)
        else:
            placement = make_baseline(args.placement, graph, target.devices,
                                      model=args.model if is_builtin_model(args.model) else None, simulator=target.simulator)
        return blocks_from_placement(target.simulator, placement, args.micro_batches)
