"""The training step of a user's compiled `keras.Model` (Keras 3 or tf-keras): the model's own `train_step` (its
loss, optimizer and metrics, as `model.fit` runs them) on a synthetic batch of its input shapes, as an OpGraph.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from placer.errors import GraphBuildError
from placer.graph.opgraph import TracedBatch

if TYPE_CHECKING:  # importing the builders needs TensorFlow; recognising a Keras model must not
    from placer.graph.opgraph import OpGraph

DEFAULT_BATCH_SIZE = 32
"""The batch `model.fit` uses when it is given none; used unless the model's inputs fix a batch dimension."""

# Integer inputs (token or class ids) are drawn from [0, 1): id 0 is valid for any embedding or lookup, and an
# op's cost does not depend on which ids it gathers.
_INTEGER_INPUT_MAXVAL = 1

_KERAS_PACKAGES = ("keras.", "tf_keras.")


def is_keras_model(value: Any) -> bool:
    """True for a Keras 3 or tf-keras `Model`; imports neither (a model can only exist once its package has)."""
    if "keras" in sys.modules:
        import keras

        if isinstance(value, keras.Model):
            return True
    if "tf_keras" in sys.modules:
        import tf_keras

        if isinstance(value, tf_keras.Model):
            return True
    return False


def graph_from_keras_model(
    model: Any,
    *,
    batch_size: int | None = None,
    inputs: Any = None,
    targets: Any = None,
    name: str | None = None,
    unroll_loops: bool = False,
) -> OpGraph:
    """The training step of a compiled Keras 3 or tf-keras `model`: its own `train_step` on a synthetic batch.

    batch_size: examples per step (default: the batch dimension the model's inputs fix, else 32, as `fit`).
    inputs, targets: `SyntheticTensor`s (a list for several inputs or outputs) replacing the batch derived from
    the model's input and output shapes: for a model without static input shapes, or to draw integer targets
    from another range. name: the graph's name (default: the model's). unroll_loops: trace every recurrent layer
    (`keras.layers.RNN` and its subclasses, inside `Bidirectional` too) unrolled, one set of ops per time step,
    instead of as a functional loop that is placed as one unit (`placer.graph.control_flow`), at the sequence
    length of the synthetic batch.
    Refused before anything is traced: a model that is not compiled, or has no input shapes and no `inputs`.
    """
    from placer.graph.build import SyntheticTensor, graph_from_tf_function

    if not is_keras_model(model):
        raise GraphBuildError(f"expected a keras.Model (Keras 3 or tf-keras), got a {type(model).__name__}")
    if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1):
        raise GraphBuildError(f"batch_size must be a positive whole number, got {batch_size!r}")
    problems = []
    if not _is_compiled(model):
        problems.append("it is not compiled: compile the model (model.compile(optimizer=..., loss=...)) or return "
                        "an OpGraph")
    elif getattr(model, "loss", None) is None and not _overrides(model, "train_step", "compute_loss"):
        problems.append("it was compiled without a loss: give model.compile a loss (loss=...)")
    input_tensors = None if inputs is not None else _symbolic_tensors(model, "inputs")
    if inputs is None and not input_tensors:
        problems.append("it has no input shapes: start it with keras.Input(shape=...) (or give the first layer "
                        "input_shape=...), call model.build(input_shape), or pass inputs=SyntheticTensor(...)")
    if problems:
        raise GraphBuildError(f"cannot derive the training step of Keras model {model.name!r}: "
                              + "; and ".join(problems))
    traced = _traced_batch(model, input_tensors, batch_size)
    batch = traced.size
    input_specs = _as_list(inputs) if inputs is not None else [
        _synthetic(tensor, batch, f"input {i}", integer_maxval=_INTEGER_INPUT_MAXVAL)
        for i, tensor in enumerate(input_tensors)
    ]
    target_specs = _as_list(targets) if targets is not None else _synthetic_targets(model, batch)
    for spec in input_specs + target_specs:
        if not isinstance(spec, SyntheticTensor):
            raise GraphBuildError(f"inputs and targets are SyntheticTensors (or lists of them), got {spec!r:.80}")

    optimizer = model.optimizer
    if not getattr(optimizer, "built", True) and model.built:
        # With its slot variables made before tracing, the step is traced once; left to train_step, they are made
        # during the first trace and tf.function traces the step again.
        optimizer.build(model.trainable_variables)

    def train_step():
        x = _structured(model, "_inputs_struct",
                        [spec.make(f"synthetic_input_{i}") for i, spec in enumerate(input_specs)])
        y = _structured(model, "_outputs_struct",
                        [spec.make(f"synthetic_target_{i}") for i, spec in enumerate(target_specs)])
        logs = model.train_step((x, y))
        # train_step returns the metrics' running values, a dict; its "loss" is what the graph names as the loss
        return logs["loss"] if isinstance(logs, Mapping) and "loss" in logs else logs

    with _recurrent_layers_unrolled(model, unroll_loops):
        graph = graph_from_tf_function(train_step, name=name or model.name)
    if unroll_loops:
        _check_unrolled(graph)
    if inputs is not None and input_specs[0].shape:  # the caller's SyntheticTensors set the batch
        traced = TracedBatch(input_specs[0].shape[0], "caller")
    return dataclasses.replace(graph, batch=traced, model_parameters=model.count_params())


