"""The three test vectors of draft-xu-efficient-agent-discovery-profile-00,
section 13 (non-normative), verbatim, over both bindings: the profile's JSON
binding (``POST /discovery/v1/discover``, ``PUT /discovery/v1/agents/{id}``)
and AGTP DISCOVER (the same fields as DISCOVER parameters), through the ASGI
app in-process.

The vectors are copied here, byte for byte as printed in the draft (its
indentation stripped), because the draft is not shipped with ANS:

* 13.1 "Minimal D0 Metadata": "An implementation claiming D0 support MUST
  accept this object as valid metadata, assuming the identifier and endpoint
  scheme are allowed by local policy."
* 13.2 "Minimal D1 Query": "A D1 discovery service receiving this query SHOULD
  return zero or more candidates and MUST NOT require include_evidence."
* 13.3 "Unsupported Hard Filter": "If the service treats
  unsupported_private_filter as a hard filter and cannot apply it, the
  service MUST either fail the request or include the filter name in
  unsupported_filters." ANS answers it, naming the filter.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from ans.governance.audit import AuditLog
from ans.governance.keys import SigningKey, TrustedKeys
from ans.governance.signing import RESULT_SIGNATURE_FIELD, verify_document
from ans.protocol.messages import ActivateRequest, Identity, query_digest
from ans.protocol.scope import parse_authority_scope

from ans.app import AnsApp
from ans.config import Config
from ans.matcher import CapabilityIndex
from ans.service import AnsService
from ans.store import SQLiteStore

VECTOR_13_1 = """\
{
  "id": "https://example.net/agents/minimal",
  "name": "Minimal Agent",
  "description": "Answers short factual questions.",
  "bindings": [
    {
      "protocol": "https",
      "endpoint": "https://example.net/agent/invoke"
    }
  ]
}
"""
VECTOR_13_2 = """\
{
  "query": "answer a short factual question",
  "protocols": ["https"],
  "limit": 1
}
"""
VECTOR_13_3 = """\
{
  "query": "find a translation agent",
  "required_tags": ["translation"],
  "constraints": {
    "unsupported_private_filter": "example"
  }
}
"""

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
GOV = Identity("agtp://gov/agents/p", "gov", parse_authority_scope("discovery:register"))
CALLER = {
    "agent-id": "agtp://o.example/agents/orch",
    "principal-id": "usr-1",
    "authority-scope": "discovery:query discovery:register",
}
HTTPS = [{"protocol": "https", "endpoint": "https://agents.example/invoke"}]
# Governed agents: translators (tagged translation) and near misses that are not.
CATALOG = {
    "legal-translator": (
        "Translates legal contracts between German and English.",
        ["translation", "legal"],
    ),
    "doc-translator": ("Translates technical documents into French.", ["translation", "docs"]),
    "translation-memory-search": (
        "Searches a translation memory for previously translated sentences.",
        ["search", "terminology"],
    ),
    "fact-answerer": ("Answers short factual questions from an encyclopedia.", ["qa"]),
}


def both_bindings(vector: str) -> list[tuple[str, str, bytes]]:
    """(binding, HTTP method, body) for the JSON binding and AGTP DISCOVER."""
    doc = json.loads(vector)
    return [
        ("json", "POST", vector.encode()),
        ("agtp", "DISCOVER", orjson.dumps({"method": "DISCOVER", "parameters": doc})),
    ]


class World:
    def __init__(self, app: AnsApp, svc: AnsService, ids: dict[str, str]) -> None:
        self.app, self.svc, self.ids = app, svc, ids

    def call(
        self, method: str, path: str, body: bytes, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, Any]]:
        hdrs = {**CALLER, "content-type": "application/json", **(headers or {})}
        asgi = {
            "type": "http",
            "method": method,
            "path": path,
            "headers": [(k.encode(), v.encode()) for k, v in hdrs.items()],
            "extensions": {},
        }
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        asyncio.run(self.app(asgi, receive, send))
        return sent[0]["status"], orjson.loads(sent[1]["body"])

    def discover(self, binding: str, method: str, body: bytes) -> dict[str, Any]:
        """The answer's (verified) result object, as ``candidates`` either way."""
        path = "/discovery/v1/discover" if binding == "json" else "/"
        status, out = self.call(method, path, body)
        assert status == 200, out
        result = out if binding == "json" else out["result"]
        keys = TrustedKeys([self.svc.key.public])
        assert verify_document(result, keys, RESULT_SIGNATURE_FIELD) == self.svc.key.kid
        sent = json.loads(body)
        assert result["query_digest"] == query_digest(
            sent if binding == "json" else sent["parameters"]
        )
        if binding == "agtp":  # the profile id of an AGTP item is its profile_id
            items = [{"id": r.get("profile_id", r["canonical_id"]), **r} for r in result["results"]]
            result = {**result, "candidates": items}
        return result


