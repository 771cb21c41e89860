"""How a placement is timed: warm-up and timed steps, timeouts, placement checks and profiling; and the
command-line flags that set them (`add_measure_arguments`, `measure_config`), declared once for every command."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

from placer.errors import PlacerError

ENOUGH_TIMED_SECONDS = 0.3
"""How long of untraced steps a short step's median needs (`MeasureConfig.timed_seconds` where a step's level
matters: profiles, `placer apply`). Held-out branchy-0 (3 ms) on one testbed worker: 12 measurements of 10
timed steps spread 13 % between their 10th and 90th percentiles, of 100 steps 6 %; the medians of 10-step
blocks of one 100-step session spread 15 %, so the noise is the steps', not the sessions'
(`experiments/probes/step_noise.py`)."""
MAX_TIMED_STEPS = 200
"""`timed_seconds` times no more steps than this (a 1 ms step: 0.2 s)."""


@dataclass(frozen=True)
class MeasureConfig:
    """How to time a placement. Defaults follow grappler's MeasureCosts loosely: discard warm-up, take a median."""

    warmup_steps: int = 2
    """Steps run and discarded before timing (the first one is traced to check the placement)."""
    timed_steps: int = 5
    """Steps timed; the result reports their median and spread."""
    timed_seconds: float = 0.0
    """Go on timing steps past `timed_steps` until they have taken this many seconds (at most `MAX_TIMED_STEPS`
    steps in all): a short step's median of a few steps is noisy (`ENOUGH_TIMED_SECONDS`)."""
    step_timeout: float = 60.0
    """Seconds one step (or the initializer) may take before it counts as hung and fails with 'timeout'."""
    setup_timeout: float = 300.0
    """Seconds allowed for graph rewrite, session creation and starting workers, on top of the steps."""
    allow_soft_placement: bool = True
    """Let TensorFlow move ops it cannot run where placed; every move is reported in `moved_ops`."""
    check_placement: bool = True
    """Trace the first warm-up step and compare each op's device with the placement (unless earlier traced steps of
    the graph in this worker already confirmed every colocation group on its device: see `trace_every_placement`)."""
    trace_every_placement: bool = False
    """Trace the first warm-up step of every placement, even when earlier traces confirmed all its
    (colocation group, device) pairs."""
    reimport_graph: bool = False
    """Import the placed GraphDef anew for every placement instead of changing the devices of the graph the worker
    imported once (the slower path before 2026-11; kept to compare the two)."""

    kept_sessions: int = 0
    """Sessions kept open after a measurement, one per placement, the least recently used closed first: measuring
    the same placement again (a comparison's next round, a profile's rounds) then skips importing the graph,
    creating the session, initializing the variables and TensorFlow's optimization and partitioning of the step
    on its first run. A 16,448-op Keras EfficientNetB0 step on `local:2` took 9.5-10.6 s to measure a placement
    the first time and 0.4-3.5 s again in its kept session (`experiments/probes/kept_sessions.py`, 2026-11-27).
    0: a new session for every measurement. Sessions are kept only while the machine has a quarter of its memory
    available (`placer.measure.runner.KEPT_SESSIONS_MEMORY_SHARE`)."""

    profile_steps: int = 0
    """Extra traced steps, after the timed ones, whose per-op compute times go into `Measurement.op_times`
    (tracing slows steps down, so they are never among the timed samples)."""
    keep_every_trace: bool = False
    """Keep every profiled step's Chrome trace (`Measurement.chrome_traces`), not only the last one's: a probe that
    reads one event per step (`placer.calibrate.measure_request_delay`) then gets `profile_steps` of them from one
    measurement."""
    profile_cores: int = 1
    """Cores each device computes on, to split the time of ops that ran at once (1 for a testbed worker
    pinned to one core)."""

    answer_timeout: float | None = None
    """The caller's backstop, in seconds: past it the worker is killed and restarted even if TensorFlow's own
    step deadline never fired. Default: setup_timeout plus step_timeout for every step and the initializer."""

    @property
    def total_timeout(self) -> float:
        if self.answer_timeout is not None:
            return self.answer_timeout
        # timed_seconds adds at most its own seconds and the step that crosses them
        extra = self.timed_seconds + self.step_timeout if self.timed_seconds > 0 else 0.0
        return self.setup_timeout + extra + self.step_timeout * (
            self.warmup_steps + self.timed_steps + self.profile_steps + 2)


def add_measure_arguments(parser: argparse.ArgumentParser, defaults: MeasureConfig = MeasureConfig(), *,
                          old_repeats_flag: str | None = None) -> None:
    """--warmup, --repeats and --step-timeout, defaulting to `defaults`' values; read them back with
    `measure_config(args)`. old_repeats_flag: an earlier spelling of --repeats kept working, hidden from help."""
    parser.add_argument("--warmup", type=int, default=defaults.warmup_steps, metavar="N",
                        help=f"untimed steps first, the first one traced to check the placement (default "
                        f"{defaults.warmup_steps})")
    if defaults.timed_seconds > 0:  # None: the default, told apart from an explicit count of the same
        parser.add_argument("--repeats", type=int, default=None, metavar="N",
                            help=f"timed steps; the step time is their median (default: {defaults.timed_steps}, and "
                            f"more until {defaults.timed_seconds:g} s of them have run, up to {MAX_TIMED_STEPS}; "
                            "a count given here is run exactly)")
    else:
        parser.add_argument("--repeats", type=int, default=defaults.timed_steps, metavar="N",
                            help=f"timed steps; the step time is their median (default {defaults.timed_steps})")
    if old_repeats_flag:
        parser.add_argument(old_repeats_flag, dest="repeats", type=int, default=argparse.SUPPRESS,
                            help=argparse.SUPPRESS)
    parser.add_argument("--step-timeout", type=float, default=defaults.step_timeout, metavar="SECONDS",
                        help=f"seconds before a step counts as hung (default {defaults.step_timeout:g})")


def measure_config(args: argparse.Namespace, defaults: MeasureConfig = MeasureConfig()) -> MeasureConfig:
    """The MeasureConfig that `add_measure_arguments`' flags describe (other fields from `defaults`); refuses
    values that cannot time anything before any work."""
    if args.warmup < 0:
        raise PlacerError(f"--warmup must be 0 or more, got {args.warmup}")
    if args.repeats is None:  # the default count, and the default seconds with it
        timed = {"timed_steps": defaults.timed_steps, "timed_seconds": defaults.timed_seconds}
    elif args.repeats < 1:
        raise PlacerError(f"--repeats must be at least 1 (the step time is their median), got {args.repeats}")
    else:
        timed = {"timed_steps": args.repeats, "timed_seconds": 0.0}
    if not args.step_timeout > 0:
        raise PlacerError(f"--step-timeout must be a positive number of seconds, got {args.step_timeout}")
    return dataclasses.replace(defaults, warmup_steps=args.warmup, step_timeout=args.step_timeout, **timed)
