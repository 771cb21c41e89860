import os
import signal
import threading
import time
from dataclasses import replace

import pytest
import tensorflow as tf

from placer.cost import StepTime
from placer.graph import graph_from_function
from placer.measure import MeasureConfig, Measurer
from placer.measure.runner import LoadedGraph
from placer.placement import Placement

QUICK = MeasureConfig(warmup_steps=1, timed_steps=3, step_timeout=20)


@pytest.fixture(scope="module")
def measurer():
    with Measurer("inprocess:2", QUICK) as m:
        yield m


def _oom_graph():
    def build():
        w = tf.compat.v1.get_variable("w", [1], use_resource=True)
        huge = tf.random.uniform([2**40], name="four_terabytes")  # more than any machine's memory
        loss = tf.reduce_sum(huge) * w[0]  # the gradient needs `huge`, so every step computes it
        return tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss), loss

    return graph_from_function(build, name="oom")


def _hanging_graph():
    def build():
        queue = tf.queue.FIFOQueue(1, tf.float32, shapes=[[]])
        w = tf.compat.v1.get_variable("w", [], use_resource=True)
        loss = queue.dequeue() * w  # nothing is ever enqueued: the step waits forever
        return tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss), loss

    return graph_from_function(build, name="hang")


def test_measurement_returns_timed_samples_and_checks_the_placement(measurer, mlp):
    result = measurer.measure(mlp, Placement.round_robin(mlp, measurer.devices))
    assert result.ok, result.failure
    assert len(result.samples) == QUICK.timed_steps and all(s > 0 for s in result.samples)
    assert result.median == sorted(result.samples)[1]
    assert result.ops_checked > 20
    # The only deviation allowed: grappler fusing an op into its producer's kernel (e.g. MatMul+BiasAdd)
    # on the producer's device, which the result names.
    assert all(m.ran_as for m in result.moved_ops), result.moved_ops
    assert set(result.overhead) == {"graph_rewrite", "session", "init", "first_step"}


def test_every_profiled_step_s_trace_is_kept_only_when_asked(measurer, mlp):
    import json

    placement = Placement.round_robin(mlp, measurer.devices)
    kept = measurer.measure(mlp, placement, replace(QUICK, profile_steps=3, keep_every_trace=True))
    assert kept.ok and len(kept.chrome_traces) == 3 and kept.chrome_trace == kept.chrome_traces[-1]
    assert all(json.loads(trace)["traceEvents"] for trace in kept.chrome_traces)
    last_only = measurer.measure(mlp, placement, replace(QUICK, profile_steps=3))
    assert last_only.ok and last_only.chrome_trace and last_only.chrome_traces == ()


def test_op_moved_by_soft_placement_is_reported(mlp):
    """An op TensorFlow cannot put where asked (here: a device that does not exist) is moved, and reported."""
    op_devices = {op.name: "/job:localhost/replica:0/task:0/device:CPU:0" for op in mlp.ops}
    moved_group = mlp.group("dense/kernel")
    for name in moved_group.ops:
        op_devices[name] = "/job:localhost/replica:0/task:0/device:CPU:7"
    graph_def = tf.compat.v1.GraphDef.FromString(mlp.graph_def)
    result = LoadedGraph(graph_def, mlp.train_op, mlp.init_op).measure(op_devices, "", QUICK)
    assert result.ok
    moved = {m.op for m in result.moved_ops}
    assert "dense/kernel" in moved or moved & set(moved_group.ops)
    assert all(m.requested.endswith("CPU:7") and m.actual.endswith("CPU:0") for m in result.moved_ops)
    assert "TensorFlow moved" in StepTime.from_measurement(result).describe()  # what `placer measure` prints


