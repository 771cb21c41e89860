"""How well does the simulator predict real step times? The calibrated simulator against the local testbed.

    python experiments/simulator_fidelity.py [--models rnnlm nmt-2 ...] [--heldout NAME ...] [--size tiny]
        [--calibration FILE] [--rounds 3] [--warmup 3 --repeats 10] [--placements RUN_PLACEMENT.json ...]
        [--out results/simulator_fidelity.json] [--plot PNG, default beside --out]
        [--limit-placements N] [--profile-in-rounds] [--dry-run]
    python experiments/simulator_fidelity.py --replay results/simulator_fidelity.json [--calibration FILE]
        --out results/simulator_fidelity_replayed.json

On `local:2` (two gRPC workers pinned to one core each). Without --calibration the testbed is calibrated
first (into results/simulator_fidelity/calibration.json). Per model: the simulated twin
(`calibrated:FILE`, op costs profiled on the testbed once and cached) predicts every placement of a set
(contiguous splits, perturbations of them, each worker alone, round-robin, random shares, every
applicable baseline, learned placements from --placements); the testbed times the same set side by side
in interleaved rounds. Reported: every pair, Spearman, Kendall's tau-b, median and p90 |error| and the
share of clearly different pairs (> 5 %) predicted in the right order, per model and for the zoo and the
held-out models (`placer.models.heldout`, when present) apart; median error per kind of placement, the
worst placements, and per model the sources of its error (the profile's level, the split placements' own
error, the testbed's round-to-round repeatability). JSON via experiments/_report.py; a scatter plot (PNG,
beside the JSON unless --plot says where) when matplotlib is installed.
--profile-in-rounds profiles each model again in every round, before its placements, and predicts each
placement by the median over the rounds' profiles: the profile and the steps it predicts then share the testbed's
minutes, which move a 2-3 ms step 5-14 % (experiments/probes/machine_drift.py). The placement set is still chosen
on the cached profile.
--dry-run builds the placement sets and prints the measuring budget without running anything.

--replay predicts a finished run's placements again, with today's simulator and the run's calibration (or
--calibration, whose op costs must be cached beside it), against the run's measurements: nothing is measured.
On the 2-core testbed machines the speed moved 20-50 % between runs (2026-11-25), so two versions of the
simulator compare fairly only on the same measurements. Each row keeps its placement's assignment for this.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

import numpy as np  # noqa: E402

from experiments._report import print_table, write_report  # noqa: E402
from placer.heuristics import applicable_heuristics, make_heuristic  # noqa: E402
from placer.cost import CostTarget, StepTime, compare, open_target  # noqa: E402
from placer.devices import DeviceSet  # noqa: E402
from placer.errors import PlacerError  # noqa: E402
from placer.graph.opgraph import OpGraph  # noqa: E402
from placer.measure import MeasureConfig  # noqa: E402
from placer.models import build_model, is_builtin_model, model_names  # noqa: E402
from placer.placement import Placement, read_placement_file  # noqa: E402
from placer.simulate.fidelity import fidelity_summary, spearman  # noqa: E402

DEFAULT_CALIBRATION = "results/simulator_fidelity/calibration.json"
CALIBRATION_ROUNDS = 5
MEASURED_TARGET = "local:2"

KINDS = ("extreme", "split", "baseline", "learned", "perturbation", "random")
"""Kinds of placement, in the order the set is built: with --limit-placements a quick run keeps the
anchors (each worker alone, round-robin, the splits, the baselines, learned ones) and drops filler."""
SPLIT_SHARES = (0.1, 0.25, 0.5, 0.75, 0.9)
"""Share of the colocation groups, in topological order, on worker 0; the rest go to worker 1."""
PERTURBED_SPLITS = (0.25, 0.5, 0.75)
FLIP_RATES = (0.01, 0.05, 0.20)
"""Share of a split's groups moved to the other worker (at least one)."""
RANDOM_SHARES = (0.1, 0.3, 0.5)
"""Share of the groups, drawn at random, on worker 1."""


# -- the placements --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Candidate:
    """One placement of the set, with what it is."""

    label: str
    kind: str
    """One of KINDS."""
    placement: Placement
    aliases: tuple[str, ...] = ()
    """Labels of later candidates that were the same assignment (e.g. the single-device baseline)."""

    @property
    def on_worker_1(self) -> float:
        return float(np.mean(np.asarray(self.placement.group_devices) == 1))


