"""Do thread settings' simulated step times match what they measure? Every setting of `placer tune`'s sweep,
priced by the event simulator and timed.

    python experiments/thread_fidelity.py [--models two-tower:small inception-v3:tiny rnnlm:small nmt-2:small]
        [--rounds 3] [--warmup 3] [--repeats 10] [--profile-steps 5] [--profile-rounds 3]
        [--no-performance-model] [--co-running results/co_running.json | none] [--out results/thread_fidelity.json]
        [--predict-only | --dry-run | --reprice FILE]

Per model, on one in-process CPU device of this process's cores (`placer tune`'s default, inprocess:1): its ops
profiled once at each intra-op width, 1 to the cores, one op at a time (`placer.concurrency.width_costs.
profile_widths`); every candidate of `placer tune` (TensorFlow's default pools, the recommended setting, every
(intra, inter) pair) priced by the simulator from those op costs (`placer.concurrency.choose`: the device's
width and pools from the setting, `inter` ops at once sharing the intra-op pool and the cores,
`placer.simulate.thread_pools`, slowed down while they co-run by the co-running probe's median slowdown,
`experiments/probes/co_running.py`'s JSON, or not at all with `--co-running none`) and, unless --no-performance-model,
from the performance model fitted on the other models' thread profiles only; then every candidate timed side by
side in interleaved rounds (`placer.concurrency.tune`, medians of rounds). The JSON keeps each model's op costs
per width, so that the settings can be priced again without measuring (--reprice).

Reported per setting: measured, predicted and the error; per model: the sweep's best, the setting each price
picks, and its regret (how much slower the pick measured than the best). Aims: every setting within 10 %; the
pick within 5 % of the sweep's best on every model.

--predict-only profiles and prices, and times no setting. --dry-run starts nothing: its op costs are roofline
estimates of a host CPU with p times its peak FLOP/s at width p, stand-ins that check the script, not
predictions of this machine. --reprice FILE profiles and times nothing: it prices every setting again from the op
costs per width a measured run saved in FILE, against the step times measured then (the models, settings and
cores are FILE's; the performance model is not priced), and writes FILE's name with `_repriced` by default.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import print_table, write_report  # noqa: E402
from experiments.probes.concurrency import model_and_size  # noqa: E402

DEFAULT_MODELS = ("two-tower:small", "inception-v3:tiny", "rnnlm:small", "nmt-2:small")
"""The models of `experiments/probes/concurrency.py`, whose sweeps' best settings differed (1 / 2 on two, 2 / 2 or
TensorFlow's default on the others)."""
SETTING_AIM_PCT = 10.0
PICK_AIM_PCT = 5.0


