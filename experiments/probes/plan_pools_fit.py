"""Does a one-process plan's speed-up hold in your own `model.fit`? The plan's pools against TensorFlow's default.

    python experiments/probes/plan_pools_fit.py --plan PLAN.json --model SPEC [--rounds 3] [--steps 40]
        [--steps-per-execution 10] [--out results/plan_pools_fit.json]

`placer optimize` measures its one-process candidates as placer runs a step (a session over the traced graph).
A user carries the recommended pools into their own training with `placer.apply.use_plan_pools`. Here each round
runs `model.fit` twice, each in a fresh Python (TensorFlow fixes its pools when it starts): once under
TensorFlow's default pools, once after `use_plan_pools(PLAN)`; the order alternates from round to round. Each
fit builds the model from `--model` (a function returning a compiled Keras model, the one the plan was made for),
runs on a synthetic batch of its input's shape, and times `--steps` steps after two calls of warm-up
(`placer.keras.StepTimer`, `--steps-per-execution` steps a call). Reported: each side's median over rounds, the
median of the per-round ratios, and the plan's own measured ratio (its provenance: the default's median over the
recommended one's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from experiments._report import write_report  # noqa: E402

DEFAULT_CANDIDATE = "one process, default"
"""The name `placer optimize` gives one process under TensorFlow's default pools."""


def fit_step_seconds(model_spec: str, plan: str | None, steps: int, steps_per_execution: int,
                     jit_compile: str = "auto") -> float:
    """Median seconds a `fit` step of `model_spec` takes in this process, after `use_plan_pools(plan)` when given;
    `jit_compile` as Keras's `compile` takes it ("auto", its default, compiles with XLA where it can)."""
    if plan:
        from placer.apply import use_plan_pools

        print(use_plan_pools(plan), file=sys.stderr)
    import numpy as np

    from placer.keras import StepTimer
    from placer.models.loader import load_keras_model

    model, _ = load_keras_model(model_spec)
    model.compile(optimizer="adam", loss=model.loss, steps_per_execution=steps_per_execution,
                  jit_compile={"auto": "auto", "true": True, "false": False}[jit_compile])
    shape = tuple(model.inputs[0].shape)
    batch = shape[0] or 32
    inputs = np.random.default_rng(0).random((batch * steps_per_execution, *shape[1:]), dtype=np.float32)
    outputs = model.outputs[0].shape[-1]
    targets = np.random.default_rng(1).integers(0, outputs, size=(batch * steps_per_execution,))
    timer = StepTimer(warmup=2)
    calls = 2 + max(1, steps // steps_per_execution)
    model.fit(np.tile(inputs, (calls,) + (1,) * (inputs.ndim - 1)), np.tile(targets, calls), batch_size=batch,
              epochs=1, verbose=0, shuffle=False, callbacks=[timer])
    return timer.median


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True, help="a plan file of one process (placer optimize's output)")
    parser.add_argument("--model", required=True, help="the model function the plan was made for (SPEC)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40, help="timed fit steps per run (default 40)")
    parser.add_argument("--steps-per-execution", type=int, default=10)
    parser.add_argument("--jit-compile", choices=("auto", "true", "false"), default="auto",
                        help="Keras's compile(jit_compile=...): auto (its default: XLA where it can), true, false")
    parser.add_argument("--out", default="results/plan_pools_fit.json")
    parser.add_argument("--one", choices=("default", "plan"), help=argparse.SUPPRESS)  # a fit process's side
    args = parser.parse_args(argv)
    if args.one:
        seconds = fit_step_seconds(args.model, args.plan if args.one == "plan" else None, args.steps,
                                   args.steps_per_execution, args.jit_compile)
        print(json.dumps({"seconds": seconds}))
        return 0
    if args.rounds < 1 or args.steps < 1 or args.steps_per_execution < 1:
        parser.error("give at least 1 round, 1 step and 1 step per execution")

    from placer.plan import read_plan_file

    plan = read_plan_file(args.plan)  # a bad plan fails here, before any fit runs
    from placer.measure.targets import InProcess

    if not isinstance(plan.machine, InProcess):
        parser.error(f"{args.plan} runs on {plan.machine}, not in one process: placer apply runs it")
    measured = plan.provenance.get("measured", {}).get("median")
    default = plan.provenance.get("alternatives", {}).get(DEFAULT_CANDIDATE)
    times: dict[str, list[float]] = {"default": [], "plan": []}
    for round_index in range(args.rounds):
        for side in (("default", "plan") if round_index % 2 == 0 else ("plan", "default")):
            run = subprocess.run([sys.executable, __file__, "--plan", args.plan, "--model", args.model,
                                  "--steps", str(args.steps), "--steps-per-execution", str(args.steps_per_execution),
                                  "--jit-compile", args.jit_compile, "--one", side], capture_output=True, text=True,
                                 env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
            if run.returncode != 0:
                raise SystemExit(f"the {side} fit failed: {run.stderr[-2000:]}")
            times[side].append(json.loads(run.stdout.strip().splitlines()[-1])["seconds"])
            print(f"round {round_index + 1}, {side}: {times[side][-1] * 1e3:.2f} ms a step", file=sys.stderr,
                  flush=True)
    ratios = [d / p for d, p in zip(times["default"], times["plan"])]
    rows = [{"what": "model.fit, TensorFlow's default pools", "ms": statistics.median(times["default"]) * 1e3,
             "rounds_ms": [round(t * 1e3, 3) for t in times["default"]]},
            {"what": f"model.fit, the plan's pools ({plan.machine})", "ms": statistics.median(times["plan"]) * 1e3,
             "rounds_ms": [round(t * 1e3, 3) for t in times["plan"]]},
            {"what": "fit: default over the plan's, per round (median)", "ratio": statistics.median(ratios),
             "rounds_ms": [round(r, 3) for r in ratios]},
            {"what": "placer optimize: default over the plan's", "ratio": default / measured if default and measured
             else None}]
    write_report("plan_pools_fit", ["what", "ms", "ratio", "rounds_ms"], rows, args.out, plan=args.plan,
                 model=args.model, steps=args.steps, steps_per_execution=args.steps_per_execution,
                 jit_compile=args.jit_compile,
                 command=" ".join(["python", "experiments/probes/plan_pools_fit.py",
                                   *(argv if argv is not None else sys.argv[1:])]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
