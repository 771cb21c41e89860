"""notebooks/explore_run.ipynb runs top to bottom on a fresh run of `placer train` and draws its figures."""

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbclient  # the [notebooks] extra, part of [dev]
import nbformat
import pytest

NOTEBOOK = Path(__file__).parents[1] / "notebooks" / "explore_run.ipynb"
UPDATES = 3


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """PROJECT/runs/two-tower/<timestamp>: a short simulated run (about 10 s: random search builds no policy)."""
    runs = tmp_path_factory.mktemp("project") / "runs"
    train = subprocess.run([sys.executable, "-m", "placer.cli", "train", "two-tower", "--agent", "random",
                            "--updates", str(UPDATES), "--runs", str(runs), "--no-progress"],
                           capture_output=True, text=True, timeout=300)
    assert train.returncode == 0, train.stderr[-3000:]
    (run,) = (runs / "two-tower").iterdir()
    return run


def _execute(cwd: Path) -> nbformat.NotebookNode:
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    # jupyter_client starts a kernelspec whose command is plain "python" with this interpreter: the venv's.
    assert spec.argv[0] in ("python", "python3", sys.executable), f"kernel python3 runs {spec.argv} ({spec.resource_dir})"
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(notebook, kernel_name="python3", timeout=120,
                            resources={"metadata": {"path": str(cwd)}}).execute()  # raises on a failing cell
    return notebook


def _outputs(notebook: nbformat.NotebookNode, kind: str) -> list:
    found = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and kind == "text":
                found.append(output["text"])
            elif kind in output.get("data", {}):
                found.append(output["data"][kind])
    return found


def test_notebook_draws_curves_placement_and_timeline_of_the_given_run(run, monkeypatch):
    monkeypatch.setenv("PLACER_RUN_DIR", str(run))
    notebook = _execute(NOTEBOOK.parent)

    text = "\n".join(_outputs(notebook, "text") + _outputs(notebook, "text/plain") + _outputs(notebook, "text/markdown"))
    assert str(run) in text
    assert f"{UPDATES} updates so far" in text and "still running" not in text

    # The per-device table counts every colocation group and op of the best placement.
    placement = json.loads((run / "best_placement.json").read_text())
    (table,) = _outputs(notebook, "text/markdown")
    rows = [line.split("|")[1:-1] for line in table.splitlines() if line.startswith("| ") and "device" not in line]
    assert sum(int(groups) for _, groups, _ in rows) == len(placement["groups"])
    assert sum(int(ops) for _, _, ops in rows) == len(placement["ops"])

    timeline = json.loads((run / "timeline.json").read_text())
    spans = sum(event["ph"] == "X" for event in timeline["traceEvents"])
    assert f"{spans} events on " in text

    # Three figures: training curves, groups and ops per device, the timeline.
    figures = [base64.b64decode(png) for png in _outputs(notebook, "image/png")]
    assert len(figures) == 3
    assert all(png.startswith(b"\x89PNG") and len(png) > 10_000 for png in figures)


def test_notebook_opens_the_newest_run_by_default(run, tmp_path, monkeypatch):
    project = tmp_path / "project"
    newest = project / "runs" / "two-tower" / run.name
    older = project / "runs" / "xor" / run.name  # sorts after the newest one by path, but started in 2000
    shutil.copytree(run, newest)
    shutil.copytree(run, older)
    os.utime(older / "config.json", (946684800, 946684800))
    monkeypatch.delenv("PLACER_RUN_DIR", raising=False)

    notebook = _execute(project)  # started in a folder with runs/ in it, as from the repository root
    assert str(newest) in "\n".join(_outputs(notebook, "text/plain"))


def test_notebook_shows_a_run_still_in_progress(run, tmp_path, monkeypatch):
    # While training, there is no summary.json (best baseline) nor timeline.json yet.
    running = tmp_path / "running"
    shutil.copytree(run, running)
    (running / "summary.json").unlink()
    (running / "timeline.json").unlink()
    monkeypatch.setenv("PLACER_RUN_DIR", str(running))

    notebook = _execute(NOTEBOOK.parent)
    text = "\n".join(_outputs(notebook, "text"))
    assert "still running" in text and "no timeline yet" in text
    assert len(_outputs(notebook, "image/png")) == 2  # curves (best baseline from baselines.json) and placement
