"""The request path through the ASGI app in-process (no sockets): rate limit
per client address (429, every AGTP request, before parsing) -> parse ->
authenticate (401) -> rate limit per Agent-ID (429) -> scope (451) -> zone
(453), the
effective scope after token authentication, the response headers
(WWW-Authenticate, Retry-After) and the audit records; mTLS identity from the
ASGI TLS extension; the federator forwarding the caller's token."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from ans.federation.federator import Federator
from ans.federation.peers import FederationSettings, Peer
from ans.federation.transport import PeerError, PeerReply
from ans.governance.audit import AuditLog
from ans.governance.keys import SigningKey, TrustedKeys, b64url
from ans.governance.policy import ZonePolicy
from ans.governance.ratelimit import RateLimitSettings, parse_networks
from ans.protocol.errors import RateLimited
from ans.protocol.messages import PARSERS, ActivateRequest, Identity, Limits, parse_discover
from ans.protocol.scope import parse_authority_scope

from ans.app import AnsApp
from ans.config import Config
from ans.gate import (
    ADDRESS_BYTES_PER_TOKEN,
    REFUSAL_TOKENS,
    SIGNED_REFUSAL_TOKENS,
    Credentials,
    RequestGate,
)
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


def mint(**claims: Any) -> str:
    body = {
        "iss": ISSUER,
        "aud": ANS_ID,
        "sub": AGENT,
        "principal": "usr-1",
        "scope": "discovery:query zone:healthcare",
        "exp": int((NOW + timedelta(minutes=5)).timestamp()),
        **claims,
    }
    h = b64url(orjson.dumps({"alg": "ES256", "kid": TOKEN_KEY.kid, "typ": "JWT"}))
    p = b64url(orjson.dumps(body))
    return f"{h}.{p}.{b64url(TOKEN_KEY.sign_raw(f'{h}.{p}'.encode()))}"


class Ticker:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class CpuClock:
    """A CPU clock that advances ``step`` seconds between the two readings a
    request takes."""

    def __init__(self, step: float) -> None:
        self.step, self.now, self.reads = step, 0.0, 0

    def read(self) -> float:
        self.reads += 1
        if self.reads % 2 == 0:
            self.now += self.step
        return self.now


@pytest.fixture
def make_app(
    tmp_path: Path, embedder: Any, gov_key: SigningKey, make_manifest: Callable[..., Any]
) -> Iterator[Callable[..., tuple[AnsApp, AnsService, Ticker]]]:
    services: list[AnsService] = []

    def make(
        mode: str = "open", forwarders: tuple[str, ...] = (), cpu_ms: float = 0.0, **rate: Any
    ) -> tuple[AnsApp, AnsService, Ticker]:
        d = tmp_path / f"svc{len(services)}"
        d.mkdir()
        cfg = Config(
            data_dir=d,
            agent_id=ANS_ID,
            restricted_zones=("zone:healthcare",),
            auth_mode=mode,
            auth_forwarders=forwarders,
            token_issuer=ISSUER,
            rate_limit=RateLimitSettings(**rate),
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
        services.append(svc)
        for label, zone in (("coder", "zone:healthcare"), ("helper", "zone:public")):
            m = make_manifest(label, governance_zone=zone, job_description=f"{label} agent")
            svc.activate(ActivateRequest(GOV, "t", m, {}))
        ticker = Ticker()
        keys = TrustedKeys([TOKEN_KEY.public]) if mode == "token" else None
        gate = RequestGate(cfg, svc.audit, svc.manifest["canonical_id"], keys, NOW_CLOCK, ticker)
        # each request costs cpu_ms of CPU (nothing unless a test says so)
        cpu = CpuClock(cpu_ms / 1000.0)
        return AnsApp(svc, gate, cpu_clock=cpu.read), svc, ticker

    yield make
    for svc in services:
        svc.audit.close()
        svc.store.close()


def NOW_CLOCK() -> datetime:
    return NOW


def call(
    app: AnsApp,
    method: str = "DISCOVER",
    params: dict[str, Any] | None = None,
    *,
    scope: str = "discovery:query",
    token: str | None = None,
    headers: dict[str, str] | None = None,
    tls_chain: list[str] | None = None,
    raw_extra: list[tuple[str, str]] | None = None,  # sent as well, repeats included
    client: str | None = None,  # the ASGI scope's client host
    body: bytes | None = None,  # instead of the envelope of ``params``
) -> tuple[int, dict[str, str], dict[str, Any]]:
    hdrs = {"agent-id": AGENT, "principal-id": "usr-1", "authority-scope": scope}
    if token is not None:
        hdrs["authorization"] = f"Bearer {token}"
    hdrs.update(headers or {})
    if body is None:
        body = orjson.dumps({"method": method, "task_id": "t1", "parameters": params or {}})
    asgi_scope: dict[str, Any] = {
        "type": "http",
        "method": method,
        "path": "/",
        "headers": [(k.encode(), v.encode()) for k, v in [*hdrs.items(), *(raw_extra or [])]],
        "extensions": {},
    }
    if client is not None:
        asgi_scope["client"] = (client, 40000)
    if tls_chain is not None:
        asgi_scope["extensions"]["tls"] = {"client_cert_chain": tls_chain}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(asgi_scope, receive, send))
    start = sent[0]
    out_headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], out_headers, orjson.loads(sent[1]["body"])


def audit_events(svc: AnsService) -> list[dict[str, Any]]:
    return [json.loads(line) for line in svc.audit.path.read_text().splitlines()]


def labels(body: dict[str, Any]) -> list[str]:
    return sorted(r["agent_label"] for r in body["result"]["results"])


# -- token mode -----------------------------------------------------------------------


def test_token_mode_requires_a_token_and_audits_the_401(make_app: Any) -> None:
    app, svc, _ = make_app("token")
    status, headers, body = call(app)
    assert status == 401 and body["error"]["code"] == "missing_token"
    assert headers["www-authenticate"] == 'Bearer realm="ANS"'
    rec = audit_events(svc)[-1]
    assert rec["event"] == "authentication_failed"
    assert (rec["status"], rec["code"], rec["auth_mode"], rec["method"]) == (
        401,
        "missing_token",
        "token",
        "DISCOVER",
    )
    assert (rec["agent_id"], rec["principal_id"], rec["task_id"]) == (AGENT, "usr-1", "t1")


def test_token_mode_valid_token_is_served(make_app: Any) -> None:
    app, _, _ = make_app("token")
    status, _, body = call(app, scope="discovery:query zone:healthcare", token=mint())
    assert status == 200
    assert labels(body) == ["coder", "helper"]


def test_expired_token_is_401_before_the_scope_check(make_app: Any) -> None:
    app, svc, _ = make_app("token")
    expired = mint(exp=int((NOW - timedelta(hours=1)).timestamp()))
    status, headers, body = call(app, scope="agents:delegate", token=expired)
    assert status == 401 and body["error"]["code"] == "token_expired"
    assert headers["www-authenticate"] == 'Bearer realm="ANS", error="invalid_token"'
    assert not any(r["event"] == "scope_violation" for r in audit_events(svc))


def test_header_scope_not_covered_by_the_token_is_dropped(make_app: Any) -> None:
    app, svc, _ = make_app("token")
    # the header claims discovery:query, the token grants only agents:delegate -> 451
    status, _, body = call(
        app, scope="discovery:query agents:delegate", token=mint(scope="agents:delegate")
    )
    assert status == 451 and body["error"]["code"] == "scope_violation"
    rec = audit_events(svc)[-1]
    assert rec["event"] == "scope_violation" and rec["scope_presented"] == "agents:delegate"
    # the zone token in the header is dropped too: restricted agents vanish, asking is 453
    zone_header = "discovery:query zone:healthcare"
    status, _, body = call(app, scope=zone_header, token=mint(scope="discovery:query"))
    assert status == 200 and labels(body) == ["helper"]
    status, _, body = call(
        app,
        params={"governance_zone": "zone:healthcare"},
        scope=zone_header,
        token=mint(scope="discovery:query"),
    )
    assert status == 453


def test_zone_claim_against_the_zone_header(make_app: Any) -> None:
    app, svc, _ = make_app("token")
    token = mint(zone="zone:healthcare")
    status, _, body = call(app, token=token, headers={"agtp-zone-id": "zone:public"})
    assert status == 401 and body["error"]["code"] == "token_zone_mismatch"
    assert audit_events(svc)[-1]["zone_header"] == "zone:public"
    status, _, _ = call(app, token=token, headers={"agtp-zone-id": "zone:healthcare"})
    assert status == 200
    status, _, body = call(app, token=token, headers={"agtp-zone-id": "Not a zone"})
    assert status == 400 and body["error"]["code"] == "invalid_agtp_zone_id"


@pytest.mark.parametrize("mode", ["open", "mtls"])
def test_a_malformed_zone_header_is_a_400_in_every_mode(make_app: Any, mode: str) -> None:
    app, _, _ = make_app(mode)
    status, _, body = call(app, headers={"agtp-zone-id": "%%%"})
    assert status == 400 and body["error"]["code"] == "invalid_agtp_zone_id", body
    status, _, body = call(app, headers={"agtp-zone-id": "zone:public"})
    assert (body.get("error") or {}).get("code") != "invalid_agtp_zone_id", body
    assert status == (200 if mode == "open" else 401)  # mtls: no client certificate


def test_describe_of_the_ans_itself_needs_no_token(make_app: Any) -> None:
    app, svc, _ = make_app("token")
    status, _, body = call(app, "DESCRIBE")
    assert status == 200 and body["result"]["manifest_uri"] == ANS_ID
    other = next(iter(svc.index.registry))
    status, _, body = call(app, "DESCRIBE", {"canonical_id": other})
    assert status == 401 and body["error"]["code"] == "missing_token"


# -- rate limits ----------------------------------------------------------------------


def test_rate_limit_429_before_451_with_retry_after(make_app: Any) -> None:
    app, svc, ticker = make_app(rate=0.5, burst=2)
    assert call(app)[0] == 200
    assert call(app, scope="agents:delegate")[0] == 451  # a token was still left
    status, headers, body = call(app, scope="agents:delegate")
    assert status == 429 and body["error"]["code"] == "rate_limited"
    assert headers["retry-after"] == "2"  # one token at 0.5/s
    for _ in range(5):
        assert call(app)[0] == 429
    limited = [r for r in audit_events(svc) if r["event"] == "rate_limited"]
    assert len(limited) == 1 and limited[0]["agent_id"] == AGENT
    assert limited[0]["limit"] == "agent_id" and "client_address" not in limited[0]
    ticker.t += 2.0
    assert call(app)[0] == 200
    app.gate.flush()
    summary = audit_events(svc)[-1]
    assert (summary["event"], summary["summary"], summary["suppressed"]) == (
        "rate_limited",
        True,
        5,
    )
    assert summary["limit"] == "agent_id" and summary["agent_id"] == AGENT


# -- rate limit per client address ------------------------------------------------------


def rotating(n: int) -> list[dict[str, str]]:
    """Identity headers with a fresh Agent-ID each (open mode: self-asserted)."""
    return [{"agent-id": f"agtp://o.example/agents/rot-{i}"} for i in range(n)]


def address_records(svc: AnsService) -> list[dict[str, Any]]:
    return [
        r
        for r in audit_events(svc)
        if r["event"] == "rate_limited" and r["limit"] == "client_address"
    ]


def test_rotating_agent_ids_meet_the_client_address_limit(make_app: Any) -> None:
    app, svc, ticker = make_app(per_address_rate=0.5, per_address_burst=3)
    ids = rotating(12)
    # one token per request: the address was charged once, not again at admission
    assert [call(app, headers=h, client="203.0.113.5")[0] for h in ids[:3]] == [200] * 3
    refused = {**ids[3], "task-id": "t-refused"}
    status, headers, body = call(app, headers=refused, client="203.0.113.5")
    assert status == 429 and body["error"]["code"] == "rate_limited"
    # one token at 0.5/s, and one more the signed refusal cost (SIGNED_REFUSAL_TOKENS)
    assert headers["retry-after"] == "4"
    assert "client address" in body["error"]["message"]
    # a scope refusal (451) would write a record per request: it is refused first
    for h in ids[4:10]:
        assert call(app, headers=h, scope="agents:delegate", client="203.0.113.5")[0] == 429
    # another address has its own bucket; no address at all is not limited
    assert call(app, headers=ids[10], client="203.0.113.6")[0] == 200
    assert all(call(app, headers=ids[11])[0] == 200 for _ in range(5))
    assert call(app, headers=ids[11], client="/run/ans.sock")[0] == 200
    (rec,) = address_records(svc)
    assert (rec["client_address"], rec["agent_id"], rec["method"]) == (
        "203.0.113.5",
        ids[3]["agent-id"],
        "DISCOVER",
    )
    assert (rec["status"], rec["retry_after"], rec["suppressed"], rec["principal_id"]) == (
        429,
        4,
        0,
        "usr-1",
    )
    # refused before the body was parsed: the Task-ID is the header's
    assert rec["task_id"] == "t-refused" and rec["summary"] is False
    assert not any(r["event"] == "scope_violation" for r in audit_events(svc))
    # each of the 7 signed 429s took a token: the bucket is 3 (burst) in debt
    ticker.t += 6.0
    assert call(app, headers=ids[1], client="203.0.113.5")[0] == 429
    ticker.t += 8.0  # refilled: served again
    assert call(app, headers=ids[1], client="203.0.113.5")[0] == 200
    assert len(address_records(svc)) == 1
    # past the audit window, the next admitted request writes the suppressed count
    ticker.t += 60.0
    assert call(app, headers=ids[0], client="203.0.113.5")[0] == 200
    summary = address_records(svc)[-1]
    assert (summary["summary"], summary["suppressed"], summary["client_address"]) == (
        True,
        7,  # the 6 scope refusals above and the early retry
        "203.0.113.5",
    )
    assert "agent_id" not in summary


def test_ipv6_clients_share_a_bucket_per_64(make_app: Any) -> None:
    app, svc, _ = make_app(per_address_rate=0.01, per_address_burst=2)
    ids = rotating(5)
    assert call(app, headers=ids[0], client="2001:db8:1:2::1")[0] == 200
    assert call(app, headers=ids[1], client="2001:db8:1:2:ffff:eeee:dddd:cccc")[0] == 200
    assert call(app, headers=ids[2], client="2001:db8:1:2::abcd")[0] == 429
    assert call(app, headers=ids[3], client="2001:db8:1:3::1")[0] == 200  # another /64
    assert [r["client_address"] for r in address_records(svc)] == ["2001:db8:1:2::/64"]


def test_ipv4_mapped_ipv6_counts_as_the_ipv4_address(make_app: Any) -> None:
    app, svc, _ = make_app(per_address_rate=0.01, per_address_burst=1)
    ids = rotating(3)
    assert call(app, headers=ids[0], client="192.0.2.7")[0] == 200
    assert call(app, headers=ids[1], client="::ffff:192.0.2.7")[0] == 429
    assert [r["client_address"] for r in address_records(svc)] == ["192.0.2.7"]


def test_exempt_addresses_are_never_limited_per_address(make_app: Any) -> None:
    exempt = parse_networks(["10.0.0.0/8", "2001:db8::/32"])
    app, svc, _ = make_app(per_address_rate=0.01, per_address_burst=1, exempt_addresses=exempt)
    ids = rotating(20)
    assert all(call(app, headers=h, client="10.1.2.3")[0] == 200 for h in ids)
    assert all(call(app, headers=h, client="2001:db8:5::1")[0] == 200 for h in ids)
    assert all(call(app, headers=h, client="::ffff:10.9.9.9")[0] == 200 for h in ids)
    assert all(call(app, "DESCRIBE", client="10.1.2.3")[0] == 200 for _ in range(5))
    assert all(call(app, body=b"{", client="10.1.2.3")[0] == 400 for _ in range(5))
    assert [call(app, headers=h, client="11.0.0.1")[0] for h in ids[:2]] == [200, 429]
    assert [r["client_address"] for r in address_records(svc)] == ["11.0.0.1"]


def test_a_flood_of_bad_tokens_is_refused_per_address_before_authentication(
    make_app: Any,
) -> None:
    # room for three refusals after parsing (each pays 1 + REFUSAL_TOKENS)
    burst = int(3 * (1 + REFUSAL_TOKENS))
    app, svc, _ = make_app("token", per_address_rate=0.01, per_address_burst=burst)
    bad = mint(iss="https://someone-else.example")
    statuses = [call(app, token=bad, client="198.51.100.9")[0] for _ in range(3)]
    assert statuses == [401] * 3
    for _ in range(20):
        status, headers, body = call(app, token=bad, client="198.51.100.9")
        assert status == 429 and body["error"]["code"] == "rate_limited"
        assert int(headers["retry-after"]) >= 1
    events = audit_events(svc)
    assert [r["event"] for r in events].count("authentication_failed") == 3
    (rec,) = address_records(svc)
    assert rec["client_address"] == "198.51.100.9" and rec["auth_mode"] == "token"
    # the suppressed refusals are counted, and written at shutdown
    app.gate.flush()
    summary = address_records(svc)[-1]
    assert (summary["summary"], summary["suppressed"], summary["client_address"]) == (
        True,
        19,
        "198.51.100.9",
    )
    assert len(audit_events(svc)) == len(events) + 1


def test_describe_of_the_ans_itself_is_counted_per_address(make_app: Any) -> None:
    """The bootstrap DESCRIBE needs no credentials, but it is a request like any other."""
    app, _, _ = make_app(per_address_rate=0.01, per_address_burst=2)
    assert call(app, "DESCRIBE", client="192.0.2.1")[0] == 200
    assert call(app, client="192.0.2.1")[0] == 200
    assert call(app, "DESCRIBE", client="192.0.2.1")[0] == 429
    assert call(app, client="192.0.2.1")[0] == 429
    assert call(app, "DESCRIBE", client="192.0.2.2")[0] == 200


DEEP_LISTS = (  # ~256 KB of lists nested 31 deep: costly to parse, then a 422 (limit 0)
    b'{"method":"DISCOVER","task_id":"t","parameters":{"intent":"x","limit":0},"pad":['
    + (b"[" * 30 + b"0" + b"]" * 30 + b",") * 4200
    + b"1]}"
)


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call of an AGTP request parser, by method."""
    calls: list[str] = []
    for method, parser in list(PARSERS.items()):

        def counted(*args: Any, _m: str = method, _p: Any = parser) -> Any:
            calls.append(_m)
            return _p(*args)

        monkeypatch.setitem(PARSERS, method, counted)
    return calls


