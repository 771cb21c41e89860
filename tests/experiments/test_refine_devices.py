"""The refinement-devices probe: each rule of which devices a piece is tried on, refined from the fastest
heuristic placement for the same time."""

import json

import pytest

from experiments.probes.refine_devices import main


def test_descending_checkpoints_are_refused_before_anything_is_built(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--checkpoints", "30", "15"])
    assert stopped.value.code == 2
    assert "positive --checkpoints in ascending order" in capsys.readouterr().err


@pytest.mark.slow  # about 20 s: a probe, not a user's command; the rules themselves are tested in tests/heuristics
def test_each_rule_starts_from_the_fastest_heuristic_and_is_read_at_every_checkpoint(tmp_path):
    from experiments.gpu_machines import fastest_heuristic, parse_setup
    from placer.cost import open_target
    from placer.models import load_model

    out = tmp_path / "refine_devices.json"
    assert main(["--setups", "two-tower:tiny@2xH100", "--checkpoints", "0.2", "0.4", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [row["devices_tried"] for row in rows] == ["every", "neighbours"]
    model, size, spec = parse_setup("two-tower:tiny@2xH100")
    with open_target(load_model(model, size), spec) as target:
        name, timing = fastest_heuristic(target, model)
    for row in rows:
        at = [float(ms) for ms in row["at_checkpoints_ms"].split()]
        assert row["heuristic"] == name and row["heuristic_ms"] == pytest.approx(timing.step_time.seconds * 1e3)
        assert len(at) == 2 and at[0] >= at[1] == pytest.approx(row["refined_ms"], abs=0.005) and at[0] <= row["heuristic_ms"] + 0.005
