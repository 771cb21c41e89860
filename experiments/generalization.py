"""Does a pre-trained graph policy place graphs it never saw? Leave-one-family-out over the zoo, plus
generated branchy graphs held out from every fold, on modeled GPU machines (the simulator).

    python experiments/generalization.py [--size tiny] [--machines modeled:2xV100 modeled:4xV100]
        [--pretrain-updates 200] [--imitation-updates 0] [--prior-heuristics metis m-etf m-sct]
        [--finetune-updates 50] [--families ...] [--generated 2] [--pretrain-generated 2]
        [--head one-shot|moves] [--moves-per-sample 8] [--unseen MODEL ...] [--finetune-seconds S]
        [--workers N | --ray auto|ADDRESS] [--out FILE]

Per fold, the policy is pre-trained on every other family's models on every machine (`placer pretrain`),
then, on each held-out model and machine:
- zero-shot: the policy's greedy placement, against the best baseline (single device, expert, METIS,
  Scotch, m-TOPO, m-ETF, m-SCT, on the same simulator), and against the partition prior it starts from
  (`agents.graph_policy.agent.partition_prior`) placed as it is: what pre-training adds to it. Which voting
  heuristic (`--prior-heuristics`) the zero-shot placement agrees with most, and on how many units; and
  the heuristic the policy trusts most over the whole graph (its largest mean vote weight), placed as it is;
- zero-shot, checked: the policy's own placement and each voting heuristic's, timed on the simulator, the
  fastest kept (what `placer place` does unless --policy-only), and whose it was;
- fine-tuned: the pre-trained policy trained on that graph, and the hierarchical planner from scratch (its
  defaults, the tuned setting), each for the same number of updates of 4 samples: how many samples each needed to reach
  the best baseline and to beat it (strictly faster; none: it did not), and the best step time each
  reached. The moves head's first samples are the checked candidates (`GraphAgentConfig.try_heuristics`).
The policy is pre-trained and fine-tuned with one head (`--head`, `GraphAgentConfig.head`): "moves" samples
a few moved units of the best placement found, "one-shot" every unit's device at once.
Every pre-training starts with `--imitation-updates` updates of imitating each training pair's best voting
heuristic, and also trains on `--pretrain-generated` generated graphs (seeds 0, 1, ...). The held-out
generated graphs (placer.models.branchy, seeds 1000, 1001, ...), and the `--unseen` models (outside every
family: GPT-2, Llama, keras.applications through `experiments.model_coverage`), are placed by a policy
pre-trained on every family; `--finetune-seconds` bounds each fine-tuning by time. Aims: zero-shot within 5 %
of the best baseline on held-out families; fine-tuning beating it with at least 5x fewer samples than from scratch (`finetuned_beat_5x_fewer`
counts the rows; where the planner from scratch never beat it, its whole budget is the lower bound).
The folds are independent and run in parallel with --workers N (local processes) or --ray (Ray actors),
with the rows of the serial run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from agents import loop  # noqa: E402
from agents.factory import make_agent  # noqa: E402
from agents.graph_policy import training_set  # noqa: E402
from agents.graph_policy.agent import HEADS, GraphAgentConfig, GraphPolicyAgent, partition_prior  # noqa: E402
from agents.graph_policy.policy_file import load_policy  # noqa: E402
from agents.graph_policy.pretrain import PretrainConfig, place_with_policy, pretrain, step_seconds  # noqa: E402
from agents.graph_policy.features import graph_inputs  # noqa: E402
from agents.graph_policy.priors import align_to, heuristic_placements  # noqa: E402
from agents.workers import Task, add_worker_arguments, open_workers  # noqa: E402
from envs.placement import PlacementEnv  # noqa: E402
from experiments._report import write_report  # noqa: E402
from placer.heuristics import applicable_heuristics, time_heuristics  # noqa: E402
from placer.errors import PlacerError  # noqa: E402
from placer.models import MODELS, build_model  # noqa: E402
from placer.models.loader import check_model_spec, load_model  # noqa: E402
from placer.models.branchy import random_branchy_graph  # noqa: E402

FAMILIES = {
    "towers": ("two-tower",),
    "mlp": ("mlp",),
    "rnn": ("rnnlm", "nmt-2", "nmt-4"),
    "cnn": ("inception-v3", "resnet-50"),
    "transformer": ("transformer",),
}
SAMPLES_PER_UPDATE = 4


def best_baseline(env, model: str | None) -> tuple[str, float]:
    """The fastest heuristic on `env`'s simulator that can place the graph, and its step time."""
    names = applicable_heuristics(builtin_model=model in MODELS, simulator=True, include_trivial=True,
                                 model=model if model in MODELS else None)
    times = {name: timing.seconds for name, timing in time_heuristics(env.target, names, model=model).items()
             if timing.ok}  # left out: one that cannot be made (a library missing) or fails (out of memory)
    name = min(times, key=times.get)
    return name, times[name]


