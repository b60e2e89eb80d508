"""Federation in-process: real AnsService peers (real signatures, real
matching) behind an in-memory fake of the PeerTransport interface, so each
failure mode can be provoked exactly: slow, down, tampered, replayed,
stale, threshold-ignoring, tier-inflating, key-rotating peers; chains,
loops and hop limits; merge, dedupe, provenance and the audit trail."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from ans.federation.federator import WARNING_CODES, Federator
from ans.federation.peers import FederationSettings, Peer
from ans.federation.transport import PeerReply, PeerTimeout, PeerUnreachable
from ans.governance.audit import AuditLog, verify_chain
from ans.governance.keys import SigningKey, TrustedKeys
from ans.governance.policy import ZonePolicy
from ans.governance.signing import sign_document, signature_object, verify_document
from ans.protocol.errors import AgtpError, ScopeViolation
from ans.protocol.jcs import canonicalize
from ans.protocol.messages import (
    ActivateRequest,
    Identity,
    encode_error,
    parse_discover,
    query_digest,
)
from ans.protocol.scope import parse_authority_scope

from ans.config import Config
from ans.matcher import CapabilityIndex
from ans.ranking import rank_score
from ans.service import AnsService
from ans.store import SQLiteStore

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
GOV = Identity("agtp://gov.example/agents/p", "gov", parse_authority_scope("discovery:register"))
INTENT = "audit Solidity smart contracts for reentrancy bugs"
FAST = FederationSettings(peer_timeout=0.5, deadline=0.8, key_retry=5.0)


class FakePeer:
    """An ANS reachable only through :class:`FakeNetwork`, with knobs to misbehave."""

    def __init__(self, svc: AnsService) -> None:
        self.svc = svc
        self.delay = 0.0
        self.mutate: Callable[[dict[str, Any], FakePeer], dict[str, Any]] | None = None
        self.relax: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        self.jwks_status = 200
        self.discovers: list[dict[str, str]] = []
        self.jwks_fetches = 0
        self.cancelled = 0  # DISCOVERs abandoned by the asking side while in flight
        self.hold: asyncio.Event | None = None  # DISCOVERs wait for it (after delay) when set

    async def handle(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> PeerReply:
        if method == "GET":
            self.jwks_fetches += 1
            return PeerReply(self.jwks_status, orjson.dumps(self.svc.jwks()))
        if method == "DESCRIBE":
            doc = {"status": 200, "result": self.svc.manifest}
            return PeerReply(200, orjson.dumps(doc))
        self.discovers.append(headers)
        if self.delay or self.hold is not None:
            try:
                await asyncio.sleep(self.delay)
                if self.hold is not None:
                    await self.hold.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        try:
            req = parse_discover(headers, body, self.svc.limits)
            if self.relax is not None:  # a peer that ignores what it was asked
                relaxed = self.relax(dict(req.raw_parameters))
                payload = orjson.dumps({"method": "DISCOVER", "parameters": relaxed})
                lying = parse_discover(headers, payload, self.svc.limits)
                result = await self.svc.discover_async(lying)
                result["query_digest"] = req.query_digest
                result = sign_document(result, self.svc.key, "ans_signature")
            else:
                result = await self.svc.discover_async(req)
            if self.mutate is not None:
                result = self.mutate(result, self)
        except AgtpError as exc:
            return PeerReply(exc.status, encode_error(exc.status, None, exc.code, exc.message))
        return PeerReply(200, orjson.dumps({"status": 200, "task_id": None, "result": result}))


@dataclass
class FakeNetwork:
    """The PeerTransport interface over in-memory peers keyed by URL."""

    peers: dict[str, FakePeer] = field(default_factory=dict)
    sent: list[tuple[str, str]] = field(default_factory=list)

    async def send(
        self,
        peer: Peer,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout: float,
    ) -> PeerReply:
        self.sent.append((peer.url, method))
        fake = self.peers.get(peer.url)
        if fake is None:
            raise PeerUnreachable("connection refused")
        try:
            return await asyncio.wait_for(
                fake.handle(method, url[len(peer.url) :], dict(headers), body), timeout
            )
        except TimeoutError:
            raise PeerTimeout(f"no answer within {timeout:.3f}s") from None

    async def aclose(self) -> None:
        return None


async def until(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Yield to the event loop until ``cond()`` holds: waiting on the state,
    not on a guess at how long it takes to reach it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.005)


class World:
    def __init__(self, tmp: Path, embedder: Any, gov_key: SigningKey, make_manifest: Any) -> None:
        self.tmp = tmp
        self.embedder = embedder
        self.gov_key = gov_key
        self.make_manifest = make_manifest
        self.net = FakeNetwork()
        self.services: list[AnsService] = []
        self.mono = [0.0]

    def ans(
        self,
        name: str,
        agents: dict[str, dict[str, Any]],
        *,
        peers: tuple[Peer, ...] = (),
        settings: FederationSettings = FAST,
        restricted: tuple[str, ...] = (),
        clock: Callable[[], datetime] = lambda: NOW,
        **config: Any,
    ) -> AnsService:
        d = self.tmp / name
        d.mkdir()
        cfg = Config(
            data_dir=d, restricted_zones=restricted, peers=peers, federation=settings, **config
        )
        key = SigningKey.generate()
        audit = AuditLog(d / "audit.jsonl", clock)
        fed = None
        if peers:
            fed = Federator(
                self_id=key.kid,
                peers=peers,
                settings=settings,
                transport=self.net,
                audit=audit,
                zones=ZonePolicy.of(restricted),
                min_capability_match=cfg.relevance.threshold,
                clock=clock,
                monotonic=lambda: self.mono[0],
            )
        svc = AnsService(
            config=cfg,
            store=SQLiteStore(d / "registry.sqlite3"),
            matcher=CapabilityIndex(self.embedder),
            signing_key=key,
            governance_keys=TrustedKeys([self.gov_key.public]),
            audit=audit,
            clock=clock,
            new_id=lambda: name,
            federator=fed,
        )
        for label, spec in agents.items():
            spec = dict(spec)
            caps = spec.pop("caps", {"supported_methods": ["QUERY"]})
            manifest = self.make_manifest(label, **spec)
            svc.activate(ActivateRequest(GOV, f"t-{label}", manifest, caps))
        self.services.append(svc)
        return svc

    def serve(self, url: str, svc: AnsService) -> FakePeer:
        fake = FakePeer(svc)
        self.net.peers[url] = fake
        return fake

    def close(self) -> None:
        for svc in self.services:
            svc.audit.close()
            svc.store.close()


@pytest.fixture
def world(
    tmp_path: Path, embedder: Any, gov_key: SigningKey, make_manifest: Any
) -> Iterator[World]:
    w = World(tmp_path, embedder, gov_key, make_manifest)
    yield w
    w.close()


def solidity(label: str, **kw: Any) -> dict[str, dict[str, Any]]:
    spec = {
        "org_domain": f"{label}.example",
        "job_description": f"{label}: audits Solidity smart contracts for reentrancy bugs.",
        **kw,
    }
    return {label: spec}


def ask(
    svc: AnsService,
    scope: str = "discovery:query",
    headers: dict[str, str] | None = None,
    **params: Any,
) -> dict[str, Any]:
    h = {
        "agent-id": "agtp://o.example/agents/orch",
        "principal-id": "usr-1",
        "authority-scope": scope,
    }
    h.update(headers or {})
    params.setdefault("intent", INTENT)
    body = orjson.dumps({"method": "DISCOVER", "task_id": "t1", "parameters": params})
    return asyncio.run(svc.discover_async(parse_discover(h, body, svc.limits)))


def labels(result: dict[str, Any]) -> list[str]:
    return [r["agent_label"] for r in result["results"]]


def codes(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [(w["code"], w["peer"]) for w in result.get("warnings", [])]


def audit_events(svc: AnsService, event: str) -> list[dict[str, Any]]:
    lines = svc.audit.path.read_bytes().splitlines()
    assert verify_chain(lines) is None
    return [r for r in map(orjson.loads, lines) if r["event"] == event]


def assert_signed_by(result: dict[str, Any], svc: AnsService) -> None:
    assert verify_document(result, TrustedKeys([svc.key.public]), "ans_signature") == svc.key.kid


# -- when to forward --------------------------------------------------------------------


def test_no_forward_when_local_results_fill_the_limit(world: World) -> None:
    b = world.ans("b", solidity("remote-auditor"))
    world.serve("http://b", b)
    a = world.ans(
        "a", {**solidity("local-one"), **solidity("local-two")}, peers=(Peer("http://b", 2),)
    )
    got = ask(a, limit=2)
    assert labels(got) and set(labels(got)) == {"local-one", "local-two"}
    assert "federation_path" not in got and "warnings" not in got
    assert world.net.sent == []
    got = ask(a, limit=3)  # now one short: ask the peer
    assert "remote-auditor" in labels(got)
    assert world.net.sent == [("http://b", "GET"), ("http://b", "DISCOVER")]


def test_forwarded_request_carries_identity_thresholds_and_path(world: World) -> None:
    b = world.ans("b", solidity("remote-auditor"))
    fake = world.serve("http://b", b)
    a = world.ans("a", {}, peers=(Peer("http://b", 2),))
    got = ask(
        a,
        scope="discovery:query documents:read",
        trust_tier_min=2,
        behavioral_trust_min=0.8,
        limit=5,
    )
    assert labels(got) == ["remote-auditor"]
    sent = fake.discovers[0]
    assert sent["agent-id"] == "agtp://o.example/agents/orch"
    assert sent["principal-id"] == "usr-1"
    assert sent["authority-scope"] == "discovery:query documents:read"
    assert sent["agtp-federation-path"] == a.key.kid
    assert 0 < int(sent["agtp-federation-budget-ms"]) <= 500
    # The peer's signed digest matched what the caller sent us (else it was dropped).
    assert got["query_digest"] == query_digest(
        {"trust_tier_min": 2, "behavioral_trust_min": 0.8, "limit": 5, "intent": INTENT}
    )
    assert got["warnings"] == []


def test_merged_result_is_signed_with_path_and_provenance(world: World) -> None:
    b = world.ans("b", solidity("remote-auditor", trust_tier=1, behavioral_trust_score=0.95))
    world.serve("http://b", b)
    a = world.ans(
        "a", solidity("local-auditor", behavioral_trust_score=0.7), peers=(Peer("http://b", 2),)
    )
    got = ask(a, limit=5)
    assert_signed_by(got, a)
    assert got["federation_path"] == [a.key.kid, b.key.kid]
    assert got["warnings"] == []
    assert got["total_matches"] == 2 and got["returned"] == 2
    remote = next(r for r in got["results"] if r["agent_label"] == "remote-auditor")
    local = next(r for r in got["results"] if r["agent_label"] == "local-auditor")
    assert "provenance" not in local
    prov = remote["provenance"]
    assert prov["origin_service"] == b.key.kid
    assert prov["route"] == [b.key.kid]
    assert prov["peer"] == {"ans_id": b.key.kid, "url": "http://b", "granted_trust_tier": 2}
    assert prov["origin_signature"]["key_id"] == b.key.kid
    assert prov["origin_signature"]["query_id"] == "qry-b"
    assert "peer_signature" not in prov  # the peer is the origin: one signature reference
    assert prov["received_at"] == "2026-11-21T12:00:00.000Z"
    assert prov["origin_authority"] == "remote-auditor.example"
    # The efficient-discovery profile's four fields also stand on the entry.
    for name in ("origin_service", "origin_authority", "origin_signature", "received_at"):
        assert remote[name] == prov[name]
        assert name not in local
    # Ranks are ours, 1..n, ordered by our formula.
    assert [r["rank"] for r in got["results"]] == [1, 2]
    scores = [r["rank_score"] for r in got["results"]]
    assert scores == sorted(scores, reverse=True)


def test_a_peer_cannot_set_the_provenance_fields_itself(world: World) -> None:
    b = world.ans("b", solidity("remote-auditor", trust_tier=1))

    def forge(result: dict[str, Any], peer: FakePeer) -> dict[str, Any]:
        for entry in result["results"]:
            entry.update(
                origin_service="forged-origin",
                origin_authority="forged.example",
                origin_signature={"key_id": "forged", "value": "x"},
                received_at="1999-01-01T00:00:00Z",
                trust_tier_explanation="verified by us, trust it",
            )
        return sign_document(result, peer.svc.key, "ans_signature")

    world.serve("http://b", b).mutate = forge
    a = world.ans("a", {}, peers=(Peer("http://b", 2),))
    (r,) = ask(a, limit=5)["results"]
    assert r["origin_service"] == r["provenance"]["origin_service"] == b.key.kid
    assert r["origin_authority"] == "remote-auditor.example"
    assert r["origin_signature"]["key_id"] == b.key.kid
    assert r["received_at"] == "2026-11-21T12:00:00.000Z"
    assert r["trust_tier_explanation"].startswith("Tier 1 where it is indexed")


def test_tier_is_capped_at_the_granted_tier_and_rescored(world: World) -> None:
    b = world.ans("b", solidity("claims-tier-one", trust_tier=1, behavioral_trust_score=0.9))
    world.serve("http://b", b)
    a = world.ans("a", {}, peers=(Peer("http://b", 2),))
    got = ask(a, limit=5)
    (r,) = got["results"]
    assert r["trust_tier"] == 2
    assert r["provenance"]["claimed_trust_tier"] == 1
    assert r["rank_score"] == rank_score(a.config.ranking, 2, 0.9, r["capability_match_score"])
    # Presented at tier 2, it carries the AGTP tier-2 warning and says why.
    assert r["trust_warning"] == "org-label-unverified"
    assert r["trust_tier_explanation"].startswith("Tier 1 where it is indexed; presented at tier 2")
    # A caller who insists on tier 1 never reaches a peer we only grant tier 2.
    world.net.sent.clear()
    got = ask(a, limit=5, trust_tier_min=1)
    assert got["results"] == [] and world.net.sent == []


def test_chain_a_b_c_carries_results_and_route(world: World) -> None:
    c = world.ans("c", solidity("deep-auditor"))
    world.serve("http://c", c)
    b = world.ans("b", solidity("middle-auditor"), peers=(Peer("http://c", 2),))
    world.serve("http://b", b)
    a = world.ans("a", {}, peers=(Peer("http://b", 2),))
    got = ask(a, limit=5)
    assert sorted(labels(got)) == ["deep-auditor", "middle-auditor"]
    assert got["federation_path"][0] == a.key.kid
    assert set(got["federation_path"]) == {a.key.kid, b.key.kid, c.key.kid}
    deep = next(r for r in got["results"] if r["agent_label"] == "deep-auditor")
    assert deep["provenance"]["route"] == [b.key.kid, c.key.kid]
    assert deep["provenance"]["origin_service"] == c.key.kid
    assert deep["provenance"]["origin_signature"]["key_id"] == c.key.kid
    assert deep["provenance"]["peer_signature"]["key_id"] == b.key.kid
    # C saw the full path.
    assert world.net.peers["http://c"].discovers[0]["agtp-federation-path"] == (
        f"{a.key.kid}, {b.key.kid}"
    )


def test_hop_limit_stops_the_chain(world: World) -> None:
    one_hop = FederationSettings(max_hops=1, peer_timeout=0.5, deadline=0.8)
    c = world.ans("c", solidity("deep-auditor"))
    world.serve("http://c", c)
    b = world.ans("b", solidity("middle-auditor"), peers=(Peer("http://c", 2),), settings=one_hop)
    world.serve("http://b", b)
    a = world.ans("a", {}, peers=(Peer("http://b", 2),), settings=one_hop)
    got = ask(a, limit=5)
    assert labels(got) == ["middle-auditor"]
    assert world.net.peers["http://c"].discovers == []
    max0 = FederationSettings(max_hops=0)
    z = world.ans("z", {}, peers=(Peer("http://b", 2),), settings=max0)
    assert "federation_path" not in ask(z, limit=5)


def test_loop_between_two_servers_terminates(world: World) -> None:
    a = world.ans("a", solidity("alpha-auditor"), peers=(Peer("http://b", 2),))
    b = world.ans("b", solidity("beta-auditor"), peers=(Peer("http://a", 2),))
    fa, fb = world.serve("http://a", a), world.serve("http://b", b)
    got = ask(a, limit=5)
    assert sorted(labels(got)) == ["alpha-auditor", "beta-auditor"]
    assert len(fb.discovers) == 1  # a asked b once
    # b fetched a's key, saw a on the path and did not send the query back.
    assert fa.discovers == [] and fa.jwks_fetches == 1
    assert got["federation_path"] == [a.key.kid, b.key.kid]
    # Each agent appears once (a's own agent came back through b and lost to the local copy).
    assert len(got["results"]) == 2
    assert "provenance" not in next(
        r for r in got["results"] if r["agent_label"] == "alpha-auditor"
    )


def test_a_request_that_names_us_on_its_path_is_answered_locally(world: World) -> None:
    b = world.ans("b", solidity("beta-auditor"))
    world.serve("http://b", b)
    a = world.ans("a", solidity("alpha-auditor"), peers=(Peer("http://b", 2),))
    got = ask(a, limit=5, headers={"agtp-federation-path": f"someone-else, {a.key.kid}"})
    assert labels(got) == ["alpha-auditor"]
    assert world.net.sent == []


# -- degradation ---------------------------------------------------------------------------


def test_slow_peer_times_out_and_local_results_survive(world: World) -> None:
    b = world.ans("b", solidity("slow-auditor"))
    world.serve("http://b", b).delay = 5.0
    a = world.ans("a", solidity("local-auditor"), peers=(Peer("http://b", 2, timeout=0.2),))
    loop_started = datetime.now(UTC)
    got = ask(a, limit=5)
    assert (datetime.now(UTC) - loop_started).total_seconds() < 2.0
    assert labels(got) == ["local-auditor"]
    assert codes(got) == [("peer_timeout", "http://b")]
    assert "slow" not in got["warnings"][0]["message"]
    assert got["federation_path"] == [a.key.kid]
    assert_signed_by(got, a)
    (fwd,) = audit_events(a, "federation_forward")
    assert fwd["outcome"] == "peer_timeout" and fwd["peer"] == "http://b"
    (drop,) = audit_events(a, "federation_drop")
    assert drop["code"] == "peer_timeout"


def test_a_caller_that_goes_away_takes_its_peer_requests_with_it(world: World) -> None:
    b = world.ans("b", solidity("slow-auditor"))
    fake = world.serve("http://b", b)
    fake.delay = 50.0
    # Timeouts far beyond the waits below: only the caller going away can end b's work.
    patient = FederationSettings(peer_timeout=50.0, deadline=50.0, key_retry=5.0)
    a = world.ans("a", solidity("local-auditor"), peers=(Peer("http://b", 2),), settings=patient)

    async def go_away() -> None:
        asked = asyncio.ensure_future(a.discover_async(discover_request(a, limit=5)))
        await until(lambda: len(fake.discovers) == 1, "b to have the request")
        assert len(fake.discovers) == 1 and fake.cancelled == 0
        asked.cancel()  # e.g. the client closed its stream
        await asyncio.gather(asked, return_exceptions=True)
        # The forwarded request was abandoned, not left running until it times out
        # (checked before asyncio.run cancels whatever is left at its end).
        await until(lambda: fake.cancelled > 0, "b's work to be cancelled")
        assert fake.cancelled == 1

    asyncio.run(go_away())
    assert audit_events(a, "federation_forward") == []


def test_overall_deadline_bounds_the_fan_out(world: World) -> None:
    settings = FederationSettings(peer_timeout=5.0, deadline=0.3)
    slow1, slow2 = world.ans("s1", solidity("one")), world.ans("s2", solidity("two"))
    world.serve("http://s1", slow1).delay = 3.0
    world.serve("http://s2", slow2).delay = 3.0
    a = world.ans("a", {}, peers=(Peer("http://s1", 2), Peer("http://s2", 2)), settings=settings)
    started = datetime.now(UTC)
    got = ask(a, limit=5)
    assert (datetime.now(UTC) - started).total_seconds() < 1.5
    assert got["results"] == []
    assert codes(got) == [("peer_timeout", "http://s1"), ("peer_timeout", "http://s2")]


def test_down_peer_is_a_warning_and_its_key_failure_is_cached(world: World) -> None:
    a = world.ans("a", solidity("local-auditor"), peers=(Peer("http://down", 2),))
    got = ask(a, limit=5)
    assert labels(got) == ["local-auditor"]
    assert codes(got) == [("peer_key_unavailable", "http://down")]
    assert "connection refused" in got["warnings"][0]["message"]
    got = ask(a, limit=5)  # within key_retry: no new connection attempt
    assert codes(got) == [("peer_key_unavailable", "http://down")]
    assert world.net.sent == [("http://down", "GET")]
    world.mono[0] += 10.0  # past key_retry: try again
    ask(a, limit=5)
    assert world.net.sent == [("http://down", "GET")] * 2


# -- a peer that keeps failing is skipped for a while, then probed ------------------------

SKIPPING = FederationSettings(
    peer_timeout=0.5,
    deadline=0.8,
    key_retry=5.0,
    failures_before_skip=2,
    skip_seconds=5.0,
    max_skip_seconds=12.0,
)


def skipping_world(world: World, timeout: float = 0.5) -> tuple[AnsService, FakePeer]:
    b = world.ans("b", solidity("remote-auditor"))
    fake = world.serve("http://b", b)
    peer = Peer("http://b", 2, timeout=timeout)
    return world.ans("a", solidity("local-auditor"), peers=(peer,), settings=SKIPPING), fake


def discover_request(svc: AnsService, **params: Any) -> Any:
    h = {"agent-id": "agtp://o.example/agents/orch", "principal-id": "usr-1"}
    h["authority-scope"] = "discovery:query"
    body = orjson.dumps({"method": "DISCOVER", "parameters": {"intent": INTENT, **params}})
    return parse_discover(h, body, svc.limits)


def skip_periods(svc: AnsService) -> list[float]:
    return [e["skip_seconds"] for e in audit_events(svc, "federation_peer_skipped")]


def test_a_peer_that_keeps_timing_out_is_skipped_then_probed_and_restored(world: World) -> None:
    a, fake = skipping_world(world)
    fake.delay = 5.0
    for _ in range(2):
        assert codes(ask(a, limit=5)) == [("peer_timeout", "http://b")]
    assert len(fake.discovers) == 2
    got = ask(a, limit=5)  # skipped: answered at once, without asking b
    assert codes(got) == [("peer_skipped", "http://b")]
    assert (
        "skipped for 5.0s more after 2 consecutive failures (last: peer_timeout)"
        in (got["warnings"][0]["message"])
    )
    assert labels(got) == ["local-auditor"] and got["federation_path"] == [a.key.kid]
    assert_signed_by(got, a)
    assert len(fake.discovers) == 2
    (opened,) = audit_events(a, "federation_peer_skipped")
    assert opened["skip_seconds"] == 5.0 and opened["last_failure"] == "peer_timeout"
    assert opened["peer"] == "http://b" and opened["after_probe"] is False
    (drop,) = [d for d in audit_events(a, "federation_drop") if d["code"] == "peer_skipped"]
    assert drop["peer"] == "http://b" and drop["count"] == 1
    assert a.health()["federation"] == {"peers": 1, "skipped": 1}

    world.mono[0] += 5.0  # the period is over; b has recovered
    fake.delay = 0.0
    got = ask(a, limit=5)  # this query probes b
    assert codes(got) == [] and "remote-auditor" in labels(got)
    assert len(fake.discovers) == 3
    (restored,) = audit_events(a, "federation_peer_restored")
    assert restored["peer"] == "http://b"
    assert codes(ask(a, limit=5)) == [] and len(fake.discovers) == 4
    assert a.health()["federation"] == {"peers": 1, "skipped": 0}


def test_a_failed_probe_skips_the_peer_twice_as_long_up_to_the_cap(world: World) -> None:
    a, fake = skipping_world(world)
    fake.delay = 5.0
    for _ in range(2):
        ask(a, limit=5)
    world.mono[0] += 5.0
    assert codes(ask(a, limit=5)) == [("peer_timeout", "http://b")]  # the probe
    assert len(fake.discovers) == 3
    world.mono[0] += 9.9
    assert codes(ask(a, limit=5)) == [("peer_skipped", "http://b")]
    world.mono[0] += 0.1
    assert codes(ask(a, limit=5)) == [("peer_timeout", "http://b")]  # the next probe
    world.mono[0] += 12.0
    ask(a, limit=5)
    assert skip_periods(a) == [5.0, 10.0, 12.0, 12.0]
    assert [e["after_probe"] for e in audit_events(a, "federation_peer_skipped")] == [
        False,
        True,
        True,
        True,
    ]
    assert len(fake.discovers) == 5


def test_an_unreachable_peer_is_skipped_too(world: World, tmp_path: Path) -> None:
    b = world.ans("b", solidity("remote-auditor"))
    jwks = tmp_path / "b.jwks.json"  # a pinned key: nothing throttles the connection attempts
    jwks.write_bytes(orjson.dumps(b.jwks()))
    peer = Peer("http://gone", 2, key_source="jwks_file", jwks_file=jwks)
    a = world.ans("a", solidity("local-auditor"), peers=(peer,), settings=SKIPPING)
    for _ in range(2):
        assert codes(ask(a, limit=5)) == [("peer_unreachable", "http://gone")]
    assert codes(ask(a, limit=5)) == [("peer_skipped", "http://gone")]
    assert world.net.sent == [("http://gone", "DISCOVER")] * 2


def test_timeouts_under_a_callers_short_budget_do_not_count(world: World) -> None:
    """A caller choosing a tiny AGTP-Federation-Budget-Ms must not be able to
    get a peer skipped for everyone else."""
    settings = FederationSettings(peer_timeout=0.2, deadline=0.3, failures_before_skip=2)
    b = world.ans("b", solidity("remote-auditor"))
    world.serve("http://b", b).delay = 5.0
    a = world.ans("a", solidity("local-auditor"), peers=(Peer("http://b", 2),), settings=settings)
    hurried = {"agtp-federation-budget-ms": "200"}  # 0.14 s for the fan-out, under 0.2
    for _ in range(3):
        assert codes(ask(a, headers=hurried, limit=5)) == [("peer_timeout", "http://b")]
    assert skip_periods(a) == []
    for _ in range(2):  # our own timeout, in full: these count
        assert codes(ask(a, limit=5)) == [("peer_timeout", "http://b")]
    assert codes(ask(a, limit=5)) == [("peer_skipped", "http://b")]
    assert skip_periods(a) == [5.0]


def test_a_peer_that_answers_is_never_skipped_however_it_answers(world: World) -> None:
    a, fake = skipping_world(world)
    fake.delay = 5.0
    assert codes(ask(a, limit=5)) == [("peer_timeout", "http://b")]
    fake.delay = 0.0
    assert codes(ask(a, limit=5)) == []  # an answer: the count starts again
    fake.delay = 5.0
    assert codes(ask(a, limit=5)) == [("peer_timeout", "http://b")]
    fake.delay = 0.0

    def tamper(result: dict[str, Any], peer: FakePeer) -> dict[str, Any]:
        result["results"][0]["behavioral_trust_score"] = 1.0
        return result

    fake.mutate = tamper  # misbehaving, but up: dropped every time, never skipped
    for _ in range(3):
        assert codes(ask(a, limit=5)) == [("peer_signature_invalid", "http://b")]
    assert skip_periods(a) == []
    assert len(fake.discovers) == 6


def test_zero_failures_before_skip_never_skips(world: World) -> None:
    b = world.ans("b", solidity("remote-auditor"))
    world.serve("http://b", b).delay = 5.0
    settings = FederationSettings(peer_timeout=0.05, deadline=0.8, failures_before_skip=0)
    a = world.ans("a", solidity("local-auditor"), peers=(Peer("http://b", 2),), settings=settings)
    for _ in range(4):
        assert codes(ask(a, limit=5)) == [("peer_timeout", "http://b")]
    assert skip_periods(a) == []


def test_while_one_query_probes_the_others_skip_and_a_cancelled_probe_decides_nothing(
    world: World,
) -> None:
    a, fake = skipping_world(world, timeout=0.4)
    fake.delay = 5.0
    for _ in range(2):
        ask(a, limit=5)
    world.mono[0] += 5.0
    fake.delay = 0.0

    async def concurrently() -> tuple[dict[str, Any], dict[str, Any]]:
        fake.hold = asyncio.Event()  # b keeps the probe until the other query is done
        probe = asyncio.ensure_future(a.discover_async(discover_request(a, limit=5)))
        await until(lambda: len(fake.discovers) == 3, "the probe to reach b")
        other = await a.discover_async(discover_request(a, limit=5))
        fake.hold.set()
        fake.hold = None
        return await probe, other

    probed, other = asyncio.run(concurrently())
    assert codes(other) == [("peer_skipped", "http://b")]
    assert "another query is probing it" in other["warnings"][0]["message"]
    assert codes(probed) == [] and "remote-auditor" in labels(probed)
    assert len(fake.discovers) == 3

    fake.delay = 5.0  # b hangs again: skipped again after two failures
    for _ in range(2):
        ask(a, limit=5)
    world.mono[0] += 5.0

    async def cancelled_probe() -> dict[str, Any]:
        probe = asyncio.ensure_future(a.discover_async(discover_request(a, limit=5)))
        await until(lambda: len(fake.discovers) == 6, "the probe to reach b")
        probe.cancel()  # the caller went away mid-probe
        await asyncio.gather(probe, return_exceptions=True)
        fake.delay = 0.0
        return await a.discover_async(discover_request(a, limit=5))

    after = asyncio.run(cancelled_probe())
    assert codes(after) == []  # it probed again at once, and b answered
    assert len(fake.discovers) == 7


def test_tampered_answer_is_dropped(world: World) -> None:
    b = world.ans("b", solidity("remote-auditor"))

    def tamper(result: dict[str, Any], peer: FakePeer) -> dict[str, Any]:
        result["results"][0]["behavioral_trust_score"] = 1.0
        return result

    world.serve("http://b", b).mutate = tamper
    a = world.ans("a", solidity("local-auditor"), peers=(Peer("http://b", 2),))
    got = ask(a, limit=5)
    assert labels(got) == ["local-auditor"]
    assert codes(got) == [("peer_signature_invalid", "http://b")]
    assert_signed_by(got, a)


def test_answer_signed_by_another_key_is_dropped(world: World) -> None:
    b = world.ans("b", solidity("remote-auditor"))
    impostor = SigningKey.generate()

    def resign(result: dict[str, Any], peer: FakePeer) -> dict[str, Any]:
        return sign_document(result, impostor, "ans_signature")

    world.serve("http://b", b).mutate = resign
    a = world.ans("a", {}, peers=(Peer("http://b", 2),))
    got = ask(a, limit=5)
    assert got["results"] == []
    assert codes(got) == [("peer_signature_invalid", "http://b")]
    # The unknown kid made us refetch the key once (rotation), and it still failed.
    assert world.net.peers["http://b"].jwks_fetches == 1  # refresh honoured only after key_retry


def test_unsigned_answer_is_dropped(world: World) -> None:
    b = world.ans("b", solidity("remote-auditor"))

    def strip(result: dict[str, Any], peer: FakePeer) -> dict[str, Any]:
        result.pop("ans_signature")
        return result

    world.serve("http://b", b).mutate = strip
    a = world.ans("a", {}, peers=(Peer("http://b", 2),))
    assert codes(ask(a, limit=5)) == [("peer_signature_invalid", "http://b")]


def test_rotated_peer_key_is_refetched_once(world: World) -> None:
    b = world.ans("b", solidity("remote-auditor"))
    fake = world.serve("http://b", b)
    a = world.ans("a", {}, peers=(Peer("http://b", 2),))
    assert labels(ask(a, limit=5)) == ["remote-auditor"]
    b.key = SigningKey.generate()  # the peer rotates its key
    world.mono[0] += 6.0  # refresh allowed once key_retry has passed
    got = ask(a, limit=5)
    assert labels(got) == ["remote-auditor"] and got["warnings"] == []
    assert fake.jwks_fetches == 2


def test_replayed_answer_for_another_query_is_dropped(world: World) -> None:
    b = world.ans("b", solidity("remote-auditor"))

    def replay(result: dict[str, Any], peer: FakePeer) -> dict[str, Any]:
        result["query_digest"] = "0" * 64
        return sign_document(result, peer.svc.key, "ans_signature")

    world.serve("http://b", b).mutate = replay
    a = world.ans("a", {}, peers=(Peer("http://b", 2),))
    assert codes(ask(a, limit=5)) == [("peer_digest_mismatch", "http://b")]


def test_stale_answer_is_dropped(world: World) -> None:
    b = world.ans("b", solidity("remote-auditor"), clock=lambda: NOW - timedelta(hours=1))
    world.serve("http://b", b)
    a = world.ans("a", {}, peers=(Peer("http://b", 2),))
    got = ask(a, limit=5)
    assert codes(got) == [("peer_result_stale", "http://b")]
    assert "3600s" in got["warnings"][0]["message"]


def test_peer_ignoring_the_trust_floor_has_those_results_dropped(world: World) -> None:
    b = world.ans(
        "b",
        {
            **solidity("good-auditor", behavioral_trust_score=0.95),
            **solidity("shaky-auditor", behavioral_trust_score=0.5),
        },
    )

    def relax(params: dict[str, Any]) -> dict[str, Any]:
        params.pop("behavioral_trust_min", None)
        return params

    world.serve("http://b", b).relax = relax
    a = world.ans("a", {}, peers=(Peer("http://b", 2),))
    got = ask(a, limit=5, behavioral_trust_min=0.9)
    assert labels(got) == ["good-auditor"]
    assert codes(got) == [("peer_threshold_violation", "http://b")]
    assert "0.5 < 0.9" in got["warnings"][0]["message"]
    drops = audit_events(a, "federation_drop")
    assert [(d["code"], d["count"]) for d in drops] == [("peer_threshold_violation", 1)]


def test_peer_results_pass_our_relevance_gate(world: World) -> None:
    """A peer whose gate admits everything must not re-admit unrelated agents here."""
    b = world.ans(
        "b",
        {
            **solidity("peer-auditor"),
            "perfect-poet": {
                "org_domain": "poems.example",
                "job_description": "Writes rhyming poems and song lyrics for weddings.",
                "trust_tier": 1,
                "behavioral_trust_score": 1.0,
            },
        },
        min_relevance=0.0,
        min_capability_match=0.0,
    )
    world.serve("http://b", b)
    assert "perfect-poet" in labels(ask(b, intent=INTENT, limit=5))  # the peer admits it
    a = world.ans("a", {}, peers=(Peer("http://b", 2),))
    got = ask(a, intent=INTENT, limit=5)
    assert labels(got) == ["peer-auditor"]
    assert got["total_matches"] == 1
    assert all(r["capability_match_score"] >= a.relevance.threshold for r in got["results"])
    assert got["relevance"]["gate"] == "calibrated"
    drops = audit_events(a, "federation_drop")
    assert ("below_capability_floor", 1) in [(d["code"], d["count"]) for d in drops]


def test_merged_set_passes_our_shortlist(world: World) -> None:
    """Peer results above the threshold but below the merged set's shortlist
    (ceil(0.5 x limit) best capability_match_scores) are not matches here."""
    b = world.ans(
        "b",
        {**solidity("auditor-a"), **solidity("auditor-b"), **solidity("auditor-c")},
        relevance_shortlist=0.0,  # the peer keeps no shortlist of its own
    )

    def spread(result: dict[str, Any], peer: FakePeer) -> dict[str, Any]:
        for item, cms in zip(result["results"], (0.9, 0.3, 0.02), strict=False):
            item["capability_match_score"] = cms
        return sign_document(result, peer.svc.key, "ans_signature")

    world.serve("http://b", b).mutate = spread
    a = world.ans("a", {}, peers=(Peer("http://b", 2),))
    two = ask(a, intent=INTENT, limit=2)  # shortlist of 1
    assert [r["capability_match_score"] for r in two["results"]] == [0.9]
    assert two["total_matches"] == 1 and two["relevance"]["shortlist_size"] == 1
    four = ask(a, intent=INTENT, limit=4)  # shortlist of 2
    assert [r["capability_match_score"] for r in four["results"]] == [0.9, 0.3]


def test_peer_ignoring_the_tier_floor_and_zone(world: World) -> None:
    b = world.ans(
        "b",
        {
            **solidity("finance-auditor", governance_zone="zone:finance"),
            **solidity("public-auditor", governance_zone="zone:public"),
            **solidity("lab-auditor", governance_zone="zone:finance", trust_tier=3),
        },
    )

    def relax(params: dict[str, Any]) -> dict[str, Any]:
        params.pop("governance_zone", None)
        params["trust_tier_min"] = 3
        return params

    world.serve("http://b", b).relax = relax
    a = world.ans("a", {}, peers=(Peer("http://b", 2),))
    got = ask(a, limit=5, governance_zone="zone:finance")
    assert labels(got) == ["finance-auditor"]
    assert codes(got) == [("peer_threshold_violation", "http://b")]
    assert "2 result(s)" in got["warnings"][0]["message"]


def test_peer_error_status_is_a_warning(world: World) -> None:
    b = world.ans("b", solidity("remote-auditor"))
    world.serve("http://b", b)
    a = world.ans("a", solidity("local-auditor"), peers=(Peer("http://b", 2),))

    def refuse(result: dict[str, Any], peer: FakePeer) -> dict[str, Any]:
        raise ScopeViolation("the peer's own policy refuses this caller")

    world.net.peers["http://b"].mutate = refuse
    got = ask(a, limit=5)
    assert labels(got) == ["local-auditor"]
    assert codes(got) == [("peer_error", "http://b")]
    assert "451" in got["warnings"][0]["message"]


def test_over_limit_and_malformed_entries(world: World) -> None:
    b = world.ans("b", {**solidity("one-auditor"), **solidity("two-auditor")})

    def pad(result: dict[str, Any], peer: FakePeer) -> dict[str, Any]:
        result["results"] = [
            {"canonical_id": "x", "trust_tier": 7},
            *result["results"],
            dict(result["results"][0], canonical_id="e" * 64),
        ]
        return sign_document(result, peer.svc.key, "ans_signature")

    world.serve("http://b", b).mutate = pad
    a = world.ans("a", {}, peers=(Peer("http://b", 2),))
    got = ask(a, limit=3)
    assert sorted(codes(got)) == [
        ("peer_entry_invalid", "http://b"),
        ("peer_over_limit", "http://b"),
    ]
    assert sorted(labels(got)) == ["one-auditor", "two-auditor"]


JUNK: tuple[Any, ...] = (
    None,
    True,
    0,
    3,
    -1,
    0.5,
    1e-07,
    "",
    "x" * 600,
    "é",
    [],
    {},
    [1, [2, {"a": None}]],
    {"é": 1.5},
    {"origin_service": "nope", "route": [1], "origin_signature": "s"},
)
ENTRY_FIELDS = (
    "canonical_id",
    "agent_label",
    "manifest_uri",
    "org_domain",
    "governance_zone",
    "trust_tier",
    "behavioral_trust_score",
    "capability_match_score",
    "provenance",
    "rank",
    "rank_score",
    "routing_reason",
)


def scramble(result: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """One to three random, structurally hostile edits of a peer's result."""
    entries = result["results"]
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(8)
        victim = rng.choice(entries) if entries else {}
        if kind == 0 and isinstance(victim, dict):
            victim[rng.choice(ENTRY_FIELDS)] = rng.choice(JUNK)
        elif kind == 1 and isinstance(victim, dict) and victim:
            del victim[rng.choice(sorted(victim))]
        elif kind == 2 and entries:
            entries.append(dict(rng.choice(entries)))  # the same agent twice
        elif kind == 3 and isinstance(victim, dict):
            victim.update({f"extra_{i}": rng.choice(JUNK) for i in range(rng.choice((3, 70)))})
        elif kind == 4 and entries:
            entries[rng.randrange(len(entries))] = rng.choice(JUNK)
        elif kind == 5:
            result[rng.choice(("federation_path", "warnings", "total_matches"))] = rng.choice(JUNK)
        elif kind == 6 and isinstance(victim, dict):  # numbers out of their ranges
            name = rng.choice(("trust_tier", "behavioral_trust_score", "capability_match_score"))
            victim[name] = rng.choice((-1, -0.5, 0, 1.5, 4, 7, 1e300))
        else:
            choice = rng.choice(([], entries * 2, entries[:1], "results", None))
            result["results"] = choice
            if not isinstance(choice, list):
                break
            entries = choice
    return result


