"""Training curves for the dashboards: TensorBoard always, Weights & Biases when enabled.

An experiment hands every update's metrics to a `Trackers` fan-out. TensorBoard gets scalars grouped
by kind (`step_time/`, `reward/`, `agent/`, `failures/`, `progress/`), the run's hyper-parameters
through the hparams plugin, and the best placement as an image (devices x slices of the graph) and a
text table. W&B gets the same curves once, from `wandb.log` (TensorBoard syncing stays off so no curve
is logged twice), runs offline unless an account is configured, and receives the best placement as an
artifact and a table when the run ends.
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import Any, Mapping

import numpy as np

TENSORBOARD_DIR = "tensorboard"
"""Event files live in RUN_DIR/tensorboard (what `placer dashboard RUN_DIR` serves)."""

# Metric (as `agents.training.train` reports it) -> TensorBoard tag. Each prefix is one dashboard section.
SCALAR_TAGS = {
    "step_time_best": "step_time/best",
    "step_time_sampled": "step_time/sampled",
    "best_baseline_step_time": "step_time/best_baseline",
    "reward_mean": "reward/mean",
    "reward_best": "reward/best",
    "baseline": "agent/baseline",
    "loss": "agent/loss",
    "entropy": "agent/entropy",
    "grad_norm": "agent/grad_norm",
    "learning_rate": "agent/learning_rate",
    "failure_rate": "failures/rate",
    "samples": "progress/samples",
    "wall_time": "progress/wall_time",
}
IMAGE_COLUMNS = 256
"""The placement image bins the graph's colocation groups, in graph order, into at most this many columns."""
ROW_PIXELS = 12


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


def placement_image(matrix: np.ndarray, row_pixels: int = ROW_PIXELS) -> np.ndarray:
    """[1, devices * row_pixels, columns, 3] uint8: dark = everything in that slice is on that device."""
    shade = (255 * (1.0 - matrix)).astype(np.uint8)
    tall = np.repeat(shade, row_pixels, axis=0)
    tall[::row_pixels] = np.minimum(tall[::row_pixels], 200)  # a faint line between device rows
    return np.repeat(tall[None, :, :, None], 3, axis=3)


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
    def __init__(self, run_dir: str | Path, hparams: Mapping[str, Any], run_name: str):
        import tensorflow as tf

        self._tf = tf
        self.writer = tf.summary.create_file_writer(str(Path(run_dir) / TENSORBOARD_DIR))
        self._hparams = {key: _hparam_value(value) for key, value in hparams.items()}
        self._run_name = run_name
        self._hparams_written = False

    def log_update(self, update: int, metrics: Mapping[str, float]) -> None:
        tf = self._tf
        with self.writer.as_default(step=update):
            if not self._hparams_written:
                from tensorboard.plugins.hparams import api as hp

                hp.hparams(self._hparams, trial_id=self._run_name)
                self._hparams_written = True
            for key, tag in SCALAR_TAGS.items():
                value = metrics.get(key)
                if value is not None and math.isfinite(float(value)):
                    tf.summary.scalar(tag, float(value))
        self.writer.flush()

    def log_placement(self, update: int, matrix: np.ndarray, markdown: str) -> None:
        tf = self._tf
        with self.writer.as_default(step=update):
            tf.summary.image("placement/best", placement_image(matrix),
                             description="rows: devices; columns: slices of the graph in topological order; "
                                         "dark: that slice's ops run on that device")
            tf.summary.text("placement/best_table", markdown)
        self.writer.flush()

    def finish(self, summary: Mapping[str, Any], placement_file: Path | None, table: list[list[Any]] | None) -> None:
        self.writer.close()


class WandbTracker:
    """W&B, offline unless an account is configured (sync later with `wandb sync RUN_DIR/wandb/...`)."""

    def __init__(self, run_dir: str | Path, config: Mapping[str, Any], run_name: str, project: str, mode: str | None):
        import wandb

        self._wandb = wandb
        self.mode = wandb_mode(mode)
        self.run = wandb.init(project=project, name=run_name, dir=str(run_dir), config=dict(config), mode=self.mode,
                              sync_tensorboard=False, reinit="create_new")

    def log_update(self, update: int, metrics: Mapping[str, float]) -> None:
        values = {tag: float(metrics[key]) for key, tag in SCALAR_TAGS.items()
                  if metrics.get(key) is not None and math.isfinite(float(metrics[key]))}
        self.run.log(values, step=update)

    def log_placement(self, update: int, matrix: np.ndarray, markdown: str) -> None:
        pass  # the placement goes to W&B once, as an artifact and a table, when the run ends

    def finish(self, summary: Mapping[str, Any], placement_file: Path | None, table: list[list[Any]] | None) -> None:
        wandb = self._wandb
        for key, value in summary.items():
            if isinstance(value, (int, float, str, bool)):
                self.run.summary[key] = value
        if table is not None:
            self.run.log({"placement/best_table": wandb.Table(
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

    def log_placement(self, update: int, matrix: np.ndarray, markdown: str) -> None:
        self._each("log_placement", update, matrix, markdown)

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
