"""The pictures of a run (agents.experiment.pictures) show what a person relies on, for a simulated run on modeled
GPUs and for a measured run on the local testbed: distinct device labels, each op counted once, one timeline row per
device used, time from the step's start, the colours the legend states, and every baseline on the step-time chart."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgba

from agents.experiment.config import ExperimentConfig, ExperimentError
from agents.experiment.pictures import (
    IDLE_COLOR, OP_COLOR, TRANSFER_COLOR, placement_figure, save_run_picture, step_time_figure, timeline_figure,
)
from agents.run_files import BaselineTiming, RunFiles, read_run
from placer.devices import short_name


@pytest.fixture(params=[pytest.param("simulated_run", id="simulated"),
                        # A measured run on the testbed costs about 25 s; `placer train` on local:2 runs in the default suite
                        # (tests/test_end_to_end.py), and the pictures are drawn alike from either kind of run.
                        pytest.param("measured_run", id="measured-local2", marks=[pytest.mark.testbed, pytest.mark.slow])])
def run(request) -> RunFiles:
    return read_run(request.getfixturevalue(request.param))


def _labels(ticks) -> list[str]:
    return [tick.get_text() for tick in ticks]


def test_placement_chart_names_each_device_apart_and_counts_each_op_once(run):
    ax = placement_figure(run).axes[0]
    devices = run.placement.devices
    assert _labels(ax.get_yticklabels()) == [short_name(d) for d in devices]
    assert len(set(_labels(ax.get_yticklabels()))) == len(devices)
    groups, ops = ax.containers
    assert sum(bar.get_width() for bar in ops) == len(run.placement.op_devices)
    assert sum(bar.get_width() for bar in groups) == len(run.placement.groups)


def test_timeline_has_one_row_per_device_used_in_ms_from_the_step_start_in_its_legend_colours(run):
    timeline = run.timeline
    placed_on = {short_name(d) for d in run.placement.op_devices.values()}
    # a row for every device that computed (the placement's) or received a tensor (e.g. the testbed's first worker
    # receives the step's fetch), each once
    assert {span.device for span in timeline.spans if span.kind == "op"} == placed_on
    assert len(set(timeline.devices)) == len(timeline.devices)
    assert set(timeline.devices) == {span.device for span in timeline.spans}
    assert set(timeline.devices) <= {short_name(d) for d in run.placement.devices}
    assert min(span.start for span in timeline.spans) == 0.0
    if run.config.backend == "measured":
        assert all(device.startswith("worker:") for device in timeline.devices)
        # the Chrome trace itself, for Perfetto: one process per device, no two of one name
        trace = json.loads((run.run_dir / "timeline.json").read_text())["traceEvents"]
        processes = [e["args"]["name"] for e in trace if e["ph"] == "M" and e["name"] == "process_name"]
        assert len(processes) == len(set(processes)) == len(timeline.devices), processes
    assert {span.kind for span in timeline.spans} == {"op", "transfer"}  # the best placement uses both devices

    ax = timeline_figure(timeline).axes[0]
    rows = [label.split("\n") for label in _labels(ax.get_yticklabels())]
    assert [device for device, _ in rows] == list(timeline.devices)
    assert all(busy.startswith("busy ") and busy.endswith("%") for _, busy in rows)
    assert ax.get_xlim() == pytest.approx((0.0, 1e3 * timeline.step_time))
    assert "ms" in ax.get_xlabel()
    colours = {tuple(np.round(bars.get_facecolor()[0], 3)) for bars in ax.collections}
    assert colours == {tuple(np.round(to_rgba(c), 3)) for c in (OP_COLOR, TRANSFER_COLOR, IDLE_COLOR)}
    assert [p.get_label() for p in ax.get_legend().get_patches()] == ["op (computing)", "tensor received", "idle"]
    assert [tuple(np.round(p.get_facecolor(), 3)) for p in ax.get_legend().get_patches()] == \
        [tuple(np.round(to_rgba(c), 3)) for c in (OP_COLOR, TRANSFER_COLOR, IDLE_COLOR)]


def test_step_time_chart_is_linear_in_ms_with_every_baseline_as_a_labelled_line(run):
    ax = step_time_figure(run).axes[0]
    assert ax.get_yscale() == "linear" and ax.get_ylabel() == "step time (ms)" and ax.get_ylim()[0] == 0
    lines = {line.get_label(): line for line in ax.get_lines()}
    best = lines["best so far"].get_ydata()
    assert list(best) == pytest.approx([1e3 * h["step_time_best"] for h in run.history])
    assert "sampled (median of an update's placements)" in lines
    for name, baseline in run.baselines.items():
        (label,) = [label for label in lines if label.startswith(f"{name} ")]
        assert label == f"{name} {1e3 * baseline.step_time:.2f} ms"
        assert list(lines[label].get_ydata()) == pytest.approx([1e3 * baseline.step_time] * 2)  # a level line
    if run.config.backend == "measured":  # compared side by side at the end: one diamond per contender
        assert "measured again side by side at the end\n(black: learned)" in lines
        assert sum(line.get_marker() == "D" and len(line.get_xdata()) == 1 for line in ax.get_lines()) == \
            len({"learned", *run.baselines} & set(run.summary.final_comparison))


def _run(history: list[dict], baselines: dict) -> RunFiles:
    return RunFiles(run_dir=Path("run"), config=ExperimentConfig(model="two-tower", backend="measured", cluster="local:2"),
                    history=history, baselines=baselines, summary=None, placement=None, timeline=None)


def test_updates_that_timed_the_best_again_are_marked_and_a_failed_baseline_is_named():
    history = [{"update": 1, "step_time_best": 0.010, "step_time_sampled": 0.012, "best_retimed": False},
               {"update": 2, "step_time_best": 0.011, "step_time_sampled": 0.013, "best_retimed": True},
               {"update": 3, "step_time_best": 0.009, "step_time_sampled": 100.0, "best_retimed": False},
               {"update": 4, "step_time_best": 0.009, "step_time_sampled": math.inf, "best_retimed": True}]
    baselines = {"single-device": BaselineTiming("single-device", 0.015),
                 "expert": BaselineTiming("expert", None, failure="oom")}
    ax = step_time_figure(_run(history, baselines)).axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    retimed = lines["best timed again, side by side with a challenger"]
    assert list(retimed.get_xdata()) == [2, 4] and list(retimed.get_ydata()) == pytest.approx([11.0, 9.0])
    assert "expert: failed" in lines
    # a placement charged 100 s does not squash the chart: it is a mark at its top
    assert ax.get_ylim()[1] == pytest.approx(1.2 * 15.0)
    assert list(lines["sampled, slower than the chart"].get_xdata()) == [3]


def test_a_run_without_the_retimed_flag_marks_the_updates_where_the_best_rose():
    history = [{"update": 1, "step_time_best": 0.010, "step_time_sampled": 0.012},
               {"update": 2, "step_time_best": 0.011, "step_time_sampled": 0.012}]
    lines = {line.get_label(): line for line in step_time_figure(_run(history, {})).axes[0].get_lines()}
    assert list(lines["best timed again, side by side with a challenger"].get_xdata()) == [2]


def test_one_png_of_a_run_is_small_and_what_is_no_run_is_refused_with_a_reason(simulated_run, tmp_path):
    out = save_run_picture(simulated_run, tmp_path / "docs" / "run.png")
    assert out.read_bytes().startswith(b"\x89PNG") and 30_000 < out.stat().st_size < 200_000
    with pytest.raises(ExperimentError, match="is not a run directory"):
        save_run_picture(tmp_path, tmp_path / "other.png")
    with pytest.raises(ExperimentError, match="no best placement yet"):
        placement_figure(_run([], {}))


def test_the_pictures_script_says_what_is_wrong_in_one_line(tmp_path):
    script = Path(__file__).parents[2] / "experiments" / "reports" / "run_pictures.py"
    run = subprocess.run([sys.executable, str(script), str(tmp_path), "--out", str(tmp_path / "run.png")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stderr.strip() == \
        f"run_pictures.py: error: {tmp_path} is not a run directory (no config.json)", run.stderr
