import pytest

from experiments.step_decomposition import cross_device_hops
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
