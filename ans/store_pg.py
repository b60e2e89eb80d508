"""The registry store on PostgreSQL (``--store postgresql://...``): the same
contract as ``SQLiteStore`` (``store_records.RegistryStore``), for several
ANS nodes (or workers) over one database behaving as one registry.

psycopg 3 with a ``psycopg_pool.ConnectionPool`` (autocommit connections; a
write is one explicit transaction). Schema and migrations:
``store_pg_schema.py``.

Why a reader never skips a change (the change feed, ``store_records``)
-----------------------------------------------------------------------
Every write transaction starts with ``UPDATE meta SET value = value + n
WHERE key = 'change_seq' RETURNING value``. That row lock is held to the end
of the transaction, so writers on every node take their seqs one at a time,
in the order they commit: writer B cannot get a seq until writer A (lower
seq) has committed or rolled back, and PostgreSQL makes A's commit visible
before it releases A's locks. A reader that sees position N therefore sees
every change with seq <= N, and any change not yet visible will get a seq
> N. (A plain SEQUENCE would not do: nextval() is taken at statement time,
so a transaction with seq 7 can commit after one with seq 8 and a reader
that moved to 8 would skip 7 for ever.) The cost is that writes are
serialised across nodes -- one short transaction at a time -- which ANS
already does within a node (its write lock), and registry writes are few
next to DISCOVERs. The checks a writer made before its transaction (is the
id tombstoned? is this transition still valid?) are re-made inside it,
after the lock, so a concurrent writer on another node cannot be overruled
(``refuse_overwrite``, ``refuse_stale_transition``).

The transaction also sends ``pg_notify(channel, seq)`` (delivered at
commit); ``wait_for_change`` sleeps on those notifications
(``store_pg_listen``) and polls ``max_seq`` every ``poll_interval`` as the
fallback.

Connection loss, a database that is shutting down or out of disk are 503
``storage_unavailable``. Reads are retried on another connection when the
one they got was broken (a restarted server leaves the whole pool broken);
writes are not retried (the client retries: ACTIVATE and lifecycle events
are idempotent).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import orjson
import psycopg
import structlog
from psycopg_pool import ConnectionPool

from ans.protocol.errors import Conflict, StorageUnavailable

from .result_fields import stored_fields
from .store_pg_listen import ChangeListener
from .store_pg_schema import migrate
from .store_records import (
    AuditEntry,
    Change,
    EventRecord,
    IndexRow,
    StoredAgent,
    Tombstone,
    gate_columns,
    refuse_overwrite,
    refuse_stale_transition,
)

log = structlog.get_logger("ans.store")
T = TypeVar("T")

_AGENT_COLUMNS = (
    "canonical_id, manifest, capabilities, lifecycle_state, signer_kid, registered_at, updated_at"
)
_TOMBSTONE_COLUMNS = "canonical_id, state, event_id, issued_at, reason, recorded_at"
_EVENT_COLUMNS = (
    "event_id, canonical_id, event, issued_at, applied_at, signer_kid, state_before, "
    "state_after, document"
)
_UPSERT = """INSERT INTO agents (canonical_id, manifest, capabilities, lifecycle_state,
                 signer_kid, registered_at, updated_at, trust_tier, behavioral_trust_score,
                 governance_zone, org_domain, required_scope, change_seq, result_fields)
             VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
             ON CONFLICT (canonical_id) DO UPDATE SET
               manifest = excluded.manifest, capabilities = excluded.capabilities,
               lifecycle_state = excluded.lifecycle_state, signer_kid = excluded.signer_kid,
               updated_at = excluded.updated_at, trust_tier = excluded.trust_tier,
               behavioral_trust_score = excluded.behavioral_trust_score,
               governance_zone = excluded.governance_zone, org_domain = excluded.org_domain,
               required_scope = excluded.required_scope, change_seq = excluded.change_seq,
               result_fields = excluded.result_fields"""
_CHANGES = """SELECT a.change_seq, a.canonical_id, COALESCE(t.state, a.lifecycle_state)
                FROM agents a LEFT JOIN tombstones t ON t.canonical_id = a.canonical_id
               WHERE a.change_seq > %(seq)s
              UNION ALL
              SELECT t.change_seq, t.canonical_id, t.state FROM tombstones t
               WHERE t.change_seq > %(seq)s
                 AND NOT EXISTS (SELECT 1 FROM agents a WHERE a.canonical_id = t.canonical_id)
              ORDER BY 1"""
_HEAD = "SELECT value FROM meta WHERE key = 'change_seq'"
# Errors that mean "the database cannot be used right now" (connection lost,
# server shutting down, out of disk, pool closed or exhausted).
_UNAVAILABLE = (psycopg.OperationalError, psycopg.InterfaceError)


class PostgresStore:
    """Thread-safe: each call takes a pooled connection for its duration."""

    def __init__(
        self,
        conninfo: str,
        *,
        node: str = "",
        pool_size: int = 8,
        timeout: float = 10.0,
        poll_interval: float = 0.5,
    ) -> None:
        """Connect, migrate, open the pool. ``psycopg.OperationalError`` when
        the database cannot be reached, RuntimeError for a newer schema."""
        self.node = node
        self.poll_interval = poll_interval
        self._conninfo = conninfo
        self._timeout = timeout
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=int(timeout)) as conn:
            applied = migrate(conn)
            row = conn.execute("SELECT current_database(), current_schema()").fetchone()
        database, schema = row if row else ("?", "?")
        if applied:
            log.info("registry schema migrated", database=database, schema=schema, to=applied)
        self.description = f"postgresql database {database}, schema {schema}"
        self._channel = f"ans_changes.{schema}"[:63]
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True},
            timeout=timeout,
            open=False,
            name="ans-store",
        )
        try:
            self._pool.open(wait=True, timeout=timeout)
        except BaseException:
            self._pool.close()
            raise
        self._local = threading.local()
        self._head_lock = threading.Lock()
        self._head: psycopg.Connection[Any] | None = None
        self._listener = ChangeListener(conninfo, self._channel, timeout)

    # -- plumbing -------------------------------------------------------------

    def _unavailable(self, what: str, exc: BaseException) -> StorageUnavailable:
        log.error(f"registry {what} failed", store=self.description, error=str(exc)[:300])
        if what == "write":
            return StorageUnavailable(
                "the registry database cannot be written right now (storage unavailable); "
                "retry later (a retried ACTIVATE or lifecycle event is safe)"
            )
        return StorageUnavailable(
            "the registry database cannot be read right now (storage unavailable)"
        )

    def _read(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """``fn`` on a pooled connection; retried on another one when the
        connection turns out broken (the pool drops it), 503 otherwise."""
        attempts = (self._pool.max_size or 1) + 1
        for attempt in range(attempts):
            conn = None
            try:
                with self._pool.connection() as conn:
                    return fn(conn)
            except _UNAVAILABLE as exc:
                if conn is None or not conn.broken or attempt == attempts - 1:
                    raise self._unavailable("read", exc) from exc
        raise AssertionError("unreachable")

    @contextmanager
    def _write(self) -> Iterator[psycopg.Connection[Any]]:
        """One write transaction; on a database error it is rolled back (or
        the connection is gone) and 503 is raised."""
        try:
            with self._pool.connection() as conn, conn.transaction():
                yield conn
        except psycopg.errors.UniqueViolation as exc:
            raise Conflict(
                "a concurrent writer applied the same change first; nothing was applied, retry"
            ) from exc
        except _UNAVAILABLE as exc:
            raise self._unavailable("write", exc) from exc

    def _bump(self, conn: psycopg.Connection[Any], n: int = 1) -> int:
        """Reserve ``n`` change_seq values (locks the counter row to commit:
        see the module docstring) and notify followers at commit; the first."""
        row = conn.execute(
            "UPDATE meta SET value = value + %s WHERE key = 'change_seq' RETURNING value", (n,)
        ).fetchone()
        last = int(row[0]) if row else 0
        conn.execute("SELECT pg_notify(%s, %s)", (self._channel, str(last)))
        return last - n + 1

    def _outbox(self, conn: psycopg.Connection[Any], audit: AuditEntry | None) -> int | None:
        if audit is None:
            return None
        row = conn.execute(
            "INSERT INTO audit_outbox (node, entry) VALUES (%s, %s) RETURNING id",
            (self.node, orjson.dumps(dict(audit), option=orjson.OPT_SORT_KEYS)),
        ).fetchone()
        return int(row[0]) if row else None

    def _scan(self, query: str, params: dict[str, Any] | None = None) -> Iterator[tuple[Any, ...]]:
        """Stream a query through a server-side cursor (one snapshot, 4096 rows
        per round trip, never all rows in memory)."""
        try:
            with (
                self._pool.connection() as conn,
                conn.transaction(),
                conn.cursor(name="ans_scan") as cur,
            ):
                cur.itersize = 4096
                cur.execute(query, params)
                yield from cur
        except _UNAVAILABLE as exc:
            raise self._unavailable("read", exc) from exc

    @staticmethod
    def _agent(row: Sequence[Any]) -> StoredAgent:
        return StoredAgent(
            canonical_id=row[0],
            manifest=orjson.loads(row[1]),
            capabilities=orjson.loads(row[2]),
            lifecycle_state=row[3],
            signer_kid=row[4],
            registered_at=row[5],
            updated_at=row[6],
        )

    @staticmethod
    def _event(row: Sequence[Any]) -> EventRecord:
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

    def _one(self, query: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return self._read(lambda conn: conn.execute(query, params).fetchone())

    # -- writes ---------------------------------------------------------------

    def upsert(self, agent: StoredAgent, audit: AuditEntry | None = None) -> int | None:
        return self.upsert_many([agent], audit)

    def upsert_many(
        self, agents: Sequence[StoredAgent], audit: AuditEntry | None = None
    ) -> int | None:
        """Insert or replace many agents in one transaction, with their audit
        record; returns the record's outbox id."""
        if not agents:
            return None
        self._local.written = None
        with self._write() as conn:
            first = self._bump(conn, len(agents))
            ids = [a.canonical_id for a in agents]
            refuse_overwrite(
                conn.execute(
                    "SELECT canonical_id, state, NULL FROM tombstones "
                    "WHERE canonical_id = ANY(%(ids)s) UNION ALL "
                    "SELECT canonical_id, NULL, lifecycle_state FROM agents "
                    "WHERE canonical_id = ANY(%(ids)s) AND lifecycle_state = 'Suspended'",
                    {"ids": ids},
                ).fetchall()
            )
            with conn.cursor() as cur:
                cur.executemany(
                    _UPSERT,
                    [
                        (
                            a.canonical_id,
                            orjson.dumps(a.manifest),
                            orjson.dumps(a.capabilities),
                            a.lifecycle_state,
                            a.signer_kid,
                            a.registered_at,
                            a.updated_at,
                            *gate_columns(a.manifest, a.capabilities),
                            first + i,
                            stored_fields(a.manifest, a.capabilities, a.updated_at),
                        )
                        for i, a in enumerate(agents)
                    ],
                )
            ref = self._outbox(conn, audit)
        self._local.written = (first, first + len(agents) - 1)
        return ref

    def apply_lifecycle(
        self,
        event: EventRecord,
        updated_at: str,
        tombstone: Tombstone | None,
        audit: AuditEntry | None = None,
    ) -> int | None:
        """One transaction: the agent's new state, the event, the tombstone,
        the audit record (its outbox id is returned)."""
        cid = event.canonical_id
        self._local.written = None
        with self._write() as conn:
            seq = self._bump(conn)
            row = conn.execute(
                "SELECT (SELECT state FROM tombstones WHERE canonical_id = %(c)s), "
                "(SELECT lifecycle_state FROM agents WHERE canonical_id = %(c)s)",
                {"c": cid},
            ).fetchone()
            tomb_state, state = row if row else (None, None)
            refuse_stale_transition(event, tomb_state if tomb_state is not None else state)
            docs = conn.execute(
                "SELECT manifest, capabilities FROM agents WHERE canonical_id = %s", (cid,)
            ).fetchone()
            if docs is not None:  # the fields carry the row's updated_at: derive them again
                fields = stored_fields(orjson.loads(docs[0]), orjson.loads(docs[1]), updated_at)
                conn.execute(
                    "UPDATE agents SET lifecycle_state = %s, updated_at = %s, change_seq = %s, "
                    "result_fields = %s WHERE canonical_id = %s",
                    (event.state_after, updated_at, seq, fields, cid),
                )
            conn.execute(
                f"INSERT INTO lifecycle_events ({_EVENT_COLUMNS}) "  # noqa: S608
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    event.event_id,
                    cid,
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
                conn.execute(
                    f"INSERT INTO tombstones ({_TOMBSTONE_COLUMNS}, change_seq) "  # noqa: S608
                    """VALUES (%s, %s, %s, %s, %s, %s, %s)
                       ON CONFLICT (canonical_id) DO UPDATE SET
                         state = excluded.state, event_id = excluded.event_id,
                         issued_at = excluded.issued_at, reason = excluded.reason,
                         recorded_at = excluded.recorded_at, change_seq = excluded.change_seq""",
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
            ref = self._outbox(conn, audit)
        self._local.written = (seq, seq)
        return ref

    def audit_outbox(self, node: str | None = None) -> list[tuple[int, dict[str, Any]]]:
        """``node``'s (default: this store's node) queued audit entries, oldest first."""
        owner = self.node if node is None else node
        rows = self._read(
            lambda conn: conn.execute(
                "SELECT id, entry FROM audit_outbox WHERE node = %s ORDER BY id", (owner,)
            ).fetchall()
        )
        return [(int(i), orjson.loads(e)) for i, e in rows]

    def trim_audit_outbox(self, upto: int, node: str | None = None) -> None:
        """Forget ``node``'s queued entries up to id ``upto``."""
        with self._write() as conn:
            conn.execute(
                "DELETE FROM audit_outbox WHERE node = %s AND id <= %s",
                (self.node if node is None else node, upto),
            )

    # -- reads ----------------------------------------------------------------

    def get(self, canonical_id: str) -> StoredAgent | None:
        row = self._one(
            f"SELECT {_AGENT_COLUMNS} FROM agents WHERE canonical_id = %s",  # noqa: S608
            (canonical_id,),
        )
        return self._agent(row) if row else None

    def _by_ids(self, columns: str, ids: list[str]) -> list[tuple[Any, ...]]:
        """``columns`` (canonical_id first) of the stored agents among ``ids``."""
        if not ids:
            return []
        rows: list[tuple[Any, ...]] = self._read(
            lambda conn: conn.execute(
                f"SELECT {columns} FROM agents WHERE canonical_id = ANY(%s)",  # noqa: S608
                (ids,),
            ).fetchall()
        )
        return rows

    def get_many(self, canonical_ids: Iterable[str]) -> dict[str, StoredAgent]:
        """The stored agents among ``canonical_ids`` (absent ones are left out)."""
        ids = list(dict.fromkeys(canonical_ids))
        return {row[0]: self._agent(row) for row in self._by_ids(_AGENT_COLUMNS, ids)}

    def stored_result_fields(self, canonical_ids: Sequence[str]) -> dict[str, bytes | None]:
        """The ``result_fields`` column of the stored agents among
        ``canonical_ids`` (None where a row predates it); absent ones are left out."""
        rows = self._by_ids("canonical_id, result_fields", list(canonical_ids))
        return {cid: (bytes(blob) if blob is not None else None) for cid, blob in rows}

    def iter_result_fields(self) -> Generator[tuple[str, bytes], None, None]:
        for cid, blob in self._scan(
            "SELECT canonical_id, result_fields FROM agents WHERE lifecycle_state = 'Active' "
            "AND result_fields IS NOT NULL"
        ):
            yield cid, bytes(blob)

    def iter_active(self) -> Iterator[StoredAgent]:
        for row in self._scan(
            f"SELECT {_AGENT_COLUMNS} FROM agents WHERE lifecycle_state = 'Active' "  # noqa: S608
            "ORDER BY canonical_id"
        ):
            yield self._agent(row)

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
            f"SELECT {_AGENT_COLUMNS} FROM agents WHERE change_seq > %(seq)s "  # noqa: S608
            "ORDER BY change_seq",
            {"seq": seq},
        ):
            yield self._agent(row)

    def changes_since(self, seq: int, limit: int | None = None) -> list[Change]:
        """The change feed after ``seq`` (see ``store_records``)."""
        query = _CHANGES + (" LIMIT %(limit)s" if limit is not None else "")
        rows = self._read(lambda conn: conn.execute(query, {"seq": seq, "limit": limit}).fetchall())
        return [Change(int(s), cid, state) for s, cid, state in rows]

    def written_seqs(self) -> tuple[int, int] | None:
        """(first, last) change_seq taken by the calling thread's last
        successful upsert/upsert_many/apply_lifecycle through this instance
        (None before any, or after a failed one)."""
        written: tuple[int, int] | None = getattr(self._local, "written", None)
        return written

    def max_seq(self) -> int:
        """The feed position: one primary-key read of the counter row (the
        committed value; a write in progress does not block it). Read on a
        connection of its own when it is free (every DISCOVER asks: no pool
        checkout), else on a pooled one."""
        if self._head_lock.acquire(blocking=False):
            try:
                conn = self._head
                if conn is not None and not conn.closed:
                    try:
                        row = conn.execute(_HEAD).fetchone()
                        return int(row[0]) if row else 0
                    except _UNAVAILABLE:
                        conn.close()
                        self._head = None
                if self._head is None and not self._pool.closed:
                    try:
                        self._head = psycopg.connect(
                            self._conninfo, autocommit=True, connect_timeout=int(self._timeout)
                        )
                    except _UNAVAILABLE:
                        self._head = None
            finally:
                self._head_lock.release()
        row = self._one(_HEAD, ())
        return int(row[0]) if row else 0

    def get_event(self, event_id: str) -> EventRecord | None:
        row = self._one(
            f"SELECT {_EVENT_COLUMNS} FROM lifecycle_events WHERE event_id = %s",  # noqa: S608
            (event_id,),
        )
        return self._event(row) if row else None

    def last_event(self, canonical_id: str) -> EventRecord | None:
        row = self._one(
            f"SELECT {_EVENT_COLUMNS} FROM lifecycle_events WHERE canonical_id = %s "  # noqa: S608
            "ORDER BY issued_at DESC, applied_at DESC LIMIT 1",
            (canonical_id,),
        )
        return self._event(row) if row else None

    def tombstone(self, canonical_id: str) -> Tombstone | None:
        row = self._one(
            f"SELECT {_TOMBSTONE_COLUMNS} FROM tombstones WHERE canonical_id = %s",  # noqa: S608
            (canonical_id,),
        )
        return Tombstone(*row) if row else None

    def withdrawn(self) -> dict[str, str]:
        """canonical_id -> state for every agent that must not be served:
        tombstoned ids and Suspended agents."""
        rows = self._read(
            lambda conn: conn.execute(
                "SELECT canonical_id, lifecycle_state FROM agents "
                "WHERE lifecycle_state = 'Suspended' "
                "UNION ALL SELECT canonical_id, state FROM tombstones"
            ).fetchall()
        )
        return {cid: state for cid, state in rows}

    def count(self) -> int:
        row = self._one("SELECT count(*) FROM agents", ())
        return int(row[0]) if row else 0

    # -- following ------------------------------------------------------------

    def wait_for_change(self, seq: int, timeout: float) -> int:
        """Block until the feed position passes ``seq`` or ``timeout`` seconds
        pass; the position then. Woken by NOTIFY (``store_pg_listen``),
        polling every ``poll_interval`` in case a notification was lost."""
        return self._listener.wait(seq, timeout, self.poll_interval, self.max_seq)

    def close(self) -> None:
        self._listener.close()
        self._pool.close()
        with self._head_lock:
            if self._head is not None:
                self._head.close()
                self._head = None
