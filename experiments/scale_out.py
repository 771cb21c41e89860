"""How much faster do more workers make placer's simulated work? Samples per second and wall time against
local worker processes and Ray nodes, with the speed-up, the efficiency, and a projection for N machines.

    python experiments/scale_out.py [--workloads pretrain train folds] [--workers 1 2] [--ray-nodes 1 2]
        [--pretrain-updates 60] [--train-model nmt-2] [--train-updates 10] [--families towers mlp transformer]
        [--smoke] [--out FILE]

Workloads, each run as the command a user types, in a fresh process, once per engine:
- pretrain: `placer pretrain` on the default (graph, machine) pairs; its workers own the pairs (their graphs,
  targets and heuristics' votes are built in parallel) and evaluate their placements.
- train: one simulated `placer train --agent graph`; its workers evaluate each update's placements.
- folds: `experiments/generalization.py` holding out `--families` in turn, plus the fold of the generated
  graphs: independent folds, each a pre-training and its evaluation, spread over the workers.
Engines: local worker processes (`--workers N`; 1 is the serial path) and a Ray cluster on this machine of 1
or 2 nodes with one CPU each (`ray start` in a private network namespace, `--ray ADDRESS`). Every result is
checked against the serial run's (the same policy, the same best placement, the same rows).

The projection: Amdahl's law with the serial share f that the 2-worker speed-up S2 implies (f = 2/S2 - 1),
for N machines of C cores: 1 / (f + (1 - f) / min(N x C, units)), units being the independent pieces of work
(pairs of pre-training, placements of one update, folds). It assumes the parallel share splits evenly, that
sending a piece to another machine costs no more than to a local process (placements and results are a few
kB), and that every machine is as fast as this one.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from experiments._report import write_report  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RAY_PORT = 6390


def pretrain_command(args, out: Path) -> list[str]:
    command = ["-m", "agents.cli", "pretrain", "--updates", str(args.pretrain_updates), "--no-progress",
               "--out", str(out)]
    if args.smoke:
        command += ["--models", "two-tower", "mlp", "--generated", "0", "--target", "modeled:2xV100",
                    "modeled:4xV100", "--set", "hidden_size=16", "--set", "message_rounds=2"]
    return command


def train_command(args, run_dir: Path) -> list[str]:
    return ["-m", "agents.cli", "train", args.train_model, "--backend", "simulated", "--target", "modeled:4xV100",
            "--agent", "graph", "--updates", str(args.train_updates), "--samples-per-update",
            str(args.train_samples), "--baselines", "single-device", "--run-dir", str(run_dir), "--no-progress"]


def folds_command(args, out: Path) -> list[str]:
    return [str(REPO / "experiments" / "generalization.py"), "--families", *args.families,
            "--generated", "0" if args.smoke else "1", "--machines", "modeled:2xV100", "--pretrain-generated", "0",
            "--pretrain-updates", str(args.pretrain_updates), "--finetune-updates", "1" if args.smoke else "5",
            "--out", str(out)]


def engine_flags(engine: str, count: int) -> list[str]:
    return ["--workers", str(count)] if engine == "local" else ["--ray", f"127.0.0.1:{RAY_PORT}"]


def run(command: list[str], engine: str, count: int, scratch: Path) -> float:
    """Seconds `python COMMAND` took, on `count` local workers, or on a fresh Ray cluster of `count` nodes."""
    python = [sys.executable, *command, *engine_flags(engine, count)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    if engine == "ray":
        ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
        temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay short
        nodes = [f"{ray} start --head --node-ip-address=127.0.0.1 --port={RAY_PORT} --include-dashboard=false "
                 f"--num-cpus=1 --disable-usage-stats --temp-dir={temp} >/dev/null"]
        nodes += [f"{ray} start --address=127.0.0.1:{RAY_PORT} --node-ip-address=127.0.0.1 --num-cpus=1 "
                  "--disable-usage-stats >/dev/null"] * (count - 1)
        script = "\n".join(["set -e", f"{sys.executable} -c 'from placer.testbed import bring_loopback_up; "
                            "bring_loopback_up()'", f"trap '{ray} stop --force >/dev/null 2>&1' EXIT", *nodes,
                            'start=$(date +%s.%N)', " ".join(python), 'echo "SECONDS $start $(date +%s.%N)"'])
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
        done = subprocess.run(["unshare", "-rn", "bash", "-c", script], cwd=REPO, env=env, capture_output=True,
                              text=True)
        _check(done, command)
        start, end = next(line.split()[1:] for line in done.stdout.splitlines() if line.startswith("SECONDS "))
        return float(end) - float(start)  # the command alone: the cluster's start is not the workload's
    started = time.perf_counter()
    done = subprocess.run(python, cwd=REPO, env=env, capture_output=True, text=True)
    _check(done, command)
    return time.perf_counter() - started


def _check(done: subprocess.CompletedProcess, command: list[str]) -> None:
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")


def pretrain_result(path: Path) -> tuple[int, list[np.ndarray]]:
    from agents.graph_policy import load_policy

    policy, record = load_policy(path)
    return record["trained_on"]["samples"], policy.weights()


def train_result(run_dir: Path) -> tuple[int, tuple]:
    from agents.run_files import read_trainer_state

    state = read_trainer_state(run_dir)
    history = tuple(tuple(sorted((k, v) for k, v in h.items() if k != "wall_time")) for h in state.history)
    return state.samples, (state.best_assignment, history)


def folds_result(path: Path) -> tuple[None, list]:
    rows = json.loads(path.read_text())["rows"]
    return None, [{k: v for k, v in row.items() if k != "placing_s"} for row in rows]


def same(a, b) -> bool:
    if isinstance(a, list) and a and isinstance(a[0], np.ndarray):
        return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    return a == b


def projection(speedup_2: float, machines: int, cores: int, units: int) -> float:
    """Amdahl's speed-up on `machines` x `cores` with the serial share the 2-worker speed-up implies."""
    serial_share = min(1.0, max(0.0, 2.0 / speedup_2 - 1.0))
    return 1.0 / (serial_share + (1.0 - serial_share) / max(1, min(machines * cores, units)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", nargs="+", default=["pretrain", "train", "folds"],
                        choices=["pretrain", "train", "folds"])
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2], help="local worker counts (1: serial)")
    parser.add_argument("--ray-nodes", nargs="+", type=int, default=[1, 2],
                        help="Ray clusters of this many local nodes, one CPU each (none: --ray-nodes with no value)")
    parser.add_argument("--pretrain-updates", type=int, default=60)
    parser.add_argument("--train-model", default="nmt-2")
    parser.add_argument("--train-updates", type=int, default=10)
    parser.add_argument("--train-samples", type=int, default=8, help="samples per update of the training")
    parser.add_argument("--families", nargs="+", default=["towers", "mlp", "transformer"],
                        help="the folds workload: families held out in turn (the generated graphs' fold is added)")
    parser.add_argument("--machines", nargs="+", type=int, default=[1, 2, 4, 8, 16],
                        help="machine counts to project for")
    parser.add_argument("--cores", type=int, default=os.cpu_count(), help="cores per projected machine")
    parser.add_argument("--smoke", action="store_true", help="the smallest settings: checks that it runs")
    parser.add_argument("--out")
    args = parser.parse_args()
    if 1 not in args.workers:
        parser.error("--workers must include 1: the serial run is what the others are compared with")
    if args.smoke:
        args.pretrain_updates, args.train_model, args.train_updates, args.train_samples = 4, "two-tower", 2, 4
        args.families = ["towers", "mlp"]
    if args.ray_nodes:
        from placer.testbed import isolation_available

        try:
            import ray  # noqa: F401
        except ImportError:
            raise SystemExit("Ray is not installed: pip install -e '.[distributed]', or give --ray-nodes with no value")
        if not isolation_available():
            raise SystemExit("the Ray clusters run in a private network namespace, and `unshare -rn` fails here")

    from agents.graph_policy import training_set

    pairs = (len(training_set.MODELS) + training_set.GENERATED) * len(training_set.MACHINES)
    units = {"pretrain": 4 if args.smoke else pairs, "train": args.train_samples, "folds": len(args.families) + (0 if args.smoke else 1)}
    engines = [("local", n) for n in sorted(set(args.workers))] + [("ray", n) for n in sorted(set(args.ray_nodes))]
    rows, serial = [], {}
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        for workload in args.workloads:
            for engine, count in engines:
                name = f"{workload}-{engine}-{count}"
                if workload == "pretrain":
                    out = scratch / f"{name}.npz"
                    seconds = run(pretrain_command(args, out), engine, count, scratch)
                    samples, result = pretrain_result(out)
                elif workload == "train":
                    out = scratch / name
                    seconds = run(train_command(args, out), engine, count, scratch)
                    samples, result = train_result(out)
                else:
                    out = scratch / f"{name}.json"
                    seconds = run(folds_command(args, out), engine, count, scratch)
                    samples, result = folds_result(out)
                if engine == "local" and count == 1:
                    serial[workload] = (seconds, result)
                base_seconds, base_result = serial[workload]
                speedup = base_seconds / seconds
                rows.append({"workload": workload, "engine": engine, "workers": count, "wall_s": seconds,
                             "samples": samples, "samples_per_s": samples / seconds if samples else None,
                             "speedup": speedup, "efficiency": speedup / count,
                             "same_as_serial": same(result, base_result)})
                print(f"{name}: {seconds:.1f} s, speed-up {speedup:.2f}", flush=True)
    projected = {}
    for workload in args.workloads:
        two = next((r for r in rows if r["workload"] == workload and r["engine"] == "local" and r["workers"] == 2),
                   None)
        if two is not None:
            projected[workload] = {str(n): projection(two["speedup"], n, args.cores, units[workload])
                                   for n in args.machines}
    print("\nprojected speed-up on N machines of", args.cores, "cores (Amdahl, from the 2-worker speed-up):")
    for workload, by_machines in projected.items():
        print(f"  {workload:<9}" + "  ".join(f"{n}: {s:.2f}x" for n, s in by_machines.items()))
    write_report("scale_out", ["workload", "engine", "workers", "wall_s", "samples", "samples_per_s", "speedup",
                               "efficiency", "same_as_serial"], rows, args.out,
                 smoke=args.smoke, cpus=os.cpu_count(), pretrain_updates=args.pretrain_updates,
                 train_model=args.train_model, train_updates=args.train_updates, train_samples=args.train_samples,
                 projection=projected, projection_cores=args.cores, independent_units=units,
                 projection_assumes="Amdahl's law with the serial share implied by the 2-worker speed-up; the "
                 "parallel share splits evenly over min(machines x cores, independent units); sending work to "
                 "another machine costs what sending it to a local process does; every machine is as fast as "
                 "this one")


if __name__ == "__main__":
    main()