def test_out_of_memory_is_a_failed_result_and_measuring_goes_on(measurer, mlp):
    graph = _oom_graph()
    result = measurer.measure(graph, Placement.on_device(graph, measurer.devices, 0))
    assert not result.ok and result.failure.kind == "oom", result.failure
    assert result.median == float("inf")
    assert measurer.measure(mlp, Placement.on_device(mlp, measurer.devices, 0)).ok


def test_hung_step_fails_with_timeout_and_measuring_goes_on(measurer, mlp):
    graph = _hanging_graph()
    started = time.monotonic()
    config = MeasureConfig(warmup_steps=1, timed_steps=1, step_timeout=2)
    result = measurer.measure(graph, Placement.on_device(graph, measurer.devices, 0), config)
    assert not result.ok and result.failure.kind == "timeout", result.failure
    assert time.monotonic() - started < 30
    assert measurer.measure(mlp, Placement.on_device(mlp, measurer.devices, 0)).ok


def test_a_worker_killed_while_measuring_is_started_again_and_the_placement_measured_again(slow_graph, caplog):
    graph = slow_graph
    with Measurer("inprocess:1", MeasureConfig(warmup_steps=1, timed_steps=1, timed_seconds=3.0)) as measurer:
        placement = Placement.on_device(graph, measurer.devices, 0)
        assert measurer.measure(graph, placement, QUICK).ok  # loaded, so the kill lands in the timed steps
        pid = measurer.worker_pid
        threading.Timer(1.0, os.kill, (pid, signal.SIGKILL)).start()
        with caplog.at_level("WARNING", logger="placer.measure"):
            result = measurer.measure(graph, placement)
        assert result.ok, result.failure  # the machinery's failure is not the placement's
        assert measurer.restarts == 1 and measurer.worker_pid != pid
        assert "died while measuring a placement of 'slow'" in caplog.text and "measured again" in caplog.text


def test_a_placement_the_worker_dies_on_twice_is_reported_as_a_crash(mlp, monkeypatch):
    from placer.measure.result import Failure, Measurement

    measurer = Measurer("inprocess:1")
    outcomes = [Measurement(failure=Failure("crash", "worker died")), Measurement(samples=(0.01,))]
    monkeypatch.setattr(measurer, "start", lambda: None)
    monkeypatch.setattr(measurer, "_measure_once", lambda graph, op_devices, config: outcomes.pop(0))
    from placer.devices import local_devices

    devices = local_devices(logical_cpus=1)
    measurer._hello = {"devices": devices}
    placement = Placement.on_device(mlp, devices, 0)
    assert measurer.measure(mlp, placement).ok and not outcomes  # died once: measured again, and it ran
    outcomes[:] = [Measurement(failure=Failure("crash", "worker died"))] * 2
    twice = measurer.measure(mlp, placement)
    assert twice.failure.kind == "crash" and "died on this placement twice" in twice.failure.message
    outcomes[:] = [Measurement(failure=Failure("oom", "out of memory"))]
    assert measurer.measure(mlp, placement).failure.kind == "oom"  # the placement's own failure: not retried


def test_worker_that_never_answers_is_killed_at_the_backstop(mlp):
    """If even TensorFlow's own step deadline fails to fire, the caller's backstop kills the worker."""
    graph = _hanging_graph()
    with Measurer("inprocess:1") as measurer:
        placement = Placement.on_device(graph, measurer.devices, 0)
        backstop = MeasureConfig(warmup_steps=1, timed_steps=1, step_timeout=300, answer_timeout=3.0)
        started = time.monotonic()
        result = measurer.measure(graph, placement, backstop)
        assert result.failure.kind == "timeout" and time.monotonic() - started < 20
        assert measurer.restarts == 1
        assert measurer.measure(mlp, Placement.on_device(mlp, measurer.devices, 0)).ok


def _op_devices_with_group_on(graph, group_name: str, device: str, default: str) -> dict[str, str]:
    op_devices = {op.name: default for op in graph.ops}
    for name in graph.group(group_name).ops:
        op_devices[name] = device
    return op_devices


