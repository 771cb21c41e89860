"""The simulator on hand-built graphs whose step time, traffic and memory can be worked out by hand."""

import json

import numpy as np
import pytest
import tensorflow as tf

from placer.devices import machine_from_dict
from placer.errors import DeviceSpecError, ProfileError
from placer.graph import graph_from_function
from placer.measure.partitions import partition_receives
from placer.placement import Placement
from placer.profile import CostTable
from placer.simulate import Simulator, SimulatorConfig

MS = 1e-3
ELEMENTS = 250_000  # 1 MB of float32 per tensor


def two_devices(bandwidth="1e9", latency=0.0, memory="1GiB"):
    return machine_from_dict({
        "devices": [{"name": "CPU:0", "memory": memory}, {"name": "CPU:1", "memory": memory}],
        "links": [{"source": "CPU:0", "target": "CPU:1", "bandwidth": bandwidth, "latency": latency},
                  {"source": "CPU:1", "target": "CPU:0", "bandwidth": bandwidth, "latency": latency}],
    })


def costs(graph, milliseconds=None):
    return CostTable(graph.fingerprint, "CPU", {name: ms * MS for name, ms in (milliseconds or {}).items()}, "hand-made")


TOWER_COSTS = {"a/source": 1, "a/square": 2, "b/source": 1, "b/square": 2, "join": 3, "total": 4}


def place(graph, devices, **device_of_prefix):
    """Ops whose name starts with a given prefix go to that device; everything else to device 0."""
    op_devices = {}
    for op in graph.ops:
        index = next((d for prefix, d in device_of_prefix.items() if op.name.startswith(prefix)), 0)
        op_devices[op.name] = devices[index].name
    return Placement.from_op_devices(graph, devices, op_devices)


@pytest.fixture(scope="module")
def towers():
    """Two towers a and b (source -> square) joined by a sum: a graph with no variables. Only the named
    ops get costs; the random generators feeding the sources cost nothing."""
    def build():
        heads = []
        for tower in ("a", "b"):
            with tf.name_scope(tower):
                x = tf.sqrt(tf.random.uniform([ELEMENTS], seed=1), name="source")
                heads.append(tf.square(x, name="square"))
        joined = tf.add(heads[0], heads[1], name="join")
        return tf.group(tf.reduce_sum(joined, name="total"), name="train_op")

    return graph_from_function(build, name="towers")


def test_a_chain_on_one_device_takes_the_sum_of_its_op_times(towers):
    devices = two_devices()
    table = costs(towers, TOWER_COSTS)
    result = Simulator(towers, devices, table).simulate(Placement.on_device(towers, devices, 0))
    assert result.step_time == pytest.approx(13 * MS)
    assert result.device_busy[devices[0].name] == pytest.approx(13 * MS)
    assert result.link_bytes == {}


def test_towers_on_two_devices_overlap_and_pay_one_transfer(towers):
    devices = two_devices(bandwidth="1e9", latency=0.5e-3)
    table = costs(towers, TOWER_COSTS)
    result = Simulator(towers, devices, table).simulate(place(towers, devices, **{"b/": 1}))
    # b's square is sent to CPU:0: 0.5 ms latency + 1 MB at 1 GB/s = 1.5 ms, after b finishes at 3 ms.
    assert result.step_time == pytest.approx((3 + 1.5 + 3 + 4) * MS)
    assert result.link_bytes == {(devices[1].name, devices[0].name): ELEMENTS * 4}


def test_receiving_a_transfer_can_take_the_receiving_device_s_compute_slot(towers):
    devices = two_devices(bandwidth="1e9", latency=0.5e-3)
    table = costs(towers, TOWER_COSTS)
    simulator = Simulator(towers, devices, table, SimulatorConfig(recv_cpu=1e-3))
    result = simulator.simulate(place(towers, devices, **{"b/": 1}))
    # b's square is sent at 3 ms; the receive starts on CPU:0 as its first bytes arrive (0.5 ms later)
    # and takes 1 ms of CPU:0, but the last byte is there only at 3 + 1 + 0.5 ms: the join starts at 4.5 ms.
    assert result.step_time == pytest.approx((3 + 1 + 0.5 + 3 + 4) * MS)
    assert result.device_busy[devices[0].name] == pytest.approx((3 + 1 + 3 + 4) * MS)


