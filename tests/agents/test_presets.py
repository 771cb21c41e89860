"""Presets: `placer train` runs the best-known setting by default, and `--preset reference` the papers'."""

from __future__ import annotations

import argparse
import json

import pytest

from agents.experiment import ExperimentConfig, ExperimentError
from agents.experiment.run import load_run_config
from agents.launch import add_arguments, config_from_args
from agents.presets import PRESETS
from agents.reinforce import HierarchicalConfig


def _config(*argv: str) -> ExperimentConfig:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return config_from_args(parser.parse_args(list(argv)))[0]


def test_the_default_preset_is_the_tuned_setting_and_reference_is_the_reference_planners():
    tuned = _config("two-tower")
    assert tuned.preset == "tuned"
    assert tuned.agent_settings == PRESETS["tuned"]["hierarchical"]
    assert tuned.agent_settings["grouping_prior"] == "partition" and tuned.agent_settings["learning_rate"] == 0.0003
    reference = _config("two-tower", "--preset", "reference")
    assert reference.agent_settings == {}
    # the reference is the agent config's own defaults: grappler's numbers
    defaults = HierarchicalConfig()
    assert (defaults.learning_rate, defaults.tanh_constant, defaults.grouping_prior) == (0.1, 1.0, "none")


def test_set_overrides_one_option_of_the_preset_and_keeps_the_rest():
    config = _config("two-tower", "--set", "learning_rate=0.01", "--set", "num_groups=8")
    assert config.agent_settings["learning_rate"] == 0.01 and config.agent_settings["num_groups"] == 8
    assert config.agent_settings["temperature"] == PRESETS["tuned"]["hierarchical"]["temperature"]


def test_a_preset_leaves_agents_it_does_not_name_on_their_defaults():
    assert _config("two-tower", "--agent", "random").agent_settings == {}


def test_an_unknown_preset_is_refused_with_the_known_ones():
    with pytest.raises(ExperimentError, match="unknown preset 'papers'.*tuned, reference"):
        ExperimentConfig(preset="papers")
    with pytest.raises(SystemExit):  # argparse refuses it with the choices
        _config("two-tower", "--preset", "papers")


def test_a_run_records_its_preset_and_a_run_from_before_presets_resumes_on_the_reference(tmp_path):
    config = _config("two-tower", "--preset", "reference")
    assert config.to_dict()["preset"] == "reference"
    old = config.to_dict()
    del old["preset"]
    (tmp_path / "config.json").write_text(json.dumps({"experiment": old}))
    assert load_run_config(tmp_path).preset == "reference"
