"""A lower bound on the step time of any placement of one graph on one device set, from the simulator's own costs.

`step_time_bound(simulator)` says how fast no placement can go, whatever the method that made it: a plan's
step time over the bound (`times_bound`) says how much room is left, and `gap_closed` how much of a baseline's
room a learned plan took. A lower bound, not a target: the fastest placement may stay well above it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

if TYPE_CHECKING:
    from placer.simulate.simulator import Simulator

PAIR_SWEEPS = 20
"""Sweeps over the pairs of kinds of device in the search for the work part's weights on machines of three or
more kinds of device (two kinds are solved exactly); any weights give a valid bound, the best found is kept."""
GOLDEN_STEPS = 40
GOLDEN = (math.sqrt(5) - 1) / 2


@dataclass(frozen=True)
class StepTimeBound:
    """Seconds below which no placement's simulated step can go, and the parts it is the largest of."""

    critical_path: float
    """The longest chain of dependent ops, each at its cost on the device where it runs fastest, no transfer
    paid: every op waits for its inputs."""
    work: float
    """The ops' compute shared out over the devices' slots as evenly as their speeds allow (a fractional
    assignment, the dual of the linear program: each op at its cheapest weighted device): devices cannot all
    finish before their share of the work is done."""
    memory: float
    """What the persistent memory (variables and optimizer slots) forces when one device cannot hold it: the
    variables span `devices_needed` devices, so some tensor crosses between two of them, and the fastest chain
    through any edge that may be that cut pays at least that tensor's fastest transfer. 0 when one device holds
    it all, or when the variables lie in parts of the graph that share no edge (then no transfer is forced)."""
    overhead: float
    """Fixed seconds every step pays: the step overhead, and the overhead per device beyond the first for the
    devices the memory forces (calibrated targets; 0 on modeled machines)."""
    devices_needed: int | None
    """Fewest devices whose memory can hold the variables (1: any); None: no placement fits at all."""
    simulated_on: str = ""
    """The simulated target whose costs the bound comes from: a modeled machine, or the calibrated twin of a
    measured target, whose bound is then a prediction for that target."""
    slices: int = 1
    """How many slices of the batch (replicas times micro-batches) the plans it bounds run: 1, a placement of the
    whole batch (`sliced_step_bound`)."""

    @property
    def feasible(self) -> bool:
        return self.devices_needed is not None

    @property
    def value(self) -> float:
        """The bound in seconds: its largest part plus the fixed overhead; inf when nothing fits."""
        if not self.feasible:
            return math.inf
        return max(self.critical_path, self.work, self.memory) + self.overhead

    @property
    def binding(self) -> str:
        """Which part sets the bound: "critical path", "work" or "memory"."""
        if not self.feasible:
            return "memory"
        parts = {"critical path": self.critical_path, "work": self.work, "memory": self.memory}
        return max(parts, key=parts.get)

    def describe(self) -> str:
        where = f" on {self.simulated_on}" if self.simulated_on else ""
        if not self.feasible:
            return f"no placement fits{where}: the variables exceed the devices' memory"
        needed = f", the variables need {self.devices_needed} devices" if self.devices_needed > 1 else ""
        sliced = f", the batch in {self.slices} slices" if self.slices > 1 else ""
        return (f"bound {self.value * 1e3:.3f} ms (simulated{where}{sliced}): {self.binding} binds; critical path "
                f"{self.critical_path * 1e3:.3f} ms, work over the devices {self.work * 1e3:.3f} ms, memory "
                f"{self.memory * 1e3:.3f} ms{needed}, fixed overhead {self.overhead * 1e3:.3f} ms")

    def to_dict(self) -> dict[str, Any]:
        return {"seconds": self.value if self.feasible else None, "binding": self.binding,
                "critical_path": self.critical_path, "work": self.work, "memory": self.memory,
                "overhead": self.overhead, "devices_needed": self.devices_needed, "simulated_on": self.simulated_on,
                "slices": self.slices}


def times_bound(seconds: float | None, bound: StepTimeBound | float | None) -> float | None:
    """`seconds` as a multiple of the bound; None where either is missing or not finite."""
    limit = bound.value if isinstance(bound, StepTimeBound) else bound
    if seconds is None or limit is None or not (math.isfinite(seconds) and math.isfinite(limit)) or limit <= 0:
        return None
    return seconds / limit


