"""Shutdown drains: on SIGTERM a real ``ans serve`` stops accepting, answers
every request it has received on both listeners, ends each HTTP/2 connection
with GOAWAY NO_ERROR naming the last stream it processed, and exits 0.

The clients are raw: HTTP/2 through the ``h2`` library (GOAWAY frames are
taken out of the byte stream before h2 sees them, since h2 refuses every
frame after one), the native framing on plain sockets. Nothing waits for a
while: each test waits for the server's answers, its closes and its exit."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.events
import orjson
import pytest
from ans.protocol.messages import CONTENT_TYPE
from ans.protocol.native import NativeResponse, NativeResponseParser, encode_request
from hyperframe.frame import GoAwayFrame

from ans.native_server import MAX_PIPELINE
from tools.launcher import RunningServer

pytestmark = pytest.mark.integration

IDENTITY = [
    ("agent-id", "agtp://o.example/agents/orch"),
    ("principal-id", "usr-1"),
    ("authority-scope", "discovery:query"),
    ("content-type", CONTENT_TYPE),
]
GOAWAY, PING = 0x7, 0x6
WAIT = 60.0  # s: a bound on every read, not an expected duration


def discover_body(task_id: str) -> bytes:
    params = {"intent": "audit contracts", "limit": 3}
    return json.dumps({"method": "DISCOVER", "task_id": task_id, "parameters": params}).encode()


def start(server_factory: Any, tmp_path: Path, *extra: str) -> RunningServer:
    cfg = tmp_path / "ans.toml"
    # A grace long enough for a loaded machine; the tests wait for events.
    cfg.write_text("[server]\ngraceful_timeout = 60\n\n[rate_limit]\nenabled = false\n")
    srv: RunningServer = server_factory(tmp_path / "data", "--demo", "--config", str(cfg), *extra)
    return srv


def host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


@dataclass
class Stream:
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    ended: bool = False
    reset: int | None = None


class H2Client:
    """An h2c connection whose GOAWAY frames are recorded, not fed to h2."""

    def __init__(self, url: str) -> None:
        host, port = host_port(url)
        self.authority = f"{host}:{port}"
        self.sock = socket.create_connection(host_port(url), timeout=WAIT)
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.conn.initiate_connection()
        self.streams: dict[int, Stream] = {}
        self.goaways: list[tuple[int, int]] = []  # (last stream id, error code)
        self.acked: set[bytes] = set()
        self.closed = False
        self._buffer = b""
        self._flush()

    def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data and not self.closed:
            try:
                self.sock.sendall(data)
            except OSError:
                self.closed = True

    def discovers(self, n: int, prefix: str) -> list[int]:
        """n DISCOVERs, all in one write."""
        sids = []
        for i in range(n):
            sid = self.conn.get_next_available_stream_id()
            headers = [
                (":method", "DISCOVER"),
                (":path", "/"),
                (":scheme", "http"),
                (":authority", self.authority),
                *IDENTITY,
            ]
            self.conn.send_headers(sid, headers)
            self.conn.send_data(sid, discover_body(f"{prefix}-{i}"), end_stream=True)
            self.streams[sid] = Stream()
            sids.append(sid)
        self._flush()
        return sids

    def sync(self) -> None:
        """A PING round trip: the server has taken the connection over as HTTP/2."""
        token = b"sync-%03d" % len(self.acked)
        self.conn.ping(token)
        self._flush()
        while token not in self.acked:
            assert not self.closed, "closed before the PING ACK"
            self._receive()

    def read_until_closed(self) -> None:
        while not self.closed:
            self._receive()

    def _receive(self) -> None:
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            return
        self._buffer += data
        for event in self.conn.receive_data(self._without_goaways()):
            self._event(event)
        self._flush()

    def _without_goaways(self) -> bytes:
        """The whole frames received, GOAWAYs taken out (and recorded)."""
        out, buf = [], self._buffer
        while len(buf) >= 9:
            length = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + length:
                break
            frame, buf = buf[: 9 + length], buf[9 + length :]
            if frame[3] == GOAWAY:
                parsed, _ = GoAwayFrame.parse_frame_header(memoryview(frame[:9]))
                parsed.parse_body(memoryview(frame[9:]))
                self.goaways.append((parsed.last_stream_id, parsed.error_code))
            else:
                out.append(frame)
        self._buffer = buf
        return b"".join(out)

    def _event(self, event: Any) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            self.streams[event.stream_id].headers = {str(k): str(v) for k, v in event.headers}
        elif isinstance(event, h2.events.DataReceived):
            self.streams[event.stream_id].body += event.data
            self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            self.streams[event.stream_id].ended = True
        elif isinstance(event, h2.events.StreamReset):
            self.streams[event.stream_id].reset = event.error_code
        elif isinstance(event, h2.events.PingAckReceived):
            self.acked.add(event.ping_data)

    def close(self) -> None:
        self.sock.close()


def assert_discover_answered(stream: Stream, task_id: str) -> None:
    assert stream.reset is None, f"{task_id}: reset {stream.reset}"
    assert stream.ended, f"{task_id}: no answer"
    assert stream.headers.get(":status") == "200", stream.headers
    doc = json.loads(stream.body)
    assert doc["status"] == 200 and doc["task_id"] == task_id
    assert doc["result"]["returned"] >= 1


def assert_refused(url: str) -> None:
    """Nobody accepts connections on ``url`` any more."""
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(host_port(url), timeout=WAIT).close()


def stopped_cleanly(srv: RunningServer) -> None:
    assert srv.proc.wait(timeout=WAIT) == 0, "".join(srv.output[-30:])
    text = "".join(srv.output)
    assert "Traceback" not in text and "never awaited" not in text, text[-3000:]


def test_sigterm_answers_every_http2_request_on_the_wire(
    tmp_path: Path, server_factory: Any
) -> None:
    """SIGTERM with 40 DISCOVERs just sent on two HTTP/2 connections: all 40
    are answered, each connection then gets one GOAWAY NO_ERROR naming its
    last stream (39), and no stream is reset."""
    srv = start(server_factory, tmp_path)
    clients = [H2Client(srv.url) for _ in range(2)]
    try:
        for client in clients:
            client.sync()
        sent = [client.discovers(20, f"c{n}") for n, client in enumerate(clients)]
        srv.proc.send_signal(signal.SIGTERM)
        for n, (client, sids) in enumerate(zip(clients, sent, strict=True)):
            client.read_until_closed()
            for i, sid in enumerate(sids):
                assert_discover_answered(client.streams[sid], f"c{n}-{i}")
            assert client.goaways == [(max(sids), 0)]  # NO_ERROR, the last one processed
            assert_refused(srv.url)  # no longer accepting
        stopped_cleanly(srv)
    finally:
        for client in clients:
            client.close()


def test_sigterm_ends_an_idle_http2_connection_with_a_goaway(
    tmp_path: Path, server_factory: Any
) -> None:
    """A connection that has been served and is idle gets GOAWAY NO_ERROR
    with its last stream id; one that never asked gets GOAWAY with 0."""
    srv = start(server_factory, tmp_path)
    used, fresh = H2Client(srv.url), H2Client(srv.url)
    try:
        fresh.sync()
        (sid,) = used.discovers(1, "u")
        while not used.streams[sid].ended:
            used._receive()
        used.sync()
        srv.proc.send_signal(signal.SIGTERM)
        used.read_until_closed()
        fresh.read_until_closed()
        assert used.goaways == [(sid, 0)]
        assert fresh.goaways == [(0, 0)]
        stopped_cleanly(srv)
    finally:
        used.close()
        fresh.close()


def native_discover(task_id: str) -> bytes:
    headers = {name.title(): value for name, value in IDENTITY} | {"Task-ID": task_id}
    return encode_request("DISCOVER", headers, discover_body(task_id))


def read_native_until_closed(
    sock: socket.socket, parser: NativeResponseParser
) -> list[NativeResponse]:
    answers: list[NativeResponse] = []
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            return answers
        answers += parser.feed(data)


def test_sigterm_answers_every_native_request_on_the_wire(
    tmp_path: Path, server_factory: Any
) -> None:
    """SIGTERM with DISCOVERs pipelined on two native connections, past
    MAX_PIPELINE: the server has paused reading, so the last ones are still
    in its socket buffer. All are answered in order, the connections (and an
    idle third one) are then closed, and the server exits 0."""
    srv = start(server_factory, tmp_path, "--native-listen", "127.0.0.1:0")
    assert srv.native_url is not None
    at = host_port(srv.native_url)
    socks = [socket.create_connection(at, timeout=WAIT) for _ in range(3)]
    parsers = [NativeResponseParser(8 * 1024 * 1024) for _ in socks]
    early: list[list[NativeResponse]] = [[] for _ in socks]  # read, not yet checked

    def first_answer(n: int) -> NativeResponse:
        while not early[n]:
            early[n] += parsers[n].feed(socks[n].recv(65536))
        return early[n].pop(0)

    try:
        socks[2].sendall(native_discover("idle"))
        assert first_answer(2).status == 200  # accepted, served, now idle
        tasks = [[f"n{n}-{i}" for i in range(MAX_PIPELINE + 8)] for n in range(2)]
        for n, names in enumerate(tasks):
            socks[n].sendall(b"".join(native_discover(t) for t in names[:MAX_PIPELINE]))
            # Read and answering: reading is paused, so the rest stays in the socket.
            assert orjson.loads(first_answer(n).body)["task_id"] == names[0]
            socks[n].sendall(b"".join(native_discover(t) for t in names[MAX_PIPELINE:]))
        srv.proc.send_signal(signal.SIGTERM)
        for n, names in enumerate(tasks):
            answers = early[n] + read_native_until_closed(socks[n], parsers[n])
            assert [a.status for a in answers] == [200] * (len(names) - 1)
            assert [orjson.loads(a.body)["task_id"] for a in answers] == names[1:]
        assert read_native_until_closed(socks[2], parsers[2]) == []  # the idle one is closed
        assert_refused(srv.native_url)
        stopped_cleanly(srv)
    finally:
        for sock in socks:
            sock.close()


def test_sigterm_when_idle_exits_at_once(tmp_path: Path, server_factory: Any) -> None:
    """With nothing to answer, shutdown does not wait for the grace period
    (60 s here): the launcher's own bound (15 s) is the test."""
    srv = start(server_factory, tmp_path, "--native-listen", "127.0.0.1:0")
    srv.proc.send_signal(signal.SIGTERM)
    try:
        assert srv.proc.wait(timeout=15) == 0
    except subprocess.TimeoutExpired:
        raise AssertionError("an idle server took more than 15 s to stop") from None
