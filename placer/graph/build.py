"""Build an `OpGraph` from a tf.Graph, a graph-building function, or a tf-keras model.

Every builder ends in `op_graph_from_tf_graph`: it keeps the ops the training step and the initializer
need, strips devices, orders ops topologically, and computes colocation groups, kernels, shapes and FLOPs.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops
from tensorflow.python.profiler.internal import flops_registry  # noqa: F401  (registers FLOP statistics)
from tensorflow.python.util import deprecation

from placer.errors import GraphBuildError
from placer.graph.colocation import colocation_groups
from placer.graph.control_flow import LOOP_OPS
from placer.graph.kernels import kernel_device_types
from placer.graph.opgraph import ColocationGroup, OpGraph, OpNode

_VARIABLE_OPS = {"VarHandleOp", "VariableV2", "Variable"}
# v1 control flow closes loops through NextIteration -> Merge; TensorFlow's executor treats that as a
# back edge, and so does the topological order here.
_BACK_EDGE_SOURCES = {"NextIteration", "RefNextIteration"}


@dataclass(frozen=True)
class SyntheticTensor:
    """A synthetic batch tensor of a given shape, generated inside the graph each step (nothing is fed)."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    maxval: int | None = None
    """Exclusive upper bound for integer tensors (class ids, token ids); floats are uniform in [0, 1)."""

    def make(self, name: str) -> tf.Tensor:
        dtype = tf.as_dtype(self.dtype)
        if dtype.is_integer:
            if self.maxval is None:
                raise GraphBuildError(f"synthetic integer input {name!r} needs maxval (e.g. the vocabulary size)")
            return tf.random.uniform(self.shape, 0, self.maxval, dtype=dtype, name=name)
        return tf.random.uniform(self.shape, dtype=dtype, name=name)


def op_graph_from_tf_graph(
    graph: tf.Graph,
    train_op: str | tf.Operation | tf.Tensor,
    init_op: str | tf.Operation | None = None,
    *,
    loss: str | tf.Tensor | None = None,
    name: str = "graph",
    model_parameters: int | None = None,
) -> OpGraph:
    """Turn a TF1-style graph with a train op into an `OpGraph`.

    train_op: what one training step runs. init_op: what initializes the variables (default: a new
    global-variables initializer). Ops needed by neither are dropped. model_parameters: the model's own weights'
    elements, as Keras counts them (`OpGraph.model_parameters`), when the caller knows them.
    """
    with graph.as_default():
        if init_op is None:
            init_op = tf.compat.v1.group(
                tf.compat.v1.global_variables_initializer(),
                tf.compat.v1.local_variables_initializer(),
                name="placer_init",
            )
    train_name = _op_name(graph, train_op, "train_op")
    init_name = _op_name(graph, init_op, "init_op")
    loss_name = None if loss is None else (loss if isinstance(loss, str) else loss.name)

    # A training loop fetches the loss with the train op; its last ops need not feed the gradients.
    step = _ancestors(graph, [train_name] + ([loss_name.split(":")[0]] if loss_name else []))
    kept = step | _ancestors(graph, [init_name])
    graph_def = graph.as_graph_def()
    function_names = frozenset(f.signature.name for f in graph_def.library.function)
    nodes = {node.name: node for node in graph_def.node if node.name in kept}
    for node in nodes.values():
        node.device = ""  # placements decide devices; a builder's device scopes are not kept
    order = _topological_order(graph_def, nodes)

    colocate_with: dict[str, list[str]] = {}
    handle_edges: list[tuple[str, str]] = []
    loop_input_edges: list[tuple[str, str]] = []
    for op_name in order:
        op = graph.get_operation_by_name(op_name)
        try:
            classes = op.get_attr("_class")
        except ValueError:
            classes = []
        colocate_with[op_name] = [c.decode()[len("loc:@"):] for c in classes if c.startswith(b"loc:@")]
        for tensor in op.inputs:
            if tensor.dtype == tf.resource or tensor.dtype._is_ref_dtype:
                handle_edges.append((tensor.op.name, op_name))
            if op.type in LOOP_OPS:
                loop_input_edges.append((tensor.op.name, op_name))
    group_of, raw_groups = colocation_groups(order, colocate_with, handle_edges, loop_input_edges)

    op_nodes = []
    for op_name in order:
        node = nodes[op_name]
        op = graph.get_operation_by_name(op_name)
        shapes = tuple(_shape(t) for t in op.outputs)
        dtypes = tuple(t.dtype.base_dtype.name for t in op.outputs)
        op_nodes.append(
            OpNode(
                name=op_name,
                type=node.op,
                data_inputs=tuple(_canonical_tensor(i) for i in node.input if not i.startswith("^")),
                control_inputs=tuple(i[1:] for i in node.input if i.startswith("^")),
                output_shapes=shapes,
                output_dtypes=dtypes,
                output_bytes=tuple(_bytes(s, t.dtype) for s, t in zip(shapes, op.outputs)),
                kernel_devices=kernel_device_types(node, function_names),
                group=group_of[op_name],
                flops=_flops(graph, node),
                parameters=_parameters(op),
                in_step=op_name in step,
            )
        )
    by_name = {op.name: op for op in op_nodes}
    groups = [
        ColocationGroup(index, anchor, tuple(members), frozenset.intersection(*(by_name[m].kernel_devices for m in members)))
        for index, (anchor, members) in enumerate(raw_groups)
    ]

    pruned = tf.compat.v1.GraphDef()
    pruned.versions.CopyFrom(graph_def.versions)
    pruned.library.CopyFrom(graph_def.library)
    pruned.node.extend(nodes[n] for n in order)
    return OpGraph(
        name=name,
        ops=tuple(op_nodes),
        groups=tuple(groups),
        graph_def=pruned.SerializeToString(deterministic=True),
        train_op=train_name,
        init_op=init_name,
        loss=loss_name,
        model_parameters=model_parameters,
    )


