"""Put a placement's devices on the ops of your own graph (a tf.Graph, GraphDef, OpGraph or traced TF2 step),
after checking that the placement was made for that graph; report every op the placement does not name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from placer.errors import PlacementError, PlacementFileError
from placer.graph.opgraph import OpGraph
from placer.placement import Placement, PlacementFile, check_same_graph, read_placement_file

if TYPE_CHECKING:  # TensorFlow loads only when a graph is placed
    import tensorflow as tf

UNCOVERED_POLICIES = ("colocate", "leave", "error")
_PLACER_INIT = "placer_init"  # the initializer `op_graph_from_tf_graph` adds when a builder gives none


@dataclass(frozen=True)
class UncoveredOp:
    """An op of your graph that the placement does not name (a saver, summary or initializer you added)."""

    name: str
    type: str
    device: str
    """The device it got, or "" when TensorFlow's placer chooses."""
    reason: str
    """How, starting with one word: "colocated with X", "resource X", "input X", "kept its own device",
    "unplaced (no placed input)", "left to TensorFlow"."""


@dataclass(frozen=True)
class PlacementReport:
    """What `place_graph` did: the graph it checked the placement against, and every op it did not cover."""

    graph: OpGraph
    """Your graph's training step as placer sees it; its fingerprint is the placement's."""
    placed_ops: int
    """Ops that got their device from the placement."""
    uncovered: tuple[UncoveredOp, ...]
    replaced_devices: int
    """Placed ops whose device your code had already set (a `tf.device` scope); the placement's device won."""
    init_op: str | None
    """The placement graph's initializer if your graph has it (e.g. `placer_init` in a GraphDef placer
    built); None when it was rebuilt only for the check: then run your own initializer."""
    graph_def: Any = field(default=None, repr=False)
    """For a GraphDef or OpGraph input: the placed copy, a `tf.compat.v1.GraphDef` (None for a tf.Graph,
    which is placed in place)."""

    def describe(self) -> str:
        text = f"placed {self.placed_ops} ops of {self.graph.name!r} (fingerprint {self.graph.fingerprint[:12]})"
        if self.replaced_devices:
            text += f"; replaced the device your code set on {self.replaced_devices} of them"
        if self.uncovered:
            kinds: dict[str, int] = {}
            for op in self.uncovered:
                kind = op.reason.split(" ")[0]
                kinds[kind] = kinds.get(kind, 0) + 1
            text += (f"; {len(self.uncovered)} ops are not in the placement ("
                     + ", ".join(f"{kind}: {count}" for kind, count in sorted(kinds.items())) + ")")
        return text


