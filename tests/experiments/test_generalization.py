"""The generalization benchmark's bookkeeping: fine-tuning bounded by time, the 5x-fewer count, bad --unseen."""

from types import SimpleNamespace

import pytest

from experiments import generalization


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_fine_tuning_stops_at_its_seconds_and_counts_what_it_drew(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(generalization.time, "perf_counter", clock)
    step_times = iter([3.0, 2.5, 2.0, 1.5, 1.0, 0.5, 0.4, 0.3] * 10)

    def update(agent, env, count):
        clock.now += 10.0  # each update takes 10 s
        return SimpleNamespace(evaluations=[SimpleNamespace(step_time=next(step_times)) for _ in range(count)])

    monkeypatch.setattr(generalization.loop, "update", update)
    reached, beaten, best, drawn = generalization.samples_to_reach(None, None, 2.0, updates=100, seconds=25.0)
    # three updates start (at 0, 10 and 20 s), none at 30 s: 12 samples
    assert drawn == 3 * generalization.SAMPLES_PER_UPDATE
    assert (reached, beaten) == (3, 4) and best == 0.3


def test_without_seconds_every_update_runs(monkeypatch):
    monkeypatch.setattr(generalization.loop, "update", lambda agent, env, count: SimpleNamespace(
        evaluations=[SimpleNamespace(step_time=5.0)] * count))
    reached, beaten, best, drawn = generalization.samples_to_reach(None, None, 2.0, updates=3)
    assert (reached, beaten, best, drawn) == (None, None, 5.0, 12)


def test_five_times_fewer_reads_what_the_planner_drew_when_it_never_beat_the_baseline():
    row = {"finetuned_beat_samples": 10, "scratch_beat_samples": None, "scratch_drawn": 40}
    assert not generalization.five_times_fewer(row, budget=200)  # 40 drawn in its seconds, not the 200 asked
    assert generalization.five_times_fewer({**row, "scratch_drawn": 60}, budget=200)
    assert generalization.five_times_fewer({"finetuned_beat_samples": 10, "scratch_beat_samples": None}, budget=200)
    assert not generalization.five_times_fewer({"finetuned_beat_samples": None}, budget=200)


@pytest.mark.parametrize("unseen, message", [
    (["nmt-2"], "a zoo model is pre-trained on"),
    (["no-such-model"], "no-such-model"),
])
def test_an_unseen_model_that_is_no_such_is_refused_before_pre_training(monkeypatch, capsys, unseen, message):
    monkeypatch.setattr(generalization, "pretrain", lambda *a, **k: pytest.fail("pre-trained before the check"))
    monkeypatch.setattr("sys.argv", ["generalization.py", "--families", "--generated", "0", "--unseen", *unseen])
    with pytest.raises(SystemExit):
        generalization.main()
    assert message in capsys.readouterr().err


def test_nothing_to_place_is_refused(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["generalization.py", "--families", "--generated", "0"])
    with pytest.raises(SystemExit):
        generalization.main()
    assert "nothing to place" in capsys.readouterr().err
