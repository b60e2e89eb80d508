"""The MCP registry on two real ``ans serve`` nodes over one PostgreSQL
registry (a fresh schema): an agent announced (signed, over HTTP/2) on node
A is listed by node B and found by B's AGTP DISCOVER only when tier 3 is
admitted; a different key for its id is 409 on B; once it stops announcing
it disappears from both nodes' lists and from DISCOVER, removed by exactly
one node's sweeper (one ``mcp_agent_expired`` audit record in all)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.ans.test_mcp_support import AgentKey, agent_object, announce
from tools import pgtest
from tools.launcher import RunningServer, start_server, stop_server

pytestmark = pytest.mark.integration

CONFIG = """[rate_limit]
enabled = false
[mcp]
enabled = true
allow_list = ["*"]
ttl_seconds = 2
sweep_interval = 0.2
"""
WRITE = {
    "agent-id": "agtp://o.example/agents/a",
    "principal-id": "o",
    "authority-scope": "discover:write",
}
READ = {**WRITE, "authority-scope": "discover:read discovery:query"}
DEADLINE = 60.0  # generous: the removal is checked by polling, never timed


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[RunningServer, RunningServer]]:
    reason = pgtest.unreachable()
    if reason is not None:
        pytest.skip(reason)
    schema = pgtest.create_schema("ans_mcp")
    cfg = tmp_path / "ans.toml"
    cfg.write_text(CONFIG)
    url = pgtest.schema_url(schema)
    started: list[RunningServer] = []
    try:
        for name in ("a", "b"):
            started.append(start_server(tmp_path / name, "--store", url, "--config", str(cfg)))
        yield started[0], started[1]
    finally:
        for srv in started:
            stop_server(srv)
        pgtest.drop_schema(schema)


def client(srv: RunningServer) -> httpx.Client:
    return httpx.Client(base_url=srv.url, http1=False, http2=True, timeout=30)


def discover(c: httpx.Client, tier: int | None) -> set[str]:
    params: dict[str, Any] = {"intent": "extract line items from scanned invoices", "limit": 20}
    if tier is not None:
        params["trust_tier_min"] = tier
    r = c.request(
        "DISCOVER",
        "/",
        headers={**READ, "content-type": "application/agtp+json"},
        content=orjson.dumps({"method": "DISCOVER", "task_id": "t", "parameters": params}),
    )
    assert r.status_code == 200, r.text
    return {x["canonical_id"] for x in r.json()["result"]["results"]}


def listed(c: httpx.Client) -> list[str]:
    r = c.get("/mcp/v1/agents", headers=READ)
    assert r.status_code == 200, r.text
    return [a["agent"]["agent_id"] for a in r.json()["agents"]]


def test_announce_on_one_node_expire_everywhere(
    nodes: tuple[RunningServer, RunningServer],
) -> None:
    a, b = nodes
    key = AgentKey()
    agent = agent_object(
        key, str(uuid.uuid4()), "invoice-ocr", **{"invoice-ocr": "extract line items from invoices"}
    )
    cid = "urn:uuid:" + agent["agent_id"]
    with client(a) as ca, client(b) as cb:
        r = ca.post("/mcp/v1/agents", json=announce(key, agent), headers=WRITE)
        assert r.status_code == 200, r.text
        assert r.http_version == "HTTP/2"
        assert listed(cb) == [agent["agent_id"]]
        assert cid in discover(ca, 3), "A"
        assert cid in discover(cb, 3) and cid not in discover(cb, None)
        thief = AgentKey()
        r = cb.post(
            "/mcp/v1/agents",
            json=announce(thief, {**agent, "public_key": thief.pem}),
            headers=WRITE,
        )
        assert r.status_code == 409 and r.json()["error"]["code"] == "ErrDuplicateID"
        # dropped, audited, and so counted
        metrics = cb.get("/metrics").text
        assert 'ans_audit_events_total{event="mcp_announcement_dropped"} 1.0' in metrics
        # it stops announcing: gone from lists, then from DISCOVER on both nodes
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end and (cid in discover(ca, 3) or cid in discover(cb, 3)):
            time.sleep(0.2)
        assert listed(ca) == [] and listed(cb) == []
        assert cid not in discover(ca, 3) and cid not in discover(cb, 3)
    expired = [
        rec
        for srv in (a, b)
        for line in (srv.data_dir / "audit.jsonl").read_text().splitlines()
        if (rec := json.loads(line))["event"] == "mcp_agent_expired"
    ]
    assert len(expired) == 1 and expired[0]["canonical_id"] == cid
