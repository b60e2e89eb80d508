"""Conformance of both AGTP dialects, from byte-exact request fixtures, over
the native framing and HTTP/2 of one real ``ans serve --demo``.

Each fixture in ``tests/fixtures/dialect/`` is a request written from the
drafts (``09_*``: -09 / discovery-01 / the authors' reference code;
``02_*``: -02 / discovery-00), one per row of issue 30's table. Natively the
bytes are sent as they are; on HTTP/2 the same method, headers, body (and
path) become an h2 request. Every answer is checked for its dialect
(newer: ``Server-ID`` and a verifying ``Attribution-Record``, no
``AGTP-Version``; -02: ``agtp-version`` / ``agtp-status``, none of the newer
headers), its status and code, and the fixture's own expectation.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from ans.governance.keys import TrustedKeys
from ans.governance.signing import verify_document
from ans.protocol.native import NativeParser, NativeResponseParser

from ans.attribution import ZERO_AUDIT_ID
from ans.cli import main
from ans.client import AgtpResponse, verify_attribution, verify_discover_answer
from tools.launcher import RunningServer, start_server, stop_server

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dialect"
SOL_ID = "71ffa848dddc8521e756dbc4cc6aa952607d16ef3991830c9c51d11fd4cb7c4f"
NEWER, OLD = "agtp-09", "agtp-02"
UUID7_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")

Check = Callable[[AgtpResponse, dict[str, Any]], None]


def _top_is_solidity(resp: AgtpResponse, jwks: dict[str, Any]) -> None:
    result = resp.result
    assert result["results"], result
    assert result["results"][0]["canonical_id"] == SOL_ID
    verify_discover_answer(resp, jwks)


def _returned_at_most(n: int) -> Check:
    def check(resp: AgtpResponse, jwks: dict[str, Any]) -> None:
        _top_is_solidity(resp, jwks)
        assert resp.result["returned"] <= n

    return check


def _signed_refusal(resp: AgtpResponse, jwks: dict[str, Any]) -> None:
    err = resp.error or {}
    assert "ans_signature" in err
    assert err["status"] == resp.status
    verify_discover_answer(resp, jwks, task_id=err.get("task_id"))


def _resolved(resp: AgtpResponse, jwks: dict[str, Any]) -> None:
    result = resp.result
    assert result["resolution"]["canonical_id"] == SOL_ID
    assert result["results"][0]["manifest"]["canonical_id"] == SOL_ID
    verify_discover_answer(resp, jwks)


def _identity_of_solidity(resp: AgtpResponse, jwks: dict[str, Any]) -> None:
    doc = resp.body if resp.body.get("document_type") else resp.result
    assert doc["document_type"] == "agtp-identity"
    assert doc["agent_id"] == SOL_ID
    assert doc["agtp_manifest"]["canonical_id"] == SOL_ID
    verify_document(doc, TrustedKeys.from_jwks(jwks), "signature")


def _bare_identity(resp: AgtpResponse, jwks: dict[str, Any]) -> None:
    assert resp.headers["content-type"] == "application/vnd.agtp.identity+json"
    _identity_of_solidity(resp, jwks)


def _ans_identity(resp: AgtpResponse, jwks: dict[str, Any]) -> None:
    doc = resp.body if resp.body.get("document_type") else resp.result
    assert doc["document_type"] == "agtp-identity"
    assert re.fullmatch(r"[0-9a-f]{64}", doc["agent_id"])
    assert doc["agent_id"] == resp.headers["server-id"]
    assert doc["jwks"] == jwks  # the ANS keys, in the document itself
    verify_document(doc, TrustedKeys.from_jwks(jwks), "signature")


def _manifest_of_solidity(resp: AgtpResponse, jwks: dict[str, Any]) -> None:
    assert resp.result["manifest"]["canonical_id"] == SOL_ID


def _own_manifest(resp: AgtpResponse, jwks: dict[str, Any]) -> None:
    assert resp.result["document_type"] == "agtp-manifest"
    assert resp.result["jwks"] == jwks


# fixture -> {framing: (dialect, status, code or None, check or None)}; "any"
# applies to both framings.
ROWS: dict[str, dict[str, tuple[str, int, str | None, Check | None]]] = {
    # Content-Type: application/vnd.agtp+json (and the discovery-01 example)
    "09_discover_vnd": {"any": (NEWER, 200, None, _returned_at_most(3))},
    "02_discover": {"any": (OLD, 200, None, _returned_at_most(3))},
    # Owner-ID replaces Principal-ID
    "09_owner_id": {"any": (NEWER, 200, None, _top_is_solidity)},
    "02_principal_id": {"any": (OLD, 200, None, _top_is_solidity)},
    # comma-separated Authority-Scope (with a -02 marker: ambiguous -> -02)
    "09_scope_commas": {"any": (NEWER, 200, None, _top_is_solidity)},
    "02_scope_commas": {"any": (OLD, 400, "invalid_authority_scope", None)},
    # a path on the request line
    "09_path_agents": {"any": (NEWER, 200, None, _top_is_solidity)},
    "09_path_root": {"any": (NEWER, 200, None, _top_is_solidity)},
    "09_path_unknown": {"any": (NEWER, 404, "unknown-path", _signed_refusal)},
    # no identity headers
    "09_anonymous": {
        "native": (NEWER, 200, None, _ans_identity),
        "h2": (OLD, 400, "missing_agent_id", _signed_refusal),  # nothing newer on h2
    },
    "09_anonymous_query": {"any": (NEWER, 262, "authorization-required", _signed_refusal)},
    "02_anonymous": {"any": (OLD, 400, "missing_agent_id", _signed_refusal)},
    # body shapes of the reference code: never an unfiltered answer
    "09_body_target": {"any": (NEWER, 422, "missing-query", _signed_refusal)},
    "02_body_target": {"any": (OLD, 422, "unknown_body_field", _signed_refusal)},
    "09_body_flat": {"any": (NEWER, 200, None, _returned_at_most(2))},
    "02_body_flat": {"any": (OLD, 422, "unknown_body_field", _signed_refusal)},
    "09_body_base09": {"any": (NEWER, 200, None, _returned_at_most(2))},
    # DESCRIBE naming the agent in Target-Agent / Agent-ID / the path
    "09_describe_target_anonymous": {"any": (NEWER, 262, "authorization-required", None)},
    "09_describe_target": {"any": (NEWER, 200, None, _bare_identity)},
    "09_describe_agent_id": {
        "native": (NEWER, 262, "authorization-required", None),
        "h2": (OLD, 400, "missing_principal_id", None),
    },
    "09_describe_path_name": {"any": (NEWER, 200, None, _identity_of_solidity)},
    "09_describe_self": {
        "native": (NEWER, 200, None, _ans_identity),
        "h2": (OLD, 200, None, _own_manifest),
    },
    "02_describe_agent_id": {"any": (OLD, 400, "missing_principal_id", None)},
    "02_describe_target": {"any": (OLD, 200, None, _manifest_of_solidity)},
    "02_describe_canonical_id": {"any": (OLD, 200, None, _manifest_of_solidity)},
    # scope and zone violations
    "09_scope_violation": {"any": (NEWER, 455, "scope-violation", _signed_refusal)},
    "02_scope_violation": {"any": (OLD, 451, "scope_violation", _signed_refusal)},
    "09_zone_violation": {"any": (NEWER, 457, "zone-violation", _signed_refusal)},
    "02_zone_violation": {"any": (OLD, 453, "zone_violation", _signed_refusal)},
    # name resolution (discovery-01 section 4)
    "09_name": {"any": (NEWER, 200, None, _resolved)},
    "02_name": {"any": (OLD, 200, None, _resolved)},
    "09_name_hidden": {"any": (NEWER, 404, "name-not-found", _signed_refusal)},
    "02_name_unknown": {"any": (OLD, 404, "name_not_found", _signed_refusal)},
}


def test_every_fixture_has_a_row() -> None:
    assert sorted(p.stem for p in FIXTURES.glob("*.agtp")) == sorted(ROWS)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    cfg = tmp_path_factory.mktemp("dialect-config") / "ans.toml"
    cfg.write_text('[rate_limit]\nenabled = false\n\n[zones]\nrestricted = ["zone:finance"]\n')
    server = start_server(
        tmp_path_factory.mktemp("dialect-data"),
        "--demo",
        "--native-listen",
        "127.0.0.1:0",
        "--config",
        str(cfg),
    )
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def jwks(srv: RunningServer) -> dict[str, Any]:
    doc: dict[str, Any] = httpx.get(f"{srv.url}/.well-known/jwks.json", timeout=10).json()
    return doc


def send_native(url: str, raw: bytes) -> AgtpResponse:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    with socket.create_connection((parts.hostname, parts.port), timeout=20) as sock:
        sock.sendall(raw)
        parser = NativeResponseParser(1 << 24)
        while True:
            data = sock.recv(65536)
            assert data, "the server closed the connection without answering"
            answers = parser.feed(data)
            if answers:
                a = answers[0]
                return AgtpResponse(
                    a.status, a.headers, orjson.loads(a.body) if a.body else {}, a.body
                )


def send_h2(url: str, raw: bytes) -> AgtpResponse:
    (req,) = NativeParser().feed(raw)
    headers = {k: v for k, v in req.headers.items() if k != "content-length"}
    with httpx.Client(base_url=url, http1=False, http2=True, timeout=20) as client:
        resp = client.request(req.method, req.target or "/", content=req.body, headers=headers)
    return AgtpResponse(resp.status_code, dict(resp.headers), resp.json(), resp.content)


def check_dialect(resp: AgtpResponse, dialect: str, jwks: dict[str, Any]) -> None:
    h = {k.lower(): v for k, v in resp.headers.items()}
    if dialect == NEWER:
        for retired in ("agtp-version", "agtp-status", "server-agent-id"):
            assert retired not in h
        assert re.fullmatch(r"[0-9a-f]{64}", h["server-id"])
        assert UUID7_RE.fullmatch(h["response-id"])
        assert h["content-type"].startswith("application/vnd.agtp")
        record = verify_attribution(resp, jwks)  # signed by the ANS key, bound to this answer
        assert record["response_status"] == resp.status
        assert record["response_id"] == h["response-id"]
        assert record["server_id"] == h["server-id"]
    else:
        assert h["agtp-version"] == "AGTP/1.0"
        assert h["agtp-status"] == str(resp.status)
        assert h["content-type"] == "application/agtp+json"
        for newer in ("server-id", "attribution-record", "audit-id", "response-id"):
            assert newer not in h


@pytest.mark.parametrize("framing", ["native", "h2"])
@pytest.mark.parametrize("name", sorted(ROWS))
def test_fixture(srv: RunningServer, jwks: dict[str, Any], name: str, framing: str) -> None:
    raw = (FIXTURES / f"{name}.agtp").read_bytes()
    expected = ROWS[name].get(framing) or ROWS[name]["any"]
    dialect, status, code, check = expected
    assert srv.native_url is not None
    resp = send_native(srv.native_url, raw) if framing == "native" else send_h2(srv.url, raw)
    assert resp.status == status, resp.body
    if code is not None:
        assert (resp.error or {}).get("code") == code, resp.body
        if dialect == NEWER:
            assert (resp.error or {}).get("detail"), resp.body
    check_dialect(resp, dialect, jwks)
    if check is not None:
        check(resp, jwks)


def test_audit_ids_chain(srv: RunningServer, jwks: dict[str, Any]) -> None:
    """Each Attribution-Record names the previous answer's Audit-ID."""
    assert srv.native_url is not None
    raw = (FIXTURES / "09_owner_id.agtp").read_bytes()
    first = send_native(srv.native_url, raw)
    second = send_native(srv.native_url, raw)
    record = verify_attribution(second, jwks)
    assert record["previous_audit_id"] == first.headers["audit-id"]
    assert record["previous_audit_id"] != ZERO_AUDIT_ID


