"""Refining a placement on the simulator, coarse to fine: pieces of the graph are moved to the device that
shortens the simulated step most, first large pieces, then ever smaller ones, until the deadline. A piece is
tried first on the devices its neighbours are on and the least loaded one (`DEVICE_CHOICES`).

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
TOURNAMENT_STARTS = 4
"""The starts `refine_starts` deals its time out to (the first given: callers order them fastest first). Each
halving costs a round of the time, so more starts would leave each one a few seconds of a budget of minutes,
too few to rank them by: on NMT at paper size, refinements reordered after their first 10-20 s."""
DEVICE_CHOICES = ("every", "neighbours")
"""Which devices a piece is tried on: every other device it has kernels for; or, with "neighbours", only those
that hold a unit it exchanges tensors with and the device with the least compute (a move that cuts nothing new,
or one that balances the load), and every device once no such move shortens the step. From METIS's placement of
NMT-4 (paper size) on 8 modeled H100s, 240 s of refining ended at 52.27 ms with neighbours and 56.38 ms with
every device (the neighbours' rule was ahead at every checkpoint from 15 s); of the Transformer, 24.28 against
24.51 ms, every device tried after the neighbours' optimum (`experiments/probes/refine_devices.py`, 2026-11-29,
results/refine_devices_nmt4.json, results/refine_devices_transformer_fallback.json)."""
PIECE_CHOICES = ("every", "learned")
"""Which pieces a pass tries: every piece of the level, in random order; or, with "learned", those a model fitted on
the moves tried so far scores best (`placer.heuristics.move_proposal`), and every piece once they move nothing.
From the fastest heuristic's placement of NMT-4 (paper size) on 8 modeled H100s, 240 s of the learned choice ended
at 53.37 ms against every piece's 52.06 (the Transformer: 24.16 against 24.27), ahead only in the first 30 s
(`experiments/probes/move_proposal.py`, 2026-11-29): every piece is the default."""
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
    round_seconds: tuple[float, ...] = ()
    """Its simulated step time at the end of each round of `refine_starts` it ran in (empty outside one): each
    round's time is dealt out evenly, so two refinements compare at the same time spent in the same round."""

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


def refine_placement(graph: OpGraph, simulator, start: np.ndarray, *, deadline: float, seed: int = 0,
                     devices_tried: str = "neighbours", pieces_tried: str = "every") -> Refinement:
    """Refine `start` ([U] device index per unit of `graph`) on `simulator` until `deadline` (a
    `time.monotonic()`) or until no move of a single unit shortens the step. Only devices the unit has kernels for
    are tried, and a placement that runs out of memory never replaces one that fits (from a start that does not
    fit, moves that overflow the devices' memory by less are kept first)."""
    return Refiner(graph, simulator, start, seed=seed, devices_tried=devices_tried,
                   pieces_tried=pieces_tried).run(deadline)


