"""Hash-chained JSON-lines audit log (``ans.governance.audit``)."""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
import structlog
from ans.governance.audit import (
    GENESIS,
    AuditLog,
    ChainBreak,
    ChainHead,
    check_chain,
    record_hash,
    rfc3339,
    verify_chain,
)

FIXED = datetime(2026, 1, 1, tzinfo=UTC)


def clock() -> datetime:
    return FIXED


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "audit" / "audit.jsonl"


@pytest.fixture
def log(path: Path) -> Iterator[AuditLog]:
    audit = AuditLog(path, clock)
    yield audit
    audit.close()


def write_records(audit: AuditLog, n: int) -> None:
    for i in range(1, n + 1):
        audit.record("scope_violation", status=451, agent_id=f"agent-{i}", task_id=None)


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def test_records_are_chained_json_lines(log: AuditLog, path: Path) -> None:
    write_records(log, 4)
    raw = lines(path)
    assert len(raw) == 4
    assert all(line.endswith(b"\n") for line in raw)
    records = [orjson.loads(line) for line in raw]
    assert [r["seq"] for r in records] == [1, 2, 3, 4]
    assert records[0]["prev_hash"] == GENESIS == "0" * 64
    for prev_line, rec in zip(raw, records[1:]):
        assert rec["prev_hash"] == hashlib.sha256(prev_line.rstrip(b"\n")).hexdigest()
    assert records[2]["event"] == "scope_violation"
    assert records[2]["agent_id"] == "agent-3"
    assert records[2]["status"] == 451
    assert records[2]["task_id"] is None
    assert all(r["time"] == "2026-01-01T00:00:00.000Z" for r in records)


def test_record_returns_what_was_written(log: AuditLog, path: Path) -> None:
    rec = log.record("activate", canonical_id="abc")
    assert orjson.loads(lines(path)[0]) == rec
    body = {
        "seq": 1,
        "time": "2026-01-01T00:00:00.000Z",
        "event": "activate",
        "canonical_id": "abc",
        "prev_hash": GENESIS,
    }
    assert rec == {**body, "hash": record_hash(body)}
    assert rec["hash"] == hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def test_rfc3339() -> None:
    assert (
        rfc3339(datetime(2026, 1, 1, 12, 30, 5, 123456, tzinfo=UTC)) == "2026-01-01T12:30:05.123Z"
    )


def test_intact_log_verifies(log: AuditLog, path: Path) -> None:
    write_records(log, 5)
    assert verify_chain(lines(path)) is None
    assert verify_chain(path.read_bytes().splitlines()) is None  # without newlines too


def test_empty_log_verifies() -> None:
    assert verify_chain([]) is None


def _rewrite(raw: list[bytes], i: int, rehash: bool, **changes: object) -> None:
    rec = orjson.loads(raw[i])
    rec.update(changes)
    if rehash:  # an editor who knows the scheme recomputes the record's own hash
        rec["hash"] = record_hash(rec)
    raw[i] = orjson.dumps(rec, option=orjson.OPT_SORT_KEYS) + b"\n"


def test_edited_field_is_named_by_its_own_line(log: AuditLog, path: Path) -> None:
    write_records(log, 4)
    raw = lines(path)
    _rewrite(raw, 1, rehash=False, agent_id="someone-else")
    result = verify_chain(raw)
    assert result is not None
    assert (result.line, result.kind) == (2, "edited")
    assert "seq 2" in result.reason


def test_edited_and_rehashed_record_is_caught_by_the_next_prev_hash(
    log: AuditLog, path: Path
) -> None:
    write_records(log, 4)
    raw = lines(path)
    _rewrite(raw, 1, rehash=True, status=200)
    result = verify_chain(raw)
    assert result is not None
    assert (result.line, result.kind) == (2, "edited")  # the edited record, not its successor


def test_edited_last_line(log: AuditLog, path: Path) -> None:
    write_records(log, 3)
    raw = lines(path)
    plain = list(raw)
    _rewrite(plain, 2, rehash=False, agent_id="edited")
    assert verify_chain(plain) == ChainBreak(
        3, "edited", "record seq 3 does not match its hash"
    )
    # Documented limit: a rehashed last record has no successor to betray it;
    # the head (seq + hash) must be compared with a copy kept elsewhere.
    _rewrite(raw, 2, rehash=True, agent_id="edited")
    head = check_chain(raw)
    assert isinstance(head, ChainHead)
    assert head.hash != check_chain(lines(path)).hash  # type: ignore[union-attr]


