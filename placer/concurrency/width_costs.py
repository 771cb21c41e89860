"""One graph's op costs measured at each intra-op width: a `CostTable` per width, profiled once, from which the
simulator prices every thread setting (`placer.concurrency.choose`) without timing each one.

Where the performance model predicts an op's time at p threads from its type and size (40-53 % off per op at
one thread on held-out models, 56-197 % at two), these are the op's own times at p threads, measured the way
a calibrated target's op costs are: the whole step on one in-process CPU device, one op at a time (one inter-op
thread, so an op's span is its own time at that width), with the executor's time between ops spread over them
(`placer.profile.profile_costs`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from placer.errors import ProfileError
from placer.graph.opgraph import OpGraph, OpNode
from placer.host import usable_cores
from placer.profile import PROFILE_ROUNDS, CostTable, profile_costs


@dataclass(frozen=True)
class WidthCosts:
    """Compute seconds of each op of one graph at each intra-op width it was profiled at. An `OpTimeModel` for
    the simulator: a CPU device of width p runs each op in its width-p time."""

    graph: str
    graph_fingerprint: str
    tables: Mapping[int, CostTable]
    """Intra-op threads -> the graph's op costs at that width."""

    def __post_init__(self) -> None:
        if not self.tables:
            raise ProfileError(f"op costs of {self.graph!r} at no width: profile at least one (profile_widths)")
        for width, table in self.tables.items():
            if table.graph_fingerprint != self.graph_fingerprint:
                raise ProfileError(f"the width-{width} op costs were made for another graph than {self.graph!r}")

    @property
    def widths(self) -> tuple[int, ...]:
        return tuple(sorted(self.tables))

    def predict(self, graph: OpGraph, op: OpNode, threads: int) -> float:
        table = self.tables.get(threads)
        if table is None:
            raise ProfileError(
                f"the op costs of {self.graph!r} were profiled at {_listed(self.widths)} intra-op threads, not at "
                f"{threads}: profile them at that width too (profile_widths(graph, widths={(*self.widths, threads)}) "
                f"on a machine with at least {threads} cores)")
        return table.seconds(op.name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the graph and each width's op seconds, so that settings can be priced again later without
        profiling (`width_costs_from_dict`)."""
        return {"graph": self.graph, "graph_fingerprint": self.graph_fingerprint, "widths": {
            str(width): {"device_kind": table.device_kind, "source": table.source, "metadata": dict(table.metadata),
                         "op_seconds": dict(table.op_seconds)}
            for width, table in sorted(self.tables.items())}}

    def check_graph(self, graph: OpGraph) -> None:
        if graph.fingerprint != self.graph_fingerprint:
            raise ProfileError(f"the op costs of {self.graph!r} were profiled for another graph than {graph.name!r}: "
                               "profile this graph (profile_widths)")


def profile_widths(graph: OpGraph, widths: Sequence[int] | None = None, *, steps: int = 5,
                   rounds: int = PROFILE_ROUNDS, measure_config=None) -> WidthCosts:
    """Profile `graph`'s ops on one in-process CPU device at each intra-op width (default: 1 to the cores this
    process may use), one inter-op thread; each width in a measurement process of its own, since TensorFlow
    fixes its pools once per process. A width beyond the cores is refused before anything starts."""
    from placer.measure import InProcess, MeasureConfig, Measurer

    widths = tuple(sorted(set(widths or range(1, usable_cores() + 1))))
    targets = {width: InProcess(1, intra_op_threads=width, inter_op_threads=1) for width in widths}
    config = measure_config or MeasureConfig(warmup_steps=2, timed_steps=5)
    tables = {}
    for width, target in targets.items():
        with Measurer(target, config) as measurer:
            table = profile_costs(graph, measurer, steps=steps, rounds=rounds, cores=1,
                                  label=f"CPU at {width} intra-op thread{'s' * (width > 1)}")
        tables[width] = replace(table, metadata={**table.metadata, "intra_op_threads": width, "inter_op_threads": 1})
    return WidthCosts(graph.name, graph.fingerprint, tables)


def width_costs_from_dict(data: Mapping[str, Any], graph: OpGraph | None = None) -> WidthCosts:
    """The op costs `WidthCosts.to_dict` wrote; with `graph`, refused if they were profiled for another graph."""
    try:
        fingerprint = data["graph_fingerprint"]
        tables = {int(width): CostTable(fingerprint, entry["device_kind"], entry["op_seconds"], entry["source"],
                                        entry.get("metadata") or {})
                  for width, entry in data["widths"].items()}
        costs = WidthCosts(data["graph"], fingerprint, tables)
    except (KeyError, TypeError, ValueError) as error:
        raise ProfileError(f"not op costs per width ({error!r}): write them with WidthCosts.to_dict") from None
    if graph is not None:
        costs.check_graph(graph)
    return costs


def _listed(numbers: Sequence[int]) -> str:
    return ", ".join(map(str, numbers))
