"""Files every layer writes and reads: one atomic write, so that a reader (the dashboard, an export of a running
run, a resumed run) never sees half a file; one check, before any work, that a command can write where it was told
to; one reader of JSON files that says what is wrong with a bad one."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from placer.errors import OutputPathError


def write_atomically(path: str | Path, content: str | bytes) -> Path:
    """Write `content` to `path` through a temporary file renamed over it (atomic on one filesystem)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # missing directories: `check_output_file` allowed them
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


def check_output_file(path: str | Path | None, flag: str) -> None:
    """Refuse, before any work, a file path that the command given `flag` could not write when its work is done:
    the path is a directory, a directory above it is a file, or the nearest existing one cannot be written (missing
    directories below it are made when the file is written). None: nothing to check."""
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        raise OutputPathError(f"{flag} {path} is a directory: give a file's path, e.g. {path / 'out.json'}")
    _check_can_create_in(path.parent, flag, path)


def check_output_directory(path: str | Path | None, flag: str) -> None:
    """Refuse, before any work, a directory that the command given `flag` could not make or write files in."""
    if path is None:
        return
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputPathError(f"{flag} {path} is a file, not a directory: give a directory's path")
    _check_can_create_in(path, flag, path)


def _check_can_create_in(directory: Path, flag: str, asked: Path) -> None:
    """Refuse `asked` unless a file can be made in `directory`, or in the nearest existing directory above it."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise OutputPathError(f"{flag} {asked}: {existing} is a file, not a directory; give a path in a directory")
    try:  # permissions alone do not say (root passes every check, /proc refuses root): try it
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".placer-check-"):
            pass
    except OSError as error:
        raise OutputPathError(f"{flag} {asked}: cannot write in {existing} ({error.strerror or error}); give a path "
                              "in a directory you can write") from None


def read_json_file(path: str | Path, what: str, how_to_make: str, error: type[Exception]) -> Any:
    """The parsed JSON of the `what` (e.g. "plan file") at `path`; `error` (the reader's own class) with one line
    saying what is wrong (missing, a directory, unreadable, empty, binary, not JSON) and `how_to_make` one, never
    an OSError."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise error(f"there is no {what} {path}: {how_to_make}") from None
    except IsADirectoryError:
        raise error(f"{path} is a directory, not a {what}: {how_to_make}") from None
    except OSError as failure:
        raise error(f"cannot read {what} {path}: {failure.strerror}") from None
    if not raw.strip():
        raise error(f"{what} {path} is empty (it may not have been written completely): {how_to_make}")
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark from a Windows editor is still text
    except UnicodeDecodeError as failure:
        raise error(f"{path} is not a {what}: it holds binary data, not JSON text (byte 0x{raw[failure.start]:02x} "
                    f"at offset {failure.start} is not UTF-8); check the path: {how_to_make}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as failure:
        problem = failure.msg.removesuffix(" at")  # "Unterminated string starting at" is followed by the place
        raise error(f"{what} {path} is not valid JSON ({problem}, line {failure.lineno}, column "
                    f"{failure.colno}): {how_to_make}") from None


def _json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)
