"""The SQLite registry's schema (``PRAGMA user_version``) and its in-place
migrations, for ``SQLiteStore`` (``store.py``).

- v1/v2 -> v3: the registry columns (trust tier, behavioral score, zone,
  lowercased org domain, required scope) and ``agents.change_seq``,
  backfilled from the stored JSON once;
- v3 -> v4: ``tombstones.change_seq`` (so a retired id with no agent row is in
  the change feed) and ``audit_outbox.node`` (the owner of a queued record);
- v5 -> v6: ``agents.result_fields``, the stored form of an agent's DISCOVER
  result fields (``ans.result_fields.stored_fields``); NULL in the rows
  written before, whose fields are derived on read until they are written
  again (nothing is backfilled: at 1M agents that would hold the start-up).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager

import orjson

from .store_records import gate_columns

SCHEMA_VERSION = 6
Transaction = Callable[[], AbstractContextManager[None]]
MCP_AGENTS_TABLE = """CREATE TABLE IF NOT EXISTS mcp_agents (
       agent_id         TEXT PRIMARY KEY,
       key_pem          TEXT NOT NULL,
       key_id           TEXT NOT NULL,
       announcement     BLOB NOT NULL,
       digest           TEXT NOT NULL,
       first_seen       REAL NOT NULL,
       last_seen        REAL NOT NULL,
       previous_key_pem TEXT,
       previous_key_id  TEXT,
       previous_until   REAL,
       removed_at       REAL)"""


def prepare(db: sqlite3.Connection, transaction: Transaction) -> None:
    """Create or migrate the schema on ``db`` (autocommit); ``transaction``
    opens a write transaction on it. RuntimeError for a newer schema."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version not in (0, 1, 2, 3, 4, 5, SCHEMA_VERSION):
        raise RuntimeError(f"registry schema version {version} is newer than this ANS")
    db.execute(
        """CREATE TABLE IF NOT EXISTS agents (
               canonical_id    TEXT PRIMARY KEY,
               manifest        BLOB NOT NULL,
               capabilities    BLOB NOT NULL,
               lifecycle_state TEXT NOT NULL,
               signer_kid      TEXT NOT NULL,
               registered_at   TEXT NOT NULL,
               updated_at      TEXT NOT NULL,
               trust_tier      INTEGER,
               behavioral_trust_score REAL,
               governance_zone TEXT,
               org_domain      TEXT,
               required_scope  TEXT,
               change_seq      INTEGER,
               result_fields   BLOB)"""
    )
    db.execute(
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
    db.execute(
        "CREATE INDEX IF NOT EXISTS lifecycle_events_by_agent "
        "ON lifecycle_events (canonical_id, issued_at)"
    )
    db.execute(
        """CREATE TABLE IF NOT EXISTS tombstones (
               canonical_id TEXT PRIMARY KEY,
               state        TEXT NOT NULL,
               event_id     TEXT NOT NULL,
               issued_at    TEXT NOT NULL,
               reason       TEXT,
               recorded_at  TEXT NOT NULL,
               change_seq   INTEGER)"""
    )
    db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
    # Audit records committed with their state change; the id (never
    # reused) is the record's registry_txn in the audit log.
    db.execute(
        "CREATE TABLE IF NOT EXISTS audit_outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, "
        "entry BLOB NOT NULL, node TEXT NOT NULL DEFAULT '')"
    )
    # v5: the MCP registry's trust store (new table: nothing to backfill).
    db.execute(MCP_AGENTS_TABLE)
    db.execute("CREATE INDEX IF NOT EXISTS mcp_agents_by_last_seen ON mcp_agents (last_seen)")
    if version in (1, 2):
        _migrate_to_v3(db, transaction)
    if version in (1, 2, 3):
        _migrate_to_v4(db, transaction)
    if version in (1, 2, 3, 4, 5):
        _migrate_to_v6(db, transaction)
    db.execute("CREATE INDEX IF NOT EXISTS tombstones_by_change_seq ON tombstones (change_seq)")
    db.execute("CREATE INDEX IF NOT EXISTS audit_outbox_by_node ON audit_outbox (node, id)")
    db.execute("CREATE INDEX IF NOT EXISTS agents_by_change_seq ON agents (change_seq)")
    # Covers iter_index_rows: the start-up scan reads this index only, never
    # the rows with their manifest and capability blobs (GBs at 1M agents).
    db.execute(
        "CREATE INDEX IF NOT EXISTS agents_registry ON agents (lifecycle_state, "
        "canonical_id, signer_kid, trust_tier, behavioral_trust_score, governance_zone, "
        "org_domain, required_scope)"
    )
    db.execute("INSERT OR IGNORE INTO meta VALUES ('change_seq', 0)")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def _migrate_to_v3(db: sqlite3.Connection, transaction: Transaction) -> None:
    """v1/v2 -> v3 in one transaction: add the registry columns and
    change_seq, backfilled from the stored JSON (the only time it is read
    at start-up)."""
    have = {row[1] for row in db.execute("PRAGMA table_info(agents)")}
    with transaction():
        for name, kind in (
            ("trust_tier", "INTEGER"),
            ("behavioral_trust_score", "REAL"),
            ("governance_zone", "TEXT"),
            ("org_domain", "TEXT"),
            ("required_scope", "TEXT"),
            ("change_seq", "INTEGER"),
        ):
            if name not in have:
                db.execute(f"ALTER TABLE agents ADD COLUMN {name} {kind}")
        rows = db.execute(
            "SELECT canonical_id, manifest, capabilities FROM agents ORDER BY rowid"
        ).fetchall()
        updates = [
            (*gate_columns(orjson.loads(m), orjson.loads(c)), seq, cid)
            for seq, (cid, m, c) in enumerate(rows, start=1)
        ]
        db.executemany(
            """UPDATE agents SET trust_tier = ?, behavioral_trust_score = ?,
                 governance_zone = ?, org_domain = ?, required_scope = ?, change_seq = ?
               WHERE canonical_id = ?""",
            updates,
        )
        db.execute("INSERT OR REPLACE INTO meta VALUES ('change_seq', ?)", (len(updates),))
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def _migrate_to_v4(db: sqlite3.Connection, transaction: Transaction) -> None:
    """v3 -> v4: tombstones.change_seq (NULL for the old ones: a follower
    starts from a full load, so they need no feed entry) and
    audit_outbox.node ('' for the rows already queued)."""
    with transaction():
        for table, column, kind in (
            ("tombstones", "change_seq", "INTEGER"),
            ("audit_outbox", "node", "TEXT NOT NULL DEFAULT ''"),
        ):
            have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def _migrate_to_v6(db: sqlite3.Connection, transaction: Transaction) -> None:
    """v5 -> v6: ``agents.result_fields`` (NULL until a row is written again;
    an ALTER that adds a nullable column rewrites no row)."""
    with transaction():
        have = {row[1] for row in db.execute("PRAGMA table_info(agents)")}
        if "result_fields" not in have:
            db.execute("ALTER TABLE agents ADD COLUMN result_fields BLOB")
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