def test_signed_but_hostile_peer_answers_never_break_the_merge(world: World) -> None:
    """A peer holding a valid key can sign anything. Seeded random edits of its
    answers, re-signed, must always give a signed answer whose every entry is
    well formed, with the peer's problems as warnings -- never an exception."""
    b = world.ans("b", {**solidity("one-auditor"), **solidity("two-auditor")})
    rng = random.Random(20261124)

    def hostile(result: dict[str, Any], peer: FakePeer) -> dict[str, Any]:
        return sign_document(scramble(result, rng), peer.svc.key, "ans_signature")

    world.serve("http://b", b).mutate = hostile
    a = world.ans("a", solidity("local-auditor"), peers=(Peer("http://b", 2),))
    seen_codes: set[str] = set()
    accepted = 0
    for _ in range(150):
        got = ask(a, limit=4)
        assert_signed_by(got, a)
        assert got["federation_path"][0] == a.key.kid
        assert got["returned"] == len(got["results"]) <= 4
        ids = [r["canonical_id"] for r in got["results"]]
        assert len(ids) == len(set(ids))
        for rank, r in enumerate(got["results"], start=1):
            assert r["rank"] == rank and r["trust_tier"] in (1, 2, 3)
            for name in ("behavioral_trust_score", "capability_match_score", "rank_score"):
                assert isinstance(r[name], float | int) and 0.0 <= r[name] <= 1.0
            if "provenance" not in r:
                assert r["agent_label"] == "local-auditor"
                continue
            accepted += 1
            assert r["trust_tier"] >= 2  # never better than the tier granted to b
            assert r["provenance"]["peer"]["ans_id"] == b.key.kid
            assert r["provenance"]["route"] == [b.key.kid]
        for w in got["warnings"]:
            assert w["code"] in WARNING_CODES and w["peer"] == "http://b"
            seen_codes.add(w["code"])
    # The edits did reach the checks (and some answers still got through).
    assert {"peer_entry_invalid", "peer_bad_response"} <= seen_codes
    assert accepted > 0