def test_a_transfer_is_there_when_the_slower_core_is_done_as_sending_and_receiving_overlap(towers):
    devices = two_devices(bandwidth="1e12", latency=0.5e-3)
    table = costs(towers, TOWER_COSTS)
    # 1 MB: the sender's core serializes it in 1 + 1 ms, the receiver's deserializes it in 0.5 + 3 ms.
    config = SimulatorConfig(send_cpu=1e-3, send_cpu_per_byte=1e-9, recv_cpu=0.5e-3, recv_cpu_per_byte=3e-9)
    result = Simulator(towers, devices, table, config).simulate(place(towers, devices, **{"b/": 1}))
    # b done at 3 ms; the receive starts at 3.5 ms and ends at 7 ms; the join runs 7-10, the total 10-14.
    assert result.step_time == pytest.approx(14 * MS, rel=1e-6)
    assert result.device_busy[devices[1].name] == pytest.approx((3 + 2) * MS, rel=1e-6)  # b's ops and the send


def test_a_send_takes_the_sender_s_core_from_its_other_ops(towers):
    devices = two_devices(bandwidth="1e12", latency=0.0)
    table = costs(towers, TOWER_COSTS)
    placement = place(towers, devices, **{"b/": 1, "join": 1, "total": 1})
    free = Simulator(towers, devices, table).simulate(placement, timeline=True)
    busy = Simulator(towers, devices, table, SimulatorConfig(send_cpu=5e-3)).simulate(placement, timeline=True)
    sent_by_cpu0 = [t for t in busy.transfers if t.source == devices[0].name]
    assert {t.tensor for t in sent_by_cpu0} == {"a/square:0"}  # the sum's axis is a constant: copied, not sent
    # The send holds CPU:0 for 5 ms: its busy time grows by 5 ms, and a's square reaches the join 5 ms later
    # than with free sends.
    assert busy.device_busy[devices[0].name] == pytest.approx(free.device_busy[devices[0].name] + 5 * MS)
    join = {o.name: o for o in busy.ops}["join"].start - {o.name: o for o in free.ops}["join"].start
    assert join == pytest.approx(5 * MS, rel=1e-3)


def test_a_send_goes_ahead_of_the_ops_waiting_for_the_sender_s_core():
    """gRPC serves a tensor as soon as it exists: `producer`'s send takes CPU:0's one slot before `waiting`,
    which has been ready since the step began."""
    def build():
        producer = tf.sqrt(tf.random.uniform([4], seed=1), name="producer")
        waiting = tf.sqrt(tf.random.uniform([4], seed=2), name="waiting")
        with tf.name_scope("d1"):
            remote = tf.sqrt(producer, name="remote")
        return tf.add(tf.reduce_sum(remote), tf.reduce_sum(waiting), name="train_op")

    graph = graph_from_function(build, name="send-first")
    devices = two_devices(bandwidth="1e12", latency=0.0)
    table = costs(graph, {"producer": 1, "waiting": 1, "d1/remote": 1})
    result = Simulator(graph, devices, table, SimulatorConfig(send_cpu=5e-3)).simulate(
        place(graph, devices, **{"d1/": 1}), timeline=True)
    starts = {op.name: op.start for op in result.ops}
    assert starts["producer"] == 0.0
    assert starts["d1/remote"] == pytest.approx(6 * MS, rel=1e-6)  # the send runs 1-6 ms
    assert starts["waiting"] == pytest.approx(6 * MS, rel=1e-6)


def _request_probe(sender_chain: int, receiver_chain: int, chain_after_made: bool = True):
    """`made` on CPU:0, then `sender_chain` 1 ms ops there that depend on it (or, without `chain_after_made`,
    on an input of their own, queued after `made`); CPU:1 ("far/") runs `receiver_chain` 1 ms ops of its own
    from the step's start, and `far/remote`, made's consumer."""
    def build():
        made = tf.sqrt(tf.random.uniform([4], seed=1), name="made")
        h = made if chain_after_made else tf.random.uniform([4], seed=3)
        for link in range(sender_chain):
            h = tf.sqrt(h, name=f"c{link}")
        with tf.name_scope("far"):
            remote = tf.sqrt(made, name="remote")
            r = tf.random.uniform([4], seed=2)
            for link in range(receiver_chain):
                r = tf.sqrt(r, name=f"r{link}")
        return tf.add_n([tf.reduce_sum(remote), tf.reduce_sum(h), tf.reduce_sum(r)], name="train_op")

    graph = graph_from_function(build, name=f"request-{sender_chain}-{receiver_chain}-{chain_after_made}")
    table = costs(graph, {"made": 1, "far/remote": 1, **{f"c{k}": 1 for k in range(sender_chain)},
                          **{f"far/r{k}": 1 for k in range(receiver_chain)}})
    return graph, table