def _loaded(graph):
    from placer.measure.runner import LoadedGraph

    return LoadedGraph(tf.compat.v1.GraphDef.FromString(graph.graph_def), graph.step_fetches, graph.init_op,
                       frozenset(op.name for op in graph.ops if op.in_step), {op.name: op.group for op in graph.ops})


def test_reused_graph_gets_the_devices_a_fresh_import_would_give(mlp, cpus2):
    loaded = _loaded(mlp)
    for placement in (Placement.round_robin(mlp, cpus2), Placement.on_device(mlp, cpus2, 0),
                      Placement.round_robin(mlp, cpus2)):
        op_devices = placement.op_devices(mlp)
        kept = {node.name: node.device for node in loaded.placed_graph(op_devices).as_graph_def().node}
        fresh = {node.name: node.device for node in loaded.placed_graph(op_devices, reuse=False).as_graph_def().node}
        assert kept == fresh
        assert len(set(kept.values())) == len(set(op_devices.values()))


def test_reused_graph_runs_on_the_new_devices_and_a_wrong_device_is_still_caught(mlp):
    """One imported graph, several placements: each session uses the devices set for it, so the trace of a placement
    asking for a device that does not exist shows the move. A group moved by soft placement is never taken as
    confirmed: placing it there again traces again and reports the move again."""
    cpu0, cpu7 = "/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:7"
    loaded = _loaded(mlp)
    good = {op.name: cpu0 for op in mlp.ops}
    wrong = _op_devices_with_group_on(mlp, "dense/kernel", cpu7, cpu0)
    first = loaded.measure(good, "", QUICK)
    assert first.ok and first.placement_check == "traced" and not first.moved_ops, first.failure
    for _ in range(2):
        moved = loaded.measure(wrong, "", QUICK)
        assert moved.placement_check == "traced"
        assert moved.moved_ops and all(m.requested.endswith("CPU:7") for m in moved.moved_ops), (moved.failure, moved.moved_ops)
    again = loaded.measure(good, "", QUICK)
    assert again.ok and not again.moved_ops and again.placement_check == "reused"
    assert loaded.traced_steps == 3


def test_placements_whose_pairs_were_confirmed_are_not_traced_again(mlp, cpus2):
    """Only placements with a (colocation group, device) pair no earlier trace confirmed are traced. Round-robin
    splits MatMul from its BiasAdd, which grappler fuses and runs on the MatMul's device: that fusion move is
    remembered with the devices around it and reported again, exactly as the trace reported it."""
    loaded = _loaded(mlp)
    round_robin = Placement.round_robin(mlp, cpus2).op_devices(mlp)
    single = Placement.on_device(mlp, cpus2, 0).op_devices(mlp)
    checks = [loaded.measure(op_devices, "", QUICK, local_cpus=2)
              for op_devices in (round_robin, single, round_robin, single, round_robin)]
    assert all(m.ok for m in checks), [m.failure for m in checks]
    assert [m.placement_check for m in checks] == ["traced", "traced", "reused", "reused", "reused"]
    assert loaded.traced_steps == 2
    assert checks[0].moved_ops and all(m.ran_as for m in checks[0].moved_ops)
    for traced, reused in ((checks[0], checks[2]), (checks[1], checks[3]), (checks[0], checks[4])):
        assert (reused.moved_ops, reused.ops_checked, reused.ops_not_traced) == (
            traced.moved_ops, traced.ops_checked, traced.ops_not_traced)
    # a placement with one group somewhere new is traced again
    moved_one = dict(single)
    for name in mlp.group("dense/kernel").ops:
        moved_one[name] = round_robin[name] if round_robin[name] != single[name] else "/device:CPU:1"
    traced = loaded.traced_steps
    assert loaded.measure(moved_one, "", QUICK, local_cpus=2).placement_check == "traced"
    # and every placement is traced when asked to
    forced = loaded.measure(single, "", replace(QUICK, trace_every_placement=True), local_cpus=2)
    assert forced.placement_check == "traced" and loaded.traced_steps == traced + 2


