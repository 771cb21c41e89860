"""An order of ops per device: enforced with control dependencies, checked on a traced step."""

import json

import pytest

from placer.errors import OrderError
from placer.graph.order import CONSTANT, INITIALIZER_RUNS_IT, OpChain, enforce_order, order_violations, unorderable_ops


@pytest.fixture(scope="module")
def two_chains():
    """Two independent two-op chains a1 -> a2 and b1 -> b2, both feeding the train op."""
    import tensorflow as tf

    from placer.graph.build import graph_from_function

    def build():
        v = tf.compat.v1.get_variable("v", [4], initializer=tf.compat.v1.zeros_initializer(), use_resource=True)
        a2 = tf.square(tf.random.uniform([4], name="a1"), name="a2")
        b2 = tf.square(tf.random.uniform([4], name="b1"), name="b2")
        loss = tf.reduce_sum(a2 + b2 + v, name="loss")
        return tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train_op"), loss

    return graph_from_function(build, name="two-chains")


def a(name):
    return frozenset({f"{name}1/RandomUniform", f"{name}2"})


def test_the_later_link_s_sources_wait_on_a_barrier_that_waits_on_the_earlier_link(two_chains):
    ordered = enforce_order(two_chains, [OpChain("CPU:0", (a("b"), a("a")))])
    (barrier, device), = ordered.barrier_devices.items()
    assert device == "CPU:0"
    assert set(ordered.graph.op(barrier).control_inputs) == set(a("b"))
    assert barrier in ordered.graph.op("a1/RandomUniform").control_inputs  # a source of the later link
    assert barrier not in ordered.graph.op("a2").control_inputs  # waits through a1 already
    assert ordered.graph.op(barrier).in_step


def test_each_barrier_waits_for_the_one_before_so_a_link_grappler_removes_breaks_no_chain(two_chains):
    links = (frozenset({"a1/RandomUniform"}), frozenset({"a2"}), frozenset({"b1/RandomUniform"}))
    ordered = enforce_order(two_chains, [OpChain("CPU:0", links)])
    first, second = sorted(ordered.barrier_devices)
    assert first in ordered.graph.op(second).control_inputs


def test_the_ordered_graph_is_what_importing_its_graph_def_into_tensorflow_makes(two_chains):
    """The ordered graph is built from the graph's own ops (an import took minutes on paper-size micro-batched
    steps): it must hold what TensorFlow's import of the ordered GraphDef holds, op for op."""
    import tensorflow as tf

    from placer.graph.build import op_graph_from_tf_graph

    links = (frozenset({"b1/RandomUniform"}), a("a"), frozenset({"b2"}))
    ordered = enforce_order(two_chains, [OpChain("CPU:0", links)]).graph
    imported = tf.Graph()
    with imported.as_default():
        tf.compat.v1.import_graph_def(tf.compat.v1.GraphDef.FromString(ordered.graph_def), name="")
    expected = op_graph_from_tf_graph(imported, two_chains.train_op, two_chains.init_op, loss=two_chains.loss,
                                      name=two_chains.name)
    assert [op.name for op in ordered.ops] == [op.name for op in expected.ops]  # the same topological order
    for mine, theirs in zip(ordered.ops, expected.ops):
        assert set(mine.control_inputs) == set(theirs.control_inputs), mine.name
        assert (mine.type, mine.data_inputs, mine.output_shapes, mine.output_bytes, mine.kernel_devices, mine.flops,
                mine.parameters, mine.in_step) == (theirs.type, theirs.data_inputs, theirs.output_shapes,
                                                   theirs.output_bytes, theirs.kernel_devices, theirs.flops,
                                                   theirs.parameters, theirs.in_step), mine.name
    groups = {frozenset(g.ops): g.kernel_devices for g in ordered.groups}
    assert groups == {frozenset(g.ops): g.kernel_devices for g in expected.groups}
    assert all(ordered.groups[op.group].ops.__contains__(op.name) for op in ordered.ops)
    assert ordered.batch == two_chains.batch and ordered.model_parameters == two_chains.model_parameters


def test_unorderable_ops_are_the_initializer_s_and_the_constants(two_chains):
    reasons = unorderable_ops(two_chains)
    assert reasons["v"] == INITIALIZER_RUNS_IT  # the variable's handle
    assert reasons["a1/shape"] == CONSTANT
    assert "a1/RandomUniform" not in reasons and "a2" not in reasons  # random: a new value every step


def test_a_chain_that_makes_the_initializer_wait_for_the_step_is_refused(two_chains):
    with pytest.raises(OrderError, match=r"the initializer runs \['v'\] too"):
        enforce_order(two_chains, [OpChain("CPU:0", (a("a"), frozenset({"v"})))])


def test_an_order_against_the_data_flow_is_refused(two_chains):
    with pytest.raises(OrderError, match="contradicts the data flow"):
        enforce_order(two_chains, [OpChain("CPU:0", (frozenset({"a2"}), frozenset({"a1/RandomUniform"})))])


def test_an_op_in_two_links_or_outside_the_step_is_refused(two_chains):
    with pytest.raises(OrderError, match="in two links"):
        enforce_order(two_chains, [OpChain("CPU:0", (a("a"), a("a") | a("b")))])
    with pytest.raises(OrderError, match="not ops of the training step"):
        enforce_order(two_chains, [OpChain("CPU:0", (a("a"), frozenset({"no_such_op"})))])


def trace(*ops):
    """A Chrome trace as TensorFlow writes it: (node, device, start us, duration us) per op."""
    devices = sorted({device for _, device, _, _ in ops})
    events = [{"ph": "M", "name": "process_name", "pid": i, "args": {"name": f"/job:localhost/replica:0/task:0/device:{d} Compute"}}
              for i, d in enumerate(devices)]
    events += [{"ph": "X", "pid": devices.index(device), "tid": 0, "name": "Square", "ts": start, "dur": duration,
                "args": {"name": node, "op": "Square"}} for node, device, start, duration in ops]
    return json.dumps({"traceEvents": events})


CHAIN = OpChain("CPU:0", (frozenset({"x", "y"}), frozenset({"z"})), ("first", "second"))


def test_a_link_that_starts_before_the_previous_one_ended_is_a_violation():
    (violation,) = order_violations(trace(("x", "CPU:0", 100, 50), ("y", "CPU:0", 100, 80), ("z", "CPU:0", 170, 10)),
                                    [CHAIN])
    assert (violation.device, violation.before, violation.after) == ("CPU:0", "first", "second")
    assert violation.early == pytest.approx(10e-6)


def test_links_in_order_and_clock_granularity_are_no_violation():
    assert order_violations(trace(("x", "CPU:0", 100, 50), ("y", "CPU:0", 100, 80), ("z", "CPU:0", 180, 10)), [CHAIN]) == ()
    assert order_violations(trace(("x", "CPU:0", 100, 81), ("z", "CPU:0", 180, 10)), [CHAIN]) == ()  # 1 us early


def test_ops_missing_from_the_trace_are_skipped():
    assert order_violations(trace(("x", "CPU:0", 100, 50)), [CHAIN]) == ()
