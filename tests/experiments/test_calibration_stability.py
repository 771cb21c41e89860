"""The calibration-stability experiment's derived numbers, on hand-made calibrations."""

import pytest

from experiments.probes.calibration_stability import deviation, free_transfer_per_byte
from placer.calibration import Calibration


def calibration(bandwidth, send=2e-10, recv=5e-10):
    return Calibration(step_overhead=5e-4, spanning_overhead=5e-4, send_cpu=3e-5, send_cpu_per_byte=send,
                       recv_cpu=4e-5, recv_cpu_per_byte=recv, latency=6e-5, bandwidth=bandwidth, samples={})


def test_a_free_transfers_byte_costs_the_slowest_of_the_two_cores_and_the_wire():
    assert free_transfer_per_byte(calibration(float("inf"))) == pytest.approx(5e-10)  # no wire: the receiver
    assert free_transfer_per_byte(calibration(1e9)) == pytest.approx(1e-9)  # a wire slower than both cores
    assert free_transfer_per_byte(calibration(float("inf"), send=7e-10)) == pytest.approx(7e-10)


def test_a_wire_found_in_one_calibration_only_moves_the_transfers_cost_by_what_it_adds():
    """Bandwidths of inf, 1.9 GB/s and inf deviate without bound; the transfers they price, by 3 %."""
    found = [calibration(float("inf")), calibration(1.9e9), calibration(float("inf"), recv=5.1e-10)]
    assert deviation([free_transfer_per_byte(c) for c in found]) == pytest.approx((1 / 1.9e9 - 5.1e-10) / 5.1e-10)
