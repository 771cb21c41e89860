"""Turn a TF2 `tf.function` training step into a standalone TF1 `tf.Graph` in which every op is its own node,
with real variables, an `init_op` and one `train_op` that runs the whole step in a `tf.compat.v1.Session`.

Nested calls (`PartitionedCall`, `StatefulPartitionedCall`, ops typed as a library function) are inlined
recursively by grappler's function optimizer, as `convert_variables_to_constants_v2` does. Body nodes become
`<call>/<node>`; `Func/<call>/input/_N` and `Func/<call>/output/_N` Identities and `input_control_node` /
`output_control_node` NoOps carry the call's data and control edges. Calls marked `_noinline` are inlined too.
A call TensorFlow compiles with XLA (`jit_compile=True`; Keras's TensorFlow backend marks its grouped
convolutions so on CPU) stays one op, which a Session compiles with XLA as TensorFlow does when it runs the step
itself: inlined, its ops would run as TensorFlow's kernels, and placer would time another step than the user's
(Keras RegNetX-200MF's: 20.9 ms inlined, 81.8 ms in `fit`, docs/results/keras-models.md).

Limit: functional control flow (`While`, `StatelessWhile`, `If`, `StatelessIf`, `Case`, `StatelessCase`) stays
one op each. Its bodies (and any calls inside them) stay in the graph's function library, so the graph still
runs, but their ops cannot be placed one by one.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import graph_pb2, node_def_pb2
from tensorflow.core.protobuf import config_pb2, meta_graph_pb2, rewriter_config_pb2
from tensorflow.python.framework import tensor_util
from tensorflow.python.grappler import tf_optimizer

from placer.errors import GraphBuildError
from placer.graph.control_flow import CALL_OPS, CONTROL_FLOW_OPS

_VALID_NODE_NAME = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_.\-/]*")

EXACT_INITIAL_VALUE_ELEMENTS = 1024
"""Up to this many elements a varied floating-point variable starts from its own values, stored in the GraphDef;
above, from values drawn with their mean and spread, between their least and greatest (a step's time does not
depend on the weights' values; the range is kept for ops that expect it, a square root's input). Stored values go
with the graph to every session and are held by every process that runs one: stored exactly, the variables and
Adam's slots of Keras InceptionResNetV2 made a 607 MB GraphDef, and one session on `local:2` grew its processes
by 10 GiB (2026-11-30)."""
EXACT_INTEGER_ELEMENTS = 1_000_000
"""Up to this many elements a varied integer variable starts from its own values (ids and counts may steer a
step); above, every element is the values' rounded mean."""

# Attributes that make grappler (or the runtime) keep a call instead of inlining it; we want every op placeable.
_NO_INLINE_ATTRS = ("_noinline", "_XlaMustCompile", "_XlaCompile", "_xla_compile_device_type", "api_implements")
_XLA_ATTRS = ("_XlaMustCompile", "_XlaCompile")

# Grappler would lower functional control flow to Switch/Merge; we switch that off while inlining and keep the
# original setting here so the Session lowers (or not) exactly as it would for the original function.
_LOWERING_ATTR = "_lower_using_switch_merge"
_SAVED_LOWERING_ATTR = "_placer_saved_lower_using_switch_merge"


class FunctionStepError(GraphBuildError, ValueError):
    """A tf.function training step that cannot be turned into a standalone graph."""


@dataclasses.dataclass(frozen=True)
class FunctionStepGraph:
    """A training step as a standalone TF1 graph, ready for `tf.compat.v1.Session`."""

    graph: tf.Graph
    """Standalone graph with no function-call ops and no devices set."""
    train_op: str
    """Name of the op to run once per training step."""
    init_op: str
    """Name of the op that initializes every variable."""
    loss: str | None
    """Tensor name of the step's first float scalar output, or None if it has none."""


