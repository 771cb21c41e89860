"""How faithful a simulator is: rank and error metrics of predicted against measured step times, and how good
the decisions made from the predictions are (the bias on the placements predicted fastest, the regret).

Pure functions on two equally long sequences of seconds, one entry per placement (NumPy only).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

Seconds = Sequence[float] | np.ndarray


def spearman(measured: Seconds, predicted: Seconds) -> float:
    """Spearman's rank correlation (ties get their average rank); nan when either side is constant."""
    x, y = _checked(measured, predicted)
    return _pearson(_average_ranks(x), _average_ranks(y))


def kendall_tau(measured: Seconds, predicted: Seconds) -> float:
    """Kendall's tau-b: (concordant - discordant) pairs over sqrt(pairs untied in measured * pairs untied in
    predicted), so ties on either side neither count for nor against; nan when either side is constant."""
    x, y = _checked(measured, predicted)
    upper = np.triu_indices(len(x), k=1)
    x_order = np.sign(x[:, None] - x[None, :])[upper]
    y_order = np.sign(y[:, None] - y[None, :])[upper]
    untied = np.count_nonzero(x_order) * np.count_nonzero(y_order)
    return float(np.sum(x_order * y_order) / np.sqrt(untied)) if untied else float("nan")


def abs_errors(measured: Seconds, predicted: Seconds) -> np.ndarray:
    """|predicted - measured| / measured per placement (0.1 is 10 %)."""
    x, y = _checked(measured, predicted)
    if np.any(x <= 0):
        raise ValueError("relative errors need positive measured step times")
    return np.abs(y - x) / x


def pair_order_agreement(measured: Seconds, predicted: Seconds, min_gap: float = 0.05) -> tuple[float, int]:
    """Of the placement pairs whose measured times differ by more than `min_gap` (relative to the faster of
    the two), the share the prediction orders the same way, and how many such pairs there are.

    Pairs closer than `min_gap` are left out: measurement noise orders them, so no simulator could be
    expected to. A predicted tie on a pair that differs counts as a wrong order. (nan, 0) if no pair differs."""
    x, y = _checked(measured, predicted)
    if np.any(x <= 0):
        raise ValueError("pair order needs positive measured step times")
    upper = np.triu_indices(len(x), k=1)
    gap = (np.abs(x[:, None] - x[None, :]) / np.minimum(x[:, None], x[None, :]))[upper]
    distinct = gap > min_gap
    pairs = int(np.count_nonzero(distinct))
    if pairs == 0:
        return float("nan"), 0
    same = (np.sign(x[:, None] - x[None, :]) == np.sign(y[:, None] - y[None, :]))[upper]
    return float(np.count_nonzero(same & distinct) / pairs), pairs


def top_predicted_bias(measured: Seconds, predicted: Seconds, top: int = 3) -> float:
    """Mean signed error (predicted - measured) / measured over the `top` placements predicted fastest: what a
    planner that picks by the prediction is told about its picks. Negative: the simulator is optimistic there.
    Ties in the prediction keep the given order."""
    x, y = _checked(measured, predicted)
    if top < 1:
        raise ValueError(f"top counts the placements predicted fastest: at least 1, got {top}")
    picked = np.argsort(y, kind="stable")[:top]
    return float(np.mean((y[picked] - x[picked]) / x[picked]))


def regret(measured: Seconds, predicted: Seconds) -> float:
    """(measured time of the placement predicted fastest - the fastest measured) / the fastest measured: what
    picking by the prediction costs (0: it picks the measured best). Ties in the prediction keep the given order."""
    x, y = _checked(measured, predicted)
    if np.any(x <= 0):
        raise ValueError("regret needs positive measured step times")
    return float((x[int(np.argmin(y))] - x.min()) / x.min())


def fidelity_summary(measured: Seconds, predicted: Seconds) -> dict[str, Any]:
    """Every metric at once, for one report row. Errors are fractions (0.1 is 10 %); p90 interpolates linearly."""
    errors = abs_errors(measured, predicted)
    pair_order, pairs = pair_order_agreement(measured, predicted)
    return {
        "placements": len(errors),
        "spearman": spearman(measured, predicted),
        "kendall_tau": kendall_tau(measured, predicted),
        "median_abs_error": float(np.median(errors)),
        "p90_abs_error": float(np.percentile(errors, 90)),
        "pair_order": pair_order,
        "pairs": pairs,
        "top3_bias": top_predicted_bias(measured, predicted, 3),
        "regret": regret(measured, predicted),
    }


def _checked(measured: Seconds, predicted: Seconds) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(measured, dtype=float)
    y = np.asarray(predicted, dtype=float)
    if x.ndim != 1 or y.ndim != 1:
        raise ValueError("measured and predicted are flat sequences of seconds, one per placement")
    if len(x) != len(y):
        raise ValueError(f"{len(x)} measured but {len(y)} predicted step times: give one of each per placement")
    if len(x) < 2:
        raise ValueError(f"fidelity metrics compare placements, so they need at least 2, got {len(x)}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("step times must be finite: leave failed placements out before comparing")
    return x, y


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 1; tied values share the mean of the ranks they span."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    _, inverse = np.unique(values, return_inverse=True)
    totals = np.bincount(inverse, weights=ranks)
    counts = np.bincount(inverse)
    return (totals / counts)[inverse]


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a - a.mean(), b - b.mean()
    scale = np.sqrt(np.sum(a * a) * np.sum(b * b))
    return float(np.sum(a * b) / scale) if scale else float("nan")
