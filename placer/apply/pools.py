"""A plan's thread pools in your own TensorFlow 2 training: `use_plan_pools` before any model or tensor is made.

Where `placer optimize` recommends one process with tuned pools (`inprocess:1,intra=1,inter=2`), what there is to
carry into your own `model.fit` or `tf.function` loop is that process's pools: TensorFlow's intra-op threads (how
many run one op) and inter-op threads (how many ops run at once), which it fixes when its runtime starts. Plans
that use testbed workers or a modeled machine are run by `placer apply`, not by this process.
"""

from __future__ import annotations

from pathlib import Path

from placer.errors import PlanFileError


def use_plan_pools(plan) -> str:
    """Give this process the thread pools of `plan` (a plan file's path, or a `placer.plan.Plan`), and its
    logical CPU devices if it has several (`placer.keras.make_logical_cpus`). Call it first thing, before any
    model or tensor is made. Returns what it set, in words. PlanFileError for a plan that does not run in one
    process, or when TensorFlow has already started with other pools."""
    import tensorflow as tf

    from placer.measure.targets import InProcess
    from placer.plan import read_plan_file

    if isinstance(plan, (str, Path)):
        plan = read_plan_file(plan)
    machine = plan.machine
    if not isinstance(machine, InProcess):
        raise PlanFileError(f"this plan runs on {machine}, not in one process: run it with `placer apply PLAN.json`; "
                            "use_plan_pools gives your own process the pools of a one-process plan")
    if machine.logical_cpus > 1:
        from placer.keras.fit import make_logical_cpus

        make_logical_cpus(machine.logical_cpus)
    wanted = {"intra-op": (machine.intra_op_threads, tf.config.threading.set_intra_op_parallelism_threads,
                           tf.config.threading.get_intra_op_parallelism_threads),
              "inter-op": (machine.inter_op_threads, tf.config.threading.set_inter_op_parallelism_threads,
                           tf.config.threading.get_inter_op_parallelism_threads)}
    said = []
    for name, (threads, set_threads, get_threads) in wanted.items():
        if threads is None:  # TensorFlow's default, which it picks as it starts
            said.append(f"{name} threads: TensorFlow's default")
            continue
        try:
            set_threads(threads)
        except RuntimeError:
            if get_threads() != threads:
                raise PlanFileError(f"TensorFlow has started with {get_threads() or 'its default'} {name} threads, "
                                    f"so it cannot take the plan's {threads}: call use_plan_pools first thing, before "
                                    "any model or tensor is made") from None
        said.append(f"{name} threads: {threads}")
    devices = f"{machine.logical_cpus} logical CPU devices; " if machine.logical_cpus > 1 else ""
    return devices + ", ".join(said)
