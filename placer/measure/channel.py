"""Length-prefixed pickle frames over a pair of pipes: how the caller and the measurement worker talk.

Pipes cross network namespaces, so the caller can stay outside the testbed's private namespace.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import time
from typing import Any

_HEADER = struct.Struct("!Q")


class ChannelClosed(EOFError):
    """The other side closed its end (it exited or crashed)."""


class ChannelTimeout(TimeoutError):
    """No complete reply arrived in time."""


def send(fd: int, message: Any) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    data = memoryview(_HEADER.pack(len(payload)) + payload)
    while data:
        written = os.write(fd, data)
        data = data[written:]


def receive(fd: int, timeout: float | None = None) -> Any:
    deadline = None if timeout is None else time.monotonic() + timeout
    (length,) = _HEADER.unpack(_read_exactly(fd, _HEADER.size, deadline))
    return pickle.loads(_read_exactly(fd, length, deadline))


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes:
    chunks = []
    while size:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise ChannelTimeout()
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise ChannelClosed()
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
