"""Training curves for the dashboards: TensorBoard always, Weights & Biases when enabled.

An experiment hands every update's metrics to a `Trackers` fan-out. TensorBoard gets the step time in
milliseconds, each series (best so far, sampled, every baseline) in a run directory of its own so that each has
its own colour (`placer.dashboard.layout`), then `training/` and the agent's `update/` internals, the run's name
for the dashboard, a custom-scalars layout whose first chart draws the best
and sampled step time against every baseline, the run's hyper-parameters through the hparams plugin, and
the best placement as an image (devices, named, x slices of the graph) and a text table. W&B gets the same
curves once, from `wandb.log` (TensorBoard syncing stays off so no curve is logged twice), runs offline
unless an account is configured, and receives the best placement as an artifact and a table when the run ends.
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from placer.dashboard import layout

TENSORBOARD_DIR = "tensorboard"
"""Event files live in RUN_DIR/tensorboard (what `placer dashboard RUN_DIR` serves); each step-time series in a
run directory of its own below it (`placer.dashboard.layout`), so that every series gets its own colour."""

STEP_TIME_SERIES = {"step_time_best": layout.BEST, "step_time_sampled": layout.SAMPLED,
                    "step_time_greedy": layout.GREEDY}
"""Metric (as `agents.loop.train` reports it, in seconds) -> its step-time series."""
# Metric -> TensorBoard tag of the other curves. Each prefix is one dashboard section; TensorBoard orders
# sections by name and opens the first two: step time, then the best placement.
SCALAR_TAGS = {
    "reward_mean": "training/reward_mean",
    "reward_best": "training/reward_best",
    "failure_rate": "training/failure_rate",
    "samples": "training/samples",
    "wall_time": "training/wall_time",
    "simulated": layout.SIMULATED_TAG,
    "reward_baseline": "update/reward_baseline",
    "loss": "update/loss",
    "entropy": "update/entropy",
    "grad_norm": "update/grad_norm",
    "learning_rate": "update/learning_rate",
}
PLACEMENT_IMAGE_TAG, PLACEMENT_TABLE_TAG = "the_best_placement/devices", "the_best_placement/table"
STEP_TIME_CHART = "step time (ms): best so far, sampled median, every baseline"


class StepTimeSeries:
    """Series -> step time in milliseconds of each update, in order: the learned series the update reports, and every
    baseline's (logged at every update, so that it is a level line across the chart); finite ones only.

    The best so far never rises: it is the lowest best of its phase, and a best timed again side by side that came
    out slower is its own series (`layout.BEST_RETIMED`). A simulator phase's best is a series of its own
    (`layout.BEST_SIMULATED`): the measured phase's best, timed on the real target, does not continue it."""

    def __init__(self, baselines: Mapping[str, float]):
        self.baselines = dict(baselines)
        self._lowest: dict[str, float] = {}

    def of(self, metrics: Mapping[str, float]) -> dict[str, float]:
        seconds = {series: metrics.get(metric) for metric, series in STEP_TIME_SERIES.items()}
        best = seconds.pop(layout.BEST)
        if _finite(best):
            series = layout.BEST_SIMULATED if metrics.get("simulated") else layout.BEST
            lowest = min(self._lowest.get(series, math.inf), float(best))
            self._lowest[series] = lowest
            seconds[series] = lowest
            if best > lowest:
                seconds[layout.BEST_RETIMED] = best
        seconds.update({layout.BASELINE_SERIES.format(name): value for name, value in self.baselines.items()})
        return {series: 1e3 * float(value) for series, value in seconds.items() if _finite(value)}


def scalar_values(metrics: Mapping[str, float]) -> dict[str, float]:
    """Tag -> value of one update's other curves (training progress, the agent's internals); finite ones only."""
    values = {tag: metrics.get(key) for key, tag in SCALAR_TAGS.items()}
    return {tag: float(value) for tag, value in values.items() if _finite(value)}


def _finite(value) -> bool:
    return value is not None and math.isfinite(float(value))


def custom_scalars_layout():
    """TensorBoard's custom-scalars page: step time first (best, sampled and every baseline in one chart, each a
    run of its own), then the training's progress, then the agent's update internals (folded)."""
    from tensorboard.plugins.custom_scalar import layout_pb2

    def chart(title: str, *patterns: str):
        return layout_pb2.Chart(title=title, multiline=layout_pb2.MultilineChartContent(tag=list(patterns)))

    return layout_pb2.Layout(category=[
        layout_pb2.Category(title="step time", chart=[chart(STEP_TIME_CHART, f"^{layout.STEP_TIME_TAG}$")]),
        layout_pb2.Category(title="training", chart=[
            chart("reward", r"^training/reward_"), chart("failure rate", r"^training/failure_rate$"),
            chart("samples", r"^training/samples$"),
        ]),
        layout_pb2.Category(title="agent update", closed=True, chart=[
            chart(tag.split("/", 1)[1].replace("_", " "), f"^{tag}$")
            for tag in SCALAR_TAGS.values() if tag.startswith("update/")
        ]),
    ])


