"""Data parallelism on the simulator, on hand-built machines whose answers are known: a ring all-reduce's time,
its overlap with the backward, which device each replica runs on, and memory with a copy of the weights per
replica."""

import pytest

from placer.cost.replicated import replica_spec
from placer.devices import Link
from placer.errors import ReplicaError
from placer.hardware import modeled_machine
from placer.replicas import Replicas, replica_devices
from placer.schedule.micro_batch import Gradient
from placer.simulate.replicas import replicated_step, ring_all_reduce_seconds, ring_link
from placer.simulate.result import SimResult, SimulatedOp

MS = 1e-3
MB = 10**6
GB = 10**9
NVLINK4 = 450e9, 3e-6  # an H100 machine's NVSwitch: bytes per second each way, seconds per transfer


def gpu(index):
    return f"/job:localhost/replica:0/task:0/device:GPU:{index}"


CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


def replica_timeline(step_ms, gradients_ready_ms, peaks=None):
    """One replica's simulated step on one GPU: an op per gradient, ending when that gradient is ready."""
    ops = tuple(SimulatedOp(f"grad{i}", gpu(0), 0.0, ready * MS) for i, ready in enumerate(gradients_ready_ms))
    return SimResult(step_ms * MS, {gpu(0): step_ms * MS}, peaks or {gpu(0): 0}, {}, ops=ops)


def test_a_ring_all_reduce_moves_twice_n_minus_one_over_n_of_the_bytes_and_pays_2_n_minus_one_latencies():
    link = Link("a", "b", 1e10, 1e-6)
    assert ring_all_reduce_seconds(100 * MB, 4, link) == pytest.approx(2 * 3 / 4 * 100 * MB / 1e10 + 6e-6)
    assert ring_all_reduce_seconds(100 * MB, 1, link) == 0.0  # one replica has nobody to exchange with
    assert ring_all_reduce_seconds(0, 8, link) == 0.0


def test_a_ring_runs_at_its_slowest_hop():
    machine = modeled_machine(3, "H100")
    slow = tuple(Link(l.source, l.target, 1e9, 1e-5) if {l.source, l.target} == {gpu(1), gpu(2)} else l
                 for l in machine.links)
    machine = type(machine)(machine.devices, slow, machine.name)
    link = ring_link(machine, [gpu(0), gpu(1), gpu(2)])
    assert (link.bandwidth, link.latency) == (1e9, 1e-5)


def test_replicas_deal_out_the_gpus_a_group_after_another_and_share_the_host_cpu():
    machine, group = modeled_machine(8, "H100"), modeled_machine(2, "H100")
    devices = replica_devices(machine, group, 4)
    assert [d[gpu(0)] for d in devices] == [gpu(0), gpu(2), gpu(4), gpu(6)]
    assert [d[gpu(1)] for d in devices] == [gpu(1), gpu(3), gpu(5), gpu(7)]
    assert {d[CPU] for d in devices} == {CPU}
    with pytest.raises(ReplicaError, match="need 6"):
        replica_devices(modeled_machine(4, "H100"), modeled_machine(2, "H100"), 3)


def test_the_exchange_after_the_last_gradient_adds_its_whole_time_then_the_update_runs():
    machine = modeled_machine(4, "H100")
    devices = replica_devices(machine, modeled_machine(1, "H100"), 4)
    # one 100 MB gradient ready at 10 ms; the update takes the replica's last 2 ms
    step = replicated_step(replica_timeline(12, [10]), [Gradient("grad0:0", 100 * MB, "update")], machine, devices)
    exchange = 2 * 3 / 4 * 100 * MB / NVLINK4[0] + 6 * NVLINK4[1]
    assert step.exchange == pytest.approx(exchange)
    assert step.step_time == pytest.approx(10 * MS + exchange + 2 * MS)
    assert step.exposed == pytest.approx(exchange)
    assert step.gradient_bytes == 100 * MB and step.degree == 4


def test_buckets_ready_early_are_reduced_while_the_backward_goes_on():
    machine = modeled_machine(4, "H100")
    devices = replica_devices(machine, modeled_machine(1, "H100"), 4)
    # two buckets of 1 GB (each over the 25 MiB bucket), ready at 1 ms and at 10 ms of a 12 ms step
    gradients = [Gradient("grad0:0", GB, "u0"), Gradient("grad1:0", GB, "u1")]
    one = 2 * 3 / 4 * GB / NVLINK4[0] + 6 * NVLINK4[1]  # 3.351 ms
    step = replicated_step(replica_timeline(12, [1, 10]), gradients, machine, devices)
    # the first bucket is done at 4.351 ms, before the second is ready: only the second one shows
    assert step.step_time == pytest.approx(10 * MS + one + 2 * MS)
    assert step.exchange == pytest.approx(2 * one)
    # small gradients share a bucket: one ring pass, one set of latencies
    small = [Gradient(f"grad{i}:0", MB, f"u{i}") for i in range(2)]
    step = replicated_step(replica_timeline(12, [1, 10]), small, machine, devices)
    assert step.exchange == pytest.approx(2 * 3 / 4 * 2 * MB / NVLINK4[0] + 6 * NVLINK4[1])


