"""Hand-built graphs and machines whose best placement is known, for the heuristics that read op costs."""

from types import SimpleNamespace

import pytest
import tensorflow as tf

from placer.devices import machine_from_dict
from placer.graph import graph_from_function
from placer.profile import CostTable
from placer.simulate import Simulator

MS = 1e-3
ELEMENTS = 250_000  # 1 MB per tensor


def devices(memory="1GiB", bandwidth="1e9"):
    return machine_from_dict({
        "devices": [{"name": "CPU:0", "memory": memory}, {"name": "CPU:1", "memory": memory}],
        "links": [{"source": "CPU:0", "target": "CPU:1", "bandwidth": bandwidth, "latency": 1e-4},
                  {"source": "CPU:1", "target": "CPU:0", "bandwidth": bandwidth, "latency": 1e-4}],
    })


def simulator(graph, machine, milliseconds):
    table = CostTable(graph.fingerprint, "CPU", {name: ms * MS for name, ms in milliseconds.items()}, "hand-made")
    return Simulator(graph, machine, table)


def towers_graph(towers=2, depth=3):
    def build():
        heads = []
        for t in range(towers):
            with tf.name_scope(f"t{t}"):
                x = tf.random.uniform([ELEMENTS], seed=t)
                for i in range(depth):
                    x = tf.sqrt(x + 1.0, name=f"op{i}")
                heads.append(tf.reduce_sum(x, name="head"))
        total = tf.add_n(heads, name="total") if towers > 1 else heads[0]
        return tf.group(total, name="train_op"), total

    return graph_from_function(build, name=f"towers{towers}x{depth}")


def device_of(graph, placement, prefix):
    return {placement.devices[placement.group_devices[graph.op(op.name).group]]
            for op in graph.ops if op.name.startswith(prefix)}


@pytest.fixture(scope="session")
def hand_built():
    """The helpers above: `hand_built.towers_graph(2, 3)`, `hand_built.devices(memory=...)`, ..."""
    return SimpleNamespace(MS=MS, devices=devices, simulator=simulator, towers_graph=towers_graph, device_of=device_of)
