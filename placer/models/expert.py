"""Human-expert placements of the benchmark models: each model's stages (scopes) on devices.

Experts in the papers placed whole model parts (an LSTM layer, the attention, the softmax) on devices
and let TensorFlow put the rest (gradients, optimizer updates) next to them. Here every op gets the part
("stage") of its scope, or of its nearest producer when its scope names none (gradient accumulation,
input slicing), and every colocation group goes where most of its ops' stages go.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Mapping, Sequence

from placer.devices import DeviceSet
from placer.errors import PlacementError
from placer.graph.opgraph import OpGraph
from placer.placement import Placement

StageOf = Callable[[str], "str | None"]


def compute_devices(devices: DeviceSet) -> list[int]:
    """The devices experts spread a model over: the GPUs when there are any, else every device."""
    gpus = [i for i, d in enumerate(devices) if d.kind == "GPU"]
    return gpus or list(range(len(devices)))


def spread(count: int, over: Sequence[int]) -> list[int]:
    """Contiguous blocks: item i of `count` goes to device over[i * len(over) // count]."""
    return [over[i * len(over) // count] for i in range(count)]


def op_stages(graph: OpGraph, stage_of: StageOf) -> dict[str, str | None]:
    """The stage of every op: its own scope's, else its nearest producer's, else its nearest consumer's."""
    stages = {op.name: stage_of(op.name) for op in graph.ops}
    for op in graph.ops:  # topological order: producers first
        if stages[op.name] is None:
            stages[op.name] = next(
                (stages[src] for src in op.producers if stages.get(src) is not None), None
            )
    consumers: dict[str, list[str]] = {}
    for op in graph.ops:
        for src in op.producers:
            consumers.setdefault(src, []).append(op.name)
    for op in reversed(graph.ops):
        if stages[op.name] is None:
            stages[op.name] = next(
                (stages[dst] for dst in consumers.get(op.name, ()) if stages[dst] is not None), None
            )
    return stages


def placement_by_stage(
    graph: OpGraph,
    devices: DeviceSet,
    stage_of: StageOf,
    stage_devices: Mapping[str, int],
    *,
    method: str = "expert",
) -> Placement:
    """Place each colocation group on the device of its ops' most common stage.

    Stages missing from `stage_devices` (and groups with no stage) go to the first compute device, where
    TensorFlow's default placement would put them. A group with no kernel on its device (an op with
    only a CPU kernel next to GPU layers) goes to the first device that has one, as soft placement would
    move it; the placement's metadata counts these.
    """
    stages = op_stages(graph, stage_of)
    default = compute_devices(devices)[0]
    assignment = []
    moved_to_host = 0
    for group in graph.groups:
        votes = Counter(stages[name] for name in group.ops if stages[name] is not None)
        stage = votes.most_common(1)[0][0] if votes else None
        device = stage_devices.get(stage, default) if stage is not None else default
        if devices[device].kind not in group.kernel_devices:
            device = first_device_with_kernel(group, devices)
            moved_to_host += 1
        assignment.append(device)
    return Placement.from_assignment(
        graph, devices, assignment, {"method": method, "groups_without_kernel_on_their_stage_device": moved_to_host}
    )


def balanced_stage_placement(graph: OpGraph, devices: DeviceSet, stage_of: StageOf, order: Sequence[str],
                             op_seconds: Mapping[str, float]) -> Placement:
    """A stage per compute device, as a pipeline splits a stack of layers, cut where the stages' compute is most
    even: `order`'s stages (the model's layers, first to last) in contiguous runs, one per device in order,
    the slowest run as short as it can be. `op_seconds`: each op's compute seconds on a compute device.

    An expert counts layers (the same number per device), so the stage that also holds a language model's head
    paces every micro-batch of a pipeline; this split weighs each layer by its ops' seconds, forward, backward
    and update alike."""
    stages = op_stages(graph, stage_of)
    stage_seconds = dict.fromkeys(order, 0.0)
    for name, stage in stages.items():
        if stage in stage_seconds:
            stage_seconds[stage] += op_seconds.get(name, 0.0)
    compute = compute_devices(devices)
    runs = contiguous_split([stage_seconds[stage] for stage in order], len(compute))
    return placement_by_stage(graph, devices, stages.get,
                              {stage: compute[run] for stage, run in zip(order, runs)}, method="balanced-stages")


def contiguous_split(costs: Sequence[float], parts: int) -> list[int]:
    """The run (0 .. parts - 1) of each item when `costs` are cut into `parts` contiguous runs whose largest
    sum is the smallest possible (each run non-empty when there are at least `parts` items; fewer runs when
    there are fewer items). Dynamic programming over the cut points: items are a model's layers, a few dozen."""
    n = len(costs)
    parts = max(1, min(parts, n))
    prefix = [0.0]
    for cost in costs:
        prefix.append(prefix[-1] + cost)
    # worst[k][i]: the smallest largest run when the first i items make k runs; cut[k][i]: where the last starts
    worst = [[float("inf")] * (n + 1) for _ in range(parts + 1)]
    cut = [[0] * (n + 1) for _ in range(parts + 1)]
    worst[0][0] = 0.0
    for k in range(1, parts + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):
                value = max(worst[k - 1][j], prefix[i] - prefix[j])
                if value < worst[k][i]:
                    worst[k][i], cut[k][i] = value, j
    runs, end = [0] * n, n
    for k in range(parts, 0, -1):
        start = cut[k][end]
        runs[start:end] = [k - 1] * (end - start)
        end = start
    return runs


def whole_model_on_one_device(graph: OpGraph, devices: DeviceSet, *, method: str = "expert") -> Placement:
    """Every op where TensorFlow's default placement puts it, the first compute device (the first GPU when
    there is one); ops without a kernel there go to the first device that has one. The experts' placement
    of a model that fits one GPU, and the single-device heuristic (`placer.heuristics`)."""
    return placement_by_stage(graph, devices, lambda name: None, {}, method=method)


def first_device_with_kernel(group, devices: DeviceSet) -> int:
    """Where soft placement moves a colocation group whose device has no kernel for it: the first that has one."""
    for index, device in enumerate(devices):
        if device.kind in group.kernel_devices:
            return index
    raise PlacementError(
        f"colocation group {group.name!r} has kernels only for {', '.join(sorted(group.kernel_devices)) or 'no device type'}, "
        f"and none of the devices ({', '.join(d.short_name for d in devices)}) is of that type"
    )