def place_graph(
    graph: tf.Graph | tf.compat.v1.GraphDef | OpGraph,
    placement: str | Path | PlacementFile | Placement,
    *,
    train_op: str | tf.Operation | None = None,
    init_op: str | tf.Operation | None = None,
    loss: str | tf.Tensor | None = None,
    uncovered: str = "colocate",
    name: str | None = None,
) -> PlacementReport:
    """Put a placement's devices on the ops of your graph, after checking that it is the placement's graph.

    graph: a `tf.Graph` your code built with the same code as the placement's graph (its ops get their
    devices in place; nothing is added to it); a `tf.compat.v1.GraphDef` (the placed copy is
    `report.graph_def`); or an `OpGraph`. A `Placement` object goes only with an OpGraph; otherwise pass
    the file (or `read_placement_file`'s result). train_op, init_op, loss: the step's fetches, by
    default those the file records. The check runs on a copy of the graph's ops that the placement names;
    placer's own initializer (`placer_init`) is rebuilt there when your graph does not have it, so your
    code may have made its own initializer, saver or summaries before or after this call.

    uncovered: what happens to ops of your graph that the placement does not name (only ops that exist
    when this is called). "colocate" (default) gives each the device of its colocation anchor, else of the
    resource it reads, else of its first placed input; ops your code put on a device keep it, ops with no
    placed input stay unplaced. "leave" leaves them all to TensorFlow; "error" refuses. Either way each
    is listed in `report.uncovered`.
    """
    import tensorflow as tf

    if uncovered not in UNCOVERED_POLICIES:
        raise PlacementError(f"uncovered={uncovered!r}: use one of {', '.join(UNCOVERED_POLICIES)}")
    if isinstance(graph, OpGraph):
        exported = as_placement_file(placement, graph)
        check_same_graph(exported, graph)
        placed = tf.compat.v1.GraphDef.FromString(graph.graph_def)
        for node in placed.node:
            node.device = exported.op_devices[node.name]
        return PlacementReport(graph, len(placed.node), (), 0, graph.init_op, placed)

    graph_def = None
    if isinstance(graph, tf.compat.v1.GraphDef):
        graph_def, graph = graph, tf.Graph()
        with graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
    if not isinstance(graph, tf.Graph):
        raise PlacementError(f"place_graph needs a tf.Graph, a GraphDef or an OpGraph, not {type(graph).__name__}")
    if isinstance(placement, Placement):
        raise PlacementError(
            "a Placement object names no ops without its OpGraph: pass that OpGraph, or save the placement and "
            "pass the file"
        )
    exported = placement if isinstance(placement, PlacementFile) else read_placement_file(placement)
    step, checked = _op_graph_of(graph, exported, train_op, init_op, loss, name or exported.graph_name or "graph",
                                 from_graph_def=graph_def is not None)
    check_same_graph(exported, step)

    ops = graph.get_operations()
    devices = {op.name: exported.op_devices[op.name] for op in ops if op.name in checked}
    replaced = sum(
        1 for op in ops
        if op.name in devices and op.device
        and tf.DeviceSpec.from_string(op.device) != tf.DeviceSpec.from_string(devices[op.name])
    )
    missed = [op for op in ops if op.name not in devices]
    if missed and uncovered == "error":
        raise PlacementError(
            f"{len(missed)} ops of your graph are not in the placement, e.g. {_few([op.name for op in missed])}; "
            "pass uncovered='colocate' or 'leave' to place them anyway"
        )
    placed_ops = len(devices)
    report_uncovered = []
    for op in missed:  # creation order: an op's inputs come before it, so their devices are known
        device, reason = _device_of_uncovered(op, devices) if uncovered == "colocate" else (op.device, "left to TensorFlow")
        if device:
            devices[op.name] = device
        report_uncovered.append(UncoveredOp(op.name, op.type, device, reason))

    placed = None
    if graph_def is None:
        for op in ops:
            if op.name in devices and op.device != devices[op.name]:
                op._set_device(devices[op.name])  # noqa: SLF001 (TF's only way to re-place an existing op)
    else:
        placed = tf.compat.v1.GraphDef()
        placed.CopyFrom(graph_def)
        for node in placed.node:
            node.device = devices.get(node.name, node.device)
    init = step.init_op if any(op.name == step.init_op for op in ops) else None
    return PlacementReport(step, placed_ops, tuple(report_uncovered), replaced, init, placed)


def place_tf_function(
    step_fn: Callable[..., Any], placement: str | Path | PlacementFile, *args: Any, name: str | None = None
) -> PlacementReport:
    """Trace a TF2 training step (`graph_from_tf_function`), check the placement is its, and place it.

    The placed step is `report.graph_def`; run it with `run_training(report.graph, placement, target)`.
    Limits: TF2 eager execution places per `tf.device` scope, so this is the only per-op route for a
    `tf.function`; the run trains the traced graph's copy of the variables (initialized from their current
    values), not your Python variables. Trace it in a fresh process, as when the placement was made:
    Keras 3 names layers from a process-wide counter, so a second model gets other op names.
    """
    from placer.graph.build import graph_from_tf_function

    exported = placement if isinstance(placement, PlacementFile) else read_placement_file(placement)
    graph = graph_from_tf_function(step_fn, *args, name=name or exported.graph_name or "tf_function_step")
    return place_graph(graph, exported)


