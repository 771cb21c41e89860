"""The start-policy probe: the planner proposing starts rewarded with their refined step, against the heuristics'
tournament for as long."""

import json

import pytest

from experiments.probes.start_policy import main


def test_a_policy_share_outside_0_1_is_refused_before_anything_is_built(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--policy-share", "1"])
    assert stopped.value.code == 2
    assert "--policy-share in (0, 1)" in capsys.readouterr().err


@pytest.mark.slow  # about 30 s: a probe, not a user's command
def test_the_policy_s_best_start_refined_on_is_read_beside_the_tournament(tmp_path):
    out = tmp_path / "start_policy.json"
    assert main(["--setups", "nmt-4:tiny@2xH100", "--seconds", "6", "--refine-each", "0.3",
                 "--out", str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    assert row["updates"] >= 1 and row["samples"] == 4 * row["updates"]
    assert row["policy_then_refined_ms"] <= row["policy_best_refined_each_ms"]  # refined on from its best start
    assert row["tournament_ms"] <= row["heuristic_ms"]
    assert row["policy_vs_tournament_pct"] == pytest.approx(
        100 * (1 - row["policy_then_refined_ms"] / row["tournament_ms"]))
