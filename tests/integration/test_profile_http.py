"""A profile client (httpx, plain JSON, no AGTP) against a real ``ans serve
--demo`` on loopback, over HTTP/2 (h2c, prior knowledge) and HTTP/1.1: the
ANS's keys from ``/.well-known/jwks.json`` and its manifest stating D2, a
signed Discovery Response verified against them and bound to the request
sent, GET of one candidate, signed refusals, garbage and an over-size body
answered 400 with the connection still usable."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import pytest
from ans.governance.keys import TrustedKeys
from ans.governance.signing import RESULT_SIGNATURE_FIELD, verify_document

from ans.client import verify_discover_result
from tools.launcher import RunningServer, start_server, stop_server

pytestmark = pytest.mark.integration

HEADERS = {
    "agent-id": "agtp://client.example/agents/orchestrator",
    "principal-id": "usr-profile",
    "authority-scope": "discovery:query",
    "content-type": "application/json",
}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    cfg = tmp_path_factory.mktemp("profile-config") / "ans.toml"
    cfg.write_text("[rate_limit]\nenabled = false\n[profile]\nself_registration = true\n")
    server = start_server(tmp_path_factory.mktemp("profile-data"), "--demo", "--config", str(cfg))
    yield server
    stop_server(server)


def client(srv: RunningServer, version: str) -> httpx.Client:
    h2 = version == "HTTP/2"
    return httpx.Client(base_url=srv.url, http1=not h2, http2=h2, timeout=30)


@pytest.mark.parametrize("version", ["HTTP/2", "HTTP/1.1"])
def test_profile_client_verifies_a_real_server(srv: RunningServer, version: str) -> None:
    with client(srv, version) as c:
        jwks = c.get("/.well-known/jwks.json").json()
        keys = TrustedKeys.from_jwks(jwks)
        # the ANS manifest (DESCRIBE on the ANS itself) states the profile level
        manifest = c.request("DESCRIBE", "/", content=b"{}").json()["result"]
        assert manifest["discovery_profile"]["level"] == "D2"
        assert manifest["discovery_profile"]["bindings"]["json"]["discover"] == (
            "POST /discovery/v1/discover"
        )
        request = {
            "query": "translate a legal contract from German into English",
            "limit": 3,
            "include_evidence": True,
        }
        r = c.post(
            "/discovery/v1/discover",
            headers={**HEADERS, "task-id": f"it-{version}"},
            content=orjson.dumps(request),
        )
        assert r.http_version == version
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/json"
        assert r.headers["x-correlation-id"] == f"it-{version}"
        body = r.json()
        # signed with the key the JWKS publishes, bound to the request object sent
        assert verify_discover_result(body, jwks, request) == keys.kids()[0]
        assert body["request_id"].startswith("qry-")
        assert 1 <= len(body["candidates"]) <= 3
        first = body["candidates"][0]
        assert "translat" in first["description"].lower()
        for field in ("id", "name", "description", "bindings", "status", "score"):
            assert field in first, field
        # GET the first candidate: the same agent, signed too
        g = c.get(f"/discovery/v1/agents/{first['id']}", headers=HEADERS)
        assert g.status_code == 200, g.text
        agent = g.json()
        assert agent["id"] == first["id"] and agent["name"] == first["name"]
        verify_document(agent, keys, RESULT_SIGNATURE_FIELD)
        # self-registration is on here: a D0 object (section 13.1) as a tier-3 record
        d0 = {
            "id": "https://example.net/agents/minimal",
            "name": "Minimal Agent",
            "description": "Answers short factual questions.",
            "bindings": [{"protocol": "https", "endpoint": "https://example.net/agent/invoke"}],
        }
        path = "/discovery/v1/agents/" + quote(d0["id"], safe="")
        reg = {**HEADERS, "authority-scope": "discovery:register discovery:query"}
        p = c.put(path, headers=reg, content=orjson.dumps(d0))
        assert p.status_code == 200, p.text
        assert p.json()["governed"] is False and p.json()["trust_tier"] == 3
        verify_document(p.json(), keys, RESULT_SIGNATURE_FIELD)
        g = c.get(path, headers=HEADERS)
        assert g.status_code == 200 and g.json()["id"] == d0["id"]


@pytest.mark.parametrize("version", ["HTTP/2", "HTTP/1.1"])
def test_refusals_are_profile_errors_and_the_connection_survives(
    srv: RunningServer, version: str
) -> None:
    with client(srv, version) as c:
        keys = TrustedKeys.from_jwks(c.get("/.well-known/jwks.json").json())
        bad: list[tuple[bytes, dict[str, str], int, str]] = [
            (b"{not json", HEADERS, 400, "invalid_request"),
            (b'{"query": "x", "limit": "many"}', HEADERS, 400, "invalid_request"),
            (b"x" * (300 * 1024), HEADERS, 400, "invalid_request"),  # > max_body_bytes
            (
                b'{"query": "x"}',
                {**HEADERS, "authority-scope": "agents:delegate"},
                403,
                "forbidden",
            ),
        ]
        for body, headers, status, code in bad:
            r = c.post("/discovery/v1/discover", headers=headers, content=body)
            assert r.status_code == status, r.text
            error: dict[str, Any] = r.json()["error"]
            assert error["code"] == code and error["correlation_id"]
            verify_document(error, keys, RESULT_SIGNATURE_FIELD)  # discover refusals are signed
        r = c.get("/discovery/v1/agents/no-such-agent", headers=HEADERS)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        # still the same connection, still answering
        ok = c.post(
            "/discovery/v1/discover", headers=HEADERS, content=b'{"query": "audit a contract"}'
        )
        assert ok.status_code == 200 and ok.http_version == version


def test_server_log_has_no_traceback(srv: RunningServer) -> None:
    with client(srv, "HTTP/2") as c:
        for body in (b"\x00\xff", b"[" * 10_000, b'{"query": 1e999}', b'{"query": {"a": []}}'):
            r = c.post("/discovery/v1/discover", headers=HEADERS, content=body)
            assert r.status_code == 400, r.text
    assert not any("Traceback" in line for line in srv.output)