@pytest.mark.parametrize("sender_chain, receiver_chain, chain_after_made, executor_queues, sent_at_ms", [
    (4, 0, True, False, 4.0),  # asked for at once, made at 1 ms: taken up 2.5 ms later; sent when CPU:0's op then
                               # running (c2, 3-4 ms) ends
    (4, 0, False, False, 4.0),  # the same: the hold does not ask what `made` made ready
    (4, 0, True, True, 4.0),   # TensorFlow's queues: `made` makes c0 ready too, so the send is queued behind the
                               # chain, as held
    (4, 0, False, True, 3.0),  # the send runs inline as `made` ends, but the request, there since 0 ms beside a
                               # busy sender, is taken up only at 2.5 ms: sent when c1 (2-3 ms) ends
    (0, 0, True, False, 1.0),  # CPU:0 runs out of ops when `made` ends: served at once
    (0, 4, True, False, 2.5),  # CPU:1 asks for it 2.5 ms into the step, still busy; CPU:0 is idle, serves it then
])
def test_a_worker_that_keeps_computing_serves_a_transfer_request_after_the_request_delay(
        sender_chain, receiver_chain, chain_after_made, executor_queues, sent_at_ms):
    graph, table = _request_probe(sender_chain, receiver_chain, chain_after_made)
    devices = two_devices(bandwidth="1e12", latency=0.0)
    placement = place(graph, devices, **{"far/": 1})
    sent = {}
    for delay in (0.0, 2.5 * MS):
        config = SimulatorConfig(send_cpu=0.1 * MS, request_delay=delay, executor_queues=executor_queues)
        result = Simulator(graph, devices, table, config).simulate(placement, timeline=True)
        (transfer,) = [t for t in result.transfers if t.tensor == "made:0"]
        sent[delay] = transfer.start
    assert sent[0.0] == pytest.approx(1 * MS)  # without the delay a tensor leaves once it is made
    assert sent[2.5 * MS] == pytest.approx(sent_at_ms * MS)


@pytest.mark.parametrize("chain_after_made, executor_queues, sent_at_ms", [
    (False, True, 2.1), (True, True, 5.1), (False, False, 5.1)])
def test_a_send_queued_behind_the_work_its_producer_made_ready_waits_though_its_request_was_taken_up(
        chain_after_made, executor_queues, sent_at_ms):
    # Two-tower's loss gradient: CPU:1 computes until 1 ms, sends `trigger` and asks for `made`; CPU:0, idle
    # until `trigger` lands, takes the request up at once, then makes `made` (1.1-2.1 ms) and computes 4 ms
    # more. TensorFlow runs the send inline as `made` ends only if `made` makes nothing else ready there
    # (`experiments/probes/step_decomposition.py` traced the hop 0.2 ms in one layout and 2 ms in another that differ
    # in that alone); queued, it waits for the chain's end or the request delay (2.5 ms): at 4.6 ms CPU:0 runs
    # c2 (4.1-5.1 ms), and the send follows it. The free Identity (grappler folds it away) between `made` and
    # the chain does not hide the chain. The hold (no executor queues) holds it either way.
    def build():
        trigger = tf.sqrt(tf.random.uniform([4], seed=2, name="far_input"), name="far_trigger")
        made = tf.sqrt(trigger, name="made")
        h = tf.identity(made) if chain_after_made else trigger
        for link in range(4):
            h = tf.sqrt(h, name=f"c{link}")
        remote = tf.sqrt(made, name="far_remote")
        return tf.add_n([tf.reduce_sum(remote), tf.reduce_sum(h)], name="train_op")

    graph = graph_from_function(build, name=f"loss-gradient-{chain_after_made}")
    table = costs(graph, {"far_trigger": 1, "made": 1, "far_remote": 1, **{f"c{k}": 1 for k in range(4)}})
    devices = two_devices(bandwidth="1e12", latency=0.0)
    config = SimulatorConfig(send_cpu=0.1 * MS, request_delay=2.5 * MS, executor_queues=executor_queues)
    result = Simulator(graph, devices, table, config).simulate(place(graph, devices, far_=1), timeline=True)
    (transfer,) = [t for t in result.transfers if t.tensor == "made:0"]
    assert {op.name: op for op in result.ops}["made"].end == pytest.approx(2.1 * MS)
    assert transfer.start == pytest.approx(sent_at_ms * MS)


