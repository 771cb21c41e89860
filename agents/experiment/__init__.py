"""Experiments: settings (`config`), one run end to end (`run`), and what a run reports (`results`).

`placer train` and the launch scripts in experiments/ are thin layers over `run_experiment`.
"""

from agents.experiment.config import (
    PAPER_SETTINGS, PAPER_UPDATES, ExperimentConfig, ExperimentError, load_config_file, paper_setting, parse_override,
)
from agents.experiment.results import describe, export_run, summarize
from agents.experiment.run import ExperimentResult, load_run_config, new_run_dir, run_experiment
from agents.factory import AGENTS

__all__ = [
    "AGENTS", "PAPER_SETTINGS", "PAPER_UPDATES", "ExperimentConfig", "ExperimentError", "ExperimentResult",
    "describe", "export_run", "load_config_file", "load_run_config", "new_run_dir", "paper_setting",
    "parse_override", "run_experiment", "summarize",
]