def test_measurer_traces_a_repeated_placement_once(measurer, two_tower):
    placement = Placement.on_device(two_tower, measurer.devices, 0)
    first, second = (measurer.measure(two_tower, placement) for _ in range(2))
    assert first.ok and second.ok, (first.failure, second.failure)
    assert (first.placement_check, second.placement_check) == ("traced", "reused")
    assert second.ops_checked == first.ops_checked > 0 and not second.moved_ops
    assert "earlier traced steps" in StepTime.from_measurement(second).describe()


def test_session_left_open_for_the_answer_is_closed_before_the_next_placement(mlp, cpus2):
    loaded = _loaded(mlp)
    first = loaded.measure(Placement.round_robin(mlp, cpus2).op_devices(mlp), "", QUICK, 2, close_later=True)
    assert first.ok and loaded._unclosed is not None
    left_open = loaded._unclosed
    second = loaded.measure(Placement.on_device(mlp, cpus2, 0).op_devices(mlp), "", QUICK, 2)
    assert second.ok and left_open._closed and loaded._unclosed is None


def test_a_kept_session_times_its_placement_again_without_setting_it_up_and_the_oldest_is_closed_first(mlp, cpus2):
    loaded = _loaded(mlp)
    kept = replace(QUICK, kept_sessions=2)
    placements = [Placement.round_robin(mlp, cpus2).op_devices(mlp), Placement.on_device(mlp, cpus2, 0).op_devices(mlp),
                  Placement.on_device(mlp, cpus2, 1).op_devices(mlp)]
    first = loaded.measure(placements[0], "", kept, 2)
    again = loaded.measure(placements[0], "", kept, 2)
    assert first.ok and again.ok and len(again.samples) == len(first.samples)
    assert first.overhead["init"] > 0 and again.overhead["init"] < 1e-3 and again.overhead["graph_rewrite"] < 1e-3
    assert again.placement_check == "reused" and again.moved_ops == first.moved_ops
    oldest = loaded._kept[next(iter(loaded._kept))]
    loaded.measure(placements[1], "", kept, 2)
    loaded.measure(placements[2], "", kept, 2)  # a third placement: the least recently used session goes
    assert len(loaded._kept) == 2 and oldest._closed
    # another session configuration (threads) is another session, even for the same placement
    loaded.measure(placements[2], "", kept, 2, threads=(1, 1))
    assert len(loaded._kept) == 2
    loaded.measure(placements[1], "", QUICK, 2)  # a measurement that keeps no session closes the kept ones
    assert not loaded._kept


def test_no_session_is_kept_while_the_machine_is_short_of_memory(mlp, cpus2, monkeypatch):
    import placer.measure.runner as runner

    loaded = _loaded(mlp)
    kept = replace(QUICK, kept_sessions=2)
    monkeypatch.setattr(runner, "memory_available", lambda: 2**30)
    monkeypatch.setattr(runner, "memory_total", lambda: 16 * 2**30)
    assert loaded.measure(Placement.round_robin(mlp, cpus2).op_devices(mlp), "", kept, 2).ok
    assert not loaded._kept
    monkeypatch.setattr(runner, "memory_available", lambda: 8 * 2**30)
    assert loaded.measure(Placement.round_robin(mlp, cpus2).op_devices(mlp), "", kept, 2).ok
    assert len(loaded._kept) == 1


