"""The real server on a loopback port, spoken to over HTTP/2 (and HTTP/1.1):
signed DISCOVER, scope enforcement, typed errors, ACTIVATE, DESCRIBE, JWKS."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from typing import Any

import httpx
import orjson
import pytest
from ans.governance.keys import SigningKey
from ans.governance.signing import sign_document
from ans.protocol.errors import ERROR_CODES
from ans.protocol.jcs import canonicalize
from joserfc import jws
from joserfc.jwk import ECKey

pytestmark = pytest.mark.integration

IDENTITY = {
    "agtp-version": "AGTP/1.0",
    "agent-id": "agtp://agtp.finco.example/agents/orchestrator",
    "principal-id": "usr-compliance-team",
    "authority-scope": "discovery:query agents:delegate",
    "content-type": "application/agtp+json",
}
SOLIDITY = {
    "intent": "Audit Solidity smart contracts for reentrancy, overflow, and access control misconfiguration",
    "capability_domains": ["methods", "tools", "zones"],
    "trust_tier_min": 2,
    "behavioral_trust_min": 0.88,
    "governance_zone": "zone:finance",
    "limit": 3,
    "scope_negotiate": True,
}


@pytest.fixture(scope="module")
def h2(server: Any) -> Any:
    with httpx.Client(base_url=server.url, http1=False, http2=True, timeout=20) as c:
        yield c


def call(
    client: httpx.Client,
    method: str,
    params: Any,
    *,
    headers: dict[str, str] | None = None,
    task_id: str = "task-it-1",
    body: bytes | None = None,
) -> httpx.Response:
    hdrs = {**IDENTITY, "task-id": task_id, **(headers or {})}
    hdrs = {k: v for k, v in hdrs.items() if v is not None}
    content = (
        body
        if body is not None
        else orjson.dumps({"method": method, "task_id": task_id, "parameters": params})
    )
    return client.request(method, "/", content=content, headers=hdrs)


def verify_with_joserfc(result: dict[str, Any], jwks: dict[str, Any]) -> dict[str, Any]:
    sig = result["ans_signature"]
    header_b64, empty, sig_b64 = sig["value"].split(".")
    assert empty == ""
    payload = canonicalize({k: v for k, v in result.items() if k != "ans_signature"})
    token = f"{header_b64}.{base64.urlsafe_b64encode(payload).rstrip(b'=').decode()}.{sig_b64}"
    key = next(k for k in jwks["keys"] if k["kid"] == sig["key_id"])
    obj = jws.deserialize_compact(token, ECKey.import_key(key), algorithms=["ES256"])
    return dict(obj.protected)


def test_discover_is_signed_ranked_and_verifiable(h2: httpx.Client) -> None:
    resp = call(h2, "DISCOVER", SOLIDITY, task_id="task-disc-solidity-01")
    assert resp.http_version == "HTTP/2"
    assert resp.status_code == 200
    assert resp.headers["agtp-version"] == "AGTP/1.0"
    assert resp.headers["agtp-status"] == "200"
    assert resp.headers["task-id"] == "task-disc-solidity-01"
    assert resp.headers["server-agent-id"]
    assert resp.headers["content-type"] == "application/agtp+json"
    body = resp.json()
    assert body["status"] == 200 and body["task_id"] == "task-disc-solidity-01"
    result = body["result"]
    assert result["returned"] == len(result["results"]) <= 3
    assert result["total_matches"] >= result["returned"] >= 1
    top = result["results"][0]
    assert top["agent_label"] == "solidity-auditor" and top["rank"] == 1
    assert top["required_scope"]
    for r in result["results"]:
        assert r["trust_tier"] <= 2 and r["behavioral_trust_score"] >= 0.88
        assert r["governance_zone"] == "zone:finance"
    assert result["query_digest"] == hashlib.sha256(canonicalize(SOLIDITY)).hexdigest()
    jwks = h2.get("/.well-known/jwks.json").json()
    assert verify_with_joserfc(result, jwks) == {
        "alg": "ES256",
        "kid": result["ans_signature"]["key_id"],
    }


def test_same_query_same_ranking(h2: httpx.Client) -> None:
    params = {"intent": "translate a legal contract from German to English", "trust_tier_min": 3}
    a, b = (
        call(h2, "DISCOVER", params).json()["result"],
        call(h2, "DISCOVER", params).json()["result"],
    )
    assert [r["canonical_id"] for r in a["results"]] == [r["canonical_id"] for r in b["results"]]
    assert [r["rank_score"] for r in a["results"]] == [r["rank_score"] for r in b["results"]]


def test_451_without_discovery_query_is_audited(h2: httpx.Client, server: Any) -> None:
    resp = call(
        h2,
        "DISCOVER",
        {"intent": "x"},
        task_id="task-451-probe",
        headers={"authority-scope": "agents:delegate documents:query"},
    )
    assert resp.status_code == 451 and resp.headers["agtp-status"] == "451"
    body = resp.json()
    assert body["error"]["code"] == "scope_violation" and body["task_id"] == "task-451-probe"
    records = [
        json.loads(line) for line in (server.data_dir / "audit.jsonl").read_text().splitlines()
    ]
    hits = [r for r in records if r.get("task_id") == "task-451-probe"]
    assert len(hits) == 1
    rec = hits[0]
    assert rec["event"] == "scope_violation" and rec["method"] == "DISCOVER"
    assert (
        rec["agent_id"] == IDENTITY["agent-id"] and rec["principal_id"] == IDENTITY["principal-id"]
    )
    assert rec["scope_presented"] == "agents:delegate documents:query"
    assert rec["scope_required"] == "discovery:query" and rec["time"]


@pytest.mark.parametrize(
    "header,code",
    [
        ("agent-id", "missing_agent_id"),
        ("principal-id", "missing_principal_id"),
        ("authority-scope", "missing_authority_scope"),
    ],
)
def test_missing_identity_header_is_400(h2: httpx.Client, header: str, code: str) -> None:
    resp = call(h2, "DISCOVER", {"intent": "x"}, headers={header: None})  # type: ignore[dict-item]
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == code


def test_malformed_json_is_400(h2: httpx.Client) -> None:
    resp = call(h2, "DISCOVER", None, body=b'{"method": "DISCOVER", "parameters": {"intent": "x",}')
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "malformed_json"


@pytest.mark.parametrize(
    "params,name",
    [
        ({"limit": 0}, "limit"),
        ({"limit": 100000}, "limit"),
        ({"trust_tier_min": 7}, "trust_tier_min"),
        ({"behavioral_trust_min": 2}, "behavioral_trust_min"),
    ],
)
def test_invalid_parameters_are_422_naming_the_parameter(
    h2: httpx.Client, params: dict[str, Any], name: str
) -> None:
    resp = call(h2, "DISCOVER", {"intent": "audit contracts", **params})
    assert resp.status_code == 422
    err = resp.json()["error"]
    assert err["code"] == f"invalid_{name}" and name in err["message"]


def test_post_agtp_with_method_header_and_http11(server: Any) -> None:
    with httpx.Client(base_url=server.url, timeout=20) as h1:  # plain HTTP/1.1
        resp = h1.post(
            "/agtp",
            content=orjson.dumps({"parameters": {"intent": "book a flight"}}),
            headers={**IDENTITY, "agtp-method": "DISCOVER"},
        )
        assert resp.http_version == "HTTP/1.1"
        assert resp.status_code == 200
        assert resp.json()["result"]["results"][0]["agent_label"] == "flight-booker"
        assert h1.request("DISCOVER", "/", content=b"{}", headers=IDENTITY).status_code == 200


def test_describe_returns_the_ans_manifest_with_its_key(h2: httpx.Client) -> None:
    from ans.governance.keys import TrustedKeys
    from ans.governance.signing import verify_document

    resp = h2.request("DESCRIBE", "/", content=b"")
    assert resp.status_code == 200
    doc = resp.json()["result"]
    jwks = h2.get("/.well-known/jwks.json").json()
    assert doc["document_type"] == "agtp-manifest"
    assert doc["public_key"] == jwks["keys"][0]
    assert verify_document(doc, TrustedKeys.from_jwks(jwks), "signature") == jwks["keys"][0]["kid"]


# -- ACTIVATE over the wire ------------------------------------------------------------------------


def _agents(h2: httpx.Client) -> int:
    return int(h2.get("/healthz").json()["agents"])


def _gov(**kw: str) -> dict[str, str]:
    return {
        "agent-id": "agtp://gov.example/agents/platform",
        "principal-id": "gov-op",
        "authority-scope": "discovery:register",
        **kw,
    }


def _manifest(key: SigningKey, label: str, **kw: Any) -> dict[str, Any]:
    uri = f"agtp://agtp.newco.example/agents/{label}"
    m: dict[str, Any] = {
        "document_type": "agtp-manifest",
        "schema_version": "1.0",
        "manifest_uri": uri,
        "canonical_id": hashlib.sha256(uri.encode()).hexdigest(),
        "agent_label": label,
        "org_domain": "newco.example",
        "governance_zone": "zone:public",
        "trust_tier": 1,
        "package_format": "nomo",
        "package_integrity_hash": "sha256:" + "cd" * 32,
        "lifecycle_state": "Active",
        "cert_status": "Active",
        "principal_org": "NewCo",
        "activated_at": "2026-02-01T00:00:00Z",
        "behavioral_trust_score": 0.95,
        "authority_scope_categories": ["astronomy:query"],
        "supported_methods": ["QUERY"],
        "job_description": "Identifies exoplanet transits in telescope light curves.",
    }
    m.update(kw)
    return sign_document(m, key, "signature")


def test_activate_refusals_leave_the_store_unchanged(h2: httpx.Client, test_gov_key: Any) -> None:
    key, _ = test_gov_key
    before = _agents(h2)
    good = _manifest(key, "transit-finder")
    cases = {
        "signature_invalid": dict(good, behavioral_trust_score=0.99),
        "unknown_signing_key": _manifest(SigningKey.generate(), "transit-finder"),
        "lifecycle_not_active": _manifest(key, "transit-finder", lifecycle_state="Suspended"),
        "manifest_missing_field": {
            k: v for k, v in _manifest(key, "transit-finder").items() if k != "job_description"
        },
    }
    for code, manifest in cases.items():
        resp = call(h2, "ACTIVATE", {"manifest": manifest, "capabilities": {}}, headers=_gov())
        assert 400 <= resp.status_code < 500, code
        assert resp.json()["error"]["code"] == code
    resp = call(
        h2, "ACTIVATE", {"manifest": good}, headers=_gov(**{"authority-scope": "discovery:query"})
    )
    assert resp.status_code == 451
    assert _agents(h2) == before
    probe = call(h2, "DESCRIBE", {"canonical_id": good["canonical_id"]})
    assert probe.status_code == 404
    found = call(h2, "DISCOVER", {"intent": "find exoplanet transits in light curves"}).json()[
        "result"
    ]
    assert "transit-finder" not in [r["agent_label"] for r in found["results"]]


def test_activate_then_discover(h2: httpx.Client, test_gov_key: Any) -> None:
    key, _ = test_gov_key
    m = _manifest(
        key, "exoplanet-hunter", job_description="Detects exoplanet transits in TESS light curves."
    )
    caps = {
        "supported_methods": ["QUERY"],
        "modalities": ["tabular"],
        "tools": ["lightkurve"],
        "zones_accepted": ["zone:public"],
        "tags": ["astronomy"],
        "examples": [
            {"id": "ex-1", "text": "Find transit signals in this TESS sector 14 light curve."}
        ],
    }
    resp = call(h2, "ACTIVATE", {"manifest": m, "capabilities": caps}, headers=_gov())
    assert resp.status_code == 200, resp.text
    assert resp.json()["result"]["canonical_id"] == m["canonical_id"]
    found = call(h2, "DISCOVER", {"intent": "detect exoplanet transits in light curves"}).json()[
        "result"
    ]
    assert found["results"][0]["agent_label"] == "exoplanet-hunter"
    described = call(h2, "DESCRIBE", {"canonical_id": m["canonical_id"]}).json()["result"]
    assert described["manifest"] == m and described["capabilities"]["tools"] == ["lightkurve"]


# -- bad input never 500s --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,method,body,headers,status,code",
    [
        ("binary", "DISCOVER", b"\xff\xfe\x00garbage", {}, 400, "malformed_json"),
        ("array", "DISCOVER", b"[1,2,3]", {}, 400, "invalid_body"),
        ("deep", "DISCOVER", b"[" * 5000 + b"]" * 5000, {}, 400, "malformed_json"),
        (
            "nan",
            "DISCOVER",
            b'{"parameters": {"behavioral_trust_min": NaN}}',
            {},
            400,
            "malformed_json",
        ),
        (
            "dup",
            "DISCOVER",
            b'{"parameters": {"limit": 1, "limit": 500}}',
            {},
            400,
            "malformed_json",
        ),
        (
            "huge",
            "DISCOVER",
            b'{"parameters": {"intent": "' + b"a" * 300_000 + b'"}}',
            {},
            400,
            "body_too_large",
        ),
        ("params", "DISCOVER", b'{"parameters": []}', {}, 422, "invalid_parameters"),
        ("intent", "DISCOVER", b'{"parameters": {"intent": {"x": 1}}}', {}, 422, "invalid_intent"),
        (
            "scope",
            "DISCOVER",
            b"{}",
            {"authority-scope": "Discovery:Query"},
            400,
            "invalid_authority_scope",
        ),
        (
            "version",
            "DISCOVER",
            b"{}",
            {"agtp-version": "AGTP/9.0"},
            400,
            "unsupported_agtp_version",
        ),
        (
            "ctype",
            "DISCOVER",
            b"{}",
            {"content-type": "text/html"},
            400,
            "unsupported_content_type",
        ),
        ("method", "FROBNICATE", b"{}", {}, 400, "unsupported_method"),
        ("mismatch", "DISCOVER", b'{"method": "ACTIVATE"}', {}, 400, "method_mismatch"),
        (
            "no-manifest",
            "ACTIVATE",
            b'{"parameters": {}}',
            {"authority-scope": "discovery:register"},
            422,
            "invalid_manifest",
        ),
        ("big-header", "DISCOVER", b"{}", {"agent-id": "a" * 2000}, 400, "invalid_agent_id"),
        (
            "task-id-crlf",
            "DISCOVER",
            b'{"task_id": "a\\r\\nSet-Cookie: pwn=1\\r\\nX-Injected: yes"}',
            {"task-id": None},
            400,
            "invalid_task_id",
        ),
        ("task-id-nul", "DISCOVER", b'{"task_id": "a\\u0000b"}', {}, 400, "invalid_task_id"),
        ("task-id-int", "DISCOVER", b'{"task_id": 7}', {}, 400, "invalid_task_id"),
    ],
)
def test_bad_input_gets_a_typed_4xx(
    h2: httpx.Client,
    name: str,
    method: str,
    body: bytes,
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    resp = call(h2, method, None, body=body, headers=headers)
    assert resp.status_code == status, resp.text
    assert "set-cookie" not in resp.headers and "x-injected" not in resp.headers
    err = resp.json()["error"]
    assert err["code"] == code and err["message"]
    assert code in ERROR_CODES  # one registry of codes
    assert call(h2, "DISCOVER", {"intent": "book a hotel"}).status_code == 200  # still serving


def test_unknown_path_get_is_404(h2: httpx.Client) -> None:
    resp = h2.get("/nope")
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"


# -- curl and the CLI, as a user would run them ----------------------------------------------------------


def _curl_has_http2() -> bool:
    curl = shutil.which("curl")
    if not curl:
        return False
    return "HTTP2" in subprocess.run([curl, "--version"], capture_output=True, text=True).stdout


@pytest.mark.skipif(not _curl_has_http2(), reason="curl with HTTP/2 support is not installed")
def test_readme_curl_example(server: Any) -> None:
    out = subprocess.run(
        [
            "curl",
            "-sS",
            "--http2-prior-knowledge",
            "-X",
            "DISCOVER",
            f"{server.url}/",
            "-H",
            "Agent-ID: agtp://agtp.acme.tld/agents/orchestrator",
            "-H",
            "Principal-ID: usr-chris-hood",
            "-H",
            "Authority-Scope: discovery:query agents:delegate",
            "-H",
            "Content-Type: application/agtp+json",
            "-d",
            '{"method":"DISCOVER","task_id":"task-disc-001","parameters":'
            '{"intent":"Audit smart contracts for security vulnerabilities","limit":5}}',
            "-w",
            "\n%{http_code} %{http_version}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    body, _, status = out.stdout.rpartition("\n")
    assert status == "200 2"
    assert json.loads(body)["result"]["results"][0]["agent_label"] == "solidity-auditor"


def _ans(*args: str) -> subprocess.CompletedProcess[str]:
    import sys
    from pathlib import Path

    return subprocess.run(
        [str(Path(sys.executable).with_name("ans")), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_discover_prints_a_verified_table(server: Any) -> None:
    out = _ans("discover", "audit Solidity smart contracts", "--server", server.url, "--limit", "3")
    assert out.returncode == 0, out.stderr
    assert "solidity-auditor@chainguard-audits.example" in out.stdout
    assert "signature: verified" in out.stdout


def test_cli_discover_reports_agtp_errors(server: Any) -> None:
    out = _ans("discover", "x", "--server", server.url, "--scope", "agents:delegate")
    assert out.returncode == 2 and "451 scope_violation" in out.stderr


def test_cli_governance_sign_and_activate(server: Any, test_gov_key: Any, tmp_path: Any) -> None:
    key, _ = test_gov_key
    pem = tmp_path / "gov.pem"
    key.save(pem)
    unsigned = {
        k: v
        for k, v in _manifest(
            key, "tide-predictor", job_description="Predicts harbour tide levels from gauge data."
        ).items()
        if k != "signature"
    }
    (tmp_path / "m.json").write_text(
        json.dumps({"manifest": unsigned, "capabilities": {"tags": ["oceanography"]}})
    )
    signed = _ans(
        "governance",
        "sign-manifest",
        str(tmp_path / "m.json"),
        "--key",
        str(pem),
        "--out",
        str(tmp_path / "signed.json"),
    )
    assert signed.returncode == 0, signed.stderr
    act = _ans("activate", str(tmp_path / "signed.json"), "--server", server.url)
    assert act.returncode == 0, act.stderr
    assert json.loads(act.stdout)["canonical_id"] == unsigned["canonical_id"]
    found = _ans("discover", "predict tide levels in the harbour", "--server", server.url)
    assert found.returncode == 0 and "tide-predictor@newco.example" in found.stdout


def test_cli_keygen_writes_a_0600_key_and_a_jwks(tmp_path: Any) -> None:
    out = _ans("governance", "keygen", "--key", str(tmp_path / "k.pem"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "k.pem").stat().st_mode & 0o777 == 0o600
    jwks = json.loads((tmp_path / "k.jwks.json").read_text())
    assert jwks["keys"][0]["kty"] == "EC" and "d" not in jwks["keys"][0]
    assert _ans("governance", "keygen", "--key", str(tmp_path / "k.pem")).returncode == 2


def test_concurrent_discovers_while_activating(server: Any, test_gov_key: Any) -> None:
    """Many DISCOVER streams on one HTTP/2 connection race ACTIVATEs (which run
    in a worker thread): no 5xx, every answer signed, every activated agent
    visible once its 200 has been received."""
    import asyncio

    key, _ = test_gov_key
    manifests = [
        _manifest(
            key,
            f"glacier-monitor-{i}",
            job_description=f"Monitors glacier melt in basin {i} from satellite radar.",
        )
        for i in range(6)
    ]

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, http1=False, http2=True, timeout=30) as c:

            async def disc(i: int) -> httpx.Response:
                body = orjson.dumps(
                    {"parameters": {"intent": "monitor glacier melt from satellite radar"}}
                )
                return await c.request(
                    "DISCOVER", "/", content=body, headers={**IDENTITY, "task-id": f"c{i}"}
                )

            async def act(m: dict[str, Any]) -> httpx.Response:
                body = orjson.dumps(
                    {"parameters": {"manifest": m, "capabilities": {"tags": ["glaciology"]}}}
                )
                return await c.request(
                    "ACTIVATE", "/", content=body, headers={**IDENTITY, **_gov()}
                )

            jobs = [disc(i) for i in range(60)] + [act(m) for m in manifests]
            return list(await asyncio.gather(*jobs))

    responses = asyncio.run(run())
    assert all(r.status_code == 200 for r in responses), {r.status_code for r in responses}
    assert all(r.http_version == "HTTP/2" for r in responses)
    assert all("ans_signature" in r.json()["result"] for r in responses[:60])
    with httpx.Client(base_url=server.url, http1=False, http2=True, timeout=20) as c:
        after = call(
            c, "DISCOVER", {"intent": "monitor glacier melt from satellite radar", "limit": 20}
        )
    found = {r["agent_label"] for r in after.json()["result"]["results"]}
    assert {m["agent_label"] for m in manifests} <= found
