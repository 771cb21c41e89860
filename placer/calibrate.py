"""Fit what the simulator cannot profile op by op: what a transfer between workers costs, and fixed per-step
overheads, on a real target.

`calibrate(measurer)` runs small probe graphs between the first two devices of a target, each probe in two
placements timed side by side in interleaved rounds (`placer.cost.compare`), so that the machine's drift
cancels in their difference. The probe families separate where a transfer's time goes:
- free: k tensors sent from worker 0 to an idle worker 1, against the same graph on worker 0 alone: the
  whole cost of a step that spans two workers and moves k tensors;
- sender-busy: a chain of matmuls on worker 0 starts when its tensors exist; those tensors are read on
  worker 1 or (the reference) on worker 0. The chain is longer than the transfers, so the difference is
  the time serializing them takes from the sender's core;
- receiver-busy: the same with the chain on worker 1: the receiving core's time;
- ping-pong: one scalar bounced h times between the workers: each hop's in-flight latency;
- both-ways: tensors sent in both directions at once. Not fitted: a check of the model on a case it was
  not fitted to (each core then sends and receives);
- remote: one small graph wholly on worker 1 against wholly on worker 0: what a step costs beyond its ops
  when the worker hosting the session's master runs none of it (the master reaches its workers by RPC).

The fit (Theil-Sen lines: the median of pairwise slopes, so one disturbed probe moves it little) gives the
step overhead (the median of the light probes' reference steps), the overhead of spanning a second worker,
that of a step away from the master's worker (where the remote probes were run), the sender's and the
receiver's core time per transfer and per byte, the in-flight latency and the rate the free transfers' bytes
move at (the wire's bandwidth where it is the slowest part, about the busier core's where that is); each with a
bootstrap interval over rounds, and every probe's residual.

Where the workers are local processes (`local:N`), the cores' costs come from the CPU time each worker used
per step in the free probes (`Measurement.worker_cpu`), the sender's and the receiver's separately: the
kernel counts that time whatever the VM's steal or a neighbour's load does to the step's wall time. The busy
families then check, on wall time, that this core time delays a busy core's work as the model has it. On
2026-11-25 this VM's step times swung 20 % between measurements, so a busy chain of 8-40 ms buried the
0.1-3 ms its transfers add (one 4 MB receive: -8.7 to +4.9 ms over six rounds), while the receiving
worker's CPU time for it was 3.6-4.4 ms over three. Elsewhere (a remote cluster) the busy families' wall
time is all there is, and the core costs are fitted from it. `Calibration.apply(devices, config)` turns it
into links and a `SimulatorConfig` for those devices (see `placer.simulate.engine` for how they are used).
"""

from __future__ import annotations

import math
import statistics
import warnings
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from placer.calibration import FAMILIES, PARAMETERS, Calibration, request_delay
from placer.host import this_machine
from placer.devices import DeviceSet
from placer.errors import ProfileError
from placer.graph import OpGraph
from placer.placement import Placement

LIGHT_PROBE_BYTES = 512 * 1024
"""Probes without a busy chain whose tensors total at most this are light: their reference step is the step
overhead alone (filling 512 KB takes well under a tenth of a millisecond)."""
BUSY_CHAIN_BASE = 8
BUSY_CHAIN_PER_MB = 6.0
BUSY_CHAIN_PER_TENSOR = 0.5
"""A busy probe's chain has BASE + PER_MB * megabytes sent + PER_TENSOR * tensors sent matmuls of 256 x 256
(0.25-0.5 ms each on one core here): 1.5-3 ms per MB and 0.13-0.25 ms per tensor, against the transfers'
core time of up to 1 ms per MB and 0.1-0.2 ms per tensor measured here, so the chain stays the step's critical path and absorbs that time, and no
longer. A fixed chain long enough for the largest probe (80 matmuls, 40 ms on 2026-11-25) buried the small
probes' 0.1-3 ms under its own noise: block-to-block swings of 20 % on this VM, 8 ms against a 1 ms signal."""
SHORT_CHAIN = 1.2
"""A busy probe whose reference step (about its chain) is shorter than this times its transfers' fitted time
on the busy core may have let the transfers outlast the chain."""


@dataclass(frozen=True)
class Probe:
    """One probe graph: `tensors` float32 tensors of `elements` each (for ping-pong, `tensors` hops)."""

    family: str
    elements: int
    tensors: int

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ProfileError(f"unknown probe family {self.family!r}; known: {', '.join(FAMILIES)}")

    @property
    def name(self) -> str:
        return f"{self.family} {self.elements}x{self.tensors}"

    @property
    def nbytes(self) -> float:
        return 4.0 * self.elements