def _check_unrolled(graph: OpGraph) -> None:
    """Refuse loops that unrolling the recurrent layers left: a placement would still see each as one unit."""
    from placer.graph.control_flow import LOOP_OPS

    loops = sorted(op.name for op in graph.step_ops if op.type in LOOP_OPS)
    left = [name for name in loops if "_grad" not in name] or loops  # a forward loop's gradient loop goes with it
    if left:
        raise GraphBuildError(
            f"unroll_loops unrolls Keras recurrent layers (their sequence length is fixed by the traced batch), but "
            f"the step still has {len(left)} loop{'s' if len(left) > 1 else ''} that {'are' if len(left) > 1 else 'is'} "
            f"not one: {', '.join(left[:5])}{' ...' if len(left) > 5 else ''}. A loop whose trip count depends on the "
            "data cannot be unrolled: leave unroll_loops off and it is placed as one unit; a loop of a fixed count "
            "unrolls when written as a Python for over a range")


@contextmanager
def _recurrent_layers_unrolled(model, unroll: bool) -> Iterator[None]:
    """With `unroll`, every recurrent layer of `model` traces unrolled inside the block; each keeps its own setting
    afterwards. The step is traced on synthetic tensors of fixed shapes, so every sequence length is known."""
    layers = [layer for layer in _all_layers(model) if hasattr(layer, "unroll") and hasattr(layer, "cell")] if unroll else []
    before = [layer.unroll for layer in layers]
    for layer in layers:
        layer.unroll = True
    try:
        yield
    finally:
        for layer, setting in zip(layers, before):
            layer.unroll = setting


def _all_layers(model) -> list:
    """Every layer inside `model`, nested ones and a Bidirectional's two directions included."""
    found, pending, seen = [], list(getattr(model, "layers", [])), set()
    while pending:
        layer = pending.pop()
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        found.append(layer)
        pending += list(getattr(layer, "layers", None) or [])
        pending += [inner for attribute in ("forward_layer", "backward_layer", "layer")
                    if (inner := getattr(layer, attribute, None)) is not None and hasattr(inner, "name")]
    return found


@contextmanager
def keras_names_from_zero() -> Iterator[None]:
    """Keras names layers from process-wide counters (`dense`, `dense_1`, ...), so a model's op names depend on
    what was built before it. Inside this block they count from zero, so the same model function builds the
    same op names, and graph fingerprint, every time; afterwards each counter is the larger of the two, so
    later names stay unique. Covers Keras 3 and tf-keras's eager models."""
    restores = []
    if "keras" in sys.modules:
        restores.append(_fresh_keras3_names())
    if "tf_keras" in sys.modules:
        restores.append(_fresh_tf_keras_names())
    try:
        yield
    finally:
        for restore in restores:
            restore()


def _fresh_keras3_names():
    from keras.src.backend.common import global_state

    attribute = "object_name_uids"  # keras.src.utils.naming's counters
    before = global_state.get_global_attribute(attribute)
    global_state.set_global_attribute(attribute, None)

    def restore():
        during = global_state.get_global_attribute(attribute)
        global_state.set_global_attribute(attribute, _larger_counts(before, during))

    return restore


def _fresh_tf_keras_names():
    import tensorflow as tf
    from tf_keras.src import backend

    # Layer names count in the default graph, other uids in the eager models' own graph; a model built inside a
    # tf.Graph counts in that graph and is unaffected.
    graphs = list({id(g): g for g in (tf.compat.v1.get_default_graph(), backend.get_graph())}.values())
    before = [backend.PER_GRAPH_OBJECT_NAME_UIDS.pop(graph, None) for graph in graphs]

    def restore():
        for graph, counts in zip(graphs, before):
            merged = _larger_counts(counts, backend.PER_GRAPH_OBJECT_NAME_UIDS.get(graph))
            if merged is not None:
                backend.PER_GRAPH_OBJECT_NAME_UIDS[graph] = merged

    return restore


def _larger_counts(before, during):
    if before is None or during is None:
        return during if before is None else before
    for key, count in during.items():
        before[key] = max(before[key], count)
    return before


# -- what the model says about itself ---------------------------------------------------------------------


def _is_compiled(model) -> bool:
    # Keras 3 says `compiled`; tf-keras keeps it private. Both set the optimizer on compile.
    compiled = getattr(model, "compiled", getattr(model, "_is_compiled", False))
    return bool(compiled) and getattr(model, "optimizer", None) is not None


