import pytest

from experiments.probes.op_attribution import compare_attributions, main


def _trace(*spans, pid=1):
    """A Chrome trace of one step: (node, start µs, end µs) on one device process."""
    return {"traceEvents": [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": "CPU:0 Compute"}}]
            + [{"ph": "X", "pid": pid, "tid": 0, "ts": begin, "dur": end - begin, "name": "MatMul",
                "args": {"name": name, "op": "MatMul"}} for name, begin, end in spans]}


def test_bad_arguments_are_refused_before_a_testbed_starts(no_testbed, capsys):
    for arguments in (["--rounds", "2"], ["--min-us", "0"]):
        with pytest.raises(SystemExit) as stopped:
            main(arguments)
        assert stopped.value.code == 2, arguments
    assert "at least 3 rounds" in capsys.readouterr().err


def test_an_op_run_inside_anothers_span_is_charged_its_run_where_even_sharing_halves_it():
    # With two threads, b ran entirely inside a's span (a's thread waited); with one thread each took its own time.
    two_threads = [_trace(("a", 0, 400), ("b", 100, 250)) for _ in range(3)]
    one_thread = [_trace(("a", 0, 250), ("b", 260, 410)) for _ in range(3)]
    compared = compare_attributions(two_threads, one_thread, min_seconds=100e-6)
    summary = compared["summary"]
    assert summary["ops"] == 2
    assert summary["started_last_median_abs_error_pct"] == pytest.approx(0.0, abs=1e-9)
    assert summary["even_median_abs_error_pct"] == pytest.approx(40.0)  # a: 325 for 250 (+30 %), b: 75 for 150 (-50 %)
    assert summary["started_last_ms"] == pytest.approx(summary["one_thread_ms"])
    by_op = {row["op"]: row for row in compared["ops"]}
    assert by_op["b"]["even_us"] == pytest.approx(75.0)
    assert by_op["b"]["started_last_us"] == pytest.approx(150.0)


def test_ops_too_short_to_compare_are_a_clear_error():
    trace = [_trace(("a", 0, 10)) for _ in range(3)]
    with pytest.raises(ValueError, match="lower --min-us"):
        compare_attributions(trace, trace, min_seconds=50e-6)
