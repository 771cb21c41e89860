"""Does `placer optimize` hold on the models people write? Real architectures, compiled `keras.Model`s, each searched
end to end on the local testbed.

    python experiments/model_coverage.py [--models resnet lstm ...] [--budget 600] [--target local:2]
        [--calibration FILE] [--timeout SECONDS] [--out results/model_coverage.json] [--resume] [--list]

The smallest member of every `keras.applications` family at its smallest input (batch 8, no weights; RegNet, which
Keras 3 no longer ships, built here from its configuration), and Keras 3 recurrent and attention models (LSTM,
GRU, bidirectional, stacked, a `MultiHeadAttention` encoder, and the held-out
LSTM encoder-decoder with attention), each built by a function of this file (or `placer.models.heldout`) and passed
to `placer optimize SPEC --budget B --target T --json` in a process of its own. Per model: ops, `placer optimize`'s wall time and where it
went (building, calibrating, profiling, heuristics, learning, measuring), the recommendation, and predicted against
measured step time over the placements it measured (median and worst |error|). Each function takes `batch` (8
by default), so `placer optimize` can build it at a slice of its batch: on a modeled GPU machine it prices data
parallelism and schedules of it; here, on the testbed, data parallelism is left out (`--replicas 1`: it is
measured in experiments/probes/data_parallel.py, 0.46-0.77x one process). A model that fails, or runs past
--timeout, is a row with its error. Beside --out, a folder keeps each model's plan, log and `placer optimize` JSON. Without --calibration the testbed is calibrated once, by the first model, into
results/model_coverage/calibration.json, and every later model reuses it. With --resume, a model whose
`placer optimize` JSON is already in the folder is read back (its wall time is then optimize's own, without the
process's start) instead of run again.
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
from typing import Any, Callable

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from experiments._report import write_report  # noqa: E402

BATCH = 8
DEFAULT_CALIBRATION = "results/model_coverage/calibration.json"
COLUMNS = ["model", "family", "ops", "wall_s", "build_s", "profile_s", "measure_s", "recommended", "recommended_ms",
           "placements_compared", "median_error", "worst_error", "status"]


# -- the models: each returns a compiled keras.Model, built at `batch` (so that replicas can run a slice of it) --


def _compiled(model, loss=None):
    import keras

    model.compile(optimizer="adam", loss=loss or keras.losses.SparseCategoricalCrossentropy())
    return model


def _application(name: str, side: int):
    def build(batch=BATCH):
        import keras

        application = getattr(keras.applications, name)
        return _compiled(application(weights=None, input_tensor=keras.Input((side, side, 3), batch_size=batch),
                                     classes=10))

    build.__name__ = name.lower()
    return build


# The smallest member of each family, at the smallest side it accepts.
APPLICATIONS = {
    "resnet": ("ResNet50", 32), "resnet-v2": ("ResNet50V2", 32), "vgg": ("VGG16", 32), "xception": ("Xception", 71),
    "inception-v3": ("InceptionV3", 75), "inception-resnet-v2": ("InceptionResNetV2", 75),
    "mobilenet": ("MobileNet", 32), "mobilenet-v2": ("MobileNetV2", 32), "mobilenet-v3": ("MobileNetV3Small", 32),
    "densenet": ("DenseNet121", 32), "nasnet": ("NASNetMobile", 32), "efficientnet": ("EfficientNetB0", 32),
    "efficientnet-v2": ("EfficientNetV2B0", 32), "convnext": ("ConvNeXtTiny", 32),
}

# RegNetX-200MF (Radosavovic et al., 2020): the per-stage depths and widths of its published configuration, group
# width 8, bottleneck ratio 1.
REGNET_X_002 = {"stem": 32, "depths": (1, 1, 4, 7), "widths": (24, 56, 152, 368), "group_width": 8}


def regnetx002(batch=BATCH):
    """RegNetX-200MF at 32 px, batch 8 by default. Keras 3 dropped RegNet from `keras.applications`, so the family's smallest
    member is built here from its configuration with Keras layers: X blocks of 1x1, grouped 3x3 (stride 2 first in
    each stage) and 1x1 convolutions, batch norm, a projected shortcut where the shape changes."""
    import keras
    from keras import layers

    def conv_norm(x, filters, kernel, strides=1, groups=1, relu=True):
        x = layers.Conv2D(filters, kernel, strides=strides, padding="same", groups=groups, use_bias=False)(x)
        x = layers.BatchNormalization()(x)
        return layers.ReLU()(x) if relu else x

    image = keras.Input((32, 32, 3), batch_size=batch)
    x = conv_norm(image, REGNET_X_002["stem"], 3, strides=2)
    for depth, width in zip(REGNET_X_002["depths"], REGNET_X_002["widths"]):
        for block in range(depth):
            strides = 2 if block == 0 else 1
            shortcut = conv_norm(x, width, 1, strides, relu=False) if block == 0 else x
            y = conv_norm(x, width, 1)
            y = conv_norm(y, width, 3, strides, groups=width // REGNET_X_002["group_width"])
            y = conv_norm(y, width, 1, relu=False)
            x = layers.ReLU()(layers.Add()([shortcut, y]))
    logits = layers.Dense(10)(layers.GlobalAveragePooling2D()(x))
    return _compiled(keras.Model(image, logits, name="regnetx002"),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True))


IMAGE_MODELS = {"regnet": regnetx002}
"""Families with no member in Keras 3's `keras.applications`, built from their published configuration."""

