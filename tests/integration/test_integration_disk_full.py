"""A real full disk (issue 23.1): ``ans serve`` runs with its data directory
on a small tmpfs mounted in its own user + mount namespace (``unshare -rm``);
the test fills that file system through ``/proc/PID/root``. Every ACTIVATE
is answered 200 (served, with its audit record) or 503 ``storage_unavailable``
(not applied); refusals keep 451; once space is back, changes work again, the
audit chain verifies and every stored agent has its record."""

from __future__ import annotations

import errno
import hashlib
import shutil
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
MOUNT = 'mount -t tmpfs -o size=64m tmpfs "$0" && exec "$@"'
GOVERNANCE = {
    "agent-id": "agtp://gov.example/agents/platform",
    "principal-id": "gov-operator",
    "authority-scope": "discovery:register",
    "content-type": "application/agtp+json",
}
QUERY = {**GOVERNANCE, "authority-scope": "discovery:query"}
CAPS = {"supported_methods": ["QUERY"], "modalities": ["text"]}


def can_mount(tmp: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o size=1m tmpfs "$0"', str(tmp)],
        capture_output=True,
        timeout=30,
    )
    return probe.returncode == 0


def manifest(n: int, key: SigningKey) -> dict[str, Any]:
    uri = f"agtp://agtp.full.example/agents/agent-{n}"
    return sign_document(
        {
            "document_type": "agtp-manifest",
            "schema_version": "1.0",
            "manifest_uri": uri,
            "canonical_id": hashlib.sha256(uri.encode()).hexdigest(),
            "agent_label": f"agent-{n}",
            "org_domain": "full.example",
            "governance_zone": "zone:public",
            "trust_tier": 1,
            "package_format": "nomo",
            "package_integrity_hash": "sha256:" + "ab" * 32,
            "lifecycle_state": "Active",
            "cert_status": "Active",
            "principal_org": "Full Corp",
            "activated_at": "2026-01-15T09:00:00Z",
            "behavioral_trust_score": 0.9,
            "authority_scope_categories": ["documents:query"],
            "supported_methods": ["QUERY"],
            "job_description": f"Reconciles invoices against purchase orders, desk {n}.",
        },
        key,
        "signature",
    )


def send(c: httpx.Client, method: str, headers: dict[str, str], params: Any) -> httpx.Response:
    body = orjson.dumps({"method": method, "task_id": "task-full", "parameters": params})
    return c.request(method, "/", headers=headers, content=body)


def fill(path: Path) -> int:
    """Write ``path`` until the file system is full; the bytes written."""
    written = 0
    with open(path, "wb", buffering=0) as fh:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    written += fh.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return written


def served(c: httpx.Client, cid: str) -> bool:
    return send(c, "DESCRIBE", QUERY, {"canonical_id": cid}).status_code == 200


def test_full_disk_gives_truthful_answers_and_an_intact_chain(
    tmp_path: Path, test_gov_key: tuple[SigningKey, Path]
) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    if not can_mount(probe):
        pytest.skip("cannot mount a tmpfs in a user namespace here (unshare -rm)")
    key, jwks = test_gov_key
    data = tmp_path / "data"
    data.mkdir()
    cfg = tmp_path / "ans.toml"
    cfg.write_text("[rate_limit]\nenabled = false\n")
    srv: RunningServer = start_server(
        data,
        "--governance-jwks",
        str(jwks),
        "--config",
        str(cfg),
        wrapper=("unshare", "-rm", "sh", "-c", MOUNT, str(data)),
    )
    # The server's view of its data directory (the tmpfs, in its namespace).
    root = Path(f"/proc/{srv.proc.pid}/root") / data.relative_to("/")
    acked: list[str] = []
    unavailable: list[str] = []
    try:
        with httpx.Client(base_url=srv.url, http2=True, http1=False, timeout=30) as c:
            first = manifest(0, key)
            assert send(c, "ACTIVATE", GOVERNANCE, {"manifest": first, "capabilities": CAPS}).status_code == 200
            acked.append(first["canonical_id"])
            assert fill(root / "filler") > 0
            for n in range(1, 200):
                m = manifest(n, key)
                r = send(c, "ACTIVATE", GOVERNANCE, {"manifest": m, "capabilities": CAPS})
                assert r.status_code in (200, 503), r.text
                if r.status_code == 503:
                    assert r.json()["error"]["code"] == "storage_unavailable"
                    unavailable.append(m["canonical_id"])
                    if len(unavailable) == 3:
                        break
                else:
                    acked.append(m["canonical_id"])
            assert len(unavailable) == 3, "the full disk never refused a change"
            for _ in range(20):  # refusals keep their status, audit log full or not
                r = send(c, "ACTIVATE", QUERY, {"manifest": first, "capabilities": CAPS})
                assert r.status_code == 451, r.text
            for cid in acked:
                assert served(c, cid)
            for cid in unavailable:
                assert not served(c, cid)  # nothing applied
            (root / "filler").unlink()
            late = manifest(500, key)
            r = send(c, "ACTIVATE", GOVERNANCE, {"manifest": late, "capabilities": CAPS})
            assert r.status_code == 200, r.text
            acked.append(late["canonical_id"])
            assert served(c, late["canonical_id"])
        verify = subprocess.run(
            [str(ANS), "audit", "verify", "--file", str(root / "audit.jsonl")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert verify.returncode == 0, verify.stdout + verify.stderr
        records = [orjson.loads(x) for x in (root / "audit.jsonl").read_bytes().splitlines()]
        activated = {r["canonical_id"] for r in records if r["event"] == "activation"}
        copy = tmp_path / "copy"  # SQLite resolves /proc/PID/root: read a copy (server idle)
        copy.mkdir()
        for name in ("registry.sqlite3", "registry.sqlite3-wal"):
            if (root / name).exists():
                shutil.copyfile(root / name, copy / name)
        db = sqlite3.connect(copy / "registry.sqlite3")
        stored = {row[0] for row in db.execute("SELECT canonical_id FROM agents")}
        db.close()
        assert set(acked) <= stored and stored <= activated
        assert not stored & set(unavailable)
        log = "".join(srv.output)
        assert "write failed" in log  # loud in the operational log
        print(
            "disk full:",
            {
                "acked": len(acked),
                "storage_unavailable": len(unavailable),
                "registry_write_failed": log.count("registry write failed"),
                "audit_write_failed": log.count("audit log write failed"),
                "records": len(records),
            },
        )
    finally:
        stop_server(srv)
