"""The exact baseline: placement and order of a coarsened graph as one mixed-integer program, solved by HiGHS.

As Pesto (Hafeez et al., 2021) and Moirai (2023) do, the graph is first coarsened, here to `clusters_for(k)`
clusters: the units (colocation groups, `placer.heuristics.units`) in a depth-first topological order cut into
contiguous runs of about equal compute. Contiguous runs of a topological order can only send forward, so the
cluster graph has no cycle, and depth first keeps a branch (one tower, one layer's backward) in few clusters.

The program, over clusters c, devices d and the forward cluster edges (a, b) carrying B_ab bytes:

    minimize   T
    subject to sum_d x_cd = 1                               each cluster on one device (x_cd binary)
               z_ab >= x_ad - x_bd                          z_ab = 1 when the edge crosses devices
               s_b + sum_d f_vd x_bd >= s_a + sum_d e_ud x_ad + t_ab z_ab
                                                            for each unit edge u -> v from a to b: v starts
                                                            after u ends, paying the transfer t_ab if it crosses
               T   >= s_c + sum_d p_cd x_cd                 the makespan
               for a before b by a path, on each device d:  s_b >= s_a + P_a - M (2 - x_ad - x_bd)
               for a, b that no path orders, on each device d, one of them first (o_ab binary):
               s_b >= s_a + P_a - M (1 - o_ab) - M (2 - x_ad - x_bd)
               s_a >= s_b + P_b - M o_ab       - M (2 - x_ad - x_bd)
               sum_c m_c x_cd <= capacity_d                 memory

p_cd is the cluster's compute on device d (the simulator's op costs); a cluster runs its units back to back in
topological order, so e_ud is when unit u ends and f_vd when unit v starts, counted from their cluster's start
(only the binding unit edges are kept: `_cluster_lags`); t_ab is the mean transfer time between two
linked devices, M the makespan of everything on the fastest device. The order the solution holds is the
solver's: TensorFlow's executor orders ops itself, so the placement is what this baseline returns, with the
program's makespan, its proven gap and the solver status in the placement's metadata. Within the time limit
the solver proves the optimum of the coarsened program or returns its best solution so far; it starts from
every cluster on the fastest device in order, so it always has one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placer.devices import DeviceSet
from placer.errors import PlacementError
from placer.graph.opgraph import OpGraph
from placer.heuristics.units import UnitProblem, unit_problem
from placer.placement import Placement

TIME_LIMIT_SECONDS = 10.0
"""The solver's budget: the baseline is timed among the others in `placer train`'s and `placer optimize`'s
comparisons, which a user waits for."""


def clusters_for(devices: int) -> int:
    """How many clusters the graph is coarsened to: enough for each device to take several, few enough that
    the ordering binaries (one per unordered pair) stay in the hundreds."""
    return min(32, 8 * max(devices, 2))


@dataclass(frozen=True)
class ExactSolution:
    """The solved program: a device per unit, and what the solver proved."""

    unit_devices: np.ndarray
    makespan: float
    """Seconds: the program's makespan of the placement (its coarsened model of the step)."""
    gap: float
    """Relative gap between that makespan and the best bound the solver proved (0: optimal)."""
    status: str
    clusters: int


def exact_placement(graph: OpGraph, devices: DeviceSet, simulator, *,
                    time_limit: float = TIME_LIMIT_SECONDS, clusters: int | None = None) -> Placement:
    """The exact baseline's placement of `graph` on `devices`, from `simulator`'s op costs."""
    problem = unit_problem(simulator)
    solution = solve_exact(problem, clusters=clusters or clusters_for(len(devices)), time_limit=time_limit)
    return Placement.from_assignment(graph, devices, solution.unit_devices, {
        "method": "exact", "predicted_makespan": solution.makespan, "optimality_gap": solution.gap,
        "solver_status": solution.status, "clusters": solution.clusters})


