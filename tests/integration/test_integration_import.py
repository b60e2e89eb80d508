"""``ans import`` and snapshot-based cold start against real servers on
loopback: import -> serve (from the snapshot when the index can write one)
answers DISCOVER exactly like a server that rebuilt; changes made after the
snapshot survive kill -9; a corrupt snapshot costs a rebuild, never the
start-up; a running server's data directory cannot be imported into."""

from __future__ import annotations

import subprocess
import sys
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

from ans.matcher import CapabilityIndex
from tools.launcher import stop_server

pytestmark = pytest.mark.integration

ANS = Path(sys.executable).with_name("ans")
QUERY = {
    "agent-id": "agtp://agtp.o.example/agents/orchestrator",
    "principal-id": "usr-1",
    "authority-scope": "discovery:query zone:finance",
    "content-type": "application/agtp+json",
}
GOVERNANCE = {**QUERY, "authority-scope": "discovery:register"}
ZONES = ["zone:public", "zone:finance", "zone:partner"]
JOBS = [
    "Audits Solidity smart contracts for reentrancy bugs.",
    "Translates legal contracts between German and English.",
    "Assigns ICD-10 codes to clinical notes.",
    "Reconciles invoices against purchase orders.",
]
QUERIES: list[dict[str, Any]] = [
    {"limit": 20, "trust_tier_min": 3},
    {"intent": "audit smart contracts for reentrancy", "limit": 10, "trust_tier_min": 3},
    {"intent": "translate a contract", "governance_zone": "zone:finance", "limit": 5},
]
SNAPSHOTS = hasattr(CapabilityIndex, "save") and hasattr(CapabilityIndex, "load")


def body(method: str, params: dict[str, Any]) -> bytes:
    return orjson.dumps({"method": method, "task_id": "t-imp", "parameters": params})


def answers(url: str) -> list[dict[str, Any]]:
    out = []
    with httpx.Client(base_url=url, http1=False, http2=True, timeout=30) as c:
        for q in QUERIES:
            r = c.request("DISCOVER", "/", headers=QUERY, content=body("DISCOVER", q))
            assert r.status_code == 200, r.text
            res = r.json()["result"]
            out.append(
                {
                    k: v
                    for k, v in res.items()
                    if k not in ("query_id", "generated_at", "ans_signature")
                }
            )
    return out


def health(url: str) -> dict[str, Any]:
    got: dict[str, Any] = httpx.get(url + "/healthz").json()
    return got


def kill9(srv: Any) -> None:
    srv.proc.kill()
    srv.proc.wait(timeout=10)


