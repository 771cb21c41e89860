"""`placer tune MODEL --target inprocess:1|local:...`: the arguments it refuses, and a testbed tuned end to end."""

import json
import os
import subprocess
import sys

import pytest

from placer.cli import main
from placer.concurrency import ThreadSetting, tuning_candidates
from placer.errors import DeviceSpecError
from placer.measure import LocalTestbed, parse_target

CORES = len(os.sched_getaffinity(0))


@pytest.mark.parametrize("target, complaint", [
    (f"local:{CORES + 1}", f"this process may use only {CORES}"),
    ("local:widths=1,intra=2", "worker 0 has 1 core"),
    ("local:1,inter=2", "fixes the threads that placer tune is choosing"),
    ("inprocess:1,intra=1", "fixes the threads that placer tune is choosing"),
    ("inprocess:2", "one in-process CPU device"),
    ('{"worker": ["localhost:2222"]}', "use --target inprocess:1 or local:"),
])
def test_tune_refuses_a_target_it_cannot_set_the_threads_of_before_starting_anything(target, complaint, capsys):
    assert main(["tune", "two-tower", "--target", target]) == 2
    assert complaint in capsys.readouterr().err


def test_tune_predict_refuses_the_testbed_before_profiling_anything(capsys):
    assert main(["tune", "two-tower", "--target", "local:1", "--predict"]) == 2
    assert "--predict prices the thread settings of one in-process CPU device" in capsys.readouterr().err


def test_tune_predict_prices_every_candidate_from_op_costs_profiled_once_and_names_the_setting_to_use(capsys):
    assert main(["tune", "two-tower", "--predict", "--warmup", "1", "--repeats", "2", "--json"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out[out.index("{"):])
    assert result["predicted"] and set(result["settings"]) == set(tuning_candidates())
    assert all(s["step_time"]["backend"] == "simulated" and s["step_time"]["seconds"] > 0 and s["rounds"] == []
               for s in result["settings"].values())
    best = result["settings"][result["best"]]
    assert best["step_time"]["seconds"] == min(s["step_time"]["seconds"] for s in result["settings"].values())
    assert best["target"].startswith("inprocess:1")


def test_tune_refuses_a_placement_in_process_and_an_unknown_one_on_the_testbed(capsys):
    assert main(["tune", "two-tower", "--placement", "expert"]) == 2
    assert "--placement is for the testbed's workers" in capsys.readouterr().err
    assert main(["tune", "two-tower", "--target", "local:1", "--placement", "no-such-placement"]) == 2
    assert "neither a placement file nor a baseline" in capsys.readouterr().err


def test_a_setting_gives_every_testbed_worker_its_pools_and_more_threads_than_a_worker_s_cores_are_refused():
    testbed = parse_target("local:1")
    [worker] = ThreadSetting(1, 1).on(testbed).layout()
    assert (worker.intra_op_threads, worker.inter_op_threads) == (1, 1)
    [worker] = ThreadSetting().on(testbed).layout()
    assert (worker.intra_op_threads, worker.inter_op_threads) == (1, 2)  # the testbed's own default
    with pytest.raises(DeviceSpecError, match=r"worker 0 has 1 core \(\[\d+\]\) but intra=2"):
        ThreadSetting(2, 1).on(testbed)


@pytest.mark.skipif(CORES < 2, reason="two workers of one core each need two cores")
def test_testbed_candidates_stay_within_the_narrowest_worker_and_are_timed_once_each():
    testbed = parse_target("local:widths=1+1")
    candidates = tuning_candidates(on=testbed)
    targets = [str(setting.on(testbed)) for setting in candidates.values()]
    assert len(targets) == len(set(targets))
    assert set(targets) == {"local:widths=1+1,intra=1+1,inter=1+1", "local:widths=1+1,intra=1+1,inter=2+2"}
    assert any(name.startswith("default = ") for name in candidates)
    assert any(name.startswith("recommended = ") for name in candidates)
    assert isinstance(testbed, LocalTestbed)


@pytest.mark.slow  # about 20 s on the testbed; `placer tune --predict` and optimize's pools are tested in the default run
def test_tune_on_the_testbed_times_every_setting_and_names_the_cluster_to_use():
    from placer.testbed import isolation_available

    if not isolation_available() or CORES < 2:
        pytest.skip("local:2 needs a private network namespace and two cores")
    run = subprocess.run([sys.executable, "-m", "placer.cli", "tune", "two-tower", "--target", "local:2",
                          "--rounds", "1", "--warmup", "1", "--repeats", "2", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout[run.stdout.index("{"):])
    assert result["target"] == "local:2"
    targets = {s["target"] for s in result["settings"].values()}
    assert targets == {"local:widths=1+1,intra=1+1,inter=1+1", "local:widths=1+1,intra=1+1,inter=2+2"}
    # every row carries its median round as the same StepTime record `placer measure --json` prints
    assert all(s["step_time"]["ok"] and s["step_time"]["seconds"] > 0 and s["step_time"]["backend"] == "measured"
               and len(s["rounds"]) == 1 for s in result["settings"].values())
    assert result["best"] in result["settings"]
