"""The efficient-discovery profile's fields on AGTP DISCOVER against real
``ans serve`` processes (issue 25 items 1, 2, 3, 5): over HTTP/2 and
HTTP/1.1, every answer's ES256 signature verified against the server's JWKS;
D0 metadata inside a governance-signed ACTIVATE; and two federated servers,
where the peer's candidates pass the same hard filters and keep their
section-10 provenance."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from ans.governance.keys import SigningKey, TrustedKeys
from ans.governance.signing import verify_document

from ans.client import verify_discover_result

pytestmark = pytest.mark.integration

READER = {
    "agtp-version": "AGTP/1.0",
    "agent-id": "agtp://orch.example/agents/o",
    "principal-id": "usr-1",
    "authority-scope": "discovery:query",
    "content-type": "application/agtp+json",
}
GOVERNANCE = {**READER, "principal-id": "gov", "authority-scope": "discovery:register"}
CONFIG = (
    "[rate_limit]\nenabled = false\n"
    '[profile]\nredact = ["capabilities.auth"]\n'
    "[federation]\npeer_timeout = 2.0\ndeadline = 4.0\n"
)
D0 = {
    "id": "https://example.net/agents/minimal",
    "name": "Minimal Agent",
    "description": "Answers short factual questions.",
    "bindings": [{"protocol": "https", "endpoint": "https://example.net/agent/invoke"}],
}
TRANSLATORS = [
    (
        "legal-translator",
        "Translates legal contracts between German and English.",
        {
            "tags": ["translation", "legal"],
            "bindings": [{"protocol": "https", "endpoint": "https://lex.example/t"}],
            "auth": {"schemes": ["oauth2"]},
            "x-vendor": {"kept": True},
        },
    ),
    (
        "menu-translator",
        "Translates restaurant menus between German and English.",
        {"tags": ["menus"], "bindings": [{"protocol": "grpc", "endpoint": "grpc://m.example"}]},
    ),
]


def call(client: httpx.Client, method: str, params: dict[str, Any], headers: dict[str, str]) -> Any:
    body = orjson.dumps({"method": method, "task_id": "t-profile", "parameters": params})
    return client.request(method, "/", content=body, headers={**headers, "task-id": "t-profile"})


def discover(client: httpx.Client, params: dict[str, Any]) -> dict[str, Any]:
    resp = call(client, "DISCOVER", params, READER)
    assert resp.status_code == 200, resp.text
    result: dict[str, Any] = resp.json()["result"]
    jwks = client.get("/.well-known/jwks.json").json()
    verify_discover_result(result, jwks, params)  # the ANS key, the digest of what we sent
    return result


@pytest.fixture
def start(server_factory: Any, tmp_path: Path, test_gov_key: tuple[SigningKey, Path]) -> Any:
    counter = iter(range(100))

    def run(name: str, *extra: str) -> Any:
        data = tmp_path / f"{name}-{next(counter)}"
        data.mkdir()
        (data / "ans.toml").write_text(CONFIG)
        return server_factory(
            data,
            "--governance-jwks",
            str(test_gov_key[1]),
            "--config",
            str(data / "ans.toml"),
            *extra,
        )

    return run


@pytest.fixture
def activate(
    test_gov_key: tuple[SigningKey, Path], make_manifest: Callable[..., dict[str, Any]]
) -> Callable[..., str]:
    def run(client: httpx.Client, label: str, job: str, extra: dict[str, Any], **kw: Any) -> str:
        manifest = make_manifest(
            label, key=test_gov_key[0], job_description=job, org_domain=f"{label}.example", **kw
        )
        resp = call(client, "ACTIVATE", {"manifest": manifest, **extra}, GOVERNANCE)
        assert resp.status_code == 200, resp.text
        return str(manifest["canonical_id"])

    return run


@pytest.mark.parametrize("version", ["HTTP/2", "HTTP/1.1"])
def test_profile_fields_on_agtp_discover(start: Any, activate: Any, version: str) -> None:
    srv = start("one")
    h2 = version == "HTTP/2"
    with httpx.Client(base_url=srv.url, http2=h2, http1=not h2, timeout=20) as c:
        assert c.get("/healthz").http_version == version
        _profile_fields(c, activate)


def _profile_fields(c: httpx.Client, activate: Any) -> None:
    for label, job, caps in TRANSLATORS:
        activate(c, label, job, {"capabilities": caps})
    # 13.1 inside a governance-signed ACTIVATE
    minimal_id = activate(c, "minimal", "Answers short factual questions.", {"metadata": D0})

    # 13.2: answered without include_evidence
    r = discover(
        c, {"query": "answer a short factual question", "protocols": ["https"], "limit": 1}
    )
    (item,) = r["results"]
    assert item["canonical_id"] == minimal_id and item["profile_id"] == D0["id"]
    assert item["bindings"] == D0["bindings"] and item["status"] == "active"
    assert "matched_examples" not in item

    # 13.3: answered, the unknown constraint named, only translation-tagged agents
    r = discover(
        c,
        {
            "query": "find a translation agent",
            "required_tags": ["translation"],
            "constraints": {"unsupported_private_filter": "example"},
        },
    )
    assert [i["agent_label"] for i in r["results"]] == ["legal-translator"]
    assert r["unsupported_filters"] == ["unsupported_private_filter"]
    assert r["applied_filters"] == {"required_tags": ["translation"]}

    # excluded_tags, protocols, detail levels, redaction
    r = discover(c, {"query": "translate German to English", "excluded_tags": ["legal"]})
    assert [i["agent_label"] for i in r["results"]] == ["menu-translator"]
    r = discover(c, {"query": "translate German to English", "protocols": ["grpc"]})
    assert [i["agent_label"] for i in r["results"]] == ["menu-translator"]
    r = discover(c, {"required_tags": ["legal"], "detail": "minimal"})
    assert "job_description" not in r["results"][0] and r["results"][0]["bindings"]
    r = discover(c, {"required_tags": ["legal"], "detail": "full"})
    full = r["results"][0]
    assert full["redacted"] is True and full["redacted_fields"] == ["capabilities.auth"]
    assert full["capabilities"]["x-vendor"] == {"kept": True}
    assert "auth" not in full["capabilities"]
    assert full["manifest"]["signature"]  # the governance-signed manifest

    # typed refusals
    for bad, code in (
        ({"required_tag": ["x"]}, "misspelled_parameter"),
        ({"detail": "everything"}, "invalid_detail"),
        ({"protocols": "https"}, "invalid_protocols"),
        ({"client_context": "x"}, "invalid_client_context"),
    ):
        resp = call(c, "DISCOVER", bad, READER)
        assert resp.status_code == 422, resp.text
        assert resp.json()["error"]["code"] == code


def test_federated_candidates_pass_the_same_filters_with_provenance(
    start: Any, activate: Any, test_gov_key: tuple[SigningKey, Path]
) -> None:
    peer = start("peer")
    with httpx.Client(base_url=peer.url, http2=True, http1=False, timeout=20) as pc:
        for label, job, caps in TRANSLATORS:
            activate(pc, label, job, {"capabilities": caps}, trust_tier=2)
        peer_kid = pc.get("/.well-known/jwks.json").json()["keys"][0]["kid"]
    origin = start("origin", "--peer", f"2@{peer.url}")
    with httpx.Client(base_url=origin.url, http2=True, http1=False, timeout=20) as oc:
        params = {
            "query": "translate German to English",
            "required_tags": ["translation"],
            "detail": "minimal",
            "client_context": {"locale": "de-DE"},
        }
        r = discover(oc, params)
        (item,) = r["results"]  # the menu translator lacks the tag: filtered at the peer
        assert item["origin_service"] == peer_kid
        assert item["provenance"]["peer"]["ans_id"] == peer_kid
        assert set(item) <= {
            "rank",
            "canonical_id",
            "profile_id",
            "manifest_uri",
            "status",
            "bindings",
            "rank_score",
            "available",
            "availability_reason",
            "governed",
            "provenance",
            "origin_service",
            "origin_authority",
            "origin_signature",
            "received_at",
            "redacted",
        }
        verify_document(
            {**r}, TrustedKeys.from_jwks(oc.get("/.well-known/jwks.json").json()), "ans_signature"
        )
    # the client's context never reached the peer in clear
    assert not any("de-DE" in line for line in peer.output)
    assert b"de-DE" not in (peer.data_dir / "audit.jsonl").read_bytes()
