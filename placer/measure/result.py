"""The measurement worker's wire record of one measured placement: step-time samples, or a structured failure,
placement checks, traces. It crosses the worker's process boundary only: `placer.cost.StepTime.from_measurement`
turns it into the step-time record that every caller above prints, saves and compares.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Mapping

FAILURE_KINDS = ("oom", "invalid", "timeout", "crash", "runtime")


def interquartile_range(samples) -> float:
    """Spread of step-time samples: the interquartile range (0 for fewer than two samples)."""
    if len(samples) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q3 - q1


@dataclass(frozen=True)
class Failure:
    """Why a placement produced no step time. kind is one of FAILURE_KINDS."""

    kind: str
    message: str


@dataclass(frozen=True)
class MovedOp:
    """An op TensorFlow ran somewhere other than where the placement put it."""

    op: str
    requested: str
    actual: str
    ran_as: str = ""
    """The op type TensorFlow ran under this name when it differs from the graph's: grappler fused the op
    with its producer (e.g. MatMul+BiasAdd into _FusedMatMul) and ran the fusion on the producer's device."""


@dataclass(frozen=True)
class OpTime:
    """What traced steps saw of one op: its device and its compute time (median over the steps)."""

    device: str
    seconds: float
    ran_as: str = ""
    """The op type that ran, e.g. a grappler fusion such as _FusedMatMul."""
    runs: float = 1.0
    """Traced nodes that ran for this op per step (median): 1 for most ops; for a loop or conditional, every
    node TensorFlow lowered it into, once per iteration (`placer.graph.control_flow`)."""
    iterations: int | None = None
    """A loop's iterations per step (median), from its lowered condition; None for any other op."""


@dataclass(frozen=True)
class Measurement:
    """Step times in seconds of K timed steps (after W discarded warm-up steps), or a failure; with the traces
    that only the measure service's callers read (op_times, chrome_trace, worker_cpu)."""

    samples: tuple[float, ...] = ()
    failure: Failure | None = None
    moved_ops: tuple[MovedOp, ...] = ()
    """Ops that ran on another device than requested (soft placement, host-memory ops)."""
    ops_checked: int = 0
    """Placed ops found in the traced step, whose device was compared with the placement."""
    ops_not_traced: int = 0
    """Placed ops absent from the traced step (folded or fused by grappler, or not run)."""
    placement_check: str = ""
    """"traced": the first warm-up step was traced and compared with the placement. "reused": earlier traced steps
    of this graph in this worker confirmed every (colocation group, device) pair of the placement, so no step was
    traced; ops_checked and ops_not_traced then add up what those traces saw. "": not checked."""
    overhead: Mapping[str, float] = field(default_factory=dict)
    """Seconds spent per placement around the timed steps: graph rewrite, session, init, first step."""
    target: str = ""
    op_times: Mapping[str, OpTime] = field(default_factory=dict)
    """Per-op compute times from traced steps, by the name TensorFlow ran the op under (only when
    `MeasureConfig.profile_steps` > 0). A fused op's time is under the name of the node that ran it."""
    chrome_trace: str = ""
    """The last profiled step as a Chrome trace (JSON for chrome://tracing or Perfetto); empty unless
    `MeasureConfig.profile_steps` > 0."""
    chrome_traces: tuple[str, ...] = ()
    """Every profiled step's Chrome trace, in the order they ran, with `MeasureConfig.keep_every_trace`; else
    empty."""
    worker_cpu: tuple[float, ...] = ()
    """Seconds of CPU each testbed worker process used per timed step (all its threads, from the kernel's
    scheduler accounting), in the order of the cluster's workers; empty where the workers are not local
    processes (in-process devices, remote clusters). Unlike step times, VM steal and a neighbour's load do not
    show in it: `placer.calibrate` fits the cores' transfer costs from it."""

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def median(self) -> float:
        """Median step time in seconds; inf for a failed placement."""
        return statistics.median(self.samples) if self.ok and self.samples else float("inf")

    @property
    def spread(self) -> float:
        """Interquartile range of the samples in seconds (0 for fewer than two samples)."""
        return interquartile_range(self.samples)
