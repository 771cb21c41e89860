"""Where the generalizing policy starts each unit: the placements of graph heuristics, as votes.

Devices of one kind and model look alike to the policy's learned score, so the score alone can put a graph
on one GPU or spread it at random, but never split it. Heuristic placements break the tie: each heuristic
(METIS's balanced partition, Baechi's m-ETF and m-SCT list schedules, on the roofline costs of the
devices) votes for one device per unit, and the policy learns per unit how much to trust each vote
(`GraphPlacementPolicy.prior_weights`). Which heuristic wins depends on the graph (METIS on the CNNs and
two-tower, m-ETF or m-SCT on NMT, the Transformer and MLPs in RESULTS.md's tables), so a policy that reads
the graph can learn to follow the right one: DOPPLER starts the same way, by imitating a heuristic.

A heuristic's device labels are arbitrary among interchangeable devices, so every vote is relabelled to
agree as much as it can with the first heuristic's (`align_to`): two heuristics that cut a graph the same
way then vote for the same devices.
"""

from __future__ import annotations

import itertools

import numpy as np

from placer.devices import DeviceSet
from placer.graph.opgraph import OpGraph

PRIOR_HEURISTICS = ("metis", "m-etf", "m-sct")
"""The default voters: the partitioner and the two list schedulers that win the baselines' tables."""
BRUTE_FORCE_DEVICES = 8
"""Up to this many interchangeable devices, every relabelling is tried (8! = 40,320); beyond, a greedy match."""


def interchangeable_classes(devices: DeviceSet) -> list[list[int]]:
    """Device indices grouped by what the policy sees of them (`device_inputs`): devices in one class differ
    only by their labels."""
    from agents.graph_policy.features import device_inputs

    rows = device_inputs(devices).features
    classes: dict[bytes, list[int]] = {}
    for index, row in enumerate(rows):
        classes.setdefault(row.tobytes(), []).append(index)
    return list(classes.values())


def align_to(assignment: np.ndarray, reference: np.ndarray, devices: DeviceSet) -> np.ndarray:
    """`assignment` [U] with the labels of interchangeable devices permuted so that as many units as possible
    sit where `reference` [U] puts them (exactly up to BRUTE_FORCE_DEVICES interchangeable devices, greedily
    beyond). The placement is the same one, only named differently."""
    assignment = np.asarray(assignment, np.int64)
    relabel = np.arange(len(devices))
    for members in interchangeable_classes(devices):
        if len(members) < 2:
            continue
        # agreement[a, b]: units on member a in `assignment` and on member b in `reference`
        agreement = np.array([[np.sum((assignment == a) & (reference == b)) for b in members] for a in members])
        relabel[members] = np.asarray(members)[_best_matching(agreement)]
    return relabel[assignment]


def _best_matching(agreement: np.ndarray) -> np.ndarray:
    """The permutation p maximizing sum(agreement[i, p[i]]): every one up to BRUTE_FORCE_DEVICES, greedy beyond."""
    k = agreement.shape[0]
    if k <= BRUTE_FORCE_DEVICES:
        permutations = np.array(list(itertools.permutations(range(k))))
        scores = agreement[np.arange(k), permutations].sum(axis=1)
        return permutations[int(np.argmax(scores))]
    matching = np.full(k, -1)
    free = np.ones(k, bool)
    for flat in np.argsort(-agreement, axis=None, kind="stable"):
        i, j = divmod(int(flat), k)
        if matching[i] < 0 and free[j]:
            matching[i], free[j] = j, False
    return matching


NO_VOTE = -1
"""The device of every unit in the placement of a heuristic that could not place the graph."""


def heuristic_placements(graph: OpGraph, devices: DeviceSet, heuristics: tuple[str, ...] = PRIOR_HEURISTICS
                         ) -> np.ndarray:
    """[K, U] each heuristic's device per unit, on the roofline op costs of `devices` (a generic host CPU's or
    V100's where a device has no hardware numbers, as on the testbed: only the costs' ratios matter to the
    heuristics), every one aligned to the first's labels. A heuristic after the first that cannot place the
    graph (a list scheduler out of memory) gets a row of NO_VOTE, with a warning; the first's error is raised."""
    import warnings

    from placer.cost.targets import roofline_tables
    from placer.errors import DeviceSpecError, PlacementError
    from placer.heuristics import HeuristicError, make_heuristic
    from placer.hardware import GPUS, HOST_CPU
    from placer.profile import roofline_costs
    from placer.simulate import Simulator

    try:
        tables = roofline_tables(graph, devices)
    except DeviceSpecError:
        tables = {device.model or device.kind: roofline_costs(graph, HOST_CPU if device.kind == "CPU" else GPUS["V100"])
                  for device in devices}
    simulator = Simulator(graph, devices, tables)
    first = make_heuristic(heuristics[0], graph, devices, simulator=simulator).group_device_array
    rows = [first]
    for name in heuristics[1:]:
        try:
            rows.append(align_to(make_heuristic(name, graph, devices, simulator=simulator).group_device_array, first,
                                 devices))
        except (HeuristicError, PlacementError) as error:
            warnings.warn(f"{name} cannot place {graph.name} on {devices.name} ({error}): it does not vote", stacklevel=2)
            rows.append(np.full(len(first), NO_VOTE, np.int64))
    return np.stack(rows)


def heuristic_votes(graph: OpGraph, devices: DeviceSet, heuristics: tuple[str, ...] = PRIOR_HEURISTICS) -> np.ndarray:
    """[K, U, D] float32: 1 on the device each heuristic puts each unit on (`heuristic_placements`; all 0 for a
    heuristic that could not place the graph)."""
    placements = heuristic_placements(graph, devices, heuristics)
    votes = np.zeros((len(heuristics), placements.shape[1], len(devices)), np.float32)
    k, u = np.nonzero(placements != NO_VOTE)
    votes[k, u, placements[k, u]] = 1.0
    return votes
