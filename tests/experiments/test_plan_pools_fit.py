import pytest

from experiments.probes.plan_pools_fit import main


def test_bad_arguments_are_refused_before_any_fit_runs(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--plan", "plan.json", "--model", "m.py:build", "--rounds", "0"])
    assert stopped.value.code == 2 and "at least 1 round" in capsys.readouterr().err


def test_a_plan_of_testbed_workers_is_refused_with_what_runs_it(mlp, tmp_path, capsys):
    from placer.devices import cluster_devices
    from placer.placement import Placement
    from placer.plan import Plan

    workers = cluster_devices({"worker": ["localhost:2222", "localhost:2223"]})
    path = Plan.made_for("mlp", "tiny", mlp, Placement.round_robin(mlp, workers), "local:widths=1+1,intra=1,inter=1+2",
                         made_by="test").save(tmp_path / "plan.json")
    with pytest.raises(SystemExit) as stopped:
        main(["--plan", str(path), "--model", "m.py:build"])
    assert stopped.value.code == 2 and "not in one process: placer apply runs it" in capsys.readouterr().err