# -- helpers --------------------------------------------------------------------------------------------


def as_placement_file(placement: str | Path | PlacementFile | Placement, graph: OpGraph) -> PlacementFile:
    """A placement given as a file, a `PlacementFile` or a `Placement`, as the file; an in-memory `Placement`
    is refused here if it was made for another graph (it names no ops without its own)."""
    if isinstance(placement, PlacementFile):
        return placement
    if isinstance(placement, (str, Path)):
        return read_placement_file(placement)
    if isinstance(placement, Placement):
        if placement.graph_fingerprint != graph.fingerprint:
            raise PlacementFileError(
                f"the placement was made for graph fingerprint {placement.graph_fingerprint[:12]}, not for your graph "
                f"{graph.name!r} ({graph.fingerprint[:12]}). The model or its size, batch or optimizer changed: "
                "build the graph exactly as for the placement, or make a new placement for this graph"
            )
        return placement.to_file(graph)
    raise PlacementError(f"expected a placement file, PlacementFile or Placement, not {type(placement).__name__}")


def _op_graph_of(
    graph, exported: PlacementFile, train_op, init_op, loss, name: str, *, from_graph_def: bool
) -> tuple[OpGraph, set[str]]:
    """Your graph's ops that the placement names, as an OpGraph built with the placement's fetches, and the
    names of the ops taken from your graph (the rest, if any, make up a rebuilt `placer_init`).

    Built from a copy, so your graph is not changed and ops your code added (its own initializer named
    "init", a saver) neither get in the way nor shift the names of a rebuilt `placer_init`.
    """
    import tensorflow as tf

    from placer.graph.build import _ancestors, op_graph_from_tf_graph

    fetches = {}
    for what, given, recorded in (("train_op", train_op, exported.train_op), ("init_op", init_op, exported.init_op),
                                  ("loss", loss, exported.loss)):
        value = recorded if given is None else given
        fetches[what] = value if value is None or isinstance(value, str) else value.name
    if fetches["train_op"] is None:
        raise PlacementError(f"{exported.source} predates recorded fetches: give train_op= (the op one training step runs)")
    if fetches["init_op"] is None:
        fetches["init_op"] = _PLACER_INIT
    graph_def = graph.as_graph_def()
    present = {node.name for node in graph_def.node}
    rebuild_init = fetches["init_op"] == _PLACER_INIT and _PLACER_INIT not in present
    if rebuild_init and from_graph_def:
        raise PlacementError(f"the GraphDef has no initializer {_PLACER_INIT!r} (and no variable collections to rebuild "
                             "it from): pass the tf.Graph it came from, or init_op=")
    for what in ("train_op", "loss") if rebuild_init else ("train_op", "init_op", "loss"):
        op_name = fetches[what] and fetches[what].split(":")[0]
        if op_name and op_name not in present:
            raise PlacementFileError(
                f"your graph has no op {op_name!r}, the {what} of {exported.source}'s graph {exported.graph_name!r}: "
                f"build the graph exactly as for the placement, or pass {what}="
            )

    wanted = set(exported.op_devices)
    if rebuild_init:  # keep the step and the variables' initializers; "init"-named groups get rebuilt
        wanted &= _ancestors(graph, [fetches[k].split(":")[0] for k in ("train_op", "loss") if fetches[k]]
                             + [v.initializer.name for v in _variables(graph)])
    kept = [node for node in graph_def.node if node.name in wanted]
    kept_names = {node.name for node in kept}
    outside = sorted({raw.lstrip("^").split(":")[0] for node in kept for raw in node.input} - kept_names)
    if outside:
        raise PlacementFileError(
            f"{exported.source} was made for graph {exported.graph_name!r} (fingerprint {exported.fingerprint[:12]}), "
            f"not for your graph: in your graph, ops it names read {len(outside)} ops it does not name ({_few(outside)}). "
            "The model or its size, batch or optimizer changed: build the graph exactly as for the placement, or make "
            "a new placement for this graph"
        )
    # tf.group splits a rebuilt placer_init by device: first as your code placed the ops, then (if your graph
    # was placed before, e.g. by an earlier call) as the placement's graph had them, with no devices.
    variants = (False, True) if rebuild_init and any(node.device for node in kept) else (False,)
    for strip_devices in variants:
        pruned = tf.compat.v1.GraphDef()
        pruned.versions.CopyFrom(graph_def.versions)
        pruned.library.CopyFrom(graph_def.library)
        pruned.node.extend(kept)
        for node in pruned.node if strip_devices else ():
            node.device = ""
        copy = tf.Graph()
        with copy.as_default():
            try:
                tf.compat.v1.import_graph_def(pruned, name="")
            except ValueError as error:  # e.g. colocation with an op the placement does not name
                raise PlacementFileError(
                    f"{exported.source} does not fit your graph: its ops do not form a graph of their own "
                    f"({str(error).splitlines()[0]}). Build the graph exactly as for the placement"
                ) from None
            init = _rebuild_placer_init(graph, copy, exported) if rebuild_init else fetches["init_op"]
        step = op_graph_from_tf_graph(copy, fetches["train_op"], init, loss=fetches["loss"], name=name)
        if step.fingerprint == exported.fingerprint:
            break
    return step, {node.name for node in kept}