def gap_closed(best_heuristic: float | None, learned: float | None, bound: StepTimeBound | float | None) -> float | None:
    """(best heuristic - learned) / (best heuristic - bound): the share of the best heuristic's distance to the
    bound that the learned plan closed (1: it reached the bound, 0: no better than the heuristic, negative:
    worse). None where a number is missing or not finite, or the heuristic is at the bound already."""
    limit = bound.value if isinstance(bound, StepTimeBound) else bound
    values = (best_heuristic, learned, limit)
    if any(v is None or not math.isfinite(v) for v in values) or best_heuristic - limit <= 0:
        return None
    return (best_heuristic - learned) / (best_heuristic - limit)


def step_time_bound(simulator: Simulator, *, simulated_on: str = "") -> StepTimeBound:
    """The lower bound on `simulator.simulate(p).step_time` over every placement p that fits in memory."""
    fastest = fastest_op_seconds(simulator)
    cheapest = fastest.min(axis=1)
    finish, tail = _longest_chains(simulator, cheapest)
    config = simulator.config
    devices_needed = _devices_needed(simulator)
    memory = 0.0
    if devices_needed is not None and devices_needed > 1:
        memory = _forced_cut(simulator, finish, tail)
    overhead = config.step_overhead + config.spanning_overhead * max((devices_needed or 1) - 1, 0)
    return StepTimeBound(
        critical_path=float(finish.max()) if len(finish) else 0.0,
        work=work_bound(fastest, simulator.slots.astype(np.float64)),
        memory=memory, overhead=overhead, devices_needed=devices_needed, simulated_on=simulated_on,
    )


def sliced_step_bound(simulator: Simulator, slices: int, batch_dependent: np.ndarray, *,
                      unordered: np.ndarray | None = None, simulated_on: str = "") -> StepTimeBound:
    """The lower bound on every plan that runs the step as `slices` slices of its batch (replicas, micro-batches of
    each, or both), `simulator` pricing the step built at one slice on the whole machine.

    Work: every op `batch_dependent` marks (one flag per step op: the forward and backward) runs once per slice,
    every other op (the update) at least once, each anywhere on the machine's devices. Critical path: one slice's
    chain of ops, the update after it, less the edges `unordered` marks (one flag per simulator edge: ordering
    that some such plans drop, a schedule's gradient gates). No memory part: replicas each hold the weights and
    pipelines split them, so no one cut is forced."""
    fastest = fastest_op_seconds(simulator)
    copies = np.where(np.asarray(batch_dependent, dtype=bool), float(slices), 1.0)
    finish, _ = _longest_chains(simulator, fastest.min(axis=1), kept=None if unordered is None else ~unordered)
    config = simulator.config
    return StepTimeBound(
        critical_path=float(finish.max()) if len(finish) else 0.0,
        work=work_bound(fastest * copies[:, None], simulator.slots.astype(np.float64)),
        memory=0.0, overhead=config.step_overhead, devices_needed=_devices_needed(simulator),
        simulated_on=simulated_on, slices=slices,
    )


def fastest_op_seconds(simulator: Simulator) -> np.ndarray:
    """[ops, devices]: the least seconds each op can take on each device. Where ops share a CPU device's cores
    (a performance model), an op runs at a rate set by how many run beside it, never faster than its fastest
    column: the bound takes that column, whatever the model predicts."""
    share = simulator.share_cost
    fastest = share[:, :, 0].copy()
    for device, slots in enumerate(simulator.slots.tolist()):
        fastest[:, device] = share[:, device, :max(slots, 1)].min(axis=1)
    return fastest


def work_bound(op_seconds: np.ndarray, slots: np.ndarray) -> float:
    """The least time in which devices of `slots` slots finish ops costing `op_seconds` [ops, devices], each op
    anywhere, split as finely as wanted.

    For any device weights w >= 0 with sum(w * slots) = 1, sum over ops of min over devices of w * seconds is a
    lower bound (weak duality of the fractional assignment's linear program); equal weights give the total
    cheapest work over all slots. Devices with the same costs get the same weight, so the weights are searched
    per kind of device: exactly for two kinds, by a search that keeps the best weights for more."""
    if op_seconds.size == 0:
        return 0.0
    kinds, kind_of = np.unique(op_seconds.T, axis=0, return_inverse=True)
    kind_of = np.asarray(kind_of).reshape(-1)
    capacity = np.bincount(kind_of, weights=slots, minlength=len(kinds))
    scaled = kinds.T / capacity  # [ops, kinds]: seconds over the kind's slots
    if len(kinds) == 1:
        return float(scaled.sum())
    if len(kinds) == 2:
        return _two_kinds(scaled[:, 0], scaled[:, 1])
    return _many_kinds(scaled)


