"""The dashboard's first tab, "Step time": every run under the served folder side by side, each its own chart of
step time in milliseconds per update, every series (best so far, sampled, each baseline) in a colour of its own
and named in a legend, unsmoothed, with the switch from simulated to measured updates marked.

TensorBoard colours by run, rounds its cards to 4 decimals and smooths every line alike, so this page is ours: a
TensorBoard plugin (same server, same loaded data) whose front end is `step_time.js`, with no outside resources.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from placer.dashboard import layout

PLUGIN_NAME = "step_time"
"""The tab's name in TensorBoard's URL: http://127.0.0.1:PORT/#step_time."""
PAGE_SCRIPT = Path(__file__).with_name("step_time.js")
DOWNSAMPLE = 100_000
"""Points asked for per series: every update TensorBoard has loaded."""

_LEARNED = (layout.BEST, layout.BEST_SIMULATED, layout.BEST_RETIMED, layout.SAMPLED, layout.GREEDY)
_SERIES_RUN = re.compile(rf"^(?:(?P<root>.*)/)?{layout.SERIES_DIR}/(?P<series>{'|'.join(_LEARNED)}|"
                         rf"{layout.BASELINE_SERIES.format('[^/]+')})$")
_LEGACY_TAG = re.compile("^" + layout.LEGACY_SECONDS_TAG.format(
    f"(?P<series>{layout.BEST}|{layout.SAMPLED}|{layout.GREEDY}|{layout.BASELINE_SERIES.format('[^/]+')})") + "$")
_LABELS = {layout.BEST: "best so far", layout.BEST_SIMULATED: "best so far, simulated",
           layout.BEST_RETIMED: "the best, timed again", layout.SAMPLED: "sampled median",
           layout.GREEDY: "greedy placement"}
_KINDS = {layout.BEST_SIMULATED: layout.BEST}
"""Series drawn as another's kind: a simulator phase's best as bold as the measured best."""
_BASELINE_PREFIX = layout.BASELINE_SERIES.format("")


def step_time_runs(scalars: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]], names: Mapping[str, str],
                   folder_name: str) -> list[dict[str, Any]]:
    """The page's data: one entry per run, from TensorBoard's scalars (run -> tag -> (step, value) pairs) and the
    runs' names (root run -> name).

    A run is its root TensorBoard run (RUN_DIR/tensorboard) with its series runs below it; a run written before
    the series directories has its series as tags of the root run, in seconds. `folder_name` names a root run
    that is the served folder itself."""
    runs: dict[str, dict[str, list[list[float]]]] = {}
    for tb_run, tags in scalars.items():
        found = _SERIES_RUN.match(tb_run)
        if found and layout.STEP_TIME_TAG in tags:
            runs.setdefault(found["root"] or ".", {})[found["series"]] = _points(tags[layout.STEP_TIME_TAG], 1.0)
        for tag, points in tags.items():
            legacy = _LEGACY_TAG.match(tag)
            if legacy:
                runs.setdefault(tb_run, {}).setdefault(legacy["series"], _points(points, 1e3))
    return [{"run": root, "name": names.get(root) or _path_name(root, folder_name),
             "measured_from": _first_measured_update(scalars.get(root, {}).get(layout.SIMULATED_TAG, ())),
             "series": _ordered(series)}
            for root, series in sorted(runs.items())]


def _points(points: Sequence[tuple[int, float]], to_ms: float) -> list[list[float]]:
    return [[int(step), value * to_ms] for step, value in points if math.isfinite(value)]


def _ordered(series: Mapping[str, list[list[float]]]) -> list[dict[str, Any]]:
    """Best (measured, then simulated, then timed again), sampled, greedy, then the baselines fastest first (the order
    of `placer train`'s table)."""
    learned = [{"name": name, "label": _LABELS[name], "kind": _KINDS.get(name, name), "points": series[name]}
               for name in _LEARNED if series.get(name)]
    baselines = sorted((name for name, points in series.items() if name.startswith(_BASELINE_PREFIX) and points),
                       key=lambda name: series[name][-1][1])
    return learned + [{"name": name, "label": name[len(_BASELINE_PREFIX):], "kind": "baseline",
                       "points": series[name]} for name in baselines]


def _first_measured_update(simulated: Sequence[tuple[int, float]]) -> int | None:
    """The first update after the simulator phase; None for a run without one (or still in it)."""
    was_simulated = False
    for step, value in sorted(simulated):
        if value and not was_simulated:
            was_simulated = True
        elif not value and was_simulated:
            return int(step)
    return None


def _path_name(root: str, folder_name: str) -> str:
    """A run without a logged name (written before names were): its path, without the tensorboard folder."""
    parts = [part for part in root.split("/") if part not in (".", "tensorboard")]
    return "/".join(parts) or folder_name


def make_plugin(folder_name: str):
    """The TensorBoard plugin class serving the page, for a server of the folder named `folder_name`."""
    from tensorboard import plugin_util
    from tensorboard.data import provider
    from tensorboard.plugins import base_plugin
    from werkzeug import wrappers

    class StepTimePlugin(base_plugin.TBPlugin):
        plugin_name = PLUGIN_NAME

        def __init__(self, context):
            self._data = context.data_provider

        def get_plugin_apps(self):
            return {"/index.js": self._script, "/runs": self._runs}

        def is_active(self) -> bool:
            return True  # the dashboard's first tab, even before the first update is written

        def frontend_metadata(self):
            return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Step time")

        @wrappers.Request.application
        def _script(self, request):
            return wrappers.Response(PAGE_SCRIPT.read_text(), content_type="text/javascript")

        @wrappers.Request.application
        def _runs(self, request):
            ctx, experiment = plugin_util.context(request.environ), plugin_util.experiment_id(request.environ)
            listed = self._data.list_scalars(ctx, experiment_id=experiment, plugin_name="scalars")
            wanted = {(run, tag) for run, tags in listed.items() for tag in tags
                      if tag in (layout.STEP_TIME_TAG, layout.SIMULATED_TAG) or _LEGACY_TAG.match(tag)}
            read = self._data.read_scalars(
                ctx, experiment_id=experiment, plugin_name="scalars", downsample=DOWNSAMPLE,
                run_tag_filter=provider.RunTagFilter(runs={r for r, _ in wanted}, tags={t for _, t in wanted}))
            scalars = {run: {tag: [(d.step, d.value) for d in data] for tag, data in tags.items()}
                       for run, tags in read.items()}
            texts = self._data.read_tensors(ctx, experiment_id=experiment, plugin_name="text", downsample=1,
                                            run_tag_filter=provider.RunTagFilter(tags=[layout.RUN_NAME_TAG]))
            names = {run: _text(data[-1].numpy) for run, tags in texts.items()
                     for tag, data in tags.items() if data}
            body = json.dumps({"folder": folder_name, "runs": step_time_runs(scalars, names, folder_name)})
            return wrappers.Response(body, content_type="application/json")

    return StepTimePlugin


def _text(value) -> str:
    item = value.item() if hasattr(value, "item") else value
    return item.decode() if isinstance(item, bytes) else str(item)
