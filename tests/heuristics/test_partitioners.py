"""The graph partitioners (METIS, Scotch) on hand-built graphs, and the unit partition of the hierarchical planner."""

import os

import pytest

from placer.heuristics import HeuristicError, make_heuristic


@pytest.mark.parametrize("partitioner", ["metis_placement", "scotch_placement"])
def test_partitioners_cut_two_towers_between_them(partitioner, hand_built):
    import placer.heuristics.partitioners as partitioners

    graph = hand_built.towers_graph(towers=2, depth=3)
    machine = hand_built.devices()
    costs = {f"t{t}/op{i}": 10 for t in range(2) for i in range(3)}
    placement = getattr(partitioners, partitioner)(graph, machine, hand_built.simulator(graph, machine, costs))
    towers = [hand_built.device_of(graph, placement, f"t{t}/op") for t in range(2)]
    assert all(len(t) == 1 for t in towers) and towers[0] != towers[1]
    assert placement.metadata["method"] in ("metis", "scotch")


def test_a_missing_partitioner_library_is_named(monkeypatch, hand_built):
    import builtins

    real_import = builtins.__import__

    def no_pymetis(name, *args, **kwargs):
        if name == "pymetis":
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pymetis)
    graph = hand_built.towers_graph(towers=2, depth=1)
    machine = hand_built.devices()
    with pytest.raises(HeuristicError, match="the metis baseline needs a library that is not installed .*pymetis"):
        make_heuristic("metis", graph, machine, simulator=hand_built.simulator(graph, machine, {}))


def test_scotch_gives_the_same_partition_for_the_same_seed(monkeypatch, hand_built):
    """Scotch's threads made its partition of a real model change from call to call with one seed."""
    pytest.importorskip("pyscotch")
    from placer.cost import open_target
    from placer.heuristics.partitioners import scotch_placement
    from placer.models import build_model

    monkeypatch.delenv("SCOTCH_DETERMINISTIC", raising=False)
    graph = build_model("rnnlm", "tiny")
    target = open_target(graph, "modeled:2xV100")
    placements = {scotch_placement(graph, target.devices, target.simulator, seed=0).group_devices for _ in range(5)}
    assert len(placements) == 1
    assert "SCOTCH_DETERMINISTIC" not in os.environ  # set for the call only


def test_unit_partition_into_more_parts_than_units_gives_each_unit_its_own_part(two_tower):
    from placer.heuristics.partitioners import unit_partition

    units = len(two_tower.groups)
    assert sorted(unit_partition(two_tower, units + 5).tolist()) == list(range(units))


def test_unit_partition_numbers_its_parts_hierarchically_so_each_half_is_one_tower(two_tower):
    from placer.heuristics.partitioners import unit_partition
    from placer.models.two_tower import tower_of

    parts = unit_partition(two_tower, 4)
    halves = {}
    for group, part in zip(two_tower.groups, parts):
        if (tower := tower_of(group.ops[0])) is not None:
            halves.setdefault(tower, set()).add(int(part) // 2)  # parts [0, 2) and [2, 4): the first cut's halves
    assert all(len(half) == 1 for half in halves.values()) and halves["tower_a"] != halves["tower_b"]
