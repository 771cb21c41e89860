"""Do the schedules behave as pipelines do? A decoder-only LM placed a stage per device, on modeled GPUs (simulated).

    python experiments/probes/pipeline_arithmetic.py [--models gpt2 llama] [--size paper] [--targets modeled:4xH100 ...]
                                              [--micro-batches 4 8 16] [--out FILE]

Per model x target x micro-batches M, on the expert placement (contiguous decoder blocks per GPU, the embedding
with the first and the head with the last): each method's bubble rate beside a pipeline's (p - 1)/(M + p - 1)
for p stages, its makespan (ms, simulated), and its peak activation memory (MiB, the most any device keeps). Spans are the block template's
(`blocks_from_placement`: the simulator's op costs of the whole batch divided by M, transfers left out), so
the numbers say what the schedules do with the model's stages, not what the runtime adds. The arithmetic
assumes equal stages: `stage_imbalance` is the longest forward-plus-backward stage over the mean one, and
`uneven_pipeline_bubble` the arithmetic with the stages' own spans (`uneven_pipeline_bubble`).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from experiments._report import write_report  # noqa: E402

METHODS = ("gpipe", "1f1b", "zb-h1", "tessel-fast")
COLUMNS = ("model", "target", "stages", "micro_batches", "method", "makespan_ms", "bubble_rate", "pipeline_bubble", "uneven_pipeline_bubble",
           "peak_memory_mib",
           "stage_imbalance")


def pipeline_bubble(stages: int, micro_batches: int) -> float:
    """The idle fraction of GPipe and 1F1B on p equal stages with M micro-batches: (p - 1)/(M + p - 1)."""
    return (stages - 1) / (micro_batches + stages - 1)


def uneven_pipeline_bubble(stage_spans: list[float], micro_batches: int) -> float:
    """The same with unequal stages (forward plus backward span each): the slowest stage paces the M - 1
    micro-batches after the first, which crosses every stage, so the makespan is (M - 1) t_max + sum t."""
    total = sum(stage_spans)
    makespan = (micro_batches - 1) * max(stage_spans) + total
    return 1 - micro_batches * total / (len(stage_spans) * makespan)


def arithmetic_rows(model: str, size: str, target: str, micro_batches: tuple[int, ...],
                    methods: tuple[str, ...] = METHODS, time_limit: float = 10.0) -> list[dict]:
    """One row per micro-batch count and method: simulated bubble rate and peak memory beside the arithmetic."""
    from placer.cost import open_target, parse_target_spec
    from placer.heuristics import make_heuristic
    from placer.models import build_model
    from placer.schedule.from_placement import blocks_from_placement
    from placer.schedule.methods import make_schedule

    graph = build_model(model, size)
    rows = []
    with open_target(graph, parse_target_spec(target)) as opened:
        placement = make_heuristic("expert", graph, opened.devices, model=model)
        for m in micro_batches:
            templates = {split: blocks_from_placement(opened.simulator, placement, m, split_weight_gradients=split)
                         for split in (False, True)}
            plain = templates[False]
            stages = len(plain.devices)
            per_stage = {d: sum(b.span for b in plain.blocks if b.devices == (d,)) for d in plain.devices}
            imbalance = max(per_stage.values()) / (sum(per_stage.values()) / stages)
            for method in methods:
                template = templates[method == "zb-h1"]
                plan = make_schedule(method, template, m, time_limit=time_limit)
                rows.append({
                    "model": model, "size": size, "target": target, "stages": stages, "micro_batches": m,
                    "method": method, "makespan_ms": round(plan.seconds() * 1e3, 3),
                    "bubble_rate": round(plan.bubble_rate, 4),
                    "pipeline_bubble": round(pipeline_bubble(stages, m), 4),
                    "uneven_pipeline_bubble": round(uneven_pipeline_bubble(list(per_stage.values()), m), 4),
                    "peak_memory_mib": max(plan.peak_memory().values()), "stage_imbalance": round(imbalance, 3),
                    "blocks": len(template.blocks),
                })
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["gpt2", "llama"])
    parser.add_argument("--size", default="paper")
    parser.add_argument("--targets", nargs="+",
                        default=["modeled:4xH100", "modeled:8xH100", "modeled:4xA100", "modeled:8xA100"])
    parser.add_argument("--micro-batches", nargs="+", type=int, default=[4, 8, 16])
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--time-limit", type=float, default=10.0, help="seconds each Tessel search may take")
    parser.add_argument("--out", help="JSON file (default results/pipeline_arithmetic.json)")
    args = parser.parse_args(argv)
    rows = []
    for model in args.models:
        for target in args.targets:
            rows += arithmetic_rows(model, args.size, target, tuple(args.micro_batches), tuple(args.methods),
                                    args.time_limit)
    write_report("pipeline_arithmetic", COLUMNS, rows, args.out, size=args.size, simulated=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