def default_probes(sizes: Sequence[int] = (1_000, 100_000, 1_000_000, 4_000_000), counts: Sequence[int] = (4, 16, 32),
                   hops: Sequence[int] = (2, 8, 16)) -> list[Probe]:
    """Sizes of one tensor and counts of 1,000-element tensors for the free and busy families, ping-pong
    hops, two both-ways checks, and three remote probes (their median is the remote overhead: one probe's
    difference of two ~1.3 ms steps ranged 0.8-2.7 ms over the rounds of three calibrations on 2026-11-25)."""
    probes = []
    for family in ("free", "sender-busy", "receiver-busy"):
        probes += [Probe(family, n, 1) for n in sizes] + [Probe(family, 1_000, k) for k in counts]
    probes += [Probe("ping-pong", 1, h) for h in hops]
    probes += [Probe("both-ways", 1_000_000, 1), Probe("both-ways", 1_000, 16)]
    probes += [Probe("remote", 1_000, 1), Probe("remote", 1_000, 16), Probe("remote", 100_000, 1)]
    return probes


@dataclass(frozen=True)
class _ProbeTiming:
    seconds: float
    ok: bool
    worker_cpu: tuple[float, ...] = ()


def calibrate(
    measurer,
    *,
    probes: Sequence[Probe] | None = None,
    rounds: int = 5,
    progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
    seed: int = 0,
    repeat_poor_fit: bool = True,
) -> Calibration:
    """Fit overheads and transfer costs between devices 0 and 1 of `measurer` from probe graphs.

    Each probe runs in its reference placement and in its probe placement (the same graph with the
    transfers under test), side by side in `rounds` interleaved rounds. With `repeat_poor_fit`, a fit whose
    misses are noise (`Calibration.poor_fit`) times every probe for `rounds` more rounds and fits them all
    (`fit_repeating_a_poor_fit`) before it is reported."""
    from placer.cost import compare

    if len(measurer.devices) < 2:
        raise ProfileError("calibrating links needs a target with at least two devices (e.g. local:2)")
    if rounds < 2:
        raise ProfileError(f"calibrating needs at least 2 rounds for its intervals, got {rounds}")
    devices = measurer.devices
    probes = list(probes or default_probes())
    placements = {}
    for probe in probes:
        graph, reference, placed = probe_placements(probe, devices)
        placements[(probe.name, "reference")] = (graph, reference)
        placements[(probe.name, "probe")] = (graph, placed)

    # Every probe placement is traced on its first warm-up step, as when this fit was designed. With the
    # placement check reused instead (the default), a test's fit of the receiving core's cost
    # per byte fell to 0 after other graphs had run on the same workers; why is not understood yet.
    config = replace(measurer.config, trace_every_placement=True)

    def evaluate(item) -> _ProbeTiming:
        graph, placement = item
        result = measurer.measure(graph, placement, config)
        if not result.ok:
            raise ProfileError(f"a calibration probe ({graph.name}) failed ({result.failure.kind}): "
                               f"{result.failure.message}")
        return _ProbeTiming(result.median, True, tuple(result.worker_cpu[:2]))

    def time_rounds() -> dict:
        compared = compare(evaluate, placements, rounds, progress=progress)
        timings = {}
        for probe in probes:
            sides = {side: compared[(probe.name, side)].timings for side in ("reference", "probe")}
            timings[probe.name] = {side: [t.seconds for t in runs] for side, runs in sides.items()}
            if all(len(t.worker_cpu) == 2 for runs in sides.values() for t in runs):
                timings[probe.name].update({f"{side}_cpu": [list(t.worker_cpu) for t in runs]
                                            for side, runs in sides.items()})
        return timings

    def fit(timings) -> Calibration:
        return fit_calibration(probes, timings, target=str(getattr(measurer, "target", "")),
                               devices=tuple(devices.names), seed=seed, machine=this_machine())

    fitted = fit_repeating_a_poor_fit(time_rounds, fit) if repeat_poor_fit else fit(time_rounds())
    delay, hops = measure_request_delay(measurer, max(rounds, REQUEST_PROBE_ROUNDS))
    intervals = {**fitted.intervals, "request_delay": request_delay_interval(hops, seed=seed)}
    return replace(fitted, request_delay=delay, request_hops=hops, intervals=intervals)


