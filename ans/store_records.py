"""What the registry store holds and promises: the record types it reads and
writes (a stored agent, the gate columns of an index row, an applied
lifecycle event, a tombstone, an audit entry) and the ``RegistryStore``
protocol the service is written against. ``SQLiteStore`` (``store.py``) is
the implementation; tests may bring their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class StoredAgent:
    canonical_id: str
    manifest: dict[str, Any]
    capabilities: dict[str, Any]
    lifecycle_state: str
    signer_kid: str
    registered_at: str
    updated_at: str


@dataclass(frozen=True, slots=True)
class IndexRow:
    """What the in-memory registry needs of one Active agent (no JSON decoded)."""

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


# An audit record not yet chained (AuditLog.entry), committed with its change.
AuditEntry = Mapping[str, Any]


class RegistryStore(Protocol):
    def upsert(self, agent: StoredAgent, audit: AuditEntry | None = None) -> int | None: ...
    def upsert_many(
        self, agents: Sequence[StoredAgent], audit: AuditEntry | None = None
    ) -> int | None: ...
    def get(self, canonical_id: str) -> StoredAgent | None: ...
    def get_many(self, canonical_ids: Iterable[str]) -> dict[str, StoredAgent]: ...
    def iter_active(self) -> Iterator[StoredAgent]: ...
    def iter_index_rows(self) -> Iterator[IndexRow]: ...
    def changed_since(self, seq: int) -> Iterator[StoredAgent]: ...
    def max_seq(self) -> int: ...
    def apply_lifecycle(
        self,
        event: EventRecord,
        updated_at: str,
        tombstone: Tombstone | None,
        audit: AuditEntry | None = None,
    ) -> int | None: ...
    def audit_outbox(self) -> list[tuple[int, dict[str, Any]]]: ...
    def trim_audit_outbox(self, upto: int) -> None: ...
    def get_event(self, event_id: str) -> EventRecord | None: ...
    def last_event(self, canonical_id: str) -> EventRecord | None: ...
    def tombstone(self, canonical_id: str) -> Tombstone | None: ...
    def withdrawn(self) -> dict[str, str]: ...
    def count(self) -> int: ...
    def close(self) -> None: ...
