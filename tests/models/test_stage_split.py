"""Pipeline stages cut where the compute is even: the split of a layer stack, and the language models' balanced stages."""

import pytest

from placer.cost import open_target
from placer.heuristics import make_heuristic
from placer.models import build_model
from placer.models.expert import contiguous_split
from placer.models.language_model import stage_of
from placer.schedule.from_placement import blocks_from_placement


def _largest_run(costs, runs):
    return max(sum(c for c, r in zip(costs, runs) if r == run) for run in set(runs))


@pytest.mark.parametrize("costs, parts, slowest", [
    ([1, 1, 1, 1, 4], 2, 4),           # the heavy last layer alone
    ([3, 1, 1, 1, 1, 1], 3, 3),        # the heavy first layer alone, the rest in two runs of at most 3
    ([1, 2, 3, 4, 5, 6, 7, 8, 9], 3, 17),  # the textbook partition: 1-5 | 6-7 | 8-9
    ([5, 5, 5, 5], 4, 5),              # one layer per part
])
def test_the_slowest_run_is_the_shortest_any_contiguous_split_allows(costs, parts, slowest):
    runs = contiguous_split(costs, parts)
    assert runs == sorted(runs) and set(runs) == set(range(parts))  # contiguous, in order, none empty
    assert _largest_run(costs, runs) == slowest


def test_fewer_layers_than_parts_get_a_part_each():
    assert contiguous_split([2.0, 1.0], 4) == [0, 1]


def test_a_heavy_last_layer_gets_a_device_to_itself_where_counting_layers_would_not():
    import tensorflow as tf

    from placer.devices import machine_from_dict
    from placer.graph import graph_from_function
    from placer.models.expert import balanced_stage_placement, op_stages, spread

    def build():
        x = tf.random.uniform([1000], seed=0)
        for layer in range(5):
            with tf.name_scope(f"layer{layer}"):
                x = tf.sqrt(x + 1.0, name="op")
        return tf.group(x, name="train_op"), x

    graph = graph_from_function(build, name="five-layers")
    machine = machine_from_dict({"devices": [{"name": "CPU:0"}, {"name": "CPU:1"}]})
    order = [f"layer{i}" for i in range(5)]
    layer_of = lambda name: next((part for part in name.split("/") if part in order), None)  # noqa: E731
    seconds = {op.name: (4.0 if layer_of(op.name) == "layer4" else 1.0) if op.type == "Sqrt" else 0.0
               for op in graph.ops}
    placement = balanced_stage_placement(graph, machine, layer_of, order, seconds)
    stages = op_stages(graph, layer_of)
    devices = {stages[op.name]: placement.devices[placement.group_devices[op.group]]
               for op in graph.ops if op.type == "Sqrt"}
    assert [devices[layer] for layer in order] == [machine[0].name] * 4 + [machine[1].name]  # 4 | 4 seconds
    assert spread(5, [0, 1]) == [0, 0, 0, 1, 1]  # the expert's count: 3 | 6 seconds


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def both_splits(request):
    graph = build_model(request.param, "small")
    with open_target(graph, "modeled:4xH100") as target:
        yield graph, target, {name: make_heuristic(name, graph, target.devices, model=request.param,
                                                   simulator=target.simulator)
                              for name in ("expert", "balanced-stages")}


def test_balanced_stages_keep_layers_whole_and_in_order_one_stage_per_gpu(both_splits):
    graph, target, placements = both_splits
    ops = placements["balanced-stages"].op_devices(graph)
    gpus = [d.name for d in target.devices if d.kind == "GPU"]
    layer_gpu: dict[str, str] = {}
    for op in graph.ops:
        stage = stage_of(op.name)
        if stage and not op.name.startswith("gradient_tape") and op.type not in ("Const", "NoOp"):
            layer_gpu.setdefault(stage, ops[op.name])
    blocks = sorted((s for s in layer_gpu if s.startswith("block_")), key=lambda s: int(s.split("_")[1]))
    order = [gpus.index(layer_gpu[s]) for s in ["embedding", *blocks, "head"]]
    assert order == sorted(order) and set(order) == {0, 1, 2, 3}
    assert placements["balanced-stages"].metadata["method"] == "balanced-stages"


def test_the_slowest_balanced_stage_is_no_longer_than_the_expert_s(both_splits):
    # the expert gives each GPU the same number of blocks and the head to the last: that stage paces a pipeline
    graph, target, placements = both_splits
    slowest = {}
    for name, placement in placements.items():
        template = blocks_from_placement(target.simulator, placement, 4)
        slowest[name] = max(sum(b.span for b in template.blocks if b.devices == (d,)) for d in template.devices)
    assert slowest["balanced-stages"] <= slowest["expert"]