def fit_repeating_a_poor_fit(time_rounds: Callable[[], dict], fit: Callable[[dict], Calibration]) -> Calibration:
    """`fit` of the probe timings `time_rounds` gives; where that fit misses probes by noise (its rounds disagree:
    `Calibration.poor_fit`), the probes are timed again and fitted with every round of both (`pooled_timings`):
    a probe a busy moment disturbed weighs half as much, and a miss that stays is reported. The first fit's
    misses are kept (`Calibration.first_misses`)."""
    timings = time_rounds()
    fitted = fit(timings)
    if not fitted.poor_fit:
        return fitted
    first_misses = {name: r for name, r in fitted.misses.items() if name not in fitted.model_limits}
    return replace(fit(pooled_timings(timings, time_rounds())), first_misses=first_misses)


def pooled_timings(first: Mapping[str, Mapping[str, list]], second: Mapping[str, Mapping[str, list]]) -> dict:
    """Two sets of probe timings (probe -> side -> one entry per round) as one, the second's rounds after the
    first's; a side one of them lacks (the workers' CPU time) is left out."""
    return {name: {side: [*first[name][side], *second[name][side]] for side in first[name] if side in second[name]}
            for name in first}


# -- the request probe ---------------------------------------------------------------------------------

REQUEST_CHAIN_SECONDS = 0.010
"""How long the request probe's sender computes after the send: longer than the delays seen on one-core
workers (0.3-8 ms, `experiments/probes/hop_delay.py`), so that the hop shows the delay, not the chain's end."""

REQUEST_PROBE_ROUNDS = 20
"""Rounds of the request probe, at least (`--rounds` when more): a hop beside a busy sender lands anywhere from
at once to about 6 ms late, round by round, so a few rounds put the delay where chance has it (0.2 s a round on
`local:2`; `experiments/probes/request_delay_repeats.py` compares 5 and 20)."""

REQUEST_TRACED_STEPS = 5
"""Traced steps of the request probe per measurement, after its untraced timed ones, read in a row: each but the
first `REQUEST_SKIPPED_STEPS` gives a hop. A late hop (busy sender) lands 1.5-5.5 ms after the send, spread
evenly over one 4 ms scheduler tick (this kernel's HZ is 250): its mean held at 3.5-3.7 ms in six calibrations,
while the share of hops that were late moved from 79 % to 33 % within ten minutes on a quiet machine
(`experiments/probes/calibration_stability.py`, 2026-11-29, results/calibration_stability_pooled*.json). The
late ones wait for the worker's compute thread to run out its kernel scheduler slice: at 20 ms compute slices,
12 % of hops were late, not 62 %, and the steps did not change, but the twin fitted so predicted splits 15-28 %
fast (`experiments/probes/compute_slices.py`, docs/results/calibration.md), so the workers keep the kernel's. Reading
four hops a round takes out the chance of a few hops: four repeats of 20 rounds put the delay within 34 % of their
median from one traced step a round (the third of three), 12 % from the four after the first
(results/request_delay_repeats_hops.json); the share's drift stays. Replayed on the four decisions runs of
2026-11-26, 3.0 ms in place of their 1.7-2.8 ms moved no model's median error by more than 1.6 points."""

REQUEST_SKIPPED_STEPS = 1
"""Traced steps of each measurement whose hop is not read: the first traced step after the untraced ones was
late (> 1 ms) in 95-100 % of rounds, those after it in 50-80 % (results/request_delay_repeats_hops.json)."""

REQUEST_SENDERS = (0, 1)
"""The devices the request probe's tensor leaves from, in turn: a split sends both ways, and on `local:2` how
often a busy worker serves a request late depends on what else shares its core. From the first worker, whose
core the session's client shares, 64-84 % of the busy hops came late, a delay of 1.7-2.6 ms that moves from
minute to minute; from the second, 99-100 %, 3.2-4.1 ms; ten repeats of each in 4 minutes, interleaved
(`experiments/probes/request_delay_repeats.py --senders 0 1`, results/request_delay_senders.json). The simulator's
one delay is the average over both."""


