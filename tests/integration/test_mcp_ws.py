"""The MCP registry's WebSocket against a real ``ans serve`` (issue 28.7):
announce / query / subscribe (new, updated, removed after the TTL), the
handshake's refusals (subprotocol, authentication, another path), malformed
frames and the close for repeated ones, the heartbeat (a client that never
answers a ping is closed, one that does stays), a subscriber that stops
reading is dropped with a bounded queue, and HTTP/2 extended CONNECT."""

from __future__ import annotations

import json
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.settings
import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect
from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage

from ans.mcp import ws_frames as wf
from tests.ans.test_mcp_support import AgentKey, agent_object, announce
from tests.integration.test_mcp_ws_support import (
    ORCH,
    SUBPROTOCOL,
    RawClient,
    ask,
    events,
    mcp_config,
    open_ws,
    recv,
    send,
    ws_url,
)
from tools.launcher import RunningServer, start_server, stop_server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    cfg = mcp_config(tmp_path_factory.mktemp("mcpws-config") / "ans.toml")
    srv = start_server(tmp_path_factory.mktemp("mcpws-data"), "--config", str(cfg))
    yield srv
    stop_server(srv)


def audit_events(srv: RunningServer) -> list[dict[str, object]]:
    out = []
    for path in sorted(srv.data_dir.glob("audit*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                out.append(json.loads(line))
    return out


def test_announce_query_and_subscribe_over_one_connection(server: RunningServer) -> None:
    key = AgentKey()
    mine = agent_object(key, name="ws-agent", **{"ws-metrics": "2.0"})
    with open_ws(server.url) as watcher, open_ws(server.url) as ws:
        assert watcher.subprotocol == SUBPROTOCOL
        sub = ask(
            watcher,
            wf.QUERY,
            {"protocol_version": "v1.0", "query": {"capability": "ws-metrics"}, "subscribe": True},
        )
        assert sub["status"] == 200 and sub["responses"] == []
        sid = sub["subscription"]["id"]
        got = ask(ws, wf.ANNOUNCE, announce(key, mine))
        assert got["status"] == 200 and got["agent"]["agent_id"] == mine["agent_id"], got
        assert got["registry"]["trust_tier"] == 3 and got["registry"]["governed"] is False
        assert "ans_signature" in got or "signature" in json.dumps(got)  # signed like REST
        (new,) = events(watcher, 1)
        assert (new["event"], new["subscription"]) == ("new", sid)
        assert new["agent"] == mine and new["protocol_version"] == "v1.0"
        # a heartbeat (the same announcement) is no event; a change is "updated"
        assert ask(ws, wf.ANNOUNCE, announce(key, mine))["status"] == 200
        changed = {**mine, "capabilities": {"ws-metrics": "2.1"}}
        assert ask(ws, wf.ANNOUNCE, announce(key, changed))["status"] == 200
        (upd,) = events(watcher, 1)
        assert upd["event"] == "updated" and upd["agent"]["capabilities"] == {"ws-metrics": "2.1"}
        # query over the WebSocket, in the client's version
        q = ask(ws, wf.QUERY, {"protocol_version": "v1.1", "query": {"capability": "ws-metrics"}})
        assert q["status"] == 200 and q["protocol_version"] == "v1.1"
        assert [r["agent"]["agent_id"] for r in q["responses"] if r["matched"]] == [
            mine["agent_id"]
        ]
        # it stops announcing: removed after its TTL (3 s here), streamed as such
        (gone,) = events(watcher, 1, timeout=20)
        assert gone["event"] == "removed" and gone["agent"]["agent_id"] == mine["agent_id"]
        q = ask(ws, wf.QUERY, {"protocol_version": "v1.0", "query": {"capability": "ws-metrics"}})
        assert [r for r in q["responses"] if r["matched"]] == []
        # unsubscribe
        out = ask(watcher, wf.QUERY, {"unsubscribe": sid})
        assert out["unsubscribed"] == sid
        assert ask(watcher, wf.QUERY, {"unsubscribe": sid})["status"] == 400
    assert any(e.get("event") == "mcp_ws_subscribed" for e in audit_events(server))


def test_the_subscription_filter_and_read_only_scope(server: RunningServer) -> None:
    key, other = AgentKey(), AgentKey("rsa")
    wanted = agent_object(key, name="filtered", **{"ws-filter-yes": "1"})
    unwanted = agent_object(other, name="unfiltered", **{"ws-filter-no": "1"})
    with open_ws(server.url, scope="discover:read") as reader, open_ws(server.url) as writer:
        sub = ask(
            reader,
            wf.QUERY,
            {
                "protocol_version": "v1.0",
                "query": {"capability": "ws-filter-yes"},
                "subscribe": True,
            },
        )
        assert sub["status"] == 200
        denied = ask(reader, wf.ANNOUNCE, announce(key, wanted))  # read-only: 403
        assert denied["status"] == 403 and denied["error"]["code"] == "ErrForbidden"
        assert ask(writer, wf.ANNOUNCE, announce(other, unwanted))["status"] == 200
        assert ask(writer, wf.ANNOUNCE, announce(key, wanted))["status"] == 200
        (ev,) = events(reader, 1)
        assert ev["agent"]["agent_id"] == wanted["agent_id"]  # the other one was filtered out
        # at most 8 subscriptions on one connection
        q = {"protocol_version": "v1.0", "query": {"capability": "*"}, "subscribe": True}
        assert [ask(reader, wf.QUERY, q)["status"] for _ in range(8)] == [200] * 7 + [400]
    with open_ws(server.url, scope="discover:write") as writer:
        q = ask(writer, wf.QUERY, {"protocol_version": "v1.0", "query": {"capability": "x"}})
        assert q["status"] == 403  # querying needs discover:read
        q = ask(
            writer,
            wf.QUERY,
            {"protocol_version": "v1.0", "query": {"capability": "x"}, "subscribe": True},
        )
        assert q["status"] == 403 and "subscription" not in q  # nothing subscribed


def test_handshake_refusals_are_http_answers_with_the_seed_error(server: RunningServer) -> None:
    def status_of(path: str, protocols: list[str], headers: dict[str, str]) -> tuple[int, dict]:
        with pytest.raises(InvalidStatus) as info:
            with connect(
                ws_url(server.url, path),
                subprotocols=protocols,  # type: ignore[arg-type]
                additional_headers=headers,
                open_timeout=10,
            ):
                pass
        resp = info.value.response
        return resp.status_code, json.loads(bytes(resp.body or b"{}"))

    full = {**ORCH, "authority-scope": "discover:read"}
    status, body = status_of("/mcp/v1/ws", ["chat"], full)
    assert status == 400 and body["error"]["code"] == "ErrMalformedPayload"
    assert "agent-discovery" in body["error"]["message"]
    status, body = status_of("/mcp/v1/ws", [], full)
    assert status == 400
    status, body = status_of("/mcp/v1/ws", [SUBPROTOCOL], {})  # no identity, no token
    assert status == 401 and body["error"]["code"] == "ErrAuth"
    status, body = status_of("/mcp/v1/ws", [SUBPROTOCOL], {"authorization": "Bearer x.y.z"})
    assert status == 401
    status, body = status_of("/elsewhere", [SUBPROTOCOL], full)
    assert status == 404
    status, body = status_of("/mcp/v1/agents", [SUBPROTOCOL], full)
    assert status == 404
    # the server is fine afterwards, and the refusals are audited
    assert httpx.get(server.url + "/healthz", timeout=10).status_code == 200
    refused = [e for e in audit_events(server) if e.get("event") == "mcp_ws_refused"]
    assert {e["status"] for e in refused} >= {400, 401}


def test_malformed_frames_are_answered_then_repeated_ones_close_1008(
    server: RunningServer,
) -> None:
    with open_ws(server.url) as ws:
        send(ws, wf.QUERY, {"request_id": "q-1", "protocol_version": "v1.0"})  # no query
        body = recv(ws)
        assert body["status"] == 400 and body["request_id"] == "q-1"
        assert body["error"]["code"] == "ErrMalformedPayload"
        ws.send("a text frame")
        assert recv(ws)["error"]["code"] == "ErrMalformedPayload"
        ws.send(b"\x03{}")  # RESPONSE is the server's
        assert recv(ws)["status"] == 400
        ws.send(b"\x01{not json")
        assert recv(ws)["status"] == 400
        send(ws, wf.QUERY, {"protocol_version": "v9.0", "query": {"capability": "x"}})
        assert recv(ws)["error"]["code"] == "ErrUnsupportedVersion"
        # a signed announcement that was tampered with is dropped (400/401, no agent)
        key = AgentKey()
        msg = announce(key, agent_object(key))
        msg["agent"]["agent_name"] = "tampered"
        assert ask(ws, wf.ANNOUNCE, msg)["status"] in (400, 401)
        # the connection still works
        ok = ask(ws, wf.QUERY, {"protocol_version": "v1.0", "query": {"capability": "x"}})
        assert ok["status"] == 200
        with pytest.raises(ConnectionClosed) as info:
            for _ in range(20):
                ws.send(b"\x7f{}")
                recv(ws)
        assert info.value.rcvd is not None and info.value.rcvd.code == 1008
    assert any(
        e.get("event") == "mcp_ws_closed" and e.get("status") == 1008 for e in audit_events(server)
    )


def test_a_client_that_never_answers_pings_is_closed(server: RunningServer) -> None:
    raw = RawClient(server.url)
    assert raw.accepted
    raw.read_until_closed(timeout=20)  # answers no ping (pinged every 0.5 s)
    assert raw.pings >= 1
    assert raw.closed is not None and raw.closed.code == 1011, raw.closed
    raw.close()
    # a client that answers (websockets does) outlives many intervals
    with open_ws(server.url) as ws:
        time.sleep(2.5)
        ok = ask(ws, wf.QUERY, {"protocol_version": "v1.0", "query": {"capability": "x"}})
        assert ok["status"] == 200


@pytest.fixture
def slow_pinging(tmp_path: Path) -> Iterator[RunningServer]:
    """A server that pings every 60 s: a client that stops reading is then
    dropped for its full queue, not closed for a missed pong first."""
    cfg = mcp_config(tmp_path / "ans.toml", ws_ping_interval="60", ttl_seconds="60")
    srv = start_server(tmp_path / "data", "--config", str(cfg))
    yield srv
    stop_server(srv)


def test_a_subscriber_that_stops_reading_is_dropped(slow_pinging: RunningServer) -> None:
    """The queue is 4 events here: the subscriber that reads nothing is
    closed 1013 once its socket buffers and its queue are full; what it gets
    when it reads again is bounded, and the drop is audited."""
    server = slow_pinging
    slow = RawClient(server.url, rcvbuf=4096)
    slow.send(
        wf.QUERY,
        {"protocol_version": "v1.0", "query": {"capability": "*"}, "subscribe": True},
    )
    while not slow.messages:
        slow.pump(answer_pings=True)
    assert slow.messages[0]["status"] == 200
    # now it reads nothing (and so answers no ping either) while agents announce
    bulk = "x" * 7000  # ~27 KB events: the kernel's socket buffers fill after ~100
    caps = {f"cap-{j}": "v" * 250 for j in range(60)}
    announced = 0
    with open_ws(server.url) as ws:
        for i in range(400):
            key = AgentKey()
            agent = agent_object(key, str(uuid.uuid4()), name=f"bulk-{i}", **caps)
            agent["metadata"] = {"note": bulk}
            assert ask(ws, wf.ANNOUNCE, announce(key, agent))["status"] == 200
            announced += 1
            if any(e.get("event") == "mcp_subscriber_dropped" for e in audit_events(server)):
                break
    dropped = [e for e in audit_events(server) if e.get("event") == "mcp_subscriber_dropped"]
    assert dropped and dropped[-1]["status"] == 1013, f"not dropped after {announced} announcements"
    assert dropped[-1]["queued"] <= 4  # the queue never grew past its bound
    assert announced < 400
    slow.read_until_closed()
    events_got = [m for m in slow.messages if "event" in m]
    assert len(events_got) < announced  # it never received (nor was queued) everything
    assert slow.closed is not None and slow.closed.code == 1013, slow.closed
    slow.close()


def test_http2_extended_connect(server: RunningServer) -> None:
    """RFC 8441: hypercorn announces SETTINGS_ENABLE_CONNECT_PROTOCOL and the
    WebSocket runs on one HTTP/2 stream (through ANS's HTTP/2 defences)."""
    host, port = server.url.split("://", 1)[1].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    ws = Connection(ConnectionType.CLIENT)

    def pump() -> list[h2.events.Event]:
        got = conn.receive_data(sock.recv(65536))
        out = conn.data_to_send()
        if out:
            sock.sendall(out)
        return got

    while not any(isinstance(e, h2.events.RemoteSettingsChanged) for e in pump()):
        pass
    assert conn.remote_settings.get(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL) == 1
    sid = conn.get_next_available_stream_id()
    conn.send_headers(
        sid,
        [
            (":method", "CONNECT"),
            (":protocol", "websocket"),
            (":scheme", "http"),
            (":path", "/mcp/v1/ws"),
            (":authority", f"{host}:{port}"),
            ("sec-websocket-version", "13"),
            ("sec-websocket-protocol", SUBPROTOCOL),
            *ORCH.items(),
            ("authority-scope", "discover:read"),
        ],
    )
    sock.sendall(conn.data_to_send())
    answer: dict | None = None
    status = None
    deadline = time.monotonic() + 15
    while answer is None and time.monotonic() < deadline:
        for ev in pump():
            if isinstance(ev, h2.events.ResponseReceived):
                status = dict(ev.headers)[b":status"]
                frame = wf.client_frame(
                    wf.QUERY, {"protocol_version": "v1.0", "query": {"capability": "x"}}
                )
                conn.send_data(sid, ws.send(BytesMessage(data=frame)))
                sock.sendall(conn.data_to_send())
            elif isinstance(ev, h2.events.DataReceived):
                conn.acknowledge_received_data(ev.flow_controlled_length, sid)
                sock.sendall(conn.data_to_send())
                ws.receive_data(ev.data)
                for wev in ws.events():
                    if isinstance(wev, BytesMessage):
                        answer = wf.decode_response(bytes(wev.data))
    sock.close()
    assert status == b"200"
    assert answer is not None and answer["status"] == 200 and "responses" in answer


def test_stopping_the_server_closes_sessions_1001_without_waiting_for_the_grace(
    tmp_path: Path,
) -> None:
    """SIGTERM with a subscribed WebSocket open: the session is closed with
    1001 at once and the server exits, instead of the connection holding the
    drain for the whole grace period (120 s here) and being cut."""
    cfg = mcp_config(tmp_path / "ans.toml", ws_ping_interval="30")
    cfg.write_text(cfg.read_text().replace("[mcp]", "[server]\ngraceful_timeout = 120\n[mcp]"))
    srv = start_server(tmp_path / "data", "--config", str(cfg))
    try:
        raw = RawClient(srv.url)
        raw.send(
            wf.QUERY, {"protocol_version": "v1.0", "query": {"capability": "*"}, "subscribe": True}
        )
        while not raw.messages:
            raw.pump(answer_pings=True)
        srv.proc.send_signal(signal.SIGTERM)
        raw.read_until_closed(timeout=60)
        assert raw.closed is not None and raw.closed.code == 1001
        raw.sock.sendall(raw.ws.send(raw.closed.response()))
        assert srv.proc.wait(timeout=60) == 0  # well inside the 120 s grace
        raw.close()
    finally:
        if srv.proc.poll() is None:
            stop_server(srv)
