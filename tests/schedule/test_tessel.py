"""Tessel's z3 search: valid schedules, as fast as 1F1B where 1F1B is best, fewer bubbles where it is not."""

import time

import pytest

from placer.errors import MicroBatchError
from placer.schedule import SHAPES, gpipe, one_f_one_b, shape_template, tessel, tessel_fast
from placer.schedule.repetend import first_fit_repetend


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_tessel_and_tessel_fast_find_valid_plans_under_the_memory_limit(shape):
    template = shape_template(shape, 2)
    for search in (tessel, tessel_fast):
        plan = search(template, 4, 2, time_limit=2)
        assert max(plan.peak_memory().values()) <= 2  # and the plan checked every other rule itself
        assert plan.search_status in ("finished", "best-so-far") and 0 < plan.search_seconds < 5


def test_tessel_is_as_fast_as_1f1b_on_a_plain_pipeline():
    template = shape_template("pipeline", 4)
    baseline = one_f_one_b(template, 8, memory_limit=4)
    plan = tessel(template, 8, memory_limit=4, time_limit=20)
    assert plan.makespan == baseline.makespan == (8 + 4 - 1) * 3
    assert max(plan.peak_memory().values()) <= 4


def test_tessel_has_fewer_bubbles_than_gpipe_and_1f1b_on_a_v_shape():
    template = shape_template("v-shape", 2)
    limit = 4  # what 1F1B keeps: two stages' activations per device for two micro-batches in flight
    plan = tessel(template, 8, memory_limit=limit, time_limit=20)
    assert max(plan.peak_memory().values()) <= limit
    assert plan.bubble_rate < one_f_one_b(template, 8, memory_limit=limit).bubble_rate
    assert plan.bubble_rate < gpipe(template, 8).bubble_rate  # although GPipe may use 4x the memory


def test_the_repetend_search_removes_bubbles_first_fit_leaves():
    from placer.schedule.tessel import _Budget, search_repetend

    template = shape_template("v-shape", 2)
    fast = first_fit_repetend(template, 2)
    searched = search_repetend(template, 2, _Budget(time.monotonic() + 10))
    assert searched.bubbles(template) <= fast.bubbles(template)
    assert max(searched.steady_memory(template).values()) <= 2


def test_a_search_out_of_time_returns_the_best_plan_so_far_marked_as_such():
    template = shape_template("n-shape", 4)
    began = time.monotonic()
    plan = tessel(template, 8, memory_limit=4, time_limit=0.3)
    assert time.monotonic() - began < 15  # building the model is not budgeted, solving is
    assert plan.search_status == "best-so-far" and plan.timed_out
    assert max(plan.peak_memory().values()) <= 4


def test_no_micro_batches_is_refused():
    with pytest.raises(MicroBatchError):
        tessel(shape_template("pipeline", 2), 0)


def test_stating_the_completion_of_a_template_of_hundreds_of_blocks_stops_at_the_time_limit():
    """A placement cut into fragments makes templates of a thousand blocks: stating every pair of blocks that
    share a device took minutes of a budget of seconds."""
    from placer.schedule.blocks import BACKWARD, FORWARD, BlockSpec, BlockTemplate

    stages, devices = 300, ("d0", "d1")
    forwards = [BlockSpec(f"f{k}", FORWARD, 1, 1, (devices[k % 2],), (f"f{k - 1}",) if k else ())
                for k in range(stages)]
    backwards = [BlockSpec(f"b{k}", BACKWARD, 2, -1, (devices[k % 2],),
                           (f"b{k + 1}",) if k + 1 < stages else (f"f{stages - 1}",)) for k in range(stages)]
    template = BlockTemplate("fragments", devices, tuple(forwards + backwards))
    began = time.monotonic()
    plan = tessel_fast(template, 4, time_limit=1.0)
    assert time.monotonic() - began < 10
    assert plan.search_status == "best-so-far" and len(plan.blocks) == 4 * 2 * stages
