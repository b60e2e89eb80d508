"""Index freshness without a network: a real AnsService (store, matcher,
audit, signing key) driven round by round through FreshnessRunner.run_once
with an explicit clock and an in-memory transport that answers, fails or
times out on command."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from ans.federation.transport import PeerReply, PeerTimeout, PeerUnreachable
from ans.governance.audit import AuditLog, verify_chain
from ans.governance.keys import SigningKey, TrustedKeys
from ans.governance.signing import verify_document
from ans.protocol.messages import ActivateRequest, Identity, Limits, parse_discover
from ans.protocol.scope import parse_authority_scope

from ans.config import Config, ConfigError, load
from ans.freshness_policy import (
    EndpointError,
    FreshnessSchedule,
    FreshnessSettings,
    agent_endpoint,
    availability_from_status,
)
from ans.freshness_runner import FreshnessRunner
from ans.matcher import CapabilityIndex
from ans.outbox import DEAD, DELIVERED, PENDING, Outbox, WebhookDelivery, backoff
from ans.service import AnsService
from ans.store import SQLiteStore

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
GOV = Identity(
    "agtp://gov.example/agents/platform", "gov", parse_authority_scope("discovery:register")
)
INTERVAL = 100.0  # the refresh interval of these tests; round k runs at k * INTERVAL
SETTINGS = FreshnessSettings(
    interval=INTERVAL, retry_interval=INTERVAL, status_interval=0, scheme="https", timeout=1.0
)
TRANSLATION = {
    "supported_methods": ["QUERY"],
    "modalities": ["text"],
    "tools": ["translate_text"],
    "tags": ["translation"],
}
KUBERNETES = {
    "supported_methods": ["QUERY", "EXECUTE"],
    "modalities": ["text"],
    "tools": [
        {
            "name": "node_pool_autoscaler",
            "description": "Autoscale Kubernetes cluster node pools from pod pressure",
        }
    ],
    "tags": ["kubernetes", "autoscaling"],
    "examples": [{"id": "k1", "text": "Scale my Kubernetes node pool when pods are pending"}],
}
K8S_INTENT = "autoscale the node pools of a Kubernetes cluster"


class FakeAgents:
    """In-memory transport: per (method, url) a list of scripted answers; the
    last one repeats. An answer is a PeerReply, an exception, or a dict (a
    200 JSON body)."""

    def __init__(self) -> None:
        self.script: dict[tuple[str, str], list[Any]] = {}
        self.calls: list[tuple[str, str, Mapping[str, str], bytes]] = []
        self.inflight = 0
        self.max_inflight = 0
        self.delay = 0.0

    def on(self, method: str, url: str, *answers: Any) -> None:
        self.script[(method, url)] = list(answers)

    async def request(
        self,
        origin: str,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout: float,
        *,
        cacert: Path | None = None,
        prior_knowledge: bool | None = None,
    ) -> PeerReply:
        assert url.startswith(origin)
        self.calls.append((method, url, dict(headers), body))
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            answers = self.script.get((method, url))
            if not answers:
                raise PeerUnreachable("cannot connect: nobody there")
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
            if isinstance(answer, Exception):
                raise answer
            if isinstance(answer, dict):
                return PeerReply(200, orjson.dumps(answer))
            assert isinstance(answer, PeerReply)
            return answer
        finally:
            self.inflight -= 1

    async def aclose(self) -> None:
        pass

    def count(self, method: str, url: str) -> int:
        return sum(1 for m, u, _, _ in self.calls if (m, u) == (method, url))


class CountingIndex(CapabilityIndex):
    def __init__(self, embedder: Any) -> None:
        super().__init__(embedder)
        self.embedded: list[str] = []

    def embed_profile(self, profile: Any) -> Any:
        self.embedded.append(profile.canonical_id)
        return super().embed_profile(profile)


def describe_ok(caps: dict[str, Any]) -> dict[str, Any]:
    return {"status": 200, "task_id": "t", "result": caps}


def status_doc(**kw: Any) -> dict[str, Any]:
    return {"document_type": "agtp-status", "lifecycle_state": "Active", **kw}


class World:
    def __init__(
        self,
        tmp: Path,
        embedder: Any,
        gov_key: SigningKey,
        make_manifest: Callable[..., dict[str, Any]],
        settings: FreshnessSettings,
    ) -> None:
        self.tmp = tmp
        self.embedder = embedder
        self.gov_key = gov_key
        self.make_manifest = make_manifest
        self.settings = settings
        self.wall = [NOW.timestamp()]
        self.svc = self.service()
        self.agents = FakeAgents()
        self.outbox = Outbox(tmp / "outbox.sqlite3")
        ids = iter(f"evt-{n}" for n in range(1000))
        self.runner = FreshnessRunner(
            self.svc,
            settings,
            self.agents,
            self.outbox,
            monotonic=lambda: 0.0,
            new_event_id=lambda: next(ids),
        )
        self.ids: dict[str, str] = {}

    def service(self) -> AnsService:
        cfg = Config(data_dir=self.tmp, agent_id="agtp://ans.example/agents/ans")
        return AnsService(
            config=cfg,
            store=SQLiteStore(self.tmp / "registry.sqlite3"),
            matcher=CountingIndex(self.embedder),
            signing_key=SigningKey.load_or_create(self.tmp / "ans-signing-key.pem"),
            governance_keys=TrustedKeys([self.gov_key.public]),
            audit=AuditLog(self.tmp / "audit.jsonl", lambda: NOW),
            clock=lambda: datetime.fromtimestamp(self.wall[0], UTC),
        )

    def activate(self, label: str, caps: dict[str, Any] | None = None, **kw: Any) -> str:
        kw.setdefault("job_description", f"The {label} agent.")
        manifest = self.make_manifest(label, **kw)
        self.svc.activate(ActivateRequest(GOV, f"t-{label}", manifest, caps or TRANSLATION))
        self.ids[label] = manifest["canonical_id"]
        return str(manifest["canonical_id"])

    def url(self, label: str) -> str:
        return f"https://agtp.acme.example/agents/{label}"

    def round(self, k: int) -> Any:
        """Round k at time k * INTERVAL (round 0 only adopts the agents: their first
        DESCRIBE is due between one and two intervals later)."""
        return asyncio.run(self.runner.run_once(k * INTERVAL))

    def indexed(self, label: str) -> bool:
        return self.ids[label] in self.svc.indexed_ids()

    def audit(self, event: str) -> list[dict[str, Any]]:
        lines = (self.tmp / "audit.jsonl").read_bytes().splitlines()
        return [r for r in map(orjson.loads, lines) if r["event"] == event]

    def discover(self, intent: str | None = None, **params: Any) -> dict[str, Any]:
        headers = {
            "agent-id": "agtp://o.example/agents/orch",
            "principal-id": "usr-1",
            "authority-scope": "discovery:query",
        }
        if intent is not None:
            params["intent"] = intent
        body = orjson.dumps({"method": "DISCOVER", "parameters": params})
        return self.svc.discover(parse_discover(headers, body, Limits()))

    def close(self) -> None:
        self.outbox.close()
        self.svc.audit.close()
        self.svc.store.close()


@pytest.fixture
def make_world(
    tmp_path: Path, embedder: Any, gov_key: SigningKey, make_manifest: Any
) -> Iterator[Callable[..., World]]:
    made: list[World] = []

    def make(settings: FreshnessSettings = SETTINGS) -> World:
        d = tmp_path / f"w{len(made)}"
        d.mkdir()
        w = World(d, embedder, gov_key, make_manifest, settings)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()


# -- three strikes ---------------------------------------------------------------------------


def test_two_failures_keep_the_agent_the_third_consecutive_removes_it(make_world: Any) -> None:
    w = make_world()
    cid = w.activate("flaky")
    w.activate("steady")
    w.agents.on("DESCRIBE", w.url("steady"), describe_ok(TRANSLATION))
    w.agents.on("DESCRIBE", w.url("flaky"), PeerUnreachable("cannot connect: refused"))
    assert w.round(0).described == []  # adopted, not yet due
    r1 = w.round(2)
    assert sorted(r1.described) == sorted(w.ids.values())
    assert cid in r1.failed and w.indexed("flaky")
    r2 = w.round(3)
    assert cid in r2.failed and r2.removed == [] and w.indexed("flaky")
    assert w.audit("freshness_removal") == []
    r3 = w.round(4)
    assert r3.removed == [cid]
    assert not w.indexed("flaky") and w.indexed("steady")
    assert [r["agent_label"] for r in w.discover()["results"]] == ["steady"]
    (rec,) = w.audit("freshness_removal")
    assert rec["canonical_id"] == cid and rec["failures"] == 3
    assert rec["reason"] == "describe_failed" and "refused" in rec["last_error"]
    assert rec["event_id"] == "evt-0"
    assert verify_chain((w.tmp / "audit.jsonl").read_bytes().splitlines()) is None
    # Exactly three DESCRIBEs were sent to it; a removed agent is not asked again.
    w.round(5)
    w.round(6)
    assert w.agents.count("DESCRIBE", w.url("flaky")) == 3
    assert w.agents.count("DESCRIBE", w.url("steady")) == 5
    # The store says Removed, so a restart does not bring it back.
    assert w.svc.store.get(cid).lifecycle_state == "Removed"
    fresh = w.service()
    assert fresh.load() == 1 and cid not in fresh.indexed_ids()
    fresh.audit.close()
    fresh.store.close()


def test_a_success_resets_the_count(make_world: Any) -> None:
    w = make_world()
    cid = w.activate("wobbly")
    fail = PeerTimeout("no answer within 1.000s")
    w.agents.on("DESCRIBE", w.url("wobbly"), fail, fail, describe_ok(TRANSLATION), fail, fail, fail)
    w.round(0)
    for k in (2, 3, 4, 5, 6):  # fail, fail, ok, fail, fail
        assert w.round(k).removed == []
        assert w.indexed("wobbly")
    assert w.runner.schedule.failures(cid) == 2
    assert w.round(7).removed == [cid]  # the third consecutive failure
    assert w.audit("freshness_removal")[0]["failures"] == 3


@pytest.mark.parametrize(
    "answer, needle",
    [
        (PeerReply(500, b'{"status":500}'), "answered 500"),
        (PeerReply(503, b""), "answered 503"),
        (PeerTimeout("no answer within 1.000s"), "peer_timeout"),
        (PeerReply(200, b"<html>hello</html>"), "not JSON"),
        (describe_ok({"hello": "world"}), "not a Capability Document"),
        (describe_ok({"supported_methods": "QUERY"}), "supported_methods"),
        ({"status": 200, "task_id": "t"}, "no result"),
    ],
)
def test_every_kind_of_failure_is_a_strike(make_world: Any, answer: Any, needle: str) -> None:
    w = make_world(replace(SETTINGS, failures_before_removal=2))
    cid = w.activate("broken")
    w.agents.on("DESCRIBE", w.url("broken"), answer)
    w.round(0)
    assert needle in w.round(2).failed[cid] and w.indexed("broken")
    assert w.round(3).removed == [cid]


def test_410_gone_removes_at_once(make_world: Any) -> None:
    w = make_world()
    cid = w.activate("retired")
    w.agents.on("DESCRIBE", w.url("retired"), PeerReply(410, b'{"status":410}'))
    w.round(0)
    assert w.round(2).removed == [cid]
    (rec,) = w.audit("freshness_removal")
    assert rec["reason"] == "describe_gone" and rec["failures"] == 1


def test_removal_notice_is_signed_and_in_the_outbox_before_removal(make_world: Any) -> None:
    w = make_world()
    cid = w.activate("gone-quiet", org_domain="quiet.example")
    w.round(0)
    seen_indexed: list[bool] = []
    enqueue = w.runner._enqueue_removal

    def spy(agent: Any, *a: Any) -> str:
        event_id = enqueue(agent, *a)
        seen_indexed.append(cid in w.svc.indexed_ids())  # still indexed when written
        return event_id

    w.runner._enqueue_removal = spy  # type: ignore[method-assign]
    for k in (2, 3, 4):
        w.round(k)
    assert seen_indexed == [True] and not w.indexed("gone-quiet")
    (row,) = w.outbox.due(NOW.timestamp())
    assert row.state == PENDING and row.attempts == 0 and row.event_type == "agent_removed"
    notice = orjson.loads(row.body)
    assert verify_document(notice, TrustedKeys([w.svc.key.public]), "signature") == w.svc.key.kid
    assert notice["event"] == "agent_removed" and notice["event_id"] == row.event_id
    assert notice["canonical_id"] == cid and notice["org_domain"] == "quiet.example"
    assert notice["reason"] == "describe_failed" and notice["failures"] == 3
    assert notice["ans_id"] == w.svc.key.kid
    assert notice["removed_at"] == "2026-11-21T12:00:00.000Z"
    notice["failures"] = 2  # a tampered notice does not verify
    with pytest.raises(Exception, match="does not verify"):
        verify_document(notice, TrustedKeys([w.svc.key.public]), "signature")


def test_outbox_failure_leaves_the_agent_indexed(make_world: Any) -> None:
    w = make_world(replace(SETTINGS, failures_before_removal=1))
    w.activate("unlucky")
    w.round(0)
    w.outbox.close()  # the notice cannot be written: nothing may be removed
    with pytest.raises(Exception):
        w.round(2)
    assert w.indexed("unlucky")
    assert w.svc.store.get(w.ids["unlucky"]).lifecycle_state == "Active"
    assert w.audit("freshness_removal") == []
    w.outbox = Outbox(w.tmp / "outbox.sqlite3")  # so close() works


def test_reactivation_brings_a_removed_agent_back(make_world: Any) -> None:
    w = make_world(replace(SETTINGS, failures_before_removal=1))
    cid = w.activate("phoenix")
    w.round(0)
    assert w.round(2).removed == [cid]
    w.activate("phoenix")
    assert w.indexed("phoenix") and w.svc.store.get(cid).lifecycle_state == "Active"
    assert [r["agent_label"] for r in w.discover()["results"]] == ["phoenix"]


# -- capability refresh ------------------------------------------------------------------------


def test_capability_update_reindexes_and_leaves_the_manifest_alone(make_world: Any) -> None:
    w = make_world()
    cid = w.activate("alpha", behavioral_trust_score=0.8, trust_tier=2)
    w.activate("beta")
    before = w.discover(K8S_INTENT)["results"]
    alpha_before = next((r for r in before if r["agent_label"] == "alpha"), None)
    # The agent now describes Kubernetes autoscaling, and claims a better score.
    new_caps = {**KUBERNETES, "behavioral_trust_score": 0.99}
    w.agents.on("DESCRIBE", w.url("alpha"), describe_ok(new_caps))
    w.agents.on("DESCRIBE", w.url("beta"), describe_ok(TRANSLATION))
    w.round(0)
    w.svc.matcher.embedded.clear()
    report = w.round(2)
    assert report.refreshed == [cid]  # beta answered what it had: unchanged
    assert w.svc.matcher.embedded == [cid]  # only the changed agent was re-embedded
    after = w.discover(K8S_INTENT)["results"]
    assert after[0]["agent_label"] == "alpha"
    cms_before = alpha_before["capability_match_score"] if alpha_before else 0.0
    assert after[0]["capability_match_score"] > cms_before + 0.2
    # Trust tier, behavioral score and zone still come from the signed manifest.
    assert after[0]["trust_tier"] == 2 and after[0]["behavioral_trust_score"] == 0.8
    stored = w.svc.store.get(cid)
    assert stored.capabilities == new_caps and stored.manifest["trust_tier"] == 2
    (rec,) = w.audit("capabilities_refreshed")
    assert rec["canonical_id"] == cid and "tools" in rec["changed_fields"]
    # The same answer again changes nothing and embeds nothing.
    w.svc.matcher.embedded.clear()
    assert w.round(3).refreshed == []
    assert w.svc.matcher.embedded == []
    assert len(w.audit("capabilities_refreshed")) == 1
    # A restart rebuilds the index from the refreshed store row.
    fresh = w.service()
    fresh.load()
    assert fresh.store.get(cid).capabilities == new_caps
    fresh.audit.close()
    fresh.store.close()


def test_endpoint_override_is_used_and_cannot_be_moved_by_the_agent(make_world: Any) -> None:
    w = make_world()
    cid = w.activate("relocated", caps={**TRANSLATION, "endpoint": "https://edge.acme.example/x"})
    moved = {**KUBERNETES, "endpoint": "https://attacker.example/steal"}
    w.agents.on("DESCRIBE", "https://edge.acme.example/x", describe_ok(moved))
    w.round(0)
    assert w.round(2).refreshed == [cid]
    caps = w.svc.store.get(cid).capabilities
    assert caps["endpoint"] == "https://edge.acme.example/x" and caps["tags"] == KUBERNETES["tags"]
    w.round(3)
    assert w.agents.count("DESCRIBE", "https://edge.acme.example/x") == 2
    assert all("attacker" not in url for _, url, _, _ in w.agents.calls)


def test_describe_request_carries_the_agtp_headers(make_world: Any) -> None:
    w = make_world()
    w.activate("polite")
    w.agents.on("DESCRIBE", w.url("polite"), describe_ok(TRANSLATION))
    w.round(0)
    w.round(2)
    ((method, url, headers, body),) = w.agents.calls
    assert (method, url) == ("DESCRIBE", w.url("polite"))
    assert headers["agent-id"] == "agtp://ans.example/agents/ans"
    assert headers["authority-scope"] == "discovery:refresh"
    assert headers["content-type"] == "application/agtp+json"
    assert headers["agtp-version"] == "AGTP/1.0" and headers["principal-id"]
    doc = orjson.loads(body)
    assert doc["method"] == "DESCRIBE" and doc["parameters"] == {}
    assert doc["task_id"] == headers["task-id"]


# -- availability --------------------------------------------------------------------------


def test_availability_marks_from_status_documents(make_world: Any) -> None:
    w = make_world(replace(SETTINGS, status_interval=10.0))
    labels = ["busy", "paused", "cap-from-caps", "silent", "healthy"]
    for label in labels:
        caps = {**TRANSLATION, "max_sessions": 4} if label == "cap-from-caps" else None
        w.activate(label, caps=caps)
        w.agents.on("DESCRIBE", w.url(label), describe_ok(caps or TRANSLATION))
    st = lambda label: w.url(label) + "/status"  # noqa: E731
    w.agents.on("GET", st("busy"), status_doc(active_session_count=8, max_sessions=8))
    w.agents.on("GET", st("paused"), PeerReply(503, orjson.dumps(status_doc(lifecycle_state="Suspended"))))
    w.agents.on("GET", st("cap-from-caps"), status_doc(active_session_count=4))
    w.agents.on("GET", st("silent"), PeerTimeout("no answer"))
    w.agents.on("GET", st("healthy"), {"status": 200, "result": status_doc(active_session_count=1, max_sessions=8)})
    w.round(0)
    polled = asyncio.run(w.runner.run_once(25.0)).polled  # every agent's first poll is due by 2x10 s
    assert polled == {
        w.ids["busy"]: "at_capacity",
        w.ids["paused"]: "suspended",
        w.ids["cap-from-caps"]: "at_capacity",
        w.ids["silent"]: "not_responding",
        w.ids["healthy"]: None,
    }
    for label, reason in [("busy", "at_capacity"), ("paused", "suspended"), ("silent", "not_responding")]:
        assert w.svc.unavailable_reason(w.ids[label]) == reason
    assert w.svc.unavailable_reason(w.ids["healthy"]) is None
    # DISCOVER shows it, inside the signed result; available agents are unchanged.
    result = w.discover(limit=10)
    by_label = {r["agent_label"]: r for r in result["results"]}
    assert by_label["paused"]["available"] is False
    assert by_label["paused"]["availability_reason"] == "suspended"
    assert by_label["silent"]["availability_reason"] == "not_responding"
    assert "available" not in by_label["healthy"] and "availability_reason" not in by_label["healthy"]
    assert verify_document(result, TrustedKeys([w.svc.key.public]), "ans_signature")
    tampered = {**result, "results": [{**r, "available": True} for r in result["results"]]}
    with pytest.raises(Exception, match="does not verify"):
        verify_document(tampered, TrustedKeys([w.svc.key.public]), "ans_signature")
    # Recovery clears the mark; an unreachable /status is never a removal strike.
    w.agents.on("GET", st("busy"), status_doc(active_session_count=3, max_sessions=8))
    for k in range(3, 9):
        asyncio.run(w.runner.run_once(k * 10.0 + 5))
    assert w.svc.unavailable_reason(w.ids["busy"]) is None
    assert w.svc.unavailable_reason(w.ids["silent"]) == "not_responding"
    assert w.indexed("silent") and w.runner.schedule.failures(w.ids["silent"]) == 0


def test_status_document_rules() -> None:
    cid = "abc"
    ok = lambda **kw: orjson.dumps(status_doc(**kw))  # noqa: E731
    assert availability_from_status(ok(), cid, {}) is None
    assert availability_from_status(ok(active_session_count=99), cid, {}) is None  # no capacity known
    assert availability_from_status(ok(active_session_count=2), cid, {"max_sessions": 2}) == "at_capacity"
    assert availability_from_status(ok(active_session_count=1, max_sessions=2), cid, {"max_sessions": 1}) is None
    assert availability_from_status(ok(lifecycle_state="Deprecated"), cid, {}) == "deprecated"
    for bad in (
        b"[]",
        b"not json",
        orjson.dumps({"lifecycle_state": "Active"}),
        ok(canonical_id="someone-else"),
        ok(lifecycle_state=""),
    ):
        with pytest.raises(ValueError):
            availability_from_status(bad, cid, {})


# -- scheduling ----------------------------------------------------------------------------


def test_agents_are_spread_over_the_interval() -> None:
    sched = FreshnessSchedule(replace(SETTINGS, interval=100.0))
    ids = [f"agent-{n}" for n in range(200)]
    sched.sync(ids, 0.0)
    due_per_window = []
    done: set[str] = set()
    for t in range(110, 210, 10):  # ten windows of 10 s across one interval
        due = [c for c in sched.due_describe(float(t)) if c not in done]
        for c in due:
            sched.describe_ok(c, float(t))
        done.update(due)
        due_per_window.append(len(due))
    assert len(done) == 200 and sum(due_per_window) == 200
    assert max(due_per_window) < 45 and min(due_per_window[1:]) > 5  # spread, not all at once
    # Each keeps its place: the next slot is exactly one interval after the first.
    assert all(200.0 <= a.next_describe < 300.0 for a in sched.agents.values())
    assert sched.due_describe(199.9) == []  # nobody twice within one interval
    assert len(sched.due_describe(300.0)) == 200


def test_concurrency_is_bounded(make_world: Any) -> None:
    w = make_world(replace(SETTINGS, concurrency=3))
    for n in range(10):
        w.activate(f"agent-{n}")
        w.agents.on("DESCRIBE", w.url(f"agent-{n}"), describe_ok(TRANSLATION))
    w.agents.delay = 0.02
    w.round(0)
    assert len(w.round(2).described) == 10
    assert w.agents.max_inflight == 3


def test_endpoint_mapping() -> None:
    assert agent_endpoint("agtp://127.0.0.1:8443/agents/x", {}, "http") == "http://127.0.0.1:8443/agents/x"
    assert agent_endpoint("agtp://acme.tld/agents/cs/", {}, "https") == "https://acme.tld/agents/cs"
    assert agent_endpoint("agtp://[::1]:9/agents/x", {}, "http") == "http://[::1]:9/agents/x"
    assert agent_endpoint("agtp://a.tld/x", {"endpoint": "https://b.tld/y/"}, "http") == "https://b.tld/y"
    for bad in ("agtp:///agents/x", "https://acme.tld/x", "agtp://u:p@acme.tld/x", "agtp://a.tld:99999/x"):
        with pytest.raises(EndpointError):
            agent_endpoint(bad, {}, "https")


# -- outbox and webhook delivery -----------------------------------------------------------------


def test_webhook_backoff_dead_letter_and_delivery(tmp_path: Path) -> None:
    settings = replace(
        SETTINGS,
        webhook_url="https://gov.example/hooks/ans",
        webhook_backoff_initial=1.0,
        webhook_backoff_max=4.0,
        webhook_max_attempts=5,
    )
    clock = [1000.0]
    outbox = Outbox(tmp_path / "outbox.sqlite3")
    audit = AuditLog(tmp_path / "audit.jsonl", lambda: NOW)
    hook = FakeAgents()
    delivery = WebhookDelivery(outbox, settings, hook, audit, lambda: clock[0])
    outbox.add("e1", "agent_removed", b'{"event_id":"e1"}', clock[0])
    outbox.add("e2", "agent_removed", b'{"event_id":"e2"}', clock[0])
    url = "https://gov.example/hooks/ans"
    hook.on("POST", url, PeerReply(500, b""))
    delays = []
    for _ in range(4):
        assert asyncio.run(delivery.deliver_due()) == 0
        nxt = outbox.next_attempt_at()
        delays.append(nxt - clock[0])
        assert asyncio.run(delivery.deliver_due()) == 0  # not due yet: nothing sent
        clock[0] = nxt
    assert delays == [1.0, 2.0, 4.0, 4.0]  # doubling, capped
    assert hook.count("POST", url) == 8  # two rows, four attempts each
    # The fifth failure is the last: dead, audited.
    asyncio.run(delivery.deliver_due())
    assert outbox.get("e1").state == DEAD and outbox.get("e1").attempts == 5
    assert outbox.count(PENDING) == 0
    # A fresh notice is delivered on a 2xx.
    outbox.add("e3", "agent_removed", b'{"event_id":"e3"}', clock[0])
    hook.on("POST", url, PeerReply(202, b""))
    assert asyncio.run(delivery.deliver_due()) == 1
    assert outbox.get("e3").state == DELIVERED
    _, sent_url, headers, body = hook.calls[-1]
    assert sent_url == url and body == b'{"event_id":"e3"}'
    assert headers["ans-event-id"] == "e3" and headers["content-type"] == "application/json"
    audit.close()
    events = [orjson.loads(x) for x in (tmp_path / "audit.jsonl").read_bytes().splitlines()]
    assert [(e["event"], e["event_id"]) for e in events] == [
        ("webhook_dead", "e1"),
        ("webhook_dead", "e2"),
        ("webhook_delivered", "e3"),
    ]
    outbox.close()


def test_outbox_survives_reopening_and_holds_without_a_webhook(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite3"
    outbox = Outbox(path)
    outbox.add("e1", "agent_removed", b"{}", 5.0)
    outbox.failed("e1", "webhook answered 503", 9.0, 5.0)
    outbox.close()
    again = Outbox(path)
    row = again.get("e1")
    assert row is not None and row.attempts == 1 and row.next_attempt_at == 9.0
    assert row.state == PENDING and row.last_error == "webhook answered 503"
    hook = FakeAgents()
    audit = AuditLog(tmp_path / "audit.jsonl", lambda: NOW)
    held = WebhookDelivery(again, SETTINGS, hook, audit, lambda: 100.0)  # no webhook_url
    assert asyncio.run(held.deliver_due()) == 0 and hook.calls == []
    assert again.count(PENDING) == 1
    audit.close()
    again.close()


def test_backoff_formula() -> None:
    assert [backoff(n, 1.0, 3600.0) for n in (1, 2, 3, 12, 13, 500)] == [
        1.0, 2.0, 4.0, 2048.0, 3600.0, 3600.0,
    ]  # fmt: skip


# -- configuration -----------------------------------------------------------------------------


def test_freshness_config(tmp_path: Path) -> None:
    cfg_file = tmp_path / "ans.toml"
    cfg_file.write_text(
        "[freshness]\ninterval = 600\nstatus_interval = 30\ntimeout = 2\nconcurrency = 4\n"
        'scheme = "http"\nwebhook_url = "https://gov.example/hooks/ans"\n'
        "failures_before_removal = 5\nwebhook_backoff_max = 60\n"
    )
    f = load(cfg_file).freshness
    assert (f.interval, f.status_interval, f.timeout, f.concurrency) == (600.0, 30.0, 2.0, 4)
    assert f.scheme == "http" and f.webhook_url == "https://gov.example/hooks/ans"
    assert f.failures_before_removal == 5 and f.webhook_backoff_max == 60.0
    defaults = Config().freshness
    assert defaults.enabled and defaults.interval == 86400 and defaults.failures_before_removal == 3
    assert defaults.scheme == "https" and defaults.webhook_url is None and defaults.concurrency == 8
    for bad in (
        "interval = 0",
        "interval = -5",
        "interval = nan",
        'interval = "1d"',
        "concurrency = 0",
        "concurrency = 2.5",
        "failures_before_removal = true",
        'scheme = "ftp"',
        'webhook_url = "ftp://gov.example/x"',
        'webhook_url = "https://user:pw@gov.example/x"',
        "webhook_backoff_initial = 10\nwebhook_backoff_max = 5",
        "enabled = 1",
        "surprise = 1",
    ):
        cfg_file.write_text(f"[freshness]\n{bad}\n")
        with pytest.raises(ConfigError):
            load(cfg_file)


def test_capability_document_freshness_fields_are_validated() -> None:
    from ans.governance.manifest import validate_capabilities
    from ans.protocol.errors import InvalidCapabilities

    validate_capabilities({"endpoint": "https://edge.acme.example:8443/agents/x", "max_sessions": 8})
    validate_capabilities({"endpoint": "http://127.0.0.1:9000/a"})
    for bad in (
        {"endpoint": "ftp://edge.acme.example/x"},
        {"endpoint": "https://user@edge.acme.example/x"},
        {"endpoint": "https://edge.acme.example/x?q=1"},
        {"endpoint": "https://edge.acme.example/x#frag"},
        {"endpoint": 5},
        {"max_sessions": 0},
        {"max_sessions": True},
        {"max_sessions": "8"},
    ):
        with pytest.raises(InvalidCapabilities):
            validate_capabilities(bad)


def test_stopping_mid_round_leaves_no_coroutine_unawaited(make_world: Any) -> None:
    """Cancelling a round (the server stopping) while requests wait for a
    concurrency slot: the jobs not yet started were coroutine objects never
    awaited ("coroutine ... was never awaited" at shutdown)."""
    w = make_world(replace(SETTINGS, concurrency=1))
    for n in range(4):
        w.activate(f"agent-{n}")
        w.agents.on("DESCRIBE", w.url(f"agent-{n}"), describe_ok(TRANSLATION))
    w.agents.delay = 3600.0  # the first request never ends: the others wait for the slot
    w.round(0)

    async def cancelled_round() -> None:
        round_ = asyncio.ensure_future(w.runner.run_once(2 * INTERVAL))
        while w.agents.inflight == 0:
            await asyncio.sleep(0)
        round_.cancel()
        with pytest.raises(asyncio.CancelledError):
            await round_

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(cancelled_round())
        gc.collect()
    assert not [c for c in caught if "never awaited" in str(c.message)]


def test_self_asserted_records_are_never_probed(make_world: Any) -> None:
    """A self-asserted record's endpoints are a publisher's claim: the runner
    sends nothing to them (no requests from this ANS on an untrusted say-so)
    and never removes it; its expires_at keeps it fresh instead."""
    from ans.protocol.messages import Identity
    from ans.protocol.scope import parse_authority_scope

    w = make_world()
    w.activate("steady")
    w.agents.on("DESCRIBE", w.url("steady"), describe_ok(TRANSLATION))
    publisher = Identity("agtp://p.example/agents/p", "pub", parse_authority_scope("discovery:register"))
    metadata = {
        "id": "https://attacker.example/agents/claimed",
        "name": "Claimed",
        "description": "Translates documents.",
        "bindings": [{"protocol": "https", "endpoint": "https://10.0.0.1/internal"}],
    }
    cid = w.svc.admit_self_asserted(metadata, source="profile", identity=publisher)["canonical_id"]
    for k in (0, 2, 3, 4, 5):
        report = w.round(k)
        assert cid not in report.described and cid not in report.failed
    assert cid in w.svc.indexed_ids()
    assert all("attacker" not in url and "10.0.0.1" not in url for _, url, _, _ in w.agents.calls)
    assert w.agents.count("DESCRIBE", w.url("steady")) >= 1