def graph_from_function(build: Callable[[], Any], *, name: str = "graph") -> OpGraph:
    """Build a training step with a user function that adds ops to the default graph.

    `build()` runs inside a fresh tf.Graph and returns the train op, or (train_op, loss).
    """
    graph = tf.Graph()
    with graph.as_default():
        result = build()
    if isinstance(result, tuple):
        if len(result) != 2:
            raise GraphBuildError(f"build function for {name!r} must return train_op or (train_op, loss), got {len(result)} values")
        train_op, loss = result
    else:
        train_op, loss = result, None
    if train_op is None:
        raise GraphBuildError(f"build function for {name!r} returned None: return the op one training step runs")
    # a TF1 optimizer's slots and counters are not trainable: the trainable variables are the model's weights
    trainable = graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
    model_parameters = sum(_parameters(v.op) for v in trainable) if trainable else None
    return op_graph_from_tf_graph(graph, train_op, loss=loss, name=name, model_parameters=model_parameters)


def graph_from_keras(
    model_fn: Callable[[], Any],
    *,
    inputs: SyntheticTensor | Sequence[SyntheticTensor] | Mapping[str, SyntheticTensor],
    targets: SyntheticTensor,
    loss: str | Callable = "sparse_categorical_crossentropy",
    optimizer: str | Callable[[], Any] = "sgd",
    name: str = "keras_model",
) -> OpGraph:
    """Build the training step of a tf-keras (Keras 2) model on a synthetic batch.

    model_fn() builds the model (it must run inside the graph placer creates, so pass a function, not a
    model). optimizer is a name ("sgd", "adam", ...) or a function returning a tf-keras legacy optimizer.
    """
    import tf_keras

    graph = tf.Graph()
    # tf-keras in graph mode warns about TF1 APIs it uses internally; those warnings are not the user's.
    with graph.as_default(), deprecation.silence():
        model_inputs = _make_inputs(inputs)
        y_true = targets.make("synthetic_targets")
        model = model_fn()
        if not isinstance(model, tf_keras.Model):
            raise GraphBuildError(
                f"model_fn for {name!r} returned {type(model).__name__}, not a tf_keras.Model; a compiled Keras 3 "
                "model goes through placer.graph.graph_from_keras_model"
            )
        y_pred = model(model_inputs, training=True)
        loss_fn = tf_keras.losses.get(loss)
        loss_value = tf.reduce_mean(loss_fn(y_true, y_pred))
        if model.losses:
            loss_value = tf.add_n([loss_value, *model.losses])
        loss_value = tf.identity(loss_value, name="loss")
        opt = (
            tf_keras.optimizers.get(optimizer, use_legacy_optimizer=True) if isinstance(optimizer, str) else optimizer()
        )
        variables = model.trainable_variables
        gradients = tf.compat.v1.gradients(loss_value, variables)
        update = opt.apply_gradients(zip(gradients, variables))
        # In graph mode, layers such as BatchNormalization register moving-average updates on the model,
        # including those of the functional model's own build on its Input placeholders: keep only ours.
        updates = [u for u in model.updates if not _depends_on_placeholder(graph, u)]
        train_op = tf.group(update, *updates, name="train_op")
    return op_graph_from_tf_graph(graph, train_op, loss=loss_value, name=name, model_parameters=model.count_params())