def trace_tf_function_step(step_fn: Callable[..., Any], *args: Any, name: str = "step") -> FunctionStepGraph:
    """Trace `step_fn(*args)` and rebuild it as a standalone, fully inlined TF1 graph.

    `step_fn` is a `tf.function`, a concrete function, or a plain callable (wrapped in `tf.function`). `args` are
    baked into the graph as constants (or variables, if they are variables); usually there are none and the step
    makes its own synthetic batch. Variables may be created on the first trace. `name` names the train op; the
    init op and loss identity are `{name}_init` and `{name}/loss` (uniquified if the step uses those names).
    """
    if not _VALID_NODE_NAME.fullmatch(name):
        raise FunctionStepError(f"name {name!r} is not a valid TensorFlow op name; use letters, digits, _ . - /")
    concrete = _concrete_step(step_fn, args)
    func_graph = concrete.graph
    if not concrete.outputs and not func_graph.control_outputs:
        raise FunctionStepError(
            f"step {_describe(step_fn)} has no side effects and no outputs, so there is nothing to run; "
            "update variables in it or return the loss"
        )
    captures = _captured_values(concrete)

    graph_def = func_graph.as_graph_def()
    taken = {node.name for node in graph_def.node}
    loss_source = _loss_value(_first_float_scalar(concrete.outputs))
    loss_node = None
    if loss_source is not None:
        loss_node = _unique_name(f"{name}/loss", taken)
        graph_def.node.append(_identity_node(loss_node, loss_source))
    train_node = _unique_name(name, taken)
    train_deps = [op.name for op in func_graph.control_outputs] + [_loss_value(t).op.name for t in concrete.outputs]
    train_deps += [loss_node] if loss_node else []
    graph_def.node.append(_no_op_node(train_node, train_deps))

    graph_def = _inline_function_calls(graph_def, fetches=[train_node] + ([loss_node] if loss_node else []))
    variables = _replace_captures(graph_def, captures)
    _strip_devices(graph_def)
    _drop_dangling_colocation(graph_def)

    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
        init_op = _build_initializers(graph, variables, name=f"{name}_init")
    leftover = _function_call_ops(graph)
    if leftover:
        raise FunctionStepError(f"could not inline these function calls: {', '.join(leftover[:10])}")
    return FunctionStepGraph(
        graph=graph,
        train_op=train_node,
        init_op=init_op.name,
        loss=f"{loss_node}:0" if loss_node else None,
    )


def _inline_function_calls(graph_def: graph_pb2.GraphDef, fetches: Iterable[str]) -> graph_pb2.GraphDef:
    """Returns `graph_def` with every function call inlined, recursively, by grappler's function optimizer.

    `fetches` are node names that must survive unchanged. Functional control flow is kept as single ops.
    """
    graph_def = _copy(graph_def)
    if not graph_def.library.function:
        return graph_def
    _allow_inlining(graph_def)
    _hold_control_flow_functional(graph_def)

    meta_graph = meta_graph_pb2.MetaGraphDef()
    meta_graph.graph_def.CopyFrom(graph_def)
    # Grappler keeps the nodes named in the "train_op" collection (its fetch set) under their names.
    meta_graph.collection_def["train_op"].node_list.value.extend(fetches)
    config = config_pb2.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    rewrite.min_graph_nodes = -1
    rewrite.optimizers.append("function")
    rewrite.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    # Aggressive mode also inlines direct (TF1 Defun-style) calls whose side effects grappler cannot prove run;
    # TF2 functions mark side effects with control outputs, which the inliner honours.
    rewrite.function_optimization = rewriter_config_pb2.RewriterConfig.AGGRESSIVE
    inlined = tf_optimizer.OptimizeGraph(config, meta_graph, verbose=False)
    _restore_control_flow_lowering(inlined)
    return inlined


def _concrete_step(step_fn: Callable[..., Any], args: tuple[Any, ...]):
    if not callable(step_fn):
        raise FunctionStepError(
            f"step_fn must be a tf.function or a callable, got {type(step_fn).__name__}: {step_fn!r:.80}"
        )
    if isinstance(step_fn, tf.types.experimental.ConcreteFunction) and not args:
        return step_fn
    if isinstance(step_fn, tf.types.experimental.PolymorphicFunction) and not args:
        return step_fn.get_concrete_function()
    # Closing over the arguments turns them into captures, which become constants (or variables) below.
    return tf.function(lambda: step_fn(*args)).get_concrete_function()


