"""Tessel's schedule search with z3 (Lin et al., HPCA 2024): construct the repetend with the fewest bubbles
under the memory limit, then complete the warm-up and cool-down in the fewest steps.

Each bound is found by binary search with push/check/pop on one solver (the authors found z3's Optimize too
slow). Every check gets the time left; when it runs out the best schedule found so far comes back with
`search_status="best-so-far"`, never a hang. `tessel_fast` skips the repetend search (first-fit packing).
"""

from __future__ import annotations

import time as clock
from dataclasses import dataclass, replace

import z3

from placer.schedule.blocks import BlockTemplate
from placer.schedule.plan import SchedulePlan, ScheduledBlock, check_plan_inputs
from placer.schedule.repetend import Repetend, first_fit_repetend

DEFAULT_TIME_LIMIT = 30.0
"""Seconds a search may take by default, over all its solver calls."""
FREE_REPETITIONS = 1
"""Steady repetitions at each end that completion may rearrange together with the warm-up and cool-down:
the seam between warm-up and repetend is where a rigid pattern wastes most."""


@dataclass
class _Budget:
    deadline: float
    incomplete: bool = False
    """Set when a check came back unknown or time ran out: what was found is not proven best."""

    def milliseconds_left(self) -> int:
        return max(int((self.deadline - clock.monotonic()) * 1000), 0)

    @property
    def expired(self) -> bool:
        return self.milliseconds_left() <= 0

    def check(self, solver: z3.Solver) -> z3.CheckSatResult:
        """One solver call with at most half of what is left (so that one hard bound does not use up the
        search), `unknown` when it is gone."""
        left = self.milliseconds_left()
        if left <= 0:
            self.incomplete = True
            return z3.unknown
        solver.set("timeout", left if left < 400 else left // 2)
        result = solver.check()
        if result == z3.unknown:
            self.incomplete = True
        return result


def tessel(template: BlockTemplate, micro_batches: int, memory_limit: int | None = None, *,
           time_limit: float = DEFAULT_TIME_LIMIT) -> SchedulePlan:
    """The full search: the z3 repetend with the fewest bubbles (then the smallest lags), completed; and the
    first-fit repetend it started from, completed too, in case its warm-up is shorter. The shorter wins."""
    check_plan_inputs(template, micro_batches, memory_limit)
    began = clock.monotonic()
    repetend_budget = _Budget(began + time_limit / 3)
    searched = search_repetend(template, memory_limit, repetend_budget)
    first_fit = first_fit_repetend(template, memory_limit)
    # Completing the searched repetend gets half of what is left, the first-fit one the rest.
    budgets = [repetend_budget, _Budget(clock.monotonic() + (began + time_limit - clock.monotonic()) / 2)]
    plan = _complete(template, searched, micro_batches, memory_limit, budgets[-1], "tessel", began)
    if first_fit != searched:
        budgets.append(_Budget(began + time_limit))
        other = _complete(template, first_fit, micro_batches, memory_limit, budgets[-1], "tessel", began)
        if other.makespan < plan.makespan:
            plan = other
    status = "best-so-far" if any(budget.incomplete for budget in budgets) else "finished"
    return replace(plan, search_status=status, search_seconds=clock.monotonic() - began)


def tessel_fast(template: BlockTemplate, micro_batches: int, memory_limit: int | None = None, *,
                time_limit: float = DEFAULT_TIME_LIMIT) -> SchedulePlan:
    """Tessel-fast: the first-fit repetend (no search), then the same completion and tightening."""
    check_plan_inputs(template, micro_batches, memory_limit)
    began = clock.monotonic()
    repetend = first_fit_repetend(template, memory_limit)
    return _complete(template, repetend, micro_batches, memory_limit, _Budget(began + time_limit), "tessel-fast", began)


# -- the repetend ------------------------------------------------------------------------------------


def search_repetend(template: BlockTemplate, memory_limit: int | None, budget: _Budget) -> Repetend:
    """The shortest window (fewest bubbles) whose steady state fits the memory limit, then the smallest
    largest lag in it (the shortest warm-up). Starts from the first-fit repetend, which always exists."""
    best = first_fit_repetend(template, memory_limit)
    blocks = template.blocks
    n = len(blocks)
    starts = [z3.Int(f"s_{b.name}") for b in blocks]
    lags = [z3.Int(f"lag_{b.name}") for b in blocks]
    solver = z3.Solver()
    solver.set("random_seed", 0)
    for x in range(n):
        solver.add(starts[x] >= 0, lags[x] >= 0, lags[x] <= n)
    solver.add(z3.Or([lag == 0 for lag in lags]))
    for device in template.devices:
        members = [x for x, b in enumerate(blocks) if device in b.devices]
        for i, x in enumerate(members):
            for y in members[i + 1:]:
                solver.add(z3.Or(starts[x] + blocks[x].span <= starts[y], starts[y] + blocks[y].span <= starts[x]))
        if memory_limit is not None:
            base = -z3.Sum([blocks[x].memory * lags[x] for x in members]) if members else z3.IntVal(0)
            solver.add(base <= memory_limit)
            for y in members:
                if blocks[y].memory > 0:
                    live = base + z3.Sum([z3.If(starts[x] <= starts[y], blocks[x].memory, 0) for x in members])
                    solver.add(live <= memory_limit)

    def window(period: int) -> list:
        rules = [starts[x] + blocks[x].span <= period for x in range(n)]
        for y, block in enumerate(blocks):
            for name in block.after:
                x = template.index[name]
                rules.append((lags[y] - lags[x]) * period + starts[y] >= starts[x] + blocks[x].span)
        return rules

    def read(model, period: int) -> Repetend:
        return Repetend(period, tuple(model.eval(s).as_long() for s in starts), tuple(model.eval(d).as_long() for d in lags))

    found = _smallest_bound(solver, max(template.device_load().values()), best.period - 1, window, budget)
    if found is not None:
        best = read(found[1], found[0])
    solver.add(window(best.period))
    found = _smallest_bound(solver, 0, max(best.lags) - 1, lambda cap: [lag <= cap for lag in lags], budget)
    if found is not None:
        best = read(found[1], best.period)
    return best


def _smallest_bound(solver: z3.Solver, low: int, high: int, rules, budget: _Budget) -> tuple[int, z3.ModelRef] | None:
    """Binary search for the smallest bound in [low, high] under which `rules(bound)` is satisfiable, each
    check between push and pop; returns it and its model, or None if none was found. A bound the solver
    cannot decide in its share of time is given up (searching above it), and the result marked unproven."""
    found = None
    while low <= high and not budget.expired:
        bound = (low + high) // 2
        solver.push()
        solver.add(rules(bound))
        result = budget.check(solver)
        if result == z3.sat:
            found = (bound, solver.model())
            high = bound - 1
        else:
            low = bound + 1
        solver.pop()
    if low <= high:
        budget.incomplete = True
    return found


# -- completion ----------------------------------------------------------------------------------------


def _complete(template: BlockTemplate, repetend: Repetend, micro_batches: int, memory_limit: int | None,
              budget: _Budget, method: str, began: float) -> SchedulePlan:
    """Unroll the repetend, then search the warm-up and cool-down for the fewest steps with the steady
    repetitions kept as one rigid piece; finally tighten (start every block as early as its order allows)."""
    unrolled = repetend.unroll(micro_batches)
    best = tighten(template, unrolled)
    steady = range(max(repetend.lags) + FREE_REPETITIONS, micro_batches - FREE_REPETITIONS)
    solved = _search_completion(template, repetend, micro_batches, memory_limit, steady, _makespan(template, best), budget)
    if solved is not None:
        tightened = tighten(template, solved)
        if _makespan(template, tightened) < _makespan(template, best):
            best = tightened
    first_steady = None
    if len(steady):
        k = steady.start
        first_steady = min(best[(x, k - repetend.lags[x])] - repetend.starts[x] for x in range(len(template.blocks)))
    blocks = tuple(ScheduledBlock(template.blocks[x], m, start) for (x, m), start in best.items())
    return SchedulePlan(
        template, micro_batches, blocks, method, memory_limit, "best-so-far" if budget.incomplete else "finished",
        clock.monotonic() - began,
        None if first_steady is None else (first_steady, first_steady + repetend.period),
        {"repetend_period": repetend.period, "repetend_lags": list(repetend.lags),
         "repetend_bubbles": repetend.bubbles(template)},
    )


def _search_completion(template: BlockTemplate, repetend: Repetend, micro_batches: int, memory_limit: int | None,
                       steady: range, upper: int, budget: _Budget) -> dict[tuple[int, int], int] | None:
    if budget.expired:  # building the model is not free either: do not start without time
        budget.incomplete = True
        return None
    blocks = template.blocks
    lags = repetend.lags
    origin = z3.Int("steady_origin")
    start: dict[tuple[int, int], z3.ArithRef] = {}
    rigid: dict[tuple[int, int], int] = {}  # window offset of blocks in the steady repetitions
    for x in range(len(blocks)):
        for m in range(micro_batches):
            k = m + lags[x]
            if k in steady:
                rigid[(x, m)] = (k - steady.start) * repetend.period + repetend.starts[x]
                start[(x, m)] = origin + rigid[(x, m)]
            else:
                start[(x, m)] = z3.Int(f"t_{blocks[x].name}_{m}")
    solver = z3.Solver()
    solver.set("random_seed", 0)
    solver.add(origin >= 0)
    for (x, m), t in start.items():
        solver.add(t >= 0)
        for name in blocks[x].after:
            a = template.index[name]
            if not ((x, m) in rigid and (a, m) in rigid):
                solver.add(t >= start[(a, m)] + blocks[a].span)
        if m and not ((x, m) in rigid and (x, m - 1) in rigid):
            solver.add(t >= start[(x, m - 1)] + blocks[x].span)
    for device in template.devices:
        members = [key for key in start if device in blocks[key[0]].devices]
        for i, p in enumerate(members):
            if budget.expired:  # the pairs grow with the square of the blocks: thousands take minutes to state
                budget.incomplete = True
                return None
            for q in members[i + 1:]:
                if p in rigid and q in rigid or p[0] == q[0]:
                    continue  # the repetend keeps them apart; a sub-graph's order does too
                solver.add(z3.Or(start[p] + blocks[p[0]].span <= start[q], start[q] + blocks[q[0]].span <= start[p]))
        if memory_limit is not None:
            for q in members:
                if blocks[q[0]].memory <= 0:
                    continue
                if budget.expired:
                    budget.incomplete = True
                    return None
                terms = []
                for p in members:
                    if p in rigid and q in rigid:
                        terms.append(blocks[p[0]].memory if rigid[p] <= rigid[q] else 0)
                    elif p == q:
                        terms.append(blocks[p[0]].memory)
                    else:
                        terms.append(z3.If(start[p] <= start[q], blocks[p[0]].memory, 0))
                solver.add(z3.Sum(terms) <= memory_limit)
    ends = [t + blocks[x].span for (x, _), t in start.items()]
    lower = max(max(template.device_load().values()) * micro_batches, template.critical_path())
    found = _smallest_bound(solver, lower, upper - 1, lambda bound: [end <= bound for end in ends], budget)
    if found is None:
        return None
    return {key: found[1].eval(t, model_completion=True).as_long() for key, t in start.items()}


def tighten(template: BlockTemplate, starts: dict[tuple[int, int], int]) -> dict[tuple[int, int], int]:
    """Start every block as early as its dependencies, its sub-graph's previous micro-batch and its devices
    allow, keeping each device's order of blocks (and so its memory peaks)."""
    blocks = template.blocks
    moved: dict[tuple[int, int], int] = {}
    device_free = {device: 0 for device in template.devices}
    for (x, m), _ in sorted(starts.items(), key=lambda item: (item[1], item[0])):
        block = blocks[x]
        earliest = max([moved[(template.index[name], m)] + blocks[template.index[name]].span for name in block.after]
                       + [device_free[d] for d in block.devices]
                       + ([moved[(x, m - 1)] + block.span] if m else []))
        moved[(x, m)] = earliest
        for d in block.devices:
            device_free[d] = earliest + block.span
    return moved


def _makespan(template: BlockTemplate, starts: dict[tuple[int, int], int]) -> int:
    return max(t + template.blocks[x].span for (x, _), t in starts.items()) - min(starts.values())
