"""placer.timeline reads both Chrome traces placer writes into rows per device that a person can read."""

import json

import pytest

from placer.errors import TimelineError
from placer.simulate.result import SimResult, SimulatedOp, SimulatedTransfer
from placer.timeline import Span, StepTimeline, critical_path, read_chrome_trace

WORKER = "/job:worker/replica:0/task:{}/device:CPU:0"


def _tf_trace() -> dict:
    """A traced real step on the testbed as TensorFlow's Timeline writes it: the machine clock's microseconds, two
    processes per device (the first of each empty), the received tensors as RecvTensor ops."""
    events = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "Allocators"}}]
    for pid, task in enumerate([0, 1, 1, 0], start=1):
        events.append({"ph": "M", "name": "process_name", "pid": 2 * pid - 1, "args": {"name": WORKER.format(task) + " Compute"}})
        events.append({"ph": "M", "name": "process_name", "pid": 2 * pid, "args": {"name": WORKER.format(task) + " Tensors"}})
    start = 1_795_459_166_519_062
    events += [
        {"ph": "X", "cat": "Op", "name": "w0/read", "pid": 7, "tid": 0, "ts": start, "dur": 100, "args": {"op": "ReadVariableOp"}},
        {"ph": "X", "cat": "Op", "name": "matmul", "pid": 7, "tid": 0, "ts": start + 150, "dur": 250, "args": {"op": "_MklMatMul"}},
        {"ph": "X", "cat": "Op", "name": "relu", "pid": 7, "tid": 1, "ts": start + 300, "dur": 200, "args": {"op": "Relu"}},
        {"ph": "X", "cat": "Op", "name": "RecvTensor", "pid": 5, "tid": 0, "ts": start + 500, "dur": 300,
         "args": {"name": "RecvTensor", "op": "RecvTensor"}},
        {"ph": "X", "cat": "Op", "name": "loss", "pid": 5, "tid": 0, "ts": start + 800, "dur": 200, "args": {"op": "Mean"}},
    ]
    return {"traceEvents": events}


def test_a_measured_trace_gives_each_worker_its_own_row_from_the_step_start():
    timeline = read_chrome_trace(json.dumps(_tf_trace()))
    assert timeline.devices == ("worker:0/CPU:0", "worker:1/CPU:0")
    assert [(s.device, s.kind, s.start) for s in timeline.spans][:1] == [("worker:0/CPU:0", "op", 0.0)]
    assert timeline.step_time == pytest.approx(1e-3)
    (received,) = timeline.on("worker:1/CPU:0", "transfer")
    assert received.start == pytest.approx(500e-6) and received.duration == pytest.approx(300e-6)
    # concurrent ops count once: 0-100, 150-500 us
    assert timeline.busy("worker:0/CPU:0") == pytest.approx(450e-6)
    assert timeline.busy("worker:1/CPU:0") == pytest.approx(200e-6)


def test_a_simulated_trace_keeps_ops_and_transfers_apart(tmp_path):
    gpu = "/job:localhost/replica:0/task:0/device:GPU:{}"
    result = SimResult(step_time=3e-3, device_busy={}, peak_memory={}, link_bytes={},
                       ops=(SimulatedOp("a", gpu.format(0), 0.0, 1e-3), SimulatedOp("b", gpu.format(1), 2e-3, 3e-3)),
                       transfers=(SimulatedTransfer("a:0", gpu.format(0), gpu.format(1), 1e-3, 2e-3, 1024),))
    trace = result.save_chrome_trace(tmp_path / "timeline.json")
    # in Perfetto, each device's tracks say what they hold
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in json.loads(trace.read_text())["traceEvents"]
               if e["name"] == "thread_name"}
    assert sorted(threads.values()) == ["ops", "ops", "tensors from GPU:0"]
    timeline = read_chrome_trace(trace)
    assert timeline.devices == ("GPU:0", "GPU:1")
    assert [(s.device, s.name, s.kind) for s in timeline.spans] == [
        ("GPU:0", "a", "op"), ("GPU:1", "recv a:0", "transfer"), ("GPU:1", "b", "op")]
    assert timeline.step_time == pytest.approx(3e-3) and timeline.busy("GPU:1") == pytest.approx(1e-3)


@pytest.mark.parametrize("trace, message", [
    ("{not json", "not JSON"),
    ({"events": []}, "'traceEvents' list"),
    ({"traceEvents": [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "Allocators"}},
                      {"ph": "X", "name": "x", "pid": 0, "ts": 0, "dur": 1}]}, "no op on any device"),
])
def test_what_is_no_timeline_is_refused_with_a_reason(trace, message):
    with pytest.raises(TimelineError, match=message):
        read_chrome_trace(trace)


def _span(device, node, start_us, duration_us, kind="op"):
    return Span(device, node, kind, start_us * 1e-6, duration_us * 1e-6, node)


def test_the_critical_path_names_each_wait_on_it_by_its_cause():
    # worker 0: a (0-100), b (100-300, needs a), send_side (300-350); worker 1: c (50-150), d (2300-2400, needs
    # b: the tensor arrived 2 ms after b ended), then e on worker 1 (2400-2500) after d; worker 0's f (350-900)
    # runs meanwhile but nothing waits for it. The step's last op is e, so the path is a -> b -> d -> e.
    w0, w1 = "worker:0/CPU:0", "worker:1/CPU:0"
    spans = (_span(w0, "a", 0, 100), _span(w1, "c", 50, 100), _span(w0, "b", 100, 200), _span(w0, "f", 350, 550),
             _span(w1, "recv", 2250, 50, kind="transfer"), _span(w1, "d", 2300, 100), _span(w1, "e", 2400, 100))
    timeline = StepTimeline((w0, w1), spans)
    inputs = {"a": (), "b": ("a",), "c": (), "d": ("b", "c"), "e": ("d",), "f": ("b",)}
    links = critical_path(timeline, inputs)
    assert [(link.before.node, link.after.node, link.kind) for link in links] == [
        ("a", "b", "data"), ("b", "d", "hop"), ("d", "e", "data")]
    assert links[1].wait == pytest.approx(2e-3)
    assert sum(link.wait for link in links) + sum(s.duration for s in (spans[0], spans[2], spans[5], spans[6])) \
        == pytest.approx(timeline.step_time)


def test_an_op_that_waited_for_its_core_and_one_tensorflow_added_are_traced_back():
    # g's input (a) ended long before g started: g waited for its core, busy with h. "gather" is an op the
    # graph does not know (TensorFlow's cross-device control edges): it waits for the other device's last op.
    # An input the trace lacks (folded) is walked through to its own inputs.
    w0, w1 = "worker:0/CPU:0", "worker:1/CPU:0"
    spans = (_span(w0, "a", 0, 100), _span(w0, "h", 100, 400), _span(w0, "g", 510, 100),
             _span(w1, "k", 0, 300), _span(w1, "gather", 700, 10))
    inputs = {"a": (), "h": (), "g": ("folded",), "folded": ("a",), "k": ()}
    links = critical_path(StepTimeline((w0, w1), spans), inputs)
    assert [(link.before.node, link.after.node, link.kind) for link in links] == [
        ("a", "h", "core"), ("h", "g", "core"), ("g", "gather", "hop")]
    assert [link.wait for link in links] == pytest.approx([0.0, 10e-6, 90e-6])
