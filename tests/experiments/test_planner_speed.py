import pytest

from experiments.probes.planner_speed import main, planner_options


def test_a_setting_is_read_as_the_planner_s_options():
    assert planner_options("defaults") == {}
    assert planner_options("hidden_size=512,attention=dot") == {"hidden_size": 512, "attention": "dot"}


def test_a_bad_setting_is_refused_before_the_model_is_built(capsys):
    for setting in ("hidden_width=256", "attention=luong"):
        with pytest.raises(SystemExit) as stopped:
            main(["--settings", "defaults", setting, "--out", "unused.json"])
        assert stopped.value.code == 2
    refused = capsys.readouterr().err
    assert "hidden_width" in refused and "luong" in refused
