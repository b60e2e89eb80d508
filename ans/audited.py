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

With ``ans serve --workers N`` each worker keeps its own hash-chained log
(:func:`worker_log_path`: worker 0 the usual ``audit.jsonl``, worker *i*
``audit-worker-i.jsonl``): one appender per file, no cross-process lock on
the hot path, and a chain that a crash of one worker cannot fork. Every
record of worker *i* carries ``"worker": i`` (:class:`WorkerAuditLog`), so
recovery replays into a log only that worker's own outbox rows (rows without
the field are worker 0's: a single process). Workers do not trim the outbox
(a row another worker has not appended yet could go); the supervisor
completes every log and trims when no worker runs (at start and at exit).
``ans audit verify`` checks every log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import structlog

from ans.governance.audit import AuditLog
from ans.protocol.errors import StorageUnavailable

from .store import AuditEntry, RegistryStore

REF = "registry_txn"
WORKER = "worker"
TRIM_EVERY = 256
AUDIT_FILE = "audit.jsonl"
WORKER_PREFIX = "audit-worker-"
log = structlog.get_logger("ans.audit")


def worker_log_path(data_dir: Path, worker: int) -> Path:
    """Worker ``worker``'s audit log: ``audit.jsonl`` for worker 0 (the only
    one of a single process), ``audit-worker-N.jsonl`` for the others."""
    if worker == 0:
        return data_dir / AUDIT_FILE
    return data_dir / f"{WORKER_PREFIX}{worker}.jsonl"


def all_log_paths(data_dir: Path) -> list[Path]:
    """Every audit log in the data directory (``audit.jsonl`` first, then the
    other workers' in worker order) that exists."""
    paths = [data_dir / AUDIT_FILE] if (data_dir / AUDIT_FILE).exists() else []
    return paths + [worker_log_path(data_dir, w) for w in logged_workers(data_dir)]


def logged_workers(data_dir: Path) -> list[int]:
    """The workers (other than 0) that have a log in the data directory."""
    found = []
    for p in data_dir.glob(f"{WORKER_PREFIX}*.jsonl"):
        num = p.stem.removeprefix(WORKER_PREFIX)
        if num.isdigit() and int(num) > 0:
            found.append(int(num))
    return sorted(found)


class WorkerAuditLog(AuditLog):  # type: ignore[misc]  # (mypy sees ans.governance as Any)
    """One worker's audit log: every record carries ``"worker": N``."""

    def __init__(self, path: Path, *args: Any, worker: int, **kwargs: Any) -> None:
        super().__init__(path, *args, **kwargs)
        self.worker = worker

    def entry(self, event: str, **fields: Any) -> dict[str, Any]:
        entry: dict[str, Any] = super().entry(event, **fields, **{WORKER: self.worker})
        return entry


def worker_of(entry: dict[str, Any]) -> int:
    w = entry.get(WORKER, 0)
    return w if isinstance(w, int) and not isinstance(w, bool) else 0


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
    if ref % TRIM_EVERY == 0 and not isinstance(audit, WorkerAuditLog):
        _trim(store, audit, ref)


def _trim(store: RegistryStore, audit: AuditLog, upto: int) -> None:
    try:
        audit.sync()
        store.trim_audit_outbox(upto)
    except (OSError, StorageUnavailable) as exc:  # kept; trimmed next time
        log.error("audit outbox not trimmed", error=str(exc), upto=upto)


def recover(
    store: RegistryStore, audit: AuditLog, worker: int | None = None, trim: bool = True
) -> int:
    """At start-up: append every committed audit record the log lacks (a
    crash came between a commit and its append); the number appended.
    ``worker``: only that worker's rows (see :class:`WorkerAuditLog`);
    ``trim``: then trim the outbox (only when no other worker runs and every
    other log is complete)."""
    rows = store.audit_outbox()
    if not rows:
        return 0
    last: Any = audit.last_value(REF)
    done = last if isinstance(last, int) and not isinstance(last, bool) else 0
    missing = [(i, e) for i, e in rows if i > done and (worker is None or worker_of(e) == worker)]
    for i, e in missing:
        audit.append({**e, REF: i}, durable=True)
    if missing:
        log.warning(
            "audit log completed from the registry: state changes committed before a crash "
            "had no audit record yet",
            records=len(missing),
            first_registry_txn=missing[0][0],
            last_registry_txn=missing[-1][0],
            worker=worker,
        )
    if audit.backlog:
        log.error(
            "audit log cannot be written at start-up; state changes are refused "
            "(503 storage_unavailable) until it can",
            waiting=audit.backlog,
        )
        return len(missing)
    if trim:
        _trim(store, audit, rows[-1][0])
    return len(missing)


def recover_workers(
    store: RegistryStore,
    data_dir: Path,
    main: AuditLog,
    open_log: Callable[[int], AuditLog],
    workers: Iterable[int] = (0,),
) -> int:
    """Complete every worker's log from the outbox -- worker 0's is ``main``
    (left open), the others' are opened with ``open_log(worker)`` and closed
    -- then trim the outbox. ``workers``, and any worker with a log or an
    outbox row. No worker may be running."""
    rows = store.audit_outbox()
    every = set(workers) | {0} | set(logged_workers(data_dir)) | {worker_of(e) for _, e in rows}
    total = 0
    complete = True
    for w in sorted(every):
        audit = main if w == 0 else open_log(w)
        try:
            total += recover(store, audit, worker=w, trim=False)
            complete = complete and not audit.backlog
            audit.sync()
        except OSError as exc:
            complete = False
            log.error("audit log not synced after recovery", error=str(exc), worker=w)
        finally:
            if audit is not main:
                audit.close()
    if rows and complete:
        try:
            store.trim_audit_outbox(rows[-1][0])
        except (OSError, StorageUnavailable) as exc:
            log.error("audit outbox not trimmed", error=str(exc), upto=rows[-1][0])
    return total