def test_every_replica_holds_its_weights_and_a_device_they_share_holds_every_replica_s_share():
    machine = modeled_machine(4, "H100")  # 80 GiB a GPU
    devices = replica_devices(machine, modeled_machine(1, "H100"), 4)
    timeline = replica_timeline(12, [10], peaks={gpu(0): 30 * GB, CPU: 1 * GB})
    step = replicated_step(timeline, [Gradient("grad0:0", MB, "u")], machine, devices)
    assert {step.peak_memory[gpu(i)] for i in range(4)} == {30 * GB}
    assert step.peak_memory[CPU] == 4 * GB
    assert step.ok
    full = replicated_step(replica_timeline(12, [10], peaks={gpu(0): 90 * GB}), [Gradient("grad0:0", MB, "u")],
                           machine, devices)
    assert not full.ok and set(full.out_of_memory) == {gpu(i) for i in range(4)}


def test_a_degree_that_divides_neither_the_batch_nor_the_gpus_is_refused_naming_the_divisors():
    assert Replicas.of_batch(64, 8) == Replicas(8, 8)
    with pytest.raises(ReplicaError, match=r"3 replicas do not divide the batch of 64 samples: give a divisor of 64 "
                                           r"\(2, 4, 8, 16, 32, 64\)"):
        Replicas.of_batch(64, 3)
    with pytest.raises(ReplicaError, match="cannot be sliced"):
        Replicas.of_batch(None, 2)
    assert replica_spec("modeled:8xH100", 4) == "modeled:2xH100"
    assert replica_spec("modeled:4xH100-nvlink2", 4) == "modeled:1xH100-nvlink2"
    with pytest.raises(ReplicaError, match=r"do not divide the 8 GPUs of modeled:8xH100: give a divisor of 8 \(1, 2, 4, 8\)"):
        replica_spec("modeled:8xH100", 3)


def test_replicas_whose_weights_and_optimizer_state_cannot_fit_a_gpu_are_refused_with_the_bytes():
    from types import SimpleNamespace

    from placer.cost import parse_target_spec
    from placer.errors import ReplicaError
    from placer.replicas import check_replicas_fit

    machine = parse_target_spec("modeled:2xK80", "simulated").devices  # 12 GiB a GPU
    big = SimpleNamespace(name="big", num_parameters=4_000_000_000)  # 16 GB of weights and optimizer slots
    check_replicas_fit(big, machine, 1)  # one copy over both GPUs: 8 GB each
    with pytest.raises(ReplicaError, match=r"2 replicas do not fit .*16\.00 GB, which over its 1 GPU\(s\) is 16\.00 GB "
                                           r"a GPU, more than .*12\.88 GB: give fewer replicas"):
        check_replicas_fit(big, machine, 2)


def test_replicas_each_a_pipeline_pay_their_schedule_and_the_exchange_of_their_merged_gradients():
    """Two-tower (tiny) at 32 samples a replica, the expert's two stages under 1F1B over 2 micro-batches: one
    replica alone is priced exactly as the schedule's own prediction, and two replicas on 4 GPUs add only the
    all-reduce of the merged gradients (8 MB) that the backward does not hide."""
    from placer.cost import open_target
    from placer.cost.replicated import price_replicated_schedule
    from placer.heuristics import time_heuristics
    from placer.models import build_model_apart
    from placer.schedule.from_placement import blocks_from_placement
    from placer.schedule.methods import make_schedule
    from placer.schedule.micro_batch import placement_at_micro_batch
    from placer.schedule.predict import predict_plans, priced_template

    replica, micro_batch, group = (build_model_apart("two-tower", "tiny", batch=32),
                                   build_model_apart("two-tower", "tiny", batch=16), "modeled:2xH100")
    with open_target(replica, group) as target:
        placement = time_heuristics(target, ["expert"], model="two-tower")["expert"].placement
        at_micro_batch = placement_at_micro_batch(placement, replica, micro_batch, target.devices)
        template = priced_template(blocks_from_placement(target.simulator, placement, 2), micro_batch, at_micro_batch,
                                   group)
    plan = make_schedule("1f1b", template, 2)
    alone = predict_plans({"1f1b": plan}, micro_batch, at_micro_batch, group)["1f1b"].step_time.seconds
    one, _ = price_replicated_schedule(micro_batch, at_micro_batch, plan, group, group, 1)
    assert one.seconds == pytest.approx(alone)
    two, step = price_replicated_schedule(micro_batch, at_micro_batch, plan, group, "modeled:4xH100", 2)
    assert step.gradient_bytes == 8 * 2**20 and step.exchange > 0
    assert two.seconds == pytest.approx(alone + step.exposed) and two.seconds >= alone
