"""PlacementChecks: which placements of a graph can reuse what earlier traced steps showed (no TensorFlow needed)."""

from placer.measure.placement_check import PlacementChecks, TracedStep
from placer.measure.result import MovedOp

A, B = "/device:CPU:0", "/device:CPU:1"
# matmul -> bias -> relu -> loss; grappler fuses the first three into one kernel named relu, on matmul's device
OPS = {"matmul": 0, "bias": 1, "relu": 2, "loss": 3}
INPUTS = {"matmul": [], "bias": ["matmul"], "relu": ["bias"], "loss": ["relu"]}
TYPES = {"matmul": "MatMul", "bias": "BiasAdd", "relu": "Relu", "loss": "Sum"}


def _checks():
    return PlacementChecks(OPS, INPUTS, TYPES, OPS)


def _fused_trace(devices):
    """What TensorFlow shows of the fused chain: relu ran as the fusion, on matmul's device; matmul and bias are gone."""
    return TracedStep({"relu": devices["matmul"], "loss": devices["loss"]}, {"relu": "_FusedMatMul", "loss": "Sum"})


def _record(checks, devices):
    trace = _fused_trace(devices)
    moved = [MovedOp(op, devices[op], actual, "_FusedMatMul" if op == "relu" else "")
             for op, actual in trace.ran_on.items() if actual != devices[op]]
    checks.record(devices, trace, moved, lambda name: name)
    return moved


def test_a_traced_placement_is_reused_with_its_counts():
    checks = _checks()
    placement = {"matmul": A, "bias": A, "relu": A, "loss": A}
    assert checks.reusable(placement) is None
    _record(checks, placement)
    reused = checks.reusable(placement)
    assert (reused.ops_checked, reused.ops_not_traced, reused.moved_ops) == (2, 2, ())


def test_fused_chain_is_traced_again_when_any_of_its_devices_changes():
    """The fusion moves relu only when matmul, two ops up the chain, sits elsewhere: the whole chain keys it."""
    checks = _checks()
    _record(checks, {"matmul": A, "bias": A, "relu": A, "loss": A})
    _record(checks, {"matmul": B, "bias": B, "relu": B, "loss": A})
    assert checks.reusable({"matmul": B, "bias": A, "relu": A, "loss": A}) is None
    assert checks.reusable({"matmul": A, "bias": A, "relu": B, "loss": A}) is None


def test_a_fusion_move_is_reported_again_when_reused():
    checks = _checks()
    split = {"matmul": B, "bias": A, "relu": A, "loss": A}
    moved = _record(checks, split)
    assert [m.op for m in moved] == ["relu"]
    assert checks.reusable(split).moved_ops == tuple(moved)


def test_a_group_moved_by_soft_placement_is_never_confirmed():
    checks = _checks()
    placement = {"matmul": A, "bias": A, "relu": A, "loss": B}
    trace = TracedStep({"relu": A, "loss": A}, {"relu": "_FusedMatMul", "loss": "Sum"})
    checks.record(placement, trace, [MovedOp("loss", B, A)], lambda name: name)
    assert checks.reusable(placement) is None
    assert checks.reusable({"matmul": A, "bias": A, "relu": A, "loss": A}) is None  # loss on A was never traced
