"""The pictures a researcher looks at for one run: step time during training against every baseline, where
the best placement runs, and one step of it per device. notebooks/explore_run.ipynb draws them, and
`python experiments/reports/run_pictures.py RUN_DIR --out run.png` writes all three into one PNG. Each function
returns a matplotlib `Figure` (no pyplot: nothing global).
"""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from agents.experiment.config import ExperimentError
from agents.run_files import RunFiles, read_run
from placer.devices import short_name
from placer.timeline import StepTimeline

OP_COLOR, TRANSFER_COLOR, IDLE_COLOR = "tab:blue", "tab:orange", "0.92"
HEADROOM = 1.2
"""The step-time axis ends this much above the slowest baseline or best time: a sampled placement far
slower (a failing one is charged 100 s) is drawn as a mark at the top instead of squashing the rest."""


def step_time_figure(run: RunFiles, ax: Axes | None = None) -> Figure:
    """Per update: the sampled placements' median and the best so far, in ms on a linear axis, with every
    baseline as a labelled line; updates at which the best was timed again side by side are marked, and a
    final side-by-side comparison (measured runs) is drawn at the right."""
    fig, ax = _figure_and_axes(ax, (9, 4.5))
    updates = [h["update"] for h in run.history]
    best = [_ms(h.get("step_time_best")) for h in run.history]
    sampled = [_ms(h.get("step_time_sampled")) for h in run.history]
    baselines = {name: _ms(b.step_time) if b.ok else math.nan for name, b in run.baselines.items()}
    final = (run.summary.final_comparison if run.summary else None) or {}
    reference = [t for t in [*best, *baselines.values(), *(_ms(v) for v in final.values())] if math.isfinite(t)]
    top = HEADROOM * max(reference or [t for t in sampled if math.isfinite(t)] or [1.0])

    ax.plot(updates, [min(t, top) for t in sampled], ".-", color="tab:gray", alpha=0.7,
            label="sampled (median of an update's placements)")
    off_chart = [(u, top) for u, t in zip(updates, sampled) if math.isfinite(t) and t > top]
    if off_chart:
        ax.plot(*zip(*off_chart), "^", color="tab:gray", clip_on=False, label="sampled, slower than the chart")
    ax.plot(updates, best, "-", color="black", linewidth=2.5, label="best so far")
    retimed = [(u, t) for u, t, h, before in zip(updates, best, run.history, [math.inf, *best])
               if h.get("best_retimed", t > before)]  # runs before the flag: the best only rises when re-timed
    if retimed:
        ax.plot(*zip(*retimed), "o", markersize=8, markerfacecolor="white", markeredgecolor="black",
                label="best timed again, side by side with a challenger")
    names = sorted(baselines, key=lambda name: _nan_last(baselines[name]))  # the legend lists them fastest first
    styles = dict(zip(names, _line_styles(len(names))))
    for name in names:
        if math.isfinite(baselines[name]):
            color, linestyle = styles[name]
            ax.axhline(baselines[name], color=color, linestyle=linestyle, linewidth=1.2,
                       label=f"{name} {baselines[name]:.2f} ms")
        else:
            ax.plot([], [], " ", label=f"{name}: failed")
    if final and updates:
        for name, seconds in final.items():
            if name == "learned" or name in styles:  # not "start": it has no line on this chart to be told from
                color = styles[name][0] if name in styles else "black"
                ax.plot([updates[-1] + 0.5], [min(_ms(seconds), top)], "D", color=color, markersize=6)
        ax.plot([], [], "D", color="0.4", label="measured again side by side at the end\n(black: learned)")
    ax.set_ylim(0, top)
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("update")
    ax.set_ylabel("step time (ms)")
    config = run.config
    ax.set_title(f"{config.model} ({config.size}), {config.backend} on {config.target}: step time during training")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    return fig


