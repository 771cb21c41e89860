"""The tensors of a training step that TensorFlow never sends between CPU devices: small constants.

Two of TensorFlow's passes act before a placed graph is partitioned. Grappler's constant folding computes
what needs no input from the step (constants, and shape arithmetic on statically known shapes: `Shape`,
`BroadcastGradientArgs`, the `StridedSlice` of a shape...) and puts the result in a `Const`. Then
`ReplicateConstantsPass` (TensorFlow >= 2.13; `replicate_constants_pass.cc`) gives every CPU device that
reads a constant of at most 16 elements its own copy, so no `_Send`/`_Recv` pair carries it. On the
Transformer at `tiny` placed by m-ETF over two CPUs, these were 2,797 of the simulator's 5,041 cut data
tensors, and TensorFlow's partitioned graphs received none of them (`experiments/probes/partition_transfers.py`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from placer.graph.opgraph import OpGraph, Shape

REPLICATED_MAX_ELEMENTS = 16
"""The largest constant, in elements, that TensorFlow copies to its readers' devices (`kMaxSize`)."""

SHAPE_OP_TYPES = frozenset({"Shape", "ShapeN", "Size", "Rank"})
"""Ops whose output constant folding knows from a fully defined input shape, whatever the input's value."""


def folded_ops(graph: OpGraph) -> frozenset[str]:
    """Step ops whose outputs grappler's constant folding computes before the step: constants, shape ops
    over fully defined shapes, and stateless ops all of whose data inputs are such ops."""
    from tensorflow.python.framework import op_def_registry

    folded: set[str] = set()
    for op in graph.step_ops:  # topological order: an op's producers are decided before it
        if op.type == "Const":
            folded.add(op.name)
            continue
        op_def = op_def_registry.get(op.type)
        if not op.data_inputs or op_def is None or op_def.is_stateful:
            continue
        if op.type in SHAPE_OP_TYPES:
            if all(_elements(_shape_of(graph, tensor)) is not None for tensor in op.data_inputs):
                folded.add(op.name)
        elif all(tensor.rsplit(":", 1)[0] in folded for tensor in op.data_inputs):
            folded.add(op.name)
    return frozenset(folded)


def replicated_tensors(graph: OpGraph, control_inputs: Mapping[str, tuple[str, ...]]) -> frozenset[str]:
    """Tensors ("op:port") that every CPU device reading them gets a copy of, so none is sent between CPUs:
    outputs of folded ops with at most `REPLICATED_MAX_ELEMENTS` elements, from ops that order no other op
    (TensorFlow leaves a constant with a control output alone).

    control_inputs: the control edges TensorFlow runs (`placer.graph.control.kept_control_inputs`).
    An output of unknown shape counts as small when every input of its op is: constant folding knows the
    value, and shape arithmetic on small vectors yields small vectors (`BroadcastGradientArgs`'s indices).
    TensorFlow also skips a constant read by one op only; after grappler merges equal constants, few are,
    so that rule is left out."""
    folded = folded_ops(graph)
    ordering = {source for sources in control_inputs.values() for source in sources}
    small: set[str] = set()
    for op in graph.step_ops:
        if op.name not in folded or op.name in ordering:
            continue
        inputs_small = all(tensor in small for tensor in op.data_inputs)
        for port, shape in enumerate(op.output_shapes):
            elements = _elements(shape)
            known_small = elements is not None and elements <= REPLICATED_MAX_ELEMENTS
            derived_small = elements is None and bool(op.data_inputs) and inputs_small
            if known_small or derived_small:
                small.add(f"{op.name}:{port}")
    return frozenset(small)


def _shape_of(graph: OpGraph, tensor: str) -> Shape:
    producer, port = tensor.rsplit(":", 1)
    shapes = graph.op(producer).output_shapes
    return shapes[int(port)] if int(port) < len(shapes) else None


def _elements(shape: Shape) -> int | None:
    if shape is None or any(size < 0 for size in shape):
        return None
    return int(np.prod(shape, dtype=np.int64)) if shape else 1