def _many_kinds(scaled: np.ndarray) -> float:
    """max over shares (>= 0, summing to 1) of sum over ops of min over kinds of share * scaled seconds, searched:
    from equal shares or shares by speed (exact when the kinds differ by a speed alone), then budget moved
    between each pair of kinds by a golden-section search. Any shares give a valid bound: the best is kept."""
    def value(shares: np.ndarray) -> float:
        return float((scaled * shares).min(axis=1).sum())

    kinds = scaled.shape[1]
    totals = scaled.sum(axis=0)
    by_speed = np.where(totals > 0, 1.0 / np.where(totals > 0, totals, 1.0), 0.0)
    starts = [np.full(kinds, 1.0 / kinds)] + ([by_speed / by_speed.sum()] if by_speed.sum() > 0 else [])
    shares = max(starts, key=value)
    best = value(shares)
    for _ in range(PAIR_SWEEPS):
        before = best
        for p in range(kinds):
            for q in range(p + 1, kinds):
                budget = shares[p] + shares[q]

                def moved(t: float) -> np.ndarray:
                    trial = shares.copy()
                    trial[p], trial[q] = t * budget, (1.0 - t) * budget
                    return trial

                low, high = 0.0, 1.0
                for _ in range(GOLDEN_STEPS):  # the value is concave in t: golden-section search
                    a, b = high - GOLDEN * (high - low), low + GOLDEN * (high - low)
                    if value(moved(a)) < value(moved(b)):
                        low = a
                    else:
                        high = b
                trial = moved((low + high) / 2)
                if value(trial) > best:
                    shares, best = trial, value(trial)
        if best <= before * (1 + 1e-9):
            break
    return best


def _two_kinds(first: np.ndarray, second: np.ndarray) -> float:
    """max over t in [0, 1] of sum(min(t * first, (1 - t) * second)): concave and piecewise linear in t, so the
    maximum is at a breakpoint t_i = second_i / (first_i + second_i)."""
    total = first + second
    priced = total > 0
    first, second = first[priced], second[priced]
    if not len(first):
        return 0.0
    breaks = second / (first + second)
    order = np.argsort(breaks)
    breaks, first, second = breaks[order], first[order], second[order]
    # At t = breaks[k]: ops k.. still cost t * first (t <= their break), ops ..k-1 cost (1 - t) * second.
    first_after = np.cumsum(first[::-1])[::-1]
    second_before = np.concatenate(([0.0], np.cumsum(second)[:-1]))
    return float((breaks * first_after + (1.0 - breaks) * second_before).max())