def stand_in_width_costs(graph, widths):
    """Op costs that need no measurement, for --dry-run: a host CPU's roofline with `width` times its peak."""
    from placer.concurrency.width_costs import WidthCosts
    from placer.hardware import HOST_CPU
    from placer.profile import roofline_costs

    return WidthCosts(graph.name, graph.fingerprint, {
        width: roofline_costs(graph, dataclasses.replace(HOST_CPU, name=f"host-cpu x{width}",
                                                         peak_flops=HOST_CPU.peak_flops * width))
        for width in widths})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), metavar="MODEL:SIZE")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds timing every setting once")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--profile-steps", type=int, default=5, help="traced steps per profiling round and width")
    parser.add_argument("--profile-rounds", type=int, default=3, help="profiling rounds per width (medians)")
    parser.add_argument("--performance-model", action=argparse.BooleanOptionalAction, default=True,
                        help="also price every setting with the performance model, fitted leave-one-out")
    parser.add_argument("--co-running", default="results/co_running.json", metavar="FILE",
                        help="the co-running probe's JSON (experiments/probes/co_running.py), whose median slowdown slows "
                             "ops while they run together; 'none': not slowed")
    parser.add_argument("--out", help="default results/thread_fidelity.json; with --reprice, FILE's name + _repriced")
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--predict-only", action="store_true", help="profile and price; time no setting")
    modes.add_argument("--dry-run", action="store_true", help="price with stand-in op costs; start nothing")
    modes.add_argument("--reprice", metavar="FILE", help="price a measured run's settings again from the op costs "
                                                         "it saved; profile and time nothing")
    args = parser.parse_args()
    if len(args.models) < 2 and args.performance_model and not (args.dry_run or args.reprice):
        parser.error("the performance model is fitted on the other models: give at least two, or "
                     "--no-performance-model")
    try:
        co_running = co_running_slowdown(args.co_running)
        stored = stored_run(args.reprice) if args.reprice else None
    except ValueError as error:
        parser.error(str(error))
    out = args.out or (_repriced_name(args.reprice) if args.reprice else "results/thread_fidelity.json")

    from placer.concurrency import tune, tuning_candidates
    from placer.concurrency.choose import choose_setting
    from placer.concurrency.performance_model import fit_performance_model, profile_thread_counts
    from placer.concurrency.width_costs import profile_widths
    from placer.measure import MeasureConfig
    from placer.models import load_model

    from placer.concurrency.width_costs import width_costs_from_dict

    cores = stored["cores"] if stored else len(os.sched_getaffinity(0))
    widths = tuple(range(1, cores + 1))
    candidates = tuning_candidates(cores)
    name_of = {setting: name for name, setting in candidates.items()}
    config = MeasureConfig(warmup_steps=args.warmup, timed_steps=args.repeats)
    models = stored["models"] if stored else args.models
    graphs = {spec: load_model(*model_and_size(spec)) for spec in models}
    use_model = args.performance_model and not (args.dry_run or args.reprice)
    thread_profiles = {}
    if use_model:
        for spec, graph in graphs.items():
            thread_profiles[spec] = profile_thread_counts(graph, widths)
            print(f"{graph.name}: ops profiled for the performance model in {thread_profiles[spec].seconds:.0f} s",
                  flush=True)

    setting_rows, pick_rows, profiles, saved_costs = [], [], {}, {}
    for spec, graph in graphs.items():
        started = time.perf_counter()
        if args.dry_run:
            width_costs = stand_in_width_costs(graph, widths)
        elif stored:
            width_costs = width_costs_from_dict(stored["width_costs"][spec], graph)
        else:
            width_costs = profile_widths(graph, widths, steps=args.profile_steps, rounds=args.profile_rounds)
        profiling_s = stored["profiling_s"].get(graph.name) if stored else time.perf_counter() - started
        profiles[graph.name] = {width: {key: table.metadata.get(key) for key in ("step_time_median",
                                                                                  "dispatch_seconds", "round_spread")}
                                for width, table in width_costs.tables.items()}
        saved_costs[spec] = width_costs.to_dict()
        prices = {"simulator": choose_setting(graph, width_costs, cores, candidates.values(),
                                              co_running_slowdown=co_running)}
        if use_model:
            others = [(graphs[other], thread_profiles[other]) for other in graphs if other != spec]
            prices["model"] = choose_setting(graph, fit_performance_model(others), cores, candidates.values(),
                                             co_running_slowdown=co_running)
        print(f"{graph.name}: op costs at widths {', '.join(map(str, widths))} in {profiling_s:.0f} s; the simulator "
              f"picks {name_of[prices['simulator'].setting]}"
              + (f", the performance model {name_of[prices['model'].setting]}" if use_model else ""), flush=True)
        measured, sweep_s = {}, None
        if stored:
            measured, sweep_s = stored["measured"].get(graph.name, {}), stored["sweep_s"].get(graph.name)
        elif not (args.predict_only or args.dry_run):
            print(f"{graph.name}: {len(candidates)} settings x {args.rounds} rounds", flush=True)
            result = tune(graph, candidates, rounds=args.rounds, measure_config=config)
            print(result.describe(), flush=True)
            measured = {name: seconds for name, seconds in result.medians.items() if math.isfinite(seconds)}
            sweep_s = result.seconds

        for name, setting in candidates.items():
            row = {"model": graph.name, "setting": name, "measured_ms": _ms(measured.get(name))}
            for price, choice in prices.items():
                predicted = choice.predicted[setting]
                row[f"{price}_ms"] = predicted * 1e3
                row[f"{price}_error_pct"] = _error_pct(predicted, measured.get(name))
            setting_rows.append(row)

        best = min(measured, key=measured.get) if measured else None
        row = {"model": graph.name, "best": best, "best_ms": _ms(measured.get(best)), "profiling_s": profiling_s,
               "sweep_s": sweep_s}
        for price, choice in prices.items():
            pick = name_of[choice.setting]
            row[f"{price}_pick"] = pick
            row[f"{price}_pick_ms"] = _ms(measured.get(pick))
            row[f"{price}_regret_pct"] = (100 * (measured[pick] / measured[best] - 1)
                                          if best is not None and pick in measured else None)
            errors = [abs(r[f"{price}_error_pct"]) for r in setting_rows
                      if r["model"] == graph.name and r[f"{price}_error_pct"] is not None]
            row[f"{price}_settings_within_aim"] = (f"{sum(e <= SETTING_AIM_PCT for e in errors)} of {len(errors)}"
                                                   if errors else None)
        pick_rows.append(row)

    price_names = ["simulator", *(["model"] if use_model else [])]
    setting_columns = ["model", "setting", "measured_ms"] + [f"{price}_{column}" for price in price_names
                                                             for column in ("ms", "error_pct")]
    pick_columns = ["model", "best", "best_ms"] + [f"{price}_{column}" for price in price_names
                                                   for column in ("pick", "pick_ms", "regret_pct",
                                                                  "settings_within_aim")]
    pick_columns += ["profiling_s", "sweep_s"]
    print()
    measurement = stored["measurement"] if stored else {
        "rounds": args.rounds, "warmup": args.warmup, "repeats": args.repeats, "profile_steps": args.profile_steps,
        "profile_rounds": args.profile_rounds}
    mode = ("dry run" if args.dry_run else "predict only" if args.predict_only
            else f"repriced from {args.reprice} (measured {stored['date']})" if stored else "measured")
    write_report("thread_fidelity", setting_columns, setting_rows, out, picks=pick_rows, cores=cores,
                 widths=list(widths), **measurement, profiles=profiles, models=list(models),
                 co_running_slowdown=co_running,
                 co_running_probe=None if args.co_running == "none" else args.co_running,
                 settings={name: [s.intra_op_threads, s.inter_op_threads] for name, s in candidates.items()},
                 mode=mode, command="python experiments/thread_fidelity.py " + " ".join(sys.argv[1:]),
                 width_costs=saved_costs)
    print()
    print_table(pick_columns, pick_rows)
    if any(row["best"] for row in pick_rows):
        for price in price_names:
            errors = [abs(r[f"{price}_error_pct"]) for r in setting_rows if r[f"{price}_error_pct"] is not None]
            regrets = [r[f"{price}_regret_pct"] for r in pick_rows if r[f"{price}_regret_pct"] is not None]
            print(f"{price}: {sum(e <= SETTING_AIM_PCT for e in errors)} of {len(errors)} settings within "
                  f"{SETTING_AIM_PCT:g} % (mean |error| {sum(errors) / len(errors):.1f} %); its pick within "
                  f"{PICK_AIM_PCT:g} % of the sweep's best on {sum(r <= PICK_AIM_PCT for r in regrets)} of "
                  f"{len(regrets)} models")


