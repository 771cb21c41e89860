"""The coverage benchmark: every keras.applications family and the Keras 3 sequence models, each a row (its error
when it fails), with predicted against measured step time from `placer optimize`'s JSON."""

import pytest

from experiments.model_coverage import (APPLICATIONS, IMAGE_MODELS, SEQUENCE_MODELS, coverage_row, errors_of, model_specs,
                                        parse_args, run_logged)

FAMILIES = ["resnet", "resnet-v2", "vgg", "xception", "inception-v3", "inception-resnet-v2", "mobilenet",
            "mobilenet-v2", "mobilenet-v3", "densenet", "nasnet", "efficientnet", "efficientnet-v2", "convnext",
            "regnet"]


def _result():
    def row(name, predicted, median, ok=True):
        return {"name": name, "ok": ok, "median": median,
                "predicted": None if predicted is None else {"seconds": predicted, "ok": True}}

    return {"recommended": "one process, default", "ops": 830, "notes": ["a note"],
            "phase_seconds": {"building the graph": 2.0, "profiling": 30.0, "measuring": 60.0},
            "measured": [row("one process, default", None, 0.002), row("metis", 0.003, 0.004),
                         row("round-robin", 0.010, 0.005), row("scotch", 0.004, None, ok=False)]}


def test_every_family_and_sequence_model_is_a_row():
    specs = model_specs()
    assert set(FAMILIES) == set(APPLICATIONS) | set(IMAGE_MODELS) and set(FAMILIES) <= set(specs)
    assert {"lstm", "gru", "bidirectional-lstm", "stacked-lstm", "attention-encoder"} == set(SEQUENCE_MODELS)
    assert specs["lstm-seq2seq"][1] == "placer.models.heldout:keras_lstm_seq2seq_graph"


def test_a_row_has_predicted_against_measured_over_the_placements_the_twin_priced():
    assert errors_of(_result()) == pytest.approx([0.25, 1.0])
    row = coverage_row("lstm", "Keras 3 sequence", _result(), 100.0, "ok")
    assert row["ops"] == 830 and row["recommended_ms"] == pytest.approx(2.0) and row["placements_compared"] == 2
    assert row["median_error"] == pytest.approx(0.625) and row["worst_error"] == pytest.approx(1.0)
    assert row["profile_s"] == 30.0 and row["status"] == "ok"


def test_a_model_that_failed_is_a_row_with_its_error():
    row = coverage_row("nasnet", "keras.applications", None, 1300.0, "ran past --timeout 1200 s")
    assert row == {"model": "nasnet", "family": "keras.applications", "wall_s": 1300.0,
                   "status": "ran past --timeout 1200 s"}


def test_a_run_stopped_at_its_timeout_keeps_its_log_and_says_where_it_was(tmp_path):
    import sys

    log = tmp_path / "model.log"
    slow = "import sys, time; print('measuring 11 candidates', file=sys.stderr, flush=True); time.sleep(30)"
    done, status = run_logged([sys.executable, "-c", slow], log, timeout=3)
    assert done is None and status == "ran past --timeout 3 s; last: measuring 11 candidates"
    assert "measuring 11 candidates" in log.read_text()
    failed = "import sys; print('one\\ntwo', file=sys.stderr); sys.exit(2)"
    done, status = run_logged([sys.executable, "-c", failed], log, timeout=30)
    assert done.returncode == 2 and status == "exit 2: two"


def test_unknown_models_and_a_bad_budget_are_refused(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--models", "resnet", "alexnet"])
    assert "unknown models alexnet" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--budget", "0"])
    assert parse_args(["--budget", "100"]).timeout == 700


@pytest.mark.slow
def test_a_recurrent_model_goes_through_placer_optimize_on_the_testbed(tmp_path):
    from experiments.model_coverage import main

    main(["--models", "lstm", "--budget", "150", "--out", str(tmp_path / "coverage.json"),
          "--calibration", str(tmp_path / "calibration.json")])
    import json

    (row,) = json.loads((tmp_path / "coverage.json").read_text())["rows"]
    assert row["status"] == "ok" and row["placements_compared"] >= 3, row
    assert (tmp_path / "coverage" / "lstm.plan.json").is_file()


def test_a_stopped_run_resumes_from_the_results_it_saved(tmp_path, monkeypatch):
    import json

    import experiments.model_coverage as coverage

    (tmp_path / "coverage").mkdir()
    (tmp_path / "coverage" / "lstm.optimize.json").write_text(json.dumps({**_result(), "seconds": 80.0}))
    ran = []
    monkeypatch.setattr(coverage, "run_one", lambda name, *rest: ran.append(name) or (None, 5.0, "exit 1: boom"))
    coverage.main(["--models", "lstm", "gru", "--resume", "--out", str(tmp_path / "coverage.json"),
                   "--calibration", str(tmp_path / "calibration.json")])
    rows = {row["model"]: row for row in json.loads((tmp_path / "coverage.json").read_text())["rows"]}
    assert ran == ["gru"]  # lstm was read back, not run again
    assert rows["lstm"]["status"] == "ok" and rows["lstm"]["wall_s"] == 80.0 and rows["lstm"]["ops"] == 830
    assert rows["gru"]["status"] == "exit 1: boom"