def solve_exact(problem: UnitProblem, *, clusters: int, time_limit: float) -> ExactSolution:
    """Coarsen `problem` to at most `clusters` clusters and solve the program above within `time_limit` seconds."""
    if time_limit <= 0:
        raise ValueError(f"time_limit must be positive seconds, got {time_limit!r}")
    if clusters < 1:
        raise ValueError(f"clusters must be at least 1, got {clusters!r}")
    cluster_of = coarsen(problem, clusters)
    count = int(cluster_of.max()) + 1
    compute = np.zeros((count, problem.compute.shape[1]))
    for d in range(problem.compute.shape[1]):
        compute[:, d] = np.bincount(cluster_of, weights=problem.compute[:, d], minlength=count)  # inf stays inf
    memory = np.bincount(cluster_of, weights=problem.memory, minlength=count)
    transfers: dict[tuple[int, int], float] = {}
    for a, b, size in problem.edges:
        ca, cb = int(cluster_of[int(a)]), int(cluster_of[int(b)])
        if a < b and ca != cb:  # backward unit edges (a variable's update) stay inside one unit's device
            transfers[(ca, cb)] = transfers.get((ca, cb), 0.0) + float(size)
    lags = _cluster_lags(problem, cluster_of)
    cluster_devices, makespan, gap, status = _solve(compute, memory, problem, transfers, lags, time_limit)
    return ExactSolution(cluster_devices[cluster_of], makespan, gap, status, count)


def _cluster_lags(problem: UnitProblem, cluster_of: np.ndarray) -> dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray]]]:
    """Per edge between clusters, the unit edges that bind: a cluster runs its units back to back in
    topological order, so unit edge u -> v only needs the target cluster to start `ends[u] - starts[v]` after
    the source cluster starts (seconds into each cluster on each device), not after the source has ended. That
    lets a chain of clusters overlap like the layers of an unrolled LSTM do. For each pair of devices only the
    unit edge with the largest lag binds, so at most k * k are kept per cluster edge."""
    units, k = problem.compute.shape
    cost = np.where(np.isfinite(problem.compute), problem.compute, 0.0)
    forward = np.array([(int(a), int(b)) for a, b, _ in problem.edges if a < b], dtype=np.int64).reshape(-1, 2)
    position = np.empty(units, np.int64)
    position[_depth_first_order(units, forward)] = np.arange(units)
    starts, ends = np.zeros((units, k)), np.zeros((units, k))
    for cluster in range(int(cluster_of.max()) + 1):
        members = np.flatnonzero(cluster_of == cluster)
        members = members[np.argsort(position[members], kind="stable")]
        finished = np.cumsum(cost[members], axis=0)
        ends[members], starts[members] = finished, finished - cost[members]
    binding: dict[tuple[int, int], dict[tuple[int, int], tuple[float, int, int]]] = {}
    for u, v in forward:
        a, b = int(cluster_of[u]), int(cluster_of[v])
        if a == b:
            continue
        pair = binding.setdefault((a, b), {})
        for d in range(k):
            for e in range(k):
                lag = ends[u, d] - starts[v, e]
                if (d, e) not in pair or lag > pair[(d, e)][0]:
                    pair[(d, e)] = (lag, u, v)
    return {pair: [(ends[u], starts[v]) for u, v in sorted({(u, v) for _, u, v in chosen.values()})]
            for pair, chosen in binding.items()}


