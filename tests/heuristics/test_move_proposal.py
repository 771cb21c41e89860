"""The learned choice of the pieces a refinement pass tries: features, what it chooses before and after it has
learned, and the refinement's optimum with it."""

import time

import numpy as np
import pytest

from placer.heuristics.move_proposal import EXPLORED_SHARE, FEATURES, MIN_TRIALS, PROPOSED_SHARE, MoveProposal

CUT, ATTRACTION = FEATURES.index("cut_share"), FEATURES.index("attraction")


def pairs_proposal(pairs: int) -> tuple[MoveProposal, np.ndarray, np.ndarray]:
    """Units 2k and 2k + 1 exchange 1 MB; even pairs sit together on device 0, odd pairs are split over devices 0
    and 1. Each unit is a piece of its own (key: unit * 2 + device)."""
    units = 2 * pairs
    edges = np.array([(2 * k, 2 * k + 1, 1e6) for k in range(pairs)], float)
    current = np.zeros(units, np.int64)
    current[[2 * k + 1 for k in range(pairs) if k % 2]] = 1
    keys = np.arange(units) * 2 + current
    return MoveProposal(edges, np.full((units, 2), 1e-3), 2, seed=0), keys, current


def test_a_piece_s_features_say_what_share_of_its_bytes_crosses_and_where_most_goes():
    edges = np.array([(0, 1, 3e6), (0, 2, 1e6)])
    proposal = MoveProposal(edges, np.full((3, 2), 1e-3), 2)
    current = np.array([0, 1, 0])
    keys, x = proposal.features(np.arange(3) * 2 + current, current, pieces=3)
    assert keys.tolist() == [0, 3, 4]
    assert x[0, CUT] == pytest.approx(0.75) and x[0, ATTRACTION] == pytest.approx(0.75)  # 3 of its 4 MB to device 1
    assert x[1, CUT] == pytest.approx(1.0) and x[2, CUT] == 0.0  # all of unit 1's bytes cross, none of unit 2's
    assert x[:, FEATURES.index("never_tried")].tolist() == [1, 1, 1]


def test_every_piece_is_tried_until_enough_moves_were_judged_then_the_best_scored_share_first():
    proposal, keys, current = pairs_proposal(200)
    tried, every = proposal.choose(keys, current, pieces=400)
    assert every and sorted(tried) == sorted(keys.tolist())
    split = {int(k) for u, k in enumerate(keys) if (u // 2) % 2}
    for key in tried[:MIN_TRIALS]:  # the simulator keeps a move of a unit split from its pair, and no other
        members = np.array([key // 2])
        proposal.record(key, members, key in split, members)
    tried, every = proposal.choose(keys, current, pieces=400)
    assert not every
    first = tried[:int(PROPOSED_SHARE * len(keys))]
    assert set(first) == split  # the split pairs' units, every one of them, before any other
    assert len(tried) - len(first) < 2 * EXPLORED_SHARE * (len(keys) - len(first))  # and a few others at random


def test_with_learned_pieces_the_refinement_still_ends_where_no_single_unit_moves(hand_built, monkeypatch):
    from placer.heuristics import move_proposal
    from placer.heuristics.refine import Refiner

    monkeypatch.setattr(move_proposal, "MIN_KEPT", 3)  # a small graph keeps a few moves: let the model choose early
    monkeypatch.setattr(move_proposal, "MIN_TRIALS", 50)
    graph = hand_built.towers_graph(towers=4, depth=60)
    costs = {f"t{t}/op{i}": 1 + (i % 5) for t in range(4) for i in range(60)}
    simulator = hand_built.simulator(graph, hand_built.devices(), costs)
    scattered = np.random.default_rng(0).integers(0, 2, len(graph.groups))
    refiner = Refiner(graph, simulator, scattered, pieces_tried="learned")
    refined = refiner.run(time.monotonic() + 120)
    assert refiner.at_optimum and refiner._proposal.model is not None  # the model chose the last passes
    step = simulator.simulate(refined.group_devices).step_time
    assert refined.seconds == step < refined.start_seconds
    for unit in range(len(graph.groups)):
        moved = refined.group_devices.copy()
        moved[unit] = 1 - moved[unit]
        assert simulator.simulate(moved).step_time >= step - 1e-12, unit
    with pytest.raises(ValueError, match="pieces_tried is one of every, learned"):
        Refiner(graph, simulator, refined.group_devices, pieces_tried="some")