@pytest.mark.parametrize(
    "body, status",
    [(b"{", 400), (DEEP_LISTS, 422)],
    ids=["unclosed", "deep-lists-limit-0"],
)
def test_a_flood_of_unparseable_bodies_is_refused_per_address_without_being_parsed(
    make_app: Any, parses: list[str], body: bytes, status: int
) -> None:
    # a body pays for its size, a (signed) DISCOVER refusal for its signature
    cost = 1 + len(body) // ADDRESS_BYTES_PER_TOKEN + int(SIGNED_REFUSAL_TOKENS)
    app, svc, _ = make_app(per_address_rate=0.01, per_address_burst=3 * cost)
    assert [call(app, body=body, client="198.51.100.7")[0] for _ in range(3)] == [status] * 3
    assert parses == ["DISCOVER"] * 3
    for _ in range(20):
        got, headers, answer = call(app, body=body, client="198.51.100.7")
        assert got == 429 and answer["error"]["code"] == "rate_limited"
        assert int(headers["retry-after"]) >= 1
    assert parses == ["DISCOVER"] * 3  # the 20 refused bodies were never parsed
    (rec,) = address_records(svc)
    assert (rec["client_address"], rec["method"], rec["agent_id"], rec["principal_id"]) == (
        "198.51.100.7",
        "DISCOVER",
        AGENT,
        "usr-1",
    )
    assert rec["task_id"] is None  # no Task-ID header; the body's was never read
    app.gate.flush()
    summary = address_records(svc)[-1]
    assert (summary["summary"], summary["suppressed"]) == (True, 19)
    # another address is not held up by this one
    assert call(app, body=body, client="198.51.100.8")[0] == status