def coarsen(problem: UnitProblem, clusters: int) -> np.ndarray:
    """[U] the cluster of each unit, clusters numbered in a topological order of the forward unit edges.

    First, edges are contracted heaviest first where that cannot make a cycle: a cluster with one successor
    merges into it, and a cluster with one predecessor into that (any other path between the two would need
    another edge out of the first or into the second), while the merged cluster holds at most 1/`clusters` of
    the compute. Parallel branches stay apart, chains close up. Then the clusters, in a depth-first
    topological order (a branch's clusters next to each other), are cut into at most `clusters` contiguous runs
    of about equal compute: contiguous runs of a topological order only send forward, so there is no cycle."""
    units = problem.compute.shape[0]
    cheapest = problem.compute.min(axis=1) if units else np.zeros(0)
    weight = np.where(np.isfinite(cheapest), cheapest, 0.0)  # a unit no device runs is refused when solving
    forward = [(int(a), int(b), float(size)) for a, b, size in problem.edges if a < b]
    merged = _contract_safely(units, forward, weight, cap=float(weight.sum()) / max(clusters, 1))
    _, contracted = np.unique(merged, return_inverse=True)
    count = int(contracted.max()) + 1 if units else 0
    cluster_edges = np.array(sorted({(int(contracted[a]), int(contracted[b])) for a, b, _ in forward
                                     if contracted[a] != contracted[b]}), dtype=np.int64).reshape(-1, 2)
    order = _depth_first_order(count, cluster_edges)
    cluster_weight = np.bincount(contracted, weights=weight, minlength=count)[order]
    runs = min(clusters, count)
    total = float(cluster_weight.sum())
    if total <= 0:
        run_of_position = (np.arange(count) * runs) // max(count, 1)
    else:  # the run a position falls in by the compute before it; runs left empty are closed up below
        before = np.cumsum(cluster_weight) - cluster_weight
        run_of_position = np.minimum((before / total * runs).astype(np.int64), runs - 1)
    _, dense = np.unique(run_of_position, return_inverse=True)
    run_of_cluster = np.empty(count, np.int64)
    run_of_cluster[order] = dense
    return run_of_cluster[contracted]


def _contract_safely(units: int, forward: list[tuple[int, int, float]], weight: np.ndarray, cap: float) -> np.ndarray:
    """[U] a representative unit per unit after contracting the edges that cannot close a cycle (see `coarsen`)."""
    parent = list(range(units))

    def find(unit: int) -> int:
        while parent[unit] != unit:
            parent[unit] = parent[parent[unit]]
            unit = parent[unit]
        return unit

    successors: list[set[int]] = [set() for _ in range(units)]
    predecessors: list[set[int]] = [set() for _ in range(units)]
    for a, b, _ in forward:
        successors[a].add(b)
        predecessors[b].add(a)
    load = weight.astype(float).tolist()
    for a, b, _ in sorted(forward, key=lambda edge: -edge[2]):
        a, b = find(a), find(b)
        if a == b or load[a] + load[b] > cap or not (len(successors[a]) == 1 or len(predecessors[b]) == 1):
            continue
        parent[b] = a
        load[a] += load[b]
        for neighbor in successors[b]:
            predecessors[neighbor].discard(b)
            predecessors[neighbor].add(a)
        for neighbor in predecessors[b]:
            successors[neighbor].discard(b)
            successors[neighbor].add(a)
        successors[a] = (successors[a] | successors[b]) - {a, b}
        predecessors[a] = (predecessors[a] | predecessors[b]) - {a, b}
        successors[b], predecessors[b] = set(), set()
    return np.array([find(unit) for unit in range(units)], np.int64)


def _depth_first_order(count: int, edges: np.ndarray) -> np.ndarray:
    """A topological order of `edges` ([E, 2], a DAG) that follows the node just taken into its children when it
    can, so that a chain or a branch is contiguous."""
    children: list[list[int]] = [[] for _ in range(count)]
    waiting = np.zeros(count, np.int64)
    for a, b in edges:
        children[int(a)].append(int(b))
        waiting[int(b)] += 1
    stack = [node for node in range(count - 1, -1, -1) if waiting[node] == 0]  # the lowest index on top
    order = []
    while stack:
        node = stack.pop()
        order.append(node)
        for child in sorted(children[node], reverse=True):
            waiting[child] -= 1
            if waiting[child] == 0:
                stack.append(child)
    if len(order) != count:
        raise AssertionError("the contracted cluster graph has a cycle")  # the contraction rule forbids one
    return np.array(order, np.int64)


def _reachability(count: int, forward: list[tuple[int, int]]) -> np.ndarray:
    """[C, C] True where a path of forward edges leads from a to b (clusters are in topological order)."""
    reach = np.zeros((count, count), bool)
    for a, b in sorted(forward, key=lambda edge: -edge[0]):
        reach[a, b] = True
    for a in range(count - 1, -1, -1):
        for b in np.flatnonzero(reach[a]):
            reach[a] |= reach[b]
    return reach


