"""The registry store: the durable record of every registered agent.

SQLite in WAL mode with ``synchronous=FULL`` is the embedded default: an
ACTIVATE is committed to disk before its 200 is sent. The store is the
source of truth; the in-memory registry and capability index are rebuilt
from it at start-up.

Besides the agents, it keeps every applied lifecycle event (by ``event_id``,
so a replayed event is recognised) and the tombstones of retired canonical
ids (Revoked/Deprecated), which no later ACTIVATE can bring back.

Schema v3 keeps the columns the in-memory registry needs (trust tier,
behavioral score, zone, lowercased org domain, required scope) next to the
JSON, so start-up never decodes a manifest, and a store-wide ``change_seq``
(bumped by every write that changes an agent row, kept in ``meta``) so a
persisted index snapshot knows exactly which rows changed after it was
written. v1/v2 files are migrated in place (columns backfilled from the JSON
once). v4 stamps tombstones with the change_seq too (so a retired id with no
agent row is in the change feed, see ``store_records``) and gives each audit
outbox row its owning ``node``.

Every state change carries its audit record into the same transaction (the
``audit_outbox`` table): a change is never committed without its record, and
``ans.audited`` appends the record to the audit log after the commit, or at
the next start-up after a crash. A write that fails for lack of storage (disk
full, I/O error) is rolled back and raised as 503 ``storage_unavailable``.

This module owns the SQLite schema, its migrations and ``SQLiteStore``; the
record types and the ``RegistryStore`` protocol are in ``store_records.py``
(re-exported here), the data directory's lock in ``datadir_lock.py``.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import structlog

from ans.protocol.errors import Conflict, StorageUnavailable

from .result_fields import stored_fields
from .store_records import (
    AuditEntry,
    Change,
    EventRecord,
    IndexRow,
    RegistryStore,
    StoredAgent,
    Tombstone,
    gate_columns,
    refuse_overwrite,
    refuse_stale_transition,
)
from .store_sqlite_schema import SCHEMA_VERSION, prepare

__all__ = [
    "SCHEMA_VERSION",
    "AuditEntry",
    "Change",
    "EventRecord",
    "IndexRow",
    "RegistryStore",
    "SQLiteStore",
    "StoredAgent",
    "Tombstone",
    "gate_columns",
]

log = structlog.get_logger("ans.store")

# How often wait_for_change looks at the feed position (SQLite has no
# notifications across processes).
POLL_INTERVAL = 0.01
_TOMBSTONE_COLUMNS = "canonical_id, state, event_id, issued_at, reason, recorded_at"
# The change feed (see store_records): agent rows, with the tombstone's state
# winning, and tombstones of ids that have no agent row.
_CHANGES = """SELECT a.change_seq, a.canonical_id, COALESCE(t.state, a.lifecycle_state)
                FROM agents a LEFT JOIN tombstones t ON t.canonical_id = a.canonical_id
               WHERE a.change_seq > ?
              UNION ALL
              SELECT t.change_seq, t.canonical_id, t.state FROM tombstones t
               WHERE t.change_seq > ?
                 AND NOT EXISTS (SELECT 1 FROM agents a WHERE a.canonical_id = t.canonical_id)
              ORDER BY 1"""
_AGENT_COLUMNS = (
    "canonical_id, manifest, capabilities, lifecycle_state, signer_kid, registered_at, updated_at"
)
_UPSERT = """INSERT INTO agents (canonical_id, manifest, capabilities, lifecycle_state,
                 signer_kid, registered_at, updated_at, trust_tier, behavioral_trust_score,
                 governance_zone, org_domain, required_scope, change_seq, result_fields)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT(canonical_id) DO UPDATE SET
               manifest=excluded.manifest, capabilities=excluded.capabilities,
               lifecycle_state=excluded.lifecycle_state, signer_kid=excluded.signer_kid,
               updated_at=excluded.updated_at, trust_tier=excluded.trust_tier,
               behavioral_trust_score=excluded.behavioral_trust_score,
               governance_zone=excluded.governance_zone, org_domain=excluded.org_domain,
               required_scope=excluded.required_scope, change_seq=excluded.change_seq,
               result_fields=excluded.result_fields"""


def _unavailable(what: str, path: Path, exc: sqlite3.Error) -> StorageUnavailable:
    log.error(
        f"registry {what} failed" + ("; nothing applied" if what == "write" else ""),
        path=str(path),
        error=str(exc),
        sqlite_error=getattr(exc, "sqlite_errorname", None),
    )
    if what == "write":
        return StorageUnavailable(
            "the registry cannot be written right now (storage unavailable); "
            "nothing was applied, retry later"
        )
    return StorageUnavailable("the registry cannot be read right now (storage unavailable)")


class SQLiteStore:
    """Thread-safe SQLite registry: one writer connection serialized by a lock,
    and one reader connection (WAL readers never wait for the writer) for the
    DISCOVER hot path and the start-up scans."""

    def __init__(self, path: Path, *, node: str = "") -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.node = node
        self._lock = threading.Lock()
        self._closed = False
        self._local = threading.local()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=5000")
        prepare(self._db, self._transaction)
        self._rlock = threading.Lock()
        self._reader = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._reader.execute("PRAGMA busy_timeout=5000")

    @contextmanager
    def _reading(self, lock: threading.Lock) -> Iterator[None]:
        """Hold ``lock`` for a read; a registry that cannot be read (I/O
        error, closed) is 503 ``storage_unavailable``."""
        with lock:
            try:
                yield
            except sqlite3.OperationalError as exc:
                raise _unavailable("read", self.path, exc) from exc
            except sqlite3.ProgrammingError as exc:
                if not self._closed:
                    raise
                raise _unavailable("read", self.path, exc) from exc

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE ... COMMIT on the writer connection (the caller
        holds the lock, or is the constructor). On any failure the transaction
        is rolled back if SQLite has not already done so itself (it does after
        a failed COMMIT, e.g. disk full), and the original error is raised;
        a lack of storage becomes 503 ``storage_unavailable``."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
                self._db.execute("COMMIT")
            except BaseException as exc:
                if self._db.in_transaction:
                    try:
                        self._db.execute("ROLLBACK")
                    except sqlite3.Error as rollback:
                        exc.add_note(f"ROLLBACK failed too: {rollback}")
                raise
        except sqlite3.IntegrityError as exc:  # e.g. the same event_id applied meanwhile
            raise Conflict(
                "a concurrent writer applied the same change first; nothing was applied, retry"
            ) from exc
        except sqlite3.OperationalError as exc:
            raise _unavailable("write", self.path, exc) from exc
        except sqlite3.ProgrammingError as exc:
            if not self._closed:
                raise
            raise _unavailable("write", self.path, exc) from exc

    def _outbox(self, audit: AuditEntry | None) -> int | None:
        """Queue ``audit`` in the current transaction; its outbox id."""
        if audit is None:
            return None
        cur = self._db.execute(
            "INSERT INTO audit_outbox (entry, node) VALUES (?, ?)",
            (orjson.dumps(dict(audit), option=orjson.OPT_SORT_KEYS), self.node),
        )
        return cur.lastrowid

    def audit_outbox(self, node: str | None = None) -> list[tuple[int, dict[str, Any]]]:
        """``node``'s (default: this store's node) queued audit entries (id,
        entry), oldest first."""
        with self._reading(self._lock):
            rows = self._db.execute(
                "SELECT id, entry FROM audit_outbox WHERE node = ? ORDER BY id",
                (self.node if node is None else node,),
            ).fetchall()
        return [(int(i), orjson.loads(e)) for i, e in rows]

    def trim_audit_outbox(self, upto: int, node: str | None = None) -> None:
        """Forget ``node``'s queued entries up to id ``upto`` (they are in its
        audit log, synced)."""
        with self._lock, self._transaction():
            self._db.execute(
                "DELETE FROM audit_outbox WHERE node = ? AND id <= ?",
                (self.node if node is None else node, upto),
            )

    def _refuse_overwrite(self, ids: list[str]) -> None:
        """In the write transaction: no id about to be upserted is tombstoned or
        Suspended (``refuse_overwrite``)."""
        for i in range(0, len(ids), 400):
            chunk = ids[i : i + 400]
            marks = ",".join("?" * len(chunk))
            refuse_overwrite(
                self._db.execute(
                    f"SELECT canonical_id, state, NULL FROM tombstones "  # noqa: S608
                    f"WHERE canonical_id IN ({marks}) UNION ALL "
                    f"SELECT canonical_id, NULL, lifecycle_state FROM agents "
                    f"WHERE canonical_id IN ({marks}) AND lifecycle_state = 'Suspended'",
                    chunk + chunk,
                ).fetchall()
            )

    def _bump(self, n: int = 1) -> int:
        """Reserve ``n`` change_seq values inside the current write transaction;
        returns the first."""
        last = self._db.execute(
            "UPDATE meta SET value = value + ? WHERE key = 'change_seq' RETURNING value", (n,)
        ).fetchone()[0]
        return int(last) - n + 1

    @staticmethod
    def _params(agent: StoredAgent, seq: int) -> tuple[Any, ...]:
        return (
            agent.canonical_id,
            orjson.dumps(agent.manifest),
            orjson.dumps(agent.capabilities),
            agent.lifecycle_state,
            agent.signer_kid,
            agent.registered_at,
            agent.updated_at,
            *gate_columns(agent.manifest, agent.capabilities),
            seq,
            stored_fields(agent.manifest, agent.capabilities, agent.updated_at),
        )

    def upsert(self, agent: StoredAgent, audit: AuditEntry | None = None) -> int | None:
        return self.upsert_many([agent], audit)

    def upsert_many(
        self, agents: Sequence[StoredAgent], audit: AuditEntry | None = None
    ) -> int | None:
        """Insert or replace many agents in one transaction (one fsync), with
        their audit record; returns the record's outbox id."""
        if not agents:
            return None
        self._local.written = None
        with self._lock, self._transaction():
            self._refuse_overwrite([a.canonical_id for a in agents])
            first = self._bump(len(agents))
            self._db.executemany(
                _UPSERT, [self._params(a, first + i) for i, a in enumerate(agents)]
            )
            ref = self._outbox(audit)
        self._local.written = (first, first + len(agents) - 1)
        return ref

    def _row(self, row: tuple[Any, ...]) -> StoredAgent:
        return StoredAgent(
            canonical_id=row[0],
            manifest=orjson.loads(row[1]),
            capabilities=orjson.loads(row[2]),
            lifecycle_state=row[3],
            signer_kid=row[4],
            registered_at=row[5],
            updated_at=row[6],
        )

    def get(self, canonical_id: str) -> StoredAgent | None:
        with self._reading(self._lock):
            row = self._db.execute(
                f"SELECT {_AGENT_COLUMNS} FROM agents WHERE canonical_id = ?",  # noqa: S608
                (canonical_id,),
            ).fetchone()
        return self._row(row) if row else None

    def _by_ids(self, columns: str, ids: Sequence[str]) -> list[tuple[Any, ...]]:
        """``columns`` (canonical_id first) of the stored agents among ``ids``,
        on the reader connection, 500 ids a query."""
        rows: list[tuple[Any, ...]] = []
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            with self._reading(self._rlock):
                rows += self._reader.execute(
                    f"SELECT {columns} FROM agents WHERE canonical_id IN ({marks})",  # noqa: S608
                    chunk,
                ).fetchall()
        return rows

    def get_many(self, canonical_ids: Iterable[str]) -> dict[str, StoredAgent]:
        """The stored agents among ``canonical_ids`` (absent ones are left out)."""
        ids = list(dict.fromkeys(canonical_ids))
        return {row[0]: self._row(row) for row in self._by_ids(_AGENT_COLUMNS, ids)}

    def stored_result_fields(self, canonical_ids: Sequence[str]) -> dict[str, bytes | None]:
        """The ``result_fields`` column of the stored agents among
        ``canonical_ids`` (None where a row predates it); absent ones are left out."""
        return dict(self._by_ids("canonical_id, result_fields", canonical_ids))

    def _scan(self, sql: str, params: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
        """Stream a query on the reader connection in chunks (never all rows at once)."""
        with self._reading(self._rlock):
            cur = self._reader.execute(sql, params)
        try:
            while True:
                with self._reading(self._rlock):
                    rows = cur.fetchmany(4096)
                if not rows:
                    return
                yield from rows
        finally:
            cur.close()

    def iter_result_fields(self) -> Generator[tuple[str, bytes], None, None]:
        rows = self._scan(
            "SELECT canonical_id, result_fields FROM agents WHERE lifecycle_state = 'Active' "
            "AND result_fields IS NOT NULL"
        )
        yield from ((str(cid), bytes(blob)) for cid, blob in rows)

    def iter_active(self) -> Iterator[StoredAgent]:
        for row in self._scan(
            f"SELECT {_AGENT_COLUMNS} FROM agents WHERE lifecycle_state = 'Active' "  # noqa: S608
            "ORDER BY canonical_id"
        ):
            yield self._row(row)

    def iter_index_rows(self) -> Iterator[IndexRow]:
        """Every Active agent's registry columns, in canonical_id order; no JSON decoded."""
        for row in self._scan(
            "SELECT canonical_id, signer_kid, trust_tier, behavioral_trust_score, "
            "governance_zone, org_domain, required_scope FROM agents "
            "WHERE lifecycle_state = 'Active' ORDER BY canonical_id"
        ):
            yield IndexRow(*row)

    def changed_since(self, seq: int) -> Iterator[StoredAgent]:
        """Every agent row (any state) written after change_seq ``seq``, oldest first."""
        for row in self._scan(
            f"SELECT {_AGENT_COLUMNS} FROM agents WHERE change_seq > ? ORDER BY change_seq",  # noqa: S608
            (seq,),
        ):
            yield self._row(row)

    def changes_since(self, seq: int, limit: int | None = None) -> list[Change]:
        """The change feed after ``seq`` (see ``store_records``): one Change per
        canonical id, oldest first, at most ``limit``."""
        sql = _CHANGES + (" LIMIT ?" if limit is not None else "")
        params: tuple[Any, ...] = (seq, seq) if limit is None else (seq, seq, limit)
        with self._reading(self._rlock):
            rows = self._reader.execute(sql, params).fetchall()
        return [Change(int(s), cid, state) for s, cid, state in rows]

    def written_seqs(self) -> tuple[int, int] | None:
        """(first, last) change_seq taken by the calling thread's last
        successful upsert/upsert_many/apply_lifecycle through this instance
        (None before any, or after a failed one)."""
        written: tuple[int, int] | None = getattr(self._local, "written", None)
        return written

    def max_seq(self) -> int:
        """The feed position: the change_seq of the last committed write (0 for
        none). One primary-key read on the reader connection, so it never
        waits for a write in progress."""
        with self._reading(self._rlock):
            row = self._reader.execute("SELECT value FROM meta WHERE key = 'change_seq'").fetchone()
        return int(row[0]) if row else 0

    def wait_for_change(self, seq: int, timeout: float) -> int:
        """Block until the feed position passes ``seq`` or ``timeout`` seconds
        pass (polled every POLL_INTERVAL: other processes may write the file);
        the position then."""
        deadline = time.monotonic() + timeout
        while (head := self.max_seq()) <= seq:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(POLL_INTERVAL, left))
        return head

    def apply_lifecycle(
        self,
        event: EventRecord,
        updated_at: str,
        tombstone: Tombstone | None,
        audit: AuditEntry | None = None,
    ) -> int | None:
        """One transaction: the agent's new state, the event, the tombstone,
        the audit record (its outbox id is returned)."""
        self._local.written = None
        with self._lock, self._transaction():
            cid = event.canonical_id
            tomb = self._db.execute(
                "SELECT state FROM tombstones WHERE canonical_id = ?", (cid,)
            ).fetchone()
            row = self._db.execute(
                "SELECT lifecycle_state, manifest, capabilities FROM agents "
                "WHERE canonical_id = ?",
                (cid,),
            ).fetchone()
            refuse_stale_transition(event, tomb[0] if tomb else (row[0] if row else None))
            seq = self._bump()
            if row is not None:  # the fields carry the row's updated_at: derive them again
                fields = stored_fields(orjson.loads(row[1]), orjson.loads(row[2]), updated_at)
                self._db.execute(
                    "UPDATE agents SET lifecycle_state = ?, updated_at = ?, change_seq = ?, "
                    "result_fields = ? WHERE canonical_id = ?",
                    (event.state_after, updated_at, seq, fields, cid),
                )
            self._db.execute(
                "INSERT INTO lifecycle_events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    event.event_id,
                    event.canonical_id,
                    event.event,
                    event.issued_at,
                    event.applied_at,
                    event.signer_kid,
                    event.state_before,
                    event.state_after,
                    orjson.dumps(event.document),
                ),
            )
            if tombstone is not None:
                self._db.execute(
                    """INSERT INTO tombstones (canonical_id, state, event_id, issued_at,
                         reason, recorded_at, change_seq) VALUES (?, ?, ?, ?, ?, ?, ?)
                       ON CONFLICT(canonical_id) DO UPDATE SET
                         state=excluded.state, event_id=excluded.event_id,
                         issued_at=excluded.issued_at, reason=excluded.reason,
                         recorded_at=excluded.recorded_at, change_seq=excluded.change_seq""",
                    (
                        tombstone.canonical_id,
                        tombstone.state,
                        tombstone.event_id,
                        tombstone.issued_at,
                        tombstone.reason,
                        tombstone.recorded_at,
                        seq,
                    ),
                )
            ref = self._outbox(audit)
        self._local.written = (seq, seq)
        return ref

    @staticmethod
    def _event(row: tuple[Any, ...]) -> EventRecord:
        return EventRecord(
            event_id=row[0],
            canonical_id=row[1],
            event=row[2],
            issued_at=row[3],
            applied_at=row[4],
            signer_kid=row[5],
            state_before=row[6],
            state_after=row[7],
            document=orjson.loads(row[8]),
        )

    def get_event(self, event_id: str) -> EventRecord | None:
        with self._reading(self._lock):
            row = self._db.execute(
                "SELECT * FROM lifecycle_events WHERE event_id = ?", (event_id,)
            ).fetchone()
        return self._event(row) if row else None

    def last_event(self, canonical_id: str) -> EventRecord | None:
        with self._reading(self._lock):
            row = self._db.execute(
                "SELECT * FROM lifecycle_events WHERE canonical_id = ? "
                "ORDER BY issued_at DESC, applied_at DESC LIMIT 1",
                (canonical_id,),
            ).fetchone()
        return self._event(row) if row else None

    def tombstone(self, canonical_id: str) -> Tombstone | None:
        with self._reading(self._lock):
            row = self._db.execute(
                f"SELECT {_TOMBSTONE_COLUMNS} FROM tombstones WHERE canonical_id = ?",  # noqa: S608
                (canonical_id,),
            ).fetchone()
        return Tombstone(*row) if row else None

    def withdrawn(self) -> dict[str, str]:
        """canonical_id -> state for every agent that must not be served:
        tombstoned ids and Suspended agents."""
        with self._reading(self._lock):
            rows = self._db.execute(
                "SELECT canonical_id, lifecycle_state FROM agents "
                "WHERE lifecycle_state = 'Suspended' "
                "UNION ALL SELECT canonical_id, state FROM tombstones"
            ).fetchall()
        return {cid: state for cid, state in rows}

    def count(self) -> int:
        with self._reading(self._lock):
            return int(self._db.execute("SELECT COUNT(*) FROM agents").fetchone()[0])

    def close(self) -> None:
        self._closed = True
        with self._rlock:
            self._reader.close()
        with self._reading(self._lock):
            self._db.close()