def test_deleted_line_breaks(log: AuditLog, path: Path) -> None:
    write_records(log, 4)
    raw = lines(path)
    del raw[1]
    result = verify_chain(raw)
    assert result is not None
    assert (result.line, result.kind) == (2, "deleted")
    assert "seq 2 is missing" in result.reason


def test_deleted_run_of_lines(log: AuditLog, path: Path) -> None:
    write_records(log, 6)
    raw = lines(path)
    del raw[2:5]
    result = verify_chain(raw)
    assert result == ChainBreak(3, "deleted", "record seq 3..5 is missing before this line")


@pytest.mark.parametrize("first", [0, 1, 2])
def test_swapped_lines_break(log: AuditLog, path: Path, first: int) -> None:
    write_records(log, 4)
    raw = lines(path)
    raw[first], raw[first + 1] = raw[first + 1], raw[first]
    result = verify_chain(raw)
    assert result is not None
    assert (result.line, result.kind) == (first + 1, "reordered")


def test_truncated_head_breaks(log: AuditLog, path: Path) -> None:
    write_records(log, 3)
    result = verify_chain(lines(path)[1:])
    assert result is not None and (result.line, result.kind) == (1, "truncated_head")


def test_garbage_line_reported(log: AuditLog, path: Path) -> None:
    write_records(log, 3)
    raw = lines(path)
    raw[1] = b"{not json\n"
    assert verify_chain(raw) == ChainBreak(2, "edited", "not a valid JSON object")


def test_wrong_seq_with_correct_hash_reported() -> None:
    first = orjson.dumps(
        {"event": "a", "prev_hash": GENESIS, "seq": 1}, option=orjson.OPT_SORT_KEYS
    )
    second = orjson.dumps(
        {"event": "b", "prev_hash": hashlib.sha256(first).hexdigest(), "seq": 5},
        option=orjson.OPT_SORT_KEYS,
    )
    result = verify_chain([first, second])
    assert result is not None
    assert (result.line, result.kind) == (2, "deleted")
    assert "seq 2..4" in result.reason


def test_intact_chain_reports_its_head(log: AuditLog, path: Path) -> None:
    write_records(log, 3)
    raw = lines(path)
    head = check_chain(raw)
    assert head == ChainHead(3, 3, hashlib.sha256(raw[2].rstrip(b"\n")).hexdigest())


def test_reopen_continues_chain(path: Path) -> None:
    first = AuditLog(path, clock)
    write_records(first, 3)
    first.close()
    second = AuditLog(path, clock)
    rec = second.record("activate", canonical_id="abc")
    second.record("discover", task_id="t-1")
    second.close()
    assert rec["seq"] == 4
    raw = lines(path)
    assert [orjson.loads(line)["seq"] for line in raw] == [1, 2, 3, 4, 5]
    assert rec["prev_hash"] == hashlib.sha256(raw[2].rstrip(b"\n")).hexdigest()
    assert verify_chain(raw) is None


