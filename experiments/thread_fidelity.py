"""Do thread settings' simulated step times match what they measure? Every setting of `placer tune`'s sweep,
priced by the event simulator and timed.

    python experiments/thread_fidelity.py [--models two-tower:small inception-v3:tiny rnnlm:small nmt-2:small]
        [--rounds 3] [--warmup 3] [--repeats 10] [--profile-steps 5] [--profile-rounds 3]
        [--no-performance-model] [--out results/thread_fidelity.json] [--predict-only | --dry-run]

Per model, on one in-process CPU device of this process's cores (`placer tune`'s default, inprocess:1): its ops
profiled once at each intra-op width, 1 to the cores, one op at a time (`placer.concurrency.width_costs.
profile_widths`); every candidate of `placer tune` (TensorFlow's default pools, the recommended setting, every
(intra, inter) pair) priced by the simulator from those op costs (`placer.concurrency.choose`: the device's
width and pools from the setting, `inter` ops at once, slowed down when their threads outnumber the cores) and,
unless --no-performance-model, from the performance model fitted on the other models' thread profiles only;
then every candidate timed side by side in interleaved rounds (`placer.concurrency.tune`, medians of rounds).

Reported per setting: measured, predicted and the error; per model: the sweep's best, the setting each price
picks, and its regret (how much slower the pick measured than the best). Aims: every setting within 10 %; the
pick within 5 % of the sweep's best on every model.

--predict-only profiles and prices, and times no setting. --dry-run starts nothing: its op costs are roofline
estimates of a host CPU with p times its peak FLOP/s at width p, stand-ins that check the script, not
predictions of this machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from placer import tf_logs  # noqa: E402

tf_logs.configure()

from experiments._report import print_table, write_report  # noqa: E402
from experiments.concurrency import model_and_size  # noqa: E402

DEFAULT_MODELS = ("two-tower:small", "inception-v3:tiny", "rnnlm:small", "nmt-2:small")
"""The models of `experiments/concurrency.py`, whose sweeps' best settings differed (1 / 2 on two, 2 / 2 or
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
    parser.add_argument("--out", default="results/thread_fidelity.json")
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--predict-only", action="store_true", help="profile and price; time no setting")
    modes.add_argument("--dry-run", action="store_true", help="price with stand-in op costs; start nothing")
    args = parser.parse_args()
    if len(args.models) < 2 and args.performance_model and not args.dry_run:
        parser.error("the performance model is fitted on the other models: give at least two, or "
                     "--no-performance-model")

    from placer.concurrency import tune, tuning_candidates
    from placer.concurrency.choose import choose_setting
    from placer.concurrency.performance_model import fit_performance_model, profile_thread_counts
    from placer.concurrency.width_costs import profile_widths
    from placer.measure import MeasureConfig
    from placer.models import load_model

    cores = len(os.sched_getaffinity(0))
    widths = tuple(range(1, cores + 1))
    candidates = tuning_candidates(cores)
    name_of = {setting: name for name, setting in candidates.items()}
    config = MeasureConfig(warmup_steps=args.warmup, timed_steps=args.repeats)
    graphs = {spec: load_model(*model_and_size(spec)) for spec in args.models}
    use_model = args.performance_model and not args.dry_run
    thread_profiles = {}
    if use_model:
        for spec, graph in graphs.items():
            thread_profiles[spec] = profile_thread_counts(graph, widths)
            print(f"{graph.name}: ops profiled for the performance model in {thread_profiles[spec].seconds:.0f} s",
                  flush=True)

    setting_rows, pick_rows, profiles = [], [], {}
    for spec, graph in graphs.items():
        started = time.perf_counter()
        if args.dry_run:
            width_costs = stand_in_width_costs(graph, widths)
        else:
            width_costs = profile_widths(graph, widths, steps=args.profile_steps, rounds=args.profile_rounds)
        profiling_s = time.perf_counter() - started
        profiles[graph.name] = {width: {key: table.metadata.get(key) for key in ("step_time_median",
                                                                                  "dispatch_seconds", "round_spread")}
                                for width, table in width_costs.tables.items()}
        prices = {"simulator": choose_setting(graph, width_costs, cores, candidates.values())}
        if use_model:
            others = [(graphs[other], thread_profiles[other]) for other in graphs if other != spec]
            prices["model"] = choose_setting(graph, fit_performance_model(others), cores, candidates.values())
        print(f"{graph.name}: op costs at widths {', '.join(map(str, widths))} in {profiling_s:.0f} s; the simulator "
              f"picks {name_of[prices['simulator'].setting]}"
              + (f", the performance model {name_of[prices['model'].setting]}" if use_model else ""), flush=True)
        measured, sweep_s = {}, None
        if not (args.predict_only or args.dry_run):
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
    write_report("thread_fidelity", setting_columns, setting_rows, args.out, picks=pick_rows, cores=cores,
                 widths=list(widths), rounds=args.rounds, warmup=args.warmup, repeats=args.repeats,
                 profile_steps=args.profile_steps, profile_rounds=args.profile_rounds, profiles=profiles,
                 settings={name: [s.intra_op_threads, s.inter_op_threads] for name, s in candidates.items()},
                 mode="dry run" if args.dry_run else "predict only" if args.predict_only else "measured",
                 command="python experiments/thread_fidelity.py " + " ".join(sys.argv[1:]))
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


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _error_pct(predicted: float, measured: float | None) -> float | None:
    return None if measured is None else 100 * (predicted / measured - 1)


if __name__ == "__main__":
    main()