def _rebuild_placer_init(graph, copy, exported: PlacementFile):
    """`placer_init` in `copy` exactly as `op_graph_from_tf_graph` makes it: the global, then the local
    variables' initializers of your graph, each group named "init" (names are free in the copy)."""
    import types

    import tensorflow as tf
    from tensorflow.python.ops import variables

    groups = []
    for variables_of_kind in _variables(graph, split=True):
        initializers = []
        for variable in variables_of_kind:
            if variable.initializer.name not in exported.op_devices:
                raise PlacementFileError(
                    f"{exported.source} does not name the initializer of your variable {variable.name!r}: it was "
                    f"made for another graph ({exported.graph_name!r}). Build the graph exactly as for the placement"
                )
            # variables_initializer reads only `.initializer`: the copy's op stands in for the variable
            initializers.append(types.SimpleNamespace(initializer=copy.get_operation_by_name(variable.initializer.name)))
        groups.append(variables.variables_initializer(initializers))
    return tf.compat.v1.group(*groups, name=_PLACER_INIT)


def _variables(graph, *, split: bool = False):
    """The graph's global then local variables (what placer_init initializes)."""
    import tensorflow as tf

    kinds = [graph.get_collection(key) for key in (tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, tf.compat.v1.GraphKeys.LOCAL_VARIABLES)]
    return kinds if split else [v for kind in kinds for v in kind]


def _device_of_uncovered(op, devices: Mapping[str, str]) -> tuple[str, str]:
    """Device for an op the placement does not name: keep the user's, else follow what TF would colocate."""
    if op.device:
        return op.device, "kept its own device"
    try:
        anchors = [c.decode()[len("loc:@"):] for c in op.get_attr("_class") if c.startswith(b"loc:@")]
    except ValueError:
        anchors = []
    for anchor in anchors:
        if devices.get(anchor):
            return devices[anchor], f"colocated with {anchor}"
    import tensorflow as tf

    inputs = sorted(op.inputs, key=lambda t: t.dtype != tf.resource)  # a resource pins its readers to its device
    for tensor in inputs:
        if devices.get(tensor.op.name):
            kind = "resource" if tensor.dtype == tf.resource else "input"
            return devices[tensor.op.name], f"{kind} {tensor.op.name}"
    return "", "unplaced (no placed input)"


def _few(names, limit: int = 3) -> str:
    shown = ", ".join(repr(n) for n in list(names)[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
