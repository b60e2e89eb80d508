"""Lifecycle events and re-ACTIVATE freshness rules (``ans.governance.lifecycle``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from ans.governance.keys import SigningKey, TrustedKeys
from ans.governance.lifecycle import (
    check_manifest_freshness,
    check_transition,
    make_event,
    verify_event,
)
from ans.governance.signing import sign_document
from ans.protocol.errors import AgtpError

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
SKEW = timedelta(minutes=5)


@pytest.fixture(scope="module")
def key() -> SigningKey:
    return SigningKey.generate()


def event(key: SigningKey, name: str = "REVOKE", **kw: Any) -> dict[str, Any]:
    issued = kw.pop("issued_at", NOW - timedelta(seconds=1))
    return make_event(name, "agent-1", key, issued, event_id=kw.pop("event_id", "evt-1"), **kw)


def code_of(fn: Any, *args: Any, **kw: Any) -> tuple[int, str]:
    with pytest.raises(AgtpError) as info:
        fn(*args, **kw)
    return info.value.status, info.value.code


def verify(doc: dict[str, Any], keys: TrustedKeys) -> Any:
    return verify_event(doc, keys, NOW, max_age=DAY, max_skew=SKEW)


def test_signed_event_verifies(key: SigningKey) -> None:
    ev = verify(event(key, reason="compromised"), TrustedKeys([key.public]))
    assert (ev.event, ev.canonical_id, ev.event_id) == ("REVOKE", "agent-1", "evt-1")
    assert ev.signer_kid == key.kid and ev.target_state == "Revoked"
    assert ev.reason == "compromised"


def test_untrusted_key_tampered_and_unsigned_events_are_401(key: SigningKey) -> None:
    doc = event(key)
    other = SigningKey.generate()
    assert code_of(verify, doc, TrustedKeys([other.public])) == (401, "unknown_signing_key")
    tampered = {**doc, "canonical_id": "agent-2"}
    assert code_of(verify, tampered, TrustedKeys([key.public])) == (401, "signature_invalid")
    unsigned = {k: v for k, v in doc.items() if k != "signature"}
    assert code_of(verify, unsigned, TrustedKeys([key.public])) == (401, "signature_invalid")


@pytest.mark.parametrize(
    "change",
    [
        {"event": "DELETE"},
        {"document_type": "agtp-manifest"},
        {"canonical_id": "has space"},
        {"event_id": ""},
        {"issued_at": "yesterday"},
        {"issued_at": "2026-11-21T12:00:00"},  # no offset
        {"reason": "x" * 513},
        {"successor_agent": "agent-9"},  # only on DEPRECATE
        {"extra": 1},
    ],
)
def test_malformed_events_are_422(key: SigningKey, change: dict[str, Any]) -> None:
    body = {k: v for k, v in event(key).items() if k != "signature"}
    doc = sign_document({**body, **change}, key, "signature")
    assert code_of(verify, doc, TrustedKeys([key.public])) == (422, "invalid_event")


def test_events_outside_the_time_window_are_stale(key: SigningKey) -> None:
    keys = TrustedKeys([key.public])
    old = event(key, issued_at=NOW - DAY - timedelta(seconds=1))
    future = event(key, issued_at=NOW + SKEW + timedelta(seconds=1))
    assert code_of(verify, old, keys) == (409, "stale_event")
    assert code_of(verify, future, keys) == (409, "stale_event")
    verify(event(key, issued_at=NOW + SKEW - timedelta(seconds=1)), keys)  # within skew


@pytest.mark.parametrize(
    ("name", "current", "expected"),
    [
        ("SUSPEND", "Active", None),
        ("SUSPEND", "Suspended", None),
        ("REINSTATE", "Suspended", None),
        ("REINSTATE", "Active", None),
        ("REVOKE", None, None),  # never seen here: tombstoned anyway
        ("DEPRECATE", "Active", None),
        ("REVOKE", "Deprecated", None),  # tightening is allowed
        ("REVOKE", "Revoked", None),
        ("SUSPEND", None, (404, "not_found")),
        ("REINSTATE", None, (404, "not_found")),
        ("REINSTATE", "Revoked", (410, "agent_retired")),
        ("REINSTATE", "Deprecated", (410, "agent_retired")),
        ("SUSPEND", "Revoked", (410, "agent_retired")),
        ("DEPRECATE", "Revoked", (410, "agent_retired")),
        ("REINSTATE", "Removed", (409, "invalid_transition")),
    ],
)
def test_transitions(name: str, current: str | None, expected: tuple[int, str] | None) -> None:
    if expected is None:
        check_transition(name, current, "agent-1")
    else:
        assert code_of(check_transition, name, current, "agent-1") == expected


BASE = {"activated_at": "2026-01-01T00:00:00Z", "job_description": "x", "signature": {"v": 1}}


def test_same_manifest_is_idempotent_even_with_a_new_signature() -> None:
    assert check_manifest_freshness({**BASE, "signature": {"v": 2}}, BASE) is True


@pytest.mark.parametrize(
    ("new", "stored"),
    [
        ({"last_updated": "2026-03-01T00:00:00Z"}, {"last_updated": "2026-02-01T00:00:00Z"}),
        ({"version": "1.10.0"}, {"version": "1.9.3"}),
        ({"last_updated": "2026-02-01T00:00:00Z"}, {}),  # falls back to activated_at
    ],
)
def test_newer_manifest_is_accepted(new: dict[str, Any], stored: dict[str, Any]) -> None:
    assert (
        check_manifest_freshness(
            {**BASE, **new, "job_description": "y"}, {**BASE, **stored}
        )
        is False
    )


@pytest.mark.parametrize(
    ("new", "stored"),
    [
        ({"last_updated": "2026-02-01T00:00:00Z"}, {"last_updated": "2026-03-01T00:00:00Z"}),
        ({"last_updated": "2026-03-01T01:00:00+02:00"}, {"last_updated": "2026-03-01T00:00:00Z"}),
        ({"version": "1.9.3"}, {"version": "1.10.0"}),
        ({}, {}),  # same age, different content
        ({"version": "beta"}, {"version": "alpha"}),  # incomparable versions, same age
    ],
)
def test_older_or_conflicting_manifest_is_stale(
    new: dict[str, Any], stored: dict[str, Any]
) -> None:
    assert code_of(
        check_manifest_freshness, {**BASE, **new, "job_description": "y"}, {**BASE, **stored}
    ) == (409, "stale_metadata")


def test_timestamps_without_offset_compare_as_utc() -> None:
    # manifest validation accepts ISO 8601 without an offset; freshness must
    # still compare it (as UTC) rather than fail
    stored = {**BASE, "last_updated": "2026-03-01T00:00:00Z"}
    assert check_manifest_freshness(
        {**BASE, "last_updated": "2026-03-02T00:00:00", "job_description": "y"}, stored
    ) is False
    assert code_of(
        check_manifest_freshness,
        {**BASE, "last_updated": "2026-02-01T00:00:00", "job_description": "y"},
        stored,
    ) == (409, "stale_metadata")
