"""MCP WebSocket subscriptions across replicas (issue 28.7): two real ANS
nodes (separate processes, ports and data directories) over one PostgreSQL
registry. A subscriber on B -- served by one of B's two workers -- receives
the agents announced on A (over REST and over A's WebSocket), their updates,
and their removal once A or B's sweeper expires them: the stream is the
store's change feed, not an in-process event."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ans.mcp import ws_frames as wf
from tests.ans.test_mcp_support import AgentKey, agent_object, announce
from tests.integration.test_mcp_ws_support import ORCH, ask, events, mcp_config, open_ws
from tools import pgtest
from tools.launcher import RunningServer, start_server, stop_server

pytestmark = pytest.mark.integration
ANS = Path(sys.executable).with_name("ans")


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[RunningServer, RunningServer]]:
    reason = pgtest.unreachable()
    if reason is not None:
        pytest.skip(reason)
    help_text = subprocess.run(
        [str(ANS), "serve", "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    if "--store" not in help_text:
        pytest.skip("ans serve has no --store here: the PostgreSQL registry is absent")
    schema = pgtest.create_schema("ans_mcpws")
    cfg = mcp_config(tmp_path / "ans.toml", ttl_seconds="4", ws_queue="64")
    url = pgtest.schema_url(schema)
    running: list[RunningServer] = []
    try:
        for name, workers in (("a", "1"), ("b", "2")):
            running.append(
                start_server(
                    tmp_path / name, "--store", url, "--workers", workers, "--config", str(cfg)
                )
            )
        yield running[0], running[1]
    finally:
        for srv in running:
            if srv.proc.poll() is None:
                stop_server(srv)
        pgtest.drop_schema(schema)


def test_a_subscriber_on_one_node_sees_announcements_made_on_the_other(
    nodes: tuple[RunningServer, RunningServer],
) -> None:
    a, b = nodes
    rest_key, ws_key = AgentKey(), AgentKey("rsa")
    by_rest = agent_object(rest_key, name="rest-agent", **{"x-nodes": "1.0"})
    by_ws = agent_object(ws_key, name="ws-agent", **{"x-nodes": "2.0"})
    with open_ws(b.url, scope="discover:read") as watcher, open_ws(a.url) as writer:
        sub = ask(
            watcher,
            wf.QUERY,
            {"protocol_version": "v1.0", "query": {"capability": "x-nodes"}, "subscribe": True},
        )
        assert sub["status"] == 200 and sub["responses"] == []
        # announced on A over REST ...
        r = httpx.post(
            a.url + "/mcp/v1/agents",
            json=announce(rest_key, by_rest),
            headers={**ORCH, "authority-scope": "discover:write"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        (ev,) = events(watcher, 1)
        assert (ev["event"], ev["agent"]) == ("new", by_rest)
        # ... and over A's WebSocket
        assert ask(writer, wf.ANNOUNCE, announce(ws_key, by_ws))["status"] == 200
        (ev,) = events(watcher, 1)
        assert (ev["event"], ev["agent"]["agent_id"]) == ("new", by_ws["agent_id"])
        changed = {**by_ws, "capabilities": {"x-nodes": "2.1"}}
        assert ask(writer, wf.ANNOUNCE, announce(ws_key, changed))["status"] == 200
        (ev,) = events(watcher, 1)
        assert ev["event"] == "updated" and ev["agent"]["capabilities"] == {"x-nodes": "2.1"}
        # B answers queries about them too (the same store)
        q = ask(watcher, wf.QUERY, {"protocol_version": "v1.0", "query": {"capability": "x-nodes"}})
        found = {r["agent"]["agent_id"] for r in q["responses"] if r["matched"]}
        assert found == {by_rest["agent_id"], by_ws["agent_id"]}
        # both stop announcing: removed after the TTL (4 s), streamed on B
        last = list(events(watcher, 2, timeout=30))
        assert {e["event"] for e in last} == {"removed"}
        assert {e["agent"]["agent_id"] for e in last} == {by_rest["agent_id"], by_ws["agent_id"]}
