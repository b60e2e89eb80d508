"""A registry state change and its audit record commit together or not at all.

The record (an unchained :meth:`AuditLog.entry`) is written into the store's
``audit_outbox`` in the change's own SQLite transaction. After the commit,
:func:`publish` appends it to the hash-chained audit log with
``registry_txn`` = its outbox id. So:

- the store cannot be written (disk full, I/O error): the transaction rolls
  back, nothing is applied, the client gets 503 ``storage_unavailable``;
- the audit log cannot be written after the commit: the record is durable in
  the outbox (the client's 200 is true), waits in the log's backlog, and every
  further state change is refused with 503 (:func:`require_writable`) until
  the log can be written again;
- a crash between the commit and the append: :func:`recover` at start-up
  appends every committed record the log lacks, in commit order.

The log holds ``registry_txn`` values in increasing order (all state changes
run under the service's activate lock), so recovery needs only the last one.
Outbox rows are deleted once the log is fsynced past them (every
``TRIM_EVERY`` records, and after recovery).
"""

from __future__ import annotations

from typing import Any

import structlog

from ans.governance.audit import AuditLog
from ans.protocol.errors import StorageUnavailable

from .store import AuditEntry, RegistryStore

REF = "registry_txn"
TRIM_EVERY = 256
log = structlog.get_logger("ans.audit")


def require_writable(audit: AuditLog) -> None:
    """Raise 503 ``storage_unavailable`` (nothing applied) while the audit log
    still cannot be written."""
    if not audit.writable():
        raise StorageUnavailable(
            "the audit log cannot be written right now (storage unavailable); "
            "nothing was applied, retry later"
        )


def publish(store: RegistryStore, audit: AuditLog, ref: int | None, entry: AuditEntry) -> None:
    """Append the committed outbox entry ``ref`` to the audit log; never raises
    for a failed write (the entry stays durable in the outbox)."""
    if ref is None:
        return
    if audit.append({**entry, REF: ref}, durable=True) is None:
        log.error(
            "state change committed but its audit record is not in the audit log yet; "
            "it is kept in the registry's audit outbox and written when the log can be",
            registry_txn=ref,
            audit_event=entry.get("event"),
            canonical_id=entry.get("canonical_id"),
        )
        return
    if ref % TRIM_EVERY == 0:
        _trim(store, audit, ref)


def _trim(store: RegistryStore, audit: AuditLog, upto: int) -> None:
    try:
        audit.sync()
        store.trim_audit_outbox(upto)
    except (OSError, StorageUnavailable) as exc:  # kept; trimmed next time
        log.error("audit outbox not trimmed", error=str(exc), upto=upto)


def recover(store: RegistryStore, audit: AuditLog) -> int:
    """At start-up: append every committed audit record the log lacks (a
    crash came between a commit and its append); the number appended."""
    rows = store.audit_outbox()
    if not rows:
        return 0
    last: Any = audit.last_value(REF)
    done = last if isinstance(last, int) and not isinstance(last, bool) else 0
    missing = [(i, e) for i, e in rows if i > done]
    for i, e in missing:
        audit.append({**e, REF: i}, durable=True)
    if missing:
        log.warning(
            "audit log completed from the registry: state changes committed before a crash "
            "had no audit record yet",
            records=len(missing),
            first_registry_txn=missing[0][0],
            last_registry_txn=missing[-1][0],
        )
    if audit.backlog:
        log.error(
            "audit log cannot be written at start-up; state changes are refused "
            "(503 storage_unavailable) until it can",
            waiting=audit.backlog,
        )
        return len(missing)
    _trim(store, audit, rows[-1][0])
    return len(missing)
