"""Refining a placement on the simulator, coarse to fine: pieces of the graph are moved to the device that
shortens the simulated step most, first large pieces, then ever smaller ones, until the deadline.

A multilevel partitioner (METIS) refines its cut this way, by the bytes it cuts; here each move is priced by the
simulator's whole step (transfers, overlap, memory), a millisecond or two at 20k ops, so tens of thousands of
moves fit in minutes where a policy samples a few hundred placements. The pieces of a level are the parts of a
METIS recursive bisection of the unit graph (`unit_partition`), each split by the device it is on now, so a move
never splits what the placement keeps together on one device beyond the level's grain.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from placer.graph.opgraph import OpGraph
from placer.heuristics.partitioners import unit_partition

LEVEL_FACTOR = 4
"""The coarsest level has a piece per device (a k-way cut of the graph); each next one `LEVEL_FACTOR` times more
pieces, the finest one unit each."""
LEVEL_GAIN = 0.01
"""A level is left for the next, finer one after a pass over its pieces shortened the step by less than this
share: coarse moves stop paying long before they stop finding anything. The finest level goes on while any
single unit moves."""


@dataclass(frozen=True)
class Refinement:
    """What refining did: the refined device per unit and how it got there."""

    group_devices: np.ndarray
    """[U] device index per colocation group (unit), the refined placement."""
    start_seconds: float
    """Simulated step time of the start (inf when it did not fit in memory)."""
    seconds: float
    """Simulated step time of the refined placement (inf when no placement it tried fit in memory)."""
    evaluations: int
    """Placements simulated."""
    moves: int
    """Moves kept."""
    finest_pieces: int
    """Pieces of the finest level reached (the units of the graph when refining got to single units)."""
    wall_seconds: float

    @property
    def gain(self) -> float:
        """Share of the start's step time the refinement took off (0 when it found nothing)."""
        return 0.0 if not math.isfinite(self.start_seconds) else 1 - self.seconds / self.start_seconds


def piece_levels(units: int, devices: int) -> list[int]:
    """Pieces per level, coarse to fine: one per device, 4 times that, ... and, last, one per unit."""
    levels, pieces = [], max(2, devices)
    while pieces < units:
        levels.append(pieces)
        pieces *= LEVEL_FACTOR
    return levels + [units]


def refine_placement(graph: OpGraph, simulator, start: np.ndarray, *, deadline: float, seed: int = 0) -> Refinement:
    """Refine `start` ([U] device index per unit of `graph`) on `simulator` until `deadline` (a
    `time.monotonic()`) or until no move of a single unit shortens the step. Only devices the unit has kernels for
    are tried, and a placement that runs out of memory never replaces one that fits (from a start that does not
    fit, moves that overflow the devices' memory by less are kept first)."""
    started = time.monotonic()
    current = np.asarray(start, np.int64).copy()
    units, devices = len(current), len(simulator.devices)
    if units != len(graph.groups):
        raise ValueError(f"the start places {units} units, but graph {graph.name!r} has {len(graph.groups)}")
    allowed = np.stack([~graph.groups_without_kernel(device.kind) for device in simulator.devices], axis=1)
    rng = np.random.default_rng(seed)
    evaluations = 0

    def score(group_devices: np.ndarray) -> tuple[float, float]:
        """(bytes over the devices' memory, step time): a placement that fits beats one that does not, and
        one that overflows by less is nearer to fitting."""
        nonlocal evaluations
        evaluations += 1
        result = simulator.simulate(group_devices)
        if result.ok:
            return 0.0, result.step_time
        over = sum(max(0.0, peak - capacity) for peak, capacity in zip(result.peak_memory.values(), simulator.capacity))
        return float(over), result.step_time

    best = score(current)
    start_seconds = best[1] if not best[0] else math.inf
    moves, finest = 0, 0
    for pieces in piece_levels(units, devices):
        if time.monotonic() >= deadline:
            break
        finest = pieces
        part = unit_partition(graph, pieces, seed=seed) if pieces < units else np.arange(units, dtype=np.int64)
        while time.monotonic() < deadline:
            before = best
            # A piece is a part on one device: the placement's own cut is never blurred by a level's parts.
            keys = part * devices + current
            for key in rng.permutation(np.unique(keys)):
                if time.monotonic() >= deadline:
                    break
                members = np.flatnonzero(keys == key)
                here = int(current[members[0]])
                choice, choice_score = None, best
                for device in np.flatnonzero(allowed[members].all(axis=0)):
                    if device == here:
                        continue
                    trial = current.copy()
                    trial[members] = device
                    trial_score = score(trial)
                    if trial_score < choice_score:
                        choice, choice_score = int(device), trial_score
                if choice is not None:
                    current[members] = choice
                    best = choice_score
                    moves += 1
            if best == before:
                break  # no piece of this size moves: on to finer ones, or a local optimum at single units
            if pieces < units and not best[0] and before[1] - best[1] < LEVEL_GAIN * before[1]:
                break  # on to finer pieces
    return Refinement(current, start_seconds, best[1] if not best[0] else math.inf, evaluations, moves, finest,
                      time.monotonic() - started)


def refine_starts(graph: OpGraph, simulator, starts: Sequence[np.ndarray], *, deadline: float,
                  seed: int = 0) -> list[Refinement]:
    """Refine `starts` one after another, each from where the last left the time: the next is started only when
    the one before ended at its local optimum before `deadline`, so time a refinement cannot use goes to another
    start. Local optima differ by start: on NMT-2 at paper size on 2 modeled V100s, 140 s from each heuristic's
    placement ended between 234.5 and 247.2 ms (docs/results/learned-placement.md). Returns a refinement per start tried, in order; at least the
    first is (with its start's own step time when the deadline has passed)."""
    if not len(starts):
        raise ValueError("refine_starts needs at least one start")
    refinements = []
    for start in starts:
        if refinements and time.monotonic() >= deadline:
            break
        refinements.append(refine_placement(graph, simulator, start, deadline=deadline, seed=seed))
    return refinements