def request_probe_graph(size: int, links: int, on_receiver: bool = False) -> OpGraph:
    """Worker 0 makes `made` (64 floats) and then runs a chain of `links` SxS matmuls that depend on it; worker 1
    (ops under "far/") waits for `made`. The request for `made` reaches worker 0 as its chain starts. With
    `on_receiver`, the chain runs on worker 1 instead, from the step's start and independent of `made`, and
    worker 0 idles once `made` is made."""
    import tensorflow as tf

    from placer.graph.build import graph_from_function

    def chain(h):
        for _ in range(links):
            h = tf.tanh(tf.matmul(h, h) * 0.01)
        return h

    def build():
        made = tf.reduce_sum(tf.random.uniform([64, 64], seed=1), axis=0, name="made")
        if not on_receiver:
            h = chain(tf.random.uniform([size, size], seed=2) + tf.reduce_mean(made))  # waits for `made`
        with tf.name_scope("far"):
            consumer = tf.add(made, 1.0, name="consumer")
            if on_receiver:
                h = chain(tf.random.uniform([size, size], seed=2))
        total = tf.add(tf.reduce_sum(consumer), h[0, 0], name="total")
        return tf.group(total, name="train_op"), total

    where = "receiver" if on_receiver else "sender"
    return graph_from_function(build, name=f"request-probe-{size}x{links}-{where}")


def request_probe_placement(graph: OpGraph, devices, sender: int = 0) -> Placement:
    """Ops under "far/" on the device other than `sender` (0 or 1), the rest on `sender`."""
    if sender not in (0, 1):
        raise ValueError(f"the request probe's sender is device 0 or 1, not {sender}")
    return Placement.from_op_devices(graph, devices, {
        op.name: devices[1 - sender if op.name.startswith("far/") else sender].name for op in graph.ops})


def traced_hop(trace: str) -> tuple[float, float, float]:
    """(hop, arrival, chain) seconds of a traced request probe step: from `made`'s end on worker 0 to its
    consumer's start on worker 1, and to the tensor's arrival there (its receive's start); the span of the
    chain's ops."""
    from placer.timeline import read_chrome_trace

    timeline = read_chrome_trace(trace)
    spans = {span.node: span for span in timeline.spans if span.node}
    if "made" not in spans or "far/consumer" not in spans:
        raise ProfileError("the request probe's traced step lacks its sender or its consumer: was it traced?")
    made = spans["made"].end
    chain = [span for span in timeline.spans
             if span.kind == "op" and span.node.removeprefix("far/").startswith(("MatMul", "Tanh", "mul"))]
    chain_span = (max(s.end for s in chain) - min(s.start for s in chain)) if chain else 0.0
    received = [span.start for span in timeline.spans if span.kind == "transfer"
                and span.device == spans["far/consumer"].device and span.start >= made - 1e-4]
    arrival = min(received, default=spans["far/consumer"].start) - made
    return spans["far/consumer"].start - made, arrival, chain_span


def measure_request_delay(measurer, rounds: int, size: int = 256, traced_steps: int = REQUEST_TRACED_STEPS,
                          skipped_steps: int = REQUEST_SKIPPED_STEPS,
                          senders: Sequence[int] = REQUEST_SENDERS) -> tuple[float, dict[str, tuple[float, ...]]]:
    """(delay, hops): how much later a tensor reaches the other device when its sender goes on computing after
    making it than when it idles: the traced hops beside a chain of about `REQUEST_CHAIN_SECONDS` and beside an
    idle sender, from each of `senders` in turn, in `rounds` interleaved rounds, pooled and averaged as
    `request_delay` does (`SimulatorConfig.request_delay`). `hops["sender"]` names the sender of each pair of
    idle and busy hops. Each measurement traces `traced_steps` steps in a row and reads the hops of all but the
    first `skipped_steps` (the defaults: `REQUEST_TRACED_STEPS`, `REQUEST_SKIPPED_STEPS`)."""
    if not 0 <= skipped_steps < traced_steps:
        raise ValueError(f"read at least one of the {traced_steps} traced steps: skip fewer than them, not {skipped_steps}")
    if not senders or set(senders) - {0, 1}:
        raise ValueError(f"the request probe's senders are devices 0 and 1, one or both, not {tuple(senders)}")
    config = replace(measurer.config, profile_steps=traced_steps, trace_every_placement=True, keep_every_trace=True)

    def hops_of(graph, sender: int) -> list[tuple[float, float, float]]:
        result = measurer.measure(graph, request_probe_placement(graph, measurer.devices, sender), config)
        if not result.ok or len(result.chrome_traces) < traced_steps:
            raise ProfileError(f"the request probe ({graph.name}) failed: "
                               f"{result.failure.message if result.failure else 'fewer traced steps than asked'}")
        return [traced_hop(trace) for trace in result.chrome_traces[skipped_steps:traced_steps]]

    link = max(statistics.median(chain for _, _, chain in hops_of(request_probe_graph(size, 4), senders[0])) / 4, 1e-5)
    idle_graph = request_probe_graph(size, 0)
    busy_graph = request_probe_graph(size, max(1, round(REQUEST_CHAIN_SECONDS / link)))
    hops: dict[str, list[float]] = {"idle": [], "busy": [], "sender": []}
    for _ in range(rounds):
        for sender in senders:
            idle = [hop for hop, _, _ in hops_of(idle_graph, sender)]
            hops["idle"] += idle
            hops["busy"] += [hop for hop, _, _ in hops_of(busy_graph, sender)]
            hops["sender"] += [sender] * len(idle)
    return request_delay(hops), {name: tuple(values) for name, values in hops.items()}


