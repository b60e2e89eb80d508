"""The registry store contract (``ans.store_records.RegistryStore``), held
against both implementations: SQLite in tmp_path and PostgreSQL in a fresh
schema (``tools.pgtest``; the PostgreSQL half skips, saying why, where no
server is reachable). Every protocol method, the change feed's ordering and
completeness under concurrent writers, tombstones, the audit outbox and its
owners, the store's own re-checks, 503 on a closed or cut connection, and
migrations from an empty database."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ans.protocol.errors import Conflict, ErrorCode, Gone, StorageUnavailable

from ans.config import ConfigError
from ans.result_fields import read_stored_fields, result_fields
from ans.store import SQLiteStore
from ans.store_open import open_store
from ans.store_pg_schema import MIGRATIONS
from ans.store_records import Change, EventRecord, RegistryStore, StoredAgent, Tombstone
from ans.store_sqlite_schema import SCHEMA_VERSION as SQLITE_SCHEMA
from tools import pgtest


class Backend:
    """One registry (a SQLite file or a PostgreSQL schema) and the store
    instances opened over it (each one a "node"); all closed at teardown."""

    def __init__(self, kind: str, target: str | Path, schema: str = "") -> None:
        self.kind, self.target, self.schema = kind, target, schema
        self.opened: list[RegistryStore] = []

    def open(self, node: str = "") -> RegistryStore:
        store = open_store(self.target, node=node)
        self.opened.append(store)
        return store

    def close_all(self) -> None:
        for store in self.opened:
            with contextlib.suppress(Exception):  # already closed by the test
                store.close()


@pytest.fixture(scope="session")
def pg_reason() -> str | None:
    return pgtest.unreachable()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, pg_reason: str | None
) -> Iterator[Backend]:
    if request.param == "sqlite":
        b = Backend("sqlite", tmp_path / "registry.sqlite3")
        yield b
        b.close_all()
        return
    yield from _postgres(pg_reason)


@pytest.fixture
def pg_backend(pg_reason: str | None) -> Iterator[Backend]:
    yield from _postgres(pg_reason)


def _postgres(pg_reason: str | None) -> Iterator[Backend]:
    if pg_reason is not None:
        pytest.skip(pg_reason)
    schema = pgtest.create_schema()
    b = Backend("postgresql", pgtest.schema_url(schema), schema)
    try:
        yield b
    finally:
        b.close_all()
        pgtest.drop_schema(schema)


@pytest.fixture
def store(backend: Backend) -> RegistryStore:
    return backend.open()


def agent(cid: str, state: str = "Active", **fields: Any) -> StoredAgent:
    manifest: dict[str, Any] = {
        "canonical_id": cid,
        "trust_tier": fields.pop("trust_tier", 2),
        "behavioral_trust_score": 0.75,
        "governance_zone": "zone:public",
        "org_domain": "Acme.Example",
        "authority_scope_categories": ["documents:query", "documents:write"],
        "job_description": fields.pop("job", "résumé 検索 \u2603"),
        "nested": {"z": 1, "a": [1.5, None, True]},
    }
    caps: dict[str, Any] = fields.pop("capabilities", {"capabilities": [{"id": "x"}]})
    return StoredAgent(
        canonical_id=cid,
        manifest=manifest,
        capabilities=caps,
        lifecycle_state=state,
        signer_kid=fields.pop("signer_kid", "kid-1"),
        registered_at=fields.pop("registered_at", "2026-11-21T12:00:00.000000Z"),
        updated_at=fields.pop("updated_at", "2026-11-21T12:00:00.000000Z"),
    )


def event(
    cid: str, name: str, before: str | None, after: str, n: int = 1, event_id: str | None = None
) -> EventRecord:
    issued = f"2026-11-21T12:00:{n:02d}.000000+00:00"
    return EventRecord(
        event_id=event_id or f"ev-{cid}-{n}",
        canonical_id=cid,
        event=name,
        issued_at=issued,
        applied_at=issued,
        signer_kid="gov-1",
        state_before=before,
        state_after=after,
        document={"event": name, "canonical_id": cid, "n": n},
    )


def tomb(ev: EventRecord) -> Tombstone:
    return Tombstone(ev.canonical_id, ev.state_after, ev.event_id, ev.issued_at, "why", "now")


def follow(store: RegistryStore, pos: int, seen: dict[str, Change]) -> int:
    """What a follower does: apply changes_since(pos), move to the highest seq."""
    for ch in store.changes_since(pos):
        assert ch.seq > pos
        seen[ch.canonical_id] = ch
        pos = max(pos, ch.seq)
    return pos


# -- basics ----------------------------------------------------------------------


def test_an_empty_store_has_nothing(store: RegistryStore) -> None:
    assert store.max_seq() == 0
    assert store.changes_since(0) == []
    assert list(store.changed_since(0)) == []
    assert store.count() == 0
    assert store.get("nope") is None
    assert store.get_many(["nope"]) == {}
    assert store.get_many([]) == {}
    assert list(store.iter_active()) == []
    assert list(store.iter_index_rows()) == []
    assert store.withdrawn() == {}
    assert store.audit_outbox() == []
    assert store.get_event("nope") is None
    assert store.last_event("nope") is None
    assert store.tombstone("nope") is None


def test_upsert_round_trips_the_documents_exactly(store: RegistryStore) -> None:
    a = agent("a1")
    assert store.upsert(a) is None  # no audit record, no outbox id
    got = store.get("a1")
    assert got == a
    assert got is not None and list(got.manifest) == list(a.manifest)  # key order kept
    assert store.count() == 1
    # A re-upsert replaces everything but registered_at.
    b = agent("a1", job="new", registered_at="2030-01-01T00:00:00Z", updated_at="2030")
    store.upsert(b)
    got = store.get("a1")
    assert got is not None
    assert got.manifest["job_description"] == "new"
    assert got.registered_at == a.registered_at and got.updated_at == "2030"
    assert store.count() == 1


def test_result_fields_are_stored_with_every_version(store: RegistryStore) -> None:
    from tools.synth import generate

    manifest, caps = next(generate(1, 7))
    cid = manifest["canonical_id"]
    stored = StoredAgent(cid, manifest, caps, "Active", "kid-1", "2026-11-21T12:00:00Z",
                         "2026-11-21T12:00:00Z")
    store.upsert_many([stored, agent("partial")])
    blobs = store.stored_result_fields([cid, "partial", "absent"])
    assert set(blobs) == {cid, "partial"}  # an absent id is left out
    assert blobs["partial"] is None  # not derivable from those documents: derived on read
    first = read_stored_fields(blobs[cid])
    assert first == result_fields(manifest, caps, "2026-11-21T12:00:00Z")
    # A lifecycle change moves updated_at, which the fields carry: stored again.
    store.apply_lifecycle(event(cid, "SUSPEND", "Active", "Suspended"), "2026-11-22T08:00:00Z",
                          None)
    again = read_stored_fields(store.stored_result_fields([cid])[cid])
    assert again == result_fields(manifest, caps, "2026-11-22T08:00:00Z") != first
    assert again is not None and again["freshness"]["indexed_at"] == "2026-11-22T08:00:00Z"


def test_result_fields_of_every_active_agent_are_streamed(store: RegistryStore) -> None:
    from tools.synth import generate

    docs = [
        StoredAgent(m["canonical_id"], m, c, "Active", "kid-1", "2026-11-21T12:00:00Z",
                    "2026-11-21T12:00:00Z")
        for m, c in generate(3, 11)
    ]
    store.upsert_many([*docs, agent("partial")])  # "partial": no stored fields
    suspended = docs[0].canonical_id
    store.apply_lifecycle(event(suspended, "SUSPEND", "Active", "Suspended"),
                          "2026-11-22T08:00:00Z", None)
    streamed = dict(store.iter_result_fields())
    assert set(streamed) == {d.canonical_id for d in docs[1:]}  # Active rows with fields only
    assert streamed == {
        cid: blob for cid, blob in store.stored_result_fields(list(streamed)).items()
    }
    assert all(type(blob) is bytes for blob in streamed.values())


def test_upsert_many_takes_one_seq_per_agent_in_order(store: RegistryStore) -> None:
    store.upsert(agent("first"))
    ref = store.upsert_many([agent("b"), agent("c"), agent("d")], {"event": "batch"})
    assert isinstance(ref, int)
    assert store.max_seq() == 4
    assert [a.canonical_id for a in store.changed_since(1)] == ["b", "c", "d"]
    assert [(c.seq, c.canonical_id) for c in store.changes_since(0)] == [
        (1, "first"),
        (2, "b"),
        (3, "c"),
        (4, "d"),
    ]
    assert store.upsert_many([]) is None
    assert store.max_seq() == 4
    assert set(store.get_many(["b", "d", "zz", "b"])) == {"b", "d"}


def test_index_rows_are_active_only_in_bytewise_id_order(store: RegistryStore) -> None:
    store.upsert_many(
        [
            agent("b-low"),
            agent("B-UP", capabilities={"required_scope": "custom:scope"}),
            agent("a-low", trust_tier=3),
            agent("s-susp", "Suspended"),
            agent("r-rem", "Removed"),
        ]
    )
    rows = list(store.iter_index_rows())
    assert [r.canonical_id for r in rows] == ["B-UP", "a-low", "b-low"]  # "B" < "a" bytewise
    by = {r.canonical_id: r for r in rows}
    assert by["a-low"].trust_tier == 3 and by["b-low"].trust_tier == 2
    assert by["b-low"].org_domain == "acme.example"  # lowercased
    assert by["b-low"].required_scope == "documents:query documents:write"
    assert by["B-UP"].required_scope == "custom:scope"
    assert by["b-low"].behavioral_trust_score == pytest.approx(0.75)
    assert by["b-low"].governance_zone == "zone:public" and by["b-low"].signer_kid == "kid-1"
    assert [a.canonical_id for a in store.iter_active()] == ["B-UP", "a-low", "b-low"]


def test_streamed_scans_cover_more_than_one_chunk(store: RegistryStore) -> None:
    n = 4096 + 37
    store.upsert_many([agent(f"id-{i:05d}") for i in range(n)])
    assert sum(1 for _ in store.iter_index_rows()) == n
    assert sum(1 for _ in store.changed_since(n - 10)) == 10
    assert store.count() == n


# -- lifecycle, tombstones, the feed ------------------------------------------------


def test_lifecycle_events_are_kept_and_found(store: RegistryStore) -> None:
    store.upsert(agent("x"))
    e1 = event("x", "SUSPEND", "Active", "Suspended", 1)
    ref = store.apply_lifecycle(e1, "later", None, {"event": "lifecycle"})
    assert isinstance(ref, int)
    e2 = event("x", "REINSTATE", "Suspended", "Active", 2)
    store.apply_lifecycle(e2, "later2", None)
    assert store.get_event(e1.event_id) == e1
    assert store.last_event("x") == e2
    got = store.get("x")
    assert got is not None and got.lifecycle_state == "Active" and got.updated_at == "later2"
    assert store.withdrawn() == {}


def test_feed_shows_withdrawals_and_tombstones_of_ids_without_a_row(
    store: RegistryStore,
) -> None:
    store.upsert_many([agent("a"), agent("b"), agent("c")])
    pos = store.max_seq()
    store.apply_lifecycle(event("a", "SUSPEND", "Active", "Suspended"), "t", None)
    rev = event("b", "REVOKE", "Active", "Revoked")
    store.apply_lifecycle(rev, "t", tomb(rev))
    ghost = event("never-seen", "REVOKE", None, "Revoked")  # REVOKE before any ACTIVATE
    store.apply_lifecycle(ghost, "t", tomb(ghost))
    assert store.max_seq() == pos + 3
    assert [(c.seq, c.canonical_id, c.state) for c in store.changes_since(pos)] == [
        (pos + 1, "a", "Suspended"),
        (pos + 2, "b", "Revoked"),
        (pos + 3, "never-seen", "Revoked"),
    ]
    # changed_since is agent rows only; the ghost has none
    assert [a.canonical_id for a in store.changed_since(pos)] == ["a", "b"]
    assert store.withdrawn() == {"a": "Suspended", "b": "Revoked", "never-seen": "Revoked"}
    assert store.tombstone("never-seen") == tomb(ghost)
    assert [a.canonical_id for a in store.iter_active()] == ["c"]


def test_a_tombstone_wins_and_is_tightened_in_place(store: RegistryStore) -> None:
    store.upsert(agent("d"))
    dep = event("d", "DEPRECATE", "Active", "Deprecated", 1)
    store.apply_lifecycle(dep, "t", tomb(dep))
    rev = event("d", "REVOKE", "Deprecated", "Revoked", 2)
    store.apply_lifecycle(rev, "t", tomb(rev))
    t = store.tombstone("d")
    assert t is not None and t.state == "Revoked" and t.event_id == rev.event_id
    assert store.changes_since(0)[-1] == Change(store.max_seq(), "d", "Revoked")


def test_feed_has_each_id_once_at_its_latest_seq(store: RegistryStore) -> None:
    store.upsert_many([agent("a"), agent("b")])
    store.upsert(agent("a", job="again"))
    store.apply_lifecycle(event("b", "SUSPEND", "Active", "Suspended"), "t", None)
    assert [(c.seq, c.canonical_id) for c in store.changes_since(0)] == [(3, "a"), (4, "b")]
    assert store.changes_since(3) == [Change(4, "b", "Suspended")]
    assert store.changes_since(4) == []


def test_paging_the_feed_with_a_limit_misses_nothing(store: RegistryStore) -> None:
    for i in range(30):
        store.upsert_many([agent(f"p{i:02d}"), agent(f"q{i % 7}")])
    full = store.changes_since(0)
    pos, paged = 0, []
    while page := store.changes_since(pos, limit=4):
        assert len(page) <= 4
        paged += page
        pos = page[-1].seq
    assert paged == full
    assert len({c.canonical_id for c in full}) == len(full) == 30 + 7


def test_followers_over_concurrent_writers_never_skip_a_change(backend: Backend) -> None:
    """Several writer "nodes" (each its own store instance) commit while a
    follower on another instance applies the feed as it goes, moving to the
    highest seq it was given; at the end it has seen every write, each id at
    its final state, and the seqs are exactly 1..N (one per agent written)."""
    writers = [backend.open(node=f"w{i}") for i in range(3)]
    reader = backend.open(node="r")
    per_writer, errors = 40, []

    def write(w: int) -> None:
        try:
            for i in range(per_writer):
                writers[w].upsert(agent(f"w{w}-{i:03d}"), {"event": "activation", "i": i, "by": w})
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    seen: dict[str, Change] = {}
    pos = 0
    while any(t.is_alive() for t in threads):
        pos = follow(reader, pos, seen)
    for t in threads:
        t.join()
    pos = follow(reader, pos, seen)
    assert errors == []
    total = 3 * per_writer
    assert pos == reader.max_seq() == total
    assert len(seen) == total
    assert sorted(c.seq for c in seen.values()) == list(range(1, total + 1))
    for w, store in enumerate(writers):  # each node's outbox: its own, in commit order
        rows = store.audit_outbox()
        assert [e["i"] for _, e in rows] == list(range(per_writer))
        assert [i for i, _ in rows] == sorted(i for i, _ in rows)
        assert {e["by"] for _, e in rows} == {w}


def test_written_seqs_name_the_callers_own_write(backend: Backend) -> None:
    store, other = backend.open(), backend.open()
    assert store.written_seqs() is None
    store.upsert(agent("a"))
    assert store.written_seqs() == (1, 1)
    other.upsert_many([agent("b"), agent("c")])  # another node in between
    store.upsert_many([agent("d"), agent("e"), agent("f")])
    assert store.written_seqs() == (4, 6)  # first != 1 + 1: someone else wrote seqs 2..3
    assert other.written_seqs() == (2, 3)
    store.apply_lifecycle(event("d", "SUSPEND", "Active", "Suspended"), "t", None)
    assert store.written_seqs() == (7, 7)
    in_thread: list[object] = []
    t = threading.Thread(target=lambda: in_thread.append(store.written_seqs()))
    t.start()
    t.join()
    assert in_thread == [None]  # per calling thread
    with pytest.raises(Conflict):
        store.upsert(agent("d"))  # Suspended: refused
    assert store.written_seqs() is None


def test_wait_for_change(backend: Backend) -> None:
    store, other = backend.open(), backend.open()
    assert store.wait_for_change(0, 0.01) == 0  # times out at the same position
    other.upsert(agent("already"))
    assert store.wait_for_change(0, 5) == 1  # already past: immediate
    done: list[int] = []
    waiter = threading.Thread(target=lambda: done.append(store.wait_for_change(1, 30)))
    waiter.start()
    other.upsert(agent("later"))  # another instance (node) writes: the waiter wakes
    waiter.join(timeout=30)
    assert done == [2]


# -- the store's own re-checks (a concurrent writer elsewhere) ----------------------


def test_upsert_refuses_a_tombstoned_or_suspended_id(store: RegistryStore) -> None:
    store.upsert_many([agent("s"), agent("r")])
    store.apply_lifecycle(event("s", "SUSPEND", "Active", "Suspended"), "t", None)
    rev = event("r", "REVOKE", "Active", "Revoked")
    store.apply_lifecycle(rev, "t", tomb(rev))
    pos, outbox = store.max_seq(), store.audit_outbox()
    with pytest.raises(Gone) as gone:
        store.upsert_many([agent("fresh"), agent("r")], {"event": "batch"})
    assert gone.value.code == ErrorCode.AGENT_RETIRED
    with pytest.raises(Conflict) as conflict:
        store.upsert(agent("s"), {"event": "activation"})
    assert conflict.value.code == ErrorCode.AGENT_SUSPENDED
    # nothing of either was written
    assert store.max_seq() == pos and store.audit_outbox() == outbox
    assert store.get("fresh") is None
    got = store.get("r")
    assert got is not None and got.lifecycle_state == "Revoked"


def test_a_transition_checked_against_a_stale_state_is_refused(store: RegistryStore) -> None:
    store.upsert(agent("x"))
    store.apply_lifecycle(event("x", "SUSPEND", "Active", "Suspended", 1), "t", None)
    pos = store.max_seq()
    stale = event("x", "REVOKE", "Active", "Revoked", 2)  # judged before the SUSPEND
    with pytest.raises(Conflict):
        store.apply_lifecycle(stale, "t", tomb(stale), {"event": "lifecycle"})
    assert store.max_seq() == pos and store.tombstone("x") is None
    assert store.get_event(stale.event_id) is None and store.audit_outbox() == []


def test_the_same_event_id_twice_is_a_conflict(store: RegistryStore) -> None:
    store.upsert(agent("x"))
    e = event("x", "SUSPEND", "Active", "Suspended", 1)
    store.apply_lifecycle(e, "t", None)
    again = event("x", "REINSTATE", "Suspended", "Active", 2, event_id=e.event_id)
    with pytest.raises(Conflict):
        store.apply_lifecycle(again, "t", None)
    got = store.get("x")
    assert got is not None and got.lifecycle_state == "Suspended"


# -- audit outbox ----------------------------------------------------------------


def test_outbox_rows_belong_to_their_node(backend: Backend) -> None:
    a, b = backend.open(node="node-a"), backend.open(node="node-b")
    ra1 = a.upsert(agent("a1"), {"event": "activation", "by": "a"})
    rb1 = b.upsert(agent("b1"), {"event": "activation", "by": "b"})
    ra2 = a.apply_lifecycle(
        event("a1", "SUSPEND", "Active", "Suspended"), "t", None, {"event": "lc", "by": "a"}
    )
    assert isinstance(ra1, int) and isinstance(rb1, int) and isinstance(ra2, int)
    assert ra1 < rb1 < ra2  # one id counter, never reused
    assert a.audit_outbox() == [
        (ra1, {"event": "activation", "by": "a"}),
        (ra2, {"by": "a", "event": "lc"}),
    ]
    assert b.audit_outbox() == [(rb1, {"event": "activation", "by": "b"})]
    assert a.audit_outbox(node="node-b") == b.audit_outbox()
    assert a.audit_outbox(node="") == []
    a.trim_audit_outbox(rb1 + 100)  # trims a's rows only
    assert a.audit_outbox() == [] and b.audit_outbox() == [
        (rb1, {"event": "activation", "by": "b"})
    ]
    b.trim_audit_outbox(rb1 - 1)
    assert len(b.audit_outbox()) == 1
    b.trim_audit_outbox(rb1)
    assert b.audit_outbox() == []
    rb2 = b.upsert(agent("b2"), {"event": "activation"})
    assert isinstance(rb2, int) and rb2 > ra2  # ids are not reused after a trim


# -- failures ----------------------------------------------------------------------


def test_a_closed_store_is_503_for_reads_and_writes(store: RegistryStore) -> None:
    store.upsert(agent("x"))
    store.close()
    for call in (
        lambda: store.upsert(agent("y")),
        lambda: store.apply_lifecycle(event("x", "SUSPEND", "Active", "Suspended"), "t", None),
        lambda: store.get("x"),
        lambda: store.max_seq(),
        lambda: store.changes_since(0),
        lambda: list(store.iter_index_rows()),
        lambda: store.audit_outbox(),
        lambda: store.trim_audit_outbox(1),
        lambda: store.withdrawn(),
    ):
        with pytest.raises(StorageUnavailable):
            call()


def test_postgres_connection_loss_is_503_then_recovers(pg_backend: Backend) -> None:
    backend = pg_backend
    store = backend.open()
    store.upsert(agent("x"))
    assert pgtest.terminate(backend.schema) >= 1  # every pooled connection is now dead
    assert store.max_seq() == 1  # reads retry on a fresh connection
    assert store.get("x") is not None
    pgtest.terminate(backend.schema)
    try:  # a write on a dead connection is 503, never a traceback or a half write
        store.upsert(agent("y"))
    except StorageUnavailable:
        assert store.get("y") is None
    store.upsert(agent("z"))  # and the next one gets a new connection
    assert {c.canonical_id for c in store.changes_since(0)} >= {"x", "z"}


# -- schema and opening ---------------------------------------------------------------


def test_migrations_from_an_empty_database(backend: Backend) -> None:
    store = backend.open()
    store.upsert(agent("x"))
    store.close()
    again = backend.open()  # re-opening migrates nothing and keeps everything
    assert again.get("x") is not None and again.max_seq() == 1
    if backend.kind == "sqlite":
        db = sqlite3.connect(backend.target)
        assert db.execute("PRAGMA user_version").fetchone()[0] == SQLITE_SCHEMA
        db.close()
    else:
        import psycopg

        with psycopg.connect(str(backend.target)) as conn:
            rows = conn.execute("SELECT version FROM schema_migrations").fetchall()
        assert rows == [(v,) for v, _, _ in MIGRATIONS]


def test_a_newer_schema_is_refused_in_one_line(backend: Backend) -> None:
    backend.open().close()
    if backend.kind == "sqlite":
        db = sqlite3.connect(backend.target)
        db.execute("PRAGMA user_version = 99")
        db.commit()
        db.close()
    else:
        import psycopg

        with psycopg.connect(str(backend.target), autocommit=True) as conn:
            conn.execute("INSERT INTO schema_migrations (version, description) VALUES (99, 'x')")
    with pytest.raises(ConfigError, match="newer than this ANS"):
        backend.open()


def test_sqlite_v3_file_is_migrated_to_v4(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(
        """CREATE TABLE tombstones (canonical_id TEXT PRIMARY KEY, state TEXT NOT NULL,
               event_id TEXT NOT NULL, issued_at TEXT NOT NULL, reason TEXT,
               recorded_at TEXT NOT NULL);
           INSERT INTO tombstones VALUES ('old', 'Revoked', 'e0', '2025', NULL, '2025');
           CREATE TABLE audit_outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, entry BLOB NOT NULL);
           INSERT INTO audit_outbox (entry) VALUES ('{"event":"queued"}');
           PRAGMA user_version = 3;"""
    )
    db.close()
    store = SQLiteStore(path)
    assert store.tombstone("old") == Tombstone("old", "Revoked", "e0", "2025", None, "2025")
    assert store.withdrawn() == {"old": "Revoked"}
    assert store.changes_since(0) == []  # before the feed existed: a follower loads it whole
    assert store.audit_outbox() == [(1, {"event": "queued"})]  # node '' owns the old rows
    store.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SQLITE_SCHEMA


def test_sqlite_v5_file_gains_the_result_fields_column_empty(tmp_path: Path) -> None:
    path = tmp_path / "v5.sqlite3"
    store = SQLiteStore(path)
    store.upsert(agent("old"))
    store.close()
    db = sqlite3.connect(path)  # as a v5 file was: no result_fields column
    db.execute("ALTER TABLE agents DROP COLUMN result_fields")
    db.execute("PRAGMA user_version = 5")
    db.commit()
    db.close()
    store = SQLiteStore(path)
    assert store.stored_result_fields(["old"]) == {"old": None}
    assert store.get("old") == agent("old")
    store.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SQLITE_SCHEMA


def test_open_store_picks_the_store_from_the_value(tmp_path: Path, pg_reason: str | None) -> None:
    s = open_store(None, data_dir=tmp_path)
    assert isinstance(s, SQLiteStore) and s.path == tmp_path / "registry.sqlite3"
    s.close()
    s = open_store(str(tmp_path / "elsewhere.db"), node="n")
    assert isinstance(s, SQLiteStore) and s.node == "n"
    s.close()
    with pytest.raises(ConfigError, match="unknown scheme"):
        open_store("mysql://u:hunter2@h/db")
    with pytest.raises(ConfigError) as err:  # nothing listens on port 1
        open_store("postgresql://ans:hunter2@127.0.0.1:1/test?connect_timeout=2")
    assert "hunter2" not in str(err.value) and "***" in str(err.value)
    assert "\n" not in str(err.value)
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(ConfigError, match=r"junk\.db"):
        open_store(str(tmp_path / "junk.db"))