# -- merge -----------------------------------------------------------------------------------


def test_local_record_wins_and_duplicates_across_peers_collapse(world: World) -> None:
    shared = solidity("shared-auditor", behavioral_trust_score=0.8)
    b = world.ans("b", {**shared, **solidity("b-only")})
    c = world.ans(
        "c", {**solidity("shared-auditor", behavioral_trust_score=0.8), **solidity("c-only")}
    )
    world.serve("http://b", b)
    world.serve("http://c", c)
    a = world.ans("a", {}, peers=(Peer("http://b", 3), Peer("http://c", 2)))
    got = ask(a, limit=10, trust_tier_min=3)
    assert sorted(labels(got)) == ["b-only", "c-only", "shared-auditor"]
    shared_entry = next(r for r in got["results"] if r["agent_label"] == "shared-auditor")
    # Same agent from two peers: the better effective tier (c, granted 2) wins.
    assert shared_entry["provenance"]["peer"]["url"] == "http://c"
    assert shared_entry["trust_tier"] == 2
    assert got["total_matches"] == 3
    # Now the agent is also indexed locally: the local record wins outright.
    d = world.ans("d", shared, peers=(Peer("http://b", 3), Peer("http://c", 2)))
    got = ask(d, limit=10, trust_tier_min=3)
    mine = [r for r in got["results"] if r["agent_label"] == "shared-auditor"]
    assert len(mine) == 1 and "provenance" not in mine[0]