@pytest.mark.parametrize("executor_queues, starts_at_ms", [(False, 2.6), (True, 4.0)])
def test_what_a_received_tensor_makes_ready_waits_behind_the_receivers_work(executor_queues, starts_at_ms):
    # CPU:1 (two threads) runs a chain of 1 ms ops from the step's start and asks for `made` (0-1 ms) 2.5 ms
    # in; CPU:0, idle, sends it at once (2.5-2.6 ms). In ready order its consumer takes CPU:1's free thread on
    # arrival; in TensorFlow's queues it waits behind the chain, to 4 ms (before the request delay, 5.1 ms).
    graph, table = _request_probe(0, 4)
    devices = two_devices(bandwidth="1e12", latency=0.0)
    config = SimulatorConfig(cpu_slots=2, send_cpu=0.1 * MS, request_delay=2.5 * MS, executor_queues=executor_queues)
    result = Simulator(graph, devices, table, config).simulate(place(graph, devices, **{"far/": 1}), timeline=True)
    assert {op.name: op for op in result.ops}["far/remote"].start == pytest.approx(starts_at_ms * MS)


def test_a_tensor_made_as_its_idle_sender_gets_work_waits_behind_that_work():
    # Two-tower's learned placement: CPU:0 idles until `far_trigger` lands (1.1 ms), which makes ready both a free
    # Identity, `made`, whose tensor CPU:1 asked for long before, and a chain of 1 ms ops. CPU:0 was idle until
    # that instant, but not after it: the send waits behind the chain, for the request delay (2.5 ms, to 3.6 ms),
    # then the op running then (c2, 3.1-4.1 ms). Traced on the testbed: the hop waited 3.0 ms where the twin
    # that took the instant's idle for the sender's gave 0.2 ms (`experiments/probes/step_decomposition.py`).
    def build():
        trigger = tf.sqrt(tf.random.uniform([4], seed=2, name="far_input"), name="far_trigger")
        made = tf.identity(trigger, name="made")
        h = trigger
        for link in range(4):
            h = tf.sqrt(h, name=f"c{link}")
        remote = tf.sqrt(made, name="far_remote")
        return tf.add_n([tf.reduce_sum(remote), tf.reduce_sum(h)], name="train_op")

    graph = graph_from_function(build, name="made-as-work-arrives")
    table = costs(graph, {"far_trigger": 1, "far_remote": 1, **{f"c{k}": 1 for k in range(4)}})
    devices = two_devices(bandwidth="1e12", latency=0.0)
    config = SimulatorConfig(send_cpu=0.1 * MS, request_delay=2.5 * MS)
    result = Simulator(graph, devices, table, config).simulate(place(graph, devices, far_=1), timeline=True)
    ops = {op.name: op for op in result.ops}
    (transfer,) = [t for t in result.transfers if t.tensor == "made:0"]
    assert ops["made"].end == pytest.approx(1.1 * MS) and ops["c0"].start == pytest.approx(1.1 * MS)
    assert transfer.start == pytest.approx(4.1 * MS)


def test_an_idle_sender_takes_a_request_up_when_it_arrives():
    # CPU:1 computes until 4 ms and asks for `made` 2.5 ms into the step; the request needs 0.7 ms to reach
    # CPU:0, idle since `made` ended at 1 ms, which takes it up on arrival (no other event then) rather than
    # 2.5 ms later.
    graph, table = _request_probe(0, 4)
    devices = two_devices(bandwidth="1e12", latency=0.7 * MS)
    result = Simulator(graph, devices, table, SimulatorConfig(send_cpu=0.1 * MS, request_delay=2.5 * MS)).simulate(
        place(graph, devices, **{"far/": 1}), timeline=True)
    (transfer,) = [t for t in result.transfers if t.tensor == "made:0"]
    assert transfer.start == pytest.approx(3.2 * MS)


