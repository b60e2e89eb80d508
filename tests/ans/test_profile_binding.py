"""The efficient-discovery profile's JSON binding through the ASGI app
in-process (no sockets; the integration test runs a real server): routes,
the signed Discovery Response, the same gate as AGTP (open / token mode,
rate limits, scopes, zones, audit), GET of one agent, PUT while
self-registration is off, and the profile error model for garbage."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from ans.governance.audit import AuditLog
from ans.governance.keys import SigningKey, TrustedKeys, b64url
from ans.governance.lifecycle import make_event
from ans.governance.ratelimit import RateLimitSettings
from ans.governance.signing import RESULT_SIGNATURE_FIELD, verify_document
from ans.protocol.messages import ActivateRequest, Identity, LifecycleRequest, query_digest
from ans.protocol.scope import parse_authority_scope

from ans.app import AnsApp
from ans.config import Config, ProfileSettings
from ans.gate import RequestGate
from ans.matcher import CapabilityIndex
from ans.service import AnsService
from ans.store import SQLiteStore
from tests.conftest import client_cert_pem

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
ISSUER = "https://governance.example"
ANS_ID = "agtp://ans.example/agents/ans"
AGENT = "agtp://o.example/agents/orch"
GOV = Identity("agtp://gov/agents/p", "gov", parse_authority_scope("discovery:register"))
TOKEN_KEY = SigningKey.generate()
PROFILE_CODES = {
    "invalid_request": 400,
    "unsupported_filter": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "stale_metadata": 410,
    "rate_limited": 429,
    "unavailable": 503,
}
AGENTS = {
    "legal-translator": ("zone:public", "Translates legal contracts between German and English."),
    "doc-translator": ("zone:public", "Translates technical documents into French and Spanish."),
    "solidity-auditor": ("zone:public", "Audits Solidity smart contracts for reentrancy bugs."),
    "patient-records": ("zone:healthcare", "Summarises patient records for clinicians."),
}


def mint(**claims: Any) -> str:
    body = {
        "iss": ISSUER,
        "aud": ANS_ID,
        "sub": AGENT,
        "principal": "usr-1",
        "scope": "discovery:query",
        "exp": int((NOW + timedelta(minutes=5)).timestamp()),
        **claims,
    }
    h = b64url(orjson.dumps({"alg": "ES256", "kid": TOKEN_KEY.kid, "typ": "JWT"}))
    p = b64url(orjson.dumps(body))
    return f"{h}.{p}.{b64url(TOKEN_KEY.sign_raw(f'{h}.{p}'.encode()))}"


class World:
    def __init__(self, app: AnsApp, svc: AnsService, ids: dict[str, str]) -> None:
        self.app, self.svc, self.ids = app, svc, ids

    def keys(self) -> TrustedKeys:
        return TrustedKeys([self.svc.key.public])

    def audit(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.svc.audit.path.read_text().splitlines()]

    def call(
        self,
        method: str = "POST",
        path: str = "/discovery/v1/discover",
        doc: Any = None,
        *,
        body: bytes | None = None,
        scope: str = "discovery:query",
        headers: dict[str, str] | None = None,
        identity: bool = True,
        client: str | None = None,
        tls_chain: list[str] | None = None,
    ) -> tuple[int, dict[str, str], dict[str, Any]]:
        hdrs: dict[str, str] = {"content-type": "application/json"}
        if identity:
            hdrs.update({"agent-id": AGENT, "principal-id": "usr-1", "authority-scope": scope})
        hdrs.update(headers or {})
        if body is None:
            body = b"" if doc is None else orjson.dumps(doc)
        asgi: dict[str, Any] = {
            "type": "http",
            "method": method,
            "path": path,
            "headers": [(k.encode(), v.encode()) for k, v in hdrs.items()],
            "extensions": {},
        }
        if client is not None:
            asgi["client"] = (client, 40000)
        if tls_chain is not None:
            asgi["extensions"]["tls"] = {"client_cert_chain": tls_chain}
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        asyncio.run(self.app(asgi, receive, send))
        start = sent[0]
        out = {k.decode(): v.decode() for k, v in start["headers"]}
        return start["status"], out, orjson.loads(sent[1]["body"])


@pytest.fixture
def make_world(
    tmp_path: Path, embedder: Any, gov_key: SigningKey, make_manifest: Callable[..., Any]
) -> Iterator[Callable[..., World]]:
    made: list[AnsService] = []

    def make(mode: str = "open", profile: ProfileSettings | None = None, **rate: Any) -> World:
        d = tmp_path / f"svc{len(made)}"
        d.mkdir()
        cfg = Config(
            data_dir=d,
            agent_id=ANS_ID,
            restricted_zones=("zone:healthcare",),
            auth_mode=mode,
            token_issuer=ISSUER,
            rate_limit=RateLimitSettings(**rate),
            profile_enabled=(profile or ProfileSettings()).enabled,
            profile_base_path=(profile or ProfileSettings()).base_path,
            profile_self_registration=(profile or ProfileSettings()).self_registration,
        )
        svc = AnsService(
            config=cfg,
            store=SQLiteStore(d / "registry.sqlite3"),
            matcher=CapabilityIndex(embedder),
            signing_key=SigningKey.generate(),
            governance_keys=TrustedKeys([gov_key.public]),
            audit=AuditLog(d / "audit.jsonl", lambda: NOW),
            clock=lambda: NOW,
        )
        made.append(svc)
        ids = {}
        for label, (zone, job) in AGENTS.items():
            m = make_manifest(label, governance_zone=zone, job_description=job)
            svc.activate(ActivateRequest(GOV, "t", m, {"tags": label.split("-")}))
            ids[label] = m["canonical_id"]
        keys = TrustedKeys([TOKEN_KEY.public]) if mode == "token" else None
        gate = RequestGate(cfg, svc.audit, svc.manifest["canonical_id"], keys, lambda: NOW)
        return World(AnsApp(svc, gate), svc, ids)

    yield make
    for svc in made:
        svc.audit.close()
        svc.store.close()


def assert_profile_error(status: int, body: dict[str, Any], code: str) -> dict[str, Any]:
    assert set(body) == {"error"}, body
    err = body["error"]
    assert err["code"] == code, err
    assert PROFILE_CODES[code] == status
    assert isinstance(err["message"], str) and 0 < len(err["message"]) <= 300
    assert isinstance(err["correlation_id"], str) and err["correlation_id"]
    assert err["retry_after"] is None or isinstance(err["retry_after"], int)
    return dict(err)


# -- discover -------------------------------------------------------------------------


def test_discover_answers_a_signed_profile_response(make_world: Any) -> None:
    w = make_world()
    doc = {"query": "translate a legal contract into English", "limit": 3}
    status, headers, body = w.call(doc=doc, headers={"task-id": "corr-1"})
    assert status == 200, body
    assert headers["content-type"] == "application/json"
    assert headers["x-correlation-id"] == "corr-1"
    for field in (
        "request_id",
        "candidates",
        "applied_filters",
        "unsupported_filters",
        "warnings",
        "generated_at",
    ):
        assert field in body, field
    assert "results" not in body and "query_id" not in body
    assert body["request_id"].startswith("qry-")
    assert body["generated_at"] == "2026-11-21T12:00:00.000Z"
    # bound to the request object exactly as sent, and signed by the ANS key
    assert body["query_digest"] == query_digest(doc)
    assert verify_document(body, w.keys(), RESULT_SIGNATURE_FIELD) == w.svc.key.kid
    first = body["candidates"][0]
    assert first["id"] == w.ids["legal-translator"]
    assert first["name"] == "legal-translator"
    assert first["description"].startswith("Translates legal contracts")
    assert isinstance(first["score"], float) and "rank_score" not in first
    assert first["status"] == "active" and isinstance(first["bindings"], list)
    # tampering with any candidate breaks the signature
    body["candidates"][0]["score"] = 1.0
    with pytest.raises(Exception, match="signature"):
        verify_document(body, w.keys(), RESULT_SIGNATURE_FIELD)


def test_discover_sees_what_agtp_sees(make_world: Any) -> None:
    """One core: the profile answer lists the agents AGTP DISCOVER lists, in order."""
    w = make_world()
    intent = "audit a smart contract"
    _, _, prof = w.call(doc={"query": intent, "limit": 5})
    agtp = w.svc.discover(
        _discover_req(w, {"intent": intent, "limit": 5}),
    )
    assert [c["canonical_id"] for c in prof["candidates"]] == [
        r["canonical_id"] for r in agtp["results"]
    ]
    assert [c["score"] for c in prof["candidates"]] == [r["rank_score"] for r in agtp["results"]]


def _discover_req(w: World, params: dict[str, Any]) -> Any:
    from ans.protocol.messages import Limits, parse_discover

    headers = {"agent-id": AGENT, "principal-id": "usr-1", "authority-scope": "discovery:query"}
    body = orjson.dumps({"method": "DISCOVER", "parameters": params})
    return parse_discover(headers, body, Limits())


def test_discover_query_is_required_and_an_intent_alias_must_agree(make_world: Any) -> None:
    w = make_world()
    for doc in ({}, {"limit": 2}, {"query": "   "}, {"query": 7}, {"intent": ""}):
        status, _, body = w.call(doc=doc)
        assert_profile_error(status, body, "invalid_request")
    status, _, body = w.call(doc={"intent": "translate"})
    assert status == 200
    status, _, body = w.call(doc={"query": "translate", "intent": "translate"})
    assert status == 200


@pytest.mark.parametrize(
    ("doc", "detail"),
    [
        ({"query": "x", "limit": "ten"}, "invalid_limit"),
        ({"query": "x", "limit": 0}, "invalid_limit"),
        ({"query": "x", "limit": 10**9}, "invalid_limit"),
        ({"query": "x", "limit": True}, "invalid_limit"),
        ({"query": "x", "include_evidence": "yes"}, "invalid_include_evidence"),
        ({"query": "x" * 5000}, "invalid_query"),
        ({"query": ["x"]}, "invalid_query"),
        ({"query": "a", "intent": "b"}, "invalid_query"),
        ({"query": "x", "detail": "everything"}, "invalid_detail"),
        ({"query": "x", "required_tags": "translation"}, "invalid_required_tags"),
        ({"query": "x", "required_tagz": ["translation"]}, "misspelled_parameter"),
        ({"query": "x", "constraints": {"max_result_age_seconds": 5}}, "misspelled_parameter"),
        ({"query": "x", "client_context": {"k": "v" * 5000}}, "invalid_client_context"),
        ({"query": "x", "trust_tier_min": 9}, "invalid_trust_tier_min"),
    ],
)
def test_discover_wrong_types_are_invalid_request_and_signed(
    make_world: Any, doc: dict[str, Any], detail: str
) -> None:
    w = make_world()
    status, _, body = w.call(doc=doc, headers={"task-id": "t-bad"})
    err = assert_profile_error(status, body, "invalid_request")
    assert err["detail"] == detail and err["correlation_id"] == "t-bad"
    # a discover refusal is signed as an AGTP DISCOVER refusal is
    assert verify_document(err, w.keys(), RESULT_SIGNATURE_FIELD) == w.svc.key.kid
    assert err["status"] == 400 and err["query_digest"] == query_digest(doc)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   ",
        b"not json",
        b"[1, 2, 3]",
        b'"a string"',
        b"null",
        b'{"query": "x",}',
        b'{"query": "x", "query": "y"}',
        b'{"query": NaN}',
        b'{"query": 1e999}',
        b"\xff\xfe\x00garbage",
        b"[" * 5000 + b"]" * 5000,
        b'{"query": "' + b"a" * 300_000 + b'"}',
    ],
)
def test_garbage_bodies_are_400_invalid_request_never_500(make_world: Any, body: bytes) -> None:
    w = make_world()
    status, _, out = w.call(body=body)
    assert_profile_error(status, out, "invalid_request")


def test_random_bodies_never_reach_a_500(make_world: Any) -> None:
    w = make_world()
    rng = random.Random(25)
    pieces = [b"{", b"}", b"[", b"]", b'"query"', b":", b",", b'"x"', b"1", b"null", b"\\", b"\x00"]
    for _ in range(150):
        body = b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 30)))
        status, _, out = w.call(body=body)
        assert status in (200, 400), (body, status, out)
        if status == 400:
            assert_profile_error(status, out, "invalid_request")


def test_content_type_must_be_json(make_world: Any) -> None:
    w = make_world()
    doc = {"query": "translate"}
    status, _, body = w.call(doc=doc, headers={"content-type": "text/plain"})
    assert assert_profile_error(status, body, "invalid_request")["detail"] == (
        "unsupported_content_type"
    )
    for ctype in ("application/json; charset=utf-8", "application/problem+json"):
        assert w.call(doc=doc, headers={"content-type": ctype})[0] == 200


def test_routes_wrong_methods_and_unknown_paths(make_world: Any) -> None:
    w = make_world()
    status, headers, body = w.call("GET", "/discovery/v1/discover")
    assert assert_profile_error(status, body, "invalid_request")["detail"] == "unsupported_method"
    assert headers["allow"] == "POST"
    status, headers, body = w.call("DELETE", f"/discovery/v1/agents/{w.ids['doc-translator']}")
    assert_profile_error(status, body, "invalid_request")
    assert headers["allow"] == "GET, PUT"
    for path in ("/discovery/v1", "/discovery/v1/", "/discovery/v1/nope", "/discovery/v1/agents/"):
        status, _, body = w.call("GET", path)
        assert_profile_error(status, body, "not_found")
    # an AGTP method on a profile path is still AGTP
    status, _, body = w.call("DISCOVER", "/discovery/v1/discover", body=b"{}")
    assert status == 200 and "result" in body


def test_missing_identity_headers_are_invalid_request(make_world: Any) -> None:
    w = make_world()
    status, _, body = w.call(doc={"query": "translate"}, identity=False)
    assert assert_profile_error(status, body, "invalid_request")["detail"] == "missing_agent_id"


def test_duplicate_identity_header_is_invalid_request(make_world: Any) -> None:
    w = make_world()
    asgi_headers = [
        (b"agent-id", AGENT.encode()),
        (b"agent-id", b"agtp://other/agents/x"),
        (b"principal-id", b"usr-1"),
        (b"authority-scope", b"discovery:query"),
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b'{"query": "x"}', "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/discovery/v1/discover"}
    asyncio.run(w.app({**scope, "headers": asgi_headers, "extensions": {}}, receive, send))
    body = orjson.loads(sent[1]["body"])
    assert assert_profile_error(sent[0]["status"], body, "invalid_request")["detail"] == (
        "duplicate_header"
    )


# -- the gate: scopes, zones, token mode, rate limits, audit ---------------------------------


def test_scope_without_discovery_query_is_403_forbidden_and_audited(make_world: Any) -> None:
    w = make_world()
    status, _, body = w.call(
        doc={"query": "translate"}, scope="agents:delegate", headers={"task-id": "t-451"}
    )
    err = assert_profile_error(status, body, "forbidden")
    assert err["detail"] == "scope_violation"
    rec = [r for r in w.audit() if r["event"] == "scope_violation"][-1]
    assert (rec["method"], rec["task_id"], rec["agent_id"]) == ("DISCOVER", "t-451", AGENT)


def test_restricted_zone_is_403_and_its_agents_stay_hidden(make_world: Any) -> None:
    w = make_world()
    doc = {"query": "summarise patient records", "governance_zone": "zone:healthcare"}
    status, _, body = w.call(doc=doc)
    assert assert_profile_error(status, body, "forbidden")["detail"] == "zone_violation"
    assert any(r["event"] == "zone_violation" for r in w.audit())
    _, _, open_body = w.call(doc={"query": "summarise patient records"})
    assert w.ids["patient-records"] not in {c["id"] for c in open_body["candidates"]}
    _, _, granted = w.call(
        doc={"query": "summarise patient records"}, scope="discovery:query zone:healthcare"
    )
    assert w.ids["patient-records"] in {c["id"] for c in granted["candidates"]}


def test_token_mode_needs_a_bearer_token(make_world: Any) -> None:
    w = make_world("token")
    status, headers, body = w.call(doc={"query": "translate"}, headers={"task-id": "t-401"})
    err = assert_profile_error(status, body, "unauthorized")
    assert err["detail"] == "missing_token"
    assert headers["www-authenticate"].startswith("Bearer")
    rec = [r for r in w.audit() if r["event"] == "authentication_failed"][-1]
    assert (rec["task_id"], rec["code"]) == ("t-401", "missing_token")
    ok, _, body = w.call(doc={"query": "translate"}, headers={"authorization": f"Bearer {mint()}"})
    assert ok == 200 and body["candidates"]
    # the effective scope is header scope ∩ token scope: no discovery:query, 403
    status, _, body = w.call(
        doc={"query": "translate"},
        headers={"authorization": f"Bearer {mint(scope='agents:delegate')}"},
    )
    assert_profile_error(status, body, "forbidden")


def _cert(uri: str) -> str:
    return client_cert_pem(uri, NOW)


def test_mtls_mode_binds_agent_id_to_the_client_certificate(make_world: Any) -> None:
    w = make_world("mtls")
    doc = {"query": "translate"}
    status, _, body = w.call(doc=doc, tls_chain=[_cert(AGENT)])
    assert status == 200 and body["candidates"]
    status, _, body = w.call(doc=doc, tls_chain=[_cert("agtp://o.example/agents/other")])
    assert assert_profile_error(status, body, "unauthorized")["detail"] == (
        "certificate_identity_mismatch"
    )
    status, _, body = w.call(doc=doc)
    assert assert_profile_error(status, body, "unauthorized")["detail"] == (
        "client_certificate_required"
    )
    path = f"/discovery/v1/agents/{w.ids['doc-translator']}"
    assert w.call("GET", path, tls_chain=[_cert(AGENT)])[0] == 200
    assert w.call("GET", path)[0] == 401
    assert [r["auth_mode"] for r in w.audit() if r["event"] == "authentication_failed"] == [
        "mtls"
    ] * 3


def test_rate_limit_is_429_with_retry_after_and_audited(make_world: Any) -> None:
    w = make_world(rate=0.001, burst=2)
    codes = [w.call(doc={"query": "translate"})[0] for _ in range(2)]
    assert codes == [200, 200]
    status, headers, body = w.call(doc={"query": "translate"})
    err = assert_profile_error(status, body, "rate_limited")
    assert err["retry_after"] >= 1 and headers["retry-after"] == str(err["retry_after"])
    assert verify_document(err, w.keys(), RESULT_SIGNATURE_FIELD)
    assert any(r["event"] == "rate_limited" for r in w.audit())


def test_client_address_limit_applies_before_parsing(make_world: Any) -> None:
    w = make_world(per_address_rate=0.001, per_address_burst=3)
    statuses = [w.call(body=b"garbage", client="192.0.2.7")[0] for _ in range(6)]
    assert statuses[0] == 400 and 429 in statuses


# -- GET one agent ---------------------------------------------------------------------------


def test_get_agent_is_a_signed_profile_object(make_world: Any, gov_key: SigningKey) -> None:
    w = make_world()
    cid = w.ids["doc-translator"]
    status, _, body = w.call("GET", f"/discovery/v1/agents/{cid}", headers={"task-id": "g-1"})
    assert status == 200, body
    assert (body["id"], body["name"], body["status"]) == (cid, "doc-translator", "active")
    assert body["manifest"]["canonical_id"] == cid
    # the complete governance-signed manifest, as registered
    assert verify_document(body["manifest"], TrustedKeys([gov_key.public]), "signature")
    assert verify_document(body, w.keys(), RESULT_SIGNATURE_FIELD) == w.svc.key.kid


def test_get_unknown_hidden_and_withdrawn_agents(make_world: Any, gov_key: SigningKey) -> None:
    w = make_world()
    status, _, body = w.call("GET", "/discovery/v1/agents/no-such-agent")
    assert_profile_error(status, body, "not_found")
    # a restricted zone the caller may not see: 404, as if absent
    hidden = w.ids["patient-records"]
    status, _, body = w.call("GET", f"/discovery/v1/agents/{hidden}")
    assert_profile_error(status, body, "not_found")
    status, _, _ = w.call(
        "GET", f"/discovery/v1/agents/{hidden}", scope="discovery:query zone:healthcare"
    )
    assert status == 200
    # no discovery:query: 403, audited
    status, _, body = w.call(
        "GET", f"/discovery/v1/agents/{w.ids['doc-translator']}", scope="agents:delegate"
    )
    assert_profile_error(status, body, "forbidden")
    assert [r for r in w.audit() if r["event"] == "scope_violation"][-1]["method"] == "DESCRIBE"
    # Suspended and Revoked: 410 stale_metadata
    for n, (event, label) in enumerate(
        (("SUSPEND", "legal-translator"), ("REVOKE", "solidity-auditor")), start=1
    ):
        ev = make_event(
            event, w.ids[label], gov_key, NOW - timedelta(seconds=30), event_id=f"e-{n}"
        )
        w.svc.lifecycle(LifecycleRequest(GOV, "t-lc", ev))
        status, _, body = w.call("GET", f"/discovery/v1/agents/{w.ids[label]}")
        err = assert_profile_error(status, body, "stale_metadata")
        assert err["detail"] in ("agent_suspended", "agent_retired")


def test_get_in_token_mode_is_gated(make_world: Any) -> None:
    w = make_world("token")
    path = f"/discovery/v1/agents/{w.ids['doc-translator']}"
    status, _, body = w.call("GET", path)
    assert_profile_error(status, body, "unauthorized")
    status, _, _ = w.call("GET", path, headers={"authorization": f"Bearer {mint()}"})
    assert status == 200


# -- PUT while self-registration is off -------------------------------------------------------


def test_put_without_self_registration_is_404_and_audited(make_world: Any) -> None:
    w = make_world()
    doc = {
        "id": "https://example.net/agents/minimal",
        "name": "Minimal Agent",
        "description": "Answers short factual questions.",
        "bindings": [{"protocol": "https", "endpoint": "https://example.net/agent/invoke"}],
    }
    # the ASGI path arrives percent-decoded: the id may itself hold slashes
    path = "/discovery/v1/agents/https://example.net/agents/minimal"
    status, _, body = w.call(
        "PUT", path, doc=doc, scope="discovery:register", headers={"task-id": "p-1"}
    )
    err = assert_profile_error(status, body, "not_found")
    assert "self_registration" in err["message"]
    rec = [r for r in w.audit() if r["event"] == "self_asserted_refused"][-1]
    assert (rec["task_id"], rec["agent_id"], rec["status"]) == ("p-1", AGENT, 404)
    assert (rec["source"], rec["profile_id"]) == ("profile", "https://example.net/agents/minimal")
    assert not any(r["event"] == "self_asserted_admission" for r in w.audit())


# -- configuration -------------------------------------------------------------------------


def test_base_path_is_configurable_and_the_binding_can_be_off(make_world: Any) -> None:
    w = make_world(profile=ProfileSettings(base_path="/profile/d2"))
    assert w.call(path="/profile/d2/discover", doc={"query": "translate"})[0] == 200
    status, _, body = w.call(path="/discovery/v1/discover", doc={"query": "translate"})
    assert status == 404 and body["error"]["code"] == "not_found" and "status" in body  # AGTP
    off = make_world(profile=ProfileSettings(enabled=False))
    status, _, body = off.call(doc={"query": "translate"})
    assert status == 404 and body["status"] == 404  # the AGTP envelope: no profile binding


def test_profile_config_section(tmp_path: Path) -> None:
    from ans.config import ConfigError, load

    cfg = tmp_path / "ans.toml"
    cfg.write_text('[profile]\nself_registration = true\nbase_path = "/d/v2"\n')
    loaded = load(cfg)
    assert loaded.profile == ProfileSettings(True, "/d/v2", True)
    assert load(None).profile == ProfileSettings(True, "/discovery/v1", False)
    for bad in (
        '[profile]\nbase_path = "discovery"\n',
        '[profile]\nbase_path = "/discovery/"\n',
        '[profile]\nbase_path = "/agtp"\n',
        '[profile]\nself_registration = "yes"\n',
        "[profile]\nselfregistration = true\n",
    ):
        cfg.write_text(bad)
        with pytest.raises(ConfigError, match=r"profile"):
            load(cfg)


def test_config_replace_keeps_profile_settings() -> None:
    cfg = replace(Config(), profile_self_registration=True)
    assert cfg.validate().profile.self_registration


# -- PUT with self-registration on ------------------------------------------------------------

MINIMAL = {
    "id": "https://example.net/agents/minimal",
    "name": "Minimal Agent",
    "description": "Answers short factual questions.",
    "bindings": [{"protocol": "https", "endpoint": "https://example.net/agent/invoke"}],
    "x-vendor-field": {"kept": True},
}
PUT_PATH = "/discovery/v1/agents/https://example.net/agents/minimal"


def test_put_admits_a_self_asserted_tier3_record(make_world: Any) -> None:
    w = make_world(profile=ProfileSettings(self_registration=True))
    reg = "discovery:register discovery:query"
    status, _, body = w.call("PUT", PUT_PATH, MINIMAL, scope=reg, headers={"task-id": "p-2"})
    assert status == 200, body
    assert (body["id"], body["governed"], body["trust_tier"]) == (MINIMAL["id"], False, 3)
    assert verify_document(body, w.keys(), RESULT_SIGNATURE_FIELD) == w.svc.key.kid
    rec = [r for r in w.audit() if r["event"] == "self_asserted_admission"][-1]
    assert (rec["task_id"], rec["source"], rec["agent_id"]) == ("p-2", "profile", AGENT)
    # GET by its profile id: the metadata as sent, unknown fields kept
    status, _, agent = w.call("GET", PUT_PATH)
    assert status == 200, agent
    assert (agent["id"], agent["governed"], agent["trust_tier"]) == (MINIMAL["id"], False, 3)
    assert agent["capabilities"]["x-vendor-field"] == {"kept": True}
    assert agent["bindings"] == MINIMAL["bindings"]
    # the same metadata again: idempotent
    status, _, again = w.call("PUT", PUT_PATH, MINIMAL, scope=reg)
    assert status == 200 and again["unchanged"] is True
    # excluded from discover unless tier 3 is admitted
    q = {"query": "answer a short factual question", "limit": 10}
    _, _, plain = w.call(doc=q)
    assert MINIMAL["id"] not in {c["id"] for c in plain["candidates"]}
    _, _, tier3 = w.call(doc={**q, "trust_tier_min": 3})
    assert MINIMAL["id"] in {c["id"] for c in tier3["candidates"]}


def test_put_refusals(make_world: Any) -> None:
    w = make_world(profile=ProfileSettings(self_registration=True))
    reg = "discovery:register"
    # no discovery:register: 403, audited by the registrar
    status, _, body = w.call("PUT", PUT_PATH, MINIMAL, scope="discovery:query")
    assert assert_profile_error(status, body, "forbidden")["detail"] == "scope_violation"
    assert [r for r in w.audit() if r["event"] == "scope_violation"][-1]["method"] == "profile"
    # the body's id must be the path's
    status, _, body = w.call("PUT", "/discovery/v1/agents/other", MINIMAL, scope=reg)
    assert_profile_error(status, body, "invalid_request")
    # D0 fields are required
    for missing in ("name", "description", "bindings"):
        doc = {k: v for k, v in MINIMAL.items() if k != missing}
        status, _, body = w.call("PUT", PUT_PATH, doc, scope=reg)
        assert_profile_error(status, body, "invalid_request")
    for garbage in (b"", b"[]", b"{", b'{"id": 1}'):
        status, _, body = w.call("PUT", PUT_PATH, body=garbage, scope=reg)
        assert_profile_error(status, body, "invalid_request")
    assert w.call("PUT", PUT_PATH, MINIMAL, scope=reg)[0] == 200
    # another principal may not take the id over: 409 conflict, audited
    status, _, body = w.call(
        "PUT", PUT_PATH, MINIMAL, scope=reg, headers={"principal-id": "usr-other"}
    )
    assert assert_profile_error(status, body, "conflict")["detail"] == "conflict"
    refused = [r for r in w.audit() if r["event"] == "self_asserted_refused"][-1]
    assert (refused["status"], refused["principal_id"]) == (409, "usr-other")
    # a governed record's id cannot be announced over: 409
    cid = w.ids["doc-translator"]
    doc = {**MINIMAL, "id": cid}
    status, _, body = w.call("PUT", f"/discovery/v1/agents/{cid}", doc, scope=reg)
    assert_profile_error(status, body, "conflict")
    # older metadata than the stored record: 410 stale_metadata
    newer = {**MINIMAL, "updated_at": "2026-11-20T00:00:00Z"}
    assert w.call("PUT", PUT_PATH, newer, scope=reg)[0] == 200
    older = {**MINIMAL, "updated_at": "2026-11-01T00:00:00Z"}
    status, _, body = w.call("PUT", PUT_PATH, older, scope=reg)
    assert assert_profile_error(status, body, "stale_metadata")["detail"] == "stale_metadata"
    # ... and so is an update without updated_at: it cannot be shown newer
    status, _, body = w.call("PUT", PUT_PATH, {**MINIMAL, "name": "Renamed"}, scope=reg)
    assert assert_profile_error(status, body, "stale_metadata")["detail"] == "stale_metadata"
    # metadata dated ahead of the server's clock (beyond the skew) is refused, so
    # that it cannot lock every later update out as stale
    far = {**MINIMAL, "updated_at": "9999-12-31T00:00:00Z"}
    status, _, body = w.call("PUT", PUT_PATH, far, scope=reg)
    err = assert_profile_error(status, body, "invalid_request")
    assert "in the future" in err["message"], err
    soon = NOW + timedelta(seconds=60)  # within the skew
    status, _, body = w.call(
        "PUT", PUT_PATH, {**MINIMAL, "updated_at": soon.strftime("%Y-%m-%dT%H:%M:%SZ")}, scope=reg
    )
    assert status == 200, body


def test_put_in_token_mode_is_gated(make_world: Any) -> None:
    w = make_world("token", profile=ProfileSettings(self_registration=True))
    status, _, body = w.call("PUT", PUT_PATH, MINIMAL, scope="discovery:register")
    assert_profile_error(status, body, "unauthorized")
    token = mint(scope="discovery:register")
    status, _, body = w.call(
        "PUT",
        PUT_PATH,
        MINIMAL,
        scope="discovery:register",
        headers={"authorization": f"Bearer {token}"},
    )
    assert status == 200, body


def test_detail_levels_and_evidence_on_the_binding(make_world: Any, gov_key: SigningKey) -> None:
    w = make_world()
    q = {"query": "translate a legal contract", "limit": 2}
    _, _, minimal = w.call(doc={**q, "detail": "minimal"})
    first = minimal["candidates"][0]
    assert {"id", "status", "bindings", "score"} <= set(first)
    assert "description" not in first and "manifest" not in first
    _, _, full = w.call(doc={**q, "detail": "full", "include_evidence": True})
    first = full["candidates"][0]
    assert verify_document(first["manifest"], TrustedKeys([gov_key.public]), "signature")
    assert {"score_components", "matched_tags", "matched_examples", "freshness"} <= set(first)
    assert isinstance(first["matched_tags"], list) and "fused" in first["score_components"]
    for body in (minimal, full):
        assert verify_document(body, w.keys(), RESULT_SIGNATURE_FIELD)
