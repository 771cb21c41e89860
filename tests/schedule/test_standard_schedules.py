"""Baseline schedules (sequential, GPipe, 1F1B) by list scheduling, on every shape."""

import pytest

from placer.errors import ScheduleInfeasibleError
from placer.schedule import STANDARD_SCHEDULES, SHAPES, gpipe, one_f_one_b, sequential, shape_template


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("rule", sorted(STANDARD_SCHEDULES))
def test_every_baseline_gives_a_valid_plan_on_every_shape(shape, rule):
    template = shape_template(shape, 4)
    plan = STANDARD_SCHEDULES[rule](template, 6, 8)
    assert plan.micro_batches == 6 and len(plan.blocks) == 6 * len(template.blocks)  # the plan checked itself
    assert plan.search_status == "heuristic"


def test_1f1b_on_a_pipeline_takes_the_textbook_time_and_memory():
    # (micro-batches + stages - 1) * (forward + backward); stage k of p keeps p - k micro-batches' activations
    plan = one_f_one_b(shape_template("pipeline", 4), 8)
    assert plan.makespan == (8 + 4 - 1) * (1 + 2)
    assert plan.peak_memory() == {"dev0": 4, "dev1": 3, "dev2": 2, "dev3": 1}


@pytest.mark.parametrize("micro_batches", [4, 8, 12])
def test_gpipe_and_1f1b_bubbles_on_equal_stages_are_the_pipeline_arithmetic(micro_batches):
    # (p - 1) / (M + p - 1) idle, on p = 4 equal stages; GPipe keeps every micro-batch, 1F1B at most p
    template = shape_template("pipeline", 4)
    for plan in (gpipe(template, micro_batches), one_f_one_b(template, micro_batches)):
        assert plan.bubble_rate == pytest.approx(3 / (micro_batches + 3))
    assert max(gpipe(template, micro_batches).peak_memory().values()) == micro_batches
    assert max(one_f_one_b(template, micro_batches).peak_memory().values()) == min(4, micro_batches)


def test_gpipe_keeps_every_micro_batch_and_sequential_keeps_one():
    template = shape_template("pipeline", 4)
    assert max(gpipe(template, 8).peak_memory().values()) == 8
    assert max(sequential(template, 8).peak_memory().values()) == 1
    assert sequential(template, 8).makespan == 8 * sum(b.span for b in template.blocks)


def test_1f1b_stays_under_a_tight_memory_limit():
    plan = one_f_one_b(shape_template("v-shape", 4), 6, memory_limit=4)
    assert max(plan.peak_memory().values()) <= 4


def test_a_limit_below_one_micro_batch_is_refused_with_what_to_do():
    with pytest.raises(ScheduleInfeasibleError, match="one micro-batch alone needs 2 memory units"):
        one_f_one_b(shape_template("v-shape", 2), 4, memory_limit=1)
