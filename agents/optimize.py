"""`placer optimize MODEL --target TARGET`: the fastest way to run MODEL's training step on this machine, searched
over how the machine is used (one process and its thread pools, or the target's workers and theirs), where the ops
run, and a micro-batch schedule; priced on the calibrated twin of TARGET, confirmed measured side by side, written
as a plan file. On a modeled GPU machine (modeled:4xH100) nothing can be measured: agents/optimize_modeled.py
searches placement and schedule there by simulation alone. Both take their candidates from the makers of
agents/candidates.py and print them with agents/candidate_table.py.

The search is staged (one pass of alternating dimensions), not joint, because the dimensions are priced by
different means at very different costs:

1. One process under every thread setting `placer tune` sweeps (TensorFlow's default, the recommended one,
   every intra/inter pair up to the cores), measured. The calibrated twin cannot price these (its op costs were
   profiled under the target's own pools), and pricing them otherwise (`placer tune --predict`) profiles the
   ops in a process per intra-op width: on a machine of few cores that costs what measuring them does, and
   measuring decides. Past `MAX_SETTINGS` (N*N pairs on N cores), the priced fastest are measured.
2. Placements on TARGET: every heuristic of the registry and, optionally, the hierarchical planner trained for
   a few updates on the twin (`agents.loop.train`), or a run's learned placement (`--from-run`). Priced in
   milliseconds each on the twin, so all of them are priced. Before the planner learns, the `REFIT_PLACEMENTS`
   heuristics' placements the twin predicts fastest among those that span devices are measured once each, beside
   a one-device placement, and the twin's core time per transfer is refit to them (`placer.cost.refit`: how much a tensor costs the testbed
   depends on the graph's cuts), so that the planner does not learn to cut where the calibration underprices it.
   The check takes at most `REFIT_SHARE` of --budget: a big graph's measurements leave the comparison its time.
3. For the placement predicted fastest only: the target's workers under the other thread settings of `placer
   tune` (each setting needs a testbed of its own, so not for every placement), and with `--schedules` GPipe,
   1F1B and Tessel over micro-batches, priced op by op on the twin (each needs the model rebuilt at the
   micro-batch size and its step profiled: seconds per placement, minutes for a joint grid), for it and for the
   expert's placement (the placement pipeline schedules were made for).

Then every one-dimension candidate (one process under each setting; each distinct placement under the target's
default pools; the learned one) and the best `keep` predicted of each joint family (the same dimensions changed
from the same placement) are measured side by side
in interleaved rounds (`placer.cost.compare`). Those within the noise of the fastest (a paired t-test over their
rounds, `placer.cost.compare.tie_set`) are measured again until they separate or reach MOST_ROUNDS (`retime_ties`);
the simplest plan of what is still tied is recommended (one process before workers, TensorFlow's default pools
before tuned ones), and the table and the plan name the tie. Because every one-dimension candidate is in that same
comparison, the staging can miss a joint combination but never recommends a plan slower, beyond the noise, than
the best one-dimension candidate: `recommend` checks it.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from placer.errors import PlacerError
from placer.files import check_output_file
from placer.host import descendants_resident_bytes, memory_available, memory_total
from placer.measure.config import MeasureConfig
from placer.simulate.bound import StepTimeBound, gap_closed, times_bound

from agents.candidates import SCHEDULE_METHODS, Candidate, learned_placement, merge_same_placements
from agents.flags import setting

if TYPE_CHECKING:
    from placer.concurrency import ThreadSetting
    from placer.cost import Compared, StepTime
    from placer.graph.opgraph import OpGraph
    from placer.measure.machine_check import MachineCheck
    from placer.placement import Placement
    from placer.plan import MachineUse, Plan
    from placer.replicas import Replicas
    from placer.schedule.plan import SchedulePlan

TESTBED_MICRO_BATCHES = 2
"""Micro-batches of --schedules on a real target when --micro-batches is not given: its workers are few."""
MEASURE_CONFIG = MeasureConfig(warmup_steps=3, timed_steps=10, kept_sessions=8)
"""How each candidate is timed in each round, as `placer tune` times a thread setting; a candidate's session is kept
for its later rounds (a 16k-op graph's set-up is several times its steps)."""
MAX_SETTINGS = 12
"""Thread settings measured per machine use at most: on N cores `placer tune` sweeps N*N pairs, each a process of
its own. Beyond this, one process keeps TensorFlow's default, the recommended setting and those the simulator
prices fastest (`settings_to_measure`); the target's workers, which it cannot price, keep the pairs of a power of
two intra-op threads and one or two inter-op threads (`placer tune MODEL --target TARGET` times them all)."""
CALIBRATION_SECONDS = 60.0
"""About what calibrating a 2-worker testbed takes, before anything of the model is measured."""
MEASURING_MINIMUM = 20.0
"""Seconds below which a budget left after calibrating cannot profile a model and measure one placement."""
REFIT_PLACEMENTS = 4
"""Heuristics' placements measured before learning, to refit the twin's per-transfer core time to this graph
(`placer.cost.refit`): the fastest it predicts among those that span devices."""

REFIT_SHARE = 0.25
"""Most of --budget the twin's check takes: no placement of it starts past that share after the check began (the
first run's calibration comes before it, and can take a quarter of a short budget). Each measurement of a big graph
sets up a session of its own: InceptionResNetV2's five took 326 s of a 600 s budget on `local:2` (2026-11-30), and the
measured comparison, which decides the plan, was left 216 s for 10 candidates."""

MEASURING_RESERVE = 60.0
"""Seconds of the budget kept for the measured comparison: optional stages (learning, schedules) are skipped
rather than eat into it."""


class OptimizeError(PlacerError):
    """Input `placer optimize` refuses before any work, or a search with nothing that ran."""


@dataclass(frozen=True)
class OptimizeArgs:
    """What `placer optimize` searches, and for how long."""

    model: str = setting("", cli=False)
    """A built-in model (`placer models`), or module:function or file.py:function returning an OpGraph or a
    compiled keras.Model."""
    size: str = "tiny"
    """Size of a built-in model: tiny, small or paper."""
    target: str = setting("local:2", flags=("--cluster",), metavar="TARGET")
    """The target whose devices the placements use: a real one, local:N (the testbed) or inprocess:N, N at least 2,
    with one process (inprocess:1) under every thread setting tried beside it; or a modeled GPU machine
    (modeled:4xH100, modeled:8xA100-nvlink3), where placement and schedule are searched on the simulator alone,
    nothing is measured, and the plan is marked simulated for that machine."""
    calibration: str | None = setting(None, metavar="FILE")
    """Real targets: the target's calibration (`placer calibrate --target TARGET --out FILE`): reused if FILE exists, else
    calibrated now (about a minute on local:2) into FILE. Default: --out's name with .calibration.json."""
    rounds: int = 3
    """Real targets: interleaved rounds of the measured comparison; each candidate's step time is its median. Those
    within the noise of the fastest (a paired t-test over rounds) are measured again, 2 rounds at a time up to 9,
    until they separate; the simplest of a tie is recommended."""
    learn_updates: int = setting(10, metavar="N")
    """Updates of 32 placements (SIMULATED_SAMPLES_PER_UPDATE) the hierarchical planner trains on the calibrated
    twin, or on the modeled machine's simulator (0: no learned placement)."""
    from_run: str | None = setting(None, metavar="RUN_DIR")
    """Real targets: also a run's learned placement (`placer train MODEL --target TARGET`): the best it kept."""
    schedules: bool | None = None
    """Also micro-batch schedules over --micro-batches: on a real target GPipe, 1F1B and Tessel's fast search for
    the placement predicted fastest and the expert's (off unless given); on a modeled machine those and ZB-H1 for
    the expert's placement (and a language model's balanced stages), the fastest others and one GPU's (on unless
    --no-schedules, for models that can be built at the micro-batch size)."""
    micro_batches: int | None = setting(None, metavar="M")
    """Micro-batches per step of the schedules (must divide the batch); default 2 on a real target, and on a
    modeled machine one per GPU (a pipeline stage each) when that divides the batch, else 2, then the pipelines'
    placements again over twice and four times that, where they divide the batch, until a count's bound shows
    that none of its schedules can beat the fastest plan found (given, only this count, scheduled even then)."""
    replicas: int | None = setting(None, metavar="D")
    """Data parallelism: D replicas only (1: none). Modeled machines: each on GPUs / D GPUs and batch / D samples,
    its gradients all-reduced; default every D above 1 that divides both the GPUs and the batch, each replica
    placed by every heuristic. Real targets: one replica a device (D = the target's devices), the variables and
    the update on the first; default: that, when the devices divide the batch of a model that can be built at
    another batch (a built-in one, or a model function with a `batch` parameter or a Keras model's open batch)."""
    keep: int = setting(2, metavar="K")
    """Real targets: of each joint family (a placement with tuned pools, with a schedule), the K predicted fastest
    are measured."""
    budget: float = setting(180.0, metavar="SECONDS")
    """Seconds the whole search may take: learning and schedules are cut short or skipped to keep 60 for the
    measured comparison, and no measurement starts once it is spent (the table then shows what was measured, and
    the plan is the fastest of those); on a modeled machine learning takes at most half of what is left when it
    starts, and a placement is scheduled only while what is left holds what the last one took. Calibrating (about
    a minute, once per target) and profiling (once per graph) are not cut."""
    out: str = setting("plan.json", metavar="PLAN")
    """Where to write the recommended plan (`placer apply PLAN` runs it; a modeled machine's plan is read, never
    run here)."""
    seed: int = 0
    """Seed of the heuristics and the learned planner."""
    progress: bool = True
    """Progress bars on stderr."""


# -- candidates and what they measured ------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """A candidate's timings in the measured comparison."""

    candidate: Candidate
    compared: Compared[StepTime]
    not_measured: str = ""
    """Why it has no timing when the reason is not the budget ("lack of memory")."""

    @property
    def ok(self) -> bool:
        return self.compared.ok

    @property
    def median(self) -> float:
        return self.compared.median


def to_measure(candidates: Sequence[Candidate], keep: int) -> list[Candidate]:
    """What the measured comparison times: every one-dimension candidate (so the recommendation can be held to
    the best of them), and of each joint family (the same dimensions changed from the same placement) the `keep`
    predicted fastest, besides every one the twin cannot price. Order kept."""
    kept: set[str] = set()
    families: dict[tuple, list[Candidate]] = {}
    for candidate in candidates:
        if candidate.one_dimension or candidate.predicted is None:
            kept.add(candidate.name)
        else:
            placed = None if candidate.placement is None else tuple(candidate.placement.group_devices)
            families.setdefault((candidate.dimensions, placed), []).append(candidate)
    for family in families.values():
        kept.update(c.name for c in sorted(family, key=lambda c: c.predicted_seconds)[:keep])
    return [c for c in candidates if c.name in kept]


MEMORY_KEPT_FREE = 0.2
"""Share of the machine's memory left free when choosing how many candidate processes to start: every machine a
candidate needs is started before any timing, and processes past the machine's memory thrash, which makes every
timing of the comparison wrong."""


def fit_in_memory(candidates: Sequence[Candidate], running: set[str], machine_bytes: int,
                  available_bytes: int | None) -> tuple[list[Candidate], list[Candidate]]:
    """The candidates whose machines the memory holds, in the given order, and those left out. A candidate on a
    machine already `running` (by name) costs nothing; one that starts a machine (a process under a thread
    setting, or a testbed under other pools) costs `machine_bytes`; one process under TensorFlow's default (no
    dimension changed) is always kept. Without a reading of the memory, all are kept."""
    if available_bytes is None or machine_bytes <= 0:
        return list(candidates), []
    allowance = available_bytes - MEMORY_KEPT_FREE * (memory_total() or 0)
    started = set(running)
    kept, left_out = [], []
    for candidate in candidates:
        machine = str(candidate.machine)
        if machine in started:
            kept.append(candidate)
        elif machine_bytes <= allowance or not candidate.dimensions:
            allowance -= machine_bytes
            started.add(machine)
            kept.append(candidate)
        else:
            left_out.append(candidate)
    return kept, left_out


def left_out_for_memory_note(left_out: Sequence[Candidate], kept: Sequence[Candidate], running: set[str],
                              machine_bytes: int, available_bytes: int | None) -> str:
    """Why `fit_in_memory` left these candidates out: what one more machine costs, and which machines the memory
    went to."""
    started = list(dict.fromkeys(str(c.machine) for c in kept if str(c.machine) not in running))
    available = (available_bytes or 0) / 2**30
    return (f"not measured for lack of memory: {'; '.join(c.name for c in left_out)}. Each starts processes of its "
            f"own (about {machine_bytes / 2**30:.1f} GiB for this graph): of the {available:.1f} GiB available, "
            f"{MEMORY_KEPT_FREE:.0%} of the machine's memory is kept free and the rest holds {len(started)} such "
            f"machine{'s' * (len(started) != 1)} beside the target ({', '.join(started) or 'none'})")


class FirstRunMemory:
    """Whether the memory holds one more machine's first run of the graph. A process loads the graph, its session
    and their state only when it first runs a step, so a machine's cost is known only then (a profile read from
    the cache leaves the target's processes small, and one process holding a whole 40k-op graph grew by 6 GB): each
    first run is sized by the most a first run has grown this process's descendants so far, at least `estimate`,
    and is refused while the memory available, less `MEMORY_KEPT_FREE` of the machine's, would not hold it. The
    first runs on the machines in `always` (the target's, one process under TensorFlow's default) are never
    refused; every first run is weighed."""

    def __init__(self, estimate: int, always: Iterable[str] = ()):
        self.estimate = estimate
        self.always = set(always)
        self.ran: set[str] = set()

    def admits(self, machine: str) -> bool:
        available = memory_available()
        if machine in self.ran or machine in self.always or available is None:
            return True
        return available - MEMORY_KEPT_FREE * (memory_total() or 0) >= self.estimate

    def make_room(self, machine: str, measurers: Mapping[str, Any]) -> list[str]:
        """Before a measurement on `machine`: the other machines' measurers (by name) give back what their past
        sessions hold (`Measurer.release_memory`), the one holding most first, until a first run's worth (`estimate`)
        fits beside `MEMORY_KEPT_FREE` of the machine's memory, or none holds any. A TensorFlow process keeps what
        its sessions of a big graph held: on 2026-11-30 one process under TensorFlow's default held 7 GiB of
        InceptionResNetV2 while the testbed set up a session of 12, and the machine ran out. The machines released,
        in order."""
        released: list[str] = []
        while True:
            available = memory_available()
            if available is None or available - MEMORY_KEPT_FREE * (memory_total() or 0) >= self.estimate:
                return released
            holding = {key: measurer.held_bytes for key, measurer in measurers.items()
                       if key != machine and key not in released}
            fullest = max(holding, key=holding.get, default=None)
            if fullest is None or holding[fullest] <= 0:
                return released
            measurers[fullest].release_memory()
            released.append(fullest)

    def first_run(self, machine: str, run: Callable[[], StepTime]) -> StepTime:
        """`run()`, the first on `machine` (later ones just run), weighed."""
        if machine in self.ran:
            return run()
        before = sum(descendants_resident_bytes().values())
        try:
            return run()
        finally:
            self.ran.add(machine)
            self.estimate = max(self.estimate, sum(descendants_resident_bytes().values()) - before)


def confirm(candidates: Sequence[Candidate], measure: Callable[[Candidate], StepTime], rounds: int, *,
            progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
            deadline: float | None = None) -> list[Measured]:
    """Every candidate measured side by side in `rounds` interleaved rounds (`placer.cost.compare`), none started
    after `deadline` (a `time.monotonic()`): those not reached are left untimed, in the order given."""
    from placer.cost import compare

    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise ValueError(f"candidates need distinct names, got {names}")
    compared = compare(measure, {c.name: c for c in candidates}, rounds, progress=progress, deadline=deadline)
    return [Measured(c, compared[c.name]) for c in candidates]


TIE_ROUNDS = 2
"""Rounds added at a time for the candidates tied with the fastest (`retime_ties`)."""
MOST_ROUNDS = 9
"""The most rounds a tied candidate is measured in before its tie is reported as one."""
WORKER_DIMENSIONS = ("placement", "replicas", "schedule")
"""What runs a step on the target's workers rather than in one process."""


def simplicity(candidate: Candidate) -> tuple[int, bool]:
    """How much a plan changes from one process under TensorFlow's default pools (lower is simpler): the dimensions
    it changes, then whether it needs the target's workers."""
    return len(candidate.dimensions), any(d in WORKER_DIMENSIONS for d in candidate.dimensions)


def tied_with_fastest(measured: Sequence[Measured]) -> list[Measured]:
    """The candidates within the noise of the fastest median (`placer.cost.compare.tie_set`: a paired test over
    their rounds), fastest first."""
    from placer.cost.compare import tie_set

    by_name = {m.candidate.name: m for m in measured}
    return [by_name[name] for name in tie_set({name: m.compared for name, m in by_name.items()})]


def retime_ties(measured: Sequence[Measured], measure: Callable[[Candidate], StepTime], *,
                most_rounds: int = MOST_ROUNDS, deadline: float | None = None,
                say: Callable[[str], None] = lambda line: None) -> list[Measured]:
    """The candidates tied with the fastest measured again, `TIE_ROUNDS` interleaved rounds at a time, until they
    separate, any has `most_rounds` rounds, or `deadline` passes. The others keep their rounds."""
    from placer.cost import compare
    from placer.cost.compare import Compared

    measured = list(measured)
    while True:
        tied = tied_with_fastest(measured)
        if len(tied) < 2 or max(len(m.compared.timings) for m in tied) >= most_rounds:
            return measured
        if deadline is not None and time.monotonic() >= deadline:
            return measured
        rounds = min(TIE_ROUNDS, most_rounds - max(len(m.compared.timings) for m in tied))
        say(f"{len(tied)} candidates within the noise of the fastest ({', '.join(m.candidate.name for m in tied)}): "
            f"{rounds} more round{'s' if rounds > 1 else ''} of them")
        again = compare(measure, {m.candidate.name: m.candidate for m in tied}, rounds, deadline=deadline)
        if not any(c.timings for c in again.values()):
            return measured
        measured = [dataclasses.replace(m, compared=Compared(m.candidate.name, m.compared.timings
                                                             + again[m.candidate.name].timings))
                    if m.candidate.name in again else m for m in measured]


def recommend(measured: Sequence[Measured]) -> Measured:
    """The simplest of the candidates tied with the fastest measured (`tied_with_fastest`; `simplicity`: one process
    before workers, TensorFlow's default pools before tuned ones), the faster median between equally simple ones.
    Never slower, beyond the noise, than the best one-dimension candidate of the same comparison: one flag away, a
    user would have had that one."""
    from placer.cost.compare import separated

    ran = [m for m in measured if m.ok]
    if not ran:
        if not any(m.compared.timed for m in measured):
            raise OptimizeError("--budget ran out before any candidate was measured: raise --budget (the calibration "
                                "and the profile are cached, so a second run spends it on measuring)")
        failures = "; ".join(f"{m.candidate.name}: {m.compared.failure.failure} ({m.compared.failure.message})"
                             for m in measured if m.compared.failure is not None)
        raise OptimizeError(f"every candidate failed when measured: {failures}")
    tied = tied_with_fastest(ran)
    simple = [m for m in ran if m.candidate.one_dimension]
    best_simple = min(simple, key=lambda m: m.median) if simple else None
    admissible = [m for m in tied if best_simple is None or m is best_simple
                  or not separated(best_simple.compared, m.compared)] or tied[:1]
    return min(admissible, key=lambda m: (simplicity(m.candidate), m.median))


@dataclass(frozen=True)
class OptimizeResult:
    """The search: every candidate measured side by side, the recommendation and its plan, what was priced but
    not measured, and what was skipped."""

    model: str
    size: str
    graph: str
    target: str
    calibration: str
    rounds: int
    measured: tuple[Measured, ...]
    recommended: Measured
    plan: Plan
    plan_path: str
    priced_only: tuple[Candidate, ...] = ()
    """Joint candidates priced on the twin but not among the `keep` predicted fastest of their family."""
    notes: tuple[str, ...] = ()
    """What was skipped or could not be made, and why."""
    seconds: float = 0.0
    bound: StepTimeBound | None = None
    """The step time no placement on the target's devices can beat, predicted on the calibrated twin."""
    ops: int = 0
    """Ops of the model's training step (initializers included)."""
    phase_seconds: Mapping[str, float] = field(default_factory=dict)
    """Where the search's time went: building the graph, calibrating, profiling, the heuristics, learning, schedules,
    measuring."""
    poor_fit: str | None = None
    """Set when the calibration fits its probes poorly (its worst probes): the predictions are then unreliable, and
    the table marks them so."""
    schedule_bound: StepTimeBound | None = None
    """What no schedule of the measured scheduled plans can beat, predicted on the calibrated twin
    (`placer.schedule.predict.schedule_bound`): `bound` does not hold for a micro-batch schedule. None where no
    schedule was measured."""
    machine_check: MachineCheck | None = None
    """How busy the machine was before anything was measured (`placer.measure.machine_check`)."""

    def bound_of(self, candidate: Candidate) -> StepTimeBound | None:
        """The bound `candidate` is read against: the schedules' for a scheduled plan, the placements' for a
        placement of the whole batch on the target's workers; none for one process (another machine use than the
        workers the twin models) nor for replicas, whose slices the twin's bound does not cover."""
        if candidate.replicas is not None or "placement" not in candidate.dimensions:
            return None
        return self.bound if candidate.schedule is None else self.schedule_bound

    @property
    def gap_closed(self) -> float | None:
        """The share of the best heuristic's measured distance to the bound that the learned placement closed;
        None without both (or a bound)."""
        learned = [m.median for m in self.measured if m.ok and any(
            name.startswith("learned") for name in m.candidate.name.split(" = "))]
        heuristics = [m.median for m in self.measured if m.ok and "heuristic " in m.candidate.made_by
                      and len(m.candidate.dimensions) == 1]
        if self.bound is None or not learned or not heuristics:
            return None
        return gap_closed(min(heuristics), min(learned), self.bound)

    def describe(self) -> str:
        from placer.cost.compare import spread as rounds_spread

        from agents.candidate_table import Row, candidate_table, milliseconds, ratio

        winner = self.recommended.median
        rows = sorted(self.measured, key=lambda m: m.median)
        rounds = f"{self.rounds} interleaved round" + ("s" if self.rounds > 1 else "")
        most = max((len(m.compared.timings) for m in self.measured), default=0)
        if most > self.rounds:
            rounds += f" (up to {most} for those that were within the noise of the fastest)"
        unreliable = "" if self.poor_fit is None else (
            f" (UNRELIABLE, marked ?: it fits its probes poorly, {self.poor_fit}; calibrate again on a quiet machine)")
        lines = [f"{self.model} ({self.size}, graph {self.graph!r}): {len(rows)} ways to run its step, measured side by "
                 f"side in {rounds}; predicted on calibrated:{self.calibration}{unreliable}",
                 *([f"  {self.machine_check.describe()}"] if self.machine_check and not self.machine_check.quiet else [])]
        tied = tied_with_fastest(self.measured)
        table = []
        for m in rows:
            c = m.candidate
            predicted = milliseconds(c.predicted.seconds) if c.priced else "-"
            if self.poor_fit is not None and predicted != "-":
                predicted += "?"
            if m.ok:
                measured, versus = milliseconds(m.median), f"{m.median / winner:.2f}x"
                if len(tied) > 1 and m in tied:
                    versus += " tie"
            elif not m.compared.timed:
                measured, versus = "-", f"(not measured: {m.not_measured or '--budget ran out'})"
            else:
                measured, versus = "failed", f"({m.compared.failure.failure}: {m.compared.failure.message[:60]})"
            spread = rounds_spread(m.compared)
            table.append(Row(c, m is self.recommended, predicted,
                             ratio(times_bound(m.median if m.ok else None, self.bound_of(c))), versus, measured,
                             "-" if spread is None else f"{100 * spread:.0f}%"))
        lines += candidate_table(table)
        if len(tied) > 1:
            rounds = max(len(m.compared.timings) for m in tied)
            lines.append(f"  tie: {len(tied)} plans within the noise of the fastest (a paired t-test over up to "
                         f"{rounds} rounds cannot tell them apart at 5 %): {', '.join(m.candidate.name for m in tied)}; "
                         "the recommended is the simplest of them (one process before workers, TensorFlow's default "
                         "pools before tuned ones)")
        lines.append("  spread: (slowest - fastest round) / median, over each plan's rounds")
        for candidate in self.priced_only:
            lines.append(f"  priced only (not among the fastest predicted of its kind): {candidate.name}, "
                         f"{candidate.predicted_seconds * 1e3:.2f} ms predicted")
        if self.bound is not None:
            lines.append(f"  x bound: measured over the {self.bound.describe()}; predicted, for placements on "
                         f"{self.target}'s workers only (one process and replicas use the machine otherwise: '-'; the "
                         "twin's error can take a placement below it)")
            if self.schedule_bound is not None:
                lines.append(f"  {'':9}a scheduled plan over the schedules' {self.schedule_bound.describe()}: the step "
                             "in micro-batches, gradient gates left out")
            if self.gap_closed is not None:
                lines.append(f"  gap closed: the learned placement closed {100 * self.gap_closed:+.1f}% of the best "
                             "heuristic's measured distance to the bound")
        lines += [f"  note: {note}" for note in self.notes]
        best = self.recommended.candidate
        lines.append(f"recommended: {best.name} on {best.machine}, {winner * 1e3:.2f} ms per step measured"
                     + _versus_default(self.measured, self.recommended))
        on_target = [m for m in rows if m.ok and "placement" in m.candidate.dimensions]
        if "placement" not in best.dimensions and on_target:  # say plainly that splitting the step did not pay
            lines.append(f"  the fastest use of {self.target}'s devices, {on_target[0].candidate.name}, measured "
                         f"{on_target[0].median * 1e3:.2f} ms ({on_target[0].median / winner:.2f}x)")
        lines.append(f"wrote {self.plan_path} in {self.seconds:.0f} s of search; run it with `placer apply "
                     f"{self.plan_path}`")
        if self.phase_seconds:
            lines.append("  where the time went: " + ", ".join(f"{phase} {seconds:.0f} s"
                                                                for phase, seconds in self.phase_seconds.items()))
        return "\n".join(lines)

    def to_json_dict(self) -> dict[str, Any]:
        from placer.cost.compare import spread as rounds_spread

        tied = tied_with_fastest(self.measured)

        def row(m: Measured) -> dict[str, Any]:
            c = m.candidate
            return {"name": c.name, "dimensions": list(c.dimensions), "made_by": c.made_by, "machine": str(c.machine),
                    "schedule": None if c.schedule is None else {"method": c.schedule.method,
                                                                 "micro_batches": c.schedule.micro_batches},
                    "predicted": None if c.predicted is None else c.predicted.to_dict(),
                    "ok": m.ok, "measured": m.compared.timed, "not_measured": m.not_measured or None,
                    "median": m.median if m.ok else None,
                    "rounds": m.compared.rounds, "spread": rounds_spread(m.compared),
                    "tied_with_fastest": any(m is t for t in tied),
                    "vs_fastest": m.median / self.recommended.median if m.ok else None,
                    "x_bound": times_bound(m.median if m.ok else None, self.bound_of(c)),
                    "step_time": m.compared.median_timing.to_dict() if m.compared.timings else None}

        return {"model": self.model, "size": self.size, "graph": self.graph, "target": self.target,
                "calibration": self.calibration, "calibration_poor_fit": self.poor_fit, "rounds": self.rounds, "recommended": self.recommended.candidate.name,
                "plan": self.plan_path, "measured": [row(m) for m in self.measured],
                "priced_only": [{"name": c.name, "predicted": c.predicted.to_dict()} for c in self.priced_only],
                "notes": list(self.notes), "seconds": self.seconds,
                "bound": None if self.bound is None else {**self.bound.to_dict(), "predicted": True},
                "schedule_bound": None if self.schedule_bound is None else {**self.schedule_bound.to_dict(),
                                                                            "predicted": True},
                "gap_closed": self.gap_closed, "ops": self.ops, "phase_seconds": dict(self.phase_seconds),
                "machine_check": None if self.machine_check is None else self.machine_check.to_json_dict()}


def _versus_default(measured: Sequence[Measured], best: Measured) -> str:
    default = next((m for m in measured if not m.candidate.dimensions and m.ok), None)
    if default is None or default is best:
        return ""
    return f", {100 * (1 - best.median / default.median):.1f}% shorter than one process under TensorFlow's default"


# -- the search ------------------------------------------------------------------------------------------


def is_modeled_target(target: str) -> bool:
    """True for a modeled GPU machine's spec (modeled:4xH100), which `placer optimize` searches by simulation."""
    return isinstance(target, str) and target.strip().startswith("modeled")


def check_optimize_args(args: OptimizeArgs, *, allow_exposed_ports: bool = False):
    """Refuse, before any work, what cannot be searched; returns the parsed target (`InProcess`/`LocalTestbed`)."""
    from placer.measure import InProcess, LocalTestbed, parse_target
    from placer.models import check_model_spec, is_builtin_model

    if is_modeled_target(args.target):
        raise OptimizeError(f"{args.target} is a modeled machine, which nothing here can measure: "
                            "agents.optimize_modeled.optimize_modeled searches it (as `placer optimize` does)")
    if args.micro_batches is None:
        args = dataclasses.replace(args, micro_batches=TESTBED_MICRO_BATCHES)
    if not args.model:
        raise OptimizeError("which model? give MODEL (see `placer models`)")
    check_model_spec(args.model, args.size)
    target = parse_target(args.target, allow_exposed_ports=allow_exposed_ports)  # refuses cores this machine lacks
    devices = target.logical_cpus if isinstance(target, InProcess) else (
        target.workers if isinstance(target, LocalTestbed) else 0)
    if devices < 2:
        raise OptimizeError(f"placer optimize places ops over the target's devices and calibrates its links, so it needs "
                            f"a target this machine starts with at least two devices (local:2, inprocess:2), or a "
                            f"modeled GPU machine (modeled:4xH100), not {args.target!r}; one process under every thread "
                            "setting is tried beside a real target anyway")
    for name, value, least in (("--rounds", args.rounds, 1), ("--learn-updates", args.learn_updates, 0),
                               ("--keep", args.keep, 1), ("--micro-batches", args.micro_batches, 1)):
        if value < least:
            raise OptimizeError(f"{name} must be at least {least}, got {value}")
    if args.replicas is not None and args.replicas not in (1, devices):
        raise OptimizeError(f"--replicas {args.replicas}: on {args.target} a replica is one of its {devices} devices, "
                            f"so give --replicas {devices} (or 1: no data parallelism)")
    if args.replicas == devices and is_builtin_model(args.model):  # a model function's batch: once it is loaded
        from placer.models import require_rebuildable_batch
        from placer.replicas import Replicas

        Replicas.of_batch(require_rebuildable_batch(args.model, args.size), devices)  # refuses one not dividing it
    if not (math.isfinite(args.budget) and args.budget > 0):
        raise OptimizeError(f"--budget must be a positive number of seconds, got {args.budget}")
    if not calibration_file(args).exists() and args.budget < CALIBRATION_SECONDS + MEASURING_MINIMUM:
        raise OptimizeError(f"--budget {args.budget:g} s cannot calibrate {args.target} (about {CALIBRATION_SECONDS:.0f} "
                            f"s) and measure a placement: give at least {CALIBRATION_SECONDS + MEASURING_MINIMUM:.0f} "
                            "s, or --calibration FILE made earlier by `placer calibrate`")
    if args.schedules and is_builtin_model(args.model):  # a model function's batch: once it is loaded
        from placer.models import require_rebuildable_batch
        from placer.schedule.from_placement import check_micro_batches

        check_micro_batches(require_rebuildable_batch(args.model, args.size), args.micro_batches)
    if calibration_file(args).exists():
        _read_calibration(calibration_file(args), target)
    if args.from_run:
        _run_placement(args)
    check_output_file(args.out, "--out")
    if not calibration_file(args).exists():  # calibrated into it
        check_output_file(calibration_file(args), "--calibration" if args.calibration else "--out (its calibration)")
    return target


def optimize(args: OptimizeArgs, *, measure_config: MeasureConfig | None = None,
             thread_settings: Mapping[str, ThreadSetting] | None = None, allow_exposed_ports: bool = False,
             command: str | None = None, say: Callable[[str], None] | None = None) -> OptimizeResult:
    """Search, measure side by side, write the recommended plan to `args.out` (see the module docstring).

    thread_settings: the settings tried for one process and for the target's workers (default: `placer tune`'s
    candidates). command: the command line recorded in the plan to make it again. say: where progress lines go."""
    from placer.calibrate import calibrate
    from placer.concurrency import tuning_candidates
    from placer.cost import StepTime, open_target
    from placer.cost.calibrated import PREFIX, profiled_costs
    from placer.cost.targets import close_together
    from placer.measure.machine_check import check_machine
    from placer.models import is_builtin_model, load_model
    from placer.placement import check_same_graph
    from placer.simulate.bound import step_time_bound

    started = time.monotonic()
    target = check_optimize_args(args, allow_exposed_ports=allow_exposed_ports)
    if args.micro_batches is None:
        args = dataclasses.replace(args, micro_batches=TESTBED_MICRO_BATCHES)
    tell = say or (lambda line: print(line, file=sys.stderr, flush=True))

    def say(line: str) -> None:  # each phase's line says how much of --budget it starts with
        tell(f"[{time.monotonic() - started:4.0f} s of {args.budget:.0f}] {line}")

    measure_config = measure_config or MEASURE_CONFIG
    sweep = dict(thread_settings) if thread_settings is not None else tuning_candidates()
    calibration_path = calibration_file(args)
    command = command or _command_line(args)
    notes: list[str] = []

    def left() -> float:
        return args.budget - (time.monotonic() - started)

    clock = PhaseClock()
    phases, phase_done = clock.seconds, clock.done
    graph = load_model(args.model, args.size)
    phase_done("building the graph")
    if not is_builtin_model(args.model):  # before any process starts: what --replicas and --schedules need of it
        from placer.models import require_rebuildable_batch
        from placer.replicas import Replicas
        from placer.schedule.from_placement import check_micro_batches

        if args.replicas is not None and args.replicas > 1:
            Replicas.of_batch(require_rebuildable_batch(args.model, args.size), args.replicas)
        if args.schedules:
            check_micro_batches(require_rebuildable_batch(args.model, args.size), args.micro_batches)
    if args.from_run:  # before any process starts
        check_same_graph(_run_placement(args), graph)
    say(graph.summary())
    settings, left_out = settings_to_measure(sweep, MAX_SETTINGS, _settings_pricer(graph, measure_config, say))
    # Before anything is timed: what else keeps the cores busy is what the timings will meet.
    machine_check = check_machine()
    say(machine_check.describe())
    with ExitStack() as stack:
        opened: list = []  # every target, closed together at the end (`close_together`)
        stack.callback(close_together, opened)
        say(f"starting {target}")
        real = open_target(graph, target, measure_config=measure_config, allow_exposed_ports=allow_exposed_ports)
        opened.append(real)
        if calibration_path.exists():
            calibration = _read_calibration(calibration_path, target)
        else:
            say(f"calibrating {target}'s links and step overheads for its simulator (about a minute)")
            calibration = calibrate(real.measurer, progress=_progress(args, "calibrating", "round"))
            calibration.save(calibration_path)
        phase_done("starting and calibrating")
        say(f"profiling {graph.name}'s ops on {target} and learning which small constants TensorFlow sends, for the "
            "calibrated simulator (once per graph, cached)")
        profile = profiled_costs(graph, calibration, calibration_path, measurer=real.measurer)
        notes += [note for note in (control_flow_note(profile), compiled_calls_note(graph, profile)) if note]
        twin_spec = f"{PREFIX}{calibration_path.resolve()}"  # the plan names it: readable from any directory
        twin = stack.enter_context(open_target(graph, twin_spec))
        bound = step_time_bound(twin.simulator, simulated_on=twin_spec)
        phase_done("profiling")

        placements = _heuristic_candidates(args, target, twin, notes)
        phase_done("heuristics")
        twin_calibration, twin_calibration_path = calibration, calibration_path  # what the twin prices with
        if left() - MEASURING_RESERVE >= 10:
            refit = _refit_twin(args, placements, real, twin, calibration_path, say, notes,
                                deadline=time.monotonic() + REFIT_SHARE * args.budget)
            if refit is not None:
                refit_fit, refit_path = refit
                notes.append(refit_fit.describe())
                if refit_path is not None:  # the planner, pools and schedules are priced on the refit twin
                    twin_spec = f"{PREFIX}{refit_path.resolve()}"
                    twin_calibration, twin_calibration_path = _read_calibration(refit_path, target), refit_path
                    twin = stack.enter_context(open_target(graph, twin_spec))
                    bound = step_time_bound(twin.simulator, simulated_on=twin_spec)
                    placements = [c if c.placement is None else dataclasses.replace(c, predicted=twin.evaluate(c.placement))
                                  for c in placements]
            phase_done("checking the twin")
        if args.learn_updates:
            seconds = left() - MEASURING_RESERVE
            if seconds < 5:
                notes.append(f"no learned placement: {max(left(), 0):.0f} s of --budget left, and the measured "
                             f"comparison needs about {MEASURING_RESERVE:.0f}; raise --budget")
            else:
                say(f"training the hierarchical planner on {twin_spec} ({args.learn_updates} updates, at most "
                    f"{seconds:.0f} s)")
                learned = learned_placement(graph, twin_spec, updates=args.learn_updates, seconds=seconds,
                                            seed=args.seed, progress=args.progress)
                if learned is not None:
                    placements.append(_placement_candidate("learned", learned, target, twin,
                                                           learned.metadata.get("method", "")))
        if args.from_run:
            placement = _run_placement(args).to_placement(graph, twin.devices)
            placements.append(_placement_candidate(f"learned ({args.from_run})", placement, target, twin,
                                                   f"the best placement of run {args.from_run}"))
        phase_done("learning")
        placements = merge_same_placements(placements)
        best = min(placements, key=lambda c: c.predicted_seconds)
        joint = _pool_candidates(best, target, settings if thread_settings is not None else None)
        if args.schedules:
            if left() - MEASURING_RESERVE < 10:
                notes.append(f"no schedules: {max(left(), 0):.0f} s of --budget left; raise --budget")
            else:
                say(f"pricing {', '.join(SCHEDULE_METHODS)} over {args.micro_batches} micro-batches of {best.name} "
                    "op by op on the calibrated simulator")
                joint += _schedule_candidates(args, graph, best, real, twin, twin_calibration, twin_calibration_path,
                                              notes, time_limit=min(10.0, max(1.0, left() - MEASURING_RESERVE)))
                # The expert's placement is what pipeline schedules were made for: its best schedule is the
                # schedule-only decision a user of those papers would take.
                expert = next((c for c in placements if "expert" in c.name.split(" = ")), None)
                if expert is not None and expert is not best and left() - MEASURING_RESERVE >= 10:
                    say(f"pricing the same schedules of {expert.name}")
                    joint += _schedule_candidates(args, graph, expert, real, twin, twin_calibration,
                                                  twin_calibration_path, notes,
                                                  time_limit=min(10.0, max(1.0, left() - MEASURING_RESERVE)))
        replicated = [] if args.replicas == 1 else _data_parallel_candidates(args, target, real, notes)
        phase_done("pools and schedules")
        # Measured in this order each round: when --budget runs out, the untimed are the ones predicted slowest.
        # Data parallelism beside one process: the plan practitioners start from, one dimension changed.
        candidates = [*_one_process_candidates(settings), *replicated,
                      *sorted(placements, key=lambda c: c.predicted_seconds),
                      *sorted(joint, key=lambda c: c.predicted_seconds)]
        measured_candidates = to_measure(candidates, args.keep)
        measured_names = {c.name for c in measured_candidates}
        priced_only = (*(c for c in candidates if c.name not in measured_names),
                       *_one_process_candidates({name: sweep[name] for name in left_out}, left_out))

        targets = {str(target): real}
        machine_bytes = _machine_bytes(graph, real)
        in_order = measured_candidates
        measured_candidates, no_memory = fit_in_memory(in_order, set(targets), machine_bytes, memory_available())
        if no_memory and real.measurer.release_memory():  # what its past sessions held, back to the machine
            measured_candidates, no_memory = fit_in_memory(in_order, set(targets), machine_bytes, memory_available())
        if no_memory:
            notes.append(left_out_for_memory_note(no_memory, measured_candidates, set(targets), machine_bytes,
                                                  memory_available()))
        for candidate in measured_candidates:
            key = str(candidate.machine)
            if key not in targets:  # every process started before any timing: one that cannot start fails first
                say(f"starting {key}")
                targets[key] = open_target(graph, candidate.machine, measure_config=measure_config,
                                           allow_exposed_ports=allow_exposed_ports)
                opened.append(targets[key])
        measured_candidates = [c if c.placement is not None else dataclasses.replace(
            c, placement=_on_first_device(graph, targets[str(c.machine)].devices)) for c in measured_candidates]
        say(f"measuring {len(measured_candidates)} candidates side by side in {args.rounds} interleaved rounds")

        memory = FirstRunMemory(machine_bytes, always={str(target), *(str(c.machine) for c in measured_candidates
                                                                       if not c.dimensions)})
        refused: set[str] = set()

        def measure(candidate: Candidate) -> StepTime | list[StepTime]:
            key = str(candidate.machine)
            if not memory.admits(key):
                refused.add(candidate.name)
                return []  # untimed this round; weighed again in the next
            memory.make_room(key, {name: opened_target.measurer for name, opened_target in targets.items()})
            on = targets[key]
            if candidate.replicated is not None:  # the data-parallel step, as `placer apply` runs a replicated plan
                step_graph, placement = candidate.replicated
                return memory.first_run(key, lambda: StepTime.from_measurement(
                    on.measurer.measure(step_graph, placement), str(on.spec)))
            if candidate.scheduled is None:
                return memory.first_run(key, lambda: on.evaluate(candidate.placement))
            scheduled = candidate.scheduled  # the micro-batched step in the schedule's order, as `placer apply` runs it
            return memory.first_run(key, lambda: StepTime.from_measurement(
                on.measurer.measure(scheduled.graph, scheduled.placement), str(on.spec)))

        measured = confirm(measured_candidates, measure, args.rounds, progress=_progress(args, "measuring", "round"),
                           deadline=started + args.budget)
        measured = retime_ties(measured, measure, most_rounds=max(MOST_ROUNDS, args.rounds),
                               deadline=started + args.budget, say=say)
        short_of_memory = [m.candidate.name for m in measured if not m.compared.timed and m.candidate.name in refused]
        if short_of_memory:
            measured = [dataclasses.replace(m, not_measured="lack of memory") if m.candidate.name in short_of_memory
                        else m for m in measured]
            notes.append(f"not measured for lack of memory: {'; '.join(short_of_memory)}. A first run of this graph "
                         f"grew a machine's processes by up to {memory.estimate / 2**30:.1f} GiB, more than the "
                         "machine had left")
        restarted = {key: on.measurer.memory_restarts for key, on in targets.items() if on.measurer.memory_restarts}
        if restarted:
            notes.append("started afresh to give back the memory their past sessions held (a TensorFlow process keeps "
                         "what a closed session of a big graph held): " + ", ".join(
                             f"{key} {count} time{'s' * (count > 1)}" for key, count in restarted.items()))
        cut_short = [m.candidate.name for m in measured
                     if m.compared.failure is None and len(m.compared.timings) < args.rounds and not m.not_measured]
        if cut_short:
            notes.append(f"--budget ran out while measuring: {len(cut_short)} of {len(measured)} candidates have fewer "
                         f"than {args.rounds} rounds (those not measured at all are marked); raise --budget for all")
    phase_done("measuring")
    scheduled_bound = None
    if any(m.candidate.schedule is not None and m.ok for m in measured):
        from placer.schedule.micro_batch import build_micro_batch_graph
        from placer.schedule.predict import schedule_bound

        scheduled_bound = schedule_bound(build_micro_batch_graph(args.model, args.size, args.micro_batches),
                                         args.micro_batches, twin_spec)
    winner = recommend(measured)
    plan = plan_of(args, graph, winner, measured, target, twin_spec, command)
    plan.save(args.out)
    return OptimizeResult(args.model, args.size, graph.name, str(target), str(calibration_path), args.rounds,
                          tuple(measured), winner, plan, str(args.out), priced_only, tuple(notes),
                          time.monotonic() - started, bound, len(graph.ops), phases,
                          calibration.describe_residuals() if calibration.poor_fit else None, scheduled_bound,
                          machine_check)


class PhaseClock:
    """Where a search's time went: seconds per phase, each timed from the end of the phase before."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._since = time.monotonic()

    def done(self, phase: str) -> None:
        now = time.monotonic()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self._since
        self._since = now


def control_flow_note(costs) -> str:
    """One line naming the loops and conditionals a profile priced by their bodies, or "" when the step has none."""
    loops = costs.metadata.get("control_flow") or {}
    if not loops:
        return ""
    described = [f"{name} ({loop['iterations']} iterations, {loop['seconds'] * 1e3:.2f} ms)"
                 if loop.get("iterations") is not None else f"{name} ({loop['seconds'] * 1e3:.2f} ms)"
                 for name, loop in loops.items()]
    return (f"{len(loops)} loops or conditionals, priced by the bodies they ran and each placed with the ops that "
            f"start it: {', '.join(described)}")


def compiled_calls_note(graph, costs) -> str:
    """One line naming how many calls TensorFlow compiles with XLA the step keeps as one op each (Keras's grouped
    convolutions on CPU) and what a profile priced them at, or "" when it has none: such a unit is placed whole."""
    from placer.graph.control_flow import CALL_OPS

    calls = [op.name for op in graph.step_ops if op.type in CALL_OPS]
    if not calls:
        return ""
    seconds = sum(costs.seconds(name) for name in calls)
    return (f"{len(calls)} call{'' if len(calls) == 1 else 's'} compiled with XLA (Keras compiles grouped convolutions "
            f"so on CPU), each one op, placed whole and run compiled as `fit` runs them: {seconds * 1e3:.2f} ms of "
            "the profiled ops' time")


def settings_to_measure(settings: Mapping[str, ThreadSetting], count: int,
                        price: Callable[[Mapping[str, ThreadSetting]], Mapping[str, StepTime]]
                        ) -> tuple[dict[str, ThreadSetting], dict[str, StepTime]]:
    """The thread settings of one process to measure: all of `settings` when they are at most `count`; else
    TensorFlow's default, the recommended one, and of the others with a power-of-two intra-op pool the ones
    `price` predicts fastest, `count` in all. Also the settings left out with their predictions.

    price: predicted step times of the settings it is given, by name (`placer.concurrency.choose.price_settings`
    from op costs profiled at each of their intra-op widths: a process per width, hence powers of two only)."""
    if len(settings) <= count:
        return dict(settings), {}
    always = [name for name in settings if {"default", "recommended"} & set(name.split(" = "))]
    pricable = {name: s for name, s in settings.items() if name not in always and s.intra_op_threads
                and s.intra_op_threads & (s.intra_op_threads - 1) == 0}
    predicted = dict(price(pricable))
    ranked = sorted(pricable, key=lambda name: predicted[name].seconds if predicted[name].ok else math.inf)
    kept = set(always) | set(ranked[:max(count - len(always), 0)])
    return ({name: s for name, s in settings.items() if name in kept},
            {name: predicted[name] for name in ranked if name not in kept})


def _settings_pricer(graph: OpGraph, measure_config: MeasureConfig, say: Callable[[str], None]):
    def price(settings: Mapping[str, ThreadSetting]) -> Mapping[str, StepTime]:
        from placer.concurrency.choose import price_settings
        from placer.concurrency.width_costs import profile_widths

        widths = sorted({s.intra_op_threads for s in settings.values()})
        say(f"pricing {len(settings)} thread settings of one process from op costs profiled at {widths} intra-op "
            "threads")
        return price_settings(graph, settings, profile_widths(graph, widths, measure_config=measure_config)).step_times

    return price


def _one_process_candidates(settings: Mapping[str, ThreadSetting],
                            predicted: Mapping[str, StepTime] | None = None) -> list[Candidate]:
    """One process, one CPU device, every op on it, under each thread setting (TensorFlow's default changes
    nothing: no dimension); `predicted`: those the simulator priced."""
    return [Candidate(f"one process, {name}", () if "default" in name.split(" = ") else ("pools",),
                      thread_setting.target(1), None, predicted=(predicted or {}).get(name),
                      made_by=f"thread setting {thread_setting}")
            for name, thread_setting in settings.items()]


def _heuristic_candidates(args: OptimizeArgs, target, twin, notes: list[str]) -> list[Candidate]:
    """Every heuristic the registry can make here, priced on the twin; refused when none could."""
    from agents.candidates import heuristic_candidates

    candidates = heuristic_candidates(args.model, twin, target, notes, seed=args.seed, keep_failed=True,
                                      progress=_progress(args, "heuristics", "placement"))
    if not candidates:
        raise OptimizeError(f"no heuristic could place {args.model} on {args.target}: {'; '.join(notes)}")
    return candidates


def _machine_bytes(graph: OpGraph, real) -> int:
    """What one more machine running `graph` (a process under a thread setting) holds: the most one of the real
    target's processes held after a session of it (`Measurer.process_bytes`); where none was measured here (a cached
    profile), what those processes hold now, having run the graph. Not what they hold together after several
    sessions: a TensorFlow process keeps what a closed session of a big graph held, and on a testbed the client's
    copy of the graph is a process apart (InceptionResNetV2 on `local:2`: 12 GiB a session over three processes, 7
    GiB the largest; one process under TensorFlow's default held 7 GiB, 2026-11-30)."""
    largest = real.measurer.process_bytes(graph)
    if largest:
        return largest
    return sum(descendants_resident_bytes().values())


def _data_parallel_candidates(args: OptimizeArgs, target, real, notes: list[str]) -> list[Candidate]:
    """Data parallelism over the target's devices (a model that can be built at a slice of its batch, whose batch
    they divide: `placer.models.rebuildable_batch`): each device a replica running the step at batch / devices, the
    variables and the update on the first, measured as `placer.replicas.data_parallel_step` builds it. The twin
    does not price it (it would profile another graph), so it is measured whatever its prediction."""
    from placer.models import rebuildable_batch
    from placer.placement import Placement
    from placer.replicas import data_parallel_step, first_group

    from agents.candidates import replica_step, replicated_candidate

    batch = rebuildable_batch(args.model, args.size)
    if batch is None:
        notes.append("no data parallelism: it runs each replica on a slice of the batch, and the model cannot be "
                     "built at another batch (give its model function a `batch` parameter)")
        return []
    machine = real.devices
    degree = len(machine)
    if batch % degree:
        notes.append(f"no data parallelism: {degree} replicas do not divide the batch of {batch}")
        return []
    replicas, replica_graph = replica_step(args.model, args.size, degree)
    replica = Placement.on_device(replica_graph, first_group(machine, degree), 0)
    return [replicated_candidate(replicas.name, target, replicas, replica_graph, replica, None,
                                 f"{degree} replicas of {replicas.batch} samples, one a device, the variables and the "
                                 "update on the first",
                                 replicated=data_parallel_step(replica_graph, replica, machine, degree))]


def _refit_twin(args: OptimizeArgs, placements: Sequence[Candidate], real, twin, calibration_path: Path,
                say: Callable[[str], None], notes: list[str], deadline: float):
    """The twin checked against the target on the `REFIT_PLACEMENTS` heuristics' placements it predicts fastest
    among those that span devices, each measured once, none started after `deadline` (a `time.monotonic()`), and
    its per-transfer core time refit to them (`placer.cost.refit`): (the fit, the refit calibration's path or None
    where the calibration stands), or None when too few could be measured (said in `notes` when time cut it)."""
    from placer.cost.calibrated import calibration_variant, remove_calibration
    from placer.cost.refit import MIN_PLACEMENTS, fit_transfer_factor, refit_changes

    spanning = [c for c in placements if c.priced and c.placement is not None
                and c.placement.devices_used > 1]
    chosen = sorted(spanning, key=lambda c: c.predicted_seconds)[:REFIT_PLACEMENTS]
    if len(chosen) < MIN_PLACEMENTS:
        return None
    alone = next((c for c in placements if c.placement is not None
                  and c.placement.devices_used == 1), None)
    say(f"checking the twin against {real.spec}: {', '.join(c.name for c in chosen)}"
        f"{f', and {alone.name} beside them' if alone else ''}, measured once each")
    reference = None
    if alone is not None:
        step = real.evaluate(alone.placement)
        reference = (alone.name, alone.placement, step.seconds) if step.ok else None
    measured = {}
    for candidate in chosen:
        if time.monotonic() >= deadline:
            notes.append(f"the twin was checked on {len(measured)} of {len(chosen)} placements: the check takes at most "
                         f"{100 * REFIT_SHARE:.0f} % of --budget, and each measurement of this graph sets up a session "
                         f"of its own{'' if len(measured) >= MIN_PLACEMENTS else '; too few to refit it'}")
            break
        step = real.evaluate(candidate.placement)
        if step.ok:
            measured[candidate.name] = (candidate.placement, step.seconds)
    fit = fit_transfer_factor(twin.simulator, measured, reference)
    into = Path(args.out).with_suffix(".refit.calibration.json")
    if fit is None or not fit.changed:
        remove_calibration(into)  # an earlier run's refit: the plan of this one names the calibration itself
        return None if fit is None else (fit, None)
    from placer.calibration import load_calibration

    return fit, calibration_variant(calibration_path, refit_changes(load_calibration(calibration_path), fit), into)


def _placement_candidate(name: str, placement: Placement, target, twin, made_by: str) -> Candidate:
    return Candidate(name, ("placement",), target, placement, predicted=twin.evaluate(placement), made_by=made_by)


def _run_placement(args: OptimizeArgs):
    """The placement file of `args.from_run`'s best placement; refuses a run of another model or size."""
    from agents.run_files import read_run

    run = read_run(args.from_run)
    if run.placement is None:
        raise OptimizeError(f"{args.from_run} has no best placement yet (no update has completed)")
    if (run.config.model, str(run.config.size)) != (args.model, str(args.size)):
        raise OptimizeError(f"{args.from_run} learned a placement of {run.config.model} ({run.config.size}), not of "
                            f"{args.model} ({args.size}): give a run of this model, or train one with `placer train "
                            f"{args.model} --size {args.size} --target {args.target}`")
    return run.placement


def _pool_candidates(best: Candidate, target, settings: Mapping[str, ThreadSetting] | None) -> list[Candidate]:
    """`best`'s placement on the target's workers (or process) under every other thread setting: `settings`, or
    those `placer tune` sweeps on that target."""
    from placer.concurrency import tuning_candidates
    from placer.errors import DeviceSpecError
    from placer.measure import LocalTestbed

    if target.intra_op_threads is not None or target.inter_op_threads is not None:
        return []  # the user fixed the target's pools
    if settings is None:
        settings = _at_most(tuning_candidates(on=target) if isinstance(target, LocalTestbed) else tuning_candidates(),
                            MAX_SETTINGS)
    default = target.layout() if isinstance(target, LocalTestbed) else target
    candidates, seen = [], set()
    for name, thread_setting in settings.items():
        try:
            machine = thread_setting.on(target)
        except DeviceSpecError:  # more threads than a worker's cores
            continue
        layout = machine.layout() if isinstance(machine, LocalTestbed) else machine
        if layout == default or str(machine) in seen:
            continue
        seen.add(str(machine))
        candidates.append(Candidate(f"{best.name}, pools {name}", ("placement", "pools"), machine,
                                    best.placement, made_by=f"{best.made_by}; thread setting {name}"))
    return candidates


def _schedule_candidates(args: OptimizeArgs, graph: OpGraph, best: Candidate, real, twin, calibration,
                         calibration_path: Path, notes: list[str], *, time_limit: float) -> list[Candidate]:
    """`best`'s placement over `args.micro_batches` micro-batches by each of `SCHEDULE_METHODS`, priced op by op
    on the twin (`agents.candidates.scheduled_candidates`); each carries the scheduled step a measurer runs."""
    from placer.cost.calibrated import profiled_costs
    from placer.schedule.execute import scheduled_step, step_for_plan
    from placer.schedule.micro_batch import build_micro_batch_graph
    from placer.schedule.origin import PlanOrigin
    from placer.schedule.standard import sequential

    from agents.candidates import scheduled_candidates

    try:
        micro_batch_graph = build_micro_batch_graph(args.model, args.size, args.micro_batches)
    except PlacerError as error:
        notes.append(f"no schedules for {best.name}: {error}")
        return []
    steps = []

    def profile(template, placement) -> None:
        step, step_placement = step_for_plan(sequential(template, args.micro_batches), micro_batch_graph, placement,
                                             twin.devices)
        # Profiled on the open target: the twin would otherwise start a second one of its own to profile on.
        profiled_costs(step.graph, calibration, calibration_path, measurer=real.measurer)
        steps.append((step, step_placement))

    scheduled = scheduled_candidates(best, graph, micro_batch_graph, twin, args.micro_batches, notes,
                                     time_limit=time_limit, before_pricing=profile,
                                     origin=PlanOrigin.of(args.model, args.size, best.placement.to_file(graph)))
    if not scheduled:
        return []
    step, step_placement = steps[-1]
    return [dataclasses.replace(c, scheduled=scheduled_step(step, step_placement, twin.devices, c.schedule))
            for c in scheduled]


def _at_most(settings: Mapping[str, ThreadSetting], count: int) -> dict[str, ThreadSetting]:
    """`settings` as they are, or past `count` thinned as `MAX_SETTINGS` says for the target's workers."""
    if len(settings) <= count:
        return dict(settings)
    return {name: s for name, s in settings.items()
            if {"default", "recommended"} & set(name.split(" = "))
            or (s.intra_op_threads is not None and s.intra_op_threads & (s.intra_op_threads - 1) == 0
                and s.inter_op_threads in (1, 2))}


def calibration_file(args: OptimizeArgs) -> Path:
    """Where the target's calibration is read from, or written to when it does not exist yet."""
    return Path(args.calibration) if args.calibration else Path(args.out).with_suffix(".calibration.json")


def _on_first_device(graph: OpGraph, devices) -> Placement:
    from placer.placement import Placement

    return Placement.on_device(graph, devices, 0).with_metadata(method="single-device")


def _read_calibration(path: str | Path, target):
    """The calibration at `path`, refused unless it was made on `target`."""
    from placer.calibration import load_calibration
    from placer.measure import parse_target

    try:
        calibration = load_calibration(path)
    except PlacerError as error:
        raise OptimizeError(f"--calibration {path}: {error}") from None
    try:
        made_on = str(parse_target(calibration.target)) if calibration.target else "an unknown target"
    except PlacerError:
        made_on = calibration.target
    if made_on != str(target):
        raise OptimizeError(f"{path} is a calibration of {made_on}, not of {target}: calibrate this target with "
                            f"`placer calibrate --target {target} --out FILE` and give --calibration FILE, or delete "
                            f"{path} to have placer optimize calibrate it")
    return calibration


def plan_of(args: OptimizeArgs, graph: OpGraph, winner: Measured, measured: Sequence[Measured], target,
            twin_spec: str, command: str) -> Plan:
    """The plan of `winner` (the recommended candidate, or any other of `measured`), its provenance naming the
    candidate and what the comparison measured. A plan on the calibrated target itself is made for the twin
    (`twin_spec`), so that it records, and `placer apply` checks, the calibration."""
    from placer.plan import Plan

    candidate = winner.candidate
    made_for = twin_spec if str(candidate.machine) == str(target) else str(candidate.machine)
    placed = candidate.replica_graph or graph  # a replica's graph: its slice
    plan = Plan.made_for(args.model, args.size, placed, candidate.placement, made_for, schedule=candidate.schedule,
                         predicted=candidate.predicted, replicas=candidate.replicas, made_by="placer optimize",
                         command=command)
    provenance = {
        **plan.provenance, "candidate": candidate.name, "dimensions": list(candidate.dimensions),
        "made_from": candidate.made_by,
        "measured": {"median": winner.median, "rounds": winner.compared.rounds, "target": str(candidate.machine)},
        "alternatives": {m.candidate.name: (m.median if m.ok else None) for m in measured},
        "tied_with": [m.candidate.name for m in tied_with_fastest(measured) if m is not winner],
    }
    return dataclasses.replace(plan, provenance=provenance)


def _command_line(args: OptimizeArgs) -> str:
    words = ["placer", "optimize", args.model, "--size", args.size, "--target", args.target]
    if args.calibration:
        words += ["--calibration", args.calibration]
    return shlex.join([*words, "--out", args.out])


def _progress(args: OptimizeArgs, description: str, unit: str):
    return progress_bar(args.progress, description, unit)


def progress_bar(enabled: bool, description: str, unit: str):
    """A progress bar on stderr around the items it is given, or None when `enabled` is False."""
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return lambda items: tqdm(items, desc=description, unit=unit, leave=False, dynamic_ncols=True)