def test_latency_overlaps_when_many_tensors_are_in_flight_at_once():
    def build():
        parts = [tf.random.uniform([10], seed=i, name=f"source_{i}") for i in range(32)]
        return tf.group(tf.add_n(parts, name="total"), name="train_op")

    graph = graph_from_function(build, name="fan-in")
    devices = two_devices(bandwidth="1e12", latency=1e-3)
    result = Simulator(graph, devices, costs(graph)).simulate(place(graph, devices, **{"source": 1}))
    # 32 tensors sent at once over a link with 1 ms latency arrive together after 1 ms, not after 32 ms.
    assert result.step_time == pytest.approx(1 * MS, rel=1e-3)


def test_transfers_on_a_shared_link_go_one_after_the_other(towers):
    devices = two_devices(bandwidth="1e9", latency=0.0)
    table = costs(towers, TOWER_COSTS)
    # Both towers on CPU:1, the join on CPU:0: two 1 MB tensors share the CPU:1 -> CPU:0 link.
    simulator = Simulator(towers, devices, table, SimulatorConfig(cpu_slots=2))
    result = simulator.simulate(place(towers, devices, **{"a/": 1, "b/": 1}), timeline=True)
    assert result.step_time == pytest.approx((3 + 1 + 1 + 3 + 4) * MS)
    sends = sorted((t.start, t.end) for t in result.transfers)
    assert sends == [pytest.approx((3 * MS, 4 * MS)), pytest.approx((4 * MS, 5 * MS))]


def test_a_device_runs_as_many_ops_at_once_as_it_has_slots(towers):
    devices = two_devices()
    table = costs(towers, TOWER_COSTS)
    placement = Placement.on_device(towers, devices, 0)
    serial = Simulator(towers, devices, table, SimulatorConfig(cpu_slots=1)).simulate(placement)
    parallel = Simulator(towers, devices, table, SimulatorConfig(cpu_slots=2)).simulate(placement)
    assert serial.step_time == pytest.approx(13 * MS)
    assert parallel.step_time == pytest.approx(10 * MS)


def test_peak_memory_counts_live_tensors_and_a_too_small_device_is_out_of_memory():
    def build():
        w = tf.compat.v1.get_variable("w", [ELEMENTS], initializer=tf.compat.v1.zeros_initializer(), use_resource=True)
        loss = tf.reduce_sum(tf.square(w, name="square"), name="loss")
        return tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train_op"), loss

    graph = graph_from_function(build, name="one-variable")
    table = costs(graph, {"square": 1, "loss": 1})
    roomy = two_devices(memory="1GiB")
    result = Simulator(graph, roomy, table).simulate(Placement.on_device(graph, roomy, 0))
    # The 1 MB variable, its 1 MB square and the 1 MB gradients that are alive alongside it.
    peak = result.peak_memory[roomy[0].name]
    assert 2 * ELEMENTS * 4 <= peak <= 5 * ELEMENTS * 4
    assert result.ok

    cramped = two_devices(memory="1.5MB")
    result = Simulator(graph, cramped, costs(graph, {"square": 1, "loss": 1})).simulate(Placement.on_device(graph, cramped, 0))
    assert not result.ok and result.out_of_memory == (cramped[0].name,)
    assert "OUT OF MEMORY" in result.describe()


@pytest.mark.parametrize("on_cores", [False, True], ids=["links", "cores"])
def test_peaks_not_tracked_where_memory_fits_are_exact_when_read(two_tower, on_cores):
    """Where no device can run out whatever the order, a simulation leaves peak memory to be computed when
    read; read after other placements ran on the same simulator, the peaks equal those of a tracked
    simulation (a timeline tracks them), and a result pickles with them as a plain dict."""
    import pickle

    from placer.simulate.simulator import DeferredPeaks

    devices = two_devices(latency=1e-5)
    rng = np.random.default_rng(1)
    table = CostTable(two_tower.fingerprint, "CPU", {op.name: float(rng.random()) * MS for op in two_tower.step_ops}, "random")
    config = SimulatorConfig(cpu_slots=2, **({"send_cpu": 2e-5, "send_cpu_per_byte": 1e-10, "recv_cpu": 2e-5,
                                              "recv_cpu_per_byte": 1e-10} if on_cores else {}))
    simulator = Simulator(two_tower, devices, table, config)
    assignments = rng.integers(0, 2, size=(6, len(two_tower.groups)))
    results = [simulator.simulate(a) for a in assignments]
    assert all(isinstance(r.peak_memory, DeferredPeaks) and r.ok for r in results)
    tracked = [simulator.simulate(a, timeline=True) for a in assignments]
    assert len({tuple(t.peak_memory.values()) for t in tracked}) > 1  # the placements differ in memory
    for result, exact in zip(results, tracked):
        assert dict(result.peak_memory) == exact.peak_memory and result.step_time == exact.step_time
    copied = pickle.loads(pickle.dumps(results[0]))
    assert type(copied.peak_memory) is dict and copied.peak_memory == tracked[0].peak_memory