def test_restricted_zone_results_from_peers_never_leak(world: World) -> None:
    b = world.ans("b", solidity("vault-auditor", governance_zone="zone:vault"))
    world.serve("http://b", b)
    a = world.ans("a", {}, peers=(Peer("http://b", 2),), restricted=("zone:vault",))
    got = ask(a, limit=5)
    assert got["results"] == [] and got["warnings"] == []  # silent: a warning would leak it
    (drop,) = audit_events(a, "federation_drop")
    assert drop["code"] == "restricted_zone"
    got = ask(a, scope="discovery:query zone:vault", limit=5)
    assert labels(got) == ["vault-auditor"]


def test_peer_zones_limit_what_we_ask_and_accept(world: World) -> None:
    b = world.ans(
        "b",
        {
            **solidity("fin-auditor", governance_zone="zone:finance"),
            **solidity("pub-auditor", governance_zone="zone:public"),
        },
    )
    world.serve("http://b", b)
    a = world.ans("a", {}, peers=(Peer("http://b", 2, zones=("zone:finance",)),))
    got = ask(a, limit=5)
    assert labels(got) == ["fin-auditor"]
    assert codes(got) == [("peer_zone_not_accepted", "http://b")]
    world.net.sent.clear()
    got = ask(a, limit=5, governance_zone="zone:public")
    assert world.net.sent == [] and got["results"] == []


