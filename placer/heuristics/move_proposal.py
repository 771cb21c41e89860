"""Which pieces the refinement tries: a model learned while it refines, from the simulator's verdict on every move
it tried (GiPH and DOPPLER learn which moves to propose; here the refinement still prices each one).

Before each pass over a level's pieces, every piece is described by a few numbers (`FEATURES`: its size and
compute, how loaded its device is, what share of the bytes it exchanges crosses to other devices and how much
goes to one other device, whether anything near it moved since it was last tried), a logistic model fitted on the
moves tried so far scores it, and the pass tries the best-scored `PROPOSED_SHARE` of the pieces, best first, plus
`EXPLORED_SHARE` of the rest at random (so that the model keeps seeing what it would skip). A pass of chosen pieces
that moves nothing is followed by a full one: the refinement's optimum is still one where no piece moves.

Why a model and not a rule: on NMT-4 and the Transformer (paper size) on 8 modeled H100s, the best single feature
told a kept move from a rejected one at areas under the ROC curve of 0.58-0.64 (NMT-4's levels of 144 pieces and
finer) and 0.57-0.81 (the Transformer's), while a logistic model of all of them, fitted on the first half of a level's moves, ranked the second half at 0.58-0.86 and put 62-100 % of
the step time the kept moves took off in its top half. Measured against the refinement that tries every piece,
from the same start for 240 s on one core, it was ahead after 30 s (0.3-2.2 %) and not after: NMT-4 ended 2.5 %
slower (53.37 against 52.04-52.06 ms), the Transformer level (24.16-24.24 against 24.27), whether the passes tried
the best-scored half or every piece best-scored first (`experiments/probes/move_proposal.py`, 2026-11-29). So the
refinement tries every piece by default (`placer.heuristics.refine.PIECE_CHOICES`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

FEATURES = ("log_pieces", "log_units", "log_compute", "load_share", "cut_share", "attraction", "log_bytes",
            "failures", "changed", "never_tried")
PROPOSED_SHARE = 0.5
"""Share of a pass's pieces tried, the best-scored first."""
EXPLORED_SHARE = 0.1
"""Share of the pieces left out that are tried anyway, at random."""
MIN_TRIALS, MIN_KEPT = 200, 20
"""Moves tried, and kept, before the model chooses: until then every piece is tried, in random order."""
RECENT_TRIALS = 20_000
"""The model is fitted on the latest trials only: what makes a move pay changes as the placement does."""


@dataclass(frozen=True)
class KeptModel:
    """A logistic model of "the simulator kept the move" from a piece's features."""

    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: float

    def score(self, x: np.ndarray) -> np.ndarray:
        """[P] log-odds that a move of each piece ([P, len(FEATURES)] features) is kept."""
        return (x - self.mean) / self.scale @ self.weights + self.bias


def fit_kept_model(x: np.ndarray, kept: np.ndarray) -> KeptModel | None:
    """Logistic regression of `kept` on `x` by gradient descent on standardized features (a few thousand rows of ten
    numbers: milliseconds); None with fewer than `MIN_TRIALS` moves or `MIN_KEPT` kept, or none rejected."""
    kept = np.asarray(kept, float)
    if len(kept) < MIN_TRIALS or kept.sum() < MIN_KEPT or kept.sum() == len(kept):
        return None
    x = np.asarray(x, float)
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = (x - mean) / scale
    weights, bias = np.zeros(z.shape[1]), math.log(kept.mean() / (1 - kept.mean()))
    for _ in range(300):
        error = 1.0 / (1.0 + np.exp(-(z @ weights + bias))) - kept
        weights -= 0.5 * (z.T @ error / len(kept) + 1e-3 * weights)
        bias -= 0.5 * error.mean()
    return KeptModel(mean, scale, weights, bias)


