"""The MCP trust store (:mod:`.trust_store`) in the PostgreSQL registry:
table ``mcp_agents`` (migration 2, ``store_pg_schema``), on the store's
connection pool. Each write is one statement in its own transaction; the
compare-and-set conditions (``ON CONFLICT DO NOTHING``, ``key_id =``,
``last_seen =``) make concurrent writers on several nodes agree.
"""

from __future__ import annotations

from typing import Any

from ..store_pg import PostgresStore
from .trust_store import COLUMNS, McpTrust, from_row, row_of

_MARKS = ", ".join(["%s"] * 11)


class PgMcpTrust:
    """A friend of :class:`PostgresStore`: it uses the store's pooled reads
    and write transactions (503 ``storage_unavailable`` when the database is
    unreachable, as the store's own calls)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    def _query(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        return self.store._read(lambda conn: conn.execute(sql, params).fetchall())

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        with self.store._write() as conn:
            return int(conn.execute(sql, params).rowcount)

    def get(self, agent_id: str) -> McpTrust | None:
        rows = self._query(
            f"SELECT {COLUMNS} FROM mcp_agents WHERE agent_id = %s",  # noqa: S608
            (agent_id,),
        )
        return from_row(rows[0]) if rows else None

    def pin(self, rec: McpTrust) -> McpTrust:
        with self.store._write() as conn:
            conn.execute(
                f"INSERT INTO mcp_agents ({COLUMNS}) VALUES ({_MARKS}) "  # noqa: S608
                "ON CONFLICT (agent_id) DO NOTHING",
                row_of(rec),
            )
            row = conn.execute(
                f"SELECT {COLUMNS} FROM mcp_agents WHERE agent_id = %s",  # noqa: S608
                (rec.agent_id,),
            ).fetchone()
        return from_row(row)

    def replace(self, rec: McpTrust, expect_key_id: str) -> bool:
        names = [c.strip() for c in COLUMNS.split(",")][1:]
        sets = ", ".join(f"{n} = %s" for n in names)
        return (
            self._write(
                f"UPDATE mcp_agents SET {sets} WHERE agent_id = %s AND key_id = %s",  # noqa: S608
                (*row_of(rec)[1:], rec.agent_id, expect_key_id),
            )
            == 1
        )

    def touch(self, agent_id: str, last_seen: float) -> bool:
        return (
            self._write(
                "UPDATE mcp_agents SET last_seen = GREATEST(last_seen, %s) "
                "WHERE agent_id = %s AND removed_at IS NULL",
                (last_seen, agent_id),
            )
            == 1
        )

    def page(self, after: str, limit: int, cutoff: float) -> list[McpTrust]:
        rows = self._query(
            f"SELECT {COLUMNS} FROM mcp_agents WHERE agent_id > %s AND last_seen > %s "  # noqa: S608
            "AND removed_at IS NULL ORDER BY agent_id LIMIT %s",
            (after, cutoff, limit),
        )
        return [from_row(r) for r in rows]

    def count_live(self, cutoff: float) -> int:
        rows = self._query(
            "SELECT COUNT(*) FROM mcp_agents WHERE last_seen > %s AND removed_at IS NULL",
            (cutoff,),
        )
        return int(rows[0][0])

    def stale(self, cutoff: float, limit: int) -> list[McpTrust]:
        rows = self._query(
            f"SELECT {COLUMNS} FROM mcp_agents WHERE last_seen <= %s "  # noqa: S608
            "AND removed_at IS NULL ORDER BY last_seen LIMIT %s",
            (cutoff, limit),
        )
        return [from_row(r) for r in rows]

    def mark_removed(self, agent_id: str, last_seen: float, at: float) -> bool:
        return (
            self._write(
                "UPDATE mcp_agents SET removed_at = %s "
                "WHERE agent_id = %s AND last_seen = %s AND removed_at IS NULL",
                (at, agent_id, last_seen),
            )
            == 1
        )

    def forget(self, agent_id: str) -> bool:
        return self._write("DELETE FROM mcp_agents WHERE agent_id = %s", (agent_id,)) == 1