def placement_figure(run: RunFiles, ax: Axes | None = None) -> Figure:
    """Colocation groups and ops of the best placement per device; each op counts once, on its device."""
    if run.placement is None:
        raise ExperimentError(f"{run.run_dir} has no best placement yet (no update has completed)")
    fig, ax = _figure_and_axes(ax, (9, 1.2 + 0.5 * len(run.placement.devices)))
    counts = run.placement.groups_and_ops_per_device()
    labels = [short_name(device) for device in counts]
    rows = range(len(labels))
    groups = ax.barh([r - 0.2 for r in rows], [g for g, _ in counts.values()], height=0.4, color="tab:green",
                     label="colocation groups")
    ops = ax.barh([r + 0.2 for r in rows], [o for _, o in counts.values()], height=0.4, color=OP_COLOR, label="ops")
    ax.bar_label(groups, padding=2, fontsize="small")
    ax.bar_label(ops, padding=2, fontsize="small")
    ax.set_yticks(list(rows), labels)
    ax.invert_yaxis()
    ax.set_xlabel("count")
    step_time = run.placement.recorded_step_time
    ax.set_title(f"best placement: what runs where ({len(run.placement.op_devices)} ops, "
                 f"{len(run.placement.groups)} colocation groups"
                 + (f"; {1e3 * step_time:.2f} ms per step)" if step_time else ")"))
    ax.margins(x=0.12)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    return fig


def timeline_figure(timeline: StepTimeline, ax: Axes | None = None, title: str = "one step of the best placement"
                    ) -> Figure:
    """One row per device, in ms from the step's start: ops (computing) above, tensors received below, on a
    grey background where the device is idle; each row says how busy its device was."""
    fig, ax = _figure_and_axes(ax, (10, 1.0 + 0.8 * len(timeline.devices)))
    step_ms = 1e3 * timeline.step_time
    tick = step_ms / 2000  # a zero-length op (a constant, a variable) still shows, as a hairline
    for row, device in enumerate(timeline.devices):
        ax.broken_barh([(0, step_ms)], (row - 0.4, 0.8), facecolors=IDLE_COLOR)
        for kind, band, color in (("op", (row - 0.4, 0.5), OP_COLOR), ("transfer", (row + 0.12, 0.28), TRANSFER_COLOR)):
            spans = [(1e3 * s.start, max(1e3 * s.duration, tick)) for s in timeline.on(device, kind)]
            if spans:
                ax.broken_barh(spans, band, facecolors=color, label=kind)
    ax.set_yticks(range(len(timeline.devices)),
                  [f"{device}\nbusy {timeline.busy(device) / timeline.step_time:.0%}" if timeline.step_time else device
                   for device in timeline.devices])
    ax.set_ylim(len(timeline.devices) - 0.5, -0.5)
    ax.set_xlim(0, step_ms)
    ax.set_xlabel("time from the step's start (ms)")
    ax.set_title(f"{title}: {step_ms:.2f} ms")
    ax.legend(handles=[Patch(color=OP_COLOR, label="op (computing)"), Patch(color=TRANSFER_COLOR, label="tensor received"),
                       Patch(color=IDLE_COLOR, label="idle")],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    return fig


def run_figure(run: RunFiles) -> Figure:
    """The run's pictures stacked in one figure: step time, the best placement, and its timeline if written."""
    heights = [4.0, 0.8 + 0.5 * len(run.placement.devices) if run.placement else 0.0,
               0.8 + 0.7 * len(run.timeline.devices) if run.timeline else 0.0]
    heights = [h for h in heights if h]
    fig = Figure(figsize=(11, sum(heights) + 1.2 * len(heights)), layout="constrained")
    axes = fig.subplots(len(heights), 1, gridspec_kw={"height_ratios": heights}, squeeze=False)[:, 0]
    step_time_figure(run, axes[0])
    if run.placement:
        placement_figure(run, axes[1])
    if run.timeline:
        timeline_figure(run.timeline, axes[-1])
    return fig


def _figure_and_axes(ax: Axes | None, size: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def _ms(seconds: float | None) -> float:
    return 1e3 * seconds if seconds is not None and math.isfinite(seconds) else math.nan


def _nan_last(value: float) -> float:
    return math.inf if math.isnan(value) else value


def _line_styles(count: int) -> list[tuple[tuple[float, ...], str]]:
    """(colour, line style) for each of `count` baselines, no two alike."""
    from matplotlib import colormaps

    # Blue, orange, grey and black already mean ops, transfers, samples and the best.
    colors = [c for i, c in enumerate(colormaps["tab10"].colors) if i not in (0, 1, 7)]
    return [(colors[i % len(colors)], ("--", ":", "-.")[i // len(colors) % 3]) for i in range(count)]


def save_run_picture(run_dir: str | Path, out: str | Path, dpi: int = 80) -> Path:
    """Write the run's pictures (`run_figure`) to one PNG; ExperimentError if `run_dir` is no run."""
    out = Path(out)
    figure = run_figure(read_run(run_dir))
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=dpi)
    return out
