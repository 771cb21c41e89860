"""Files every layer writes: one atomic write, so that a reader (the dashboard, an export of a running run,
a resumed run) never sees half a file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_atomically(path: str | Path, content: str | bytes) -> Path:
    """Write `content` to `path` through a temporary file renamed over it (atomic on one filesystem)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    if isinstance(content, bytes):
        tmp.write_bytes(content)
    else:
        tmp.write_text(content)
    tmp.replace(path)
    return path


def write_json(path: str | Path, data: Any) -> Path:
    """`data` as indented JSON, atomically; numpy scalars become numbers, anything else unknown a string."""
    return write_atomically(path, json.dumps(data, indent=1, default=_json_default))


def _json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)
