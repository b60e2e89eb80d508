"""Storage failures on a real AnsService (issue 23.1): a state change and its
audit record commit together or not at all, the audit chain stays whole, the
client is told the truth (200 with the record durable, or 503
``storage_unavailable`` with nothing applied), and refusals keep their own
status. The audit disk fails through an injected writer; the registry's disk
is "full" through SQLite's own page cap (``max_page_count``), which gives the
same SQLITE_FULL a full file system does."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog
from ans.governance.audit import AuditLog, ChainHead, check_chain
from ans.governance.keys import SigningKey, TrustedKeys
from ans.governance.lifecycle import make_event
from ans.protocol.errors import AgtpError, StorageUnavailable
from ans.protocol.messages import (
    ActivateRequest,
    DescribeRequest,
    Identity,
    LifecycleRequest,
)
from ans.protocol.scope import parse_authority_scope

from ans.audited import recover
from ans.config import Config
from ans.matcher import CapabilityIndex
from ans.service import AnsService
from ans.store import SQLiteStore, StoredAgent

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
GOV = Identity(
    "agtp://gov.example/agents/platform",
    "gov-operator",
    parse_authority_scope("discovery:register"),
)
CALLER = Identity("agtp://o.example/agents/orch", "usr-1", parse_authority_scope("discovery:query"))
CAPS = {"supported_methods": ["QUERY"], "modalities": ["text"]}
FILLER = b"\x00"


class Disk:
    """os.write for the audit log, until ``full`` (then ENOSPC)."""

    def __init__(self) -> None:
        self.full = False

    def __call__(self, fd: int, data: bytes) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data)


def fill_registry(store: SQLiteStore) -> None:
    """Leave the registry no room to grow: cap its pages at what it has
    (SQLite's own SQLITE_FULL, as on a full disk) and fill the page every
    state change appends to (the audit outbox's last) to the brim."""
    db = store._db  # test seam: the writer connection
    db.execute("PRAGMA synchronous=OFF")
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count={pages}")
    for size in (400, 40, 1):
        with contextlib.suppress(sqlite3.OperationalError):
            while True:
                db.execute("INSERT INTO audit_outbox (entry) VALUES (?)", (FILLER * size,))
    db.execute("PRAGMA synchronous=FULL")


def free_registry(store: SQLiteStore) -> None:
    store._db.execute("PRAGMA max_page_count=1073741823")
    store._db.execute("DELETE FROM audit_outbox WHERE substr(entry, 1, 1) = ?", (FILLER,))


@pytest.fixture
def world(
    tmp_path: Path, embedder: Any, gov_key: SigningKey, make_manifest: Callable[..., Any]
) -> Iterator[dict[str, Any]]:
    disk = Disk()
    store = SQLiteStore(tmp_path / "registry.sqlite3")
    svc = AnsService(
        config=Config(data_dir=tmp_path),
        store=store,
        matcher=CapabilityIndex(embedder),
        signing_key=SigningKey.load_or_create(tmp_path / "ans-signing-key.pem"),
        governance_keys=TrustedKeys([gov_key.public]),
        audit=AuditLog(tmp_path / "audit.jsonl", lambda: NOW, write=disk),
        clock=lambda: NOW,
    )
    svc.load()
    first = make_manifest("first-agent")
    svc.activate(ActivateRequest(GOV, "t-0", first, CAPS))
    yield {"svc": svc, "store": store, "disk": disk, "path": tmp_path, "first": first}
    svc.audit.close()
    store.close()


def activate(svc: AnsService, manifest: dict[str, Any], who: Identity = GOV) -> dict[str, Any]:
    return svc.activate(ActivateRequest(who, "t-act", manifest, CAPS))


def refused(fn: Callable[..., Any], *args: Any) -> AgtpError:
    with pytest.raises(AgtpError) as info:
        fn(*args)
    return info.value


def suspend(svc: AnsService, cid: str, key: SigningKey, event_id: str) -> dict[str, Any]:
    ev = make_event("SUSPEND", cid, key, NOW - timedelta(seconds=30), event_id=event_id)
    result: dict[str, Any] = svc.lifecycle(LifecycleRequest(GOV, "t-lc", ev))
    return result


def served(svc: AnsService, cid: str) -> bool:
    try:
        svc.describe(DescribeRequest(CALLER, "t-d", cid))
    except AgtpError:
        return False
    return True


def audit_records(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in (path / "audit.jsonl").read_bytes().splitlines()]


def assert_in_step(w: dict[str, Any]) -> None:
    """The chain is whole and every stored agent has its activation record."""
    raw = (w["path"] / "audit.jsonl").read_bytes().splitlines(keepends=True)
    assert isinstance(check_chain(raw), ChainHead)
    activated = {r["canonical_id"] for r in audit_records(w["path"]) if r["event"] == "activation"}
    stored = {a.canonical_id for a in w["store"].iter_active()}
    assert stored <= activated


def test_registry_full_activate_is_503_with_nothing_applied(
    world: dict[str, Any], make_manifest: Callable[..., Any]
) -> None:
    svc, store = world["svc"], world["store"]
    m = make_manifest("second-agent")
    fill_registry(store)
    with structlog.testing.capture_logs() as logs:
        err = refused(activate, svc, m)
    assert (err.status, err.code) == (503, "storage_unavailable")
    assert isinstance(err, StorageUnavailable)
    assert store.get(m["canonical_id"]) is None
    assert not served(svc, m["canonical_id"])
    # loud, with SQLite's own error (not "cannot rollback - no transaction is active")
    failed = [e for e in logs if e["event"].startswith("registry write failed")]
    assert failed and failed[0]["log_level"] == "error"
    assert "full" in failed[0]["error"]
    last = audit_records(world["path"])[-1]
    assert (last["event"], last["status"], last["code"]) == (
        "activation_refused",
        503,
        "storage_unavailable",
    )
    free_registry(store)
    assert activate(svc, m)["lifecycle_state"] == "Active"
    assert served(svc, m["canonical_id"])
    assert_in_step(world)


def test_registry_full_lifecycle_is_503_with_state_unchanged(
    world: dict[str, Any], gov_key: SigningKey
) -> None:
    svc, store = world["svc"], world["store"]
    cid = world["first"]["canonical_id"]
    fill_registry(store)
    err = refused(suspend, svc, cid, gov_key, "evt-full")
    assert (err.status, err.code) == (503, "storage_unavailable")
    assert store.get(cid).lifecycle_state == "Active"
    assert served(svc, cid)
    free_registry(store)
    assert suspend(svc, cid, gov_key, "evt-full")["lifecycle_state"] == "Suspended"
    assert not served(svc, cid)
    events = [r for r in audit_records(world["path"]) if r["event"] == "lifecycle_event"]
    assert [e["event_id"] for e in events] == ["evt-full"]


def test_store_rollback_after_sqlite_rolled_back_keeps_the_original_error(
    tmp_path: Path, make_manifest: Callable[..., Any]
) -> None:
    store = SQLiteStore(tmp_path / "registry.sqlite3")
    m = make_manifest("solo")
    agent = StoredAgent(m["canonical_id"], m, CAPS, "Active", "kid", "t", "t")
    fill_registry(store)
    with pytest.raises(StorageUnavailable) as info:
        # big enough that SQLite rolls the whole transaction back itself
        # (as after a COMMIT that found the disk full)
        store.upsert(agent, {"event": "activation", "pad": "x" * 100_000})
    cause = info.value.__cause__
    assert isinstance(cause, sqlite3.OperationalError)
    assert "database or disk is full" in str(cause)
    assert not store._db.in_transaction
    free_registry(store)
    assert store.upsert(agent, {"event": "activation"}) is not None  # the store still works
    assert store.get(m["canonical_id"]) is not None
    store.close()


def test_audit_full_change_is_durable_then_further_changes_are_503(
    world: dict[str, Any], make_manifest: Callable[..., Any], gov_key: SigningKey
) -> None:
    svc, store, disk = world["svc"], world["store"], world["disk"]
    a, b = make_manifest("agent-a"), make_manifest("agent-b")
    before = (world["path"] / "audit.jsonl").read_bytes()
    disk.full = True
    with structlog.testing.capture_logs() as logs:
        # committed with its record in the registry's outbox: a true 200
        assert activate(svc, a)["lifecycle_state"] == "Active"
    assert served(svc, a["canonical_id"])
    assert any(e["log_level"] == "error" and "audit" in e["event"] for e in logs)
    outbox = [e for _, e in store.audit_outbox()]
    assert any(e.get("canonical_id") == a["canonical_id"] for e in outbox)
    assert (world["path"] / "audit.jsonl").read_bytes() == before  # no half line
    # the log still cannot be written: no further change is applied
    err = refused(activate, svc, b)
    assert (err.status, err.code) == (503, "storage_unavailable")
    assert store.get(b["canonical_id"]) is None and not served(svc, b["canonical_id"])
    err = refused(suspend, svc, a["canonical_id"], gov_key, "evt-a")
    assert (err.status, err.code) == (503, "storage_unavailable")
    assert store.get(a["canonical_id"]).lifecycle_state == "Active"
    disk.full = False
    assert activate(svc, b)["lifecycle_state"] == "Active"
    events = [(r["event"], r.get("canonical_id")) for r in audit_records(world["path"])]
    assert events[1:] == [
        ("activation", a["canonical_id"]),
        ("activation_refused", b["canonical_id"]),
        ("lifecycle_refused", a["canonical_id"]),
        ("activation", b["canonical_id"]),
    ]
    assert_in_step(world)


def test_refusals_keep_their_status_when_the_audit_log_fails(
    world: dict[str, Any], make_manifest: Callable[..., Any]
) -> None:
    svc, disk = world["svc"], world["disk"]
    disk.full = True
    with structlog.testing.capture_logs() as logs:
        err = refused(activate, svc, make_manifest("no-scope"), CALLER)
        assert err.status == 451
        err = refused(activate, svc, make_manifest("bad-key", key=SigningKey.generate()))
        assert err.status == 401
    errors = [e for e in logs if e["log_level"] == "error"]
    assert len(errors) == 2 and all("audit log write failed" in e["event"] for e in errors)
    disk.full = False
    assert svc.audit.writable()
    events = [r["event"] for r in audit_records(world["path"])]
    assert events[-2:] == ["scope_violation", "activation_refused"]
    assert_in_step(world)


def test_crash_between_commit_and_append_is_recovered_at_start(
    world: dict[str, Any], make_manifest: Callable[..., Any]
) -> None:
    svc, store = world["svc"], world["store"]
    m = make_manifest("crashed")
    agent = StoredAgent(m["canonical_id"], m, CAPS, "Active", "kid", "t", "t")
    # The process dies right after the commit: the record is only in the outbox.
    store.upsert(agent, svc.audit.entry("activation", status=200, canonical_id=m["canonical_id"]))
    svc.audit.close()
    for appended in (1, 0):  # a second start-up appends nothing twice
        audit = AuditLog(world["path"] / "audit.jsonl", lambda: NOW)
        assert recover(store, audit) == appended
        audit.close()
    svc.audit = AuditLog(world["path"] / "audit.jsonl", lambda: NOW)
    assert store.audit_outbox() == []  # trimmed once the log is synced
    last = audit_records(world["path"])[-1]
    assert (last["event"], last["canonical_id"]) == ("activation", m["canonical_id"])
    assert last["registry_txn"] > 0
    assert_in_step(world)


def test_crash_after_append_before_trim_appends_nothing_twice(world: dict[str, Any]) -> None:
    store = world["store"]
    assert store.audit_outbox()  # the first activation: appended, not trimmed yet
    n = len(audit_records(world["path"]))
    world["svc"].audit.close()
    audit = AuditLog(world["path"] / "audit.jsonl", lambda: NOW)
    assert recover(store, audit) == 0
    world["svc"].audit = audit
    assert len(audit_records(world["path"])) == n
    assert store.audit_outbox() == []
    assert_in_step(world)


def test_readiness_follows_the_audit_log_and_the_store(world: dict[str, Any]) -> None:
    """/readyz: ready; the audit log cannot be written -> not ready (503 on the
    wire, naming the failing check); written again -> ready; store gone -> not ready."""
    svc, disk = world["svc"], world["disk"]
    assert svc.readiness() == {
        "status": "ready",
        "checks": {"index": "ok", "store": "ok", "audit": "ok"},
        "failing": [],
    }
    disk.full = True
    svc.audit.record("probe")  # cannot be written: waits in the backlog
    got = svc.readiness()
    assert got["status"] == "not ready" and got["failing"] == ["audit"]
    assert asgi_get(svc, "/readyz")[0] == 503
    disk.full = False
    assert svc.readiness()["status"] == "ready"
    assert asgi_get(svc, "/readyz")[0] == 200
    world["store"].close()
    got = svc.readiness()
    assert got["failing"] == ["store"] and got["checks"]["store"].startswith("unreachable")


def asgi_get(svc: AnsService, path: str) -> tuple[int, bytes]:
    """GET ``path`` from the ASGI app in process."""
    import asyncio

    from ans.app import AnsApp

    app = AnsApp(svc)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "headers": [],
        "client": ("127.0.0.1", 1),
    }
    asyncio.run(app(scope, receive, send))
    return int(sent[0]["status"]), b"".join(m.get("body", b"") for m in sent[1:])