def test_key_from_the_peer_manifest_via_describe(world: World) -> None:
    b = world.ans("b", solidity("remote-auditor"))
    fake = world.serve("http://b", b)
    a = world.ans("a", {}, peers=(Peer("http://b", 2, key_source="describe"),))
    assert labels(ask(a, limit=5)) == ["remote-auditor"]
    assert fake.jwks_fetches == 0
    assert ("http://b", "DESCRIBE") in world.net.sent


def test_key_from_a_jwks_file(world: World, tmp_path: Path) -> None:
    b = world.ans("b", solidity("remote-auditor"))
    world.serve("http://b", b)
    jwks = tmp_path / "b.jwks.json"
    jwks.write_bytes(orjson.dumps(b.jwks()))
    a = world.ans("a", {}, peers=(Peer("http://b", 2, key_source="jwks_file", jwks_file=jwks),))
    assert labels(ask(a, limit=5)) == ["remote-auditor"]
    # A file holding someone else's key: every answer from b fails verification.
    jwks.write_bytes(orjson.dumps({"keys": [SigningKey.generate().public.jwk()]}))
    e = world.ans("e", {}, peers=(Peer("http://b", 2, key_source="jwks_file", jwks_file=jwks),))
    assert codes(ask(e, limit=5)) == [("peer_signature_invalid", "http://b")]


