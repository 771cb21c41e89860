"""notebooks/explore_run.ipynb runs top to bottom on fresh runs of `placer train` (simulated, and measured on the
local testbed) and draws its figures."""

import base64
import json
import os
import shutil
import sys
from pathlib import Path

import nbclient  # the [notebooks] extra, part of [dev]
import nbformat
import pytest

from placer.devices import short_name

NOTEBOOK = Path(__file__).parents[1] / "notebooks" / "explore_run.ipynb"


@pytest.fixture(params=[pytest.param("simulated_run", id="simulated"),
                        pytest.param("measured_run", id="measured-local2",
                                     marks=[pytest.mark.testbed, pytest.mark.slow])])  # see tests/agents/test_pictures.py
def run(request) -> Path:
    """A finished run: simulated on modeled GPUs, or measured on the local testbed's two workers."""
    return request.getfixturevalue(request.param)


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
    updates = len(json.loads((run / "trainer_state.json").read_text())["history"])
    assert f"{updates} updates so far" in text and "still running" not in text

    # The per-device table counts every colocation group and op of the best placement.
    placement = json.loads((run / "best_placement.json").read_text())
    (table,) = _outputs(notebook, "text/markdown")
    rows = [line.split("|")[1:-1] for line in table.splitlines() if line.startswith("| ") and "device" not in line]
    # one row per device of the placement, each under its own name (two workers' CPU:0 stay apart)
    assert [device.strip() for device, _, _ in rows] == [short_name(d) for d in placement["devices"]]
    assert len({device for device, _, _ in rows}) == len(placement["devices"])
    assert sum(int(groups) for _, groups, _ in rows) == len(placement["groups"])
    assert sum(int(ops) for _, _, ops in rows) == len(placement["ops"])

    timeline = json.loads((run / "timeline.json").read_text())
    spans = sum(event["ph"] == "X" for event in timeline["traceEvents"])
    assert f"{spans} events on {len(set(placement['ops'].values()))} devices" in text

    # Three figures: training curves, groups and ops per device, the timeline.
    figures = [base64.b64decode(png) for png in _outputs(notebook, "image/png")]
    assert len(figures) == 3
    assert all(png.startswith(b"\x89PNG") and len(png) > 10_000 for png in figures)


def test_notebook_opens_the_newest_run_by_default(simulated_run, tmp_path, monkeypatch):
    run = simulated_run
    project = tmp_path / "project"
    newest = project / "runs" / "two-tower" / run.name
    older = project / "runs" / "xor" / run.name  # sorts after the newest one by path, but started in 2000
    shutil.copytree(run, newest)
    shutil.copytree(run, older)
    os.utime(older / "config.json", (946684800, 946684800))
    monkeypatch.delenv("PLACER_RUN_DIR", raising=False)

    notebook = _execute(project)  # started in a folder with runs/ in it, as from the repository root
    assert str(newest) in "\n".join(_outputs(notebook, "text/plain"))


def test_notebook_shows_a_run_still_in_progress(simulated_run, tmp_path, monkeypatch):
    run = simulated_run
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
