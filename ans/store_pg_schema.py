"""The PostgreSQL registry's schema and its versioned migrations, for
``PostgresStore`` (``store_pg.py``).

Applied migrations are rows of ``schema_migrations`` (version, description,
applied_at). ``migrate`` applies the missing ones in order in one
transaction (PostgreSQL DDL is transactional: all or nothing), under a
transaction-scoped advisory lock so two nodes starting at once over an empty
database do not both create it; a database migrated by a newer ANS (a
version this one does not know) is refused.

The tables are SQLite's (``store_sqlite_schema.py``), with the same columns
and meaning: documents (manifest, capabilities, lifecycle event) are the same
orjson bytes in ``bytea`` (byte-for-byte what was verified; JSONB would
reorder keys and renormalise numbers), timestamps the same RFC 3339 text,
ids and timestamps in the "C" collation (ordered bytewise, as SQLite does,
whatever the database's locale), and ``meta`` holds the one-row ``change_seq``
counter that serialises writers (see ``store_pg``).
"""

from __future__ import annotations

from typing import Any

# (version, description, statements). Append only; never edit an applied one.
MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (
        1,
        "registry: agents, lifecycle events, tombstones, change_seq, audit outbox",
        (
            """CREATE TABLE agents (
                   canonical_id           text COLLATE "C" PRIMARY KEY,
                   manifest               bytea NOT NULL,
                   capabilities           bytea NOT NULL,
                   lifecycle_state        text NOT NULL,
                   signer_kid             text NOT NULL,
                   registered_at          text NOT NULL,
                   updated_at             text NOT NULL,
                   trust_tier             integer NOT NULL,
                   behavioral_trust_score double precision NOT NULL,
                   governance_zone        text NOT NULL,
                   org_domain             text NOT NULL,
                   required_scope         text NOT NULL,
                   change_seq             bigint NOT NULL)""",
            "CREATE INDEX agents_by_change_seq ON agents (change_seq)",
            # Covers iter_index_rows (an index-only scan at start-up).
            """CREATE INDEX agents_registry ON agents (lifecycle_state, canonical_id)
                   INCLUDE (signer_kid, trust_tier, behavioral_trust_score,
                            governance_zone, org_domain, required_scope)""",
            """CREATE TABLE lifecycle_events (
                   event_id     text PRIMARY KEY,
                   canonical_id text COLLATE "C" NOT NULL,
                   event        text NOT NULL,
                   issued_at    text COLLATE "C" NOT NULL,
                   applied_at   text COLLATE "C" NOT NULL,
                   signer_kid   text NOT NULL,
                   state_before text,
                   state_after  text NOT NULL,
                   document     bytea NOT NULL)""",
            "CREATE INDEX lifecycle_events_by_agent ON lifecycle_events (canonical_id, issued_at)",
            """CREATE TABLE tombstones (
                   canonical_id text COLLATE "C" PRIMARY KEY,
                   state        text NOT NULL,
                   event_id     text NOT NULL,
                   issued_at    text NOT NULL,
                   reason       text,
                   recorded_at  text NOT NULL,
                   change_seq   bigint NOT NULL)""",
            "CREATE INDEX tombstones_by_change_seq ON tombstones (change_seq)",
            "CREATE TABLE meta (key text PRIMARY KEY, value bigint NOT NULL)",
            "INSERT INTO meta VALUES ('change_seq', 0)",
            """CREATE TABLE audit_outbox (
                   id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                   node  text NOT NULL DEFAULT '',
                   entry bytea NOT NULL)""",
            "CREATE INDEX audit_outbox_by_node ON audit_outbox (node, id)",
        ),
    ),
    (
        2,
        "mcp registry: trust store (pinned key per agent_id, heartbeat)",
        (
            """CREATE TABLE mcp_agents (
                   agent_id         text COLLATE "C" PRIMARY KEY,
                   key_pem          text NOT NULL,
                   key_id           text NOT NULL,
                   announcement     bytea NOT NULL,
                   digest           text NOT NULL,
                   first_seen       double precision NOT NULL,
                   last_seen        double precision NOT NULL,
                   previous_key_pem text,
                   previous_key_id  text,
                   previous_until   double precision,
                   removed_at       double precision)""",
            "CREATE INDEX mcp_agents_by_last_seen ON mcp_agents (last_seen)",
        ),
    ),
    (
        3,
        "agents.result_fields: the stored DISCOVER result fields (NULL: derived on read)",
        ("ALTER TABLE agents ADD COLUMN result_fields bytea",),
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]
# pg_advisory_xact_lock key for migrations ("ANS" + 1).
_MIGRATION_LOCK = 0x414E5301


def migrate(conn: Any) -> list[int]:
    """Bring the schema on ``conn`` (an autocommit psycopg connection, its
    search_path set) up to SCHEMA_VERSION; the versions applied now.
    RuntimeError for a database newer than this ANS."""
    applied_now: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   version     integer PRIMARY KEY,
                   description text NOT NULL,
                   applied_at  timestamptz NOT NULL DEFAULT now())"""
        )
        have = {int(v) for (v,) in conn.execute("SELECT version FROM schema_migrations")}
        unknown = sorted(v for v in have if v > SCHEMA_VERSION)
        if unknown:
            raise RuntimeError(
                f"registry schema version {unknown[-1]} is newer than this ANS "
                f"(it knows up to {SCHEMA_VERSION})"
            )
        for version, description, statements in MIGRATIONS:
            if version in have:
                continue
            with conn.transaction():  # a savepoint per migration
                for statement in statements:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (version, description) VALUES (%s, %s)",
                    (version, description),
                )
            applied_now.append(version)
    return applied_now