class MoveProposal:
    """The learned choice of the pieces a pass tries, for one refinement (`placer.heuristics.refine.Refiner`)."""

    def __init__(self, edges: np.ndarray, unit_compute: np.ndarray, devices: int, *, seed: int = 0):
        """`edges`: [E, 3] (unit, unit, bytes) in either direction; `unit_compute`: [U, D] seconds of each unit on
        each device (0 where it has no kernel)."""
        a, b, w = edges[:, 0].astype(np.int64), edges[:, 1].astype(np.int64), edges[:, 2].astype(float)
        self._a, self._b, self._w = np.concatenate([a, b]), np.concatenate([b, a]), np.concatenate([w, w])
        self._compute = unit_compute
        self._devices = devices
        units = len(unit_compute)
        self._rng = np.random.default_rng(seed)
        self._trials = 0
        self._tried_at = np.full(units, -1, np.int64)  # trial count when each unit was last tried
        self._changed_at = np.full(units, -1, np.int64)  # ... when it or a unit it exchanges tensors with moved
        self._failures = np.zeros(units)  # moves of its pieces tried and rejected since it last moved
        self._x: list[np.ndarray] = []
        self._kept: list[bool] = []
        self._rows: dict[int, np.ndarray] = {}  # this pass's features per piece key
        self.model: KeptModel | None = None
        """The model the last pass chose by (None while every piece is tried)."""

    def choose(self, keys: np.ndarray, current: np.ndarray, pieces: int) -> tuple[list[int], bool]:
        """The piece keys a pass tries, first to try first, and whether that is every piece. `keys`: [U] piece key
        of each unit (a level's part times the devices plus the unit's device); `current`: [U] device per unit;
        `pieces`: the level's parts."""
        unique, x = self.features(keys, current, pieces)
        self._rows = dict(zip(unique.tolist(), x))
        order = self._rng.permutation(len(unique))
        self.model = fit_kept_model(self._x[-RECENT_TRIALS:], self._kept[-RECENT_TRIALS:])
        if self.model is None:
            return unique[order].tolist(), True
        score = self.model.score(x)
        ranked = np.argsort(-score, kind="stable")
        chosen = math.ceil(PROPOSED_SHARE * len(unique))
        rest = ranked[chosen:]
        explored = rest[self._rng.random(len(rest)) < EXPLORED_SHARE]
        tried = np.concatenate([ranked[:chosen], explored])
        return unique[tried].tolist(), len(tried) == len(unique)

    def record(self, key: int, members: np.ndarray, kept: bool, neighbours: np.ndarray) -> None:
        """The verdict on a move of piece `key` (its units `members`); `neighbours`: the units they exchange
        tensors with."""
        row = self._rows.get(key)
        if row is not None:
            self._x.append(row)
            self._kept.append(kept)
            if len(self._kept) > 2 * RECENT_TRIALS:  # only the latest are fitted: a long refinement keeps no more
                del self._x[:-RECENT_TRIALS], self._kept[:-RECENT_TRIALS]
        self._trials += 1
        self._tried_at[members] = self._trials
        if kept:
            self._failures[members] = 0
            self._changed_at[members] = self._trials
            self._changed_at[neighbours] = self._trials
        else:
            self._failures[members] += 1

    def features(self, keys: np.ndarray, current: np.ndarray, pieces: int) -> tuple[np.ndarray, np.ndarray]:
        """([P] the pieces' keys, [P, len(FEATURES)] each one's features) of a pass (arguments as `choose`'s)."""
        unique, piece = np.unique(keys, return_inverse=True)
        count, devices = len(unique), self._devices
        here = unique % devices
        compute = self._compute[np.arange(len(current)), current]
        load = np.bincount(current, weights=compute, minlength=devices)
        units = np.bincount(piece, minlength=count).astype(float)
        piece_compute = np.bincount(piece, weights=compute, minlength=count)
        outside = piece[self._a] != piece[self._b]
        exchanged = np.bincount(piece[self._a[outside]] * devices + current[self._b[outside]],
                                weights=self._w[outside], minlength=count * devices).reshape(count, devices)
        total = exchanged.sum(axis=1)
        own = exchanged[np.arange(count), here]
        elsewhere = exchanged.copy()
        elsewhere[np.arange(count), here] = 0.0
        safe = np.maximum(total, 1e-30)
        changed = np.bincount(piece, weights=(self._changed_at > self._tried_at).astype(float), minlength=count)
        never = np.bincount(piece, weights=(self._tried_at < 0).astype(float), minlength=count)
        x = np.stack([
            np.full(count, math.log10(pieces)), np.log10(units), np.log10(piece_compute + 1e-9),
            load[here] / max(load.max(), 1e-30), np.where(total > 0, (total - own) / safe, 0.0),
            np.where(total > 0, elsewhere.max(axis=1) / safe, 0.0), np.log10(total + 1.0),
            np.bincount(piece, weights=self._failures, minlength=count) / units, (changed > 0).astype(float),
            (never == units).astype(float)], axis=1)
        return unique, x