def test_same_inputs_give_the_same_result(two_tower):
    devices = two_devices(latency=1e-5)
    rng = np.random.default_rng(0)
    table = CostTable(two_tower.fingerprint, "CPU", {op.name: float(rng.random()) * MS for op in two_tower.step_ops}, "random")
    simulator = Simulator(two_tower, devices, table, SimulatorConfig(cpu_slots=2))
    assignments = rng.integers(0, 2, size=(5, len(two_tower.groups)))
    first = [simulator.simulate(a) for a in assignments]
    again = [Simulator(two_tower, devices, table, SimulatorConfig(cpu_slots=2)).simulate(a) for a in assignments]
    assert first == again
    assert len({r.step_time for r in first}) > 1


def test_timeline_exports_as_a_chrome_trace(towers, tmp_path):
    devices = two_devices()
    table = costs(towers, TOWER_COSTS)
    result = Simulator(towers, devices, table).simulate(place(towers, devices, **{"b/": 1}), timeline=True)
    trace = json.loads(result.save_chrome_trace(tmp_path / "trace.json").read_text())
    names = {event["name"] for event in trace["traceEvents"] if event["ph"] == "X"}
    assert {"a/square", "b/square", "join", "recv b/square:0"} <= names


def test_a_cost_table_of_another_graph_is_refused(towers, two_tower):
    with pytest.raises(ProfileError, match="profile this graph"):
        Simulator(towers, two_devices(), costs(two_tower))


def test_a_transfer_without_a_link_is_an_error_naming_the_devices(towers):
    devices = machine_from_dict({"devices": [{"name": "CPU:0"}, {"name": "CPU:1"}]})
    simulator = Simulator(towers, devices, costs(towers, {"join": 1}))
    with pytest.raises(DeviceSpecError, match="no link between them"):
        simulator.simulate(place(towers, devices, **{"b/": 1}))


@pytest.fixture(scope="module")
def transfer_during_other_work():
    """`d1/producer` sends 1 MB to `d0/consumer`. While it is in flight, device 0 runs `d0/scratch` (2 MB out of a
    2 MB input) after a 1 ms `d0/wait`, and device 1 runs `d1/other` (2 MB out of a 2 MB input) after a 1 ms
    `d1/delay`."""
    def build():
        with tf.name_scope("d1"):
            x = tf.sqrt(tf.random.uniform([ELEMENTS], seed=1), name="producer")
            with tf.control_dependencies([x]):
                delay = tf.reduce_sum(tf.random.uniform([1], seed=2), name="delay")
            with tf.control_dependencies([delay]):
                other = tf.sqrt(tf.random.uniform([2 * ELEMENTS], seed=3), name="other")
            other_sum = tf.reduce_sum(other, name="other_sum")
        with tf.name_scope("d0"):
            wait = tf.reduce_sum(tf.random.uniform([1], seed=4), name="wait")
            with tf.control_dependencies([wait]):
                scratch = tf.sqrt(tf.random.uniform([2 * ELEMENTS], seed=5), name="scratch")
            done = tf.reduce_sum(scratch, name="scratch_sum")
            y = tf.reduce_sum(tf.square(x, name="consumer"), name="consumer_sum")
        return tf.group(y, done, other_sum, name="train_op")

    return graph_from_function(build, name="transfer-during-work")


