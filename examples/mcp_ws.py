"""The MCP orchestrator of ``mcp_orchestrator.py`` on the registry's WebSocket
(seed 002 section 5.3): it subscribes to every agent with the ``metrics``
capability, the three agents announce (one over the WebSocket, two over
REST), the orchestrator queries by capability over the WebSocket, and the
agent that stops announcing is streamed as ``removed`` after its TTL.

    .venv/bin/python examples/mcp_ws.py                # starts its own ANS
    .venv/bin/python examples/mcp_ws.py --server URL   # an ANS with [mcp] enabled

Frames are one type byte (0x01 ANNOUNCE, 0x02 QUERY, 0x03 RESPONSE) and a
JSON object; the client is the ``websockets`` package (the dev extra).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mcp_orchestrator import AGENTS, BASE, CONFIG, ROOT, Agent, headers

ANNOUNCE, QUERY, RESPONSE = 0x01, 0x02, 0x03


def frame(kind: int, message: dict[str, Any]) -> bytes:
    return bytes([kind]) + json.dumps(message).encode()


def answer(ws: ClientConnection, kind: int, message: dict[str, Any]) -> dict[str, Any]:
    """Send a frame; its RESPONSE (matched by request_id; events are kept)."""
    rid = f"r{time.monotonic_ns()}"
    ws.send(frame(kind, {**message, "request_id": rid}))
    while True:
        body = receive(ws)
        if body.get("request_id") == rid:
            return body
        EVENTS.append(body)


def receive(ws: ClientConnection, timeout: float = 30) -> dict[str, Any]:
    data = ws.recv(timeout=timeout)
    assert isinstance(data, bytes) and data[0] == RESPONSE
    body: dict[str, Any] = json.loads(data[1:])
    return body


def next_event(ws: ClientConnection) -> dict[str, Any]:
    return EVENTS.pop(0) if EVENTS else receive(ws)


EVENTS: list[dict[str, Any]] = []


def open_ws(url: str, scope: str, who: str) -> ClientConnection:
    return connect(
        "ws" + url[len("http") :] + f"{BASE}/ws",
        subprotocols=["agent-discovery"],  # type: ignore[list-item]
        additional_headers=headers(scope, who),
        open_timeout=10,
    )


def run(url: str) -> int:
    agents = [Agent(*a) for a in AGENTS]
    with (
        open_ws(url, "discover:read", "orchestrator") as orch,
        open_ws(url, "discover:write", agents[0].agent["agent_name"]) as agent_ws,
        httpx.Client(base_url=url, timeout=10.0) as http,
    ):
        q = {"protocol_version": "v1.0", "query": {"capability": "metrics"}}
        sub = answer(orch, QUERY, {**q, "subscribe": True})
        print(f"subscribe 'metrics'  -> {sub['subscription']['id']}, {len(sub['responses'])} now")
        got = answer(agent_ws, ANNOUNCE, agents[0].announcement())
        print(f"announce (WebSocket) -> {agents[0].agent['agent_name']} {got['outcome']}")
        for a in agents[1:]:
            who = headers("discover:write", a.agent["agent_name"])
            r = http.post(f"{BASE}/agents", json=a.announcement(), headers=who)
            print(f"announce (REST)      -> {a.agent['agent_name']} {r.json()['outcome']}")
        for _ in range(2):  # doc-translator has no metrics capability: no event
            ev = next_event(orch)
            print(f"event                -> {ev['event']} {ev['agent']['agent_name']}")
        found = answer(orch, QUERY, q)
        matched = sorted(r["agent"]["agent_name"] for r in found["responses"] if r["matched"])
        print(f"query 'metrics'      -> {', '.join(matched)}")
        # metrics-sidecar stops announcing; data-processor keeps its heartbeat
        # (the same announcement again: no event)
        while True:
            answer(agent_ws, ANNOUNCE, agents[0].announcement())
            try:
                ev = receive(orch, timeout=1.0)
            except TimeoutError:
                continue
            print(f"event                -> {ev['event']} {ev['agent'].get('agent_name')}")
            break
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", help="an ANS base URL with [mcp] enabled (default: start one)")
    args = ap.parse_args(argv)
    if args.server:
        return run(args.server)
    sys.path.insert(0, str(ROOT))
    from tools.launcher import start_server, stop_server

    with tempfile.TemporaryDirectory(prefix="ans-mcp-ws-") as tmp:
        cfg = Path(tmp) / "ans.toml"
        cfg.write_text(CONFIG, encoding="utf-8")
        server = start_server(Path(tmp) / "data", "--config", str(cfg))
        try:
            return run(server.url)
        finally:
            stop_server(server)


if __name__ == "__main__":
    raise SystemExit(main())
