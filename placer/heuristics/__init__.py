"""Heuristic placements, the baselines every learned placement is compared against: single-device,
round-robin, expert, cpu-only, random, METIS, Scotch and Baechi's m-TOPO, m-ETF and m-SCT, by name.

    from placer.heuristics import make_heuristic, time_heuristics
    placement = make_heuristic("m-etf", graph, target.devices, simulator=target.simulator)
    timings = time_heuristics(target, ["single-device", "metis"])   # name -> HeuristicTiming
"""

from placer.heuristics.registry import (
    ALIASES, Heuristic, HeuristicError, HeuristicInputs, applicable_heuristics, canonical_name, check_heuristic,
    heuristics, is_heuristic_name, make_heuristic,
)
from placer.heuristics.timing import HeuristicTiming, time_heuristics
from placer.heuristics.trivial import cpu_only_placement, random_placement, single_device_placement

__all__ = [
    "ALIASES", "Heuristic", "HeuristicError", "HeuristicInputs", "HeuristicTiming", "applicable_heuristics",
    "canonical_name", "check_heuristic", "cpu_only_placement", "heuristics", "is_heuristic_name", "make_heuristic",
    "random_placement", "single_device_placement", "time_heuristics",
]
