"""The registry store: the durable record of every registered agent.

SQLite in WAL mode with ``synchronous=FULL`` is the embedded default: an
ACTIVATE is committed to disk before its 200 is sent. The store is the
source of truth; the in-memory registry and capability index are rebuilt
from it at start-up.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class StoredAgent:
    canonical_id: str
    manifest: dict[str, Any]
    capabilities: dict[str, Any]
    lifecycle_state: str
    signer_kid: str
    registered_at: str
    updated_at: str


class RegistryStore(Protocol):
    def upsert(self, agent: StoredAgent) -> None: ...
    def get(self, canonical_id: str) -> StoredAgent | None: ...
    def iter_active(self) -> Iterator[StoredAgent]: ...
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
        if version not in (0, SCHEMA_VERSION):
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

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM agents").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
