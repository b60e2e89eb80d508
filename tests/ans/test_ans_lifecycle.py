"""Lifecycle events, tombstones and re-ACTIVATE rules on a real AnsService
(real embedder, SQLite store, audit log, signatures)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from ans.governance.audit import verify_chain
from ans.governance.keys import SigningKey
from ans.governance.lifecycle import make_event
from ans.protocol.errors import AgtpError
from ans.protocol.messages import (
    ActivateRequest,
    DescribeRequest,
    Identity,
    LifecycleRequest,
    Limits,
    parse_discover,
    parse_lifecycle,
)
from ans.protocol.scope import parse_authority_scope

from ans.config import Config
from ans.service import AnsService

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
GOV = Identity(
    "agtp://gov.example/agents/platform", "gov-operator", parse_authority_scope("discovery:register")
)
CALLER = Identity(
    "agtp://o.example/agents/orch", "usr-1", parse_authority_scope("discovery:query")
)
CAPS = {"supported_methods": ["QUERY"], "modalities": ["text"]}
AGENTS = {
    "solidity-auditor": "Audits Solidity smart contracts for reentrancy and overflow bugs.",
    "vyper-auditor": "Audits Vyper smart contracts for security vulnerabilities.",
    "legal-translator": "Translates legal contracts between German and English.",
}


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now



def close(svc: AnsService) -> None:
    svc.audit.close()
    svc.store.close()


@pytest.fixture
def world(make_ans: Any,
    tmp_path: Path, embedder: Any, gov_key: SigningKey, make_manifest: Callable[..., Any]
) -> Iterator[dict[str, Any]]:
    clock = Clock()
    svc = make_ans(Config(data_dir=tmp_path), keys=[gov_key], clock=clock, load=True)
    ids = {}
    for label, job in AGENTS.items():
        m = make_manifest(label, job_description=job, governance_zone="zone:finance")
        svc.activate(ActivateRequest(GOV, f"t-{label}", m, CAPS))
        ids[label] = m["canonical_id"]
    w = {"svc": svc, "ids": ids, "clock": clock, "path": tmp_path, "n": 0}
    yield w
    close(w["svc"])


def labels(svc: AnsService, intent: str = "audit smart contracts") -> list[str]:
    headers = {
        "agent-id": CALLER.agent_id,
        "principal-id": CALLER.principal_id,
        "authority-scope": "discovery:query",
    }
    body = orjson.dumps(
        {"method": "DISCOVER", "task_id": "t", "parameters": {"intent": intent}}
    )
    result = svc.discover(parse_discover(headers, body, Limits()))
    return [r["agent_label"] for r in result["results"]]


def send(
    w: dict[str, Any], name: str, label: str, key: SigningKey, **kw: Any
) -> dict[str, Any]:
    w["n"] += 1
    identity = kw.pop("identity", GOV)
    cid = w["ids"].get(label, label)
    ev = make_event(
        name,
        cid,
        key,
        kw.pop("issued_at", w["clock"].now - timedelta(seconds=60 - w["n"])),
        event_id=kw.pop("event_id", f"evt-{w['n']}"),
        **kw,
    )
    result: dict[str, Any] = w["svc"].lifecycle(
        LifecycleRequest(identity, "t-lc", ev)
    )
    return result


def refused(fn: Callable[..., Any], *args: Any, **kw: Any) -> tuple[int, str]:
    with pytest.raises(AgtpError) as info:
        fn(*args, **kw)
    return info.value.status, info.value.code


def audit_events(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (path / "audit.jsonl").read_bytes().splitlines()]


def test_suspend_removes_before_return_and_reinstate_restores(
    world: dict[str, Any], gov_key: SigningKey
) -> None:
    svc = world["svc"]
    assert "solidity-auditor" in labels(svc)
    out = send(world, "SUSPEND", "solidity-auditor", gov_key, reason="trust-violation")
    assert out["lifecycle_state"] == "Suspended" and out["indexed"] is False
    assert out["previous_state"] == "Active" and out["replayed"] is False
    assert "solidity-auditor" not in labels(svc)
    assert len(svc) == 2
    out = send(world, "REINSTATE", "solidity-auditor", gov_key)
    assert out["lifecycle_state"] == "Active" and out["indexed"] is True
    assert "solidity-auditor" in labels(svc)
    kinds = [(r["event"], r.get("state_after")) for r in audit_events(world["path"])]
    assert ("lifecycle_event", "Suspended") in kinds and ("lifecycle_event", "Active") in kinds


@pytest.mark.parametrize("name", ["REVOKE", "DEPRECATE"])
def test_retired_ids_are_tombstoned_and_never_come_back(
    world: dict[str, Any], gov_key: SigningKey, make_manifest: Callable[..., Any], name: str
) -> None:
    svc = world["svc"]
    out = send(world, name, "vyper-auditor", gov_key)
    assert out["tombstoned"] is True and out["indexed"] is False
    assert "vyper-auditor" not in labels(svc)
    # a re-ACTIVATE, even with a newer manifest, is refused and audited
    newer = make_manifest(
        "vyper-auditor",
        job_description=AGENTS["vyper-auditor"],
        governance_zone="zone:finance",
        last_updated="2026-11-01T00:00:00Z",
    )
    assert refused(svc.activate, ActivateRequest(GOV, "t", newer, CAPS)) == (410, "agent_retired")
    assert audit_events(world["path"])[-1]["code"] == "agent_retired"
    assert refused(send, world, "REINSTATE", "vyper-auditor", gov_key) == (410, "agent_retired")
    assert "vyper-auditor" not in labels(svc)
    # DESCRIBE says Gone, not "never heard of it"
    req = DescribeRequest(CALLER, "t", world["ids"]["vyper-auditor"])
    assert refused(svc.describe, req) == (410, "agent_retired")


def test_revoke_of_an_unknown_id_still_tombstones_it(
    world: dict[str, Any], gov_key: SigningKey, make_manifest: Callable[..., Any]
) -> None:
    m = make_manifest("late-arrival", job_description="Audits Solidity smart contracts.")
    out = send(world, "REVOKE", m["canonical_id"], gov_key)
    assert out["previous_state"] is None and out["tombstoned"] is True
    svc = world["svc"]
    assert refused(svc.activate, ActivateRequest(GOV, "t", m, CAPS)) == (410, "agent_retired")


def test_state_survives_restart(make_ans: Any,
    world: dict[str, Any], gov_key: SigningKey, embedder: Any
) -> None:
    send(world, "SUSPEND", "solidity-auditor", gov_key)
    send(world, "REVOKE", "vyper-auditor", gov_key)
    close(world["svc"])
    svc = world["svc"] = make_ans(Config(data_dir=world["path"]), keys=[gov_key], clock=world["clock"], load=True)
    assert "solidity-auditor" not in labels(svc) and "vyper-auditor" not in labels(svc)
    assert len(svc) == 1
    req = DescribeRequest(CALLER, "t", world["ids"]["solidity-auditor"])
    assert refused(svc.describe, req) == (503, "agent_suspended")
    send(world, "REINSTATE", "solidity-auditor", gov_key)
    assert "solidity-auditor" in labels(svc) and "vyper-auditor" not in labels(svc)


def test_replayed_event_is_idempotent_and_older_events_are_stale(
    world: dict[str, Any], gov_key: SigningKey
) -> None:
    svc = world["svc"]
    cid = world["ids"]["solidity-auditor"]
    t = world["clock"].now
    suspend = make_event("SUSPEND", cid, gov_key, t - timedelta(seconds=30), event_id="e-s")
    reinstate = make_event("REINSTATE", cid, gov_key, t - timedelta(seconds=20), event_id="e-r")
    svc.lifecycle(LifecycleRequest(GOV, "t", suspend))
    svc.lifecycle(LifecycleRequest(GOV, "t", reinstate))
    # the same SUSPEND again (replay): nothing changes, the agent stays Active
    again = svc.lifecycle(LifecycleRequest(GOV, "t", suspend))
    assert again["replayed"] is True and again["lifecycle_state"] == "Active"
    assert "solidity-auditor" in labels(svc)
    # a different, older SUSPEND (delayed in transit) cannot undo the REINSTATE
    older = make_event("SUSPEND", cid, gov_key, t - timedelta(seconds=25), event_id="e-old")
    assert refused(svc.lifecycle, LifecycleRequest(GOV, "t", older)) == (409, "stale_event")
    # an event id reused for a different event is refused
    reused = make_event("REVOKE", cid, gov_key, t - timedelta(seconds=10), event_id="e-s")
    assert refused(svc.lifecycle, LifecycleRequest(GOV, "t", reused)) == (409, "stale_event")
    assert "solidity-auditor" in labels(svc)
    refusals = [r for r in audit_events(world["path"]) if r["event"] == "lifecycle_refused"]
    assert [r["code"] for r in refusals] == ["stale_event", "stale_event"]


def test_lifecycle_needs_register_scope_and_a_trusted_signature(
    world: dict[str, Any], gov_key: SigningKey
) -> None:
    caller = Identity("agtp://x/agents/y", "p", parse_authority_scope("discovery:query"))
    assert refused(
        send, world, "REVOKE", "solidity-auditor", gov_key, identity=caller
    ) == (451, "scope_violation")
    rogue = SigningKey.generate()
    assert refused(send, world, "REVOKE", "solidity-auditor", rogue) == (
        401,
        "unknown_signing_key",
    )
    assert "solidity-auditor" in labels(world["svc"])
    events = [r["event"] for r in audit_events(world["path"])]
    assert events[-2:] == ["scope_violation", "lifecycle_refused"]


def test_reactivate_same_manifest_is_idempotent_older_is_stale(
    world: dict[str, Any], make_manifest: Callable[..., Any]
) -> None:
    svc = world["svc"]
    fields = dict(job_description=AGENTS["legal-translator"], governance_zone="zone:finance")
    same = make_manifest("legal-translator", **fields)  # re-signed: new signature bytes
    out = svc.activate(ActivateRequest(GOV, "t", same, CAPS))
    assert out["unchanged"] is True
    newer = make_manifest(
        "legal-translator",
        **{**fields, "behavioral_trust_score": 0.5},
        last_updated="2026-06-01T00:00:00Z",
    )
    assert svc.activate(ActivateRequest(GOV, "t", newer, CAPS))["unchanged"] is False
    older = make_manifest(
        "legal-translator",
        **{**fields, "behavioral_trust_score": 0.99},
        last_updated="2026-03-01T00:00:00Z",
    )
    assert refused(svc.activate, ActivateRequest(GOV, "t", older, CAPS)) == (
        409,
        "stale_metadata",
    )
    stored = svc.store.get(world["ids"]["legal-translator"])
    assert stored is not None and stored.manifest["behavioral_trust_score"] == 0.5
    assert audit_events(world["path"])[-1]["code"] == "stale_metadata"


def test_a_manifest_from_the_future_is_refused_and_cannot_block_corrections(
    world: dict[str, Any], make_manifest: Callable[..., Any]
) -> None:
    """A last_updated far ahead (2099) is bounded like a lifecycle event's
    issued_at (lifecycle_max_skew): 422, nothing stored, so the corrected
    manifest after it is not refused as stale_metadata until 2099."""
    svc = world["svc"]
    fields = dict(job_description=AGENTS["legal-translator"], governance_zone="zone:finance")
    ahead = make_manifest("legal-translator", **fields, last_updated="2099-01-01T00:00:00Z")
    assert refused(svc.activate, ActivateRequest(GOV, "t", ahead, CAPS)) == (
        422,
        "manifest_from_future",
    )
    assert audit_events(world["path"])[-1]["code"] == "manifest_from_future"
    skew = timedelta(seconds=svc.config.lifecycle_max_skew)
    # within the skew window (a governance clock a little ahead) is accepted
    near = make_manifest(
        "legal-translator",
        **{**fields, "behavioral_trust_score": 0.5},
        last_updated=(NOW + skew - timedelta(seconds=1)).isoformat(),
    )
    assert svc.activate(ActivateRequest(GOV, "t", near, CAPS))["unchanged"] is False
    world["clock"].now = NOW + skew  # time moves on: a newer correction is accepted
    fixed = make_manifest(
        "legal-translator",
        **{**fields, "behavioral_trust_score": 0.6},
        last_updated=(NOW + skew).isoformat(),
    )
    assert svc.activate(ActivateRequest(GOV, "t", fixed, CAPS))["unchanged"] is False
    # activated_at is bounded too, and so is the bulk path (ans import)
    late = make_manifest("legal-translator", **fields, activated_at="2099-01-01T00:00:00Z")
    assert refused(svc.activate, ActivateRequest(GOV, "t", late, CAPS))[1] == (
        "manifest_from_future"
    )
    _, _, bulk_refused = svc.activate_many([(ahead, CAPS, "kid")])
    assert [(i, e.code) for i, e in bulk_refused] == [(0, "manifest_from_future")]


def test_activate_of_a_suspended_agent_needs_reinstate(
    world: dict[str, Any], gov_key: SigningKey, make_manifest: Callable[..., Any]
) -> None:
    send(world, "SUSPEND", "legal-translator", gov_key)
    m = make_manifest(
        "legal-translator",
        job_description=AGENTS["legal-translator"],
        last_updated="2026-06-01T00:00:00Z",
    )
    svc = world["svc"]
    assert refused(svc.activate, ActivateRequest(GOV, "t", m, CAPS)) == (409, "agent_suspended")
    assert len(svc) == 2


def test_removed_governance_key(make_ans: Any,
    tmp_path: Path, embedder: Any, make_manifest: Callable[..., Any]
) -> None:
    old_key, new_key = SigningKey.generate(), SigningKey.generate()
    clock = Clock()
    svc = make_ans(Config(data_dir=tmp_path), keys=[old_key, new_key], clock=clock, load=True)
    m = make_manifest("solidity-auditor", key=old_key, job_description=AGENTS["solidity-auditor"])
    svc.activate(ActivateRequest(GOV, "t", m, CAPS))
    close(svc)
    # the operator drops old_key from the trusted set and restarts
    svc = make_ans(Config(data_dir=tmp_path), keys=[new_key], clock=clock, load=True)
    try:
        assert len(svc) == 0  # not served any more
        assert audit_events(tmp_path)[-1]["reason"] == "signing_key_removed"
        # replaying the old manifest is refused, and says why
        assert refused(svc.activate, ActivateRequest(GOV, "t", m, CAPS)) == (
            401,
            "signing_key_removed",
        )
        # re-signed by a trusted key (and newer), it comes back
        fresh = make_manifest(
            "solidity-auditor",
            key=new_key,
            job_description=AGENTS["solidity-auditor"],
            last_updated="2026-06-01T00:00:00Z",
        )
        svc.activate(ActivateRequest(GOV, "t", fresh, CAPS))
        assert labels(svc) == ["solidity-auditor"]
        assert verify_chain((tmp_path / "audit.jsonl").read_bytes().splitlines()) is None
    finally:
        close(svc)


def test_parse_lifecycle_requires_an_event_object() -> None:
    headers = {
        "agent-id": GOV.agent_id,
        "principal-id": GOV.principal_id,
        "authority-scope": "discovery:register",
    }
    body = orjson.dumps({"method": "LIFECYCLE", "parameters": {"event": "REVOKE x"}})
    assert refused(parse_lifecycle, headers, body, Limits()) == (422, "invalid_event")


def test_routing_sees_lifecycle_states(world: dict[str, Any], gov_key: SigningKey) -> None:
    svc, ids = world["svc"], world["ids"]
    headers = {
        "agent-id": CALLER.agent_id,
        "principal-id": CALLER.principal_id,
        "authority-scope": "discovery:query",
    }

    def routed(preferred: str) -> dict[str, Any]:
        params = {"intent": "audit smart contracts", "preferred_agent": preferred}
        body = orjson.dumps({"method": "DISCOVER", "parameters": params})
        result: dict[str, Any] = svc.discover(parse_discover(headers, body, Limits()))
        return result

    send(world, "SUSPEND", "vyper-auditor", gov_key)
    got = routed(ids["vyper-auditor"])
    assert got["routing"]["routing_reason"] == "suspended"
    assert got["results"][0]["agent_label"] == "solidity-auditor"
    assert got["results"][0]["alternative_to"] == ids["vyper-auditor"]
    send(world, "REVOKE", "vyper-auditor", gov_key)
    assert routed(ids["vyper-auditor"])["routing"]["routing_reason"] == "revoked"
    assert ids["vyper-auditor"] not in {r["canonical_id"] for r in routed(ids["vyper-auditor"])["results"]}
