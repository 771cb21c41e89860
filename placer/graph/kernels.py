"""Which device types have a kernel for an op with given attributes, from TensorFlow's kernel registry."""

from __future__ import annotations

from functools import lru_cache

from tensorflow.core.framework import attr_value_pb2, node_def_pb2
from tensorflow.python.framework import kernels

# The device types placements target. "DEFAULT" kernels are registered for every device type.
PLACEABLE_DEVICE_TYPES = frozenset({"CPU", "GPU"})


@lru_cache(maxsize=None)
def _registered_kernels(op_type: str) -> tuple[tuple[str, tuple[tuple[str, frozenset[int]], ...]], ...]:
    result = []
    for kernel in kernels.get_registered_kernels_for_op(op_type).kernel:
        if kernel.device_type != "DEFAULT" and kernel.device_type not in PLACEABLE_DEVICE_TYPES:
            continue
        constraints = tuple(
            (c.name, frozenset(c.allowed_values.list.type)) for c in kernel.constraint
        )
        result.append((kernel.device_type, constraints))
    return tuple(result)


def _satisfies(attr: attr_value_pb2.AttrValue | None, allowed: frozenset[int]) -> bool:
    if attr is None:
        return True  # attribute left to its default: TensorFlow would resolve it; do not exclude
    if attr.HasField("type"):
        return attr.type in allowed
    if attr.HasField("list"):
        return all(t in allowed for t in attr.list.type)
    return True


def kernel_device_types(node: node_def_pb2.NodeDef, function_names: frozenset[str] = frozenset()) -> frozenset[str]:
    """Device types with a registered kernel matching this node's type constraints.

    Calls of library functions run wherever they are placed, so they count as supported everywhere.
    """
    if node.op in function_names:
        return PLACEABLE_DEVICE_TYPES
    devices: set[str] = set()
    for device_type, constraints in _registered_kernels(node.op):
        if all(_satisfies(node.attr.get(name), allowed) for name, allowed in constraints):
            devices |= PLACEABLE_DEVICE_TYPES if device_type == "DEFAULT" else {device_type}
    return frozenset(devices)
