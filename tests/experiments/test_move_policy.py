"""The move-policy probe: the graph policy's moves head anchored at a refined placement, trained on rewards,
beside the refinement going on for as long."""

import json
import math

import numpy as np
import pytest

from experiments.probes.move_policy import main, train_moves


def test_the_policy_s_best_is_the_fastest_placement_it_sampled_and_each_update_learns_from_its_samples():
    class Agent:  # proposes placements one unit apart, learns nothing
        def __init__(self):
            self.proposed, self.rewards = 0, []

        def propose(self, count):
            self.proposed += count
            return [np.array([self.proposed - k, 0]) for k in range(count)]

        def learn(self, assignments, rewards):
            self.rewards.append(list(rewards))

    agent = Agent()
    price = {0: math.inf}  # a placement that fails is never the best
    best, seconds, updates, drawn, improved = train_moves(
        agent, lambda a: price.get(int(a[0]), 1.0 / (1 + int(a[0]))), seconds=0.05, samples=3)
    assert updates == len(agent.rewards) >= 1 and drawn == 3 * updates
    assert seconds == 1.0 / (1 + 3 * updates) and best[0] == 3 * updates  # the last sampled is the fastest
    assert improved == updates - 1  # every update after the first beat every placement before it
    assert all(r == -math.sqrt(1.0 / (1 + a)) for rewards, u in zip(agent.rewards, range(updates))
               for r, a in zip(rewards, [3 * (u + 1) - k for k in range(3)]))


@pytest.mark.slow  # about 30 s: a probe, not a user's command
def test_the_move_policy_is_priced_beside_the_refinement_going_on_for_as_long(tmp_path):
    out = tmp_path / "move_policy.json"
    assert main(["--setups", "two-tower:tiny@2xH100", "--refine-seconds", "1", "--policy-seconds", "2",
                 "--samples", "2", "--out", str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    # the policy's anchor starts at the refined placement, which it samples first: it never ends slower
    assert row["policy_ms"] <= row["refined_ms"] * (1 + 1e-9)
    assert row["refinement_alone_ms"] <= row["refined_ms"] * (1 + 1e-9) <= row["heuristic_ms"] * (1 + 1e-9)
    assert row["policy_samples"] == 2 * row["policy_updates"]


def test_bad_arguments_are_refused_before_any_model_is_built(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--samples", "1"])
    assert exit_info.value.code == 2 and "--samples" in capsys.readouterr().err