def _mean_transfer_seconds(problem: UnitProblem, size: float) -> float:
    linked = problem.bandwidth > 0
    np.fill_diagonal(linked, False)
    if not linked.any():
        return np.inf
    return float(np.mean(problem.latency[linked] + size / problem.bandwidth[linked]))


def _solve(compute: np.ndarray, memory: np.ndarray, problem: UnitProblem, transfers: dict[tuple[int, int], float],
           lags: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray]]], time_limit: float) -> tuple[np.ndarray, float, float, str]:
    import highspy

    count, k = compute.shape
    allowed = np.isfinite(compute)
    if not allowed.any(axis=1).all():
        cluster = int(np.flatnonzero(~allowed.any(axis=1))[0])
        raise PlacementError(f"exact: cluster {cluster} holds ops that no device has a kernel for")
    fastest = int(np.argmin(np.where(allowed, compute, np.inf).sum(axis=0)))
    cost = np.where(allowed, compute, 0.0)
    horizon = float(cost.max(axis=1).sum() + sum(_finite(_mean_transfer_seconds(problem, s)) for s in transfers.values()))
    big = max(horizon, 1e-9)
    edges = sorted(transfers)
    reach = _reachability(count, edges)
    unordered = [(a, b) for a in range(count) for b in range(a + 1, count) if not reach[a, b]]

    # columns: x (count*k), s (count), z (edges), o (unordered), T
    x0, s0, z0, o0 = 0, count * k, count * k + count, count * k + count + len(edges)
    t_col = o0 + len(unordered)
    columns = t_col + 1
    lower, upper = np.zeros(columns), np.ones(columns)
    upper[s0:z0] = horizon
    upper[t_col] = horizon
    upper[x0:s0] = allowed.reshape(-1).astype(float)  # no kernel: the cluster cannot go there
    integrality = np.zeros(columns, dtype=np.int64)
    integrality[x0:s0] = 1
    integrality[o0:t_col] = 1
    objective = np.zeros(columns)
    objective[t_col] = 1.0
    rows: list[tuple[list[int], list[float], float, float]] = []

    def x(c: int, d: int) -> int:
        return x0 + c * k + d

    inf = highspy.kHighsInf
    for c in range(count):
        rows.append(([x(c, d) for d in range(k)], [1.0] * k, 1.0, 1.0))
        rows.append(([t_col, s0 + c] + [x(c, d) for d in range(k)], [1.0, -1.0] + list(-cost[c]), 0.0, inf))
    for e, (a, b) in enumerate(edges):
        seconds = _mean_transfer_seconds(problem, transfers[(a, b)])
        for d in range(k):
            rows.append(([z0 + e, x(a, d), x(b, d)], [1.0, -1.0, 1.0], 0.0, inf))
        if not np.isfinite(seconds):  # no links: the edge must stay on one device
            upper[z0 + e], seconds = 0.0, 0.0
        for source_end, target_start in lags[(a, b)]:
            rows.append(([s0 + b, s0 + a, z0 + e] + [x(a, d) for d in range(k)] + [x(b, d) for d in range(k)],
                         [1.0, -1.0, -seconds] + list(-source_end) + list(target_start), 0.0, inf))
    for a in range(count):  # b follows a by a path: on one device, b waits for all of a (lags let it overlap)
        for b in np.flatnonzero(reach[a]):
            for d in range(k):
                if allowed[a, d] and allowed[b, d]:
                    rows.append(([s0 + b, s0 + a, x(a, d), x(b, d)] + [x(a, q) for q in range(k)],
                                 [1.0, -1.0, -big, -big] + list(-cost[a]), -2 * big, inf))
    for i, (a, b) in enumerate(unordered):
        for d in range(k):
            if not (allowed[a, d] and allowed[b, d]):
                continue
            rows.append(([s0 + b, s0 + a, o0 + i, x(a, d), x(b, d)] + [x(a, q) for q in range(k)],
                         [1.0, -1.0, -big, -big, -big] + list(-cost[a]), -3 * big, inf))
            rows.append(([s0 + a, s0 + b, o0 + i, x(a, d), x(b, d)] + [x(b, q) for q in range(k)],
                         [1.0, -1.0, big, -big, -big] + list(-cost[b]), -2 * big, inf))
    for d in range(k):
        if np.isfinite(problem.capacity[d]):
            rows.append(([x(c, d) for c in range(count)], list(memory), -inf, float(problem.capacity[d])))
    if _identical_devices(compute, problem):
        lower[x(0, 0)] = 1.0  # devices that cannot be told apart: which one takes the first cluster is arbitrary

    model = highspy.HighsLp()
    model.num_col_, model.num_row_ = columns, len(rows)
    model.col_cost_, model.col_lower_, model.col_upper_ = objective, lower, upper
    rows = [_merged(row) for row in rows]
    model.row_lower_ = np.array([row[2] for row in rows])
    model.row_upper_ = np.array([row[3] for row in rows])
    model.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    model.a_matrix_.start_ = np.cumsum([0] + [len(row[0]) for row in rows])
    model.a_matrix_.index_ = np.array([i for row in rows for i in row[0]], dtype=np.int32)
    model.a_matrix_.value_ = np.array([v for row in rows for v in row[1]])
    model.integrality_ = [highspy.HighsVarType.kInteger if flag else highspy.HighsVarType.kContinuous
                          for flag in integrality]
    solver = highspy.Highs()
    solver.setOptionValue("output_flag", False)
    solver.setOptionValue("time_limit", float(time_limit))
    solver.setOptionValue("threads", 1)
    solver.setOptionValue("random_seed", 0)
    solver.passModel(model)
    start = _everything_on(fastest, count, k, cost, edges, unordered, columns, (x0, s0, z0, o0, t_col),
                           memory, problem.capacity)
    if start is not None:
        solution = highspy.HighsSolution()
        solution.col_value = list(start)
        solver.setSolution(solution)
    solver.run()
    status = solver.getModelStatus()
    if solver.getInfo().primal_solution_status != 2:  # 2: a feasible solution
        raise PlacementError(f"exact: no placement fits (solver status: {solver.modelStatusToString(status)})")
    values = np.array(solver.getSolution().col_value)
    cluster_devices = values[x0:s0].reshape(count, k).argmax(axis=1)
    info = solver.getInfo()
    return (cluster_devices, float(values[t_col]), float(max(info.mip_gap, 0.0)),
            solver.modelStatusToString(status))