def samples_to_reach(agent, env, target_seconds: float, updates: int,
                     seconds: float | None = None) -> tuple[int | None, int | None, float, int]:
    """Train `agent` on `env` for `updates` updates (`agents.loop.update`), or until `seconds` have passed
    (no update starts after them); the samples it took to reach `target_seconds` and to beat it (strictly
    faster; None if it never did), the best step time it reached, and the samples it drew in all."""
    best, reached, beaten, samples = math.inf, None, None, 0
    deadline = math.inf if seconds is None else time.perf_counter() + seconds
    for _ in range(updates):
        if time.perf_counter() >= deadline:
            break
        for evaluation in loop.update(agent, env, SAMPLES_PER_UPDATE).evaluations:
            samples += 1
            best = min(best, evaluation.step_time)
            if reached is None and best <= target_seconds:
                reached = samples
            if beaten is None and best < target_seconds:
                beaten = samples
    return reached, beaten, best, samples


def agent_config(args) -> GraphAgentConfig:
    """The graph agent's configuration, for pre-training and for fine-tuning."""
    return GraphAgentConfig(seed=args.seed, head=args.head, moves_per_sample=args.moves_per_sample,
                            prior_heuristics=tuple(args.prior_heuristics))


def evaluate_held_out(policy_path: Path, graph, model: str | None, machines, args, fold: str) -> list[dict]:
    policy, _ = load_policy(policy_path)
    rows = []
    for machine in machines:
        env = PlacementEnv(model=graph, backend="simulated", devices=machine)
        try:
            env.reset(seed=args.seed)
            baseline, baseline_seconds = best_baseline(env, model)
            started = time.perf_counter()
            zero_shot_assignment = place_with_policy(policy, env.graph, env.devices, env.device_mask,
                                                     args.head).assignment
            zero_shot = env.target.evaluate(list(zero_shot_assignment))
            placing = time.perf_counter() - started
            # the policy's own placement and each voting heuristic's, timed on the simulator, the fastest kept
            # (what `placer place` does unless --policy-only)
            checked = place_with_policy(policy, env.graph, env.devices, env.device_mask, args.head,
                                        judge=lambda a: step_seconds(env.target, a))
            checked_seconds = checked.step_times[checked.source]
            prior = env.target.evaluate(list(partition_prior(env.graph, env.devices).argmax(axis=1)))
            # which voting heuristic the zero-shot placement follows most closely (labels aligned to its own),
            # and the heuristic the policy trusts most over the whole graph, placed as it is: how well the policy
            # picks a heuristic, apart from how it mixes their votes unit by unit
            heuristics = policy.config.prior_heuristics if policy.config.partition_prior else ()
            agreement, trusted, trusted_ms = {}, None, None
            if heuristics:
                placed = np.asarray(zero_shot_assignment)
                placements = heuristic_placements(env.graph, env.devices, heuristics)
                agreement = {name: float(np.mean(align_to(p, placed, env.devices) == placed))
                             for name, p in zip(heuristics, placements) if (p >= 0).all()}
                inputs = graph_inputs(env.graph)
                k = int(np.argmax(policy.prior_weights(inputs.units, inputs.edges).numpy().mean(axis=0)))
                trusted = heuristics[k]
                if (placements[k] >= 0).all():
                    result = env.target.evaluate(list(placements[k]))
                    trusted_ms = result.seconds * 1e3 if result.ok else None
            follows = max(agreement, key=agreement.get) if agreement else None
            row = {"fold": fold, "graph": graph.name, "machine": machine, "best_baseline": baseline,
                   "best_baseline_ms": baseline_seconds * 1e3,
                   "zero_shot_ms": zero_shot.seconds * 1e3 if zero_shot.ok else None,
                   "zero_shot_vs_best_pct": 100 * (baseline_seconds - zero_shot.seconds) / baseline_seconds
                   if zero_shot.ok else None, "placing_s": placing,
                   "checked_ms": checked_seconds * 1e3 if math.isfinite(checked_seconds) else None,
                   "checked_vs_best_pct": 100 * (baseline_seconds - checked_seconds) / baseline_seconds
                   if math.isfinite(checked_seconds) else None, "checked_from": checked.source,
                   "partition_prior_ms": prior.seconds * 1e3 if prior.ok else None,
                   "zero_shot_follows": follows, "zero_shot_agreement": agreement.get(follows),
                   "most_trusted": trusted, "most_trusted_ms": trusted_ms}
            if args.finetune_updates:
                fine_policy, _ = load_policy(policy_path)  # a fresh copy: each graph fine-tunes from the same start
                fine = GraphPolicyAgent(env.graph, env.device_mask, env.devices, agent_config(args), policy=fine_policy)
                started = time.perf_counter()
                row["finetuned_samples"], row["finetuned_beat_samples"], best, drawn = samples_to_reach(
                    fine, env, baseline_seconds, args.finetune_updates, args.finetune_seconds)
                row["finetuned_best_ms"], row["finetuned_drawn"] = best * 1e3, drawn
                row["finetuned_vs_best_pct"] = 100 * (baseline_seconds - best) / baseline_seconds
                row["finetuned_s"] = time.perf_counter() - started
                started = time.perf_counter()
                scratch = make_agent("hierarchical", env.graph, env.device_mask, env.devices, seed=args.seed)
                row["scratch_samples"], row["scratch_beat_samples"], best, drawn = samples_to_reach(
                    scratch, env, baseline_seconds, args.finetune_updates, args.finetune_seconds)
                row["scratch_best_ms"], row["scratch_drawn"] = best * 1e3, drawn
                row["scratch_s"] = time.perf_counter() - started
            row = {key: (float(value) if isinstance(value, np.floating) else value) for key, value in row.items()}
            rows.append(row)
            print(json.dumps(row), flush=True)  # a long run shows (and keeps, in the log) each row as it lands
        finally:
            env.close()
    return rows