def _overrides(model, *methods: str) -> bool:
    """True if a class of the model's own (not Keras's) defines one of `methods`."""
    return any(method in vars(cls) for cls in type(model).__mro__
               if not cls.__module__.startswith(_KERAS_PACKAGES) and cls is not object for method in methods)


def _symbolic_tensors(model, which: str) -> list:
    try:
        tensors = getattr(model, which)
    except (AttributeError, ValueError):  # subclassed models have no symbolic inputs; some raise when asked
        return []
    if tensors is None:
        return []
    return list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]


def _traced_batch(model, input_tensors: list | None, batch_size: int | None) -> TracedBatch:
    fixed = {tensor.shape[0] for tensor in input_tensors or [] if len(tensor.shape) and tensor.shape[0] is not None}
    if len(fixed) > 1:
        raise GraphBuildError(f"the inputs of Keras model {model.name!r} fix different batch sizes {sorted(fixed)}")
    if fixed and batch_size is not None and batch_size not in fixed:
        raise GraphBuildError(f"batch_size {batch_size} differs from the batch size {fixed.pop()} that the inputs of "
                              f"Keras model {model.name!r} fix: leave batch_size out, or build the model without one")
    if batch_size is not None:
        return TracedBatch(batch_size, "caller")
    return TracedBatch(fixed.pop(), "model") if fixed else TracedBatch(DEFAULT_BATCH_SIZE, "default")


def _synthetic(tensor, batch: int, what: str, integer_maxval: int):
    from placer.graph.build import SyntheticTensor

    shape = tuple(tensor.shape)[1:]
    if any(d is None for d in shape):
        raise GraphBuildError(f"{what} of the Keras model has shape {tuple(tensor.shape)} with an unknown dimension "
                              "beyond the batch: pass SyntheticTensors of the shapes to train on (inputs=, targets=)")
    dtype = _dtype_name(tensor.dtype)
    return SyntheticTensor((batch, *shape), dtype, maxval=integer_maxval if _is_integer(dtype) else None)


def _synthetic_targets(model, batch: int) -> list:
    """A target per output, shaped for that output's loss: class ids for a sparse loss, else the output's shape."""
    from placer.graph.build import SyntheticTensor

    outputs = _symbolic_tensors(model, "outputs")
    if not outputs:
        raise GraphBuildError(f"Keras model {model.name!r} has no symbolic outputs to shape targets from: pass "
                              "targets=SyntheticTensor(...)")
    targets = []
    for index, (output, names) in enumerate(zip(outputs, _output_names(model, len(outputs)))):
        spec = _synthetic(output, batch, f"output {index}", integer_maxval=2)
        if _is_sparse_loss(_loss_of_output(model.loss, index, names)):
            classes = spec.shape[-1]
            spec = SyntheticTensor(spec.shape[:-1], "int32", maxval=classes)
        targets.append(spec)
    return targets


def _output_names(model, count: int) -> list[tuple[str, ...]]:
    """The names a loss dict may key each output by: its key in a dict of outputs, and its layer's name."""
    keys: list[Any] = [None] * count
    structure = getattr(model, "_outputs_struct", None)  # Keras 3 functional models only
    if isinstance(structure, Mapping):
        from keras import tree

        paths = [path for path, _ in tree.flatten_with_path(structure)]
        if len(paths) == count:
            keys = [path[-1] if path else None for path in paths]
    layer_names = list(getattr(model, "output_names", None) or [None] * count)
    return [tuple(str(n) for n in (key, layer) if n is not None) for key, layer in zip(keys, layer_names)]


def _loss_of_output(loss, index: int, names: tuple[str, ...]):
    if isinstance(loss, Mapping):
        return next((loss[name] for name in names if name in loss), None)
    if isinstance(loss, Sequence) and not isinstance(loss, str):
        return loss[index] if index < len(loss) else None
    return loss


def _is_sparse_loss(loss) -> bool:
    """Sparse losses take class ids, not one value per output unit (by the name Keras gives the loss)."""
    if loss is None:
        return False
    names = [loss] if isinstance(loss, str) else [getattr(loss, "name", ""), getattr(loss, "__name__", ""),
                                                  type(loss).__name__, getattr(getattr(loss, "fn", None), "__name__", "")]
    return any("sparse" in str(n).lower() for n in names)


def _dtype_name(dtype) -> str:
    return dtype if isinstance(dtype, str) else getattr(dtype, "name", str(dtype))


def _is_integer(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def _as_list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _structured(model, structure_attribute: str, tensors: list):
    """`tensors` (in the order of `model.inputs` or `model.outputs`) in the structure a Keras 3 functional model
    was built on (a dict of named inputs, say), so it takes them without a structure warning; else one or a list."""
    structure = getattr(model, structure_attribute, None)  # Keras 3 functional models only
    if structure is not None:
        from keras import tree

        if len(tree.flatten(structure)) == len(tensors):
            return tree.pack_sequence_as(structure, tensors)
    return tensors[0] if len(tensors) == 1 else tensors