class Refiner:
    """One refinement of a placement, resumable: each `run(until)` goes on where the last one stopped, so time
    can be dealt out to several starts in turns (`refine_starts`)."""

    def __init__(self, graph: OpGraph, simulator, start: np.ndarray, *, seed: int = 0, devices_tried: str = "neighbours",
                 pieces_tried: str = "every"):
        if devices_tried not in DEVICE_CHOICES:
            raise ValueError(f"devices_tried is one of {', '.join(DEVICE_CHOICES)}, not {devices_tried!r}")
        if pieces_tried not in PIECE_CHOICES:
            raise ValueError(f"pieces_tried is one of {', '.join(PIECE_CHOICES)}, not {pieces_tried!r}")
        self.graph, self.simulator, self.seed = graph, simulator, seed
        self.current = np.asarray(start, np.int64).copy()
        units, self.devices = len(self.current), len(simulator.devices)
        if units != len(graph.groups):
            raise ValueError(f"the start places {units} units, but graph {graph.name!r} has {len(graph.groups)}")
        self.allowed = np.stack([~graph.groups_without_kernel(device.kind) for device in simulator.devices], axis=1)
        self._neighbours = self._adjacent = self._unit_edges = self._unit_compute = self._proposal = None
        if devices_tried == "neighbours" or pieces_tried == "learned":
            from placer.heuristics.units import unit_problem

            problem = unit_problem(simulator)
            pairs = problem.edges[:, :2].astype(np.int64)
            both = np.concatenate([pairs, pairs[:, ::-1]])
            both = both[np.argsort(both[:, 0], kind="stable")]
            self._adjacent = np.split(both[:, 1], np.searchsorted(both[:, 0], np.arange(1, units)))
            self._unit_edges = problem.edges
            self._unit_compute = np.where(np.isfinite(problem.compute), problem.compute, 0.0)
            if devices_tried == "neighbours":
                self._neighbours = self._adjacent
            if pieces_tried == "learned":
                from placer.heuristics.move_proposal import MoveProposal

                self._proposal = MoveProposal(self._unit_edges, self._unit_compute, self.devices, seed=seed)
        self.rng = np.random.default_rng(seed)
        self.levels = piece_levels(units, self.devices)
        self.evaluations = self.moves = self.finest_pieces = 0
        self.wall_seconds = 0.0
        self.round_seconds: list[float] = []  # filled by `refine_starts`
        self.best = self._score(self.current)
        self.start_seconds = self.best[1] if not self.best[0] else math.inf
        self.at_optimum = False
        """True once no move of a single unit shortens the step: more time finds nothing."""
        self._level = -1  # index into `levels`; the first pass starts the first level
        self._part: np.ndarray | None = None
        self._keys = np.zeros(0, np.int64)  # this pass's piece per unit (part * devices + device at its start)
        self._queue: list[int] = []  # the pieces this pass has yet to try
        self._full_pass = True  # this pass tries every piece of its level
        self._pass_before = self.best

    @property
    def seconds(self) -> float:
        """Simulated step time of the placement so far (inf while none tried fits in memory)."""
        return self.best[1] if not self.best[0] else math.inf

    def refinement(self) -> Refinement:
        return Refinement(self.current.copy(), self.start_seconds, self.seconds, self.evaluations, self.moves,
                          self.finest_pieces, self.wall_seconds, tuple(self.round_seconds))

    def run(self, until: float) -> Refinement:
        """Refine until `until` (a `time.monotonic()`) or the local optimum, whichever comes first."""
        started = time.monotonic()
        try:
            while not self.at_optimum and time.monotonic() < until:
                if not self._queue and not self._next_pass():
                    if self._neighbours is None:
                        self.at_optimum = True
                        break
                    self._neighbours = None  # no neighbour's device shortens the step: on with every device
                    self._pass_before = self.best
                    self._queue, self._full_pass = self._every_piece(), True
                    continue
                self._try_piece(self._queue.pop())
        finally:
            self.wall_seconds += time.monotonic() - started
        return self.refinement()

    def _next_pass(self) -> bool:
        """Starts the next pass over the pieces of this level, or of the next finer one; False at the optimum."""
        units = len(self.current)
        if self._level >= 0:
            passed, self._pass_before = self._pass_before, self.best
            finest = self.levels[self._level] == units
            if self.best == passed:  # no piece of this size moves: on to finer ones, or the optimum at units
                if not self._full_pass:  # only the proposed pieces were tried: every one before leaving the level
                    self._queue, self._full_pass = self._every_piece(), True
                    return True
                if finest:
                    return False
                self._start_level(self._level + 1)
            elif not finest and not self.best[0] and passed[1] - self.best[1] < LEVEL_GAIN * passed[1]:
                self._start_level(self._level + 1)  # on to finer pieces
        else:
            self._start_level(0)
        # A piece is a part on one device: the placement's own cut is never blurred by a level's parts.
        self._keys = self._part * self.devices + self.current
        if self._proposal is None:
            self._queue, self._full_pass = self._every_piece(), True
        else:
            chosen, self._full_pass = self._proposal.choose(self._keys, self.current, self.finest_pieces)
            self._queue = chosen[::-1]
        return True

    def _every_piece(self) -> list[int]:
        """This pass's pieces in random order, as a queue (the last is tried first)."""
        return self.rng.permutation(np.unique(self._keys)).tolist()[::-1]

    def _start_level(self, level: int) -> None:
        self._level = level
        pieces = self.finest_pieces = self.levels[level]
        units = len(self.current)
        self._part = (unit_partition(self.graph, pieces, seed=self.seed) if pieces < units
                      else np.arange(units, dtype=np.int64))

    def _try_piece(self, key: int) -> None:
        """Moves the piece to the device that shortens the step most, if any does."""
        members = np.flatnonzero(self._keys == key)
        here = int(self.current[members[0]])
        choice, choice_score = None, self.best
        for device in self._devices_to_try(members):
            if device == here:
                continue
            trial = self.current.copy()
            trial[members] = device
            trial_score = self._score(trial)
            if trial_score < choice_score:
                choice, choice_score = int(device), trial_score
        if choice is not None:
            self.current[members] = choice
            self.best = choice_score
            self.moves += 1
        if self._proposal is not None:
            near = np.concatenate([self._adjacent[m] for m in members]) if choice is not None else members[:0]
            self._proposal.record(key, members, choice is not None, near)

    def _devices_to_try(self, members: np.ndarray) -> np.ndarray:
        """The devices `members` (a piece, all on one device) may move to, as `devices_tried` says."""
        allowed = self.allowed[members].all(axis=0)
        if self._neighbours is None:
            return np.flatnonzero(allowed)
        near = np.zeros(self.devices, bool)
        near[self.current[np.concatenate([self._neighbours[m] for m in members])]] = True
        load = np.bincount(self.current, weights=self._unit_compute[np.arange(len(self.current)), self.current],
                           minlength=self.devices)
        near[int(np.argmin(np.where(allowed, load, np.inf)))] = True
        return np.flatnonzero(near & allowed)

    def _score(self, group_devices: np.ndarray) -> tuple[float, float]:
        """(bytes over the devices' memory, step time): a placement that fits beats one that does not, and one
        that overflows by less is nearer to fitting."""
        self.evaluations += 1
        result = self.simulator.simulate(group_devices)
        if result.ok:
            return 0.0, result.step_time
        over = sum(max(0.0, peak - capacity)
                   for peak, capacity in zip(result.peak_memory.values(), self.simulator.capacity))
        return float(over), result.step_time