def _longest_chains(simulator: Simulator, seconds: np.ndarray,
                    kept: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per op, the longest chain of op seconds that ends with it (its earliest finish) and that starts with it
    (the least time from its start to the end of the step), over the edges the simulator orders ops by (those
    `kept` marks, when given)."""
    n = len(seconds)
    src, dst = simulator.edge_src, simulator.out_dst
    if kept is not None:
        src, dst = src[kept], dst[kept]
    order = _topological_order(n, src, dst)
    out_ptr = np.searchsorted(src, np.arange(n + 1))  # the simulator's edges are sorted by their source
    by_dst = np.argsort(dst, kind="stable")
    in_ptr = np.searchsorted(dst[by_dst], np.arange(n + 1))
    in_src = src[by_dst].tolist()
    seconds_list = seconds.tolist()
    finish = [0.0] * n
    for i in order:
        ready = max((finish[s] for s in in_src[in_ptr[i]:in_ptr[i + 1]]), default=0.0)
        finish[i] = ready + seconds_list[i]
    tail = [0.0] * n
    dst_list = dst.tolist()
    for i in reversed(order):
        after = max((tail[j] for j in dst_list[out_ptr[i]:out_ptr[i + 1]]), default=0.0)
        tail[i] = seconds_list[i] + after
    return np.array(finish, dtype=np.float64).reshape(n), np.array(tail, dtype=np.float64).reshape(n)


def _topological_order(n: int, src: np.ndarray, dst: np.ndarray) -> list[int]:
    indegree = np.bincount(dst, minlength=n).tolist()
    children: list[list[int]] = [[] for _ in range(n)]
    for a, b in zip(src.tolist(), dst.tolist()):
        children[a].append(b)
    ready = [i for i in range(n) if indegree[i] == 0]
    order = []
    while ready:
        i = ready.pop()
        order.append(i)
        for j in children[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                ready.append(j)
    if len(order) != n:
        from placer.errors import PlacementError

        raise PlacementError(f"no step time bound: the graph has a cycle ({n - len(order)} ops on it or after it)")
    return order


def _devices_needed(simulator: Simulator) -> int | None:
    """Fewest devices whose memory can hold the variables: the largest capacities first, a colocation group's
    variables never split (each group must fit one device). None where no placement fits."""
    group_bytes = np.bincount(simulator.variable_groups, weights=simulator.variable_bytes,
                              minlength=len(simulator.graph.groups))
    capacities = np.sort(simulator.capacity)[::-1]
    if group_bytes.size and group_bytes.max() > capacities[0]:
        return None
    held = np.cumsum(capacities)
    total = float(group_bytes.sum())
    if total > held[-1]:
        return None
    return int(np.searchsorted(held, total) + 1) if total > 0 else 1


def _forced_cut(simulator: Simulator, finish: np.ndarray, tail: np.ndarray) -> float:
    """With the variables on two devices or more: if they all lie in one part of the graph that edges and
    colocation groups connect, some edge of that part crosses between devices (a group never does). The
    step is then at least the fastest chain through such an edge with the tensor's fastest transfer on it.
    0 when the variables lie in parts no edge joins: then no transfer is forced."""
    n = len(finish)
    groups = len(simulator.graph.groups)
    parent = list(range(n + groups))  # ops, then one node per colocation group

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def join(a: int, b: int) -> None:
        a, b = root(a), root(b)
        if a != b:
            parent[a] = b

    for op, group in enumerate(simulator.op_group.tolist()):
        join(op, n + group)
    for a, b in zip(simulator.edge_src.tolist(), simulator.out_dst.tolist()):
        join(a, b)
    parts = {root(n + int(g)) for g in np.unique(simulator.variable_groups)}
    if len(parts) != 1:
        return 0.0
    (part,) = parts
    # An edge inside a colocation group never crosses devices: it cannot be the cut.
    in_part = np.array([root(a) == part for a in simulator.edge_src.tolist()], dtype=bool)
    in_part &= simulator.op_group[simulator.edge_src] != simulator.op_group[simulator.out_dst]
    if not in_part.any():
        return 0.0
    bandwidth, latency = simulator.link_bandwidth, simulator.link_latency
    linked = (bandwidth > 0) & ~np.eye(len(bandwidth), dtype=bool)
    if not linked.any():
        return 0.0  # a placement that crosses devices cannot run at all: no transfer to price
    sizes = simulator.tensor_bytes[simulator.out_tensor[in_part]]
    transfer = (latency[linked][None, :] + sizes[:, None] / bandwidth[linked][None, :]).min(axis=1)
    through = finish[simulator.edge_src[in_part]] + transfer + tail[simulator.out_dst[in_part]]
    return float(through.min())


def machine_bound(bounds: Iterable[StepTimeBound]) -> StepTimeBound:
    """What no plan of the search can beat on one machine, whatever it runs: a placement of the whole batch,
    micro-batches under a schedule, replicas on slices of the batch, or any mix. Each such plan runs every op of
    the step at one slice of the batch, so it is bounded by the bound of its count of slices (`bounds`: the whole
    batch's `step_time_bound`, and a `sliced_step_bound` for every other count the search made plans of); the
    least of them holds for all. Fewer samples an op shorten the chain of dependent ops but, under the simulator's
    op costs (a launch floor, then time growing with the samples), never lessen the work."""
    bounds = list(bounds)
    if not bounds:
        raise ValueError("machine_bound needs the bound of at least one count of slices")
    return min(bounds, key=lambda bound: bound.value)