@dataclasses.dataclass(frozen=True)
class _Capture:
    placeholder: str
    """Name of the function's placeholder node for this capture."""
    variable: tf.Variable | None
    """The captured variable, or None for a captured eager tensor."""
    value: np.ndarray
    """Current (eager) value of the variable or tensor."""


def _captured_values(concrete) -> list[_Capture]:
    """Pairs each capture placeholder of the function with the variable or eager value it stands for."""
    external = concrete.captured_inputs
    internal = concrete.inputs[len(concrete.inputs) - len(external) :]
    if len(internal) != len(concrete.inputs):
        raise FunctionStepError(
            f"step takes {len(concrete.inputs) - len(external)} input(s) that have no value; pass the arguments "
            "to trace_tf_function_step so they are baked into the graph"
        )
    variables_by_handle = {id(v.handle): v for v in concrete.graph.variables}
    captures = []
    for value, placeholder in zip(external, internal):
        node = placeholder.op.name
        if value.dtype == tf.resource:
            variable = variables_by_handle.get(id(value))
            if variable is None:
                raise FunctionStepError(
                    f"step captures resource {node!r} that is not a tf.Variable (a lookup table, iterator or "
                    "similar); create it inside the step or replace it with a variable or a tensor"
                )
            captures.append(_Capture(node, variable, variable.numpy()))
        elif value.dtype == tf.variant:
            raise FunctionStepError(f"step captures variant tensor {node!r} (a dataset or tensor list?), "
                                    "which cannot become a constant; build it inside the step")
        else:
            captures.append(_Capture(node, None, value.numpy()))
    return captures


def _replace_captures(graph_def: graph_pb2.GraphDef, captures: list[_Capture]) -> dict[str, _Capture]:
    """Turns capture placeholders into constants and variable handles; returns {handle node name: capture}."""
    nodes = {node.name: node for node in graph_def.node}
    taken = set(nodes)
    renames, variables = {}, {}
    for capture in captures:
        node = nodes.get(capture.placeholder)
        if node is None:  # unused capture, pruned away
            continue
        attrs = {k: v for k, v in node.attr.items() if k == "_class"}
        node.ClearField("attr")
        node.ClearField("input")
        for key, value in attrs.items():
            node.attr[key].CopyFrom(value)
        if capture.variable is None:
            node.op = "Const"
            node.attr["dtype"].type = tf.as_dtype(capture.value.dtype).as_datatype_enum
            node.attr["value"].tensor.CopyFrom(tensor_util.make_tensor_proto(capture.value))
            continue
        variable = capture.variable
        taken.discard(node.name)
        new_name = _unique_name(_node_name(variable.name), taken)
        if new_name != node.name:
            renames[node.name] = new_name
            node.name = new_name
        node.op = "VarHandleOp"
        node.attr["dtype"].type = variable.dtype.base_dtype.as_datatype_enum
        node.attr["shape"].shape.CopyFrom(variable.shape.as_proto())
        # TF1 convention: the handle's node name is its shared name, unique within the graph.
        node.attr["shared_name"].s = new_name.encode()
        node.attr["container"].s = b""
        variables[new_name] = capture
    if renames:
        _rename_inputs(graph_def, renames)
    return variables


def _build_initializers(graph: tf.Graph, variables: dict[str, _Capture], name: str) -> tf.Operation:
    assigns = []
    for index, (node_name, capture) in enumerate(sorted(variables.items())):
        handle = graph.get_tensor_by_name(f"{node_name}:0")
        # The initial value is made where its variable lives, as part of the variable's unit: it runs once,
        # and as units of their own the ops that draw it would outnumber the variables several times.
        with tf.name_scope(f"{node_name}/"), graph.colocate_with(handle.op):
            with tf.name_scope("Initializer"):
                value = _initial_value(capture.value, capture.variable.dtype.base_dtype, seed=index)
            assigns.append(tf.raw_ops.AssignVariableOp(resource=handle, value=value, name="Assign"))
    with tf.name_scope(name) as scope, tf.control_dependencies(assigns):
        return tf.no_op(name=scope)


