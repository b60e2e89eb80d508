"""A real PostgreSQL for tests and scripts: the server named by
``ANS_TEST_PG_URL`` (default: 127.0.0.1:5432, trust auth, database ``test``),
and throw-away schemas in it (``ans_test_<random>``) that a store reaches
through ``search_path`` in its URL."""

from __future__ import annotations

import os
import secrets
import time
from urllib.parse import quote

PG_URL = os.environ.get("ANS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def unreachable() -> str | None:
    """Why PostgreSQL cannot be used here (None: it can)."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[dev]')"
    try:
        with psycopg.connect(PG_URL, autocommit=True, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"PostgreSQL not reachable at {PG_URL} (set ANS_TEST_PG_URL): {first}"
    return None


def schema_url(schema: str, base: str = PG_URL) -> str:
    """``base`` with ``search_path`` set to ``schema`` (and the schema as the
    application_name, so a test can find its own connections)."""
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options={quote(f'-csearch_path={schema}')}&application_name={schema}"


def create_schema(prefix: str = "ans_test") -> str:
    """A new empty schema; its name."""
    import psycopg

    name = f"{prefix}_{secrets.token_hex(5)}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    return name


def drop_schema(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def terminate(schema: str, wait: float = 10.0) -> int:
    """Kill every server connection opened through ``schema_url(schema)``
    (what a database restart or a network cut does to them); how many. Returns
    once they are gone (``pg_terminate_backend`` only signals: a backend that
    exits later would fail whatever its connection runs next)."""
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            (schema,),
        ).fetchall()
        pids = [r[0] for r in rows]
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            left = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)
            ).fetchone()
            if not left or left[0] == 0:
                break
            time.sleep(0.01)
    return len(pids)
