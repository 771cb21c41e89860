"""Block templates of the placement shapes Tessel studies, on modeled devices "dev0".."devN-1" with unit spans.

Forward blocks take 1 time unit and keep 1 memory unit; backward blocks take `backward_span` (2 by default:
a backward costs about two forwards) and free it. Blocks on every device (the M, N and K shapes) stand for
tensor-parallel layers. Tessel's own code calls the plain pipeline `vshape`; here "v-shape" is the folded
V (stages go down the devices and back up, two stages per device), and "pipeline" is the plain one.
"""

from __future__ import annotations

from typing import Callable

from placer.errors import BlockTemplateError
from placer.schedule.blocks import BACKWARD, FORWARD, BlockSpec, BlockTemplate


def device_names(count: int) -> tuple[str, ...]:
    return tuple(f"dev{i}" for i in range(count))


def pipeline(devices: int, backward_span: int = 2) -> BlockTemplate:
    """Stage i on device i: forwards go down the devices, backwards come back up (1F1B's home ground)."""
    return _chain_template("pipeline", devices, [[d] for d in range(devices)], backward_span)


def v_shape(devices: int, backward_span: int = 2) -> BlockTemplate:
    """2N stages folded into a V: stage i on device i, stage 2N-1-i on device i too (each device holds two)."""
    order = list(range(devices)) + list(reversed(range(devices)))
    return _chain_template("v-shape", devices, [[d] for d in order], backward_span)


def x_shape(devices: int, backward_span: int = 2) -> BlockTemplate:
    """Two pipelines per micro-batch in opposite directions (down and up the devices), as Chimera pairs them."""
    names = device_names(devices)
    down = _chain("down_", [[names[d]] for d in range(devices)], backward_span)
    up = _chain("up_", [[names[d]] for d in reversed(range(devices))], backward_span)
    return BlockTemplate("x-shape", names, tuple(down + up))


def m_shape(devices: int, backward_span: int = 2) -> BlockTemplate:
    """A tensor-parallel block on every device (e.g. an embedding) before a pipeline, its backward after."""
    everywhere = list(range(devices))
    return _chain_template("m-shape", devices, [everywhere] + [[d] for d in range(devices)], backward_span,
                           shared={0})


def n_shape(devices: int, backward_span: int = 2) -> BlockTemplate:
    """A pipeline with two tensor-parallel blocks on every device: one first, one halfway down."""
    _need_even(devices, "n-shape")
    everywhere = list(range(devices))
    stages = [everywhere] + [[d] for d in range(devices // 2)] + [everywhere] + [[d] for d in range(devices // 2, devices)]
    return _chain_template("n-shape", devices, stages, backward_span, shared={0, devices // 2 + 1})


def k_shape(devices: int, backward_span: int = 2) -> BlockTemplate:
    """Two pipelines on half the devices each, joined by a tensor-parallel block on all devices (e.g. a loss
    over two towers): each branch's backward waits for the joint block's backward."""
    _need_even(devices, "k-shape")
    names = device_names(devices)
    half = devices // 2
    blocks = []
    for branch, members in (("a", range(half)), ("b", range(half, devices))):
        for position, d in enumerate(members):
            after = (f"{branch}_f{position - 1}",) if position else ()
            blocks.append(BlockSpec(f"{branch}_f{position}", FORWARD, 1, 1, (names[d],), after))
    blocks.append(BlockSpec("join_f", FORWARD, 1, 1, names, (f"a_f{half - 1}", f"b_f{half - 1}")))
    blocks.append(BlockSpec("join_b", BACKWARD, 1, -1, names, ("join_f",)))
    for branch, members in (("a", range(half)), ("b", range(half, devices))):
        for position in reversed(range(half)):
            after = (f"{branch}_b{position + 1}",) if position < half - 1 else ("join_b",)
            blocks.append(BlockSpec(f"{branch}_b{position}", BACKWARD, backward_span, -1, (names[members[position]],), after))
    return BlockTemplate("k-shape", names, tuple(blocks))


SHAPES: dict[str, Callable[..., BlockTemplate]] = {
    "pipeline": pipeline, "v-shape": v_shape, "x-shape": x_shape, "m-shape": m_shape, "n-shape": n_shape,
    "k-shape": k_shape,
}


def shape_template(name: str, devices: int, backward_span: int = 2) -> BlockTemplate:
    """The template of a named shape on `devices` modeled devices."""
    if name not in SHAPES:
        raise BlockTemplateError(f"unknown shape {name!r}; known shapes: {', '.join(SHAPES)}")
    if devices < 1:
        raise BlockTemplateError(f"a shape needs at least one device, got {devices}")
    return SHAPES[name](devices, backward_span)


def _chain_template(name: str, devices: int, stages: list[list[int]], backward_span: int,
                    shared: set[int] = frozenset()) -> BlockTemplate:
    names = device_names(devices)
    return BlockTemplate(name, names, tuple(_chain("", [[names[d] for d in s] for s in stages], backward_span, shared)))


def _chain(prefix: str, stages: list[list[str]], backward_span: int, shared: set[int] = frozenset()) -> list[BlockSpec]:
    """Forward blocks through `stages` in order, then backward blocks in reverse. A stage in `shared`
    (tensor-parallel over several devices) keeps no activations and takes one unit both ways, as in Tessel's
    M and N shapes."""
    forwards, backwards = [], []
    for i, devices in enumerate(stages):
        memory = 0 if i in shared else 1
        after = (f"{prefix}f{i - 1}",) if i else ()
        forwards.append(BlockSpec(f"{prefix}f{i}", FORWARD, 1, memory, tuple(devices), after))
    last = len(stages) - 1
    for i in reversed(range(len(stages))):
        after = (f"{prefix}b{i + 1}",) if i < last else (f"{prefix}f{last}",)
        span, memory = (1, 0) if i in shared else (backward_span, -1)
        backwards.append(BlockSpec(f"{prefix}b{i}", BACKWARD, span, memory, tuple(stages[i]), after))
    return forwards + backwards


def _need_even(devices: int, shape: str) -> None:
    if devices < 2 or devices % 2:
        raise BlockTemplateError(f"{shape} splits the devices in two halves: give an even number, at least 2 (got {devices})")
