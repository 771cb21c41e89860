"""Experiments: settings (`config`), one run end to end (`run`), and what a run reports (`results`).

`placer train` and the launch scripts in experiments/ are thin layers over `agents.experiment.run.run_experiment`;
the run directory's files are read and written by `agents.run_files` alone.
"""