def fidelity_placements(graph: OpGraph, devices: DeviceSet, *, model: str | None, simulator: Any,
                        placement_files: Sequence[str | Path] = (), seed: int = 0,
                        note: Callable[[str], None] = print) -> list[Candidate]:
    """The placements of `graph` over two devices whose real and predicted step times are compared.

    Deliberately varied: communication from none (a worker alone) to most (round-robin, random), balance
    from even to lopsided (splits), small steps away from a split (perturbations) to see whether the
    simulator ranks near neighbours, and the placements methods actually produce (baselines, learned).
    model: the built-in model's name (for the expert placement), None for other graphs.
    simulator: the simulated target's simulator, whose op costs METIS, Scotch and Baechi's heuristics read.
    A baseline or file that cannot be used here is skipped with a `note`. Identical assignments appear
    once, under the first label (the others become its aliases)."""
    if len(devices) != 2:
        raise ValueError(f"the fidelity placement set is for two devices, got {len(devices)} ({devices.name})")
    rng = np.random.default_rng(seed)
    groups = len(graph.groups)
    candidates: list[Candidate] = []

    def add(label: str, kind: str, make: Callable[[], Placement]) -> None:
        try:
            candidates.append(Candidate(label, kind, make()))
        except PlacerError as error:  # e.g. a group without a kernel on a worker, a missing library
            note(f"{graph.name}: {label} skipped: {error}")

    def assignment(devices_of_groups) -> Callable[[], Placement]:
        return lambda: Placement.from_assignment(graph, devices, devices_of_groups)

    add("worker 0", "extreme", lambda: Placement.on_device(graph, devices, 0))
    add("worker 1", "extreme", lambda: Placement.on_device(graph, devices, 1))
    add("round-robin", "extreme", lambda: Placement.round_robin(graph, devices))
    for share in SPLIT_SHARES:
        add(f"split {share:.2f}", "split", assignment(split_assignment(groups, share)))
    for name in applicable_heuristics(builtin_model=model is not None, simulator=simulator is not None,
                                      model=model):
        add(name, "baseline", lambda name=name: make_heuristic(name, graph, devices, model=model, simulator=simulator,
                                                               seed=seed))
    candidates += learned_placements(graph, devices, placement_files, note)
    for share in PERTURBED_SPLITS:
        for rate in FLIP_RATES:
            flipped = flip_groups(split_assignment(groups, share), rate, rng)
            add(f"split {share:.2f} flip {rate:.0%}", "perturbation", assignment(flipped))
    for share in RANDOM_SHARES:
        add(f"random {share:.0%}", "random", assignment(random_share_assignment(groups, share, rng)))
    return dedupe(candidates)


def split_assignment(groups: int, share: float) -> np.ndarray:
    """The first `share` of the groups (at least one, never all) on device 0, the rest on device 1.

    `graph.groups` is ordered by each group's first op in topological order, so this is a contiguous cut
    of the graph (a variable's group starts with the variable, so it falls before its first reader)."""
    cut = min(max(round(groups * share), 1), groups - 1)
    return np.array([0] * cut + [1] * (groups - cut))


def flip_groups(assignment: np.ndarray, rate: float, rng: np.random.Generator) -> np.ndarray:
    """`assignment` with `rate` of its groups (at least one), drawn without replacement, on the other device."""
    flipped = np.array(assignment)
    chosen = rng.choice(len(flipped), size=max(1, round(len(flipped) * rate)), replace=False)
    flipped[chosen] = 1 - flipped[chosen]
    return flipped


def random_share_assignment(groups: int, share: float, rng: np.random.Generator) -> np.ndarray:
    """Exactly `share` of the groups (at least one), drawn without replacement, on device 1."""
    assignment = np.zeros(groups, dtype=int)
    assignment[rng.choice(groups, size=max(1, round(groups * share)), replace=False)] = 1
    return assignment


def learned_placements(graph: OpGraph, devices: DeviceSet, files: Sequence[str | Path],
                       note: Callable[[str], None] = print) -> list[Candidate]:
    """Placements exported by runs (`placer export`, a run's best placement) that were made for `graph`."""
    candidates = []
    for path in files:
        try:
            placement_file = read_placement_file(path)
            if placement_file.fingerprint != graph.fingerprint:
                note(f"{graph.name}: placement file {path} skipped: it places {placement_file.graph_name!r} "
                     f"(fingerprint {placement_file.fingerprint[:12]}, not {graph.fingerprint[:12]})")
                continue
            placement = placement_file.to_placement(graph, devices)
        except PlacerError as error:
            note(f"{graph.name}: placement file {path} skipped: {error}")
            continue
        label = f"learned {Path(path).stem}"
        if any(c.label == label for c in candidates):
            label = f"learned {path}"
        candidates.append(Candidate(label, "learned", placement))
    return candidates


def dedupe(candidates: Sequence[Candidate]) -> list[Candidate]:
    """One candidate per distinct assignment, the first, with the later ones' labels as its aliases."""
    kept: dict[tuple[int, ...], Candidate] = {}
    for candidate in candidates:
        key = candidate.placement.group_devices
        if key in kept:
            first = kept[key]
            if candidate.label != first.label and candidate.label not in first.aliases:
                kept[key] = Candidate(first.label, first.kind, first.placement, (*first.aliases, candidate.label))
        else:
            kept[key] = candidate
    return list(kept.values())


# -- the models ------------------------------------------------------------------------------------

