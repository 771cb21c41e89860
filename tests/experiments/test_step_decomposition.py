import pytest

from experiments.probes.step_decomposition import _busy_text, cross_device_hops
from placer.timeline import Span, StepTimeline

W0, W1 = "/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0"
# `made` on worker 0 reaches `used` on worker 1 through an Identity grappler folds away (never traced);
# `local` follows `made` on worker 0.
OP_DEVICES = {"made": W0, "identity": W0, "local": W0, "used": W1}
INPUTS = {"identity": ("made",), "local": ("made",), "used": ("identity",)}


def _timeline(made_end: float, used_start: float) -> StepTimeline:
    spans = (Span("worker:0/CPU:0", "Sqrt", "op", 0.0, made_end, "made"),
             Span("worker:0/CPU:0", "Sqrt", "op", made_end, 1e-3, "local"),
             Span("worker:1/CPU:0", "Sqrt", "op", used_start, 1e-3, "used"))
    return StepTimeline(("worker:0/CPU:0", "worker:1/CPU:0"), spans)


def test_each_hop_is_listed_traced_and_simulated_through_ops_the_traces_lack():
    traced = [_timeline(1e-3, 2e-3), _timeline(1e-3, 4e-3), _timeline(2e-3, 3e-3)]
    (hop,) = cross_device_hops(OP_DEVICES, INPUTS, traced, _timeline(1e-3, 1.5e-3))
    assert (hop["producer"], hop["consumer"]) == ("made", "used")
    assert hop["hop"] == "worker:0/CPU:0 -> worker:1/CPU:0"
    assert hop["traced_end_ms"] == pytest.approx(1.0) and hop["traced_start_ms"] == pytest.approx(3.0)
    assert hop["traced_wait_ms"] == pytest.approx(1.0)  # the median of the waits 1, 3 and 1 ms
    assert hop["wait_range_ms"] == "1.00-3.00"
    assert hop["simulated_wait_ms"] == pytest.approx(0.5)


def test_a_hop_one_trace_lacks_is_left_out():
    lacking = StepTimeline(("worker:0/CPU:0",), _timeline(1e-3, 2e-3).spans[:2])
    assert cross_device_hops(OP_DEVICES, INPUTS, [_timeline(1e-3, 2e-3), lacking], _timeline(1e-3, 2e-3)) == []


def test_a_hop_says_whether_its_sender_kept_computing_and_its_producer_was_the_last_input():
    from experiments.probes.step_decomposition import annotate_sends, sends_by_kind

    # Worker 0 goes on with `local` after `made` (0-1 ms); `late`, the consumer's other input, ends at 0.5 ms.
    inputs = {**INPUTS, "used": ("identity", "late")}
    late = Span("worker:1/CPU:0", "Sqrt", "op", 0.0, 0.5e-3, "late")
    traced = [StepTimeline(t.devices, t.spans + (late,)) for t in (_timeline(1e-3, 2e-3), _timeline(1e-3, 3e-3))]
    (hop,) = cross_device_hops(OP_DEVICES, inputs, traced, _timeline(1e-3, 1.5e-3))
    annotate_sends([hop], {"made": 1}, inputs, traced)
    assert hop["sender_computing"] and hop["last_input"] and hop["beside_send"] == 1
    assert sends_by_kind("split", [hop]) == [{"layout": "split", "beside_send": "some", "hops": 1,
                                              "traced_wait_ms": pytest.approx(1.5),
                                              "simulated_wait_ms": pytest.approx(0.5)}]
    # Ending after `made`, `late` is what the consumer waited for: the hop is left out of the summary.
    later = [StepTimeline(t.devices, t.spans[:3] + (Span("worker:1/CPU:0", "Sqrt", "op", 0.0, 1.8e-3, "late"),))
             for t in traced]
    (hop,) = cross_device_hops(OP_DEVICES, inputs, later, _timeline(1e-3, 1.5e-3))
    annotate_sends([hop], {}, inputs, later)
    assert hop["sender_computing"] and not hop["last_input"] and hop["beside_send"] is None
    assert sends_by_kind("split", [hop]) == []


def test_ops_beside_a_send_are_counted_in_the_partition_that_sends():
    import tensorflow as tf

    from placer.measure.partitions import ops_beside_sends

    def node(name, op, *inputs):
        return tf.compat.v1.NodeDef(name=name, op=op, input=list(inputs))

    sender = tf.compat.v1.GraphDef(node=[
        node("made", "Sqrt"), node("made/_0", "_Send", "made"), node("local", "Neg", "made"),
        node("after", "NoOp", "^made"),  # a control reader counts too
        node("alone", "Neg"), node("alone/_1", "_Send", "alone"), node("alone/_2", "_Send", "alone")])
    receiver = tf.compat.v1.GraphDef(node=[node("made/_3", "_Recv"), node("used", "Neg", "made/_3")])
    assert ops_beside_sends([sender, receiver]) == {"made": 2, "alone": 0}


def test_busy_time_names_each_worker_whichever_was_seen_first():
    # A trace lists devices in the order their ops appear: the table must say which worker carried the load.
    assert _busy_text({W1: 0.019, W0: 0.008}) == "worker:0/CPU:0 8.00 + worker:1/CPU:0 19.00"
