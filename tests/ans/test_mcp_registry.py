"""The MCP registry over REST, in-process through the ASGI app (real store,
real embedder, real signatures): announce, coalescing, list / get / query,
pinning and rotation with grace, allow-list, scopes, TTL expiry with an
injected clock, and tier-3 separation in AGTP DISCOVER."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from ans.governance.keys import TrustedKeys
from ans.governance.signing import RESULT_SIGNATURE_FIELD, verify_document
from ans.protocol.messages import (
    ActivateRequest,
    DiscoverRequest,
    Identity,
    parse_discover_params,
    query_digest,
)
from ans.protocol.scope import parse_authority_scope

from tests.ans.test_mcp_support import (
    GOV,
    AgentKey,
    World,
    agent_object,
    announce,
    make_world_factory,
    mint,
)
from tests.conftest import client_cert_pem

BASE = "/mcp/v1"


@pytest.fixture
def make_world(tmp_path: Path, embedder: Any, gov_key: Any) -> Iterator[Callable[..., World]]:
    yield from make_world_factory(tmp_path, embedder, gov_key)


def test_announce_then_get_list_and_query(make_world: Any) -> None:
    w = make_world()
    key = AgentKey()
    agent = agent_object(key)
    status, body = w.post(announce(key, agent))
    assert status == 200, body
    assert body["protocol_version"] == "v1.0"
    assert body["outcome"] == "registered" and body["matched"] is True
    reg = body["registry"]
    assert reg["governed"] is False and reg["trust_tier"] == 3
    assert reg["canonical_id"] == "urn:uuid:" + agent["agent_id"]
    assert verify_document(body, TrustedKeys([w.svc.key.public]), RESULT_SIGNATURE_FIELD)

    status, _, got = w.call("GET", f"{BASE}/agents/{agent['agent_id']}", scope="discover:read")
    assert status == 200 and got["agent"] == agent

    status, _, listed = w.call("GET", f"{BASE}/agents", scope="discover:read")
    assert status == 200 and [a["agent"]["agent_id"] for a in listed["agents"]] == [
        agent["agent_id"]
    ]
    status, _, q = w.call(
        "POST", f"{BASE}/query", {"protocol_version": "v1.3", "query": {"capability": "metrics"}}
    )
    assert status == 200, q
    assert q["protocol_version"] == "v1.3"  # answered in the client's (unknown minor) version
    assert [r["matched"] for r in q["responses"]] == [True]
    assert q["responses"][0]["match"] == "capability"


def test_identical_announcements_are_coalesced(make_world: Any) -> None:
    w = make_world()
    key = AgentKey()
    msg = announce(key, agent_object(key))
    assert w.post(msg)[0] == 200
    head = w.svc.store.max_seq()
    w.clock.advance(10)
    status, body = w.post(msg)
    assert status == 200 and body["outcome"] == "unchanged"
    assert w.svc.store.max_seq() == head  # no new change-feed entry
    assert body["registry"]["last_seen"] == "2026-11-21T12:00:10.000Z"


def test_a_changed_announcement_from_the_pinned_key_is_applied(make_world: Any) -> None:
    w = make_world()
    key = AgentKey()
    agent = agent_object(key)
    assert w.post(announce(key, agent))[0] == 200
    head = w.svc.store.max_seq()
    changed = {**agent, "capabilities": {"metrics": "3.0"}}
    status, body = w.post(announce(key, changed))
    assert status == 200 and body["outcome"] == "updated", body
    assert [c.canonical_id for c in w.svc.store.changes_since(head)] == [
        "urn:uuid:" + agent["agent_id"]
    ]
    _, _, got = w.call("GET", f"{BASE}/agents/{agent['agent_id']}")
    assert got["agent"]["capabilities"] == {"metrics": "3.0"}


@pytest.mark.parametrize(("kind", "raw"), [("ec", False), ("ec", True), ("rsa", False)])
def test_signatures_verify(make_world: Any, kind: str, raw: bool) -> None:
    w = make_world()
    key = AgentKey(kind)
    status, body = w.post(announce(key, agent_object(key), raw=raw))
    assert status == 200, body


def test_tampered_wrong_key_and_unsigned_are_dropped(make_world: Any) -> None:
    w = make_world()
    key, other = AgentKey(), AgentKey()
    agent = agent_object(key)
    tampered = announce(key, agent)
    tampered["agent"] = {**agent, "capabilities": {"admin": "9.9"}}
    status, body = w.post(tampered)
    assert status == 401 and body["error"]["code"] == "ErrAuth", body
    assert body["error"]["detail"] == "signature_invalid"
    status, body = w.post(announce(key, agent, signer=other))
    assert status == 401
    unsigned = announce(key, agent)
    del unsigned["signature"]
    assert w.post(unsigned)[0] == 401
    assert w.registry.dropped == 3
    drops = [r for r in w.audit() if r["event"] == "mcp_announcement_dropped"]
    assert len(drops) == 3 and all(r["mcp_agent_id"] == agent["agent_id"] for r in drops)
    assert all("agent" not in r and "signature" not in r for r in drops)  # no bodies
    assert w.call("GET", f"{BASE}/agents/{agent['agent_id']}")[0] == 404


def test_another_key_for_a_pinned_id_is_409(make_world: Any) -> None:
    w = make_world()
    key, thief = AgentKey(), AgentKey()
    agent = agent_object(key)
    assert w.post(announce(key, agent))[0] == 200
    stolen = {**agent, "public_key": thief.pem}
    status, body = w.post(announce(thief, stolen))
    assert status == 409 and body["error"]["code"] == "ErrDuplicateID", body


def test_rotation_with_grace_then_old_key_retired(make_world: Any) -> None:
    w = make_world(key_grace_seconds=3600)
    old, new = AgentKey(), AgentKey("rsa")
    agent = agent_object(old)
    assert w.post(announce(old, agent))[0] == 200
    rotated = {**agent, "public_key": new.pem}
    # without the old key's consent the new key is refused
    assert w.post(announce(new, rotated))[0] == 409
    status, body = w.post(announce(new, rotated, rotation=old))
    assert status == 200, body
    assert body["outcome"] == "updated"
    assert any(r["event"] == "mcp_key_rotated" for r in w.audit())
    # the old key still speaks for the agent within the grace period
    w.clock.advance(1800)
    assert w.post(announce(old, agent))[0] == 200
    # ... and not after it
    w.clock.advance(3600)
    status, body = w.post(announce(old, {**agent, "agent_name": "renamed"}))
    assert status == 401 and body["error"]["detail"] == "signature_invalid", body
    assert w.post(announce(new, rotated))[0] == 200


def test_allow_list(make_world: Any) -> None:
    allowed = str(uuid.uuid4())
    w = make_world(allow_list=(allowed[:8] + "-*",))
    key = AgentKey()
    assert w.post(announce(key, agent_object(key, allowed)))[0] == 200
    status, body = w.post(announce(key, agent_object(key)))
    assert status == 403 and body["error"]["code"] == "ErrForbidden"
    assert body["error"]["detail"] == "not_in_allow_list"
    refused = [r for r in w.audit() if r["event"] == "mcp_announcement_dropped"]
    assert refused and refused[-1]["status"] == 403


def test_empty_allow_list_admits_nobody(make_world: Any) -> None:
    w = make_world(allow_list=())
    key = AgentKey()
    assert w.post(announce(key, agent_object(key)))[0] == 403


def test_scopes_read_versus_write(make_world: Any) -> None:
    w = make_world()
    key = AgentKey()
    msg = announce(key, agent_object(key))
    status, body = w.post(msg, scope="discover:read")
    assert status == 403 and body["error"]["detail"] == "scope_violation"
    assert w.post(msg, scope="discover:write")[0] == 200
    assert w.call("GET", f"{BASE}/agents", scope="discover:write")[0] == 403
    assert w.call("GET", f"{BASE}/agents", scope="discover:read")[0] == 200
    # the core's own scopes work too
    assert w.call("GET", f"{BASE}/agents", scope="discovery:query")[0] == 200


def test_jwt_bearer_scopes_in_token_mode(make_world: Any) -> None:
    w = make_world(mode="token")
    key = AgentKey()
    msg = announce(key, agent_object(key))
    read = {"authorization": "Bearer " + mint(scope="discover:read")}
    write = {"authorization": "Bearer " + mint(scope="discover:write")}
    # no credentials at all
    status, body = w.post(msg, scope=None)
    assert status == 401 and body["error"]["code"] == "ErrAuth"
    # a read token cannot announce; a write token can (identity from the token)
    status, body = w.post(msg, scope=None, headers=read)
    assert status == 403, body
    status, body = w.post(msg, scope=None, headers=write)
    assert status == 200, body
    status, _, listed = w.call("GET", f"{BASE}/agents", scope=None, headers=read)
    assert status == 200 and len(listed["agents"]) == 1
    assert w.call("GET", f"{BASE}/agents", scope=None, headers=write)[0] == 403
    bad = {"authorization": "Bearer " + mint(scope="discover:read", iss="https://evil")}
    assert w.call("GET", f"{BASE}/agents", scope=None, headers=bad)[0] == 401


def test_ttl_expiry(make_world: Any) -> None:
    w = make_world(ttl_seconds=90)
    k1, k2 = AgentKey(), AgentKey()
    a1, a2 = agent_object(k1, name="keeper"), agent_object(k2, name="leaver")
    assert w.post(announce(k1, a1))[0] == 200
    assert w.post(announce(k2, a2))[0] == 200
    for _ in range(3):
        w.clock.advance(45)
        assert w.post(announce(k1, a1))[0] == 200  # heartbeat
    # a2 is past its TTL: never listed, even before the sweeper runs
    _, _, listed = w.call("GET", f"{BASE}/agents")
    assert [a["agent"]["agent_name"] for a in listed["agents"]] == ["keeper"]
    assert w.call("GET", f"{BASE}/agents/{a2['agent_id']}")[0] == 404
    head = w.svc.store.max_seq()
    assert w.registry.sweep() == 1
    assert w.registry.sweep() == 0  # once
    changes = w.svc.store.changes_since(head)
    assert [(c.canonical_id, c.state) for c in changes] == [
        ("urn:uuid:" + a2["agent_id"], "Removed")
    ]
    assert any(r["event"] == "mcp_agent_expired" for r in w.audit())
    # what a subscriber of the change feed is told
    gone = w.registry.change_event(changes[0].canonical_id, "v1.0")
    assert gone == {
        "change": "removed",
        "protocol_version": "v1.0",
        "agent": {"agent_id": a2["agent_id"]},
        "matched": False,
    }
    kept = w.registry.change_event("urn:uuid:" + a1["agent_id"], "v1.1")
    assert kept["change"] == "upsert" and kept["agent"] == a1
    assert w.registry.change_event("not-an-mcp-agent", "v1.0") is None
    # announcing again brings it back
    assert w.post(announce(k2, a2))[0] == 200
    _, _, listed = w.call("GET", f"{BASE}/agents")
    assert len(listed["agents"]) == 2


def discover(w: Any, intent: str, tier: int | None) -> list[str]:
    params: dict[str, Any] = {"intent": intent, "limit": 10}
    if tier is not None:
        params["trust_tier_min"] = tier
    ident = Identity("agtp://x/agents/c", "c", parse_authority_scope("discovery:query"))
    req = DiscoverRequest(
        ident, "t", parse_discover_params(params, w.svc.limits), query_digest(params), params
    )
    return [r["canonical_id"] for r in w.svc.discover(req)["results"]]


def test_tier3_separation_and_activate_makes_it_governed(
    make_world: Any, make_manifest: Any
) -> None:
    w = make_world()
    key = AgentKey()
    agent = agent_object(key, name="invoice-ocr", **{"invoice-ocr": "extract text from invoices"})
    assert w.post(announce(key, agent))[0] == 200
    cid = "urn:uuid:" + agent["agent_id"]
    assert cid not in discover(w, "extract text from scanned invoices", None)
    assert cid in discover(w, "extract text from scanned invoices", 3)
    # a governance ACTIVATE of the same agent makes it governed
    m = make_manifest(
        "invoice-ocr",
        canonical_id=cid,
        trust_tier=1,
        job_description="Extracts text from scanned invoices.",
    )
    w.svc.activate(ActivateRequest(GOV, "t", m, {"tags": ["invoice"]}))
    assert cid in discover(w, "extract text from scanned invoices", None)
    # announcing again never downgrades it; the MCP record says governed
    w.clock.advance(5)
    status, body = w.post(announce(key, agent))
    assert status == 200, body
    assert body["registry"]["governed"] is True and body["registry"]["trust_tier"] == 1
    assert w.svc.store.get(cid).signer_kid != "self-asserted"


def test_schema_and_version_errors(make_world: Any) -> None:
    w = make_world()
    key = AgentKey()
    agent = agent_object(key)
    cases: list[tuple[Any, str]] = [
        ({"agent": agent}, "ErrMalformedPayload"),
        (announce(key, agent, version="1.0"), "ErrMalformedPayload"),
        (announce(key, {**agent, "agent_id": "not-a-uuid"}), "ErrMalformedPayload"),
        (announce(key, {**agent, "agent_id": str(uuid.uuid1())}), "ErrMalformedPayload"),
        (
            announce(key, {k: v for k, v in agent.items() if k != "capabilities"}),
            "ErrMalformedPayload",
        ),
        (announce(key, {**agent, "agent_name": "not a label"}), "ErrMalformedPayload"),
        (announce(key, {**agent, "public_key": "garbage"}), "ErrMalformedPayload"),
        (announce(key, {**agent, "transport": {"type": "tcp"}}), "ErrMalformedPayload"),
        (announce(key, {**agent, "capabilities": {"x": 1}}), "ErrMalformedPayload"),
        (announce(key, agent, version="v2.0"), "ErrUnsupportedVersion"),
        ([1, 2], "ErrMalformedPayload"),
    ]
    for msg, code in cases:
        status, body = w.post(msg)
        assert status == 400 and body["error"]["code"] == code, (msg, body)
    status, body = w.post(announce(key, agent, version="v2.0"))
    assert body["error"]["supported_versions"] == ["v1.0", "v1.1"]
    status, _, body = w.call("POST", f"{BASE}/agents", body=b"{not json")
    assert status == 400 and body["error"]["code"] == "ErrMalformedPayload"
    status, _, body = w.call("POST", f"{BASE}/agents", body=b"x" * 70_000)
    assert status == 400
    status, _, body = w.call("GET", f"{BASE}/agents", query="limit=100000")
    assert status == 400
    status, _, body = w.call("GET", f"{BASE}/agents", query="bogus=1")
    assert status == 400
    assert w.call("DELETE", f"{BASE}/agents")[0] == 400
    assert w.call("GET", f"{BASE}/nothing")[0] == 404
    assert w.call("GET", f"{BASE}/agents//")[0] == 404  # /agents/%2F: no id, not the list
    assert w.call("GET", f"{BASE}/agents/")[0] == 200  # one trailing slash is the list
    assert w.call("POST", f"{BASE}/query", {"protocol_version": "v1.0", "query": {}})[0] == 400


def test_the_seam_answers_replies_and_never_raises(make_world: Any) -> None:
    """What the WebSocket and mDNS transports call: McpRegistry directly."""
    from ans.mcp.registry import McpCaller

    w = make_world()
    reg = w.registry
    key = AgentKey()
    agent = agent_object(key)
    local = McpCaller.local("mdns")
    assert reg.announce(announce(key, agent), local).status == 200
    reply = reg.announce(announce(key, agent, version="v2.0"), local)
    assert reply.status == 400 and reply.body["error"]["code"] == "ErrUnsupportedVersion"
    assert reg.announce({"garbage": True}, local).status == 400
    assert reg.announce("not a mapping", local).status == 400  # type: ignore[arg-type]
    reply = reg.query({"protocol_version": "v1.2", "query": {"capability": "metrics"}}, local)
    assert reply.status == 200 and reply.body["protocol_version"] == "v1.2"
    assert reg.get(agent["agent_id"], local).status == 200
    assert reg.get("nope", local).status == 400
    assert reg.get(str(uuid.uuid4()), local).status == 404
    reader = McpCaller.of(
        Identity("agtp://x/agents/r", "r", parse_authority_scope("discover:read"))
    )
    assert "discovery:query" in reader.scopes
    assert reg.announce(announce(key, agent), reader).status == 403


def test_mcp_settings_from_toml_and_environment(tmp_path: Path) -> None:
    from ans.config import ConfigError, load
    from ans.mcp.config import McpConfigError, McpSettings, mcp_from_table

    assert McpSettings().enabled is False and McpSettings().allow_list == ()
    assert McpSettings().ttl_seconds == 90.0
    s = mcp_from_table({"enabled": True, "allow_list": ["3cde*"], "ttl_seconds": 10})
    assert s.allows("3CDE1B52-1fc2-4f7b-8d8c-5e3e6f5c9c1d") and not s.allows("abc")
    assert McpSettings(allow_list=("*",)).allows("anything")
    for bad in (
        {"enabled": "yes"},
        {"ttl_seconds": 0},
        {"allow_list": "*"},
        {"allow_list": ["bad pattern!"]},
        {"base_path": "mcp"},
        {"zone": "public"},
        {"bogus": 1},
        {"ws_queue": 0},
    ):
        with pytest.raises(McpConfigError):
            mcp_from_table(bad)
    cfg_file = tmp_path / "ans.toml"
    cfg_file.write_text('[mcp]\nenabled = true\nallow_list = ["*"]\n')
    cfg = load(cfg_file, {"ANS_MCP__TTL_SECONDS": "12", "ANS_MCP__MDNS": "true"})
    assert cfg.mcp.enabled and cfg.mcp.ttl_seconds == 12.0 and cfg.mcp.mdns
    with pytest.raises(ConfigError, match=r"\[mcp\]"):
        load(None, {"ANS_MCP__TTL_SECONDS": "-1"})


def test_an_unadmissible_agent_is_refused_before_its_key_is_pinned(make_world: Any) -> None:
    w = make_world()
    key = AgentKey()
    agent = agent_object(key)
    agent["transport"] = {"type": "tcp", "endpoint": "host with spaces"}
    status, body = w.post(announce(key, agent))
    assert status == 400 and body["error"]["code"] == "ErrMalformedPayload", body
    assert w.registry.trust.get(agent["agent_id"]) is None
    assert w.call("GET", f"{BASE}/agents")[2]["agents"] == []


def _client_cert(uri: str) -> str:
    return client_cert_pem(uri, datetime(2026, 11, 21, tzinfo=UTC))


def test_mtls_mode_binds_the_caller_to_its_client_certificate(make_world: Any) -> None:
    from tests.ans.test_mcp_support import ORCH

    w = make_world(mode="mtls")
    key = AgentKey()
    msg = announce(key, agent_object(key))
    status, body = w.post(msg)  # no client certificate
    assert status == 401 and body["error"]["detail"] == "client_certificate_required", body
    status, body = w.post(msg, tls_chain=[_client_cert("agtp://o.example/agents/other")])
    assert status == 401 and body["error"]["detail"] == "certificate_identity_mismatch"
    status, body = w.post(msg, tls_chain=[_client_cert(ORCH)])
    assert status == 200, body
    failed = [r for r in w.audit() if r["event"] == "authentication_failed"]
    assert [r["auth_mode"] for r in failed] == ["mtls", "mtls"]
