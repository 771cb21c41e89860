"""The check before measuring: a machine kept busy by another program is named with what runs, and the processes
placer started itself never count against it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from placer.measure.machine_check import BUSY_SHARE, MachineCheck, check_machine

SPIN = "import time\nwhile True: pass  # placer-machine-check-spinner"


def _orphan_spinner() -> int:
    """A process spinning on a core that is not this one's descendant (its parent shell exits at once), as another
    user's benchmark would be; returns its pid."""
    shell = subprocess.run(["sh", "-c", f'{sys.executable} -c "{SPIN}" >/dev/null 2>&1 & echo $!'],
                           capture_output=True, text=True, check=True)
    return int(shell.stdout.strip())


def test_a_program_spinning_on_every_core_makes_the_machine_busy_and_is_named():
    spinners = [_orphan_spinner() for _ in range(len(os.sched_getaffinity(0)))]
    try:
        time.sleep(0.3)  # running before the check starts
        check = check_machine(seconds=0.5)
    finally:
        for pid in spinners:
            os.kill(pid, signal.SIGKILL)
    assert check.busy, check.describe()
    assert check.others_cores >= 0.5 * len(spinners), check.describe()
    assert "placer-machine-check-spinner" in check.describe() or "python" in check.describe()
    assert check.describe().startswith("machine check: BUSY")


def test_the_processes_this_one_started_are_not_counted_as_others():
    spinner = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(0.3)
        check = check_machine(seconds=0.5)
    finally:
        spinner.kill()
        spinner.wait()
    assert not any("placer-machine-check-spinner" in command for command, _ in check.busiest), check.describe()


@pytest.mark.parametrize("others, spread, verdict", [
    (0.0, 0.05, "quiet"), (0.0, 0.9, "quiet"), (BUSY_SHARE * 2 * 1.5, 0.05, "BUSY"),
])
def test_a_check_reads_busy_from_the_others_share_of_the_cores_and_says_the_spread(others, spread, verdict):
    check = MachineCheck(cores=2, others_cores=others, busiest=(("make -j2", others),) if others else (),
                         spread=spread, work_seconds=0.002, seconds=0.5)
    assert check.describe().startswith(f"machine check: {verdict}")
    assert check.quiet == (verdict == "quiet")
    assert check.to_json_dict()["busy"] == (verdict == "BUSY")
    assert f"spread {spread * 100:.0f} %" in check.describe()