def test_a_body_pays_for_its_size_per_address(make_app: Any) -> None:
    """One token per request and one more per 16 KiB of body: a burst of 40
    lets 40 small DISCOVERs through, or two of ~254 KiB (16 tokens each)."""
    assert 1 + len(DEEP_LISTS) // ADDRESS_BYTES_PER_TOKEN == 16
    app, _, _ = make_app(per_address_rate=0.01, per_address_burst=40)
    assert [call(app, body=DEEP_LISTS, client="192.0.2.20")[0] for _ in range(3)] == [
        422,
        422,
        429,
    ]
    small = [call(app, params={"intent": "audit"}, client="192.0.2.21")[0] for _ in range(41)]
    assert small == [200] * 40 + [429]
    # a body bigger than the whole burst still fits in a full bucket
    app, _, _ = make_app(per_address_rate=0.01, per_address_burst=5)
    assert [call(app, body=DEEP_LISTS, client="192.0.2.22")[0] for _ in range(2)] == [422, 429]


def test_costly_requests_and_refusals_use_the_address_allowance_faster(make_app: Any) -> None:
    """After each request the address pays for what it cost: one token per
    ms of CPU beyond the first 2, and 4 for a refusal after parsing."""
    app, _, _ = make_app(cpu_ms=12.0, per_address_rate=0.01, per_address_burst=40)
    statuses = [call(app, params={"intent": "audit"}, client="192.0.2.30")[0] for _ in range(6)]
    assert statuses == [200, 200, 200, 200, 429, 429]  # 1 + 10 tokens each: 4 fit in 40
    app, _, _ = make_app(per_address_rate=0.01, per_address_burst=40)
    refused = [call(app, scope="documents:read", client="192.0.2.31")[0] for _ in range(10)]
    # 1 + 4 (audit record) + 1 (signature) tokens each: 7 start within 40
    assert REFUSAL_TOKENS + SIGNED_REFUSAL_TOKENS == 5
    assert refused == [451] * 7 + [429] * 3
    # a refusal that writes no audit record still pays for its signature: 1 + 1
    bad = [call(app, params={"limit": 0}, client="192.0.2.33")[0] for _ in range(21)]
    assert bad == [422] * 20 + [429]
    cheap = [call(app, params={"intent": "audit"}, client="192.0.2.32")[0] for _ in range(41)]
    assert cheap == [200] * 40 + [429]  # a cheap request pays 1, as before
    # [rate_limit] per_address_free_ms raises what a request may use for its one token
    app, _, _ = make_app(
        cpu_ms=12.0, per_address_rate=0.01, per_address_burst=40, per_address_free_ms=12.5
    )
    roomy = [call(app, params={"intent": "audit"}, client="192.0.2.34")[0] for _ in range(41)]
    assert roomy == [200] * 40 + [429]