IMAGE_COLUMNS = 256
"""The placement image bins the graph's colocation groups, in graph order, into at most this many columns."""
IMAGE_WIDTH = 512
"""Pixels the placement image's columns span at least (a graph of few groups gets wider columns)."""
ROW_PIXELS = 20


def placement_matrix(group_devices: np.ndarray, group_weights: np.ndarray, num_devices: int,
                     columns: int = IMAGE_COLUMNS) -> np.ndarray:
    """[devices, columns] share of each slice of the graph (weighted, e.g. by ops) placed on each device.

    Colocation groups are taken in graph order (topological), so a column is a contiguous part of the
    model: a layer split shows as a staircase, a single-device placement as one full row.
    """
    group_devices = np.asarray(group_devices, dtype=np.int64)
    weights = np.asarray(group_weights, dtype=np.float64)
    columns = max(1, min(columns, len(group_devices)))
    slices = np.minimum((np.arange(len(group_devices)) * columns) // max(len(group_devices), 1), columns - 1)
    matrix = np.zeros((num_devices, columns))
    np.add.at(matrix, (group_devices, slices), weights)
    totals = matrix.sum(axis=0, keepdims=True)
    return np.divide(matrix, totals, out=np.zeros_like(matrix), where=totals > 0)


def placement_image(matrix: np.ndarray, device_names: Sequence[str], row_pixels: int = ROW_PIXELS) -> np.ndarray:
    """[1, height, width, 3] uint8: each device's name, then its row of the matrix (dark: everything in that
    slice is on that device)."""
    from PIL import Image, ImageDraw, ImageFont

    if len(device_names) != matrix.shape[0]:
        raise ValueError(f"{matrix.shape[0]} rows of placement need as many device names, got {list(device_names)}")
    font = ImageFont.load_default(size=row_pixels - 7)
    label_width = 8 + max(math.ceil(font.getlength(name)) for name in device_names)
    stretch = max(1, IMAGE_WIDTH // matrix.shape[1])  # a narrow graph's columns are widened, to be seen
    shade = (255 * (1.0 - matrix)).astype(np.uint8)
    tall = np.repeat(np.repeat(shade, row_pixels, axis=0), stretch, axis=1)
    tall[::row_pixels] = np.minimum(tall[::row_pixels], 200)  # a faint line between device rows
    image = Image.new("L", (label_width + tall.shape[1], tall.shape[0]), 255)
    image.paste(Image.fromarray(tall), (label_width, 0))
    draw = ImageDraw.Draw(image)
    for row, name in enumerate(device_names):
        draw.text((4, row * row_pixels + row_pixels // 2), name, fill=0, font=font, anchor="lm")
    return np.repeat(np.asarray(image)[None, :, :, None], 3, axis=3)


def placement_table(device_names: list[str], group_devices: np.ndarray, graph) -> list[list[Any]]:
    """Rows of [device, colocation groups, ops, parameters, GFLOPs per step]."""
    rows = {name: [name, 0, 0, 0, 0.0] for name in device_names}
    for group in graph.groups:
        row = rows[device_names[int(group_devices[group.index])]]
        row[1] += 1
        for op_name in group.ops:
            op = graph.op(op_name)
            row[2] += 1
            row[3] += op.parameters
            row[4] += op.flops / 1e9 if op.in_step else 0.0
    return list(rows.values())


def placement_markdown(title: str, rows: list[list[Any]]) -> str:
    lines = [title, "", "| device | groups | ops | parameters | GFLOP/step |", "|---|---|---|---|---|"]
    lines += [f"| {d} | {g:,} | {o:,} | {p:,} | {f:,.2f} |" for d, g, o, p, f in rows]
    return "\n".join(lines)


class TensorBoardTracker:
    def __init__(self, run_dir: str | Path, hparams: Mapping[str, Any], run_name: str,
                 baselines: Mapping[str, float] | None = None):
        """`run_name`: what the dashboard calls the run (model, target, start time); `baselines`: each baseline's
        step time in seconds, drawn as a line next to the learned ones."""
        import tensorflow as tf
        from tensorboard.plugins.custom_scalar import summary as custom_scalar

        self._tf = tf
        self._dir = Path(run_dir) / TENSORBOARD_DIR
        self.writer = tf.summary.create_file_writer(str(self._dir))
        self._series_writers: dict[str, Any] = {}
        self._hparams = {key: _hparam_value(value) for key, value in hparams.items()}
        self._run_name = run_name
        self._hparams_written = False
        self._series = StepTimeSeries(baselines or {})
        with self.writer.as_default(step=0):
            tf.summary.experimental.write_raw_pb(custom_scalar.pb(custom_scalars_layout()).SerializeToString())
            tf.summary.text(layout.RUN_NAME_TAG, run_name)

    def log_update(self, update: int, metrics: Mapping[str, float]) -> None:
        tf = self._tf
        with self.writer.as_default(step=update):
            if not self._hparams_written:
                from tensorboard.plugins.hparams import api as hp

                hp.hparams(self._hparams, trial_id=self._run_name)
                self._hparams_written = True
            for tag, value in scalar_values(metrics).items():
                tf.summary.scalar(tag, value)
        self.writer.flush()
        for series, milliseconds in self._series.of(metrics).items():
            writer = self._series_writer(series)
            with writer.as_default(step=update):
                tf.summary.scalar(layout.STEP_TIME_TAG, milliseconds)
            writer.flush()

    def _series_writer(self, series: str):
        if series not in self._series_writers:
            self._series_writers[series] = self._tf.summary.create_file_writer(
                str(self._dir / layout.SERIES_DIR / series))
        return self._series_writers[series]

    def log_placement(self, update: int, matrix: np.ndarray, device_names: Sequence[str], markdown: str) -> None:
        tf = self._tf
        with self.writer.as_default(step=update):
            tf.summary.image(PLACEMENT_IMAGE_TAG, placement_image(matrix, device_names),
                             description="rows: devices, named on the left; columns: slices of the graph in "
                                         "topological order; dark: that slice's ops run on that device")
            tf.summary.text(PLACEMENT_TABLE_TAG, markdown)
        self.writer.flush()

    def finish(self, summary: Mapping[str, Any], placement_file: Path | None, table: list[list[Any]] | None) -> None:
        for writer in (self.writer, *self._series_writers.values()):
            writer.close()


class WandbTracker:
    """W&B, offline unless an account is configured (sync later with `wandb sync RUN_DIR/wandb/...`)."""

    def __init__(self, run_dir: str | Path, config: Mapping[str, Any], run_name: str, project: str, mode: str | None,
                 baselines: Mapping[str, float] | None = None):
        import wandb

        self._wandb = wandb
        self._series = StepTimeSeries(baselines or {})
        self.mode = wandb_mode(mode)
        self.run = wandb.init(project=project, name=run_name, dir=str(run_dir), config=dict(config), mode=self.mode,
                              sync_tensorboard=False, reinit="create_new")

    def log_update(self, update: int, metrics: Mapping[str, float]) -> None:
        step_times = {f"{layout.STEP_TIME_TAG}/{series}": ms
                      for series, ms in self._series.of(metrics).items()}
        self.run.log({**step_times, **scalar_values(metrics)}, step=update)

    def log_placement(self, update: int, matrix: np.ndarray, device_names: Sequence[str], markdown: str) -> None:
        pass  # the placement goes to W&B once, as an artifact and a table, when the run ends

    def finish(self, summary: Mapping[str, Any], placement_file: Path | None, table: list[list[Any]] | None) -> None:
        wandb = self._wandb
        for key, value in summary.items():
            if isinstance(value, (int, float, str, bool)):
                self.run.summary[key] = value
        if table is not None:
            self.run.log({PLACEMENT_TABLE_TAG: wandb.Table(
                columns=["device", "groups", "ops", "parameters", "gflop_per_step"], data=table)})
        if placement_file is not None and placement_file.exists():
            artifact = wandb.Artifact(f"placement-{self.run.id}", type="placement",
                                      metadata={k: v for k, v in summary.items() if isinstance(v, (int, float, str, bool))})
            artifact.add_file(str(placement_file))
            self.run.log_artifact(artifact)
        self.run.finish()


def wandb_mode(requested: str | None) -> str:
    """"online" only when asked for or an account is configured; "offline" otherwise; WANDB_MODE wins."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    if requested in ("online", "offline", "disabled"):
        return requested
    if requested not in (None, "auto"):
        raise ValueError(f"unknown W&B mode {requested!r}: auto, online, offline or disabled")
    has_account = bool(os.environ.get("WANDB_API_KEY")) or (Path.home() / ".netrc").exists() and \
        "api.wandb.ai" in (Path.home() / ".netrc").read_text(errors="ignore")
    return "online" if has_account else "offline"


class Trackers:
    """Fan-out to every enabled tracker. A tracker that raises is dropped with a warning: a dashboard
    hiccup (a full disk under wandb/, a W&B service that died) must not cost the training run."""

    def __init__(self, trackers: list):
        self.trackers = list(trackers)

    def log_update(self, update: int, metrics: Mapping[str, float]) -> None:
        self._each("log_update", update, metrics)

    def log_placement(self, update: int, matrix: np.ndarray, device_names: Sequence[str], markdown: str) -> None:
        self._each("log_placement", update, matrix, device_names, markdown)

    def finish(self, summary: Mapping[str, Any], placement_file: Path | None = None,
               table: list[list[Any]] | None = None) -> None:
        self._each("finish", summary, placement_file, table)

    def _each(self, method: str, *args) -> None:
        for tracker in list(self.trackers):
            try:
                getattr(tracker, method)(*args)
            except Exception as error:  # noqa: BLE001 - any tracker failure is reported the same way
                warnings.warn(f"{type(tracker).__name__}.{method} failed ({type(error).__name__}: {error}); "
                              "it is switched off for the rest of this run", RuntimeWarning, stacklevel=2)
                self.trackers.remove(tracker)


def _hparam_value(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)):
        return value
    return "none" if value is None else str(value)
