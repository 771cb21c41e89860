"""Presets: `placer train` runs the planner's `Args` defaults (the tuned setting), `--preset reference` grappler's."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from agents.experiment.config import ExperimentConfig, ExperimentError
from agents.factory import check_agent_options
from agents.hierarchical import REFERENCE, Args
from agents.launch import add_arguments, config_from_args
from agents.run_files import load_run_config

GRAPPLER = {
    # tensorflow/python/grappler/hierarchical_controller.py's hparams: what REFERENCE documents
    "learning_rate": 0.1, "lr_decay_rate": 0.95, "lr_decay_updates": 50, "lr_decay_start": 400,
    "logits_noise_std": 0.5, "noise_updates": 750, "tanh_constant": 1.0, "temperature": 1.0, "grad_bound": 1.0,
    "reward_baseline_decay": 0.9, "entropy_weight": 0.0, "num_groups": None, "hidden_size": 512,
    "grouping_hidden_size": 64, "attention": "additive",
    # and none of what the tuned setting adds
    "grouping_prior": "none", "placement_prior_weight": 0.0, "grouper_learning_rate": None,
    "normalize_advantages": False, "imitation_weight": 0.0,
}


def _config(*argv: str) -> ExperimentConfig:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return config_from_args(parser.parse_args(list(argv)))[0]


def test_placer_train_runs_the_planners_args_defaults():
    config = _config("two-tower")
    assert config.agent == "hierarchical" and config.preset is None and config.agent_settings == {}
    assert check_agent_options(config.agent, config.agent_settings, seed=config.seed) == Args(seed=config.seed)
    assert _config("two-tower", "--preset", "tuned").agent_settings == {}
    tuned = Args()
    assert (tuned.grouping_prior, tuned.learning_rate, tuned.imitation_weight) == ("partition", 0.0003, 1.0)


def test_the_reference_preset_is_grapplers_planner():
    assert {name: getattr(REFERENCE, name) for name in GRAPPLER} == GRAPPLER
    assert REFERENCE.groups_for(2) == 40 and REFERENCE.groups_for(16) == 256  # min(256, 20 x devices)
    config = _config("two-tower", "--preset", "reference")
    assert check_agent_options(config.agent, config.agent_settings, seed=0) == REFERENCE


def test_set_overrides_one_option_of_the_preset_and_keeps_the_rest():
    config = _config("two-tower", "--preset", "reference", "--set", "learning_rate=0.01", "--set", "num_groups=8")
    built = check_agent_options(config.agent, config.agent_settings)
    assert built == dataclasses.replace(REFERENCE, learning_rate=0.01, num_groups=8)


def test_a_preset_named_for_an_agent_without_presets_is_refused_by_name():
    assert _config("two-tower", "--agent", "random").agent_settings == {}
    with pytest.raises(ExperimentError, match="presets .* are settings of the hierarchical planner; agent random"):
        _config("two-tower", "--agent", "random", "--preset", "reference")


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
    # a run that recorded the default preset for an agent without presets still loads
    (tmp_path / "config.json").write_text(json.dumps({"experiment": {**old, "agent": "cem", "preset": "tuned"}}))
    assert load_run_config(tmp_path).preset is None