def test_a_session_is_kept_only_while_the_memory_left_would_hold_one_more_new_session(mlp, cpus2, monkeypatch):
    """A new session of a 40k-op graph grew the testbed's processes by gigabytes; keeping sessions while 25 % of the
    memory was free let the next one push a server out of memory."""
    import placer.measure.runner as runner

    loaded = _loaded(mlp)
    kept = replace(QUICK, kept_sessions=4)
    gib = 2**30
    resident = iter([1 * gib, 4 * gib, 4 * gib, 4 * gib])  # the first new session grows the processes by 3 GiB
    monkeypatch.setattr(runner, "own_and_descendants_resident_bytes", lambda: next(resident))
    monkeypatch.setattr(runner, "memory_total", lambda: 16 * gib)  # 4 GiB kept free
    monkeypatch.setattr(runner, "memory_available", lambda: 6 * gib)  # above 4 GiB, but not with 3 GiB more
    assert loaded.measure(Placement.round_robin(mlp, cpus2).op_devices(mlp), "", kept, 2).ok
    assert loaded.session_bytes == 3 * gib and not loaded._kept
    monkeypatch.setattr(runner, "memory_available", lambda: 8 * gib)
    assert loaded.measure(Placement.round_robin(mlp, cpus2).op_devices(mlp), "", kept, 2).ok
    assert loaded.session_bytes == 3 * gib and len(loaded._kept) == 1  # the second grew nothing: still 3 GiB


def _fake_process_memory(measurer, monkeypatch, grows_by: int) -> dict[int, int]:
    """Each worker process holds 1 GiB when started, and every measurement grows it by `grows_by` (a TensorFlow
    process keeps what a closed session of a big graph held)."""
    import placer.measure.service as service

    resident: dict[int, int] = {}
    monkeypatch.setattr(service, "tree_resident_bytes", lambda pid: {pid: resident.setdefault(pid, 2**30)})
    request = measurer._request_measurement

    def measure_and_grow(*args):
        result = request(*args)
        resident[measurer.worker_pid] = resident.setdefault(measurer.worker_pid, 2**30) + grows_by
        return result

    monkeypatch.setattr(measurer, "_request_measurement", measure_and_grow)
    return resident


def test_a_worker_whose_past_sessions_hold_the_memory_the_next_needs_is_started_afresh(mlp, monkeypatch):
    import placer.measure.service as service

    gib = 2**30
    monkeypatch.setattr(service, "memory_total", lambda: 16 * gib)  # 1.6 GiB kept free
    measurer = Measurer("inprocess:1", QUICK)
    _fake_process_memory(measurer, monkeypatch, grows_by=3 * gib)
    with measurer:
        placement = Placement.on_device(mlp, measurer.devices, 0)
        first = measurer.worker_pid
        monkeypatch.setattr(service, "memory_available", lambda: 12 * gib)
        assert measurer.measure(mlp, placement).ok
        assert measurer.session_bytes(mlp) == 3 * gib and measurer.held_bytes == 3 * gib
        assert measurer.process_bytes(mlp) == 4 * gib  # the fresh gibibyte and the session's three
        assert measurer.measure(mlp, placement).ok and measurer.worker_pid == first  # room for 3 GiB more
        assert measurer.held_bytes == 6 * gib
        assert measurer.process_bytes(mlp) == 4 * gib  # not 7: the first session's three are not a fresh one's
        monkeypatch.setattr(service, "memory_available", lambda: 4 * gib)  # 3 GiB more would leave 1 GiB
        result = measurer.measure(mlp, placement)
        assert result.ok, result.failure
        assert measurer.worker_pid != first and measurer.memory_restarts == 1 and measurer.restarts == 0
        assert measurer.held_bytes == 3 * gib  # the fresh worker's one session