def test_unsupported_methods_are_counted_per_address(make_app: Any, parses: list[str]) -> None:
    app, svc, _ = make_app(per_address_rate=0.01, per_address_burst=2)
    long_method = "X" * 200
    assert [call(app, long_method, client="192.0.2.9")[0] for _ in range(4)] == [
        400,
        400,
        429,
        429,
    ]
    assert parses == []
    (rec,) = address_records(svc)
    assert rec["method"] == "X" * 32  # bounded, like the 400's message


def test_a_refusal_before_parsing_audits_the_identity_headers_bounded(tmp_path: Path) -> None:
    cfg = Config(
        data_dir=tmp_path,
        agent_id=ANS_ID,
        rate_limit=RateLimitSettings(per_address_rate=0.01, per_address_burst=1),
    )
    audit = AuditLog(tmp_path / "audit.jsonl", lambda: NOW)
    gate = RequestGate(cfg, audit, "ans-canonical-id", monotonic=Ticker())
    creds = Credentials(client_address="192.0.2.3")
    gate.limit_address("DESCRIBE", creds, {})
    with pytest.raises(RateLimited):
        gate.limit_address("DESCRIBE", creds, {})  # no identity headers at all
    long = {"agent-id": " " + "a" * 1000, "principal-id": "p" * 300, "task-id": "  "}
    gate.limit_address("DISCOVER", Credentials(client_address="192.0.2.4"), {})
    with pytest.raises(RateLimited):
        gate.limit_address("DISCOVER", Credentials(client_address="192.0.2.4"), long)
    audit.close()
    recs = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(r["agent_id"], r["principal_id"], r["task_id"]) for r in recs] == [
        (None, None, None),
        ("a" * 256, "p" * 256, None),
    ]
    assert [(r["limit"], r["client_address"], r["method"]) for r in recs] == [
        ("client_address", "192.0.2.3", "DESCRIBE"),
        ("client_address", "192.0.2.4", "DISCOVER"),
    ]


