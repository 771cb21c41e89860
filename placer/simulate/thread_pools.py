"""How the ops running at once on one CPU device share its threads: TensorFlow's pools as a processor-sharing
model, so that the simulator can price each op by how many ops run beside it.

TensorFlow's CPU device runs up to `inter` ops at once, one per inter-op thread, and every op's kernel splits
its work over the device's ONE intra-op pool of `intra` threads (Eigen's thread pool), shared by all of them:
- with `intra` >= 2, the k ops running share the pool, capped by the cores: min(intra, cores) / k threads each.
  An op alone gets the whole pool; two co-running ops get half each, and the survivor of the two speeds up
  when the other ends;
- with `intra` = 1, Eigen runs each kernel inline, in the inter-op thread that started it (its `parallelFor`
  and tensor contractions do so when the pool has one thread): each running op has a thread of its own, and
  k of them share the cores, min(1, cores / k) each.

An op given `t` threads takes its time at width t (`OpTimeModel.predict`), where t is a whole number; in
between, its rate (work per second) is interpolated linearly between the two widths around it, with the rate
at width 0 being 0. Processor sharing is time slicing: a share of 1.5 threads is, over a slice, two threads
half of the time and one the other half, so the op progresses at the mean of the two rates.

Sharing the pool never makes an op faster than it runs alone on the whole pool: an op whose profile is slower
at the pool's width than at one thread (too small to split, it pays the pool's hand-offs: inception-v3's small
ops) keeps that time beside others, where its share of threads alone would price it at its one-thread time.

While two or more ops run at once, each runs `co_running_slowdown` times slower than alone at the same
threads (shared caches and memory bandwidth; `experiments/probes/co_running.py` measures it: two cores computing at
once, each on its own core).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np


def threads_per_running_op(cores: int | None, intra_op_threads: int, running: int) -> float:
    """Threads' worth of cores each of `running` ops gets on a CPU device of `cores` cores (None: not known,
    not a limit) whose intra-op pool has `intra_op_threads` threads."""
    if running < 1 or intra_op_threads < 1:
        raise ValueError(f"give at least one running op and one intra-op thread, not {running} and {intra_op_threads}")
    # One intra-op thread: Eigen runs each kernel inline, in its own inter-op thread; else all share the pool.
    threads = running if intra_op_threads == 1 else intra_op_threads
    if cores is not None:
        threads = min(threads, cores)
    return min(float(intra_op_threads), threads / running)


def seconds_at_threads(seconds_at_width: Callable[[int], np.ndarray], threads: float) -> np.ndarray:
    """Ops' seconds at `threads` threads, from their seconds at whole widths (`seconds_at_width(w)`, one entry
    per op): between two widths, the rate (1 / seconds) linear in threads, 0 at width 0. An op that takes no
    time at either width takes none."""
    low = math.floor(threads)
    if low == threads:
        return seconds_at_width(low)
    fraction = threads - low
    high_seconds = seconds_at_width(low + 1)
    low_seconds = seconds_at_width(low) if low >= 1 else None
    timed = high_seconds > 0 if low_seconds is None else (high_seconds > 0) & (low_seconds > 0)
    low_rate = 0.0 if low_seconds is None else 1.0 / low_seconds[timed]
    high_rate = 1.0 / high_seconds[timed]
    seconds = np.zeros_like(high_seconds)
    seconds[timed] = 1.0 / ((1.0 - fraction) * low_rate + fraction * high_rate)
    return seconds


def shared_pool_costs(seconds_at_width: Callable[[int], np.ndarray], cores: int | None, intra_op_threads: int,
                      inter_op_threads: int, co_running_slowdown: float = 1.0) -> np.ndarray:
    """[ops, inter_op_threads]: each op's seconds while j + 1 ops run on the device at once (column j), at its
    share of the threads (`threads_per_running_op`), `co_running_slowdown` times slower where j >= 1."""
    if co_running_slowdown < 1.0:
        raise ValueError(f"a co-running slowdown below 1 ({co_running_slowdown}) would make ops faster beside others")
    columns = []
    pool = intra_op_threads if cores is None else min(intra_op_threads, cores)
    alone = seconds_at_width(pool) if intra_op_threads >= 2 else None
    for running in range(1, inter_op_threads + 1):
        seconds = seconds_at_threads(seconds_at_width, threads_per_running_op(cores, intra_op_threads, running))
        if alone is not None and running > 1:
            # Sharing the pool never makes an op faster than it runs alone on it: an op slower on the pool than
            # on one thread (its work too small to split, the pool's hand-offs paid) still pays them beside others.
            seconds = np.maximum(seconds, alone)
        columns.append(seconds * (co_running_slowdown if running > 1 else 1.0))
    return np.stack(columns, axis=1)
