"""Where a run's step-time curves sit in its TensorBoard event files: written by `agents.tracking`, read by the
step-time page (`placer.dashboard.step_time`) and TensorBoard's own charts.

TensorBoard colours lines by run, not by tag, so each series (best so far, sampled median, each baseline) is a
run directory of its own, RUN_DIR/tensorboard/step_time/<series>/, holding one tag, `step_time_ms`.
"""

from __future__ import annotations

SERIES_DIR = "step_time"
"""RUN_DIR/tensorboard/step_time/<series>/: one event-file directory (a TensorBoard run) per series."""
STEP_TIME_TAG = "step_time_ms"
"""The one tag of every series directory: the step time in milliseconds, per update."""
BEST, SAMPLED, GREEDY = "best", "sampled", "greedy"
"""Series names: the best so far, the median of each update's samples, the policy's greedy placement."""
BEST_SIMULATED, BEST_RETIMED = "best_simulated", "best_retimed"
"""The best so far of a run's simulator phase (simulated step times, which the measured best that follows does not
continue), and the best's own latest timing where timing it again side by side made it slower than its best so far:
a best so far never rises."""
BASELINE_SERIES = "baseline/{}"
"""Each baseline's series, a level line at its step time."""
RUN_NAME_TAG = "run/name"
"""A text summary in RUN_DIR/tensorboard/: the run's name (model, target, start time)."""
SIMULATED_TAG = "training/simulated"
"""1 at the updates trained on the simulator, 0 at the measured ones that follow: logged only by runs with a
simulator phase, so that the switch can be marked on the curve."""
LEGACY_SECONDS_TAG = "step_time/{}"
"""Runs written before the series directories logged every series as a tag of RUN_DIR/tensorboard/ itself,
in seconds: step_time/best, step_time/sampled, step_time/greedy, step_time/baseline/<name>."""