def co_running_slowdown(probe: str) -> float:
    """The median slowdown `experiments/probes/co_running.py` measured (two cores computing at once), or 1 for 'none'."""
    if probe == "none":
        return 1.0
    try:
        with open(probe) as file:
            slowdown = float(json.load(file)["median_slowdown"])
    except (OSError, KeyError, TypeError, ValueError) as error:
        raise ValueError(f"--co-running {probe}: not a co-running probe's JSON ({error}); run "
                         "python experiments/probes/co_running.py --out FILE, or give --co-running none") from None
    if slowdown < 1.0:
        raise ValueError(f"--co-running {probe}: a median slowdown of {slowdown:.3f} is below 1; probe again")
    return slowdown


def stored_run(path: str) -> dict:
    """What --reprice needs from a measured run's JSON: its models, cores, measured medians (seconds, per graph
    name), op costs per width (per model spec) and how they were measured."""
    try:
        with open(path) as file:
            record = json.load(file)
    except (OSError, ValueError) as error:
        raise ValueError(f"--reprice {path}: cannot read it ({error})") from None
    if record.get("experiment") != "thread_fidelity" or record.get("mode") != "measured":
        raise ValueError(f"--reprice {path}: not a measured run of experiments/thread_fidelity.py")
    if "width_costs" not in record:
        raise ValueError(f"--reprice {path}: it holds no op costs per width (written before they were saved); "
                         "measure again: python experiments/thread_fidelity.py --out FILE")
    measured: dict[str, dict[str, float]] = {}
    for row in record["rows"]:
        if row.get("measured_ms") is not None:
            measured.setdefault(row["model"], {})[row["setting"]] = row["measured_ms"] / 1e3
    return {"models": record["models"], "cores": record["cores"], "width_costs": record["width_costs"],
            "measured": measured, "date": record["date"],
            "profiling_s": {row["model"]: row.get("profiling_s") for row in record["picks"]},
            "sweep_s": {row["model"]: row.get("sweep_s") for row in record["picks"]},
            "measurement": {key: record.get(key) for key in ("rounds", "warmup", "repeats", "profile_steps",
                                                             "profile_rounds")}}


def _repriced_name(path: str) -> str:
    stem, suffix = os.path.splitext(path)
    return f"{stem}_repriced{suffix or '.json'}"


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _error_pct(predicted: float, measured: float | None) -> float | None:
    return None if measured is None else 100 * (predicted / measured - 1)


if __name__ == "__main__":
    main()