def test_reopen_empty_file_starts_at_genesis(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    audit = AuditLog(path, clock)
    rec = audit.record("x")
    audit.close()
    assert rec["seq"] == 1 and rec["prev_hash"] == GENESIS


def test_caller_fields_cannot_corrupt_chain(log: AuditLog, path: Path) -> None:
    # Caller-supplied fields must not override the chain's own bookkeeping:
    # a log written only through record() must always verify.
    log.record("first")
    log.record("second", seq=99, time="forged")
    log.record("third")
    records = [orjson.loads(line) for line in lines(path)]
    assert [r["seq"] for r in records] == [1, 2, 3]
    assert verify_chain(lines(path)) is None


# -- a disk that fails (injected writer): the chain stays whole ---------------------------
class Disk:
    """os.write, until ``full``: then ENOSPC, after writing ``partial`` bytes
    of the line (a short write, as a filling disk gives)."""

    def __init__(self) -> None:
        self.full = False
        self.partial = 0

    def __call__(self, fd: int, data: bytes) -> int:
        if not self.full:
            return os.write(fd, data)
        if self.partial and len(data) > self.partial:
            return os.write(fd, data[: self.partial])
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("partial", [0, 17])
def test_failed_write_leaves_the_chain_whole_and_is_written_later(
    path: Path, partial: int
) -> None:
    disk = Disk()
    audit = AuditLog(path, clock, write=disk)
    write_records(audit, 2)
    before = path.read_bytes()
    disk.full, disk.partial = True, partial
    with structlog.testing.capture_logs() as logs:
        assert audit.record("scope_violation", status=451, agent_id="a-3") is None
        assert audit.record("scope_violation", status=451, agent_id="a-4") is None
    assert path.read_bytes() == before  # nothing half-written stays behind
    assert audit.backlog == 2
    assert not audit.writable()
    assert [e["log_level"] for e in logs] == ["error", "error"]
    assert "audit log write failed" in logs[0]["event"]
    assert isinstance(check_chain(lines(path)), ChainHead)
    disk.full = False
    rec = audit.record("scope_violation", status=451, agent_id="a-5")
    assert rec is not None and rec["seq"] == 5
    audit.close()
    records = [orjson.loads(x) for x in lines(path)]
    assert [r["seq"] for r in records] == [1, 2, 3, 4, 5]
    assert [r["agent_id"] for r in records] == [f"agent-{i}" for i in (1, 2)] + [
        "a-3",
        "a-4",
        "a-5",
    ]
    head = check_chain(lines(path))
    assert head == ChainHead(5, 5, hashlib.sha256(lines(path)[-1].rstrip(b"\n")).hexdigest())


def test_failed_write_then_reopen_continues_the_chain(path: Path) -> None:
    disk = Disk()
    audit = AuditLog(path, clock, write=disk)
    write_records(audit, 1)
    disk.full, disk.partial = True, 5
    audit.record("scope_violation", status=451, agent_id="lost")
    audit.close()  # the backlog is lost with the process; the file is whole
    again = AuditLog(path, clock)
    write_records(again, 2)
    again.close()
    assert isinstance(check_chain(lines(path)), ChainHead)
    assert [orjson.loads(x)["seq"] for x in lines(path)] == [1, 2, 3]


def test_backlog_is_bounded_and_drops_are_recorded(path: Path) -> None:
    disk = Disk()
    audit = AuditLog(path, clock, write=disk, max_backlog=3)
    disk.full = True
    audit.append(audit.entry("activation", canonical_id="kept"), durable=True)
    for i in range(5):
        audit.record("scope_violation", agent_id=f"r-{i}")
    assert audit.backlog == 3
    disk.full = False
    assert audit.writable()
    audit.close()
    records = [orjson.loads(x) for x in lines(path)]
    assert records[0]["event"] == "audit_records_dropped" and records[0]["count"] == 3
    assert records[1]["canonical_id"] == "kept"  # a durable record is never dropped
    assert [r.get("agent_id") for r in records[2:]] == ["r-3", "r-4"]
    assert isinstance(check_chain(lines(path)), ChainHead)


def test_torn_last_line_is_cut_at_open(path: Path) -> None:
    audit = AuditLog(path, clock)
    write_records(audit, 2)
    audit.close()
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"seq": 3, "ev')  # a line cut short by a power loss
    with structlog.testing.capture_logs() as logs:
        again = AuditLog(path, clock)
    assert logs[0]["log_level"] == "error" and logs[0]["bytes_dropped"] == 14
    write_records(again, 1)
    again.close()
    assert isinstance(check_chain(lines(path)), ChainHead)
    assert [orjson.loads(x)["seq"] for x in lines(path)] == [1, 2, 3]


def test_last_value_reads_backwards(path: Path) -> None:
    audit = AuditLog(path, clock)
    assert audit.last_value("registry_txn") is None
    audit.record("activation", registry_txn=7, pad="x" * 70000)
    audit.record("activation", registry_txn=8)
    write_records(audit, 3)
    assert audit.last_value("registry_txn") == 8
    audit.close()