def test_federated_result_verifies_with_a_plain_jws_verifier(world: World) -> None:
    """The merged answer is one ordinary ans_signature over the JCS of the result."""
    b = world.ans("b", solidity("remote-auditor"))
    world.serve("http://b", b)
    a = world.ans("a", {}, peers=(Peer("http://b", 2),))
    got = ask(a, limit=5)
    body = {k: v for k, v in got.items() if k != "ans_signature"}
    again = signature_object(canonicalize(body), a.key)
    assert again["key_id"] == got["ans_signature"]["key_id"] == a.key.kid
    got["warnings"].append({"code": "x", "peer": "y", "message": "forged"})
    with pytest.raises(AgtpError):
        verify_document(got, TrustedKeys([a.key.public]), "ans_signature")


def test_forward_decided_after_matching_when_the_gates_alone_cannot_tell(world: World) -> None:
    b = world.ans("b", solidity("remote-auditor"))
    world.serve("http://b", b)
    a = world.ans(
        "a",
        {
            **solidity("trusted-auditor", behavioral_trust_score=0.95),
            **solidity("shaky-one", behavioral_trust_score=0.5),
            **solidity("shaky-two", behavioral_trust_score=0.5),
        },
        peers=(Peer("http://b", 2),),
    )
    # Three local agents could pass zone and tier, so the decision needs the full
    # local answer: one passes the behavioral floor, fewer than limit=2 -> forward.
    got = ask(a, limit=2, behavioral_trust_min=0.9)
    assert sorted(labels(got)) == ["remote-auditor", "trusted-auditor"]
    assert world.net.sent == [("http://b", "GET"), ("http://b", "DISCOVER")]
    # Two pass locally: no forward at all.
    world.net.sent.clear()
    got = ask(a, limit=1, behavioral_trust_min=0.9)
    assert labels(got) == ["trusted-auditor"] and world.net.sent == []


