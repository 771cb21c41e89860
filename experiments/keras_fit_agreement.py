"""How close the step time `model.fit` achieves on a Keras 3 model placed by `placer.keras.place` comes to what
`placer apply` measures for the same placement (the op-level placement that runs each layer where `place` does).

    python experiments/keras_fit_agreement.py [--model SPEC] [--size small] [--target inprocess:2] [--repeats 20]
                                              [--rounds 3] [--placement FILE] [--steps-per-execution 1 10]
                                              [--out results/keras_fit_agreement.json]

Per placement (every layer on the first device; every other layer on the second; and a `--placement` file with a
layer placement, from `placer export --keras`): `placer apply`'s timing (`run_training`: the measurement worker,
a session, synthetic data made in the graph) and `model.fit`'s (a fresh process with the same in-process CPU
devices, `place`, the `StepTimer` callback, after the same warm-up) on batches of the traced step's size, in
`--rounds` interleaved rounds (apply, fit, the next placement, ...; each row is the median of its rounds' medians).
The fit process also times the placed model's own `train_step` called in a loop as a `tf.function` on the same
batch, without `fit` around it: the difference between that and `placer apply` is TensorFlow's eager
multi-device function runtime against a session; between `fit` and it, `fit`'s own per-step work (its data
iterator, callbacks, logs). `--steps-per-execution 1 10` also times `fit` compiled to run 10 steps per call of
its training function (Keras's `steps_per_execution`), which pays that per-call work once per 10 steps; where
the ops ran is traced at one step per call (TensorFlow does not export the partition graphs of the loop that
runs N).
The default model is `mlp` below: four Dense layers, 64 wide at `tiny` and 1024 wide at `small`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

WIDTHS = {"tiny": 64, "small": 1024}
WARMUP = 2


def mlp(size: str = "small"):
    """The default model: a compiled Keras 3 MLP whose four Dense layers can sit on different devices."""
    import keras

    width = WIDTHS[size]
    model = keras.Sequential([keras.Input((width,)), *[keras.layers.Dense(width, activation="relu") for _ in range(3)],
                              keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=f"{Path(__file__).resolve()}:mlp",
                        help="a model function returning a compiled keras.Model with one input (default: mlp above)")
    parser.add_argument("--size", default="small")
    parser.add_argument("--target", default="inprocess:2", help="inprocess:N: N logical CPU devices in one process")
    parser.add_argument("--repeats", type=int, default=20, help="timed steps per placement, each way, per round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (apply then fit, per placement)")
    parser.add_argument("--placement", help="also a placement file carrying a layer placement (placer export --keras)")
    parser.add_argument("--steps-per-execution", type=int, nargs="+", default=[1], metavar="N",
                        help="fit with each of these steps_per_execution (Keras runs N steps per call of its "
                             "training function; default 1)")
    parser.add_argument("--fit-layers", help=argparse.SUPPRESS)  # the fit process: a layer placement as JSON
    parser.add_argument("--out")
    args = parser.parse_args()
    if not args.target.startswith("inprocess:"):
        parser.error("--target must be inprocess:N: model.fit runs on this process's own devices")
    if args.rounds < 1 or args.repeats < 1 or min(args.steps_per_execution) < 1:
        parser.error("--rounds, --repeats and --steps-per-execution must be at least 1")
    if args.fit_layers:
        print(json.dumps(fit_step_times(args)))
        return

    from experiments._report import write_report
    from placer.apply import run_training
    from placer.keras import LayerPlacement, layer_paths, placement_of_layers, read_layer_placement
    from placer.measure import MeasureConfig, Measurer
    from placer.models.loader import load_keras_model

    model, graph = load_keras_model(args.model, args.size)
    config = MeasureConfig(warmup_steps=WARMUP, timed_steps=args.repeats)
    rows = []
    with Measurer(args.target, config) as measurer:
        devices = measurer.devices.names
        paths = list(layer_paths(model))
        layer_placements = {
            "one device": LayerPlacement({path: devices[0] for path in paths}),
            "alternate layers": LayerPlacement({path: devices[i % len(devices)] for i, path in enumerate(paths)}),
        }
        if args.placement:
            layer_placements[Path(args.placement).name] = read_layer_placement(args.placement)
        rounds: dict[str, list[tuple]] = {name: [] for name in layer_placements}
        for _ in range(args.rounds):
            for name, layers in layer_placements.items():
                applied = run_training(graph, placement_of_layers(graph, model, layers, measurer.devices), measurer,
                                       config)
                rounds[name].append((applied, _fit_in_fresh_process(args, layers)))
        for name, measured in rounds.items():
            apply_ms = statistics.median(applied.seconds for applied, _ in measured) * 1e3
            train_step_ms = statistics.median(fitted["train_step"] for _, fitted in measured) * 1e3
            for per_call in args.steps_per_execution:
                fit_ms = statistics.median(fitted["fit"][str(per_call)] for _, fitted in measured) * 1e3
                rows.append({"placement": name, "steps_per_execution": per_call, "apply_ms": apply_ms,
                             "train_step_ms": train_step_ms, "fit_ms": fit_ms,
                             "fit_vs_apply_pct": (fit_ms / apply_ms - 1) * 100,
                             "within_10pct": abs(fit_ms / apply_ms - 1) <= 0.10,
                             "train_step_vs_apply_pct": (train_step_ms / apply_ms - 1) * 100,
                             "rounds": [{"apply_ms": applied.seconds * 1e3, "train_step_ms": fitted["train_step"] * 1e3,
                                         "fit_ms": fitted["fit"][str(per_call)] * 1e3} for applied, fitted in measured],
                             "fit_check": measured[-1][1]["check"],
                             "apply_moved_ops": len(measured[-1][0].moved_ops)})
    command = "python experiments/keras_fit_agreement.py " + " ".join(sys.argv[1:])
    write_report("keras_fit_agreement",
                 ["placement", "steps_per_execution", "apply_ms", "train_step_ms", "fit_ms", "fit_vs_apply_pct",
                  "within_10pct"], rows,
                 args.out, command=command.strip(), model=args.model, size=args.size, target=args.target,
                 repeats=args.repeats, rounds=args.rounds, warmup=WARMUP)


def _fit_in_fresh_process(args, layers) -> dict:
    """`model.fit`'s step times in a new process: its logical CPU devices must be made before TensorFlow starts."""
    command = [sys.executable, __file__, "--model", args.model, "--size", args.size, "--target", args.target,
               "--repeats", str(args.repeats), "--fit-layers", json.dumps(layers.to_json_dict()),
               "--steps-per-execution", *map(str, args.steps_per_execution)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    if run.returncode != 0:
        raise SystemExit(f"the fit process failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def fit_step_times(args) -> dict:
    """In the fit process: place the model, check one traced fit step's devices, then time `repeats` calls of
    `fit`'s training function per `--steps-per-execution` (seconds per step, medians), and as many of the
    model's `train_step` as a `tf.function` on one batch."""
    from placer.keras import LayerPlacement, StepTimer, make_logical_cpus, place, trace_devices

    make_logical_cpus(int(args.target.split(":", 1)[1]))
    import numpy as np

    from placer.graph.keras_model import DEFAULT_BATCH_SIZE
    from placer.models.loader import load_keras_model

    model, graph = load_keras_model(args.model, args.size)
    placed = place(model, LayerPlacement.from_json_dict(json.loads(args.fit_layers)))
    batch = model.inputs[0].shape[0] or DEFAULT_BATCH_SIZE  # the batch of the traced step placer apply runs
    steps = (WARMUP + args.repeats) * max(args.steps_per_execution)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch * steps, *model.inputs[0].shape[1:])).astype("float32")
    y = rng.integers(0, model.outputs[0].shape[-1], size=batch * steps)
    # Where the ops ran is traced at one step per call: with N, Keras calls the same step function N times in
    # a while loop, whose partition graphs TensorFlow does not export to the trace.
    with trace_devices() as trace:
        model.fit(x[:batch], y[:batch], batch_size=batch, epochs=1, verbose=0)
    fit = {}
    for per_call in args.steps_per_execution:
        model.steps_per_execution, model.train_function = per_call, None  # Keras builds it again for N steps
        timer = StepTimer(warmup=WARMUP)
        calls = (WARMUP + args.repeats) * per_call
        model.fit(x[:batch * calls], y[:batch * calls], batch_size=batch, epochs=1, shuffle=False, verbose=0,
                  callbacks=[timer])
        fit[str(per_call)] = timer.median
    return {"fit": fit, "train_step": _train_step_median(model, x[:batch], y[:batch], args.repeats),
            "check": placed.check(trace).describe()}


def _train_step_median(model, x, y, repeats: int) -> float:
    """The model's own `train_step` on one batch, as `fit` compiles it but called directly; each call waits for
    its logs, as `fit` does before its callbacks."""
    import tensorflow as tf

    step = tf.function(lambda inputs, targets: model.train_step((inputs, targets)))
    inputs, targets = tf.constant(x), tf.constant(y)
    times = []
    for index in range(WARMUP + repeats):
        started = time.perf_counter()
        tf.nest.map_structure(lambda value: value.numpy(), step(inputs, targets))
        if index >= WARMUP:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


if __name__ == "__main__":
    main()