@dataclass
class ModelPlan:
    """One model's placement set and their predictions, before anything is measured."""

    name: str
    heldout: bool
    graph: OpGraph
    simulated: CostTarget
    candidates: list[Candidate]
    predicted: dict[str, StepTime] = field(default_factory=dict)
    spec: str = ""
    """The twin's target spec (`calibrated:FILE`), to open it again on op costs profiled in a round."""
    round_predictions: list[dict[str, StepTime]] = field(default_factory=list)
    """With --profile-in-rounds: each round's predictions, from op costs profiled in that round."""
    round_profiles: list[str] = field(default_factory=list)
    """With --profile-in-rounds: the cost table each round profiled, saved for --replay."""


def model_builders(models: Sequence[str], heldout: Sequence[str] | None
                   ) -> list[tuple[str, bool, Callable[[str], OpGraph]]]:
    """(name, held out?, build(size)) of every model to compare: the zoo's, then the held-out ones."""
    chosen = [(name, False, lambda size, name=name: build_model(name, size)) for name in models]
    try:
        from placer.models.heldout import HELDOUT_MODELS, heldout_model
    except ModuleNotFoundError as error:
        if error.name != "placer.models.heldout":
            raise
        print("note: no placer.models.heldout on this branch, so no held-out models")
        return chosen
    for name in HELDOUT_MODELS if heldout is None else heldout:
        if name not in HELDOUT_MODELS:
            print(f"note: {name!r} is not a held-out model (known: {', '.join(HELDOUT_MODELS)}); skipped")
            continue
        chosen.append((name, True, lambda size, name=name: heldout_model(name, size)))
    return chosen


def simulated_twin(graph: OpGraph, calibration: str | None, dry_run: bool) -> tuple[CostTarget, str]:
    """The simulator of the testbed for `graph`, and where its op costs come from.

    A real run uses `calibrated:FILE` (profiling on the testbed if the costs are not cached). A dry run
    starts nothing: without cached costs, or without a calibration, it places the heuristics with
    roofline costs of a host CPU on the testbed's device names, so the set has the real run's shape."""
    from placer.cost.calibrated import cost_cache

    calibrated = f"calibrated:{calibration}"
    if not dry_run or (calibration and Path(calibration).is_file() and cost_cache(calibration, graph).exists()):
        return open_target(graph, calibrated), calibrated  # a missing file is refused here, saying what to do
    from placer.devices import Link, cluster_devices
    from placer.hardware import HOST_CPU
    from placer.profile import roofline_costs
    from placer.simulate import SimulatorConfig
    from placer.testbed import JOB

    costs = {"CPU": roofline_costs(graph, HOST_CPU)}
    if calibration and Path(calibration).is_file():
        return open_target(graph, calibrated, costs=costs), "roofline on the calibrated links (dry run)"
    devices = cluster_devices({JOB: ["localhost:0", "localhost:1"]})  # the testbed's names; ports are not in them
    # Stand-in loopback numbers: in a dry run only the heuristics read them, to place.
    config = SimulatorConfig(cpu_slots=1, default_link=Link("", "", bandwidth=1e9, latency=50e-6))
    return open_target(graph, devices, costs=costs, simulator_config=config), "roofline stand-in (dry run)"


def plan_model(name: str, heldout: bool, build: Callable[[str], OpGraph], args) -> ModelPlan:
    graph = build(args.size)
    simulated, costs_from = simulated_twin(graph, args.calibration, args.dry_run)
    candidates = fidelity_placements(graph, simulated.devices, model=name if is_builtin_model(name) else None,
                                     simulator=simulated.simulator, placement_files=args.placements, seed=args.seed)
    if args.limit_placements:
        candidates = candidates[:args.limit_placements]
    plan = ModelPlan(name, heldout, graph, simulated, candidates, spec=costs_from)
    plan.predicted = {c.label: simulated.evaluate(c.placement) for c in candidates}
    counts = {kind: sum(c.kind == kind for c in candidates) for kind in KINDS}
    kinds = ", ".join(f"{count} {kind}" for kind, count in counts.items() if count)
    print(f"{name}{' (held out)' if heldout else ''}: {len(graph.ops)} ops, {len(graph.groups)} groups, "
          f"{len(candidates)} placements ({kinds}); costs: {costs_from}", flush=True)
    return plan


def print_budget(plans: Sequence[ModelPlan], args) -> None:
    """Measured steps the run will take, and a floor on its time at the predicted step times."""
    steps_per_timing = args.warmup + args.repeats
    placements = sum(len(p.candidates) for p in plans)
    steps = placements * args.rounds * steps_per_timing
    seconds = sum(t.seconds for p in plans for t in p.predicted.values() if t.ok) * args.rounds * steps_per_timing
    print(f"budget: {placements} placements x {args.rounds} rounds x ({args.warmup} warm-up + {args.repeats} timed) "
          f"= {steps} measured steps, at least {_duration(seconds)} of steps at the predicted times, plus "
          "setting up each placement (graph rewrite, session) and profiling models whose costs are not cached",
          flush=True)