@pytest.mark.parametrize("off", [{"enabled": False}, {"per_address_rate": 0.0}])
def test_the_client_address_limit_can_be_turned_off(make_app: Any, off: dict[str, Any]) -> None:
    app, svc, _ = make_app(per_address_burst=1, **off)
    assert all(call(app, headers=h, client="192.0.2.1")[0] == 200 for h in rotating(30))
    assert all(call(app, "DESCRIBE", client="192.0.2.1")[0] == 200 for _ in range(5))
    assert all(call(app, body=b"{", client="192.0.2.1")[0] == 400 for _ in range(5))
    assert not any(r["event"] == "rate_limited" for r in audit_events(svc))


def test_per_address_rate_0_keeps_the_agent_id_limit(make_app: Any) -> None:
    app, svc, _ = make_app(rate=0.01, burst=2, per_address_rate=0.0)
    assert [call(app, client="192.0.2.1")[0] for _ in range(3)] == [200, 200, 429]
    (rec,) = [r for r in audit_events(svc) if r["event"] == "rate_limited"]
    assert rec["limit"] == "agent_id"


def test_enumeration_suspected_written_once(make_app: Any) -> None:
    app, svc, ticker = make_app(enabled=False, enumeration_threshold=5, enumeration_window=10.0)
    for _ in range(12):
        ticker.t += 0.1
        assert call(app)[0] == 200
    recs = [r for r in audit_events(svc) if r["event"] == "enumeration_suspected"]
    assert len(recs) == 1
    assert recs[0]["agent_id"] == AGENT and recs[0]["threshold"] == 5


