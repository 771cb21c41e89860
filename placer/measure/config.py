"""How a placement is timed: warm-up and timed steps, timeouts, placement checks and profiling."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MeasureConfig:
    """How to time a placement. Defaults follow grappler's MeasureCosts loosely: discard warm-up, take a median."""

    warmup_steps: int = 2
    """Steps run and discarded before timing (the first one is traced to check the placement)."""
    timed_steps: int = 5
    """Steps timed; the result reports their median and spread."""
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

    profile_steps: int = 0
    """Extra traced steps, after the timed ones, whose per-op compute times go into `Measurement.op_times`
    (tracing slows steps down, so they are never among the timed samples)."""
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
        return self.setup_timeout + self.step_timeout * (self.warmup_steps + self.timed_steps + self.profile_steps + 2)
