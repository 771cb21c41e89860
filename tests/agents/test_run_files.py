"""agents.run_files: where a run is written."""

from agents.experiment.config import ExperimentConfig
from agents.run_files import new_run_dir


def test_a_model_functions_run_is_named_after_the_function_not_its_file(tmp_path):
    models = tmp_path / "models.py"
    models.write_text("def seq2seq():\n    raise NotImplementedError\n")
    runs = tmp_path / "runs"
    assert new_run_dir(ExperimentConfig(model=f"{models}:seq2seq", runs=str(runs))).parent == runs / "seq2seq"
    assert new_run_dir(ExperimentConfig(model="two-tower", runs=str(runs))).parent == runs / "two-tower"
