"""What the registry store holds and promises: the record types it reads and
writes (a stored agent, the gate columns of an index row, an applied
lifecycle event, a tombstone, an audit entry) and the ``RegistryStore``
protocol the service is written against. ``SQLiteStore`` (``store.py``) and
``PostgresStore`` (``store_pg.py``) implement it; ``open_store`` (``store_open.py``)
picks one from a ``--store`` value; ``tests/ans/test_store_contract.py`` holds
both to the same contract.

The change feed
---------------
Every write that can change what DISCOVER serves -- an agent upserted
(ACTIVATE, import, refresh), a lifecycle transition (SUSPEND, REINSTATE,
DEPRECATE, REVOKE, a refresh removal) and the tombstone it leaves, even for a
canonical id that never had an agent row -- takes the next value(s) of one
store-wide counter, ``change_seq``, *inside its own write transaction*, and
stamps it on the rows it writes (the agent row and/or the tombstone). So:

- ``max_seq()`` is the feed position: the highest change_seq committed (0 for
  an empty store). It is one primary-key read; call it before answering.
- ``changes_since(seq)`` lists, oldest first, one ``Change`` per canonical id
  whose agent row or tombstone was written after ``seq``: its latest seq and
  its *effective* state (the tombstone's state when there is one -- a
  tombstone always wins over the agent row -- else the row's
  ``lifecycle_state``).
- Seqs are monotonic in commit order: a change that commits after a reader
  saw position N has a seq > N (writers serialise on the counter, see each
  store). So a follower that has applied everything up to N never skips a
  change by moving to the highest seq it was given. Seqs may have gaps
  (``upsert_many`` of an agent written twice, a lifecycle event on an id with
  neither row); a follower never waits for a missing seq.

A follower (another worker or node over the same store) keeps ``pos`` and,
before each DISCOVER::

    head = store.max_seq()
    if head > pos:
        for ch in store.changes_since(pos):
            if ch.state == "Active": fetch the row (get_many) and index it
            else: drop ch.canonical_id from the index; it is withdrawn
                  (served as such) when ch.state is in WITHDRAWN_STATES
            pos = max(pos, ch.seq)
        pos = max(pos, head)

A writer that follows the feed too (its own index already holds what it
wrote) must not jump to ``max_seq()`` after its own write: on another node
(or worker without a shared lock) a change may have committed between its
catch-up and its write, or between its write and that read. It uses
``written_seqs()`` instead::

    # caught up to pos, then wrote
    first, last = store.written_seqs()
    if first == pos + 1:
        pos = last      # nothing else in between; later changes come from the feed
    # else: leave pos; the next catch-up re-applies our own rows too (harmless)

``wait_for_change(seq, timeout)`` blocks until the position passes ``seq``
(PostgreSQL: LISTEN/NOTIFY, with polling as the fallback; SQLite: polling),
so a follower can also catch up in the background between queries.

The audit outbox
----------------
Every state change carries its unchained audit record into the same
transaction (``audit_outbox``). Each row has an owner, ``node``: the store
instance's ``node`` (given when it is opened; ``""`` by default). A node (or
worker) recovers and trims only its own rows, so several writers over one
store keep one hash-chained audit log each. Outbox ids come from one counter,
are never reused, and within one node increase in commit order.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from ans.protocol.errors import Conflict, ErrorCode, Gone


@dataclass(frozen=True, slots=True)
class StoredAgent:
    canonical_id: str
    manifest: dict[str, Any]
    capabilities: dict[str, Any]
    lifecycle_state: str
    signer_kid: str
    registered_at: str
    updated_at: str


class IndexRow(NamedTuple):
    """What the in-memory registry needs of one Active agent (no JSON decoded).
    A named tuple: a million are made at start-up, and a frozen dataclass's
    __init__ cost ~3.8 us of the 5.3 s it took to read them at 1M agents."""

    canonical_id: str
    signer_kid: str
    trust_tier: int
    behavioral_trust_score: float
    governance_zone: str
    org_domain: str  # lowercased
    required_scope: str


def gate_columns(
    manifest: dict[str, Any], capabilities: dict[str, Any]
) -> tuple[int, float, str, str, str]:
    """(trust_tier, behavioral_trust_score, governance_zone, org_domain lowercased,
    required_scope) exactly as the registry derives them from a verified manifest."""
    required = capabilities.get("required_scope") or " ".join(
        manifest["authority_scope_categories"]
    )
    return (
        int(manifest["trust_tier"]),
        float(manifest["behavioral_trust_score"]),
        str(manifest["governance_zone"]),
        str(manifest["org_domain"]).lower(),
        str(required),
    )


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


# Effective states in which an agent must not be served (``withdrawn()``):
# Suspended agents and tombstoned (retired) canonical ids.
WITHDRAWN_STATES = frozenset({"Suspended", "Revoked", "Deprecated"})


@dataclass(frozen=True, slots=True)
class Change:
    """One change-feed entry: ``canonical_id`` was written at ``seq``; its
    effective state is now ``state`` (tombstone state, else lifecycle_state)."""

    seq: int
    canonical_id: str
    state: str


def refuse_overwrite(found: Iterable[tuple[str, str | None, str | None]]) -> None:
    """The store's own check, inside its write transaction, that an upsert
    changes nothing another writer (worker or node) has retired or suspended
    since the caller looked: ``found`` is (canonical_id, tombstone state,
    stored lifecycle_state) of the ids about to be written. 410
    ``agent_retired`` / 409 ``agent_suspended``; nothing is written."""
    for cid, tomb, state in found:
        if tomb is not None:
            raise Gone(
                f"agent {cid[:80]} is {tomb}; its canonical id is retired",
                code=ErrorCode.AGENT_RETIRED,
            )
        if state == "Suspended":
            raise Conflict(
                f"agent {cid[:80]} was suspended meanwhile; use REINSTATE",
                code=ErrorCode.AGENT_SUSPENDED,
            )


def refuse_stale_transition(event: EventRecord, current: str | None) -> None:
    """Inside the write transaction: the agent's effective state must still be
    the ``state_before`` the caller checked the transition against (another
    writer may have changed it since); else 409 and nothing is written."""
    if current != event.state_before:
        raise Conflict(
            f"agent {event.canonical_id[:80]} changed state while {event.event} was applied "
            f"(now {current}, was {event.state_before}); nothing was applied, retry"
        )


# An audit record not yet chained (AuditLog.entry), committed with its change.
AuditEntry = Mapping[str, Any]


class RegistryStore(Protocol):
    """The registry store. ``node`` owns the audit-outbox rows this instance
    writes; ``audit_outbox``/``trim_audit_outbox`` default to it."""

    node: str

    def upsert(self, agent: StoredAgent, audit: AuditEntry | None = None) -> int | None: ...
    def upsert_many(
        self, agents: Sequence[StoredAgent], audit: AuditEntry | None = None
    ) -> int | None: ...
    def get(self, canonical_id: str) -> StoredAgent | None: ...
    def get_many(self, canonical_ids: Iterable[str]) -> dict[str, StoredAgent]: ...
    def stored_result_fields(self, canonical_ids: Sequence[str]) -> dict[str, bytes | None]:
        """The stored agents' ``result_fields`` column (``ans.result_fields``;
        None for a row written before it existed); absent ids are left out."""
        ...

    def iter_result_fields(self) -> Generator[tuple[str, bytes], None, None]:
        """Every Active agent's stored ``result_fields`` document (rows written
        before that column are left out), in no particular order."""
        ...

    def iter_active(self) -> Iterator[StoredAgent]: ...
    def iter_index_rows(self) -> Iterator[IndexRow]: ...
    def changed_since(self, seq: int) -> Iterator[StoredAgent]:
        """Every agent row (any state) written after ``seq``, oldest first
        (tombstones of ids without a row are not in it: see changes_since)."""
        ...

    def changes_since(self, seq: int, limit: int | None = None) -> list[Change]:
        """The change feed after ``seq``: one Change per canonical id (its
        latest seq), ordered by seq, at most ``limit`` of them."""
        ...

    def max_seq(self) -> int:
        """The feed position: the highest committed change_seq (0: none)."""
        ...

    def wait_for_change(self, seq: int, timeout: float) -> int:
        """Block until ``max_seq() > seq`` or ``timeout`` seconds pass; the
        position then."""
        ...

    def written_seqs(self) -> tuple[int, int] | None:
        """(first, last) change_seq taken by the calling thread's last
        successful write through this instance (None before any / after a
        failed one). A writer that was caught up to ``pos`` before writing
        may move to ``last`` without re-reading its own rows only if
        ``first == pos + 1``; otherwise another writer committed in between
        and it must catch up from ``pos`` (see "The change feed")."""
        ...

    def apply_lifecycle(
        self,
        event: EventRecord,
        updated_at: str,
        tombstone: Tombstone | None,
        audit: AuditEntry | None = None,
    ) -> int | None: ...
    def audit_outbox(self, node: str | None = None) -> list[tuple[int, dict[str, Any]]]:
        """``node``'s (default: this instance's) queued audit entries (id,
        entry), oldest first."""
        ...

    def trim_audit_outbox(self, upto: int, node: str | None = None) -> None:
        """Forget ``node``'s queued entries with id <= ``upto``."""
        ...

    def get_event(self, event_id: str) -> EventRecord | None: ...
    def last_event(self, canonical_id: str) -> EventRecord | None: ...
    def tombstone(self, canonical_id: str) -> Tombstone | None: ...
    def withdrawn(self) -> dict[str, str]: ...
    def count(self) -> int: ...
    def close(self) -> None: ...
