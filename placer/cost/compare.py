"""Placements timed side by side: interleaved rounds, each timing every placement once.

The machine's speed drifts over minutes, so only timings taken together compare: a placement timed alone
at the start of a run and another timed an hour later differ by the drift. Every caller that compares
placements (`placer measure --rounds`, an experiment's final comparison, the training loop's confirmation
of a would-be best, the benchmarks) goes through `compare`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Generic, Iterable, Mapping, Protocol, Sequence, TypeVar


class Timed(Protocol):
    """Anything with a step time and whether it ran: a `StepTime`, or a caller's record around one."""

    seconds: float

    @property
    def ok(self) -> bool: ...


T = TypeVar("T", bound=Timed)


@dataclass(frozen=True)
class Compared(Generic[T]):
    """One placement's timings over the rounds of a comparison."""

    name: str
    timings: tuple[T, ...]

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.timings) and bool(self.timings)

    @property
    def timed(self) -> bool:
        """Whether it was timed at all: a comparison that reached its deadline leaves some placements untimed."""
        return bool(self.timings)

    @property
    def median_timing(self) -> T:
        """The timing with the median step time (the faster middle one of an even count; failures sort last)."""
        ranked = sorted(self.timings, key=lambda t: t.seconds if t.ok else math.inf)
        return ranked[(len(ranked) - 1) // 2]

    @property
    def median(self) -> float:
        """Median step time in seconds over the rounds; inf if any round failed."""
        return self.median_timing.seconds if self.ok else math.inf

    @property
    def failure(self) -> T | None:
        return next((t for t in self.timings if not t.ok), None)

    @property
    def rounds(self) -> list[float | None]:
        return [t.seconds if t.ok else None for t in self.timings]


FIRST_TIMING_MARGIN = 2.0
"""A placement's first timing starts its session and warms it up, and how long that takes depends on what it runs
on: in one `placer optimize` of a 10,063-op Keras MobileNetV3 on `local:2` the first timings took 5.0 s (one
process) to 7.1 s (placements over both workers), so the longest first so far can fall short of the next. Twice it
is what a first timing is allowed before a deadline."""


def compare(evaluate: Callable[[object], T | Sequence[T]], placements: Mapping[str, object], rounds: int, *,
            retry_failed: bool = False, progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
            deadline: float | None = None) -> dict[str, Compared[T]]:
    """Time every placement once per round, in the same order each round, for `rounds` rounds.

    evaluate: a `CostTarget.evaluate`, or any function returning one timing (or several, e.g. a vector
    environment's sub-environments) of a placement. A placement that failed (OOM, timeout, crash) is not
    timed again in later rounds unless `retry_failed`: a hang would cost its timeout every round.
    progress: wraps the round iterator (e.g. a tqdm progress bar). deadline: a `time.monotonic()` by which every
    timing must end: one is not started when it would not, judged by the longest of the placement's timings so far (a
    session dropped to free memory is set up again, so a later timing may take as long as the first), and a first
    one by FIRST_TIMING_MARGIN times the longest first timing of any placement so far; placements not reached have
    fewer timings, or none (`Compared.timings` is empty)."""
    if rounds < 1:
        raise ValueError(f"compare needs at least one round, got {rounds}")
    timings: dict[str, list[T]] = {name: [] for name in placements}
    took: dict[str, float] = {}
    longest_first = 0.0
    round_numbers: Iterable[int] = range(rounds)
    for _ in progress(round_numbers) if progress else round_numbers:
        for name, placement in placements.items():
            if not retry_failed and any(not t.ok for t in timings[name]):
                continue
            expected = took.get(name, FIRST_TIMING_MARGIN * longest_first)
            if deadline is not None and time.monotonic() + expected >= deadline:
                continue  # a cheaper placement later in the round may still fit
            started = time.monotonic()
            result = evaluate(placement)
            if name not in took:
                longest_first = max(longest_first, time.monotonic() - started)
            took[name] = max(took.get(name, 0.0), time.monotonic() - started)
            timings[name].extend(result if isinstance(result, (list, tuple)) else [result])
    return {name: Compared(name, tuple(values)) for name, values in timings.items()}


LEADERS_WITHIN = 0.10
"""How close to the fastest median a placement must come to be timed again by `compare_and_retime_leaders`: on the
2-core testbed one placement's timings vary 4-10 % (coefficient of variation) between rounds, so medians of
three rounds that differ by less than this can rank either way."""


def compare_and_retime_leaders(evaluate: Callable[[object], T | Sequence[T]], placements: Mapping[str, object],
                               rounds: int, *, within: float = LEADERS_WITHIN,
                               progress: Callable[[Iterable[int]], Iterable[int]] | None = None
                               ) -> dict[str, Compared[T]]:
    """`compare` in `rounds` rounds, then `rounds` more rounds of the placements whose median is within `within`
    of the fastest (when there are two or more): the decision between close placements rests on twice the
    timings, without spending them on those far behind. The leaders' medians are over all their rounds."""
    compared = compare(evaluate, placements, rounds, progress=progress)
    fastest = min((c.median for c in compared.values() if c.ok), default=math.inf)
    leaders = {name: placements[name] for name, c in compared.items()
               if c.ok and math.isfinite(fastest) and c.median <= fastest * (1 + within)}
    if len(leaders) < 2:
        return compared
    again = compare(evaluate, leaders, rounds, progress=progress)
    return {name: Compared(name, c.timings + again[name].timings) if name in again else c
            for name, c in compared.items()}


T_CRITICAL_95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761,
                 1.753, 1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701,
                 1.699, 1.697)
"""Student's t at one-sided 95 % for 1 to 30 degrees of freedom; the normal's 1.645 past them."""


def paired_rounds(first: Compared[T], second: Compared[T]) -> list[tuple[float, float]]:
    """(first's, second's) step time of each round both were timed in and ran, in order: timings taken in the same
    round ran minutes apart at most, so the machine's drift is shared within a pair."""
    return [(a, b) for a, b in zip(first.rounds, second.rounds) if a is not None and b is not None]


def separated(faster: Compared[T], slower: Compared[T]) -> bool:
    """True when `slower` is slower than `faster` beyond the machine's noise: a one-sided paired t-test over their
    rounds, on the log of each round's ratio (so a round the whole machine ran slow counts as any other), rejects
    equal speed at 5 %. With one paired round no test can be made, and its ratio is taken at its word (a slower
    round separates); a placement that failed is always separated from one that ran."""
    if faster.ok and not slower.ok:
        return True
    logs = [math.log(b / a) for a, b in paired_rounds(faster, slower)]
    if len(logs) < 2:
        return bool(logs) and logs[0] > 0
    mean = sum(logs) / len(logs)
    deviation = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
    if deviation == 0:
        return mean > 0
    critical = T_CRITICAL_95[len(logs) - 2] if len(logs) - 1 <= len(T_CRITICAL_95) else 1.645
    return mean / (deviation / math.sqrt(len(logs))) > critical


def tie_set(compared: Mapping[str, Compared[T]]) -> list[str]:
    """The names within the noise of the fastest median: the fastest, then every placement that ran and is not
    `separated` from it, fastest median first."""
    ran = sorted((c for c in compared.values() if c.ok), key=lambda c: c.median)
    if not ran:
        return []
    return [c.name for c in ran if c is ran[0] or not separated(ran[0], c)]


def spread(compared: Compared[T]) -> float | None:
    """How far its rounds spread around their median: (slowest - fastest) / median, None with fewer than 2."""
    values = [s for s in compared.rounds if s is not None]
    if len(values) < 2 or not compared.ok:
        return None
    return (max(values) - min(values)) / compared.median