@pytest.mark.parametrize("bandwidth", ["1e8", "1e10"])
def test_a_transfer_holds_memory_on_both_ends_while_in_flight(transfer_during_other_work, bandwidth):
    """Between GPUs TensorFlow allocates the destination before it copies, and the source stays referenced
    until the copy is done: the bytes count on both devices for the whole transfer."""
    graph = transfer_during_other_work
    devices = two_devices(bandwidth=bandwidth)
    table = costs(graph, {"d1/producer": 1, "d1/delay": 1, "d1/other": 1, "d0/wait": 1, "d0/scratch": 1,
                          "d0/scratch_sum": 1, "d0/consumer": 1})
    placement = place(graph, devices, **{"d1/": 1})
    result = Simulator(graph, devices, table).simulate(placement, timeline=True)
    (transfer,) = [t for t in result.transfers if t.bytes > 0]
    assert (transfer.tensor, transfer.start) == ("d1/producer:0", pytest.approx(1 * MS))
    megabyte = ELEMENTS * 4
    # Device 0 at 1 ms: scratch's 2 MB input and 2 MB output, and the 1 MB coming from device 1.
    assert result.peak_memory[devices[0].name] == pytest.approx(5 * megabyte, abs=64)
    # Device 1 at 2 ms: other's 2 MB input and 2 MB output, and producer's 1 MB while the copy still runs
    # (10 ms at 100 MB/s; 0.1 ms at 10 GB/s).
    slow = bandwidth == "1e8"
    assert result.peak_memory[devices[1].name] == pytest.approx((5 if slow else 4) * megabyte, abs=64)


@pytest.fixture(scope="module")
def shared_constants():
    """`scale` (4 elements), `table` (32) and the size folded from `x`'s static shape are made on device 0
    and read on both devices; device 1's result is summed on device 0."""
    def build():
        x = tf.random.uniform([8, 4], seed=1, name="x")
        scale = tf.constant([2.0, 3.0, 4.0, 5.0], name="scale")
        table = tf.constant([[1.0] * 4] * 8, name="table")
        size = tf.reduce_prod(tf.shape(x), keepdims=True, name="size")
        here = tf.reshape(x * scale + table, size, name="here")
        with tf.name_scope("d1"):
            y = tf.random.uniform([8, 4], seed=2, name="y")
            there = tf.reshape(y * scale + table, size, name="there")
        return tf.add(tf.reduce_sum(here), tf.reduce_sum(there), name="train_op")

    return graph_from_function(build, name="shared-constants")


def test_small_constants_are_not_sent_between_cpus_as_in_the_partitioned_graph(shared_constants, cpus2):
    """TensorFlow copies `scale` and the folded size to device 1 instead of sending them; `table` is too
    large for that, and device 1's result must come back."""
    graph = shared_constants
    received = partition_receives(graph, place(graph, cpus2, **{"d1/": 1}).op_devices(graph))
    devices = two_devices()
    simulated = Simulator(graph, devices, costs(graph)).simulate(place(graph, devices, **{"d1/": 1}), timeline=True)
    assert sorted(t.tensor for t in simulated.transfers) == ["d1/there:0", "table:0"]
    assert len(received) == len(simulated.transfers)


def test_constants_with_two_readers_on_two_devices_are_not_learned_as_sent(shared_constants, cpus2):
    from placer.measure.partitions import constants_sent_when_cut

    graph = shared_constants
    assert constants_sent_when_cut(graph, place(graph, cpus2, **{"d1/": 1}).op_devices(graph)) == frozenset()
    # a placement on one device sends nothing, and runs nothing to learn it
    assert constants_sent_when_cut(graph, place(graph, cpus2).op_devices(graph)) == frozenset()


@pytest.fixture(scope="module")
def lone_constant():
    """`d1/offset` (4 elements) is made on device 1 and read by one op, `moved`, on device 0."""
    def build():
        x = tf.random.uniform([8, 4], seed=1, name="x")
        with tf.name_scope("d1"):
            offset = tf.constant([1.0, 2.0, 3.0, 4.0], name="offset")
        return tf.reduce_sum(tf.add(x, offset, name="moved"), name="train_op")

    return graph_from_function(build, name="lone-constant")


def test_a_small_constant_with_one_reader_is_sent_and_the_learned_set_makes_the_simulator_send_it(lone_constant,
                                                                                                  cpus2):
    """TensorFlow's ReplicateConstantsPass skips a constant with one reader: the partitioned graph receives it,
    the replication rule alone does not send it, and learned from the partitions the simulator does."""
    from placer.measure.partitions import constants_sent_when_cut, partition_graphs, received_tensors

    graph = lone_constant
    op_devices = place(graph, cpus2, **{"d1/": 1}).op_devices(graph)
    assert "d1/offset:0" in received_tensors(partition_graphs(graph, op_devices))
    learned = constants_sent_when_cut(graph, op_devices)
    assert learned == {"d1/offset:0"}

    devices = two_devices()
    placement = place(graph, devices, **{"d1/": 1})
    by_rule = Simulator(graph, devices, costs(graph)).simulate(placement, timeline=True)
    with_learned = Simulator(graph, devices, costs(graph), SimulatorConfig(sent_constants=learned)).simulate(
        placement, timeline=True)
    assert [t.tensor for t in by_rule.transfers] == []
    assert [(t.tensor, t.bytes) for t in with_learned.transfers] == [("d1/offset:0", 16)]


