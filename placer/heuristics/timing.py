"""Time a set of named heuristics on one target: each one's placement, its step time there, and how long
making it took, or why it could not be made. Every comparison against the baselines starts here.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from placer.errors import PlacerError
from placer.heuristics.registry import HeuristicError, canonical_name, make_heuristic
from placer.placement import Placement

if TYPE_CHECKING:  # the cost layer measures through placer.measure, which makes heuristics by name
    from placer.cost import CostTarget, StepTime
    from placer.cost.targets import PlacementLike


@dataclass(frozen=True)
class HeuristicTiming:
    """One heuristic's placement on a target and its step time there, or why it has none."""

    name: str
    placement: Placement | None
    """None when the heuristic could not place the graph here (`error` says why)."""
    step_time: StepTime | None
    """The target's step time of the placement: a failed StepTime when it cannot run (out of memory, ...);
    None without a placement."""
    placing_seconds: float
    """Seconds spent making the placement (0 for one that was given already made)."""
    error: str | None = None
    """Why the heuristic could not place the graph (unknown, not applicable, a library missing, no room)."""

    @property
    def ok(self) -> bool:
        """The placement was made and ran."""
        return self.step_time is not None and self.step_time.ok

    @property
    def seconds(self) -> float:
        """The step time in seconds; inf when there is no placement or it failed."""
        return self.step_time.seconds if self.ok else math.inf


def time_heuristics(target: CostTarget, names: Iterable[str], *, model: str | None = None, seed: int = 0,
                    strict: bool = False, simulator: Any = None, made: Mapping[str, PlacementLike] | None = None,
                    progress: Callable[[list[str]], Iterable[str]] | None = None) -> dict[str, HeuristicTiming]:
    """Make each heuristic in `names` for `target`'s graph and devices and evaluate it there, by canonical name
    (aliases resolved), in the order given. A placement that cannot run comes back as a failed StepTime.

    model: the built-in model's name (the expert placement needs one); None for a user's model.
    simulator: the op costs the cost-reading heuristics place from; default the target's own (None on real
    execution, where those heuristics cannot be made unless a calibrated simulator is given).
    strict: raise HeuristicError for a heuristic that cannot be made here (unknown, not applicable, a library
    missing), as for names a user gave; otherwise it comes back with its `error`. A heuristic whose rule
    finds no placement (a list scheduler out of memory) or whose library raises always comes back with its
    error: that is a result.
    made: placements already made, by name (a Placement or a device per unit): timed as given.
    progress: wraps the list of names as they are worked through (a progress bar)."""
    simulator = target.simulator if simulator is None else simulator
    made = {canonical_name(name): placement for name, placement in (made or {}).items()}
    names = list(names)
    timings: dict[str, HeuristicTiming] = {}
    for name in progress(names) if progress is not None else names:
        started = time.perf_counter()
        try:
            name = canonical_name(name)
            if name in made:
                placement = target.placement(made[name]).with_metadata(method=name)
            else:
                placement = make_heuristic(name, target.graph, target.devices, model=model, simulator=simulator,
                                           seed=seed)
        except PlacerError as error:
            if strict and isinstance(error, HeuristicError):
                raise
            timings[name] = HeuristicTiming(name, None, None, time.perf_counter() - started, str(error))
            continue
        except Exception as error:  # noqa: BLE001
            # METIS, Scotch, HiGHS and numba raise their own errors: one heuristic that breaks on a graph is
            # a row of the comparison, not the end of it
            timings[name] = HeuristicTiming(name, None, None, time.perf_counter() - started,
                                            f"{type(error).__name__}: {error}")
            continue
        placing = 0.0 if name in made else time.perf_counter() - started
        timings[name] = HeuristicTiming(name, placement, target.evaluate(placement), placing)
    return timings
