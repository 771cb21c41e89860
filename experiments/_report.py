"""Shared output of the experiment scripts: an aligned table on stdout and the same rows as JSON."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

from placer.host import processor_model


def write_report(name: str, columns: Sequence[str], rows: Sequence[dict[str, Any]], out: str | None, **facts: Any) -> Path:
    print_table(columns, rows)
    path = Path(out or f"results/{name}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"experiment": name, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": processor_model(),
              **facts, "rows": list(rows)}
    path.write_text(json.dumps(record, indent=1, default=str))
    print(f"\nwrote {path}")
    return path


def print_table(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> None:
    """`rows` as aligned columns on stdout (missing values blank, floats to 4 significant digits)."""
    widths = [max(len(c), *(len(_cell(r.get(c))) for r in rows)) for c in columns]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    for row in rows:
        print("  ".join(_cell(row.get(c)).ljust(w) for c, w in zip(columns, widths)))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)