@dataclass(frozen=True)
class RoundStanding:
    """A refinement of a tournament (`refine_starts`) against the fastest of the others at the same time spent: at
    the end of the last round both ran in."""

    rounds: int
    """The rounds it ran in, and at whose end the two are read."""
    seconds: float
    others_seconds: float
    """The fastest of the others at the end of that round (one halved away before it: at its last round)."""
    last: bool
    """True when it ran in the tournament's last round: it was never halved away."""

    @property
    def ahead(self) -> float:
        """Its step's share shorter than the others' fastest (negative: behind)."""
        return 1 - self.seconds / self.others_seconds


def standing(round_seconds: Sequence[float], others: Sequence[Refinement]) -> RoundStanding | None:
    """A start whose step time at the end of each round it ran in was `round_seconds` (a refinement's of the
    tournament, or one round's of a plan refined apart for one start's share of it), read against the fastest of
    `others` of the tournament at the same time spent; None where it, or all of them, ran no round."""
    rounds_run = [len(o.round_seconds) for o in others if o.round_seconds]
    if not len(round_seconds) or not rounds_run:
        return None
    rounds = min(len(round_seconds), max(rounds_run))
    others_seconds = min(o.round_seconds[min(rounds, len(o.round_seconds)) - 1] for o in others if o.round_seconds)
    return RoundStanding(rounds, round_seconds[rounds - 1], others_seconds, len(round_seconds) >= max(rounds_run))


def refine_starts(graph: OpGraph, simulator, starts: Sequence[np.ndarray], *, deadline: float,
                  seed: int = 0, devices_tried: str = "neighbours",
                  challengers: Sequence[np.ndarray] = ()) -> list[Refinement]:
    """Refine the first `TOURNAMENT_STARTS` of `starts`, and every one of `challengers` beside them, by successive
    halving until `deadline`: the time left is cut into a round per halving, each round's time split evenly over
    the starts still in it, and after a round the faster half goes on from where it stopped; in the last round the
    fastest goes on alone. A refinement that reaches its local optimum leaves the rest of its turn to the others,
    and one still in the last round with time left hands it to the next fastest. Local optima differ by start and
    are not ranked by the starts' own step times: on NMT-2 at paper size on 2 modeled V100s, 140 s from each
    heuristic's placement ended between 234.5 and 247.2 ms, the fastest start among the worst ends
    (docs/results/learned-placement.md). A challenger (a start no heuristic made: the planner's plan) competes for
    the time on the same terms, so that a start worth refining gets it and one that is not leaves after a round.

    Returns a refinement per start in the tournament, in the order of `starts` then `challengers`, each with its
    step time at the end of every round it ran in: one never run (the deadline had passed) is its start, with no
    wall time."""
    entrants = [*starts[:TOURNAMENT_STARTS], *challengers]
    if not entrants:
        raise ValueError("refine_starts needs at least one start")
    refiners = [Refiner(graph, simulator, start, seed=seed, devices_tried=devices_tried) for start in entrants]

    def fastest_first(indices) -> list[int]:
        return sorted(indices, key=lambda k: refiners[k].best)

    alive = list(range(len(refiners)))
    while time.monotonic() < deadline:
        running = [k for k in alive if not refiners[k].at_optimum]
        if not running:  # those left ended at their optimum with time left: the fastest halved away goes on
            waiting = fastest_first(k for k in range(len(refiners)) if k not in alive and not refiners[k].at_optimum)
            if not waiting:
                break
            alive = waiting[:1]
            continue
        rounds = math.ceil(math.log2(len(alive))) + 1
        round_end = time.monotonic() + (deadline - time.monotonic()) / rounds
        for turn, k in enumerate(running):
            # Even shares of what is left: one that reaches its optimum early leaves its time to those after it.
            refiners[k].run(time.monotonic() + (round_end - time.monotonic()) / (len(running) - turn))
        for k in alive:
            refiners[k].round_seconds.append(refiners[k].seconds)
        alive = fastest_first(alive)[:math.ceil(len(alive) / 2)]
    return [refiner.refinement() for refiner in refiners]
