"""The table of `placer optimize`: one row per candidate, on a real target (predicted and measured) and on a
modeled machine (simulated) alike, each row's step read against its bound and against the fastest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from agents.candidates import Candidate


@dataclass(frozen=True)
class Row:
    """One candidate's cells; a cell left None is a column this table does not have."""

    candidate: Candidate
    recommended: bool
    predicted: str
    x_bound: str
    vs_fastest: str
    measured: str | None = None
    spread: str | None = None


def milliseconds(seconds: float) -> str:
    return f"{seconds * 1e3:7.2f} ms"


def ratio(value: float | None) -> str:
    """"1.23x", or "-" where there is nothing to read against."""
    return "-" if value is None else f"{value:.2f}x"


def schedule_cell(candidate: Candidate) -> str:
    return "none" if candidate.schedule is None else f"{candidate.schedule.method} x{candidate.schedule.micro_batches}"


def replicas_cell(candidate: Candidate) -> str:
    """"1" for the whole batch, "4 x 8" for four replicas of 8 samples."""
    return "1" if candidate.replicas is None else f"{candidate.replicas.degree} x {candidate.replicas.batch}"


def candidate_table(rows: Sequence[Row], *, predicted_title: str = "predicted") -> list[str]:
    """The header and a line per row, in the order given, the recommended one marked *. The machine use is a
    column only where the rows use the machine in more than one way; measured and spread only where some row has
    them."""
    names = max([len("plan"), *(len(r.candidate.name) for r in rows)])
    machines = {str(r.candidate.machine) for r in rows}
    machine_width = max(len("machine use"), *(len(m) for m in machines)) if len(machines) > 1 else None
    measured = any(r.measured is not None for r in rows)
    predicted_width = max(10, len(predicted_title))

    def line(mark: str, name: str, machine: str, replicas: str, schedule: str, predicted: str, measured_cell: str,
             spread: str, x_bound: str, vs_fastest: str) -> str:
        cells = [f"  {mark:1} {name:<{names}}"]
        if machine_width is not None:
            cells.append(f" {machine:<{machine_width}}")
        cells.append(f" {replicas:<8} {schedule:<16} {predicted:>{predicted_width}}")
        if measured:
            cells.append(f" {measured_cell:>10} {spread:>6}")
        cells.append(f"  {x_bound:>7}  {vs_fastest}")
        return "".join(cells)

    lines = [line("", "plan", "machine use", "replicas", "schedule", predicted_title, "measured", "spread", "x bound",
                  "vs fastest")]
    for r in rows:
        c = r.candidate
        lines.append(line("*" if r.recommended else " ", c.name, str(c.machine), replicas_cell(c), schedule_cell(c),
                          r.predicted, r.measured or "-", r.spread or "-", r.x_bound, r.vs_fastest))
    return lines
