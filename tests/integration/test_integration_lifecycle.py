"""Lifecycle events against a real server: REVOKE under concurrent DISCOVER
load, the ``ans lifecycle`` CLI, and ``ans audit verify`` on the server's log."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from ans.governance.keys import SigningKey
from ans.governance.lifecycle import make_event
from ans.governance.signing import sign_document

pytestmark = pytest.mark.integration

QUERY = {
    "agent-id": "agtp://agtp.finco.example/agents/orchestrator",
    "principal-id": "usr-1",
    "authority-scope": "discovery:query",
    "content-type": "application/agtp+json",
}
GOVERNANCE = {**QUERY, "agent-id": "agtp://gov.example/agents/platform"}
GOVERNANCE["authority-scope"] = "discovery:register"
CAPS = {"supported_methods": ["QUERY"], "modalities": ["text"], "tags": ["smart-contracts"]}
JOBS = {
    "solidity-auditor": "Audits Solidity smart contracts for reentrancy and overflow bugs.",
    "vyper-auditor": "Audits Vyper smart contracts for security vulnerabilities.",
    "defi-reviewer": "Reviews DeFi protocol smart contracts for economic exploits.",
}
ANS = Path(sys.executable).with_name("ans")


def manifest(label: str, key: SigningKey) -> dict[str, Any]:
    uri = f"agtp://agtp.chain.example/agents/{label}"
    doc = {
        "document_type": "agtp-manifest",
        "schema_version": "1.0",
        "manifest_uri": uri,
        "canonical_id": hashlib.sha256(uri.encode()).hexdigest(),
        "agent_label": label,
        "org_domain": "chain.example",
        "governance_zone": "zone:finance",
        "trust_tier": 1,
        "package_format": "nomo",
        "package_integrity_hash": "sha256:" + "ab" * 32,
        "lifecycle_state": "Active",
        "cert_status": "Active",
        "principal_org": "Chain Corp",
        "activated_at": "2026-01-15T09:00:00Z",
        "behavioral_trust_score": 0.95,
        "authority_scope_categories": ["code:analyze"],
        "supported_methods": ["QUERY"],
        "job_description": JOBS[label],
    }
    return sign_document(doc, key, "signature")


def body(method: str, params: dict[str, Any]) -> bytes:
    return orjson.dumps({"method": method, "task_id": "task-lc", "parameters": params})


@pytest.fixture
def ans(
    tmp_path: Path, server_factory: Callable[..., Any], test_gov_key: tuple[SigningKey, Path]
) -> dict[str, Any]:
    key, jwks = test_gov_key
    cfg = tmp_path / "ans.toml"
    cfg.write_text("[rate_limit]\nenabled = false\n")  # the load below floods on purpose
    srv = server_factory(
        tmp_path / "data", "--governance-jwks", str(jwks), "--config", str(cfg)
    )
    ids = {}
    with httpx.Client(base_url=srv.url, http1=False, http2=True, timeout=30) as c:
        for label in JOBS:
            m = manifest(label, key)
            r = c.request(
                "ACTIVATE", "/", headers=GOVERNANCE, content=body("ACTIVATE", {"manifest": m, "capabilities": CAPS})
            )
            assert r.status_code == 200, r.text
            ids[label] = m["canonical_id"]
    return {"srv": srv, "ids": ids, "key": key}


async def _revoke_under_load(url: str, target: str, event: dict[str, Any]) -> dict[str, Any]:
    """Concurrent DISCOVERs (own HTTP/2 connections) while one REVOKE is sent.
    Returns each DISCOVER's start time and whether it returned the target."""
    seen: list[tuple[float, bool]] = []
    revoked_at: list[float] = []
    stop = asyncio.Event()
    q = body("DISCOVER", {"intent": "audit smart contracts for security bugs", "limit": 10})

    async def worker() -> None:
        async with httpx.AsyncClient(base_url=url, http1=False, http2=True, timeout=30) as c:
            for _ in range(400):  # bounded; normally stopped long before
                if stop.is_set():
                    return
                started = time.monotonic()
                r = await c.request("DISCOVER", "/", headers=QUERY, content=q)
                assert r.status_code == 200, r.text
                cids = {x["canonical_id"] for x in r.json()["result"]["results"]}
                seen.append((started, target in cids))

    async def revoker() -> None:
        async with httpx.AsyncClient(base_url=url, http1=False, http2=True, timeout=30) as c:
            while len(seen) < 30:  # let the load run first
                await asyncio.sleep(0.01)
            r = await c.request(
                "LIFECYCLE", "/", headers=GOVERNANCE, content=body("LIFECYCLE", {"event": event})
            )
            revoked_at.append(time.monotonic())  # the REVOKE response is in hand
            assert r.status_code == 200, r.text
            assert r.json()["result"]["indexed"] is False
            while len(seen) < 150:
                await asyncio.sleep(0.01)
            stop.set()

    await asyncio.wait_for(asyncio.gather(revoker(), *(worker() for _ in range(6))), 120)
    return {"seen": seen, "revoked_at": revoked_at[0]}