def test_a_451_or_453_is_never_forwarded(world: World) -> None:
    b = world.ans("b", solidity("remote-auditor"))
    world.serve("http://b", b)
    a = world.ans("a", {}, peers=(Peer("http://b", 2),), restricted=("zone:vault",))
    with pytest.raises(AgtpError) as info:
        ask(a, scope="documents:read", limit=5)
    assert info.value.status == 451
    with pytest.raises(AgtpError) as info:
        ask(a, limit=5, governance_zone="zone:vault")
    assert info.value.status == 453
    assert world.net.sent == []


# -- routing alternatives (preferred_agent) ----------------------------------------------------


def vyper(**kw: Any) -> dict[str, dict[str, Any]]:
    spec = {
        "org_domain": "vyper.example",
        "behavioral_trust_score": 0.6,
        "job_description": "vyper-auditor: audits Vyper smart contracts for reentrancy bugs.",
        **kw,
    }
    return {"vyper-auditor": spec}


def test_routing_position_stays_first_when_federated_entries_merge(world: World) -> None:
    # The peer knows the preferred agent too, marks it at capacity and answers
    # with its own alternative (routing fields and all).
    b = world.ans(
        "b", {**vyper(), **solidity("remote-auditor", trust_tier=1, behavioral_trust_score=0.99)}
    )
    world.serve("http://b", b)
    a = world.ans(
        "a",
        {**vyper(), **solidity("local-auditor", behavioral_trust_score=0.7)},
        peers=(Peer("http://b", 1),),
    )
    preferred = next(iter(a.index.registry))
    assert a.store.get(preferred).manifest["agent_label"] == "vyper-auditor"
    a.mark_availability(preferred, "at_capacity")
    b.mark_availability(preferred, "at_capacity")
    got = ask(a, limit=5, preferred_agent=preferred)
    assert_signed_by(got, a)
    assert got["federation_path"] == [a.key.kid, b.key.kid]
    # remote-auditor ranks higher, but the routing position is ours and stays first.
    assert labels(got) == ["local-auditor", "remote-auditor"]
    first, remote = got["results"]
    assert remote["rank_score"] > first["rank_score"]
    assert first["routing_reason"] == "at_capacity" and first["alternative_to"] == preferred
    assert got["routing"]["alternative"] == first["canonical_id"]
    # The peer's own routing marks are not kept: only results[0] carries them.
    assert not {"routing_reason", "equivalent_confidence", "alternative_to"} & set(remote)
    assert [r["rank"] for r in got["results"]] == [1, 2]
    assert got["total_matches"] == 2


