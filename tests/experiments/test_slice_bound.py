"""The slice-bound probe: a GPU benchmark's plans read against the least of each count of slices' bound."""

import json

import pytest

from experiments.probes.slice_bound import main, searched_slices


def test_the_counts_of_slices_are_those_the_search_makes_plans_of():
    # 8 GPUs, batch 64: replicas of 8, 4, 2; schedules over 8, 16, 32; replicas of 4 and 2 GPUs as pipelines
    # over one and two micro-batches a GPU (4 x 2 x 1, 4 x 2 x 2, 2 x 4 x 1, 2 x 4 x 2)
    assert searched_slices(8, 64, (8, 16, 32)) == [2, 4, 8, 16, 32]
    assert searched_slices(2, 8, ()) == [2]
    assert searched_slices(4, 6, ()) == [2]  # 4 replicas do not divide 6 samples; 2 replicas of 2 GPUs: 3 % 2


def test_a_setup_the_results_lack_is_refused_before_anything_is_built(tmp_path, capsys):
    results = tmp_path / "gpu_machines.json"
    results.write_text(json.dumps({"rows": [{"setup": "two-tower:tiny@2xH100"}]}))
    with pytest.raises(SystemExit) as stopped:
        main(["--results", str(results), "--setups", "gpt2:paper@8xH100"])
    assert stopped.value.code == 2
    assert "has no setup gpt2:paper@8xH100; it has two-tower:tiny@2xH100" in capsys.readouterr().err


def test_a_benchmark_row_is_read_against_a_bound_at_least_as_tight_as_the_one_it_had(tmp_path):
    """Two-tower (tiny, batch 64) on 2 modeled H100s, searched as the benchmark searches it: every priced plan is at
    or above the least of its counts' bounds, which is at least the bound the search read it against."""
    from agents.optimize_modeled import search_modeled

    search = search_modeled("two-tower", "tiny", "modeled:2xH100", micro_batches=2, replica_degrees=(2,))
    best = min(c.predicted_seconds for c in search.candidates if c.priced)
    row = {"setup": "two-tower:tiny@2xH100", "model": "two-tower tiny", "machine": "modeled:2xH100",
           "micro_batch_counts": [2], "machine_bound_ms": search.machine_bound.value * 1e3, "best": "fastest",
           "best_ms": best * 1e3, "baseline_ms": best * 1e3 * 1.1, "planner_ms": best * 1e3,
           "heuristics_refined_ms": best * 1e3 * 1.05}
    results = tmp_path / "gpu_machines.json"
    results.write_text(json.dumps({"rows": [row]}))
    out = tmp_path / "slice_bound.json"
    assert main(["--results", str(results), "--out", str(out)]) == 0
    (read,) = json.loads(out.read_text())["rows"]
    assert set(read["slices_bounds_ms"]) == {"1", "2"}
    assert read["slice_bound_ms"] == pytest.approx(search.machine_bound.value * 1e3)
    assert read["slice_bound_ms"] <= read["best_ms"] * (1 + 1e-9)
    assert read["planner_closed_now_pct"] > read["heuristics_refined_closed_now_pct"] > 0