def test_no_discover_started_after_revoke_returns_the_agent(ans: dict[str, Any]) -> None:
    target = ans["ids"]["solidity-auditor"]
    event = make_event(
        "REVOKE", target, ans["key"], datetime.now(UTC), event_id=f"evt-{uuid.uuid4().hex}"
    )
    out = asyncio.run(_revoke_under_load(ans["srv"].url, target, event))
    before = [hit for started, hit in out["seen"] if started < out["revoked_at"]]
    after = [hit for started, hit in out["seen"] if started > out["revoked_at"]]
    assert any(before), "the agent was served before the REVOKE (else the test proves nothing)"
    assert len(after) >= 50
    assert not any(after), "a DISCOVER that started after the REVOKE returned the agent"
    # and no later ACTIVATE of that canonical id succeeds, not even a newer manifest
    key = ans["key"]
    newer = {**manifest("solidity-auditor", key), "last_updated": "2026-11-01T00:00:00Z"}
    newer = sign_document({k: v for k, v in newer.items() if k != "signature"}, key, "signature")
    with httpx.Client(base_url=ans["srv"].url, http1=False, http2=True, timeout=30) as c:
        for m in (manifest("solidity-auditor", key), newer):
            r = c.request(
                "ACTIVATE", "/", headers=GOVERNANCE, content=body("ACTIVATE", {"manifest": m, "capabilities": CAPS})
            )
            assert r.status_code == 410
            assert r.json()["error"]["code"] == "agent_retired"


def run_ans(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ANS), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_lifecycle_cli_and_audit_verify(
    ans: dict[str, Any], tmp_path: Path, test_gov_key: tuple[SigningKey, Path]
) -> None:
    srv, ids = ans["srv"], ans["ids"]
    pem = tmp_path / "gov.pem"
    test_gov_key[0].save(pem)
    common = ["--server", srv.url, "--governance-key", str(pem)]
    r = run_ans("lifecycle", "suspend", ids["vyper-auditor"], *common, "--reason", "review")
    assert r.returncode == 0, r.stderr
    assert orjson.loads(r.stdout)["lifecycle_state"] == "Suspended"
    r = run_ans("lifecycle", "reinstate", ids["vyper-auditor"], *common)
    assert r.returncode == 0 and orjson.loads(r.stdout)["lifecycle_state"] == "Active"
    r = run_ans("lifecycle", "deprecate", ids["defi-reviewer"], *common)
    assert r.returncode == 0 and orjson.loads(r.stdout)["tombstoned"] is True
    r = run_ans("lifecycle", "reinstate", ids["defi-reviewer"], *common)
    assert r.returncode == 2 and "410 agent_retired" in r.stderr
    rogue = tmp_path / "rogue.pem"
    SigningKey.generate().save(rogue)
    r = run_ans("lifecycle", "revoke", ids["vyper-auditor"], "--server", srv.url,
                "--governance-key", str(rogue))
    assert r.returncode == 2 and "401 unknown_signing_key" in r.stderr

    log = srv.data_dir / "audit.jsonl"
    records = [orjson.loads(x) for x in log.read_bytes().splitlines()]
    events = [(r["event"], r.get("lifecycle")) for r in records]
    assert ("lifecycle_event", "SUSPEND") in events and ("lifecycle_event", "DEPRECATE") in events
    assert ("lifecycle_refused", "REINSTATE") in events and ("lifecycle_refused", "REVOKE") in events

    r = run_ans("audit", "verify", "--data-dir", str(srv.data_dir))
    assert r.returncode == 0, r.stderr
    assert f"intact, {len(records)} records" in r.stdout

    lines = log.read_bytes().splitlines(keepends=True)
    assert len(lines) >= 6

    def tampered(name: str, new: list[bytes]) -> subprocess.CompletedProcess[str]:
        copy = tmp_path / f"{name}.jsonl"
        copy.write_bytes(b"".join(new))
        return run_ans("audit", "verify", "--file", str(copy))

    rec = orjson.loads(lines[3])
    rec["agent_id"] = "agtp://someone.else/agents/x"
    edited_clean = list(lines)
    edited_clean[3] = orjson.dumps(rec, option=orjson.OPT_SORT_KEYS) + b"\n"
    deleted = lines[:2] + lines[3:]
    swapped = list(lines)
    swapped[2], swapped[3] = swapped[3], swapped[2]
    for name, new, expect in (
        ("edited", edited_clean, "line 4: edited"),
        ("deleted", deleted, "line 3: deleted"),
        ("swapped", swapped, "line 3: reordered"),
    ):
        r = tampered(name, new)
        assert r.returncode == 1, (name, r.stdout, r.stderr)
        assert expect in r.stderr, (name, r.stderr)
    shutil.copy(log, tmp_path / "intact.jsonl")
    assert run_ans("audit", "verify", "--file", str(tmp_path / "intact.jsonl")).returncode == 0