def request_delay_interval(hops: Mapping[str, Sequence[float]], *, seed: int = 0,
                           resamples: int = 200) -> tuple[float, float]:
    """90 % bootstrap interval of `request_delay` (hops resampled, each idle hop with the busy hop of its place).
    A busy hop lands anywhere from at once to milliseconds late from round to round: the interval says how far
    another calibration may put the delay."""
    idle, busy = np.asarray(hops["idle"], dtype=float), np.asarray(hops["busy"], dtype=float)
    if len(idle) != len(busy) or not len(idle):
        raise ValueError(f"give as many idle hops as busy ones, not {len(idle)} and {len(busy)}")
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples):
        rounds = rng.choice(len(idle), size=len(idle))
        draws.append(request_delay({"idle": idle[rounds], "busy": busy[rounds]}))
    return _interval(draws)


def modeled_extra(probe: Probe, p: Mapping[str, float], reference_seconds: float = 0.0) -> float:
    """The probe placement's extra seconds over its reference, as the simulator's transfer model has it
    (`placer.simulate.engine`): sends and receives on the cores, latency in flight, the wire when slower.
    reference_seconds: the busy probes' reference step (about their chain): a wire slower than the chain makes the
    step wait for it beyond the chain (a shaped link); 0 leaves the wire out of the busy probes."""
    def one(nbytes: float) -> float:
        wire = nbytes / p["bandwidth"] if p["bandwidth"] > 0 else 0.0
        return max(p["send_cpu"] + p["send_cpu_per_byte"] * nbytes, p["recv_cpu"] + p["recv_cpu_per_byte"] * nbytes, wire)

    b, k = probe.nbytes, probe.tensors
    if probe.family == "remote":  # the same ops and no transfer, on the worker without the master
        return p.get("remote_overhead", 0.0)
    if probe.family == "free":  # k transfers pipelined behind one latency, on a second worker
        return p["spanning_overhead"] + p["latency"] + k * one(b)
    if probe.family in ("sender-busy", "receiver-busy"):
        side = "send" if probe.family == "sender-busy" else "recv"
        # k transfers' core time in the chain's way; the reference moves one scalar
        cores = k * (p[f"{side}_cpu"] + p[f"{side}_cpu_per_byte"] * b) - (p[f"{side}_cpu"] + p[f"{side}_cpu_per_byte"] * 4.0)
        wire = k * b / p["bandwidth"] if p["bandwidth"] > 0 and math.isfinite(p["bandwidth"]) and reference_seconds else 0.0
        # the transfers start with the chain: a wire slower than it is waited for after it
        waited = p["spanning_overhead"] + p["latency"] + wire - max(reference_seconds - p["step_overhead"], 0.0)
        return max(cores, waited) if wire else cores
    if probe.family == "ping-pong":  # every hop waits for the one before
        return p["spanning_overhead"] + k * (p["latency"] + one(4.0))
    # both-ways: each core sends k tensors and receives k, each direction on a wire of its own
    wire = b / p["bandwidth"] if p["bandwidth"] > 0 else 0.0
    return (p["spanning_overhead"] + p["latency"]
            + k * max(p["send_cpu"] + p["send_cpu_per_byte"] * b + p["recv_cpu"] + p["recv_cpu_per_byte"] * b, wire))


