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

import errno
import hashlib
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import structlog

from .clock import Clock

GENESIS = "0" * 64
CHAIN_FIELDS = ("seq", "prev_hash", "hash")
# Records kept in memory while the file cannot be written; past this the
# oldest non-durable one is dropped (and the count recorded once writes work).
MAX_BACKLOG = 10_000
# os.write: (fd, bytes) -> bytes written; injectable to test failing disks.
Writer = Callable[[int, bytes], int]
log = structlog.get_logger("ans.audit")


def rfc3339(ts: datetime) -> str:
    return ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def record_hash(rec: dict[str, Any]) -> str:
    """SHA-256 of a record's sorted-key JSON without its ``hash`` field."""
    body = {k: v for k, v in rec.items() if k != "hash"}
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


class AuditLog:
    """Append-only, hash-chained JSON-lines audit log (thread-safe).

    A record is chained (``seq``, ``prev_hash``, ``hash``) only once its line
    is on disk: each line goes out in one unbuffered append, and a write that
    fails (disk full, I/O error; also a failed fsync with ``fsync=True``) is
    cut off again, so the file always ends with a whole, chained record.
    :meth:`record` never raises for such a failure: the record waits in a
    bounded in-memory backlog, the failure is logged as an error, and the
    backlog is written, in order, before any later record. A caller that must
    not go on without a durable record (a registry state change) keeps its own
    durable copy and asks :meth:`writable` first (see ``ans.audited``).
    """

    def __init__(
        self,
        path: Path,
        clock: Clock,
        *,
        fsync: bool = False,
        write: Writer = os.write,
        max_backlog: int = MAX_BACKLOG,
    ) -> None:
        self.path = path
        self._clock = clock
        self._fsync = fsync
        self._write = write
        self._max_backlog = max_backlog
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = self._repair_tail()
        self._seq, self._prev = self._tail()
        # (entry, durable) not yet on disk, oldest first; durable entries are
        # kept elsewhere too (the registry's audit outbox) and never dropped.
        self._backlog: deque[tuple[dict[str, Any], bool]] = deque()
        self._dropped = 0
        self._cut_pending = False
        # Called with (entry, written) after every append: metrics, never policy.
        self.observers: list[Callable[[dict[str, Any], bool], None]] = []

    def _repair_tail(self) -> int:
        """Cut a torn last line (no newline: a write cut short by a power loss
        or by an older ANS) so that new records chain onto a whole one."""
        size = os.fstat(self._fd).st_size
        if size == 0:
            return 0
        with open(self.path, "rb") as fh:
            fh.seek(max(0, size - 65536))
            tail = fh.read()
        if tail.endswith(b"\n"):
            return size
        keep = size - len(tail) + tail.rfind(b"\n") + 1 if b"\n" in tail else 0
        if keep == 0 and size > len(tail):
            return size  # one line longer than 64 KiB: not ours, leave it to verify
        os.ftruncate(self._fd, keep)
        log.error(
            "audit log ended in a torn line; cut it off",
            path=str(self.path),
            bytes_dropped=size - keep,
        )
        return keep

    def _tail(self) -> tuple[int, str]:
        if self._size == 0:
            return 0, GENESIS
        with open(self.path, "rb") as fh:
            fh.seek(max(0, self._size - 65536))
            lines = fh.read(self._size).splitlines()
        last = lines[-1]
        try:
            seq = int(orjson.loads(last).get("seq", 0))
        except (orjson.JSONDecodeError, ValueError, AttributeError):
            seq = 0
        return seq, hashlib.sha256(last).hexdigest()

    def entry(self, event: str, **fields: Any) -> dict[str, Any]:
        """A record as of now, not yet chained (no seq, prev_hash or hash)."""
        rec = {**fields, "time": rfc3339(self._clock()), "event": event}
        for name in CHAIN_FIELDS:
            rec.pop(name, None)  # the chain's own fields always win
        return rec

    def record(self, event: str, **fields: Any) -> dict[str, Any] | None:
        """Append one record; the chained record as written, or None when it
        could not be written yet (it waits in the backlog; logged)."""
        return self.append(self.entry(event, **fields))

    def append(self, entry: dict[str, Any], *, durable: bool = False) -> dict[str, Any] | None:
        """Append an :meth:`entry` after any backlog. ``durable``: the caller
        keeps a durable copy, so the entry is never dropped from the backlog."""
        with self._lock:
            self._backlog.append((entry, durable))
            written = self._drain()
            if written is None or self._backlog:
                self._bound_backlog()
                written = None
        for observe in self.observers:
            observe(entry, written is not None)
        return written

    def writable(self) -> bool:
        """Write the backlog; True when nothing is left waiting."""
        with self._lock:
            if self._backlog or self._dropped:
                self._drain()
            return not self._backlog

    @property
    def backlog(self) -> int:
        with self._lock:
            return len(self._backlog)

    def sync(self) -> None:
        """fsync the file (raises OSError)."""
        with self._lock:
            os.fsync(self._fd)

    def _bound_backlog(self) -> None:
        while len(self._backlog) > self._max_backlog:
            for i, (_, durable) in enumerate(self._backlog):
                if not durable:
                    del self._backlog[i]
                    self._dropped += 1
                    break
            else:
                return

    def _drain(self) -> dict[str, Any] | None:
        """Write the backlog in order; the last record written, None if the
        first write failed. Stops at the first failure."""
        last = None
        while self._backlog or self._dropped:
            if self._dropped:
                entry: dict[str, Any] = self.entry("audit_records_dropped", count=self._dropped)
            else:
                entry = self._backlog[0][0]
            rec = {**entry, "seq": self._seq + 1, "prev_hash": self._prev}
            rec["hash"] = record_hash(rec)
            line = orjson.dumps(rec, option=orjson.OPT_SORT_KEYS)
            try:
                self._append_line(line + b"\n")
            except OSError as exc:
                log.error(
                    "audit log write failed; the record waits in memory",
                    path=str(self.path),
                    error=str(exc),
                    audit_event=entry.get("event"),
                    backlog=len(self._backlog),
                )
                return None
            self._seq += 1
            self._prev = hashlib.sha256(line).hexdigest()
            if self._dropped:
                log.error("audit records were dropped", count=self._dropped)
                self._dropped = 0
            else:
                self._backlog.popleft()
            last = rec
        return last

    def _append_line(self, data: bytes) -> None:
        """All of ``data`` at the end of the file, or nothing (raises OSError)."""
        if self._cut_pending:
            os.ftruncate(self._fd, self._size)
            self._cut_pending = False
        try:
            done = 0
            while done < len(data):
                n = self._write(self._fd, data[done:])
                if n <= 0:
                    raise OSError(errno.ENOSPC, "short write to the audit log")
                done += n
            if self._fsync:
                os.fsync(self._fd)
        except OSError:
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:
                self._cut_pending = True  # retried before the next write
            raise
        self._size += len(data)

    def last_value(self, name: str) -> Any:
        """The value of field ``name`` in the last record that has it (None if
        none does), reading the file backwards."""
        with self._lock, open(self.path, "rb") as fh:
            end = self._size
            carry = b""
            while end > 0:
                start = max(0, end - 65536)
                fh.seek(start)
                block = fh.read(end - start) + carry
                lines = block.split(b"\n")
                carry = lines[0] if start > 0 else b""
                for line in reversed(lines if start == 0 else lines[1:]):
                    if name.encode() in line:
                        rec = _parse(line)
                        if rec is not None and name in rec:
                            return rec[name]
                end = start
        return None

    def close(self) -> None:
        with self._lock:
            if self._backlog:
                log.error(
                    "audit log closed with records not written",
                    path=str(self.path),
                    backlog=len(self._backlog),
                )
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


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
                    1,
                    "truncated_head",
                    f"the log starts at seq {seq}; records 1..{seq - 1} are missing",
                )
            if nxt is not None and nxt.get("seq") == expected:
                return ChainBreak(n, "reordered", f"record seq {seq} comes before seq {expected}")
            missing = f"seq {expected}" if seq == expected + 1 else f"seq {expected}..{seq - 1}"
            return ChainBreak(n, "deleted", f"record {missing} is missing before this line")
        else:
            return ChainBreak(n, "reordered", f"record seq {seq} comes after seq {expected - 1}")
        prev = hashlib.sha256(line).hexdigest()
        expected += 1