ALL_FAMILIES = "all families"
"""The fold that pre-trains on every family and places the held-out generated graphs."""


@lru_cache(maxsize=None)
def _graphs(size: str) -> dict:
    """Every family's models at `size`, built once per process."""
    return {model: build_model(model, size) for family in FAMILIES.values() for model in family}


def run_fold(fold: str, args) -> list[dict]:
    """One fold, a task of its own (the folds are independent: each pre-trains its own policy from the same
    seed): the policy pre-trained without `fold`'s family and its rows on that family's models, or, for
    ALL_FAMILIES, pre-trained on every family and its rows on the held-out generated graphs and on the
    `--unseen` models."""
    graphs = _graphs(args.size)
    if fold == ALL_FAMILIES:
        trained_on = list(graphs.values())
        held_out = [(random_branchy_graph(seed=training_set.HELD_OUT_SEED + i, size=args.size), None)
                    for i in range(args.generated)]
        held_out += [(load_model(spec, args.size), spec if spec in MODELS else None) for spec in args.unseen]
    else:
        trained_on = [graphs[m] for family, models in FAMILIES.items() if family != fold for m in models]
        held_out = [(graphs[model], model) for model in FAMILIES[fold]]
    config = PretrainConfig(models=tuple(trained_on), machines=tuple(args.machines), sizes=(args.size,),
                            generated=args.pretrain_generated, updates=args.pretrain_updates,
                            imitation_updates=args.imitation_updates, agent=agent_config(args),
                            progress=args.workers == 1 and args.ray is None)  # bars of parallel folds would mix
    rows = []
    with tempfile.TemporaryDirectory() as scratch_dir:
        name = "all-families" if fold == ALL_FAMILIES else f"without-{fold}"
        path = pretrain(config, Path(scratch_dir) / f"{name}.npz").path
        for graph, model in held_out:
            rows += evaluate_held_out(path, graph, model, args.machines, args,
                                      ALL_FAMILIES if fold == ALL_FAMILIES else f"without {fold}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--machines", nargs="+", default=["modeled:2xV100", "modeled:4xV100"])
    parser.add_argument("--families", nargs="*", default=list(FAMILIES), choices=list(FAMILIES),
                        help="families held out in turn (all families are pre-trained on); none: only the "
                        "policy pre-trained on every family, on --generated and --unseen")
    parser.add_argument("--unseen", nargs="*", default=[], metavar="MODEL",
                        help="models outside the zoo's families (a built-in such as gpt2 or llama, or a "
                        "module:function spec), placed by the policy pre-trained on every family")
    parser.add_argument("--pretrain-updates", type=int, default=200)
    parser.add_argument("--imitation-updates", type=int, default=training_set.IMITATION_UPDATES,
                        help="updates of imitating each training pair's best voting heuristic before pre-training")
    parser.add_argument("--prior-heuristics", nargs="+", default=list(GraphAgentConfig.prior_heuristics),
                        help="baselines whose placements vote for each unit's device, the first leading")
    parser.add_argument("--finetune-updates", type=int, default=50, help="0: zero-shot only")
    parser.add_argument("--finetune-seconds", type=float, default=None,
                        help="also stop fine-tuning, and the planner from scratch, after this many seconds each")
    parser.add_argument("--generated", type=int, default=2, help="generated branchy graphs, held out from every fold")
    parser.add_argument("--pretrain-generated", type=int, default=training_set.GENERATED,
                        help="generated branchy graphs (seeds 0, 1, ...) every pre-training also trains on")
    parser.add_argument("--head", default="one-shot", choices=HEADS, help="the graph policy's head, pre-trained and "
                        "fine-tuned (default one-shot)")
    parser.add_argument("--moves-per-sample", type=int, default=GraphAgentConfig.moves_per_sample,
                        help="the moves head: units moved per sample")
    parser.add_argument("--seed", type=int, default=0)
    add_worker_arguments(parser, "the folds (each pre-trains its own policy and evaluates it)")
    parser.add_argument("--out")
    args = parser.parse_args()
    zoo = {model for family in FAMILIES.values() for model in family}
    for spec in args.unseen:
        if spec in zoo:
            parser.error(f"--unseen {spec}: a zoo model is pre-trained on; give a model outside {sorted(zoo)}")
        try:
            check_model_spec(spec, args.size)  # a typo fails here, not after pre-training
        except PlacerError as error:
            parser.error(f"--unseen {spec}: {error}")
    if not args.families and not args.generated and not args.unseen:
        parser.error("nothing to place: give --families, --generated or --unseen")

    # by its module's name, not __main__'s: a Ray actor imports it from there
    from experiments.generalization import run_fold as fold_task

    folds = list(args.families) + ([ALL_FAMILIES] if args.generated or args.unseen else [])
    with open_workers(args.workers, args.ray) as workers:
        rows = [row for fold_rows in workers.run([Task(fold_task, (fold, args)) for fold in folds])
                for row in fold_rows]
    zero_shot = [r["zero_shot_vs_best_pct"] for r in rows if r["zero_shot_vs_best_pct"] is not None]
    checked = [r["checked_vs_best_pct"] for r in rows if r["checked_vs_best_pct"] is not None]
    budget = args.finetune_updates * SAMPLES_PER_UPDATE
    write_report("generalization", ["fold", "graph", "machine", "best_baseline", "best_baseline_ms", "zero_shot_ms",
                                    "zero_shot_vs_best_pct", "checked_ms", "checked_vs_best_pct", "checked_from",
                                    "partition_prior_ms", "zero_shot_follows", "zero_shot_agreement", "most_trusted",
                                    "most_trusted_ms", "placing_s", "finetuned_samples", "finetuned_beat_samples",
                                    "finetuned_best_ms", "finetuned_vs_best_pct", "finetuned_drawn", "scratch_samples",
                                    "scratch_beat_samples", "scratch_best_ms", "scratch_drawn"],
                 rows, args.out,
                 size=args.size, pretrain_updates=args.pretrain_updates, finetune_updates=args.finetune_updates,
                 imitation_updates=args.imitation_updates, prior_heuristics=args.prior_heuristics,
                 pretrain_generated=args.pretrain_generated, head=args.head,
                 moves_per_sample=args.moves_per_sample if args.head == "moves" else None,
                 samples_per_update=SAMPLES_PER_UPDATE,
                 zero_shot_within_5pct=sum(p >= -5 for p in zero_shot), rows_count=len(rows),
                 median_zero_shot_vs_best_pct=float(np.median(zero_shot)) if zero_shot else None,
                 checked_within_5pct=sum(p >= -5 for p in checked),
                 median_checked_vs_best_pct=float(np.median(checked)) if checked else None,
                 finetune_seconds=args.finetune_seconds, unseen=args.unseen,
                 finetuned_ahead=sum(r.get("finetuned_vs_best_pct", 0) > 0 for r in rows)
                 if args.finetune_updates else None,
                 finetuned_beat_5x_fewer=sum(five_times_fewer(r, budget) for r in rows) if args.finetune_updates else None)


def five_times_fewer(row: dict, budget: int) -> bool:
    """Fine-tuning beat the best baseline with at least 5x fewer samples than the planner from scratch took to
    beat it (the whole budget of samples, where it never did: a lower bound)."""
    fine = row.get("finetuned_beat_samples")
    if fine is None:
        return False
    scratch = row.get("scratch_beat_samples")
    return (row.get("scratch_drawn", budget) if scratch is None else scratch) >= 5 * fine


if __name__ == "__main__":
    main()
