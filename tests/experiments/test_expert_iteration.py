"""The expert-iteration probe: the graph policy imitates a refined placement and is priced alone, beside the
refinement alone at the same refining time."""

import json

import pytest

from experiments.probes.expert_iteration import main


@pytest.mark.slow  # about 20 s: a probe, not a user's command
def test_the_policy_is_priced_alone_each_round_beside_the_refinement_alone(tmp_path):
    out = tmp_path / "expert_iteration.json"
    assert main(["--setups", "two-tower:tiny@2xH100", "--refine-seconds", "1", "--rounds", "2",
                 "--imitation-steps", "5", "--samples", "2", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [row["round"] for row in rows] == [1, 2]
    for row in rows:
        assert 0 <= row["agreement_pct"] <= 100
        # the fastest of the policy's draws counts its greedy one; refining never ends slower than its start
        assert row["policy_best_ms"] <= row["policy_greedy_ms"]
        assert row["round_refined_ms"] <= row["heuristic_ms"] * (1 + 1e-9) or row["round"] > 1
        assert row["refinement_alone_ms"] <= row["heuristic_ms"] * (1 + 1e-9)
    assert rows[1]["refine_s"] >= rows[0]["refine_s"]


def test_bad_arguments_are_refused_before_any_model_is_built(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--rounds", "0"])
    assert exit_info.value.code == 2 and "--rounds" in capsys.readouterr().err