# -- measuring -------------------------------------------------------------------------------------

def measure_model(plan: ModelPlan, args) -> list[dict[str, Any]]:
    """Time the plan's placements side by side on the testbed; one row per placement. With
    --profile-in-rounds, each round also profiles the model, first, and predicts every placement from it."""
    from tqdm.auto import tqdm

    config = MeasureConfig(warmup_steps=args.warmup, timed_steps=args.repeats)
    placements: dict[str, Any] = {c.label: c.placement for c in plan.candidates}
    if args.profile_in_rounds:
        placements = {PROFILE_ENTRY: PROFILE_ENTRY, **placements}
    with open_target(plan.graph, MEASURED_TARGET, backend="measured", measure_config=config) as measured:
        if plan.simulated.spec.calibration is not None:
            plan.simulated.spec.calibration.check_devices(measured.devices)
        with tqdm(total=len(placements) * args.rounds, desc=plan.name, unit="placement", leave=False,
                  dynamic_ncols=True) as bar:
            def evaluate(placement):
                result = profile_round(plan, measured.measurer, args.out) if placement is PROFILE_ENTRY \
                    else measured.evaluate(placement)
                bar.update()
                return result

            compared = compare(evaluate, placements, args.rounds)
    return [fidelity_row(plan, candidate, compared[candidate.label]) for candidate in plan.candidates]


PROFILE_ENTRY = "(the round's profile)"
"""Stands for the profile among a round's placements (--profile-in-rounds)."""


def profile_round(plan: ModelPlan, measurer, out: str) -> StepTime:
    """Profile the model on worker 0 now, save the cost table beside the report, and predict every placement of
    the plan from it; the profile's untraced step time is the round's timing of this entry."""
    from placer.cost.calibrated import PROFILE_STEPS
    from placer.profile import profile_costs

    calibration = plan.simulated.spec.calibration
    table = profile_costs(plan.graph, measurer, steps=PROFILE_STEPS, rounds=1,
                          step_overhead=calibration.step_overhead if calibration else 0.0, label="calibrated")
    path = round_profiles_dir(out) / f"{plan.name}-round-{len(plan.round_profiles)}.json"
    table.save(path)
    plan.round_profiles.append(str(path))
    plan.round_predictions.append(predict_all(plan.graph, plan.spec, table,
                                              {c.label: c.placement for c in plan.candidates}))
    return StepTime(table.metadata["step_time_median"], "measured", MEASURED_TARGET)


def round_profiles_dir(out: str) -> Path:
    """Where a run with --profile-in-rounds keeps each round's op costs: beside its report."""
    path = Path(out)
    return path.with_name(path.stem + ".profiles")


def predict_all(graph: OpGraph, spec: str, table: Any, placements: dict[str, Placement], config: Any = None
                ) -> dict[str, StepTime]:
    """Every placement predicted by the twin `spec` on the op costs `table`."""
    twin = open_target(graph, spec, costs={"CPU": table}, simulator_config=config)
    return {label: twin.evaluate(placement) for label, placement in placements.items()}


def median_prediction(rounds: Sequence[dict[str, StepTime]], label: str) -> StepTime:
    """The median of a placement's predictions over the rounds' profiles; a failure if any round's failed."""
    predicted = [r[label] for r in rounds]
    failed = [p for p in predicted if not p.ok]
    if failed:
        return failed[0]
    seconds = statistics.median(p.seconds for p in predicted)
    return replace(predicted[0], seconds=seconds, samples=(seconds,))


def fidelity_row(plan: ModelPlan, candidate: Candidate, compared) -> dict[str, Any]:
    predicted = (median_prediction(plan.round_predictions, candidate.label) if plan.round_predictions
                 else plan.predicted[candidate.label])
    row = {"model": plan.name, "heldout": plan.heldout, "kind": candidate.kind, "placement": candidate.label,
           "on_worker_1": candidate.on_worker_1, "measured_ms": None,
           "predicted_ms": predicted.seconds * 1e3 if predicted.ok else None, "error_pct": None,
           "spread_pct": None, "rounds_ms": [None if r is None else r * 1e3 for r in compared.rounds],
           "aliases": list(candidate.aliases), "failure": None,
           "tensors_sent": tensors_sent(plan.simulated, candidate.placement),
           "assignment": [int(d) for d in candidate.placement.group_devices]}  # for --replay
    if plan.round_predictions:
        row["predicted_rounds_ms"] = [r[candidate.label].seconds * 1e3 if r[candidate.label].ok else None
                                      for r in plan.round_predictions]
    if not compared.ok:
        row["failure"] = compared.failure.describe()
        return row
    medians = [r for r in compared.rounds if r is not None]
    row["measured_ms"] = compared.median * 1e3
    # The rounds' own disagreement: an error smaller than this is within the measurement's noise.
    row["spread_pct"] = 100 * (max(medians) - min(medians)) / compared.median
    if predicted.ok:
        row["error_pct"] = 100 * (predicted.seconds - compared.median) / compared.median
    else:
        row["failure"] = f"predicted {predicted.describe()}"
    return row


