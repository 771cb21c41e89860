"""The move-proposal probe: the refinement's pieces chosen by a model fitted as it refines, against every piece,
from the fastest heuristic placement for the same time."""

import json

import pytest

from experiments.probes.move_proposal import area_under_roc, main


def test_a_share_outside_0_1_is_refused_before_anything_is_built(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--proposed-share", "0"])
    assert stopped.value.code == 2
    assert "--proposed-share is a share in (0, 1]" in capsys.readouterr().err


def test_the_area_under_the_roc_curve_counts_kept_moves_scored_above_rejected_ones_and_ties_as_half():
    import numpy as np

    kept = np.array([True, True, False, False])
    assert area_under_roc(np.array([4.0, 3.0, 2.0, 1.0]), kept) == 1.0
    assert area_under_roc(np.array([1.0, 2.0, 3.0, 4.0]), kept) == 0.0
    assert area_under_roc(np.array([1.0, 1.0, 1.0, 1.0]), kept) == 0.5
    assert area_under_roc(np.array([1.0, 2.0]), np.array([True, True])) is None


@pytest.mark.slow  # about 20 s: a probe, not a user's command; the choice itself is tested in tests/heuristics
def test_each_choice_is_read_at_every_checkpoint_and_each_level_observed(tmp_path):
    out = tmp_path / "move_proposal.json"
    assert main(["--setups", "nmt-4:tiny@2xH100", "--checkpoints", "0.5", "1", "--observe", "1",
                 "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [row["pieces_tried"] for row in report["rows"]] == ["every", "learned"]
    for row in report["rows"]:
        at = [float(ms) for ms in row["at_checkpoints_ms"].split()]
        assert len(at) == 2 and at[0] >= at[1] == pytest.approx(row["refined_ms"], abs=0.005)
    assert report["levels"] and all(level["moves_tried"] >= level["kept"] for level in report["levels"])
