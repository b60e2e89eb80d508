"""Routing alternatives on the wire: a real ``ans serve`` on a loopback port,
agents registered by ACTIVATE, DISCOVER with ``preferred_agent`` over HTTP/2,
and a suspension (store state) that survives a restart."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from ans.governance.keys import SigningKey

from ans.client import verify_discover_result
from ans.store import SQLiteStore
from tools.launcher import stop_server

pytestmark = pytest.mark.integration

IDENTITY = {
    "agtp-version": "AGTP/1.0",
    "agent-id": "agtp://agtp.finco.example/agents/orchestrator",
    "principal-id": "usr-routing",
    "authority-scope": "discovery:query",
    "content-type": "application/agtp+json",
}
GOV = {
    **IDENTITY,
    "agent-id": "agtp://gov.example/agents/p",
    "authority-scope": "discovery:register",
}
AGENTS = {
    "vyper-auditor": (
        0.70,
        "Audits Vyper smart contracts for security vulnerabilities.",
        ["smart-contracts", "security-audit"],
    ),
    "solidity-auditor": (
        0.80,
        "Audits Solidity smart contracts for reentrancy and overflow bugs.",
        ["smart-contracts", "security-audit"],
    ),
    "legal-translator": (
        0.99,
        "Translates legal contracts between German and English.",
        ["translation", "legal"],
    ),
}


def call(client: httpx.Client, method: str, params: dict[str, Any], headers: dict[str, str]) -> Any:
    body = orjson.dumps({"method": method, "task_id": "t-route", "parameters": params})
    return client.request(method, "/", content=body, headers={**headers, "task-id": "t-route"})


def discover(client: httpx.Client, params: dict[str, Any]) -> dict[str, Any]:
    resp = call(client, "DISCOVER", params, IDENTITY)
    assert resp.status_code == 200, resp.text
    assert resp.http_version == "HTTP/2"
    result: dict[str, Any] = resp.json()["result"]
    jwks = client.get("/.well-known/jwks.json").json()
    verify_discover_result(result, jwks, params)  # signed, and bound to these parameters
    return result


def test_routing_fields_on_the_wire(
    tmp_path: Path,
    server_factory: Any,
    test_gov_key: tuple[SigningKey, Path],
    make_manifest: Callable[..., dict[str, Any]],
) -> None:
    key, jwks_path = test_gov_key
    data = tmp_path / "ans"
    srv = server_factory(data, "--governance-jwks", str(jwks_path))
    ids: dict[str, str] = {}
    with httpx.Client(base_url=srv.url, http1=False, http2=True, timeout=20) as c:
        for label, (behavioral, job, tags) in AGENTS.items():
            m = make_manifest(
                label, key=key, behavioral_trust_score=behavioral, job_description=job
            )
            caps = {"supported_methods": ["QUERY"], "modalities": ["text"], "tags": tags}
            resp = call(c, "ACTIVATE", {"manifest": m, "capabilities": caps}, GOV)
            assert resp.status_code == 200, resp.text
            ids[label] = m["canonical_id"]
        vyper = ids["vyper-auditor"]

        # Available: first although it ranks last.
        got = discover(c, {"preferred_agent": vyper})
        assert [r["agent_label"] for r in got["results"]] == [
            "vyper-auditor",
            "legal-translator",
            "solidity-auditor",
        ]
        assert got["routing"] == {"preferred_agent": vyper, "available": True}

        # Below the caller's floor: the most equivalent agent takes the routing position.
        got = discover(c, {"preferred_agent": vyper, "behavioral_trust_min": 0.75})
        first = got["results"][0]
        assert first["agent_label"] == "solidity-auditor"
        assert first["routing_reason"] == "below_thresholds"
        assert first["alternative_to"] == vyper
        assert 0.2 <= first["equivalent_confidence"] <= 1.0
        assert got["routing"] == {
            "preferred_agent": vyper,
            "available": False,
            "routing_reason": "below_thresholds",
            "alternative": ids["solidity-auditor"],
            "equivalent_confidence": first["equivalent_confidence"],
        }

        # Unknown agent; and a malformed one is a typed 422.
        got = discover(c, {"preferred_agent": "0" * 64})
        assert got["routing"]["routing_reason"] == "not_indexed"
        resp = call(c, "DISCOVER", {"preferred_agent": "not a canonical id"}, IDENTITY)
        assert resp.status_code == 422
        assert resp.json()["error"]["code"] == "invalid_preferred_agent"

    # The CLI sends it and says what happened.
    out = subprocess.run(
        [
            str(Path(sys.executable).with_name("ans")),
            "discover",
            "audit smart contracts",
            "--server",
            srv.url,
            "--prefer",
            vyper,
            "--behavioral-trust-min",
            "0.75",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert (
        f"routing: preferred {vyper[:16]} unavailable (below_thresholds); #1 is the "
        f"alternative {ids['solidity-auditor'][:16]}" in out.stdout
    )
    assert "signature: verified" in out.stdout

    # Suspend in the store (what the governance platform's SUSPEND leaves
    # behind) and restart: the agent stays out of the index and routing says why.
    stop_server(srv)
    store = SQLiteStore(data / "registry.sqlite3")
    row = store.get(vyper)
    assert row is not None
    store.upsert(replace(row, lifecycle_state="Suspended"))
    store.close()
    srv = server_factory(data, "--governance-jwks", str(jwks_path))
    with httpx.Client(base_url=srv.url, http1=False, http2=True, timeout=20) as c:
        got = discover(c, {"preferred_agent": vyper})
        assert [r["agent_label"] for r in got["results"]] == [
            "solidity-auditor",
            "legal-translator",
        ]
        assert got["results"][0]["routing_reason"] == "suspended"
        assert got["routing"]["routing_reason"] == "suspended"
        assert got["routing"]["alternative"] == ids["solidity-auditor"]