def test_received_tensors_pair_each_receive_with_its_send_host_memory_ones_included():
    from tensorflow.core.framework import graph_pb2

    from placer.measure.partitions import received_tensors

    def partition(*nodes):
        graph_def = graph_pb2.GraphDef()
        for name, op, inputs, key in nodes:
            node = graph_def.node.add(name=name, op=op, input=inputs)
            node.attr["tensor_name"].s = key.encode()
        return graph_def

    sender = partition(("s1", "_Send", ["a/shape"], "edge_1"), ("s2", "_HostSend", ["b:1"], "edge_2"),
                       ("s3", "_Send", ["c"], "edge_3"))
    receiver = partition(("r1", "_HostRecv", [], "edge_1"), ("r2", "_HostRecv", [], "edge_2"),
                         ("r3", "_Recv", [], "edge_3"), ("r4", "_Recv", [], "edge_4"))
    assert received_tensors([sender, receiver]) == {"a/shape:0", "b:1", "c:0"}


@pytest.fixture(scope="module")
def control_fan_in():
    """`d0/gated` waits for three ops of device 1 through control edges only; `d1/producer` feeds `d0/reader`,
    and its control edge to `d0/after` is implied by producer -> reader -> after."""
    def build():
        with tf.name_scope("d1"):
            waited = [tf.sqrt(tf.random.uniform([1000], seed=s), name=f"waited{s}") for s in (1, 2, 3)]
            producer = tf.sqrt(tf.random.uniform([ELEMENTS], seed=4), name="producer")
        with tf.name_scope("d0"):
            seed = tf.random.uniform([4], seed=5)
            with tf.control_dependencies(waited):
                gated = tf.sqrt(seed, name="gated")
            reader = tf.square(producer, name="reader")
            after = tf.reduce_sum(reader, name="after")
            after.op._add_control_input(producer.op)
            # Fetched as data: grappler removes stateless ops whose outputs only control others.
            return tf.add(tf.reduce_sum(gated), after, name="train_op")

    return graph_from_function(build, name="control-fan-in")


FAN_IN_COSTS = {"d1/waited1": 1, "d1/waited2": 3, "d1/waited3": 2, "d1/producer": 1, "d0/gated": 1, "d0/reader": 1,
                "d0/after": 1, "d0/train_op": 1}


@pytest.mark.parametrize("on_cores", [False, True])
def test_control_inputs_from_one_device_cost_one_transfer_and_implied_ones_none(control_fan_in, on_cores):
    """Grappler drops the implied control edge and groups the three control inputs of `gated` behind one
    NoOp on device 1: the step sends the producer's tensor and one control message, which leaves when the
    last of the three is done."""
    graph = control_fan_in
    devices = two_devices(latency=0.5 * MS)
    config = SimulatorConfig(send_cpu=0.1 * MS, recv_cpu=0.1 * MS) if on_cores else SimulatorConfig()
    result = Simulator(graph, devices, costs(graph, FAN_IN_COSTS), config).simulate(
        place(graph, devices, **{"d1/": 1}), timeline=True)
    assert sorted(t.tensor.rsplit(":", 1)[1] for t in result.transfers) == ["0", "control"]
    (control,) = [t for t in result.transfers if t.tensor.endswith(":control")]
    ends = {op.name: op.end for op in result.ops}
    last_waited = max(ends[f"d1/waited{s}"] for s in (1, 2, 3))
    assert control.start >= last_waited - 1e-12
    start_of_gated = next(op.start for op in result.ops if op.name == "d0/gated")
    assert start_of_gated >= last_waited + 0.5 * MS - 1e-12


def test_the_simulator_sends_what_the_partitioned_graph_tensorflow_runs_receives(control_fan_in, cpus2):
    graph = control_fan_in
    received = partition_receives(graph, place(graph, cpus2, **{"d1/": 1}).op_devices(graph))

    devices = two_devices()
    simulated = Simulator(graph, devices, costs(graph, FAN_IN_COSTS)).simulate(
        place(graph, devices, **{"d1/": 1}), timeline=True)
    assert len(received) == len(simulated.transfers) == 2
