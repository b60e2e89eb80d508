"""``--store``: which registry store to open.

- no value: SQLite at ``<data dir>/registry.sqlite3`` (the embedded default,
  what ``make demo`` uses);
- a path: SQLite at that file;
- ``postgresql://...`` (or ``postgres://``): ``PostgresStore``, a libpq URL
  (``?options=-csearch_path%3Dmyschema`` picks a schema; needs the
  ``postgres`` extra).

Anything that stops the store from opening (unreachable database, a file that
is not a registry, a schema newer than this ANS, an unknown URL scheme) is a
one-line ``ConfigError``; a password in the URL is never shown.
"""

from __future__ import annotations

import re
import secrets
import sqlite3
from pathlib import Path

from .config import ConfigError
from .store import SQLiteStore
from .store_records import RegistryStore

REGISTRY_FILE = "registry.sqlite3"
NODE_ID_FILE = "node-id"
_PG_SCHEMES = ("postgresql://", "postgres://")


def redact(url: str) -> str:
    """``url`` without its password (user:secret@ -> user:***@, password=...)."""
    url = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)
    return re.sub(r"(password=)[^&\s]*", r"\1***", url)


def is_postgres(target: str | Path | None) -> bool:
    return isinstance(target, str) and target.lower().startswith(_PG_SCHEMES)


def open_store(
    target: str | Path | None = None,
    *,
    data_dir: Path | None = None,
    node: str = "",
) -> RegistryStore:
    """The store ``target`` names (see the module docstring); ``node`` owns the
    audit-outbox rows written through it (one per node or worker)."""
    if is_postgres(target):
        assert isinstance(target, str)
        return _open_postgres(target, node)
    if isinstance(target, str) and re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", target):
        raise ConfigError(
            f"--store {redact(target)[:200]}: unknown scheme (a file path or postgresql://...)"
        )
    if target is None or target == "":
        if data_dir is None:
            raise ConfigError("no --store and no data directory to keep the registry in")
        path = data_dir / REGISTRY_FILE
    else:
        path = Path(target)
    try:
        return SQLiteStore(path, node=node)
    except (sqlite3.DatabaseError, RuntimeError) as exc:
        raise ConfigError(f"registry {path}: {exc}") from None


def default_node(target: str | Path | None, data_dir: Path) -> str:
    """Who owns the audit-outbox rows this server writes: ``""`` for SQLite
    (one server per file; the rows of schema v3 are ``""``), and for
    PostgreSQL the id kept in ``DATA-DIR/node-id`` (made at the first start),
    so each node -- with its own data directory and audit log -- recovers
    only its own records after a crash."""
    if not is_postgres(target):
        return ""
    path = data_dir / NODE_ID_FILE
    try:
        node = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        node = ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if not node:
        node = "node-" + secrets.token_hex(8)
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(node + "\n", encoding="ascii")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot write the node id: {exc}") from None
    return node


def _open_postgres(url: str, node: str) -> RegistryStore:
    try:
        import psycopg

        from .store_pg import PostgresStore
    except ImportError:
        raise ConfigError(
            "--store postgresql://... needs psycopg 3 and psycopg-pool: pip install 'ans[postgres]'"
        ) from None
    try:
        return PostgresStore(url, node=node)
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"registry {redact(url)}: {redact(first)[:300]}") from None
    except RuntimeError as exc:
        raise ConfigError(f"registry {redact(url)}: {exc}") from None