@pytest.fixture
def make_world(
    tmp_path: Path, embedder: Any, gov_key: SigningKey, make_manifest: Callable[..., Any]
) -> Iterator[Callable[..., World]]:
    made: list[AnsService] = []

    def make(self_registration: bool = False) -> World:
        d = tmp_path / f"svc{len(made)}"
        d.mkdir()
        cfg = Config(data_dir=d, profile_self_registration=self_registration)
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
        for label, (job, tags) in CATALOG.items():
            m = make_manifest(label, job_description=job)
            caps = {"tags": tags, "bindings": HTTPS}
            svc.activate(ActivateRequest(GOV, "t", m, caps))
            ids[label] = m["canonical_id"]
        return World(AnsApp(svc), svc, ids)

    yield make
    for svc in made:
        svc.audit.close()
        svc.store.close()


# -- 13.1 --------------------------------------------------------------------------------


def test_13_1_minimal_d0_metadata_is_accepted_through_put(make_world: Any) -> None:
    w = make_world(self_registration=True)
    vector = json.loads(VECTOR_13_1)
    status, out = w.call("PUT", f"/discovery/v1/agents/{vector['id']}", VECTOR_13_1.encode())
    assert status in (200, 201), out
    assert out["id"] == vector["id"] and out["governed"] is False
    keys = TrustedKeys([w.svc.key.public])
    verify_document(out, keys, RESULT_SIGNATURE_FIELD)
    status, agent = w.call("GET", f"/discovery/v1/agents/{vector['id']}", b"")
    assert status == 200, agent
    assert (agent["id"], agent["name"], agent["description"]) == (
        vector["id"],
        vector["name"],
        vector["description"],
    )
    assert agent["bindings"][0]["endpoint"] == vector["bindings"][0]["endpoint"]
    # self-asserted: tier 3, found only when the caller admits tier 3
    for binding, method, body in both_bindings(VECTOR_13_2):
        plain = w.discover(binding, method, body)
        assert vector["id"] not in {c.get("id") for c in plain["candidates"]}
    admitted = json.dumps({**json.loads(VECTOR_13_2), "trust_tier_min": 3, "limit": 10})
    for binding, method, body in both_bindings(admitted):
        found = w.discover(binding, method, body)
        assert vector["id"] in {c.get("id") for c in found["candidates"]}, (binding, found)


def test_13_1_minimal_d0_metadata_is_accepted_inside_a_governance_signed_activate(
    make_world: Any, make_manifest: Callable[..., Any]
) -> None:
    """AGTP: the 13.1 object as the capability document of an ACTIVATE whose
    manifest a trusted governance key signed; then a governed agent, found by
    the 13.2 query on both bindings and by GET."""
    w = make_world()
    vector = json.loads(VECTOR_13_1)
    manifest = make_manifest("minimal", job_description=vector["description"])
    body = orjson.dumps(
        {"method": "ACTIVATE", "parameters": {"manifest": manifest, "capabilities": vector}}
    )
    status, out = w.call("ACTIVATE", "/", body)
    assert status == 200, out
    cid = manifest["canonical_id"]
    assert out["result"]["canonical_id"] == cid
    status, agent = w.call("GET", f"/discovery/v1/agents/{cid}", b"")
    assert status == 200, agent
    assert agent["bindings"] == vector["bindings"]
    for binding, method, q in both_bindings(VECTOR_13_2):
        found = w.discover(binding, method, q)
        assert [c["canonical_id"] for c in found["candidates"]] in ([cid], [w.ids["fact-answerer"]])


def test_13_1_minimal_d0_metadata_is_refused_through_put_when_off(make_world: Any) -> None:
    w = make_world()
    status, out = w.call("PUT", "/discovery/v1/agents/minimal", VECTOR_13_1.encode())
    assert status == 404 and out["error"]["code"] == "not_found"


# -- 13.2 --------------------------------------------------------------------------------


@pytest.mark.parametrize("binding", ["json", "agtp"])
def test_13_2_minimal_d1_query_is_answered_without_include_evidence(
    make_world: Any, binding: str
) -> None:
    w = make_world()
    _, method, body = dict((b[0], b) for b in both_bindings(VECTOR_13_2))[binding]
    result = w.discover(binding, method, body)
    assert len(result["candidates"]) <= 1
    assert result["candidates"], "the governed https fact-answerer answers short questions"
    only = result["candidates"][0]
    assert only["canonical_id"] == w.ids["fact-answerer"]
    assert any(b["protocol"] == "https" for b in only["bindings"])
    assert result["unsupported_filters"] == []
    assert "protocols" in result["applied_filters"]


# -- 13.3 --------------------------------------------------------------------------------


@pytest.mark.parametrize("binding", ["json", "agtp"])
def test_13_3_unsupported_hard_filter_is_named_and_required_tags_applied(
    make_world: Any, binding: str
) -> None:
    w = make_world()
    _, method, body = dict((b[0], b) for b in both_bindings(VECTOR_13_3))[binding]
    result = w.discover(binding, method, body)
    assert "unsupported_private_filter" in result["unsupported_filters"]
    got = {c["canonical_id"] for c in result["candidates"]}
    assert got, "translators exist"
    # only translation-tagged agents: the translation-memory search is not one
    assert got <= {w.ids["legal-translator"], w.ids["doc-translator"]}
    assert w.svc.store.get(w.ids["translation-memory-search"]) is not None
    assert result["applied_filters"].get("required_tags") == ["translation"]