def _initial_value(value: np.ndarray, dtype: tf.DType, seed: int) -> tf.Tensor:
    """The tensor a variable of these values starts from: exactly its values where they are one value repeated
    (zeros, ones: Adam's slots, a norm's scale) or few, else drawn to keep the GraphDef small."""
    numeric = dtype.is_floating or dtype.is_integer or dtype.is_bool
    if numeric and value.size > 1 and np.all(value == value.flat[0]):
        return tf.fill(value.shape, tf.constant(value.flat[0], dtype=dtype), name="initial_value")
    if dtype.is_floating and value.size > EXACT_INITIAL_VALUE_ELEMENTS:
        mean, std = float(np.mean(value, dtype=np.float64)), float(np.std(value, dtype=np.float64))
        drawn = tf.random.stateless_normal(value.shape, seed=[seed, 0], mean=mean, stddev=std, dtype=tf.float32)
        drawn = tf.clip_by_value(drawn, float(np.min(value)), float(np.max(value)))
        return tf.cast(drawn, dtype, name="initial_value")
    if dtype.is_integer and value.size > EXACT_INTEGER_ELEMENTS:
        return tf.fill(value.shape, tf.cast(round(float(np.mean(value, dtype=np.float64))), dtype),
                       name="initial_value")
    return tf.constant(value, dtype=dtype, name="initial_value")


def _allow_inlining(graph_def: graph_pb2.GraphDef) -> None:
    """Takes off what keeps calls from being inlined, except from the functions TensorFlow compiles with XLA and
    the calls to them: those stay one op each (grappler does not inline what XLA compiles)."""
    compiled = xla_compiled_functions(graph_def)
    for function in graph_def.library.function:
        if function.signature.name not in compiled:
            for key in _NO_INLINE_ATTRS:
                function.attr.pop(key, None)
        for node in function.node_def:
            if not _calls(node, compiled):
                for key in _NO_INLINE_ATTRS:
                    node.attr.pop(key, None)
    for node in graph_def.node:
        if not _calls(node, compiled):
            for key in _NO_INLINE_ATTRS:
                node.attr.pop(key, None)


def xla_compiled_functions(graph_def: graph_pb2.GraphDef) -> set[str]:
    """The functions of `graph_def`'s library that TensorFlow compiles with XLA: marked so themselves, or called by
    a node marked so."""
    compiled = {function.signature.name for function in graph_def.library.function
                if any(function.attr[key].b for key in _XLA_ATTRS if key in function.attr)}
    compiled |= {_called(node) for node in _all_nodes(graph_def)
                 if any(node.attr[key].b for key in _XLA_ATTRS if key in node.attr)}
    return compiled


def _called(node: node_def_pb2.NodeDef) -> str:
    """The function a call node calls: its `f` attribute, or its type where the node is typed as the function."""
    return node.attr["f"].func.name if "f" in node.attr else node.op


def _calls(node: node_def_pb2.NodeDef, functions: set[str]) -> bool:
    return (node.op in CALL_OPS or node.op in functions) and _called(node) in functions


def _hold_control_flow_functional(graph_def: graph_pb2.GraphDef) -> None:
    for node in _all_nodes(graph_def):
        if node.op in CONTROL_FLOW_OPS:
            if _LOWERING_ATTR in node.attr:
                node.attr[_SAVED_LOWERING_ATTR].CopyFrom(node.attr[_LOWERING_ATTR])
            node.attr[_LOWERING_ATTR].b = False


def _restore_control_flow_lowering(graph_def: graph_pb2.GraphDef) -> None:
    for node in _all_nodes(graph_def):
        if node.op not in CONTROL_FLOW_OPS:
            continue
        if _SAVED_LOWERING_ATTR in node.attr:
            node.attr[_LOWERING_ATTR].CopyFrom(node.attr[_SAVED_LOWERING_ATTR])
            del node.attr[_SAVED_LOWERING_ATTR]
        else:
            node.attr.pop(_LOWERING_ATTR, None)


def _strip_devices(graph_def: graph_pb2.GraphDef) -> None:
    for node in _all_nodes(graph_def):
        node.device = ""


