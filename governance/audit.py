"""The audit log: security-relevant events as JSON lines, separate from the
operational (structlog) log.

Each record carries ``seq`` and ``prev_hash`` (SHA-256 of the previous
line's bytes), so an edited, reordered or deleted record breaks the chain;
:func:`verify_chain` reports the first break.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

GENESIS = "0" * 64
Clock = Callable[[], datetime]


def rfc3339(ts: datetime) -> str:
    return ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class AuditLog:
    """Append-only, hash-chained JSON-lines audit log (thread-safe)."""

    def __init__(self, path: Path, clock: Clock, *, fsync: bool = False) -> None:
        self.path = path
        self._clock = clock
        self._fsync = fsync
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._seq, self._prev = self._tail()
        self._fh = open(path, "ab")

    def _tail(self) -> tuple[int, str]:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return 0, GENESIS
        with open(self.path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 65536))
            lines = fh.read().splitlines()
        last = lines[-1]
        try:
            seq = int(orjson.loads(last).get("seq", 0))
        except (orjson.JSONDecodeError, ValueError, AttributeError):
            seq = 0
        return seq, hashlib.sha256(last).hexdigest()

    def record(self, event: str, **fields: Any) -> dict[str, Any]:
        with self._lock:
            self._seq += 1
            # The chain's own fields always win over caller-supplied ones.
            rec = {
                **fields,
                "seq": self._seq,
                "time": rfc3339(self._clock()),
                "event": event,
                "prev_hash": self._prev,
            }
            line = orjson.dumps(rec, option=orjson.OPT_SORT_KEYS)
            self._fh.write(line + b"\n")
            self._fh.flush()
            if self._fsync:
                os.fsync(self._fh.fileno())
            self._prev = hashlib.sha256(line).hexdigest()
            return rec

    def close(self) -> None:
        with self._lock:
            self._fh.close()


@dataclass(frozen=True, slots=True)
class ChainBreak:
    line: int
    reason: str


def verify_chain(lines: Iterable[bytes]) -> ChainBreak | None:
    """None if every record links to its predecessor; else the first break."""
    prev = GENESIS
    expected_seq = 1
    for n, raw in enumerate(lines, start=1):
        line = raw.rstrip(b"\n")
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            return ChainBreak(n, "not valid JSON")
        if not isinstance(rec, dict) or rec.get("prev_hash") != prev:
            return ChainBreak(n, "prev_hash does not match the previous record")
        if rec.get("seq") != expected_seq:
            return ChainBreak(n, f"seq {rec.get('seq')} where {expected_seq} was expected")
        prev = hashlib.sha256(line).hexdigest()
        expected_seq += 1
    return None