def fit_calibration(probes: Sequence[Probe], timings: Mapping[str, Mapping[str, Sequence[float]]], *,
                    target: str = "", devices: tuple[str, ...] = (), seed: int = 0, resamples: int = 200,
                    machine: Mapping[str, object] | None = None) -> Calibration:
    """The calibration from probe timings: `timings` maps each probe's name to each round's "reference" and
    "probe" seconds and, where the workers' CPU time was measured, each round's "reference_cpu" and
    "probe_cpu" seconds per step of workers 0 and 1. With those for every free probe, the cores' costs are
    fitted from them. A pure function, so the fit can be checked on timings whose answer is known."""
    probes = list(probes)
    names = [probe.name for probe in probes]
    try:
        reference = np.array([timings[n]["reference"] for n in names], dtype=float)  # [probe, round]
        placed = np.array([timings[n]["probe"] for n in names], dtype=float)
    except KeyError as error:
        raise ProfileError(f"no reference and probe timings for probe {error}") from None
    if reference.ndim != 2 or reference.shape != placed.shape or reference.shape[1] < 1:
        raise ProfileError("every probe needs the same number of reference and probe timings")

    def family(name: str, *, sizes: bool) -> list[int]:
        return [i for i, p in enumerate(probes) if p.family == name and (p.tensors == 1) == sizes]

    nbytes = np.array([p.nbytes for p in probes])
    tensors = np.array([float(p.tensors) for p in probes])
    frees = [i for i, q in enumerate(probes) if q.family == "free"]
    cpu = None  # [probe, round, worker] CPU seconds per step, probe minus reference, where measured
    if all({"reference_cpu", "probe_cpu"} <= set(timings[names[i]]) for i in frees):
        cpu = np.zeros(reference.shape + (2,))
        for i in frees:
            sides = [np.array(timings[names[i]][f"{side}_cpu"], dtype=float) for side in ("reference", "probe")]
            if sides[0].shape != (reference.shape[1], 2) or sides[1].shape != sides[0].shape:
                raise ProfileError(f"probe {names[i]} needs two workers' CPU seconds in each of its {reference.shape[1]} rounds")
            cpu[i] = sides[1] - sides[0]

    busy = ("sender-busy", "receiver-busy") if cpu is None else ()
    for what, families in {"sizes": ("free",) + busy, "counts": ("free",) if cpu is not None else busy}.items():
        for name in families:
            if len(family(name, sizes=what == "sizes")) < 2:
                raise ProfileError(f"calibrating needs at least two {name} probes of different {what[:-1]}s")
    pingpong = [i for i, p in enumerate(probes) if p.family == "ping-pong"]
    light = [i for i, p in enumerate(probes)
             if "busy" not in p.family and p.nbytes * p.tensors <= LIGHT_PROBE_BYTES] or list(range(len(probes)))
    remotes = [i for i, p in enumerate(probes) if p.family == "remote"]
    if len(pingpong) < 2:
        raise ProfileError("calibrating needs at least two ping-pong probes of different hop counts")

    def core_costs(extra: np.ndarray, name: str) -> tuple[float, float]:
        """Fixed and per-byte core seconds from a family: sizes give the slope per byte, counts (with the one
        tensor of the counts' size) the slope per tensor."""
        sizes, counts = family(name, sizes=True), family(name, sizes=False)
        counts += [i for i in sizes if probes[i].elements == probes[counts[0]].elements]
        per_byte = max(_theil_sen(nbytes[sizes], extra[sizes])[0], 0.0)
        per_tensor = _theil_sen(tensors[counts], extra[counts])[0]
        return max(per_tensor - per_byte * probes[counts[0]].nbytes, 0.0), per_byte

    def fit(rounds: np.ndarray) -> dict[str, float]:
        extra = np.median(placed[:, rounds] - reference[:, rounds], axis=1)  # paired within a round: drift cancels
        # The median over the light probes' reference steps, each of which is the overhead alone: their
        # minimum, used before, picked whichever probe had a lucky run (0.94-1.24 ms over four calibrations
        # on 2026-11-25, where the median moved 1.15-1.29 ms).
        p = {"step_overhead": float(np.median(np.median(reference[light][:, rounds], axis=1)))}
        if cpu is not None:  # each side's own CPU time in the free probes
            worker_extra = np.median(cpu[:, rounds], axis=1)
            p["send_cpu"], p["send_cpu_per_byte"] = core_costs(worker_extra[:, 0], "free")
            p["recv_cpu"], p["recv_cpu_per_byte"] = core_costs(worker_extra[:, 1], "free")
        else:
            p["send_cpu"], p["send_cpu_per_byte"] = core_costs(extra, "sender-busy")
            p["recv_cpu"], p["recv_cpu_per_byte"] = core_costs(extra, "receiver-busy")
        free = family("free", sizes=True)
        free_per_byte = _theil_sen(nbytes[free], extra[free])[0]
        # The rate the free transfers' bytes move at, whatever binds it: a transfer costs the slowest of its two
        # cores and the wire (`modeled_extra`), so a wire as fast as the busier core or faster predicts about what
        # none would. Taken only where it grew 5 % faster than the busier core, it flipped between about 2 GB/s and
        # none from one calibration to the next on the testbed (4 of 13 triples of calibrations, 2026-11-26 to 30).
        p["bandwidth"] = 1.0 / free_per_byte if free_per_byte > 0 else math.inf
        hop = _theil_sen(tensors[pingpong], extra[pingpong])[0]
        p["latency"] = 0.0
        p["latency"] = max(hop - modeled_extra(Probe("ping-pong", 1, 1), {**p, "spanning_overhead": 0.0}), 0.0)
        p["spanning_overhead"] = max(float(np.median(
            [extra[i] - modeled_extra(probes[i], {**p, "spanning_overhead": 0.0}) for i in frees])), 0.0)
        p["remote_overhead"] = max(float(np.median(extra[remotes])), 0.0) if remotes else 0.0
        return p

    all_rounds = np.arange(reference.shape[1])
    best = fit(all_rounds)
    rng = np.random.default_rng(seed)
    draws = [fit(rng.choice(all_rounds, size=len(all_rounds))) for _ in range(resamples)]
    fitted = PARAMETERS + (("remote_overhead",) if remotes else ())
    intervals = {name: _interval([d[name] for d in draws]) for name in fitted}
    extra = np.median(placed - reference, axis=1)
    step = np.median(placed, axis=1)
    _warn_short_chains(probes, np.median(reference, axis=1), best)
    references = np.median(reference, axis=1)
    modeled = [modeled_extra(probe, best, references[i]) for i, probe in enumerate(probes)]
    residuals = {probe.name: float((extra[i] - modeled[i]) / step[i]) for i, probe in enumerate(probes)}
    residual_rounds = {probe.name: tuple(float((placed[i, r] - reference[i, r] - modeled[i]) / placed[i, r])
                                         for r in all_rounds) for i, probe in enumerate(probes)}
    recorded = ("reference", "probe", "reference_cpu", "probe_cpu")
    return Calibration(
        **{name: float(best[name]) for name in PARAMETERS},
        samples={n: {side: [np.asarray(x, dtype=float).tolist() for x in timings[n][side]]
                     for side in recorded if side in timings[n]} for n in names},
        target=target, devices=tuple(devices), intervals=intervals, residuals=residuals,
        rounds=reference.shape[1], machine=dict(machine or {}), core_fit="cpu-time" if cpu is not None else "busy-probes",
        remote_overhead=float(best["remote_overhead"]), residual_rounds=residual_rounds,
    )