def test_open_mode_is_unchanged_without_a_token(make_app: Any) -> None:
    app, _, _ = make_app()
    assert call(app)[0] == 200


# -- mTLS -------------------------------------------------------------------------------


def _cert(uri: str) -> str:
    return client_cert_pem(uri, NOW)


def test_mtls_agent_id_must_be_a_certificate_san_uri(make_app: Any) -> None:
    app, svc, _ = make_app("mtls")
    assert call(app, tls_chain=[_cert(AGENT)])[0] == 200
    status, _, body = call(app, tls_chain=[_cert("agtp://o.example/agents/other")])
    assert status == 401 and body["error"]["code"] == "certificate_identity_mismatch"
    status, _, body = call(app)  # no TLS extension at all
    assert status == 401 and body["error"]["code"] == "client_certificate_required"
    rec = audit_events(svc)[-1]
    assert rec["event"] == "authentication_failed" and rec["auth_mode"] == "mtls"


def test_a_refused_header_set_still_echoes_its_task_id(make_app: Any) -> None:
    app, _, _ = make_app()
    status, headers, body = call(
        app, headers={"task-id": "t-echo"}, raw_extra=[("principal-id", "usr-2")]
    )
    assert status == 400 and body["error"]["code"] == "duplicate_header"
    assert body["task_id"] == "t-echo" and headers["task-id"] == "t-echo"


