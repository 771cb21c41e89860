"""The calibrated twin refit to measured steps of the graph it prices: one factor on the ops' profiled costs, from
a one-device step (`fit_compute_level`), and one on each transfer's core cost, from steps that span devices
(`fit_transfer_factor`).

The ops' costs are profiled once per graph, and the machine's speed moves from minute to minute: on a fresh clone
on 2026-11-30, two-tower's one-device step measured 6.21 ms where its profile, taken minutes before, predicted 4.72,
and the learned placement was then predicted 31 % too fast. A one-device step measured at the check sends nothing,
so it prices the ops alone, at the machine's speed of that minute, which is what the twin then learns on.

The transfers:

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

LEVEL_TOLERANCE = 0.10
"""How far a one-device step's prediction may be from its measured step before the ops' costs are scaled to it:
a placement's step moves 5-7 % from minute to minute on the testbed (`experiments/probes/machine_drift.py`), and
one measurement within that says nothing of the machine's speed."""

LEVEL_LIMITS = (0.5, 2.0)
"""The least and most the ops' costs are scaled: a one-device step further from its profile than that is not the
machine's speed moving (a disturbed measurement, or a profile of another machine), and is said, not fitted."""

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


@dataclass(frozen=True)
class ComputeLevel:
    """The factor on the ops' profiled costs that puts a one-device step's prediction on its measured step."""

    factor: float
    """1.0 where the prediction was within `LEVEL_TOLERANCE`, or the fit fell outside `LEVEL_LIMITS`."""
    reference: str
    predicted: float
    """Seconds the twin predicted for the reference, at the profiled costs."""
    measured: float
    fitted: float
    """The factor that puts the prediction on the measured step, kept or not."""

    @property
    def changed(self) -> bool:
        return self.factor != 1.0

    def describe(self) -> str:
        seen = (f"{self.reference} measured {1e3 * self.measured:.2f} ms, predicted {1e3 * self.predicted:.2f} ms "
                f"from the ops' profile")
        if self.changed:
            return f"the ops' profiled costs x{self.factor:.2f}, to the machine's speed at the check: {seen}"
        if abs(self.predicted / self.measured - 1) <= LEVEL_TOLERANCE:
            return f"the ops' profiled costs kept: {seen}, within {100 * LEVEL_TOLERANCE:.0f} %"
        return (f"the ops' profiled costs kept: {seen}, x{self.fitted:.2f} apart, too far to be the machine's "
                "speed moving (a disturbed measurement?)")


def fit_compute_level(simulator, reference: tuple[str, Placement, float]) -> ComputeLevel | None:
    """The factor on `simulator`'s op costs that makes its prediction of `reference` (name, a placement on one
    device, its measured step seconds) the measured step, kept where the prediction misses by more than
    `LEVEL_TOLERANCE` and the factor lies within `LEVEL_LIMITS`. None when the reference spans devices or was not
    measured."""
    name, placement, seconds = reference
    if placement.devices_used != 1 or not (seconds > 0 and math.isfinite(seconds)):
        return None
    devices = placement.group_device_array

    def predicted(factor: float) -> float:
        return simulator.with_op_costs_scaled(factor).simulate(devices).step_time

    # The step is its overheads plus its ops, one after another or side by side on one device's slots: linear in
    # the factor, so two points find it and a third confirms it.
    at_profile = simulator.simulate(devices).step_time
    overheads = predicted(1e-9)
    factor = (seconds - overheads) / (at_profile - overheads) if at_profile > overheads else 1.0
    if factor > 0 and abs(predicted(factor) / seconds - 1) > 1e-3:  # not linear after all: one secant step more
        at_factor = predicted(factor)
        factor = 1 + (factor - 1) * (seconds - at_profile) / (at_factor - at_profile)
    factor = max(factor, 1e-9)
    kept = abs(at_profile / seconds - 1) > LEVEL_TOLERANCE and LEVEL_LIMITS[0] <= factor <= LEVEL_LIMITS[1]
    return ComputeLevel(factor if kept else 1.0, name, at_profile, seconds, factor)


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
