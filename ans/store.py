"""The registry store: the durable record of every registered agent.

SQLite in WAL mode with ``synchronous=FULL`` is the embedded default: an
ACTIVATE is committed to disk before its 200 is sent. The store is the
source of truth; the in-memory registry and capability index are rebuilt
from it at start-up.

Besides the agents, it keeps every applied lifecycle event (by ``event_id``,
so a replayed event is recognised) and the tombstones of retired canonical
ids (Revoked/Deprecated), which no later ACTIVATE can bring back.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

SCHEMA_VERSION = 2


@dataclass(frozen=True, slots=True)
class StoredAgent:
    canonical_id: str
    manifest: dict[str, Any]
    capabilities: dict[str, Any]
    lifecycle_state: str
    signer_kid: str
    registered_at: str
    updated_at: str


@dataclass(frozen=True, slots=True)
class EventRecord:
    """A lifecycle event that was applied (kept for replay detection and history)."""

    event_id: str
    canonical_id: str
    event: str
    issued_at: str
    applied_at: str
    signer_kid: str
    state_before: str | None
    state_after: str
    document: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Tombstone:
    canonical_id: str
    state: str
    event_id: str
    issued_at: str
    reason: str | None
    recorded_at: str


class RegistryStore(Protocol):
    def upsert(self, agent: StoredAgent) -> None: ...
    def get(self, canonical_id: str) -> StoredAgent | None: ...
    def iter_active(self) -> Iterator[StoredAgent]: ...
    def apply_lifecycle(
        self, event: EventRecord, updated_at: str, tombstone: Tombstone | None
    ) -> None: ...
    def get_event(self, event_id: str) -> EventRecord | None: ...
    def last_event(self, canonical_id: str) -> EventRecord | None: ...
    def tombstone(self, canonical_id: str) -> Tombstone | None: ...
    def withdrawn(self) -> dict[str, str]: ...
    def count(self) -> int: ...
    def close(self) -> None: ...


class SQLiteStore:
    """Thread-safe SQLite registry (one connection, serialized by a lock)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=5000")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, 1, SCHEMA_VERSION):  # 1 -> 2 only adds tables
            raise RuntimeError(f"registry schema version {version} is newer than this ANS")
        self._db.execute(
            """CREATE TABLE IF NOT EXISTS agents (
                   canonical_id    TEXT PRIMARY KEY,
                   manifest        BLOB NOT NULL,
                   capabilities    BLOB NOT NULL,
                   lifecycle_state TEXT NOT NULL,
                   signer_kid      TEXT NOT NULL,
                   registered_at   TEXT NOT NULL,
                   updated_at      TEXT NOT NULL)"""
        )
        self._db.execute(
            """CREATE TABLE IF NOT EXISTS lifecycle_events (
                   event_id     TEXT PRIMARY KEY,
                   canonical_id TEXT NOT NULL,
                   event        TEXT NOT NULL,
                   issued_at    TEXT NOT NULL,
                   applied_at   TEXT NOT NULL,
                   signer_kid   TEXT NOT NULL,
                   state_before TEXT,
                   state_after  TEXT NOT NULL,
                   document     BLOB NOT NULL)"""
        )
        self._db.execute(
            "CREATE INDEX IF NOT EXISTS lifecycle_events_by_agent "
            "ON lifecycle_events (canonical_id, issued_at)"
        )
        self._db.execute(
            """CREATE TABLE IF NOT EXISTS tombstones (
                   canonical_id TEXT PRIMARY KEY,
                   state        TEXT NOT NULL,
                   event_id     TEXT NOT NULL,
                   issued_at    TEXT NOT NULL,
                   reason       TEXT,
                   recorded_at  TEXT NOT NULL)"""
        )
        self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def upsert(self, agent: StoredAgent) -> None:
        with self._lock:
            self._db.execute(
                """INSERT INTO agents VALUES (?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT(canonical_id) DO UPDATE SET
                     manifest=excluded.manifest, capabilities=excluded.capabilities,
                     lifecycle_state=excluded.lifecycle_state, signer_kid=excluded.signer_kid,
                     updated_at=excluded.updated_at""",
                (
                    agent.canonical_id,
                    orjson.dumps(agent.manifest),
                    orjson.dumps(agent.capabilities),
                    agent.lifecycle_state,
                    agent.signer_kid,
                    agent.registered_at,
                    agent.updated_at,
                ),
            )

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
        with self._lock:
            row = self._db.execute(
                "SELECT * FROM agents WHERE canonical_id = ?", (canonical_id,)
            ).fetchone()
        return self._row(row) if row else None

    def iter_active(self) -> Iterator[StoredAgent]:
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM agents WHERE lifecycle_state = 'Active' ORDER BY canonical_id"
            ).fetchall()
        for row in rows:
            yield self._row(row)

    def apply_lifecycle(
        self, event: EventRecord, updated_at: str, tombstone: Tombstone | None
    ) -> None:
        """One transaction: the agent's new state, the event, the tombstone."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "UPDATE agents SET lifecycle_state = ?, updated_at = ? WHERE canonical_id = ?",
                    (event.state_after, updated_at, event.canonical_id),
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
                        """INSERT INTO tombstones VALUES (?, ?, ?, ?, ?, ?)
                           ON CONFLICT(canonical_id) DO UPDATE SET
                             state=excluded.state, event_id=excluded.event_id,
                             issued_at=excluded.issued_at, reason=excluded.reason,
                             recorded_at=excluded.recorded_at""",
                        (
                            tombstone.canonical_id,
                            tombstone.state,
                            tombstone.event_id,
                            tombstone.issued_at,
                            tombstone.reason,
                            tombstone.recorded_at,
                        ),
                    )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

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
        with self._lock:
            row = self._db.execute(
                "SELECT * FROM lifecycle_events WHERE event_id = ?", (event_id,)
            ).fetchone()
        return self._event(row) if row else None

    def last_event(self, canonical_id: str) -> EventRecord | None:
        with self._lock:
            row = self._db.execute(
                "SELECT * FROM lifecycle_events WHERE canonical_id = ? "
                "ORDER BY issued_at DESC, applied_at DESC LIMIT 1",
                (canonical_id,),
            ).fetchone()
        return self._event(row) if row else None

    def tombstone(self, canonical_id: str) -> Tombstone | None:
        with self._lock:
            row = self._db.execute(
                "SELECT * FROM tombstones WHERE canonical_id = ?", (canonical_id,)
            ).fetchone()
        return Tombstone(*row) if row else None

    def withdrawn(self) -> dict[str, str]:
        """canonical_id -> state for every agent that must not be served:
        tombstoned ids and Suspended agents."""
        with self._lock:
            rows = self._db.execute(
                "SELECT canonical_id, lifecycle_state FROM agents "
                "WHERE lifecycle_state = 'Suspended' "
                "UNION ALL SELECT canonical_id, state FROM tombstones"
            ).fetchall()
        return {cid: state for cid, state in rows}

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM agents").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