def test_a_worker_that_gives_back_too_little_is_not_restarted_and_release_gives_back_what_it_holds(mlp, monkeypatch):
    import placer.measure.service as service

    gib = 2**30
    monkeypatch.setattr(service, "memory_total", lambda: 16 * gib)
    measurer = Measurer("inprocess:1", QUICK)
    resident = _fake_process_memory(measurer, monkeypatch, grows_by=3 * gib)
    with measurer:
        placement = Placement.on_device(mlp, measurer.devices, 0)
        monkeypatch.setattr(service, "memory_available", lambda: 12 * gib)
        assert measurer.measure(mlp, placement).ok
        first = measurer.worker_pid
        resident[first] = 2**30 + gib // 4  # its session's memory given back but a quarter GiB
        monkeypatch.setattr(service, "memory_available", lambda: 4 * gib)
        assert measurer.measure(mlp, placement).ok and measurer.worker_pid == first  # a restart frees too little
        assert measurer.release_memory() == gib // 4 + 3 * gib and measurer.worker_pid != first
        assert measurer.release_memory() == 0 and measurer.memory_restarts == 1  # fresh: nothing to give back


def test_a_session_error_is_summed_up_by_its_cause_and_node_not_by_its_header():
    from placer.measure.runner import _first_line

    error = tf.errors.NotFoundError(None, None, "Graph execution error:\n\n"
                                    "Detected at node 'lookup' defined at (most recent call last):\n"
                                    '  File "model.py", line 3, in build\n'
                                    "Node: 'lookup'\n"
                                    "Container localhost does not exist. (Could not find resource: localhost/table)\n"
                                    "\t [[{{node lookup}}]]\n")
    assert _first_line(error) == ("Container localhost does not exist. (Could not find resource: localhost/table) "
                                  "(at node 'lookup')")
    assert _first_line(tf.errors.InternalError(None, None, "plain message\nmore")) == "plain message"


def _traced(*steps):
    """RunMetadata of hand-built steps: each a list of (node, start µs, end µs) on one CPU device."""
    from tensorflow.core.protobuf import config_pb2

    traces = []
    for spans in steps:
        metadata = config_pb2.RunMetadata()
        device = metadata.step_stats.dev_stats.add(device="/job:worker/replica:0/task:0/device:CPU:0")
        for name, begin, end in spans:
            device.node_stats.add(node_name=name, all_start_micros=begin, op_start_rel_micros=0,
                                         op_end_rel_micros=end - begin, timeline_label=f"{name} = MatMul(x, y)")
        traces.append(metadata)
    return traces


def test_an_op_run_inside_another_ops_span_on_one_core_is_charged_its_whole_run():
    from placer.measure.runner import op_times_from_traces

    # Tower A's op started first; tower B's started 100 µs in, ran 150 µs while A's thread waited, then A finished.
    times = op_times_from_traces(_traced([("a", 1000, 1400), ("b", 1100, 1250)]), cores=1)
    assert times["b"].seconds == pytest.approx(150e-6)
    assert times["a"].seconds == pytest.approx(250e-6)
    assert times["a"].seconds + times["b"].seconds == pytest.approx(400e-6)  # the core's time, counted once


def test_ops_overlapping_on_two_cores_are_each_charged_their_span():
    from placer.measure.runner import op_times_from_traces

    times = op_times_from_traces(_traced([("a", 0, 400), ("b", 100, 250)]), cores=2)
    assert times["a"].seconds == pytest.approx(400e-6)
    assert times["b"].seconds == pytest.approx(150e-6)


def test_of_three_ops_in_progress_on_two_cores_the_two_started_last_hold_them():
    from placer.measure.runner import op_times_from_traces

    times = op_times_from_traces(_traced([("a", 0, 600), ("b", 100, 300), ("c", 200, 400)]), cores=2)
    # 0-100 a; 100-200 a, b; 200-300 b, c (a waits); 300-400 a, c; 400-600 a
    assert times["a"].seconds == pytest.approx(500e-6)
    assert times["b"].seconds == pytest.approx(200e-6)
    assert times["c"].seconds == pytest.approx(200e-6)


def test_an_op_keeps_the_median_of_its_traced_steps():
    from placer.measure.runner import op_times_from_traces

    times = op_times_from_traces(_traced([("a", 0, 100)], [("a", 0, 300)], [("a", 0, 120)]), cores=1)
    assert times["a"].seconds == pytest.approx(120e-6)