def _merged(row: tuple[list[int], list[float], float, float]) -> tuple[list[int], list[float], float, float]:
    """The row with each column once (a cluster's own x appears both as its device and in its compute)."""
    coefficients: dict[int, float] = {}
    for column, value in zip(row[0], row[1]):
        coefficients[column] = coefficients.get(column, 0.0) + value
    return list(coefficients), list(coefficients.values()), row[2], row[3]


def _everything_on(device: int, count: int, k: int, cost: np.ndarray, edges, unordered, columns: int, offsets,
                   memory: np.ndarray, capacity: np.ndarray) -> np.ndarray | None:
    """A feasible start: every cluster on `device`, in cluster order (None when it does not fit there)."""
    if memory.sum() > capacity[device]:
        return None
    x0, s0, z0, o0, t_col = offsets
    values = np.zeros(columns)
    starts = np.concatenate([[0.0], np.cumsum(cost[:, device])[:-1]])
    for c in range(count):
        values[x0 + c * k + device] = 1.0
    values[s0:s0 + count] = starts
    values[o0:o0 + len(unordered)] = 1.0  # the lower index first
    values[t_col] = float(cost[:, device].sum())
    return values


def _identical_devices(compute: np.ndarray, problem: UnitProblem) -> bool:
    return bool(np.allclose(compute, compute[:, :1], equal_nan=True) and np.all(problem.capacity == problem.capacity[0])
                and np.allclose(problem.bandwidth, problem.bandwidth.T))


def _finite(value: float) -> float:
    return value if np.isfinite(value) else 0.0
