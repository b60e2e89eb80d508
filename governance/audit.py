"""The audit log: security-relevant events as JSON lines, separate from the
operational (structlog) log.

Each record carries ``seq`` (1, 2, 3, ...), ``prev_hash`` (SHA-256 of the
previous line's bytes, 64 zeros for the first) and ``hash`` (SHA-256 of the
record's own sorted-key JSON without ``hash``). So an edited record fails its
own hash (or, if the editor recomputed it, the next record's ``prev_hash``),
a deleted one leaves a gap in ``seq``, and a reordered pair shows up as seq
going backwards; :func:`verify_chain` names the first such record.

A hash chain cannot show that records were cut off the *end*: compare the
head (``seq`` and hash of the last line, printed by ``ans audit verify``)
with a copy kept elsewhere.
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


def record_hash(rec: dict[str, Any]) -> str:
    """SHA-256 of a record's sorted-key JSON without its ``hash`` field."""
    body = {k: v for k, v in rec.items() if k != "hash"}
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


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
            rec.pop("hash", None)
            rec["hash"] = record_hash(rec)
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
    """The first record that is not as it was written.

    ``kind`` is ``edited``, ``deleted``, ``reordered`` or ``truncated_head``;
    ``line`` is 1-based in the file as it is now."""

    line: int
    kind: str
    reason: str


@dataclass(frozen=True, slots=True)
class ChainHead:
    records: int
    seq: int
    hash: str


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        rec = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return rec if isinstance(rec, dict) else None


def verify_chain(lines: Iterable[bytes]) -> ChainBreak | None:
    """None if every record is intact and in place; else the first break."""
    result = check_chain(lines)
    return result if isinstance(result, ChainBreak) else None


def check_chain(lines: Iterable[bytes]) -> ChainBreak | ChainHead:
    """Walk the log once (one line of look-ahead) and return the first break,
    or the head of an intact chain."""
    prev = GENESIS
    expected = 1
    n = 0
    it = iter(lines)
    pending: bytes | None = None
    while True:
        if pending is not None:
            raw, pending = pending, None
        else:
            try:
                raw = next(it)
            except StopIteration:
                return ChainHead(n, expected - 1, prev)
        n += 1
        line = raw.rstrip(b"\n")
        rec = _parse(line)
        if rec is None:
            return ChainBreak(n, "edited", "not a valid JSON object")
        if "hash" in rec and rec["hash"] != record_hash(rec):
            return ChainBreak(n, "edited", f"record seq {rec.get('seq')} does not match its hash")
        seq = rec.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool):
            return ChainBreak(n, "edited", "record has no integer seq")
        if seq == expected:
            if rec.get("prev_hash") != prev:
                if n == 1:
                    return ChainBreak(
                        1, "truncated_head", f"the log starts at seq {seq} without genesis"
                    )
                return ChainBreak(
                    n - 1,
                    "edited",
                    f"record seq {seq - 1} was changed after record seq {seq} was written "
                    "(prev_hash does not match)",
                )
        elif seq > expected:
            try:
                pending = next(it)
            except StopIteration:
                pending = None
            nxt = _parse(pending.rstrip(b"\n")) if pending is not None else None
            if n == 1 and expected == 1 and (nxt is None or nxt.get("seq") != expected):
                return ChainBreak(
                    1, "truncated_head", f"the log starts at seq {seq}; records 1..{seq - 1} "
                    "are missing"
                )
            if nxt is not None and nxt.get("seq") == expected:
                return ChainBreak(
                    n, "reordered", f"record seq {seq} comes before seq {expected}"
                )
            missing = f"seq {expected}" if seq == expected + 1 else f"seq {expected}..{seq - 1}"
            return ChainBreak(n, "deleted", f"record {missing} is missing before this line")
        else:
            return ChainBreak(
                n, "reordered", f"record seq {seq} comes after seq {expected - 1}"
            )
        prev = hashlib.sha256(line).hexdigest()
        expected += 1
