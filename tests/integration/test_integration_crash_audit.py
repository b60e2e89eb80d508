"""kill -9 during a burst of ACTIVATEs (issue 23.1), three rounds on one data
directory: after each restart every acknowledged ACTIVATE is served, every
stored agent has its ``activation`` audit record, and ``ans audit verify``
passes. A crash between a commit and its audit append is completed from the
registry's audit outbox at start-up."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from ans.governance.keys import SigningKey
from ans.governance.signing import sign_document

from tools.launcher import RunningServer, start_server, stop_server

pytestmark = pytest.mark.integration

ANS = Path(sys.executable).with_name("ans")
GOVERNANCE = {
    "agent-id": "agtp://gov.example/agents/platform",
    "principal-id": "gov-operator",
    "authority-scope": "discovery:register",
    "content-type": "application/agtp+json",
}
QUERY = {**GOVERNANCE, "authority-scope": "discovery:query"}
CAPS = {"supported_methods": ["QUERY"], "modalities": ["text"]}
JOBS = (
    "Audits Solidity smart contracts for reentrancy bugs.",
    "Translates legal contracts between German and English.",
    "Reconciles invoices against purchase orders.",
    "Summarises clinical trial reports for physicians.",
)
ROUNDS = 3
WORKERS = 12
# The kill lands once this many ACTIVATEs were acknowledged in the round
# (plus the round number, so the three kills land at different points).
KILL_AFTER = 25


def manifest(n: int, key: SigningKey) -> dict[str, Any]:
    label = f"burst-agent-{n}"
    uri = f"agtp://agtp.burst.example/agents/{label}"
    return sign_document(
        {
            "document_type": "agtp-manifest",
            "schema_version": "1.0",
            "manifest_uri": uri,
            "canonical_id": hashlib.sha256(uri.encode()).hexdigest(),
            "agent_label": label,
            "org_domain": "burst.example",
            "governance_zone": "zone:public",
            "trust_tier": 1,
            "package_format": "nomo",
            "package_integrity_hash": "sha256:" + "ab" * 32,
            "lifecycle_state": "Active",
            "cert_status": "Active",
            "principal_org": "Burst Corp",
            "activated_at": "2026-01-15T09:00:00Z",
            "behavioral_trust_score": 0.9,
            "authority_scope_categories": ["documents:query"],
            "supported_methods": ["QUERY"],
            "job_description": f"{JOBS[n % len(JOBS)]} (#{n})",
        },
        key,
        "signature",
    )


def body(method: str, params: dict[str, Any]) -> bytes:
    return orjson.dumps({"method": method, "task_id": "task-crash", "parameters": params})


async def burst(srv: RunningServer, key: SigningKey, first: int, kill_after: int) -> list[str]:
    """ACTIVATEs from WORKERS connections until the server is killed (after
    ``kill_after`` acknowledgements); the acknowledged canonical ids."""
    acked: list[str] = []
    counter = iter(range(first, first + 100_000))

    async def worker() -> None:
        async with httpx.AsyncClient(base_url=srv.url, http2=True, http1=False, timeout=30) as c:
            while True:
                m = manifest(next(counter), key)
                params = {"manifest": m, "capabilities": CAPS}
                try:
                    r = await c.request(
                        "ACTIVATE", "/", headers=GOVERNANCE, content=body("ACTIVATE", params)
                    )
                except httpx.HTTPError:
                    return  # the server is gone: this one was never acknowledged
                assert r.status_code == 200, r.text
                acked.append(m["canonical_id"])
                if len(acked) == kill_after:
                    srv.proc.kill()  # SIGKILL, with the other workers' requests in flight

    await asyncio.gather(*(worker() for _ in range(WORKERS)))
    srv.proc.wait(timeout=30)
    return acked


def served(srv: RunningServer, cids: list[str]) -> list[str]:
    """The ids among ``cids`` that DESCRIBE does not answer with 200."""
    missing = []
    with httpx.Client(base_url=srv.url, http2=True, http1=False, timeout=30) as c:
        for cid in cids:
            r = c.request(
                "DESCRIBE", "/", headers=QUERY, content=body("DESCRIBE", {"canonical_id": cid})
            )
            if r.status_code != 200:
                missing.append(cid)
    return missing


def stored_ids(data: Path) -> set[str]:
    db = sqlite3.connect(f"file:{data / 'registry.sqlite3'}?mode=ro", uri=True)
    try:
        return {row[0] for row in db.execute("SELECT canonical_id FROM agents")}
    finally:
        db.close()


def activation_records(data: Path) -> set[str]:
    lines = (data / "audit.jsonl").read_bytes().splitlines()
    return {
        rec["canonical_id"]
        for rec in map(orjson.loads, lines)
        if rec["event"] == "activation" and rec.get("status") == 200
    }


def test_kill_9_during_activate_burst_leaves_registry_and_audit_log_in_step(
    tmp_path: Path, test_gov_key: tuple[SigningKey, Path]
) -> None:
    key, jwks = test_gov_key
    data = tmp_path / "data"
    cfg = tmp_path / "ans.toml"
    cfg.write_text("[rate_limit]\nenabled = false\n")
    args = ("--governance-jwks", str(jwks), "--config", str(cfg))
    acked: list[str] = []
    figures = []
    srv = start_server(data, *args)
    try:
        for rnd in range(ROUNDS):
            got = asyncio.run(burst(srv, key, rnd * 100_000, KILL_AFTER + rnd))
            acked += got
            srv = start_server(data, *args)  # the restart after the crash
            recovered = sum("audit log completed from the registry" in x for x in srv.output)
            stored = stored_ids(data)
            audited = activation_records(data)
            figures.append((rnd + 1, len(got), len(stored), recovered))
            assert served(srv, acked) == [], f"round {rnd + 1}: acknowledged but not served"
            assert stored - audited == set(), f"round {rnd + 1}: stored without an audit record"
            verify = subprocess.run(
                [str(ANS), "audit", "verify", "--data-dir", str(data)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert verify.returncode == 0, verify.stdout + verify.stderr
    finally:
        stop_server(srv)
    # round, acknowledged, stored in all, start-ups that completed the audit log
    print("crash rounds:", figures)
