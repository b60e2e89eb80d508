"""Registration lifecycle: signed lifecycle events from the governance
platform (-02 6.7 step 6), their verification, the state machine, and the
replay/freshness rules for re-ACTIVATE.

A lifecycle event is a small JSON document signed, like a manifest, with a
trusted governance key (detached ES256 JWS over its JCS without
``signature``)::

    {"document_type": "agtp-lifecycle-event", "event": "REVOKE",
     "canonical_id": "...", "event_id": "evt-...", "issued_at": "...Z",
     "reason": "...", "successor_agent": "...", "signature": {...}}

Everything here is pure: the caller passes the trusted keys and the time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ans.protocol.errors import (
    Conflict,
    ErrorCode,
    Gone,
    InvalidManifest,
    InvalidParameter,
    NotFound,
)
from ans.protocol.jcs import canonicalize

from .keys import SigningKey
from .signing import KeyLookup, sign_document, verify_document

EVENT_DOCUMENT_TYPE = "agtp-lifecycle-event"
ACTIVE, SUSPENDED, REVOKED, DEPRECATED = "Active", "Suspended", "Revoked", "Deprecated"
# Dropped by the index-freshness scheduler (three failed DESCRIBEs); not a
# governance state: a later ACTIVATE brings the agent back.
REMOVED = "Removed"
RETIRED = frozenset({REVOKED, DEPRECATED})  # canonical id tombstoned forever
# What each event makes of the agent.
EVENT_TARGET = {
    "SUSPEND": SUSPENDED,
    "REINSTATE": ACTIVE,
    "REVOKE": REVOKED,
    "DEPRECATE": DEPRECATED,
}
LIFECYCLE_EVENTS = tuple(EVENT_TARGET)
MAX_EVENT_ID = 128
MAX_REASON = 512
_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,256}")
_EVENT_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_ALLOWED_FIELDS = frozenset(
    {
        "document_type",
        "event",
        "canonical_id",
        "event_id",
        "issued_at",
        "reason",
        "successor_agent",
        "signature",
    }
)


def parse_time(value: str) -> datetime:
    ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if ts.tzinfo is None:
        raise ValueError("timestamp needs a UTC offset")
    return ts


@dataclass(frozen=True, slots=True)
class LifecycleEvent:
    event: str
    canonical_id: str
    event_id: str
    issued_at: datetime
    reason: str | None
    successor_agent: str | None
    document: dict[str, Any]
    signer_kid: str

    @property
    def target_state(self) -> str:
        return EVENT_TARGET[self.event]


def _bad(message: str) -> InvalidParameter:
    return InvalidParameter("event", message)


def validate_event_fields(doc: Mapping[str, Any]) -> None:
    """Shape checks (422 ``invalid_event``) before the signature is looked at."""
    if doc.get("document_type") != EVENT_DOCUMENT_TYPE:
        raise _bad(f"document_type must be {EVENT_DOCUMENT_TYPE!r}")
    unknown = sorted(set(doc) - _ALLOWED_FIELDS)
    if unknown:
        raise _bad(f"unknown field {unknown[0][:40]!r}")
    if doc.get("event") not in EVENT_TARGET:
        raise _bad(f"event must be one of {', '.join(LIFECYCLE_EVENTS)}")
    cid = doc.get("canonical_id")
    if not isinstance(cid, str) or _ID_RE.fullmatch(cid) is None:
        raise _bad("canonical_id must be an identifier of at most 256 characters")
    eid = doc.get("event_id")
    if not isinstance(eid, str) or _EVENT_ID_RE.fullmatch(eid) is None:
        raise _bad(f"event_id must be an identifier of at most {MAX_EVENT_ID} characters")
    issued = doc.get("issued_at")
    try:
        if not isinstance(issued, str) or len(issued) > 64:
            raise ValueError
        parse_time(issued)
    except ValueError:
        raise _bad("issued_at must be an RFC 3339 timestamp with an offset") from None
    reason = doc.get("reason")
    if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON):
        raise _bad(f"reason must be a string of at most {MAX_REASON} characters")
    succ = doc.get("successor_agent")
    if succ is not None:
        if doc["event"] != "DEPRECATE":
            raise _bad("successor_agent is only meaningful on DEPRECATE")
        if not isinstance(succ, str) or _ID_RE.fullmatch(succ) is None:
            raise _bad("successor_agent must be a canonical id")


def verify_event(
    doc: dict[str, Any],
    trusted: KeyLookup,
    now: datetime,
    *,
    max_age: timedelta,
    max_skew: timedelta,
) -> LifecycleEvent:
    """Fields, then the governance signature (401), then the time window (409)."""
    validate_event_fields(doc)
    kid = verify_document(doc, trusted, "signature")
    issued = parse_time(doc["issued_at"])
    if issued > now + max_skew:
        raise Conflict(
            f"issued_at {doc['issued_at']} is in the future (beyond {max_skew.seconds} s of skew)",
            code=ErrorCode.STALE_EVENT,
        )
    if issued < now - max_age:
        raise Conflict(
            f"issued_at {doc['issued_at']} is older than {int(max_age.total_seconds())} s",
            code=ErrorCode.STALE_EVENT,
        )
    return LifecycleEvent(
        event=doc["event"],
        canonical_id=doc["canonical_id"],
        event_id=doc["event_id"],
        issued_at=issued,
        reason=doc.get("reason"),
        successor_agent=doc.get("successor_agent"),
        document=doc,
        signer_kid=kid,
    )


def check_transition(event: str, current: str | None, canonical_id: str) -> None:
    """Raise unless ``event`` may be applied to an agent in state ``current``
    (None: never seen here). Idempotent repeats are allowed."""
    target = EVENT_TARGET[event]
    if current in RETIRED and target != REVOKED:
        # Revoked is final; Deprecated may only be tightened to Revoked.
        if current == target:
            return
        raise Gone(
            f"agent {canonical_id[:80]} is {current}; its canonical id is retired",
            code=ErrorCode.AGENT_RETIRED,
        )
    if current is None and event in ("SUSPEND", "REINSTATE"):
        raise NotFound(f"no agent {canonical_id[:80]!r} has been registered here")
    if event == "REINSTATE" and current == REMOVED:
        raise Conflict(
            f"agent {canonical_id[:80]} was removed for failed refreshes; "
            "re-ACTIVATE it instead of reinstating",
            code=ErrorCode.INVALID_TRANSITION,
        )


# -- re-ACTIVATE freshness ---------------------------------------------------------


def _version_key(v: Any) -> tuple[int, ...] | None:
    if not isinstance(v, str):
        return None
    core = v.strip().lstrip("vV").split("+", 1)[0].split("-", 1)[0]
    parts = core.split(".")
    if not parts or not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def manifest_body(manifest: Mapping[str, Any]) -> bytes:
    """The signed content of a manifest (its JCS without the signature)."""
    body: bytes = canonicalize({k: v for k, v in manifest.items() if k != "signature"})
    return body


def _manifest_time(value: Any) -> datetime:
    # Manifest timestamps are validated as ISO 8601 but may lack an offset;
    # such a time is read as UTC so it still compares.
    ts = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def check_manifest_time(manifest: Mapping[str, Any], now: datetime, max_skew: timedelta) -> None:
    """Refuse (422 ``manifest_from_future``) a manifest whose ``last_updated``
    or ``activated_at`` is later than ``now`` plus the clock-skew window, as
    lifecycle events are bounded: stored, it would make every corrected
    manifest ``stale_metadata`` until that date."""
    for name in ("last_updated", "activated_at"):
        value = manifest.get(name)
        if value is None:
            continue
        try:
            ts = _manifest_time(value)
        except ValueError:
            continue  # validate_manifest_fields names malformed timestamps
        if ts > now + max_skew:
            raise InvalidManifest(
                f"manifest {name} {str(value)[:64]} is in the future (beyond "
                f"{int(max_skew.total_seconds())} s of clock skew); the governance "
                "platform's clock or the manifest is wrong",
                code=ErrorCode.MANIFEST_FROM_FUTURE,
            )


def check_manifest_freshness(new: Mapping[str, Any], stored: Mapping[str, Any]) -> bool:
    """True when ``new`` is the stored manifest again (idempotent re-ACTIVATE),
    False when it is newer; raises ``Conflict(stale_metadata)`` (409) when it
    is older, or the same age with different content.

    Age is ``last_updated`` (falling back to ``activated_at``), then
    ``version`` (dotted numbers) when the timestamps are equal."""
    if manifest_body(new) == manifest_body(stored):
        return True

    def stamp(m: Mapping[str, Any]) -> datetime:
        return _manifest_time(m.get("last_updated") or m["activated_at"])

    new_ts, old_ts = stamp(new), stamp(stored)
    if new_ts > old_ts:
        return False
    if new_ts < old_ts:
        raise Conflict(
            f"manifest last_updated {new.get('last_updated') or new['activated_at']} is older "
            f"than the stored {stored.get('last_updated') or stored['activated_at']}",
            code=ErrorCode.STALE_METADATA,
        )
    nv, ov = _version_key(new.get("version")), _version_key(stored.get("version"))
    if nv is not None and ov is not None and nv > ov:
        return False
    if nv is not None and ov is not None and nv < ov:
        raise Conflict(
            f"manifest version {new.get('version')} is older than the stored "
            f"{stored.get('version')}",
            code=ErrorCode.STALE_METADATA,
        )
    raise Conflict(
        "manifest has the same last_updated and version as the stored one but different "
        "content; the governance platform must bump last_updated or version",
        code=ErrorCode.STALE_METADATA,
    )


def make_event(
    event: str,
    canonical_id: str,
    key: SigningKey,
    issued_at: datetime,
    *,
    event_id: str,
    reason: str | None = None,
    successor_agent: str | None = None,
) -> dict[str, Any]:
    """A signed lifecycle event, as a governance platform would send it."""
    doc: dict[str, Any] = {
        "document_type": EVENT_DOCUMENT_TYPE,
        "event": event,
        "canonical_id": canonical_id,
        "event_id": event_id,
        "issued_at": issued_at.astimezone(UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z"),
    }
    if reason is not None:
        doc["reason"] = reason
    if successor_agent is not None:
        doc["successor_agent"] = successor_agent
    validate_event_fields(doc)
    signed: dict[str, Any] = sign_document(doc, key, "signature")
    return signed
