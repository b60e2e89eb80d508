"""``ans backup`` and ``ans restore`` of an SQLite data directory, online.

A backup is a directory: the registry copied with SQLite's online backup API
(a consistent snapshot while ``ans serve`` keeps writing: WAL readers never
block the writer), every other file of the data directory (the signing key,
the demo governance key, the audit log or logs, the index snapshot) copied as
it is, and ``backup.json`` listing each file with its size and SHA-256.

Why that is consistent enough: the audit log is append-only and every state
change's record is committed with the change in the registry's audit outbox
(``ans.audited``). A backup whose audit log copy stops short of the registry
copy is completed at the restored server's first start, which appends the
missing records from the outbox, in order; a log copy that runs ahead of the
registry copy only holds records of changes the registry copy lacks, which
is what an audit trail of a restored (older) registry should show (the
restored registry's outbox numbering is moved past them, so a later record
never reuses their ``registry_txn``). The index
snapshot is checked against the registry at start-up (a snapshot newer than
the registry, or unreadable, is rebuilt from it).

``ans restore`` refuses a data directory that is not empty, checks every
file against ``backup.json``, runs SQLite's integrity check and verifies the
audit log's hash chain before it copies anything in.

PostgreSQL stores are backed up with ``pg_dump`` (docs/operations.md, "Backups"); this
module covers the embedded store and the files beside it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import __version__
from .index.facet_file import FACET_FILE

MANIFEST = "backup.json"
REGISTRY = "registry.sqlite3"
# Never copied: the running server's lock, SQLite's side files (the backup API
# copies the registry whole), the facet-sums cache (GBs at 1M agents, rebuilt on
# demand by the queries that need it), temporary files.
SKIP_NAMES = {
    "ans.lock",
    "writers.lock",
    f"{REGISTRY}-wal",
    f"{REGISTRY}-shm",
    f"{REGISTRY}-journal",
    *(FACET_FILE + side for side in ("", "-wal", "-shm", "-journal")),
}
SKIP_DIRS = {"metrics"}  # the workers' live metric samples
SKIP_SUFFIXES = (".tmp", ".partial")


class BackupError(ValueError):
    """A backup or restore that cannot be done (one line for the CLI)."""


@dataclass(frozen=True, slots=True)
class BackupReport:
    directory: Path
    files: int
    bytes: int
    registry_rows: int


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _copyable(path: Path, data_dir: Path) -> bool:
    rel = path.relative_to(data_dir)
    return (
        path.is_file()
        and rel.name not in SKIP_NAMES
        and not rel.name.endswith(SKIP_SUFFIXES)
        and rel.as_posix() != REGISTRY
        and rel.parts[0] not in SKIP_DIRS
    )


def backup(data_dir: Path, target: Path) -> BackupReport:
    """Back ``data_dir`` up into the new directory ``target`` (may run while
    the server serves)."""
    registry = data_dir / REGISTRY
    if not registry.is_file():
        raise BackupError(f"{data_dir} holds no registry ({REGISTRY}); nothing to back up")
    if target.exists() and any(target.iterdir()):
        raise BackupError(f"{target} exists and is not empty; back up into a new directory")
    if target.resolve().is_relative_to(data_dir.resolve()):
        # the copy would hold its own partial output, and a restore of it the backups
        raise BackupError(f"{target} is inside the data directory; back up outside it")
    target.mkdir(parents=True, exist_ok=True)
    # The registry first: the audit log copied after it is at least as long,
    # and the restored server completes it from the outbox if not.
    src = sqlite3.connect(f"file:{registry}?mode=ro", uri=True)
    dst = sqlite3.connect(target / REGISTRY)
    try:
        src.execute("PRAGMA busy_timeout=5000")
        src.backup(dst, pages=4096)
        rows = int(dst.execute("SELECT count(*) FROM agents").fetchone()[0])
    except sqlite3.Error as exc:
        raise BackupError(f"cannot copy {registry}: {exc}") from None
    finally:
        dst.close()
        src.close()
    for path in sorted(data_dir.rglob("*")):
        if _copyable(path, data_dir):
            dest = target / path.relative_to(data_dir)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
    files: list[dict[str, Any]] = []
    total = 0
    for path in sorted(p for p in target.rglob("*") if p.is_file()):
        size = path.stat().st_size
        total += size
        files.append(
            {"path": path.relative_to(target).as_posix(), "bytes": size, "sha256": _sha256(path)}
        )
    doc = {
        "ans_version": __version__,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "source": str(data_dir.resolve()),
        "registry_rows": rows,
        "files": files,
    }
    (target / MANIFEST).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return BackupReport(target, len(files), total, rows)


def _check(source: Path) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = json.loads((source / MANIFEST).read_text(encoding="utf-8"))
        files = doc["files"]
    except (OSError, ValueError, KeyError, TypeError):
        raise BackupError(f"{source} is not an ANS backup (no readable {MANIFEST})") from None
    for entry in files:
        rel = Path(str(entry.get("path", "")))
        if rel.is_absolute() or ".." in rel.parts:
            raise BackupError(f"{MANIFEST} names a path outside the backup: {rel}")
        path = source / rel
        if not path.is_file() or _sha256(path) != entry.get("sha256"):
            raise BackupError(f"backup file {rel} is missing or does not match {MANIFEST}")
    db = sqlite3.connect(f"file:{source / REGISTRY}?mode=ro", uri=True)
    try:
        verdict = db.execute("PRAGMA integrity_check").fetchone()[0]
    except sqlite3.Error as exc:
        raise BackupError(f"backup registry unreadable: {exc}") from None
    finally:
        db.close()
    if verdict != "ok":
        raise BackupError(f"backup registry fails SQLite's integrity check: {verdict}")
    from ans.governance.audit import ChainBreak, check_chain

    for entry in files:
        name = Path(entry["path"]).name
        if name.startswith("audit") and name.endswith(".jsonl"):
            with open(source / entry["path"], "rb") as fh:
                outcome = check_chain(fh)
            if isinstance(outcome, ChainBreak):
                raise BackupError(
                    f"backup audit log {entry['path']} is broken at line {outcome.line}: "
                    f"{outcome.kind}"
                )
    return doc


def _number_outbox_past_the_log(data_dir: Path) -> None:
    """Make the registry's next audit outbox id larger than every
    ``registry_txn`` in the restored audit logs."""
    highest = 0
    for log_file in data_dir.rglob("audit*.jsonl"):
        with open(log_file, "rb") as fh:
            for line in fh:
                if b'"registry_txn"' in line:
                    try:
                        highest = max(highest, int(json.loads(line).get("registry_txn", 0)))
                    except (ValueError, TypeError, AttributeError):
                        continue
    if highest == 0:
        return
    db = sqlite3.connect(data_dir / REGISTRY)
    try:
        have = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'audit_outbox'").fetchone()
        if have is None:
            db.execute(
                "INSERT INTO sqlite_sequence (name, seq) VALUES ('audit_outbox', ?)", (highest,)
            )
        elif int(have[0]) < highest:
            db.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'audit_outbox'", (highest,))
        db.commit()
    finally:
        db.close()


def restore(source: Path, data_dir: Path) -> dict[str, Any]:
    """Restore the backup ``source`` into the empty (or new) ``data_dir``."""
    doc = _check(source)
    if data_dir.exists() and any(data_dir.iterdir()):
        raise BackupError(f"{data_dir} is not empty; restore into a new data directory")
    staging = data_dir.with_name(data_dir.name + ".restoring")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    for entry in doc["files"]:
        dest = staging / entry["path"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / entry["path"], dest)
    _number_outbox_past_the_log(staging)
    if data_dir.exists():
        data_dir.rmdir()
    staging.rename(data_dir)  # all or nothing
    for key in data_dir.glob("*.pem"):
        key.chmod(0o600)
    return doc