def _make_inputs(inputs):
    if isinstance(inputs, SyntheticTensor):
        return inputs.make("synthetic_input")
    if isinstance(inputs, Mapping):
        return {key: spec.make(f"synthetic_{key}") for key, spec in inputs.items()}
    return [spec.make(f"synthetic_input_{i}") for i, spec in enumerate(inputs)]


def _op_name(graph: tf.Graph, op: str | tf.Operation | tf.Tensor, what: str) -> str:
    if isinstance(op, tf.Tensor):
        op = op.op
    name = op if isinstance(op, str) else op.name
    name = name.split(":")[0]
    try:
        graph.get_operation_by_name(name)
    except (KeyError, ValueError):
        raise GraphBuildError(f"{what} {name!r} is not an op of the graph") from None
    return name


def _ancestors(graph: tf.Graph, roots: Sequence[str]) -> set[str]:
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        op = graph.get_operation_by_name(name)
        stack.extend(t.op.name for t in op.inputs)
        stack.extend(c.name for c in op.control_inputs)
    return seen


def _depends_on_placeholder(graph: tf.Graph, op_or_tensor) -> bool:
    name = op_or_tensor.op.name if isinstance(op_or_tensor, tf.Tensor) else op_or_tensor.name
    return any(graph.get_operation_by_name(a).type == "Placeholder" for a in _ancestors(graph, [name]))


def _topological_order(graph_def, nodes: Mapping[str, Any]) -> list[str]:
    """Kahn's algorithm; ties broken by creation order, so the order is the same in every process."""
    creation = {node.name: i for i, node in enumerate(graph_def.node) if node.name in nodes}
    consumers: dict[str, list[str]] = {name: [] for name in nodes}
    pending = {name: 0 for name in nodes}
    for name, node in nodes.items():
        for raw in node.input:
            producer = raw.lstrip("^").split(":")[0]
            if producer not in nodes or nodes[producer].op in _BACK_EDGE_SOURCES:
                continue
            consumers[producer].append(name)
            pending[name] += 1
    ready = [(creation[n], n) for n, count in pending.items() if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(name)
        for consumer in consumers[name]:
            pending[consumer] -= 1
            if pending[consumer] == 0:
                heapq.heappush(ready, (creation[consumer], consumer))
    if len(order) != len(nodes):
        stuck = sorted(n for n, c in pending.items() if c > 0)[:5]
        raise GraphBuildError(f"the graph has a cycle that is not a control-flow loop (involving {stuck})")
    return order


def _canonical_tensor(raw: str) -> str:
    return raw if ":" in raw else f"{raw}:0"


def _shape(tensor: tf.Tensor) -> tuple[int, ...] | None:
    if tensor.shape.rank is None:
        return None
    return tuple(-1 if d is None else int(d) for d in tensor.shape.as_list())


def _bytes(shape: tuple[int, ...] | None, dtype: tf.DType) -> int:
    if shape is None or any(d < 0 for d in shape) or dtype.base_dtype in (tf.resource, tf.variant, tf.string):
        return 0
    return int(np.prod(shape, dtype=np.int64)) * dtype.base_dtype.size


def _flops(graph: tf.Graph, node) -> int:
    # Some FLOP functions read attributes the op does not have (`transpose_a` of BatchMatMulV2); reading a
    # missing key of a protobuf map inserts an empty value, which would make the GraphDef unrunnable.
    scratch = type(node)()
    scratch.CopyFrom(node)
    node = scratch
    try:
        with deprecation.silence():  # the FLOP registry uses a TF1 shape helper that warns on every call
            stats = tf_ops.get_stats_for_node_def(graph, node, "flops")
    except (ValueError, TypeError, KeyError):
        return 0
    return int(stats.value or 0)


def _parameters(op: tf.Operation) -> int:
    if op.type not in _VARIABLE_OPS:
        return 0
    shape = tf.TensorShape(op.get_attr("shape"))
    if not shape.is_fully_defined():
        return 0
    return int(np.prod(shape.as_list(), dtype=np.int64))


def graph_from_tf_function(step_fn: Callable[..., Any], *args: Any, name: str = "tf_function_step") -> OpGraph:
    """Build from a TF2 training step (a tf.function or plain callable; Keras 3 models work this way).

    Nested function calls are inlined so every op is placeable; `While`/`If`, and calls TensorFlow compiles with
    XLA, stay single ops (see `placer.graph.tf_function`). Variables become graph variables initialized with their current values, or
    with values drawn alike where large (`placer.graph.tf_function.EXACT_INITIAL_VALUE_ELEMENTS`).
    """
    from placer.graph.tf_function import trace_tf_function_step

    step = trace_tf_function_step(step_fn, *args, name="step")
    return op_graph_from_tf_graph(step.graph, step.train_op, step.init_op, loss=step.loss, name=name)