def test_preferred_agent_unknown_here_never_comes_back_from_a_peer(world: World) -> None:
    b = world.ans("b", {**vyper(), **solidity("remote-auditor")})
    world.serve("http://b", b)
    a = world.ans("a", solidity("local-auditor"), peers=(Peer("http://b", 2),))
    preferred = next(
        c for c in b.index.registry if b.store.get(c).manifest["agent_label"] == "vyper-auditor"
    )
    plain = ask(a, limit=5)
    assert sorted(labels(plain)) == ["local-auditor", "remote-auditor", "vyper-auditor"]
    # Routing is decided on this ANS's index: the preferred agent appears at
    # the routing position or nowhere, so the peer's copy is not merged.
    got = ask(a, limit=5, preferred_agent=preferred)
    assert got["routing"] == {
        "preferred_agent": preferred,
        "available": False,
        "routing_reason": "not_indexed",
    }
    assert sorted(labels(got)) == ["local-auditor", "remote-auditor"]
    assert_signed_by(got, a)


@pytest.mark.parametrize(
    ("status", "body", "code", "said"),
    [
        (502, b"<html><body>Bad Gateway</body></html>", "peer_error", "peer answered 502"),
        (503, b"", "peer_error", "peer answered 503"),
        (500, b"[1, 2]", "peer_error", "peer answered 500"),
        (451, b'{"error": {"code": "scope_violation"}}', "peer_error", "451 scope_violation"),
        (200, b"<html></html>", "peer_bad_response", "not strict JSON"),
        (200, b"[1]", "peer_bad_response", "not a JSON object"),
        (200, b'{"status": 200}', "peer_bad_response", "no result object"),
    ],
)
def test_a_peer_reply_is_judged_by_its_status_first(
    status: int, body: bytes, code: str, said: str
) -> None:
    """A proxy's HTML 502 is the peer's error (peer_error), not a bad answer."""
    from ans.federation.transport import PeerReply
    from ans.federation.verify import PeerRejected, parse_reply

    with pytest.raises(PeerRejected) as exc:
        parse_reply(PeerReply(status, body), 1 << 20)
    assert exc.value.code == code and said in exc.value.message
