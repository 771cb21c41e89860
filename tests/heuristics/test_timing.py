"""`time_heuristics`: every caller that compares against the baselines times them through it."""

import dataclasses

import numpy as np
import pytest

from placer.cost import open_target
from placer.devices import DeviceSet
from placer.errors import PlacementError
from placer.hardware import modeled_machine
from placer.heuristics import HeuristicError, single_device_placement, time_heuristics


@pytest.fixture(scope="module")
def target(two_tower):
    with open_target(two_tower, "modeled:2xV100") as opened:
        yield opened


def test_each_heuristic_comes_back_with_its_placement_and_step_time(target):
    timings = time_heuristics(target, ["single", "metis", "expert"], model="two-tower")
    assert list(timings) == ["single-device", "metis", "expert"]  # the alias resolved, the order kept
    for name, timing in timings.items():
        assert timing.ok and timing.error is None and timing.placing_seconds >= 0
        assert timing.seconds == target.evaluate(timing.placement).seconds
    # METIS puts a tower on each GPU: faster than both on one
    assert timings["metis"].seconds < timings["single-device"].seconds
    assert timings["single-device"].placement == single_device_placement(target.graph, target.devices)


def test_a_heuristic_that_cannot_be_made_is_skipped_with_its_reason(target):
    timings = time_heuristics(target, ["expert", "bogus", "round-robin"])  # no model: a user's graph
    assert timings["expert"].placement is None and timings["expert"].step_time is None
    assert "exists only for built-in models" in timings["expert"].error
    assert "unknown baseline 'bogus'" in timings["bogus"].error
    assert not timings["expert"].ok and timings["expert"].seconds == float("inf")
    assert timings["round-robin"].ok


def test_strict_raises_for_a_heuristic_the_user_named_that_cannot_be_made(target):
    with pytest.raises(HeuristicError, match="exists only for built-in models"):
        time_heuristics(target, ["round-robin", "expert"], strict=True)


def test_a_heuristic_whose_rule_finds_no_room_comes_back_with_its_error_even_when_strict(target, monkeypatch):
    import placer.heuristics.list_scheduling as list_scheduling

    def out_of_memory(*args, **kwargs):
        raise PlacementError("list scheduling: unit 'x' fits on no device (memory, kernels or links)")

    monkeypatch.setattr(list_scheduling, "m_etf", out_of_memory)
    timing = time_heuristics(target, ["m-etf"], strict=True)["m-etf"]
    assert timing.placement is None and "fits on no device" in timing.error


def test_a_heuristic_whose_library_raises_comes_back_with_its_error_and_the_others_are_timed(target, monkeypatch):
    import placer.heuristics.partitioners as partitioners

    def scotch_breaks(*args, **kwargs):
        raise RuntimeError("SCOTCH_graphPart: internal error")

    monkeypatch.setattr(partitioners, "scotch_placement", scotch_breaks)
    timings = time_heuristics(target, ["scotch", "metis"], strict=True)
    assert timings["scotch"].placement is None and not timings["scotch"].ok
    assert timings["scotch"].error == "RuntimeError: SCOTCH_graphPart: internal error"
    assert timings["metis"].ok


def test_a_placement_that_does_not_fit_comes_back_as_a_failed_step_time(two_tower):
    machine = modeled_machine(2)
    cramped = DeviceSet(tuple(dataclasses.replace(d, memory_bytes=1000) for d in machine), machine.links, "cramped")
    with open_target(two_tower, cramped) as small:
        timing = time_heuristics(small, ["single-device"])["single-device"]
    assert timing.placement is not None and timing.step_time.failure == "oom"
    assert not timing.ok and timing.seconds == float("inf")


def test_placements_already_made_are_timed_as_given(target):
    everything_on_gpu_1 = np.full(len(target.graph.groups), 2)
    timing = time_heuristics(target, ["m-sct"], made={"m-sct": everything_on_gpu_1})["m-sct"]
    assert timing.placement.group_devices == tuple(everything_on_gpu_1) and timing.placing_seconds == 0.0
    assert timing.placement.metadata["method"] == "m-sct"


def test_progress_sees_the_names_as_they_are_worked_through(target):
    seen = []

    def progress(names):
        for name in names:
            seen.append(name)
            yield name

    time_heuristics(target, ["single-device", "round-robin"], progress=progress)
    assert seen == ["single-device", "round-robin"]
