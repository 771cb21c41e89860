"""A light performance model of an op's time at p intra-op threads (the IPDPS 2019 runtime's first piece).

Per op type, fitted on ops profiled at every thread count: the single-thread time is log-linear in the op's
FLOPs and the bytes it reads and writes, and the time at p threads follows Amdahl's law, t(p) = t(1) *
(1 - f + f / p), with the parallel fraction f linear in log(FLOPs + bytes). It predicts ops it never saw from
their features; an op type it never saw gets the model of all ops. Profiles come from traced steps of the
whole graph on one in-process CPU device with one inter-op thread (one op at a time, so an op's span is its
own time at that width).

A least-squares fit in log space predicts an op type's geometric mean, below the arithmetic mean that a
step's total adds up: each type's predictions are scaled by a factor estimated on the fit set's residuals
(`BIAS_CORRECTIONS`).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from placer.errors import ProfileError
from placer.graph.opgraph import OpGraph, OpNode
from placer.host import describe_machine, machine_differences, this_machine, usable_cores
from placer.measure import InProcess, MeasureConfig, Measurer
from placer.placement import Placement

ANY_TYPE = "*"
"""The model of all ops, for op types the fit never saw."""
BIAS_CORRECTIONS = ("none", "smearing", "ratio")
"""How a type's log-space fit is scaled back: not at all; by Duan's smearing estimator, the mean of
measured / predicted over the type's fitted ops and thread counts (unbiased per op if the log residuals do not
depend on size); or by the ratio of their sums (the fit set's total exact, weighted towards long ops)."""
PROFILE_FORMAT = 1
"""Version of the thread-profile file `ThreadProfile.save` writes."""
MIN_SECONDS = 5e-6
"""Ops faster than this are left out of fits and accuracy: their traced spans are mostly timer noise."""


@dataclass(frozen=True)
class ThreadProfile:
    """Per-op compute seconds of one graph at each intra-op thread count, and what profiling it cost."""

    graph: str
    fingerprint: str
    op_seconds: Mapping[int, Mapping[str, float]]
    """Thread count -> op name -> median seconds over the traced steps."""
    seconds: float
    """Wall time of the profiling: starting a measurement process per thread count, and the steps."""
    machine: Mapping[str, object] = field(default_factory=dict)
    """`placer.host.this_machine()` where it was profiled (processor, cores): op times are that machine's."""

    @property
    def threads(self) -> tuple[int, ...]:
        return tuple(sorted(self.op_seconds))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({
            "format": PROFILE_FORMAT, "graph": self.graph, "fingerprint": self.fingerprint, "seconds": self.seconds,
            "machine": dict(self.machine),
            "op_seconds": {str(p): dict(times) for p, times in self.op_seconds.items()}}, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "ThreadProfile":
        """Read a profile `save` wrote; one made on another machine (processor or cores) is refused, since its
        op times are that machine's."""
        try:
            record = json.loads(Path(path).read_text())
            profile = cls(str(record["graph"]), str(record["fingerprint"]),
                          {int(p): {str(op): float(t) for op, t in times.items()}
                           for p, times in record["op_seconds"].items()},
                          float(record["seconds"]), dict(record["machine"]))
            made_in = record["format"]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise ProfileError(f"{path} is not a thread profile (`ThreadProfile.save` writes them): {error}") from None
        if made_in != PROFILE_FORMAT:
            raise ProfileError(f"{path} is a thread profile of format {made_in!r}, this placer reads {PROFILE_FORMAT}: "
                               "profile again (profile_thread_counts)")
        if machine_differences(profile.machine):
            raise ProfileError(f"{path} was profiled on another machine ({describe_machine(profile.machine)}), not this "
                               f"one ({describe_machine(this_machine())}): its op times are that machine's; profile again here "
                               "(profile_thread_counts)")
        return profile


def profile_thread_counts(graph: OpGraph, threads: Sequence[int] | None = None, *, steps: int = 3,
                          measure_config: MeasureConfig | None = None) -> ThreadProfile:
    """Trace `steps` steps of `graph` on one in-process CPU device at each intra-op thread count (default:
    1 to the cores this process may use), one op at a time (one inter-op thread)."""
    threads = tuple(threads or range(1, usable_cores() + 1))
    targets = {p: InProcess(1, intra_op_threads=p, inter_op_threads=1) for p in threads}  # refused beyond the cores
    config = replace(measure_config or MeasureConfig(warmup_steps=2, timed_steps=2), profile_steps=steps,
                     profile_cores=1)
    step_names = {op.name for op in graph.step_ops}
    started = time.perf_counter()
    op_seconds = {}
    for p, target in targets.items():
        with Measurer(target, config) as measurer:
            result = measurer.measure(graph, Placement.on_device(graph, measurer.devices, 0), config)
        if not result.ok:
            raise ProfileError(f"profiling {graph.name!r} at {p} intra-op threads failed ({result.failure.kind}): {result.failure.message}")
        op_seconds[p] = {name: t.seconds for name, t in result.op_times.items() if name in step_names}
    return ThreadProfile(graph.name, graph.fingerprint, op_seconds, time.perf_counter() - started, this_machine())


def op_features(graph: OpGraph, op: OpNode) -> tuple[float, float]:
    """(FLOPs, bytes read and written) of one run of `op`."""
    read = 0
    for tensor in op.data_inputs:
        producer, _, index = tensor.rpartition(":")
        outputs = graph.op(producer).output_bytes
        read += outputs[int(index)] if index.isdigit() and int(index) < len(outputs) else 0
    return float(op.flops), float(read + sum(op.output_bytes))


@dataclass(frozen=True)
class TypeModel:
    """log t(1) = intercept + flops_slope * log(1 + FLOPs) + bytes_slope * log(1 + bytes); parallel fraction
    f = clip(f_intercept + f_slope * log(1 + FLOPs + bytes), 0, 1)."""

    intercept: float
    flops_slope: float
    bytes_slope: float
    f_intercept: float
    f_slope: float
    ops: int
    scale: float = 1.0
    """The bias correction's factor (`BIAS_CORRECTIONS`); 1 for none."""

    def seconds(self, flops: float, moved: float, threads: int) -> float:
        single = math.exp(self.intercept + self.flops_slope * math.log1p(flops) + self.bytes_slope * math.log1p(moved))
        fraction = min(max(self.f_intercept + self.f_slope * math.log1p(flops + moved), 0.0), 1.0)
        return self.scale * single * (1.0 - fraction + fraction / threads)


@dataclass(frozen=True)
class PerformanceModel:
    """Predicts an op's compute time at p intra-op threads from its type and features."""

    types: Mapping[str, TypeModel]
    trained_on: tuple[str, ...] = field(default=())
    max_threads: int | None = None
    """The widest thread count every profile it was fitted on covers; None: not known (no limit)."""

    def predict(self, graph: OpGraph, op: OpNode, threads: int) -> float:
        if self.max_threads is not None and threads > self.max_threads:
            raise ProfileError(
                f"the performance model was fitted on ops profiled at up to {self.max_threads} intra-op threads, so it "
                f"does not predict a width of {threads}: profile at that width on a machine with the cores for it")
        model = self.types.get(op.type) or self.types[ANY_TYPE]
        return model.seconds(*op_features(graph, op), threads)


def fit_performance_model(samples: Iterable[tuple[OpGraph, ThreadProfile]], *, min_ops: int = 4,
                          bias_correction: str = "smearing") -> PerformanceModel:
    """Fit one `TypeModel` per op type with at least `min_ops` profiled ops (and one over all ops), each
    scaled by `bias_correction` (one of `BIAS_CORRECTIONS`), estimated on the same fitted ops."""
    if bias_correction not in BIAS_CORRECTIONS:
        raise ValueError(f"bias_correction must be one of {', '.join(BIAS_CORRECTIONS)}, not {bias_correction!r}")
    rows: list[tuple[str, float, float, dict[int, float]]] = []
    names, widest, machines = [], [], {}
    for graph, profile in samples:
        if profile.fingerprint != graph.fingerprint:
            raise ProfileError(f"the thread profile of {profile.graph!r} was made for another graph than {graph.name!r}")
        machines.setdefault(json.dumps(dict(profile.machine), sort_keys=True), profile.graph)
        if len(machines) > 1:
            first, other = list(machines.values())[:2]
            raise ProfileError(f"the thread profiles of {first!r} and {other!r} were made on different machines: "
                               "fit a performance model on profiles of one machine")
        names.append(graph.name)
        widest.append(max(profile.threads))
        single = profile.op_seconds.get(1)
        if single is None:
            raise ProfileError(f"the thread profile of {profile.graph!r} has no single-thread times to fit")
        for op in graph.step_ops:
            times = {p: profile.op_seconds[p].get(op.name) for p in profile.threads}
            if any(t is None for t in times.values()) or single.get(op.name, 0.0) < MIN_SECONDS:
                continue
            rows.append((op.type, *op_features(graph, op), times))
    if not rows:
        raise ProfileError("no profiled op ran long enough to fit a performance model")
    by_type: dict[str, list] = {ANY_TYPE: rows}
    for row in rows:
        by_type.setdefault(row[0], []).append(row)
    types = {name: _fit_type(group, bias_correction) for name, group in by_type.items()
             if name == ANY_TYPE or len(group) >= min_ops}
    return PerformanceModel(types, tuple(names), min(widest))


def _fit_type(rows, bias_correction: str) -> TypeModel:
    flops = np.log1p([r[1] for r in rows])
    moved = np.log1p([r[2] for r in rows])
    single = np.log([r[3][1] for r in rows])
    design = np.column_stack([np.ones(len(rows)), flops, moved])
    # Ridge-damped least squares: a type whose ops all have the same size must not get wild slopes.
    coefficients = np.linalg.solve(design.T @ design + 1e-3 * np.eye(3), design.T @ single)
    fractions, sizes = [], []
    for row, size in zip(rows, np.log1p([r[1] + r[2] for r in rows])):
        for p, seconds in row[3].items():
            if p > 1:
                fractions.append((1.0 - seconds / row[3][1]) / (1.0 - 1.0 / p))
                sizes.append(size)
    if fractions:
        design_f = np.column_stack([np.ones(len(sizes)), sizes])
        f_intercept, f_slope = np.linalg.solve(design_f.T @ design_f + 1e-3 * np.eye(2), design_f.T @ np.asarray(fractions))
    else:
        f_intercept, f_slope = 0.0, 0.0
    model = TypeModel(*map(float, coefficients), float(f_intercept), float(f_slope), len(rows))
    if bias_correction == "none":
        return model
    measured = np.array([seconds for row in rows for seconds in row[3].values()])
    predicted = np.array([model.seconds(row[1], row[2], p) for row in rows for p in row[3]])
    if bias_correction == "smearing":
        scale = float(np.mean(measured / predicted))
    else:
        scale = float(measured.sum() / predicted.sum())
    return replace(model, scale=scale)


def accuracy(model: PerformanceModel, graph: OpGraph, profile: ThreadProfile) -> dict[str, dict[int, float]]:
    """Mean absolute percentage error per thread count over the ops that ran at least MIN_SECONDS, and the
    error of the ops' total time (what a step's compute adds up to)."""
    mape, total = {}, {}
    for p in profile.threads:
        errors, predicted_sum, measured_sum = [], 0.0, 0.0
        for op in graph.step_ops:
            measured = profile.op_seconds[p].get(op.name)
            if measured is None or measured < MIN_SECONDS:
                continue
            predicted = model.predict(graph, op, p)
            errors.append(abs(predicted - measured) / measured)
            predicted_sum += predicted
            measured_sum += measured
        mape[p] = 100 * float(np.mean(errors)) if errors else math.nan
        total[p] = 100 * (predicted_sum - measured_sum) / measured_sum if measured_sum else math.nan
    return {"mape_pct": mape, "total_error_pct": total}