@pytest.mark.parametrize("framing", ["native", "h2"])
@pytest.mark.parametrize("dialect", [NEWER, OLD])
def test_cli_resolves_a_name_in_either_dialect(
    srv: RunningServer, framing: str, dialect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = srv.native_url if framing == "native" else srv.url
    assert url is not None
    name = "solidity-auditor.chainguard-audits.example"
    args = ["discover", "--name", name, "--server", url, "--dialect", dialect]
    assert main([*args, "--scope", "discovery:query zone:finance"]) == 0
    out = capsys.readouterr().out
    assert f"name {name} -> canonical id {SOL_ID}" in out
    assert "signature: verified" in out
    assert ("attribution: verified" in out) is (dialect == NEWER)
    # without the zone grant the name does not exist for the caller: a signed 404
    assert main([*args, "--scope", "discovery:query"]) == 2
    code = "name-not-found" if dialect == NEWER else "name_not_found"
    assert f"404 {code}" in capsys.readouterr().err


def test_a_262_refusal_is_audited(srv: RunningServer) -> None:
    """An anonymous request refused 262 is in the audit log, as a 401 is."""
    assert srv.native_url is not None
    raw = (FIXTURES / "09_anonymous_query.agtp").read_bytes()
    assert send_native(srv.native_url, raw).status == 262

    def audited() -> list[dict[str, Any]]:
        lines = (srv.data_dir / "audit.jsonl").read_text().splitlines()
        return [r for r in map(orjson.loads, lines) if r.get("status") == 262]

    deadline = time.monotonic() + 10
    while not audited():
        assert time.monotonic() < deadline, "no audit record for the 262"
        time.sleep(0.05)
    record = audited()[-1]
    assert record["event"] == "authentication_failed"
    assert record["code"] == "authorization_required"  # ANS's own code (the wire's is kebab-case)


@pytest.mark.parametrize(
    ("method", "raw_path", "decoded"),
    [
        ("DESCRIBE", "/agents/%E2%82%AC", "/agents/\u20ac"),
        ("DISCOVER", "/%E2%82%AC", "/\u20ac"),
        ("DESCRIBE", "/agents/%ff%fe", "/agents/\ufffd\ufffd"),
    ],
)
def test_a_path_beyond_latin_1_gets_a_typed_newer_refusal(
    srv: RunningServer, jwks: dict[str, Any], method: str, raw_path: str, decoded: str
) -> None:
    """The Attribution-Record's request_hash took the target as Latin-1, so a
    percent-encoded path beyond it answered an empty 500."""
    import hashlib

    body = b'{"intent": "audit contracts"}' if method == "DISCOVER" else b""
    headers = {"agent-id": "agtp://a.example/agents/b", "owner-id": "me",
               "content-type": "application/vnd.agtp+json"}
    with httpx.Client(base_url=srv.url, http1=False, http2=True, timeout=20) as client:
        resp = client.request(method, raw_path, content=body, headers=headers)
    assert 400 <= resp.status_code < 500, resp.content
    answer = AgtpResponse(resp.status_code, dict(resp.headers), resp.json(), resp.content)
    assert (answer.error or {}).get("code") and (answer.error or {}).get("detail"), resp.content
    check_dialect(answer, NEWER, jwks)
    record = verify_attribution(answer, jwks)
    line = f"{method} {decoded}\n".encode()
    assert record["request_hash"] == hashlib.sha256(line + body).hexdigest()