def test_a_worker_thread_that_exits_during_the_timed_steps_does_not_take_its_past_off_the_steps_cpu_time():
    from placer.measure.runner import growth_since

    before = {1: 5.0, 2: 0.010, 3: 0.002}  # thread 2 ran 10 ms before the steps, then exits during them
    after = {1: 5.003, 3: 0.004, 4: 0.001}  # thread 4 started during the steps
    assert growth_since(before, after) == pytest.approx(0.003 + 0.002 + 0.001)
    # a new thread that was given an exited thread's id counts from zero
    assert growth_since({7: 0.5}, {7: 0.002}) == pytest.approx(0.002)


def test_a_process_cpu_reading_counts_the_threads_it_runs():
    from placer.measure.runner import growth_since, thread_cpu_seconds

    before = thread_cpu_seconds(os.getpid())
    assert threading.get_native_id() in before
    spin = threading.Thread(target=lambda: sum(range(3_000_000)))
    spin.start()
    spin.join()  # the spinning thread is gone, its CPU time with it: only this thread's own work is left
    # Spin for 0.05 s of this thread's own CPU time, not of the wall clock: on a busy machine a wall-clock spin
    # may get less of a core than it lasts.
    deadline = time.thread_time() + 0.05
    while time.thread_time() < deadline:
        pass
    assert growth_since(before, thread_cpu_seconds(os.getpid())) >= 0.04


def test_short_steps_are_timed_for_at_least_the_seconds_asked_and_at_most_max_timed_steps(measurer, mlp):
    from placer.measure.config import MAX_TIMED_STEPS

    placement = Placement.on_device(mlp, measurer.devices, 0)
    result = measurer.measure(mlp, placement, replace(QUICK, timed_seconds=0.25))
    assert result.ok and len(result.samples) > QUICK.timed_steps
    assert sum(result.samples) >= 0.2 or len(result.samples) == MAX_TIMED_STEPS
    plain = measurer.measure(mlp, placement, QUICK)
    assert len(plain.samples) == QUICK.timed_steps  # without timed_seconds, exactly the steps asked for
    # the caller's backstop leaves room for the extra seconds
    assert replace(QUICK, timed_seconds=5.0).total_timeout == QUICK.total_timeout + 5.0 + QUICK.step_timeout


def test_a_thread_that_waits_is_counted_switching_out():
    from placer.measure.runner import growth_since, thread_context_switches

    before = thread_context_switches(os.getpid())
    assert threading.get_native_id() in before
    for _ in range(20):
        time.sleep(0.001)  # each sleep gives the core up: a voluntary switch
    assert growth_since(before, thread_context_switches(os.getpid())) >= 20


@pytest.mark.slow  # about 20 s; a worker killed while measuring is tested in the default run
@pytest.mark.testbed
def test_a_testbed_server_killed_mid_step_is_answered_at_once_and_the_placement_measured_again(slow_graph, caplog):
    graph = slow_graph
    config = MeasureConfig(warmup_steps=1, timed_steps=1, timed_seconds=3.0)
    with Measurer("local:2", config) as measurer:
        placement = Placement.on_device(graph, measurer.devices, 0)
        assert measurer.measure(graph, placement, QUICK).ok  # loaded, so the kill lands in the timed steps
        server = measurer.testbed_info["pids"][0]
        threading.Timer(1.0, os.kill, (server, signal.SIGKILL)).start()
        started = time.monotonic()
        with caplog.at_level("WARNING", logger="placer.measure"):
            result = measurer.measure(graph, placement)
        # TensorFlow's client alone waits on a dead server up to the caller's backstop (20 min by default)
        assert time.monotonic() - started < 60
        assert result.ok, result.failure  # the machinery's failure is not the placement's
        assert measurer.restarts == 1 and "testbed worker 0 exited with code -9" in caplog.text
