"""Does a model learned while refining, choosing which pieces each pass tries, take the refinement further in the
same time?

    python experiments/probes/move_proposal.py [--setups nmt-4:paper@8xH100 ...] [--checkpoints 30 60 120 240]
        [--observe 120] [--out results/move_proposal.json]

The refinement (`placer.heuristics.refine.Refiner`) tries every piece of a level in random order, and keeps one
move in a few at its coarsest levels and one in tens to hundreds at single units. With `pieces_tried="learned"`, a logistic model
fitted on the moves tried so far (`placer.heuristics.move_proposal`) picks the half of a pass's pieces it scores
best, and a few of the others.

Per setup, from its fastest heuristic placement: first (with --observe S) the refinement as it is, for S seconds,
with every move it tries described as the model sees it: per level, how well each feature alone tells a kept move
from a rejected one (area under the ROC curve; 0.5 is chance) and how well the model fitted on the first half of
the level's moves ranks the second half (its area, and the share of the step time the second half's kept moves
took off that lies in the model's top quarter and top half). Then each choice of pieces refines for the last
checkpoint, one after the other in this process (pin it to a core of its own: they are compared by what they
reach in wall time), read at every checkpoint. Simulated; nothing is measured.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import write_report  # noqa: E402
from experiments.probes.refine_devices import checkpoint_rows  # noqa: E402

COLUMNS = ["setup", "units", "pieces_tried", "heuristic", "heuristic_ms", "at_checkpoints_ms", "refined_ms",
           "closed_pct", "finest_pieces", "evaluations", "moves", "wall_s"]
LEVEL_COLUMNS = ["setup", "pieces", "moves_tried", "kept", "best_feature", "best_feature_auc", "model_auc",
                 "gain_in_top_quarter_pct", "gain_in_top_half_pct"]


def area_under_roc(score: np.ndarray, kept: np.ndarray) -> float | None:
    """The chance that a kept move scores above a rejected one (ties half)."""
    kept = kept.astype(bool)
    if kept.all() or not kept.any():
        return None
    order = np.argsort(score, kind="stable")
    ranks = np.empty(len(score))
    ranks[order] = np.arange(1, len(score) + 1)
    for value in np.unique(score):  # ties share their mean rank
        tied = score == value
        ranks[tied] = ranks[tied].mean()
    return float((ranks[kept].sum() - kept.sum() * (kept.sum() + 1) / 2) / (kept.sum() * (~kept).sum()))


def observed_trials(graph, simulator, start: np.ndarray, seconds: float, seed: int):
    """The refinement as it is for `seconds`, every move it tried as (level's pieces, features, kept, gain)."""
    from placer.heuristics.move_proposal import MoveProposal
    from placer.heuristics.refine import Refiner

    class Observed(Refiner):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.observer = MoveProposal(self._unit_edges, self._unit_compute, self.devices, seed=seed)
            self.trials: list[tuple] = []

        def _next_pass(self) -> bool:
            more = super()._next_pass()
            if more:
                keys, rows = self.observer.features(self._keys, self.current, self.finest_pieces)
                self.rows = dict(zip(keys.tolist(), rows))
            return more

        def _try_piece(self, key: int) -> None:
            before, moves = self.seconds, self.moves
            members = np.flatnonzero(self._keys == key)
            super()._try_piece(key)
            kept = self.moves > moves
            self.trials.append((self.finest_pieces, self.rows[key], kept, before - self.seconds if kept else 0.0))
            near = np.concatenate([self._adjacent[m] for m in members]) if kept else members[:0]
            self.observer.record(key, members, kept, near)

    refiner = Observed(graph, simulator, start, seed=seed, pieces_tried="learned")
    refiner._proposal = None  # observed only: the pass tries every piece, as the refinement does by default
    refiner.run(time.monotonic() + seconds)
    return refiner.trials


def level_rows(setup: str, trials: list[tuple]) -> list[dict]:
    from placer.heuristics.move_proposal import FEATURES, fit_kept_model

    rows = []
    for pieces in sorted({t[0] for t in trials}):
        level = [t for t in trials if t[0] == pieces]
        x = np.array([t[1] for t in level])
        kept = np.array([t[2] for t in level])
        gain = np.array([t[3] for t in level])
        areas = {name: area_under_roc(x[:, j], kept) for j, name in enumerate(FEATURES)}
        areas = {name: max(a, 1 - a) for name, a in areas.items() if a is not None}  # either direction tells
        row = dict(setup=setup, pieces=pieces, moves_tried=len(level), kept=int(kept.sum()))
        if areas:
            best = max(areas, key=areas.get)
            row.update(best_feature=best, best_feature_auc=areas[best])
        half = len(level) // 2
        if kept[:half].sum() >= 5 and kept[half:].sum() >= 5:
            model = fit_kept_model(x[:half], kept[:half])
            if model is not None:
                score = model.score(x[half:])
                ranked = gain[half:][np.argsort(-score, kind="stable")]
                total = ranked.sum()
                row.update(model_auc=area_under_roc(score, kept[half:]),
                           gain_in_top_quarter_pct=100 * ranked[:len(ranked) // 4].sum() / total,
                           gain_in_top_half_pct=100 * ranked[:len(ranked) // 2].sum() / total)
        rows.append(row)
        print(f"{setup}: {pieces} pieces, {len(level)} moves tried, {int(kept.sum())} kept; "
              + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()
                          if k in ("best_feature", "best_feature_auc", "model_auc", "gain_in_top_half_pct")), flush=True)
    return rows


def setup_rows(setup: str, checkpoints: list[float], observe: float, seed: int = 0) -> tuple[list[dict], list[dict]]:
    from experiments.gpu_machines import fastest_heuristic, opened_setup
    from placer.heuristics.refine import PIECE_CHOICES

    levels = []
    with opened_setup(setup) as (model, graph, target, bound):
        heuristic, timing = fastest_heuristic(target, model, seed=seed)
        if observe > 0:
            levels = level_rows(setup, observed_trials(graph, target.simulator, timing.placement.group_device_array,
                                                       observe, seed))
        rows = checkpoint_rows(setup, graph, target, bound, heuristic, timing, checkpoints, "pieces_tried",
                               {choice: {"pieces_tried": choice} for choice in PIECE_CHOICES}, seed)
    return rows, levels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setups", nargs="+", default=["nmt-4:paper@8xH100", "transformer:paper@8xH100"])
    parser.add_argument("--checkpoints", type=float, nargs="+", default=[30, 60, 120, 240],
                        help="seconds of refining at which each choice's step time is read (ascending; the last is "
                        "how long each refines)")
    parser.add_argument("--observe", type=float, default=120,
                        help="seconds of the refinement as it is, every move it tries described (0: none)")
    parser.add_argument("--proposed-share", type=float, default=None,
                        help="share of a pass's pieces the learned choice tries (default: "
                        "placer.heuristics.move_proposal.PROPOSED_SHARE; 1: every piece, the best-scored first)")
    parser.add_argument("--out", default="results/move_proposal.json")
    args = parser.parse_args(argv)
    if args.proposed_share is not None:
        if not 0 < args.proposed_share <= 1:
            parser.error("--proposed-share is a share in (0, 1]")
        from placer.heuristics import move_proposal

        move_proposal.PROPOSED_SHARE = args.proposed_share
    if any(b <= a for a, b in zip(args.checkpoints, args.checkpoints[1:])) or min(args.checkpoints) <= 0:
        parser.error("give positive --checkpoints in ascending order")
    rows, levels = [], []
    for setup in args.setups:
        more, described = setup_rows(setup, args.checkpoints, args.observe)
        rows += more
        levels += described
    command = "python experiments/probes/move_proposal.py " + " ".join(argv if argv is not None else sys.argv[1:])
    from placer.heuristics.move_proposal import PROPOSED_SHARE

    write_report("move_proposal", COLUMNS, rows, args.out, command=command.strip(), checkpoints=args.checkpoints,
                 levels=levels, proposed_share=PROPOSED_SHARE, caveat="simulated on modeled machines; each choice refined for the same wall time "
                 "on one core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