def _drop_dangling_colocation(graph_def: graph_pb2.GraphDef) -> None:
    """Removes `loc:@node` colocation entries naming nodes that inlining renamed or removed."""
    names = {node.name for node in graph_def.node}
    for node in graph_def.node:
        if "_class" not in node.attr:
            continue
        groups = node.attr["_class"].list.s
        kept = [g for g in groups if not g.startswith(b"loc:@") or g[len(b"loc:@") :].decode() in names]
        if len(kept) == len(groups):
            continue
        if kept:
            del groups[:]
            groups.extend(kept)
        else:
            del node.attr["_class"]


def _rename_inputs(graph_def: graph_pb2.GraphDef, renames: dict[str, str]) -> None:
    for node in graph_def.node:
        for i, source in enumerate(node.input):
            control = source.startswith("^")
            base, _, port = source.lstrip("^").partition(":")
            if base in renames:
                node.input[i] = ("^" if control else "") + renames[base] + (f":{port}" if port else "")
        if "_class" in node.attr:
            groups = node.attr["_class"].list.s
            for i, group in enumerate(groups):
                target = group[len(b"loc:@") :].decode() if group.startswith(b"loc:@") else None
                if target in renames:
                    groups[i] = f"loc:@{renames[target]}".encode()


def _function_call_ops(graph: tf.Graph) -> list[str]:
    """Names of the ops in `graph` that call a function, other than functional control flow and the calls
    TensorFlow compiles with XLA (kept as one op each)."""
    graph_def = graph.as_graph_def()
    compiled = xla_compiled_functions(graph_def)
    call_types = CALL_OPS | {f.signature.name for f in graph_def.library.function}
    return sorted(node.name for node in graph_def.node if node.op in call_types and not _calls(node, compiled))


def _first_float_scalar(outputs: Iterable[tf.Tensor]) -> tf.Tensor | None:
    return next((t for t in outputs if t.dtype.is_floating and t.shape.rank == 0), None)


def _loss_value(output: tf.Tensor | None) -> tf.Tensor | None:
    """An output of the step (the loss) before the Identity ops with which tf.function makes its outputs wait
    for every side effect (the optimizer's updates): read past them, the loss is what the forward computes,
    and the update runs after it (the train op waits for both), not before it."""
    while output is not None and output.op.type == "Identity" and output.op.control_inputs:
        output = output.op.inputs[0]
    return output


def _identity_node(name: str, source: tf.Tensor) -> node_def_pb2.NodeDef:
    node = node_def_pb2.NodeDef(name=name, op="Identity", input=[source.name])
    node.attr["T"].type = source.dtype.as_datatype_enum
    return node


def _no_op_node(name: str, control_inputs: Iterable[str]) -> node_def_pb2.NodeDef:
    return node_def_pb2.NodeDef(name=name, op="NoOp", input=[f"^{n}" for n in dict.fromkeys(control_inputs)])


def _node_name(variable_name: str) -> str:
    """A valid graph node name for a variable called `variable_name` (eager names may contain anything)."""
    name = re.sub(r"[^A-Za-z0-9_.\-/]", "_", variable_name.rpartition(":")[0] or variable_name).strip("/")
    name = re.sub(r"/+", "/", name)
    return name if _VALID_NODE_NAME.fullmatch(name) else f"Variable{name}"


def _unique_name(base: str, taken: set[str]) -> str:
    name, suffix = base, 1
    while name in taken:
        name = f"{base}_{suffix}"
        suffix += 1
    taken.add(name)
    return name


def _all_nodes(graph_def: graph_pb2.GraphDef) -> Iterable[node_def_pb2.NodeDef]:
    yield from graph_def.node
    for function in graph_def.library.function:
        yield from function.node_def


def _copy(graph_def: graph_pb2.GraphDef) -> graph_pb2.GraphDef:
    copy = graph_pb2.GraphDef()
    copy.CopyFrom(graph_def)
    return copy


def _describe(step_fn: Callable[..., Any]) -> str:
    return repr(getattr(step_fn, "__name__", None) or getattr(step_fn, "name", None) or type(step_fn).__name__)