@pytest.fixture
def imported(
    tmp_path: Path,
    make_manifest: Callable[..., dict[str, Any]],
    test_gov_key: tuple[SigningKey, Path],
) -> dict[str, Any]:
    key, jwks = test_gov_key
    lines = []
    for i in range(200):
        m = make_manifest(
            f"imp-{i:03d}",
            key=key,
            trust_tier=1 + i % 3,
            behavioral_trust_score=[0.7, 0.8, 0.9][i % 3],
            governance_zone=ZONES[i % 3],
            job_description=f"{JOBS[i % 4]} Number {i}.",
        )
        lines.append(orjson.dumps({"manifest": m, "capabilities": {"tags": ["t"]}}))
    src = tmp_path / "agents.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    cfg = tmp_path / "ans.toml"
    cfg.write_text("[rate_limit]\nenabled = false\n")
    data = tmp_path / "data"
    out = subprocess.run(
        [
            str(ANS),
            "import",
            str(src),
            "--data-dir",
            str(data),
            "--config",
            str(cfg),
            "--governance-jwks",
            str(jwks),
            "--batch",
            "64",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "imported 200, unchanged 0, refused 0" in out.stdout
    return {
        "data": data,
        "args": ("--governance-jwks", str(jwks), "--config", str(cfg)),
        "key": key,
        "src": src,
        "ids": [orjson.loads(x)["manifest"]["canonical_id"] for x in lines],
    }


def test_import_then_serve_answers_like_a_rebuild_and_keeps_changes_after_kill9(
    imported: dict[str, Any],
    server_factory: Callable[..., Any],
    make_manifest: Callable[..., dict[str, Any]],
) -> None:
    data, args = imported["data"], imported["args"]
    srv = server_factory(data, *args)
    h = health(srv.url)
    assert h["agents"] == 200 and h["indexed"] == 200
    assert h["index_loaded_from"] == ("snapshot" if SNAPSHOTS else "rebuild")
    first = answers(srv.url)
    assert all(a["results"] for a in first)
    # The lock: no import into a served data directory.
    busy = subprocess.run(
        [str(ANS), "import", str(imported["src"]), "--data-dir", str(data), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert busy.returncode == 2 and "in use" in busy.stderr
    # Changes after the snapshot: one ACTIVATE, one REVOKE, then kill -9 (no clean shutdown).
    new = make_manifest(
        "late-arrival",
        key=imported["key"],
        governance_zone="zone:finance",
        trust_tier=1,
        behavioral_trust_score=0.99,
        job_description="Audits Solidity smart contracts for reentrancy bugs.",
    )
    gone = imported["ids"][0]
    with httpx.Client(base_url=srv.url, http1=False, http2=True, timeout=30) as c:
        r = c.request(
            "ACTIVATE",
            "/",
            headers=GOVERNANCE,
            content=body("ACTIVATE", {"manifest": new, "capabilities": {}}),
        )
        assert r.status_code == 200, r.text
        ev = make_event(
            "REVOKE", gone, imported["key"], datetime.now(UTC), event_id=f"evt-{uuid.uuid4().hex}"
        )
        r = c.request(
            "LIFECYCLE", "/", headers=GOVERNANCE, content=body("LIFECYCLE", {"event": ev})
        )
        assert r.status_code == 200, r.text
    changed = answers(srv.url)
    kill9(srv)
    again = server_factory(data, *args)
    assert health(again.url)["agents"] == 200  # +1 -1
    after = answers(again.url)
    assert after == changed
    ids = {r["canonical_id"] for a in after for r in a["results"]}
    assert new["canonical_id"] in ids and gone not in ids
    kill9(again)
    # Without any snapshot: a full rebuild gives the same bytes.
    import shutil

    shutil.rmtree(data / "index", ignore_errors=True)
    rebuilt = server_factory(data, *args)
    assert health(rebuilt.url)["index_loaded_from"] == "rebuild"
    assert answers(rebuilt.url) == changed


def test_a_corrupt_snapshot_costs_a_rebuild_not_the_start(
    imported: dict[str, Any], server_factory: Callable[..., Any]
) -> None:
    data, args = imported["data"], imported["args"]
    index = data / "index"
    index.mkdir(exist_ok=True)
    for f in [*index.iterdir(), index / "meta.json"]:
        if f.is_file() or not f.exists():
            f.write_bytes(b"\x00garbage{")
    srv = server_factory(data, *args)
    h = health(srv.url)
    assert h["index_loaded_from"] == "rebuild" and h["indexed"] == 200
    assert all(a["results"] for a in answers(srv.url))


def test_a_narrower_embedding_rebuilds_the_index_and_still_finds_the_capable_agent(
    imported: dict[str, Any], server_factory: Callable[..., Any], tmp_path: Path
) -> None:
    """``[index] embedding_dims = 128`` on a data dir imported at 256: the
    snapshot (another embedder's) is refused and the index is rebuilt at the
    new width from the stored records; the Solidity query still ranks a
    Solidity auditor first, and going back to 256 rebuilds again."""
    data, args = imported["data"], imported["args"]
    narrow = tmp_path / "narrow.toml"
    narrow.write_text("[rate_limit]\nenabled = false\n\n[index]\nembedding_dims = 128\n")
    flags = ("--governance-jwks", args[1], "--config", str(narrow))
    srv = server_factory(data, *flags)
    h = health(srv.url)
    assert h["indexed"] == 200 and h["index_loaded_from"] == "rebuild"
    assert h["embedding_dims"] == 128
    got = answers(srv.url)
    solidity = got[1]["results"]
    assert solidity and all("Solidity" in r["job_description"] for r in solidity[:5])
    stop_server(srv)
    again = server_factory(data, *args)  # the default width: the 128-d snapshot is refused
    h = health(again.url)
    assert h["index_loaded_from"] == "rebuild" and h["embedding_dims"] == 256
    assert answers(again.url)[1]["results"][0]["canonical_id"] in imported["ids"]
