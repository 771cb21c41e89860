"""Schedule plans: every rule is checked on construction, metrics, the file format and the Chrome trace."""

import json

import pytest

from placer.errors import BlockTemplateError, InvalidScheduleError, ScheduleFileError
from placer.schedule import BlockSpec, BlockTemplate, SchedulePlan, ScheduledBlock, read_schedule_file, shape_template
from placer.schedule.standard import one_f_one_b


def two_stage():
    return shape_template("pipeline", 2)  # f0 (dev0) f1 (dev1) b1 (dev1, span 2) b0 (dev0, span 2)


def plan_from(template, starts, micro_batches=1, memory_limit=None):
    blocks = [ScheduledBlock(template.block(name), m, t) for (name, m), t in starts.items()]
    return SchedulePlan(template, micro_batches, tuple(blocks), "hand-made", memory_limit)


def test_a_hand_made_plan_reports_makespan_bubbles_and_peak_memory():
    plan = plan_from(two_stage(), {("f0", 0): 0, ("f1", 0): 1, ("b1", 0): 2, ("b0", 0): 4})
    assert plan.makespan == 6
    assert plan.bubble_rate == pytest.approx(1 - 6 / 12)
    assert plan.peak_memory() == {"dev0": 1, "dev1": 1}


def test_a_block_that_starts_before_its_dependency_ends_is_refused():
    with pytest.raises(InvalidScheduleError, match="before 'f1'"):
        plan_from(two_stage(), {("f0", 0): 0, ("f1", 0): 1, ("b1", 0): 1, ("b0", 0): 4})


def test_two_blocks_at_once_on_a_device_are_refused():
    starts = {("f0", 0): 0, ("f1", 0): 1, ("b1", 0): 2, ("b0", 0): 4,
              ("f0", 1): 4, ("f1", 1): 5, ("b1", 1): 6, ("b0", 1): 8}
    with pytest.raises(InvalidScheduleError, match="dev0 runs .* at once"):
        plan_from(two_stage(), starts, micro_batches=2)


def test_a_plan_over_the_memory_limit_is_refused_and_says_what_to_do():
    starts = {("f0", 0): 0, ("f1", 0): 1, ("b1", 0): 3, ("b0", 0): 5,
              ("f0", 1): 1, ("f1", 1): 2, ("b1", 1): 5, ("b0", 1): 7}
    plan = plan_from(two_stage(), starts, micro_batches=2)
    assert plan.peak_memory()["dev0"] == 2
    with pytest.raises(InvalidScheduleError, match="over the limit of 1: keep fewer micro-batches in flight"):
        plan_from(two_stage(), starts, micro_batches=2, memory_limit=1)


def test_a_missing_block_and_an_out_of_order_micro_batch_are_refused():
    with pytest.raises(InvalidScheduleError, match="not scheduled"):
        plan_from(two_stage(), {("f0", 0): 0, ("f1", 0): 1, ("b1", 0): 2})
    starts = {("f0", 1): 0, ("f1", 1): 1, ("b1", 1): 2, ("b0", 1): 4,
              ("f0", 0): 1, ("f1", 0): 4, ("b1", 0): 5, ("b0", 0): 7}
    with pytest.raises(InvalidScheduleError, match="in order"):
        plan_from(two_stage(), starts, micro_batches=2)


def test_a_block_on_an_unknown_device_is_refused():
    with pytest.raises(BlockTemplateError, match="unknown device"):
        BlockTemplate("bad", ("dev0",), (BlockSpec("f", "forward", 1, 1, ("dev7",)), BlockSpec("b", "backward", 1, -1, ("dev0",), ("f",))))


def test_templates_with_cycles_or_memory_that_never_frees_are_refused():
    with pytest.raises(BlockTemplateError, match="cycle"):
        BlockTemplate("loop", ("d",), (BlockSpec("a", "forward", 1, 0, ("d",), ("b",)), BlockSpec("b", "forward", 1, 0, ("d",), ("a",))))
    with pytest.raises(BlockTemplateError, match="must free what it keeps"):
        BlockTemplate("leak", ("d",), (BlockSpec("a", "forward", 1, 2, ("d",)), BlockSpec("b", "backward", 1, -1, ("d",), ("a",))))


def test_a_step_tail_that_is_negative_or_has_no_seconds_to_add_to_is_refused():
    blocks = (BlockSpec("f", "forward", 1, 1, ("d",)), BlockSpec("b", "backward", 1, -1, ("d",), ("f",)))
    with pytest.raises(BlockTemplateError, match="finite number of seconds, at least 0"):
        BlockTemplate("back in time", ("d",), blocks, time_unit=1e-3, tail_seconds=-1e-3)
    with pytest.raises(BlockTemplateError, match="needs spans in seconds"):
        BlockTemplate("unit spans", ("d",), blocks, tail_seconds=1e-3)


def test_a_plan_pays_its_templates_tail_after_its_makespan():
    blocks = (BlockSpec("f", "forward", 1, 1, ("d",)), BlockSpec("b", "backward", 2, -1, ("d",), ("f",)))
    plan = one_f_one_b(BlockTemplate("tailed", ("d",), blocks, time_unit=1e-3, tail_seconds=0.5e-3), 2)
    assert plan.makespan == 6 and plan.seconds() == pytest.approx(6.5e-3)


def test_a_plan_survives_a_json_round_trip(tmp_path):
    plan = one_f_one_b(shape_template("k-shape", 4), 4, memory_limit=4)
    path = plan.save(tmp_path / "plan.json")
    again = read_schedule_file(path)
    assert again == plan
    assert again.makespan == plan.makespan and again.peak_memory() == plan.peak_memory()


def test_a_schedule_file_that_breaks_a_rule_is_refused_by_the_reader(tmp_path):
    plan = one_f_one_b(shape_template("pipeline", 2), 3)
    data = plan.to_json_dict()
    data["blocks"][-1][2] = 0  # the last block now starts at time 0, before what it waits for
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ScheduleFileError, match="breaks its rules"):
        read_schedule_file(path)
    path.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ScheduleFileError, match="not a placer schedule"):
        read_schedule_file(path)


def test_the_chrome_trace_has_one_row_per_device_and_tells_forward_from_backward(tmp_path):
    plan = one_f_one_b(shape_template("m-shape", 2), 2)
    trace = json.loads(plan.save_chrome_trace(tmp_path / "trace.json").read_text())
    rows = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert rows == {"dev0", "dev1"}
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["cat"] for e in spans} == {"forward", "backward"}
    assert len({e["cname"] for e in spans}) == 2
    # a block on every device shows on every row
    assert sum(1 for e in spans if e["name"] == "f0 mb0") == 2
