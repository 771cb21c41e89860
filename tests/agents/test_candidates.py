"""The candidates both searches of `placer optimize` weigh (agents.candidates): one record, one maker per kind of
plan, the same placement made twice weighed once, replicas refused before a step is built."""

import math

import pytest

from agents.candidates import Candidate, heuristic_candidates, merge_same_placements, replica_step
from placer.cost import StepTime


def _placed(name, group_devices, ms=None, made_by=""):
    from types import SimpleNamespace

    predicted = None if ms is None else StepTime(ms * 1e-3, "simulated", "modeled:2xH100")
    return Candidate(name, ("placement",), "modeled:2xH100", SimpleNamespace(group_devices=group_devices),
                     predicted=predicted, made_by=made_by)


def test_the_same_placement_made_by_two_heuristics_is_one_candidate_named_after_both():
    merged = merge_same_placements([_placed("expert", (0, 1), 5, "heuristic expert"),
                                    _placed("metis", (1, 1), 6, "heuristic metis"),
                                    _placed("scotch", (0, 1), 5, "heuristic scotch")])
    assert [c.name for c in merged] == ["expert = scotch", "metis"]
    assert merged[0].placement_name == "expert = scotch" and merged[0].made_of("scotch")
    assert merged[0].made_by == "heuristic expert; heuristic scotch"


def test_a_candidate_nothing_priced_sorts_after_every_priced_one():
    unpriced = _placed("data parallel x2", (0,))
    failed = Candidate("m-topo", ("placement",), "modeled:2xH100", None,
                       predicted=StepTime.failed("oom", "out of memory", "simulated", "modeled:2xH100"))
    assert not unpriced.priced and not failed.priced
    assert unpriced.predicted_seconds == failed.predicted_seconds == math.inf
    ranked = sorted([unpriced, _placed("metis", (0, 1), 9.0), failed], key=lambda c: c.predicted_seconds)
    assert ranked[0].name == "metis"


def test_names_say_what_made_a_placement_the_planner_the_refinement_or_a_heuristic():
    assert _placed("metis, refined", (0,)).refined and not _placed("metis, refined", (0,)).heuristic
    assert _placed("planner, refined", (0,)).from_planner and not _placed("planner, refined", (0,)).refined
    both = _placed("planner = expert", (0,))
    assert both.from_planner and both.heuristic and not both.refined


def test_the_heuristics_maker_prices_each_placement_on_the_target_it_is_given():
    from placer.cost import open_target
    from placer.heuristics import applicable_heuristics
    from placer.models import load_model

    graph = load_model("two-tower", "tiny")
    notes = []
    with open_target(graph, "modeled:2xH100") as target:
        made = heuristic_candidates("two-tower", target, "modeled:2xH100", notes)
    names = applicable_heuristics(builtin_model=True, simulator=True, model="two-tower")
    assert {c.name for c in made} | {n.split()[1].rstrip(":") for n in notes} == set(names)
    assert all(c.priced and c.predicted.backend == "simulated" and c.machine == "modeled:2xH100" for c in made)
    assert all(c.dimensions == ("placement",) and c.made_by == f"heuristic {c.name}" for c in made)


def test_replicas_that_do_not_divide_the_batch_are_refused_before_the_step_is_built():
    from placer.errors import PlacerError

    with pytest.raises(PlacerError, match="3 replicas do not divide the batch of 32"):
        replica_step("mlp", "tiny", 3)
    replicas, graph = replica_step("mlp", "tiny", 2)
    assert replicas.degree == 2 and replicas.batch == 16 and graph.name == "mlp-tiny-batch16"


def test_the_planner_s_seconds_include_building_its_environment(monkeypatch):
    """Building the environment (a step per degree of replicas, tens of seconds at paper size) comes out of the
    planner's seconds, so that learning ends when the budget says."""
    import time

    import envs.placement
    from agents.candidates import learned_placement
    from placer.models import load_model

    built = envs.placement.PlacementEnv.__init__

    def slow_build(self, *args, **kwargs):
        time.sleep(1.0)
        built(self, *args, **kwargs)

    monkeypatch.setattr(envs.placement.PlacementEnv, "__init__", slow_build)
    graph = load_model("two-tower", "tiny")
    started = time.monotonic()
    assert learned_placement(graph, "modeled:2xH100", updates=100, seconds=0.5) is None  # spent on building
    assert time.monotonic() - started < 5.0
    placement = learned_placement(graph, "modeled:2xH100", updates=1, seconds=30.0)
    assert placement is not None and "1 updates" in placement.metadata["method"]