def _warn_short_chains(probes: Sequence[Probe], reference: np.ndarray, p: Mapping[str, float]) -> None:
    """Warn about busy probes whose chain may not have outlasted their transfers' time on the busy core (as
    fitted): what the transfers add is then underestimated, and with a fit from busy probes, so are the costs."""
    def core_time(probe: Probe) -> float:
        side = "send" if probe.family == "sender-busy" else "recv"
        return probe.tensors * (p[f"{side}_cpu"] + p[f"{side}_cpu_per_byte"] * probe.nbytes)

    short = [probe.name for i, probe in enumerate(probes) if probe.family in ("sender-busy", "receiver-busy")
             and reference[i] < SHORT_CHAIN * core_time(probe)]
    if short:
        warnings.warn(f"the busy chain of {', '.join(short)} was shorter than {SHORT_CHAIN:g}x its transfers' "
                      "core time, which it may then underestimate: raise placer.calibrate.BUSY_CHAIN_PER_MB",
                      RuntimeWarning, stacklevel=3)


def _interval(values: Sequence[float]) -> tuple[float, float]:
    """The 5th and 95th percentiles; an infinite bandwidth (no wire limit) counts as the largest value."""
    ordered = np.sort(np.asarray(values, dtype=float))
    rank = lambda q: ordered[min(int(round(q * (len(ordered) - 1))), len(ordered) - 1)]  # noqa: E731
    return float(rank(0.05)), float(rank(0.95))


