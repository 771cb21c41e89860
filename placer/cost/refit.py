"""The calibrated twin refit to measured steps of the graph it prices: one factor on each transfer's core cost.

`placer calibrate` prices a transfer's core time from probes that send tensors in bursts between idle workers.
In a model's step tensors leave one by one between ops, and each wakes threads on both workers: on the testbed a
tensor of a scattered cut costs the two workers 100-200 µs of CPU where a contiguous split's costs 50-70 µs
(`experiments/probes/transfer_pattern.py`, docs/results/simulator-fidelity.md). MobileNetV3Small's METIS split
sends 352 tensors a step; on 2026-11-30 its workers ran 31.2 and 30.2 ms of CPU per step beside 12.7 and 8.4 ms of
ops (the whole graph on one worker: 22.4 beside 19.4), about 106 µs per tensor where the calibration charged 69
(`experiments/probes/step_decomposition.py`), and every split of that graph was predicted 13-28 % too fast: a
planner trained on such a twin learns to cut more than it should. How much more a tensor costs depends on the
graph and its cuts, not on the testbed alone, so it is fitted per graph from the
steps of placements measured on the target: the factor on the calibration's per-transfer core costs (sender and
receiver alike) that puts their predictions closest to what was measured.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Mapping

from placer.placement import Placement

TRANSFER_COST_FIELDS = ("send_cpu", "recv_cpu")
"""The calibration's costs the factor scales: each transfer's fixed core time at either end (not per byte: what a
scattered cut adds is thread wake-ups per tensor, whatever its size)."""

FACTORS = tuple(2 ** (step / 9) for step in range(19))
"""Factors tried, 8 % apart, from the calibrated cost to four times it. Never below: the calibration's probes send
tensors in bursts, the cheapest way a tensor leaves (`experiments/probes/transfer_bursts.py`: one sent alone costs
each core 1.3-1.8 times one in a burst), so a fit below 1 would take the twin's other errors out on the transfers
(on two-tower, 2026-11-30, METIS sends three tensors and is predicted 25-36 % too slow: a fit down to 0.5 chose
0.5)."""

MIN_PLACEMENTS = 3
"""Measured placements that cut edges needed for a fit: fewer would fit one placement's noise."""

MIN_GAIN = 0.02
"""How much the median error must fall for the factor to be kept: less is within a step's noise on the testbed
(a placement's step moves 5-7 % from minute to minute, `experiments/probes/machine_drift.py`)."""


@dataclass(frozen=True)
class TransferRefit:
    """The factor fitted on measured steps, and how far the twin was from them before and after."""

    factor: float
    """1.0 where the fit did not lower the median error by `MIN_GAIN`: the calibration's costs stand."""
    placements: tuple[str, ...]
    error_before: float
    """Median |predicted / measured - 1| over `placements`, at the calibration's costs (each against the reference's,
    where one was measured)."""
    error_after: float
    """... at `factor` (the best factor tried, even where it was not kept)."""
    best_factor: float
    reference: str = ""
    """The one-device placement the errors were taken against; empty: none."""

    @property
    def changed(self) -> bool:
        return self.factor != 1.0

    def describe(self) -> str:
        fitted_on = f"{len(self.placements)} measured placements ({', '.join(self.placements)})" + (
            f", each against {self.reference}'s step" if self.reference else "")
        if self.changed:
            return (f"the twin's core time per transfer x{self.factor:.2f}, fitted to {fitted_on}: their median "
                    f"error {100 * self.error_before:.1f} % -> {100 * self.error_after:.1f} %")
        kept = (f"the twin's core time per transfer kept as calibrated: on {fitted_on} its median error is "
                f"{100 * self.error_before:.1f} %")
        if self.best_factor == 1.0 or self.error_after >= self.error_before:
            # The fit ranks factors by the median |log error|, which can favour one whose median |error| in per
            # cent is no lower: naming it ("x3.43 would give 10.9 %" beside 10.6 %) reads as a contradiction.
            return kept + " (no dearer transfer fits them better)"
        return kept + f" (x{self.best_factor:.2f} would give {100 * self.error_after:.1f} %)"


def fit_transfer_factor(simulator, measured: Mapping[str, tuple[Placement, float]],
                        reference: tuple[str, Placement, float] | None = None) -> TransferRefit | None:
    """The factor of `FACTORS` on `simulator`'s per-transfer core costs (`TRANSFER_COST_FIELDS`) that minimizes
    the median |log(predicted / measured)| over `measured` (name -> placement, measured step seconds), counting
    only placements that run ops on more than one device. With `reference` (name, placement, seconds: a
    placement on one device, which sends nothing, measured beside them), each error is read against the
    reference's: what the machine's speed at that minute does to every step alike is not put on the transfers
    (on two-tower, whose cuts send a few tensors, fits without it gave x3.7 in one run and x1 in the next two).
    None when fewer than `MIN_PLACEMENTS` span devices, or the simulator charges transfers no core time (modeled
    GPUs)."""
    config = simulator.config
    if not any(getattr(config, field) for field in TRANSFER_COST_FIELDS):
        return None
    cuts = {}
    for name, (placement, seconds) in measured.items():
        if seconds > 0 and math.isfinite(seconds) and placement.devices_used > 1:
            cuts[name] = (placement.group_device_array, seconds)
    if len(cuts) < MIN_PLACEMENTS:
        return None

    level = 0.0
    if reference is not None:  # sends nothing: its prediction does not depend on the factor
        _, placement, seconds = reference
        level = math.log(simulator.simulate(placement.group_device_array).step_time / seconds)

    def errors(factor: float) -> list[float]:
        scaled = simulator.reconfigured(**{field: getattr(config, field) * factor for field in TRANSFER_COST_FIELDS})
        return [math.log(scaled.simulate(devices).step_time / seconds) - level for devices, seconds in cuts.values()]

    def median_error(logs: list[float]) -> float:
        return statistics.median(abs(math.expm1(value)) for value in logs)

    scored = {factor: statistics.median(abs(value) for value in errors(factor)) for factor in FACTORS}
    best = min(FACTORS, key=lambda factor: (scored[factor], abs(math.log(factor))))
    before, after = median_error(errors(1.0)), median_error(errors(best))
    return TransferRefit(best if before - after >= MIN_GAIN else 1.0, tuple(cuts), before, after, best,
                         reference[0] if reference is not None else "")


def refit_changes(calibration, refit: TransferRefit) -> dict[str, float]:
    """The calibration's fields as `refit` changes them (`placer.cost.calibrated.calibration_variant`)."""
    return {field: getattr(calibration, field) * refit.factor for field in TRANSFER_COST_FIELDS}