TOKENS, VOCABULARY, UNITS = 20, 1000, 64


def _sequence_classifier(recurrent: Callable[[Any], Any], batch: int):
    import keras

    tokens = keras.Input((TOKENS,), batch_size=batch, dtype="int32")
    features = recurrent(keras.layers.Embedding(VOCABULARY, UNITS)(tokens))
    return _compiled(keras.Model(tokens, keras.layers.Dense(10)(features)),
                     keras.losses.SparseCategoricalCrossentropy(from_logits=True))


def lstm(batch=BATCH):
    import keras

    return _sequence_classifier(keras.layers.LSTM(UNITS), batch)


def gru(batch=BATCH):
    import keras

    return _sequence_classifier(keras.layers.GRU(UNITS), batch)


def bidirectional_lstm(batch=BATCH):
    import keras

    return _sequence_classifier(keras.layers.Bidirectional(keras.layers.LSTM(UNITS)), batch)


def stacked_lstm(batch=BATCH):
    import keras

    def stack(x):
        for _ in range(2):
            x = keras.layers.LSTM(UNITS, return_sequences=True)(x)
        return keras.layers.LSTM(UNITS)(x)

    return _sequence_classifier(stack, batch)


def attention_encoder(batch=BATCH):
    """A 4-layer Transformer encoder of `keras.layers.MultiHeadAttention`, post-norm, classifying the mean token."""
    import keras

    tokens = keras.Input((TOKENS,), batch_size=batch, dtype="int32")
    x = keras.layers.Embedding(VOCABULARY, UNITS)(tokens)
    for _ in range(4):
        x = keras.layers.LayerNormalization()(x + keras.layers.MultiHeadAttention(4, UNITS // 4)(x, x))
        x = keras.layers.LayerNormalization()(x + keras.layers.Dense(UNITS)(keras.layers.Dense(4 * UNITS, activation="relu")(x)))
    logits = keras.layers.Dense(10)(keras.layers.GlobalAveragePooling1D()(x))
    return _compiled(keras.Model(tokens, logits), keras.losses.SparseCategoricalCrossentropy(from_logits=True))


SEQUENCE_MODELS = {"lstm": lstm, "gru": gru, "bidirectional-lstm": bidirectional_lstm, "stacked-lstm": stacked_lstm,
                   "attention-encoder": attention_encoder}
LSTM_SEQ2SEQ = ("placer.models.heldout:keras_lstm_seq2seq_graph", "small")
"""The held-out LSTM encoder-decoder with attention, at its small size (batch 16, 20 tokens, 128 units)."""

for _name, (_application_name, _side) in APPLICATIONS.items():
    globals()[_application_name.lower()] = _application(_application_name, _side)


def model_specs() -> dict[str, tuple[str, str, str]]:
    """Name -> (family, model spec, size), in the order they run."""
    here = Path(__file__).resolve()
    found = {name: ("keras.applications", f"{here}:{application.lower()}", "tiny")
             for name, (application, _) in APPLICATIONS.items()}
    found.update({name: ("image, from its configuration", f"{here}:{function.__name__}", "tiny")
                  for name, function in IMAGE_MODELS.items()})
    found.update({name: ("Keras 3 sequence", f"{here}:{function.__name__}", "tiny")
                  for name, function in SEQUENCE_MODELS.items()})
    found["lstm-seq2seq"] = ("Keras 3 sequence", *LSTM_SEQ2SEQ)
    return found


# -- one model through placer optimize ---------------------------------------------------------------------


def errors_of(result: dict[str, Any]) -> list[float]:
    """|predicted / measured - 1| of every measured row the twin predicted."""
    return [abs(row["predicted"]["seconds"] / row["median"] - 1) for row in result["measured"]
            if row.get("ok") and row.get("median") and row.get("predicted") and row["predicted"].get("ok", True)
            and row["predicted"].get("seconds")]


def coverage_row(name: str, family: str, result: dict[str, Any] | None, wall: float, status: str) -> dict[str, Any]:
    row: dict[str, Any] = {"model": name, "family": family, "wall_s": round(wall, 1), "status": status}
    if result is None:
        return row
    phases = result.get("phase_seconds", {})
    recommended = next((r for r in result["measured"] if r["name"] == result["recommended"]), None)
    errors = errors_of(result)
    row.update({
        "ops": result.get("ops"), "build_s": phases.get("building the graph"), "profile_s": phases.get("profiling"),
        "measure_s": phases.get("measuring"), "recommended": result["recommended"],
        "recommended_ms": recommended["median"] * 1e3 if recommended and recommended.get("median") else None,
        "placements_compared": len(errors),
        "median_error": statistics.median(errors) if errors else None, "worst_error": max(errors) if errors else None,
        "notes": result.get("notes", []), "phase_seconds": phases,
    })
    return row


def run_one(name: str, spec: str, size: str, args: argparse.Namespace,
            plans: Path) -> tuple[dict[str, Any] | None, float, str]:
    command = [sys.executable, "-m", "agents.cli", "optimize", spec, "--size", size, "--target", args.target, "--budget", str(args.budget), "--calibration", args.calibration,
               "--out", str(plans / f"{name}.plan.json"), "--json", "--no-progress",
               "--replicas", "1"]  # data parallelism on the testbed: experiments/probes/data_parallel.py
    started = time.monotonic()
    done, status = run_logged(command, plans / f"{name}.log", args.timeout)
    wall = time.monotonic() - started
    if done is None or done.returncode != 0:
        return None, wall, status
    try:
        result = json.loads(done.stdout)
    except ValueError:
        return None, wall, "printed no JSON result"
    (plans / f"{name}.optimize.json").write_text(done.stdout)  # every candidate, predicted and measured
    return result, wall, "ok"


def run_logged(command: list[str], log: Path, timeout: float) -> tuple[subprocess.CompletedProcess | None, str]:
    """Runs `command` with its stderr written to `log` as it goes (so that a run stopped at `timeout` keeps what
    it did): the finished process (None when stopped) and a status, "ok" or the error with the log's last line."""
    with log.open("w") as stderr:
        try:
            done = subprocess.run(command, stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=timeout,
                                  cwd=Path(__file__).resolve().parents[1])
        except subprocess.TimeoutExpired:
            return None, f"ran past --timeout {timeout:.0f} s; last: {_last_line(log.read_text())}"
    if done.returncode != 0:
        return done, f"exit {done.returncode}: {_last_line(log.read_text())}"
    return done, "ok"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", metavar="NAME", help="default: every model (see --list)")
    parser.add_argument("--budget", type=float, default=600.0, help="`placer optimize --budget` per model")
    parser.add_argument("--target", default="local:2")
    parser.add_argument("--calibration", default=DEFAULT_CALIBRATION,
                        help="the target's calibration, made by the first model if the file does not exist")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds after which a model's run is stopped and reported (default: --budget + 600)")
    parser.add_argument("--out", default="results/model_coverage.json")
    parser.add_argument("--resume", action="store_true",
                        help="read back the models whose `placer optimize` result is already in --out's folder "
                             "(a run stopped part way) instead of running them again")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    args = parser.parse_args(argv)
    known = model_specs()
    if args.list:
        for name, (family, spec, size) in known.items():
            print(f"{name:22s} {family:20s} {spec} --size {size}")
        raise SystemExit(0)
    unknown = sorted(set(args.models or []) - set(known))
    if unknown:
        parser.error(f"unknown models {', '.join(unknown)}; known: {', '.join(known)}")
    if not (args.budget > 0):
        parser.error(f"--budget must be positive, got {args.budget}")
    args.timeout = args.timeout or args.budget + 600
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    known = model_specs()
    plans = Path(args.out).with_suffix("")
    plans.mkdir(parents=True, exist_ok=True)
    Path(args.calibration).parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models or list(known):
        family, spec, size = known[name]
        saved = plans / f"{name}.optimize.json"
        if args.resume and saved.is_file():
            result = json.loads(saved.read_text())
            rows.append(coverage_row(name, family, result, result.get("seconds", 0.0), "ok"))
            print(f"{name}: read back from {saved}", flush=True)
            continue
        print(f"{name}: placer optimize --budget {args.budget:g} --target {args.target}", flush=True)
        result, wall, status = run_one(name, spec, size, args, plans)
        rows.append(coverage_row(name, family, result, wall, status))
        print(f"  {status}, {wall:.0f} s", flush=True)
    write_report("model_coverage", COLUMNS, rows, args.out, budget=args.budget, target=args.target,
                 calibration=args.calibration, batch=BATCH)


if __name__ == "__main__":
    main()