def _theil_sen(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Slope and intercept of the median of pairwise slopes: one outlying point moves it little."""
    slopes = [(y[j] - y[i]) / (x[j] - x[i]) for i in range(len(x)) for j in range(i + 1, len(x)) if x[j] != x[i]]
    slope = float(np.median(slopes))
    return slope, float(np.median(y - slope * x))


# Which worker each role's ops run on: (reference placement, probe placement).
_ROLES = {
    "free": {"maker": (0, 0), "reader": (0, 1), "total": (0, 1)},
    "sender-busy": {"maker": (0, 0), "trigger": (0, 0), "chain": (0, 0), "reader": (0, 1), "total": (1, 1)},
    "receiver-busy": {"maker": (0, 0), "trigger": (0, 0), "chain": (1, 1), "reader": (0, 1), "total": (1, 1)},
    "ping-pong": {"maker": (0, 0), "total": (0, 0)},  # hop i runs on worker i % 2 in the probe
    "both-ways": {"maker": (0, 0), "reader": (0, 1), "backmaker": (0, 1), "backreader": (0, 0), "total": (0, 0)},
    "remote": {"total": (0, 1)},  # the free probe's graph, all of it on one worker
}


def probe_placements(probe: Probe, devices: DeviceSet):
    """The probe's graph, its reference placement and its probe placement on devices 0 and 1."""
    from placer.placement import Placement

    graph = _probe_graph(probe)
    roles = _ROLES[probe.family]

    def worker(op_name: str, side: int) -> int:
        role = op_name.split("/")[0].split("_")[0]
        if role == "hop":
            return int(op_name.split("/")[0].split("_")[1]) % 2 if side else 0
        return roles.get(role, roles["total"])[side]

    return graph, *(Placement.from_op_devices(graph, devices, {op.name: devices[worker(op.name, side)].name
                                                             for op in graph.ops}) for side in (0, 1))


def busy_chain_matmuls(probe: Probe) -> int:
    """Matmuls in a busy probe's chain: sized to outlast its transfers' core time (see BUSY_CHAIN_BASE)."""
    return BUSY_CHAIN_BASE + math.ceil(BUSY_CHAIN_PER_MB * probe.nbytes * probe.tensors / 1e6
                                       + BUSY_CHAIN_PER_TENSOR * probe.tensors)


def _probe_graph(probe: Probe):
    import tensorflow as tf

    from placer.graph.build import graph_from_function

    def tensors(prefix: str, seed: int) -> list:
        made = []
        for i in range(probe.tensors):
            with tf.name_scope(f"{prefix}_{i}"):
                # Filled, not drawn at random: drawing 16 MB costs its core 25 ms, whose jitter swamped
                # the sender's CPU time for the transfer; a fill is a memset.
                made.append(tf.fill([probe.elements], tf.random.uniform([], seed=seed + i)))
        return made

    def read(prefix: str, made: list):
        # Read one element: the whole tensor is still sent, but receiving costs no compute that moving off
        # the sender's core would save. The sum keeps what goes back to the fetch one scalar.
        with tf.name_scope(f"{prefix}_sum"):
            return tf.add_n([x[1] for x in made]) if len(made) > 1 else made[0][1]

    def build():
        outputs = []
        if probe.family == "ping-pong":
            with tf.name_scope("maker"):
                x = tf.random.uniform([1], seed=1)
            for hop in range(1, probe.tensors + 1):
                with tf.name_scope(f"hop_{hop}"):
                    x = x + 1.0
            outputs.append(x[0])
        else:
            made = tensors("maker", 0)
            outputs.append(read("reader", made))
            if probe.family in ("sender-busy", "receiver-busy"):
                with tf.name_scope("trigger"):  # the chain starts once the tensors exist, as their transfer does
                    trigger = made[0][0]
                with tf.name_scope("chain"):
                    h = tf.random.uniform([256, 256], seed=7) + 0.0 * trigger
                    for _ in range(busy_chain_matmuls(probe)):
                        h = tf.tanh(tf.matmul(h, h) * 0.01)
                    outputs.append(h[0, 0])
            if probe.family == "both-ways":
                outputs.append(read("backreader", tensors("backmaker", 100)))
        with tf.name_scope("total"):
            total = tf.add_n(outputs) if len(outputs) > 1 else outputs[0]
        # Fetched as the loss: grappler prunes side-effect-free ops that only a control edge would run.
        return tf.group(total, name="train_op"), total

    return graph_from_function(build, name=f"probe-{probe.family}-{probe.elements}x{probe.tensors}")