def test_mtls_a_trusted_forwarder_may_speak_for_its_caller_on_a_federation_path(
    make_app: Any,
) -> None:
    fwd = "agtp://ans-a.example/agents/ans"
    app, svc, _ = make_app("mtls", forwarders=(fwd,))
    on_path = {"agtp-federation-path": "kidOfA"}
    status, _, body = call(app, tls_chain=[_cert(fwd)], headers=on_path)
    assert status == 200 and body["result"]["returned"] >= 1
    rec = [r for r in audit_events(svc) if r["event"] == "authentication_forwarded"]
    assert len(rec) == 1 and rec[0]["forwarded_by"] == fwd and rec[0]["agent_id"] == AGENT
    # Without a federation path the forwarder is only itself ...
    status, _, body = call(app, tls_chain=[_cert(fwd)])
    assert status == 401 and body["error"]["code"] == "certificate_identity_mismatch"
    # ... and a certificate that is not a listed forwarder gets nothing from the path.
    other = _cert("agtp://ans-x.example/agents/ans")
    status, _, body = call(app, tls_chain=[other], headers=on_path)
    assert status == 401 and body["error"]["code"] == "certificate_identity_mismatch"
    # The caller's scope still decides: the forwarder cannot lift a 451.
    status, _, body = call(app, tls_chain=[_cert(fwd)], headers=on_path, scope="agents:delegate")
    assert status == 451