def tensors_sent(simulated: CostTarget, placement: Placement) -> int:
    """How many tensors the placement sends between devices, once per destination, as the twin sends them
    (small constants copied to every CPU are not sent)."""
    return len(simulated.simulator.simulate(placement, timeline=True).transfers)


# -- the report ------------------------------------------------------------------------------------

def scored(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with both a measurement and a prediction: what the metrics are computed on."""
    return [r for r in rows if r["measured_ms"] is not None and r["predicted_ms"] is not None]


def summaries(rows: Sequence[dict[str, Any]], models: Sequence[str]) -> list[dict[str, Any]]:
    """`fidelity_summary` per model, then for the zoo and the held-out models, each over its own rows."""
    usable = scored(rows)
    subsets = [(name, [r for r in usable if r["model"] == name]) for name in models]
    subsets += [("zoo (all)", [r for r in usable if not r["heldout"]]),
                ("held-out (all)", [r for r in usable if r["heldout"]])]
    result = []
    for name, subset in subsets:
        row: dict[str, Any] = {"models": name, "placements": len(subset)}
        if len(subset) >= 2:
            row.update(fidelity_summary([r["measured_ms"] for r in subset], [r["predicted_ms"] for r in subset]))
            row["median_abs_error_pct"] = 100 * row.pop("median_abs_error")
            row["p90_abs_error_pct"] = 100 * row.pop("p90_abs_error")
            row["top3_bias_pct"] = 100 * row.pop("top3_bias")
            row["regret_pct"] = 100 * row.pop("regret")
        result.append(row)
    return result


def errors_by_kind(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median |error| per kind of placement, zoo and held-out apart: where the error comes from."""
    usable = scored(rows)
    result = []
    for kind in KINDS:
        row: dict[str, Any] = {"kind": kind}
        for label, heldout in (("zoo", False), ("heldout", True)):
            errors = [abs(r["error_pct"]) for r in usable if r["kind"] == kind and r["heldout"] == heldout]
            row[f"{label}_placements"] = len(errors)
            row[f"{label}_median_abs_error_pct"] = statistics.median(errors) if errors else None
        if row["zoo_placements"] or row["heldout_placements"]:
            result.append(row)
    return result


def error_sources(rows: Sequence[dict[str, Any]], models: Sequence[str]) -> list[dict[str, Any]]:
    """Per model, how much of its error is its profile's level, how much the split placements' own, and how
    well the testbed repeats itself.

    A model's level is the median of measured / predicted over its single-worker placements: those run
    what the profile timed, so they miss only by how much faster or slower the testbed ran while profiling
    than while measuring. The split placements' errors are then given as predicted and with their
    predictions scaled by that level. A diagnostic, not an aim: the scaling uses measurements of the same
    run, so the aims stay on the errors as predicted.

    The testbed's repeatability is the median, over the model's placements, of how far one round's time is
    from the mean of the placement's other rounds: the error a prediction would have that knew every other
    round exactly. Errors near it are at the measurement's floor.

    Where rows carry `tensors_sent`, the split placements' signed error is also ranked against it (Spearman):
    near -1, placements that send few tensors are predicted too slow and those that send many too fast, an
    error in how the twin prices a transfer rather than in its op costs."""
    usable = scored(rows)
    result = []
    for name in models:
        subset = [r for r in usable if r["model"] == name]
        single = [r["measured_ms"] / r["predicted_ms"] for r in subset if r["on_worker_1"] in (0.0, 1.0)]
        split = [r for r in subset if r["on_worker_1"] not in (0.0, 1.0)]
        row: dict[str, Any] = {"model": name, "heldout": bool(subset and subset[0]["heldout"]),
                               "single_worker": len(single), "split": len(split), "level_pct": None,
                               "split_median_abs_error_pct": None, "split_level_scaled_pct": None,
                               "round_repeat_pct": _round_repeatability(subset), "error_tensors_rho": None}
        counted = [r for r in split if r.get("tensors_sent") is not None]
        if len(counted) >= 3:
            row["error_tensors_rho"] = spearman([r["tensors_sent"] for r in counted],
                                                [r["error_pct"] for r in counted])
        if single:
            level = statistics.median(single)
            row["level_pct"] = 100 * (1 / level - 1)  # how far the profile's level is off: its error on them
            if split:
                row["split_median_abs_error_pct"] = statistics.median(abs(r["error_pct"]) for r in split)
                row["split_level_scaled_pct"] = statistics.median(
                    100 * abs(r["predicted_ms"] * level - r["measured_ms"]) / r["measured_ms"] for r in split)
        result.append(row)
    return result


def _round_repeatability(rows: Sequence[dict[str, Any]]) -> float | None:
    misses = []
    for row in rows:
        rounds = [r for r in row["rounds_ms"] if r is not None]
        if len(rounds) >= 2:
            total = sum(rounds)
            misses.append(statistics.median(
                100 * abs((total - r) / (len(rounds) - 1) - r) / r for r in rounds))
    return statistics.median(misses) if misses else None


def worst_placements(rows: Sequence[dict[str, Any]], count: int = 5) -> list[dict[str, Any]]:
    return sorted(scored(rows), key=lambda r: abs(r["error_pct"]), reverse=True)[:count]


def scatter(rows: Sequence[dict[str, Any]], path: str) -> None:
    """Predicted against measured, log-log (models differ by orders of magnitude); held-out models hollow."""
    usable = scored(rows)
    if not usable:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter
    except ImportError:
        print("(no scatter plot: pip install matplotlib)")
        return
    fig, ax = plt.subplots(figsize=(6, 6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, name in enumerate(dict.fromkeys(r["model"] for r in usable)):
        subset = [r for r in usable if r["model"] == name]
        color = colors[index % len(colors)]
        heldout = subset[0]["heldout"]
        ax.scatter([r["measured_ms"] for r in subset], [r["predicted_ms"] for r in subset], s=22,
                   marker="^" if heldout else "o", facecolors="none" if heldout else color, edgecolors=color,
                   label=f"{name} (held out)" if heldout else name)
    values = [v for r in usable for v in (r["measured_ms"], r["predicted_ms"])]
    low, high = min(values) / 1.2, max(values) * 1.2
    ax.plot([low, high], [low, high], color="grey", linewidth=0.8)
    ax.set(xscale="log", yscale="log", xlim=(low, high), ylim=(low, high), xlabel="measured step time (ms)",
           ylabel="predicted step time (ms)", title=f"calibrated simulator vs {MEASURED_TARGET} testbed")
    for axis in (ax.xaxis, ax.yaxis):  # plain milliseconds at 1, 2, 5, 10, ..., not 3 x 10^1
        axis.set_major_locator(LogLocator(subs=(1, 2, 5)))
        axis.set_major_formatter(FormatStrFormatter("%g"))
        axis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize="small")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    print(f"wrote {path}")


def print_report(rows, summary, by_kind, worst, sources) -> None:
    print("\nfidelity (errors in %, pair order over pairs measured more than 5 % apart; the decisions: the signed "
          "error on the 3 placements predicted fastest, and the regret of picking the predicted fastest)")
    print_table(["models", "placements", "spearman", "kendall_tau", "median_abs_error_pct", "p90_abs_error_pct",
                 "pair_order", "pairs", "top3_bias_pct", "regret_pct"], summary)
    print("\nwhere the error comes from: median |error| (%) per kind of placement")
    print_table(["kind", "zoo_placements", "zoo_median_abs_error_pct", "heldout_placements",
                 "heldout_median_abs_error_pct"], by_kind)
    if sources:
        print("\nerror sources (%): the profile's level (its error on single-worker placements); the split placements' "
              "median |error| as predicted and scaled by that level; how far one round is from the mean of the "
              "others (the testbed's repeatability); the split placements' signed error ranked against the "
              "tensors each sends (Spearman). A diagnostic: the aims are on the errors as predicted")
        print_table(["model", "heldout", "single_worker", "level_pct", "split", "split_median_abs_error_pct",
                     "split_level_scaled_pct", "round_repeat_pct", "error_tensors_rho"], sources)
    print(f"\nthe {len(worst)} placements predicted worst")
    print_table(["model", "kind", "placement", "on_worker_1", "measured_ms", "predicted_ms", "error_pct",
                 "spread_pct"], worst)
    failed = [r for r in rows if r["failure"]]
    if failed:
        print(f"\n{len(failed)} placements left out of the metrics:")
        for r in failed:
            print(f"  {r['model']} {r['placement']}: {r['failure']}")


# -- replaying a finished run -----------------------------------------------------------------------

def replay_rows(report: dict[str, Any], calibration: str, size: str, *,
                executor_queues: bool = False, rule_constants: bool = False) -> list[dict[str, Any]]:
    """The report's rows with their predictions made again by the `calibrated:` simulator of `calibration`
    (op costs from its cache, so nothing is profiled or measured); measurements and failures kept. With
    `executor_queues`, the simulator orders sends and receives as TensorFlow's executor queues them
    (`SimulatorConfig.executor_queues`). With `rule_constants`, every small constant is copied to its readers as
    the replication rule has it, none sent (`SimulatorConfig.sent_constants` empty), as the twin priced them
    before it learned which TensorFlow sends."""
    from placer.cost.calibrated import cost_cache
    from placer.profile import load_cost_table
    from placer.simulate import SimulatorConfig

    rows = report.get("rows") or []
    if not rows:
        raise SystemExit("the report has no rows to replay")
    missing = sorted({r["model"] for r in rows if "assignment" not in r})
    if missing:
        raise SystemExit(f"the report's rows for {', '.join(missing)} have no assignments (a run from before "
                         "--replay existed): run the benchmark again to replay it later")
    fingerprints = report.get("graphs") or {}
    heldout = {r["model"]: r["heldout"] for r in rows}
    builders = model_builders([m for m, h in heldout.items() if not h], [m for m, h in heldout.items() if h])
    replayed = []
    for name, is_heldout, build in builders:
        graph = build(size)
        if fingerprints.get(name, graph.fingerprint) != graph.fingerprint:
            raise SystemExit(f"{name}'s graph has changed since the run (fingerprint {fingerprints[name][:12]}, now "
                             f"{graph.fingerprint[:12]}): its placements cannot be replayed")
        profiles = (report.get("round_profiles") or {}).get(name)
        missing_profiles = [path for path in profiles or () if not Path(path).is_file()]
        if missing_profiles:
            raise SystemExit(f"the run profiled {name} in its rounds, and {missing_profiles[0]} is not there: "
                             "a replay profiles nothing")
        if not profiles and not cost_cache(calibration, graph).exists():
            raise SystemExit(f"no op costs of {graph.name} cached for {calibration}: a replay profiles nothing; "
                             "replay with the calibration the run used, or run the benchmark with this one")
        spec = f"calibrated:{calibration}"
        config = SimulatorConfig(executor_queues=executor_queues, sent_constants=frozenset() if rule_constants else None)
        # "roofline" on a calibrated twin: its cached profile. With round profiles, the first round's twin counts
        # the tensors a placement sends (op costs do not change them).
        costs = {"CPU": load_cost_table(profiles[0], graph)} if profiles else "roofline"
        simulated = open_target(graph, spec, costs=costs, simulator_config=config)
        subset = [r for r in rows if r["model"] == name]
        placements = {r["placement"]: Placement.from_assignment(graph, simulated.devices, r["assignment"]) for r in subset}
        rounds = [predict_all(graph, spec, load_cost_table(path, graph), placements, config) for path in profiles or ()]
        for row in subset:
            placement = placements[row["placement"]]
            # as the run predicted: with round profiles, the median over the rounds' predictions
            predicted = median_prediction(rounds, row["placement"]) if rounds else simulated.evaluate(placement)
            new = dict(row, predicted_ms=predicted.seconds * 1e3 if predicted.ok else None, error_pct=None,
                       tensors_sent=tensors_sent(simulated, placement))
            if rounds:
                new["predicted_rounds_ms"] = [r[row["placement"]].seconds * 1e3 if r[row["placement"]].ok else None
                                              for r in rounds]
            if new["measured_ms"] is not None and predicted.ok:
                new["error_pct"] = 100 * (predicted.seconds * 1e3 - new["measured_ms"]) / new["measured_ms"]
                new["failure"] = None
            elif new["measured_ms"] is not None:
                new["failure"] = f"predicted {predicted.describe()}"
            replayed.append(new)
    return replayed


# -- the run ---------------------------------------------------------------------------------------

def calibrate_testbed(path: str) -> None:
    """Calibrate local:2 into `path`; op costs cached under an earlier calibration there are dropped."""
    from tqdm.auto import tqdm

    from placer.calibrate import calibrate
    from placer.cost import parse_target_spec
    from placer.cost.calibrated import cost_cache_dir
    from placer.measure import Measurer

    with Measurer(parse_target_spec(MEASURED_TARGET, "measured").measured) as measurer:
        calibration = calibrate(measurer, rounds=CALIBRATION_ROUNDS, progress=lambda rounds: tqdm(
            rounds, desc="calibration probes", unit="round", leave=False, dynamic_ncols=True))
    calibration.save(path)
    shutil.rmtree(cost_cache_dir(path), ignore_errors=True)  # profiled net of the old step overhead
    print(calibration.describe(), flush=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=[*model_names(benchmarks_only=True), "two-tower"],
                        help="built-in models (default: every benchmark model and two-tower; none: --models)")
    parser.add_argument("--heldout", nargs="*", default=None,
                        help="held-out models of placer.models.heldout (default: all of them; none: --heldout)")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--calibration", help="a calibration of local:2 (`placer calibrate --cluster local:2 "
                        f"--out FILE`); default: calibrate now into {DEFAULT_CALIBRATION}")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds timing every placement once")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up steps per timing")
    parser.add_argument("--repeats", type=int, default=10, help="timed steps per timing")
    parser.add_argument("--placements", nargs="*", default=[], metavar="FILE",
                        help="placement files (e.g. runs' exported best placements); each is used for its graph")
    parser.add_argument("--limit-placements", type=int, metavar="N", help="keep the first N placements per model")
    parser.add_argument("--seed", type=int, default=0, help="seeds the perturbations and random placements")
    parser.add_argument("--out", default="results/simulator_fidelity.json")
    parser.add_argument("--plot", help="the scatter plot (PNG); default: beside --out; '' for none")
    parser.add_argument("--profile-in-rounds", action="store_true",
                        help="profile each model in every round, among its placements, and predict from the median "
                             "over the rounds' profiles, so that predictions and measurements share the testbed's "
                             "minutes (each round's op costs are kept beside --out, for --replay)")
    parser.add_argument("--dry-run", action="store_true",
                        help="build the placement sets and print the budget; measure nothing, start nothing")
    parser.add_argument("--replay", metavar="REPORT",
                        help="predict a finished run's placements again (with --calibration, or the run's), "
                             "against its measurements; measures nothing")
    parser.add_argument("--executor-queues", action="store_true",
                        help="with --replay: the simulator orders sends and receives as TensorFlow's executor "
                             "queues them, in place of holding every send a computing worker makes")
    parser.add_argument("--rule-constants", action="store_true",
                        help="with --replay: copy every small constant to its readers, as the replication rule "
                             "has it, instead of sending those TensorFlow sends (the twin before it learned them)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.rounds < 1:
        raise SystemExit(f"--rounds must be at least 1, got {args.rounds}")
    if args.calibration and not Path(args.calibration).is_file():
        raise SystemExit(f"no calibration file {args.calibration}: make one with `placer calibrate --cluster "
                         f"{MEASURED_TARGET} --out FILE`, or leave --calibration out to calibrate now")
    if args.replay:
        replay(args)
        return
    if args.executor_queues or args.rule_constants:
        raise SystemExit("--executor-queues and --rule-constants price a replay (--replay REPORT): a run predicts "
                         "with the default twin, and its replay compares the two on the same measurements")
    builders = model_builders(args.models, args.heldout)
    if not args.dry_run and not args.calibration:
        args.calibration = DEFAULT_CALIBRATION
        calibrate_testbed(args.calibration)
    plans = [plan_model(name, heldout, build, args) for name, heldout, build in builders]
    print_budget(plans, args)
    if args.dry_run:
        return

    rows = []
    for plan in plans:
        rows += measure_model(plan, args)
        usable = scored([r for r in rows if r["model"] == plan.name])
        errors = [abs(r["error_pct"]) for r in usable]
        print(f"{plan.name}: {len(usable)} of {len(plan.candidates)} placements measured and predicted"
              + (f", median |error| {statistics.median(errors):.1f} %" if errors else ""), flush=True)

    report(rows, args, graphs={p.name: p.graph.fingerprint for p in plans}, rounds=args.rounds,
           warmup=args.warmup, repeats=args.repeats, seed=args.seed,
           round_profiles={p.name: p.round_profiles for p in plans if p.round_profiles})


def replay(args) -> None:
    """--replay: the finished run's placements predicted again, reported like a run."""
    import json

    source = Path(args.replay)
    if not source.is_file():
        raise SystemExit(f"no report {source} to replay")
    if Path(args.out).resolve() == source.resolve():
        raise SystemExit(f"--out {args.out} is the report being replayed: give the replay its own file")
    measured = json.loads(source.read_text())
    calibration = args.calibration or measured.get("calibration")
    if not calibration or not Path(calibration).is_file():
        raise SystemExit(f"the run's calibration {calibration!r} is not there: give --calibration FILE")
    rows = replay_rows(measured, calibration, measured.get("size", args.size), executor_queues=args.executor_queues,
                       rule_constants=args.rule_constants)
    report(rows, args, calibration=calibration, graphs=measured.get("graphs"), replayed=str(source),
           executor_queues=args.executor_queues, rule_constants=args.rule_constants,
           measured_on=measured.get("date"), rounds=measured.get("rounds"), warmup=measured.get("warmup"),
           repeats=measured.get("repeats"), seed=measured.get("seed"), size=measured.get("size", args.size))


def report(rows: list[dict[str, Any]], args, **facts: Any) -> None:
    """Metrics, the JSON report and the scatter plot of a run's (or a replay's) rows."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    summary = summaries(rows, models)
    by_kind = errors_by_kind(rows)
    worst = worst_placements(rows)
    sources = error_sources(rows, models)
    facts = {"calibration": args.calibration, "size": args.size, **facts}
    write_report("simulator_fidelity", ["model", "heldout", "kind", "placement", "on_worker_1", "measured_ms",
                                        "predicted_ms", "error_pct", "spread_pct", "failure"],
                 rows, args.out, target=MEASURED_TARGET, **facts,
                 summary=[_json_safe(s) for s in summary], by_kind=by_kind, worst=worst, error_sources=sources,
                 command=" ".join(["python", *sys.argv]))
    print_report(rows, summary, by_kind, worst, sources)
    plot = str(Path(args.out).with_suffix(".png")) if args.plot is None else args.plot
    if plot:
        scatter(rows, plot)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _json_safe(row: dict[str, Any]) -> dict[str, Any]:
    """NaN (an undefined correlation) as null: JSON has no NaN."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}


if __name__ == "__main__":
    main()
