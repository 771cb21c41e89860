"""The one table of `placer optimize` (agents.candidate_table): a row per candidate, the recommended marked, the
machine use a column only where rows use the machine differently, measured columns only where something was."""

from agents.candidate_table import Row, candidate_table
from agents.candidates import Candidate
from placer.replicas import Replicas


def _row(name, machine, recommended=False, replicas=None, measured=None):
    candidate = Candidate(name, ("placement",), machine, None, replicas=replicas)
    return Row(candidate, recommended, "   1.00 ms", "1.10x", "1.00x", measured, None if measured is None else "5%")


def test_rows_on_one_machine_have_no_machine_column_and_simulated_rows_no_measured_column():
    header, *rows = candidate_table([_row("metis", "modeled:4xH100", recommended=True),
                                     _row("data parallel x4", "modeled:4xH100", replicas=Replicas.of_batch(64, 4))],
                                    predicted_title="simulated")
    assert header.split() == ["plan", "replicas", "schedule", "simulated", "x", "bound", "vs", "fastest"]
    assert rows[0].split() == ["*", "metis", "1", "none", "1.00", "ms", "1.10x", "1.00x"]
    assert rows[1].split()[:5] == ["data", "parallel", "x4", "4", "x"]


def test_rows_on_several_machine_uses_say_each_and_what_was_measured():
    header, one_process, placed = candidate_table([_row("one process, default", "inprocess:1", measured="   2.00 ms"),
                                                   _row("metis", "local:2", recommended=True, measured="   1.50 ms")])
    assert "machine use" in header and "measured" in header and "spread" in header
    assert one_process.split()[:4] == ["one", "process,", "default", "inprocess:1"]
    assert placed.lstrip().startswith("* metis") and "local:2" in placed and "1.50 ms" in placed
    assert one_process[header.index("replicas")] == "1"  # each cell under its title