# -- federation forwards the token --------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []

    async def send(
        self, peer: Peer, method: str, url: str, headers: Any, body: bytes, timeout: float
    ) -> PeerReply:
        self.headers.append(dict(headers))
        raise PeerError("recorded", "peer_unreachable")

    async def aclose(self) -> None:
        return None


def test_federator_forwards_the_callers_token(tmp_path: Path) -> None:
    jwks = tmp_path / "peer.jwks.json"
    jwks.write_text(json.dumps({"keys": [SigningKey.generate().public.jwk()]}))
    peer = Peer("http://127.0.0.1:9", 2, key_source="jwks_file", jwks_file=jwks)
    rec = Recorder()
    audit = AuditLog(tmp_path / "audit.jsonl", NOW_CLOCK)
    fed = Federator("me", [peer], FederationSettings(), rec, audit, ZonePolicy(), 0.05, NOW_CLOCK)
    headers = {"agent-id": AGENT, "principal-id": "usr-1", "authority-scope": "discovery:query"}
    req = parse_discover(headers, b'{"parameters": {"limit": 3}}', Limits())
    token = mint()
    with_token = replace(req, identity=replace(req.identity, bearer_token=token))

    async def run() -> None:
        for r in (req, with_token):
            await fed.gather(r, fed.plan(r, 0))

    asyncio.run(run())
    audit.close()
    assert "authorization" not in rec.headers[0]
    assert rec.headers[1]["authorization"] == f"Bearer {token}"
    assert rec.headers[1]["authority-scope"] == "discovery:query"


def test_a_body_that_does_not_arrive_in_time_is_408(make_app: Any) -> None:
    app, _, _ = make_app()
    app.body_timeout = 0.2
    asgi_scope: dict[str, Any] = {
        "type": "http",
        "method": "DISCOVER",
        "path": "/",
        "headers": [
            (b"agent-id", AGENT.encode()),
            (b"principal-id", b"usr-1"),
            (b"authority-scope", b"discovery:query"),
            (b"task-id", b"t-slow"),
        ],
        "extensions": {},
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:  # one byte, then nothing more
        if not sent and not getattr(receive, "once", False):
            receive.once = True  # type: ignore[attr-defined]
            return {"type": "http.request", "body": b"{", "more_body": True}
        await asyncio.sleep(30)
        raise AssertionError("not reached")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def go() -> float:
        started = asyncio.get_running_loop().time()
        await asyncio.wait_for(app(asgi_scope, receive, send), 5)
        return asyncio.get_running_loop().time() - started

    elapsed = asyncio.run(go())
    assert 0.2 <= elapsed < 2.0
    assert sent[0]["status"] == 408
    body = orjson.loads(sent[1]["body"])
    assert body["error"]["code"] == "request_timeout" and body["task_id"] == "t-slow"
