"""HTTP/2 connections under misuse (``ans.http2_defences``).

* A request ANS answers before reading its body (a bad header, no
  AGTP-Method) costs only that request: the body the client goes on sending
  is dropped (RST_STREAM NO_ERROR, RFC 9113 section 8.1), other requests in
  flight on the same connection are answered, the connection stays usable,
  and the server still stops on SIGTERM.
* A connection its client has closed is closed by the server at once, not
  held in CLOSE-WAIT for the keep-alive timeout.
* A client that asks and leaves without reading leaves nothing behind, and
  requests whose body never comes do not keep the server from stopping.
* A rapid-reset flood ends its connection with GOAWAY ENHANCE_YOUR_CALM, and
  so does a flood of PING, SETTINGS or empty DATA frames.
* A connection that does not start a request within ``request_timeout`` is
  closed; one that has asked may stay idle for the keep-alive timeout."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import hpack
import pytest
from hyperframe.frame import (
    DataFrame,
    HeadersFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from tools.launcher import RunningServer

BODY = json.dumps(
    {"method": "DISCOVER", "task_id": "t-good", "parameters": {"intent": "audit contracts"}}
).encode()
IDENTITY = [
    ("agent-id", "agtp://o.example/agents/orch"),
    ("principal-id", "usr-1"),
    ("authority-scope", "discovery:query"),
    ("content-type", "application/agtp+json"),
]


@dataclass
class Answer:
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    ended: bool = False
    reset: int | None = None  # RST_STREAM error code


class RawH2:
    """A minimal h2c client that can leave a request body unsent."""

    def __init__(self, url: str, source: str | None = None) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.authority = f"{host}:{port}"
        self.sock = socket.create_connection(
            (host, int(port)), timeout=10, source_address=(source, 0) if source else None
        )
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config)
        self.conn.initiate_connection()
        self.answers: dict[int, Answer] = {}
        self.terminated = False
        self.goaway: int | None = None  # the error code of a GOAWAY received
        self.ping_acks = 0
        self.acked: set[bytes] = set()  # the payloads of the PING ACKs received
        self.syncs = 0
        self._flush()

    def _flush(self) -> None:
        self.sock.sendall(self.conn.data_to_send())

    def start(
        self, method: str, path: str, extra: Sequence[tuple[str, str]] = (), *, flush: bool = True
    ) -> int:
        sid = self.conn.get_next_available_stream_id()
        pseudo = [
            (":method", method),
            (":path", path),
            (":scheme", "http"),
            (":authority", self.authority),
        ]
        self.conn.send_headers(sid, [*pseudo, *IDENTITY, *extra], end_stream=False)
        self.answers[sid] = Answer()
        if flush:
            self._flush()
        return sid

    def finish(self, sid: int, body: bytes = BODY, *, end: bool = True) -> None:
        self.conn.send_data(sid, body, end_stream=end)
        self._flush()

    def wait(self, sid: int, *, reset: bool = False, seconds: float = 10.0) -> Answer:
        """Read until the stream's answer is complete (or, with ``reset``,
        until it is reset); bounded in time."""
        deadline = time.monotonic() + seconds
        answer = self.answers[sid]
        while not (answer.reset is not None if reset else answer.ended):
            if self.terminated or time.monotonic() > deadline:
                raise AssertionError(f"stream {sid}: no answer; connection gone: {self.terminated}")
            data = self.sock.recv(65536)
            if not data:
                self.terminated = True
                continue
            for event in self.conn.receive_data(data):
                self._event(event)
            self._flush()
        return answer

    def _event(self, event: Any) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            # header_encoding="utf-8": names and values are str
            self.answers[event.stream_id].headers = {str(k): str(v) for k, v in event.headers}
        elif isinstance(event, h2.events.DataReceived):
            self.answers[event.stream_id].body += event.data
            self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            self.answers[event.stream_id].ended = True
        elif isinstance(event, h2.events.StreamReset):
            self.answers[event.stream_id].reset = event.error_code
        elif isinstance(event, h2.events.PingAckReceived):
            self.ping_acks += 1
            self.acked.add(event.ping_data)
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.terminated = True
            self.goaway = int(event.error_code) if event.error_code is not None else None

    def sync(self, seconds: float = 10.0) -> None:
        """A PING round trip: the server handles a connection's frames in
        order, so once the ACK is back it has handled everything sent before
        the PING (a request's HEADERS: the request has started; an answer
        read: the connection is idle and its idle time taken)."""
        self.syncs += 1
        token = self.syncs.to_bytes(8, "big")
        self.conn.ping(token)
        self._flush()
        deadline = time.monotonic() + seconds
        while token not in self.acked:
            if self.terminated or time.monotonic() > deadline:
                raise AssertionError(f"no PING ACK; connection gone: {self.terminated}")
            data = self.sock.recv(65536)
            if not data:
                self.terminated = True
                continue
            for event in self.conn.receive_data(data):
                self._event(event)
            self._flush()

    def read_until_terminated(self, seconds: float = 10.0) -> None:
        """Read (bounded in time) until the server ends the connection."""
        deadline = time.monotonic() + seconds
        while not self.terminated and time.monotonic() < deadline:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                break
            if not data:
                break
            for event in self.conn.receive_data(data):
                self._event(event)

    def close(self) -> None:
        self.sock.close()


def ask_once(url: str) -> None:
    """One DISCOVER on a connection of its own, answered; then close."""
    client = RawH2(url)
    try:
        sid = client.start("DISCOVER", "/")
        client.finish(sid)
        assert_answered(client.wait(sid))
    finally:
        client.close()


def assert_answered(answer: Answer) -> None:
    assert answer.headers.get(":status") == "200", answer.headers
    assert answer.headers.get("agtp-status") == "200"
    doc = json.loads(answer.body)
    assert doc["status"] == 200 and doc["task_id"] == "t-good"
    assert doc["result"]["returned"] >= 1


@pytest.mark.parametrize("whole", [True, False], ids=["whole-body", "part-of-the-body"])
@pytest.mark.parametrize(
    ("method", "path", "extra", "code"),
    [
        ("POST", "/agtp", [], "missing_agtp_method"),
        ("DISCOVER", "/", [("principal-id", "usr-2")], "duplicate_header"),
        ("DISCOVER", "/", [("x-filler", "x" * 20_000)], "header_too_large"),
    ],
)
def test_an_early_answer_costs_only_its_own_request(
    demo: RunningServer,
    method: str,
    path: str,
    extra: list[tuple[str, str]],
    code: str,
    whole: bool,
) -> None:
    client = RawH2(demo.url)
    try:
        good = client.start("DISCOVER", "/")  # its body still to come
        bad = client.start(method, path, extra)
        early = client.wait(bad)
        assert early.headers.get(":status") == "400"
        assert json.loads(early.body)["error"]["code"] == code
        # The client goes on sending the body nobody reads: all of it, or a
        # part, after which it is asked to stop (RST_STREAM NO_ERROR).
        client.finish(bad, BODY if whole else BODY[:10], end=whole)
        if not whole:
            assert client.wait(bad, reset=True).reset == 0
        client.finish(good)
        assert_answered(client.wait(good))
        again = client.start("DISCOVER", "/")  # the connection is still usable
        client.finish(again)
        assert_answered(client.wait(again))
    finally:
        client.close()


@pytest.mark.parametrize(
    ("method", "path"),
    [("DISCOVER", "/agents/caf\u00e9"), ("DESCRIBE", "/agents/\u20ac"), ("DISC\u00d6VER", "/")],
)
def test_a_request_with_a_non_ascii_pseudo_header_is_reset_alone(
    demo: RunningServer, method: str, path: str
) -> None:
    """RFC 9113 8.3.1: such a request is malformed, a stream error (PROTOCOL_ERROR).
    hypercorn raised on it and dropped the connection, the requests in flight
    on it too, and logged the client's bytes: here a secret in its body."""
    secret = f"secret-{time.monotonic_ns()}"
    body = json.dumps({"method": "DISCOVER", "parameters": {"intent": "audit contracts"},
                       "client_context": {"token": secret}}).encode()
    client = RawH2(demo.url)
    try:
        good = client.start("DISCOVER", "/")  # its body still to come
        bad = client.start(method, path, flush=False)
        client.finish(bad, body)  # the bad request whole, in one write
        assert client.wait(bad, reset=True).reset == h2.errors.ErrorCodes.PROTOCOL_ERROR
        client.finish(good)
        assert_answered(client.wait(good))
        again = client.start("DISCOVER", "/")  # the connection is still usable
        client.finish(again)
        assert_answered(client.wait(again))
        assert not client.terminated
    finally:
        client.close()
    ask_once(demo.url)
    logged = "".join(demo.output)
    assert secret not in logged
    assert "pseudo-header not ASCII" in logged


def test_data_on_a_closed_stream_is_a_stream_closed_error(demo: RunningServer) -> None:
    """h2spec http2/5.1/11: DATA on a stream both sides have ended is a
    STREAM_CLOSED error (RST_STREAM, or GOAWAY: RFC 9113 section 5.1), sent at
    once; the late-DATA guard must not swallow it (it held it back before)."""
    from hyperframe.frame import DataFrame, Frame, GoAwayFrame, RstStreamFrame

    client = RawH2(demo.url)
    try:
        sid = client.conn.get_next_available_stream_id()
        client.conn.send_headers(
            sid,
            [
                (":method", "GET"),
                (":path", "/healthz"),
                (":scheme", "http"),
                (":authority", client.authority),
            ],
            end_stream=True,
        )
        client.answers[sid] = Answer()
        client._flush()
        assert client.wait(sid).headers.get(":status") == "200"
        late = DataFrame(sid, data=b"test", flags=["END_STREAM"])
        client.sock.sendall(late.serialize())  # past the client's own state machine
        client.sock.settimeout(5)
        got: list[Frame] = []
        buf = b""
        while not any(isinstance(f, (RstStreamFrame, GoAwayFrame)) for f in got):
            data = client.sock.recv(65536)  # TimeoutError: nothing came back
            assert data, "the server closed the connection without RST_STREAM or GOAWAY"
            buf += data
            while len(buf) >= 9:
                frame, length = Frame.parse_frame_header(memoryview(buf[:9]))
                if len(buf) < 9 + length:
                    break
                frame.parse_body(memoryview(buf[9 : 9 + length]))
                buf = buf[9 + length :]
                got.append(frame)
        error = next(f for f in got if isinstance(f, (RstStreamFrame, GoAwayFrame)))
        assert error.error_code == h2.errors.ErrorCodes.STREAM_CLOSED
        if isinstance(error, RstStreamFrame):
            assert error.stream_id == sid
    finally:
        client.close()


def test_the_server_still_stops_after_early_answers(tmp_path: Path, server_factory: Any) -> None:
    srv = server_factory(tmp_path / "data", "--demo")
    client = RawH2(srv.url)
    try:
        for _ in range(3):
            bad = client.start("POST", "/agtp")
            client.wait(bad)
            client.finish(bad)
        good = client.start("DISCOVER", "/")
        client.finish(good)
        assert_answered(client.wait(good))
    finally:
        client.close()
    srv.proc.terminate()
    srv.proc.wait(timeout=10)  # raises TimeoutExpired if SIGTERM is ignored
    assert srv.proc.returncode is not None


def close_wait_sockets(port: int) -> int:
    """Server-side TCP sockets on this port whose client has closed but the
    server has not (CLOSE_WAIT, state 08 in /proc/net/tcp)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state = fields[1], fields[3]
            count += state == "08" and int(local.rsplit(":", 1)[1], 16) == port
    return count


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc/net/tcp")
def test_connections_the_clients_closed_are_closed_at_once(demo: RunningServer) -> None:
    """The server keeps idle connections for keep_alive_timeout (300 s), but
    one whose client has closed it is closed right away, not held for that
    long in CLOSE-WAIT with its file descriptor."""
    port = int(demo.url.rsplit(":", 1)[1])
    for _ in range(20):
        ask_once(demo.url)
    deadline = time.monotonic() + 5.0
    while close_wait_sockets(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert close_wait_sockets(port) == 0


def tree(pid: int) -> list[int]:
    """``pid`` and its children: ``ans serve`` forks a worker per core, and the
    workers hold the connections."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        kids = []
    return [pid, *(int(k) for k in kids)]


def rss_kb(pid: int) -> int:
    """Resident KB of the server's process tree."""
    total = 0
    for p in tree(pid):
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        total += next(int(ln.split()[1]) for ln in status.splitlines() if ln.startswith("VmRSS:"))
    return total


def ask_and_leave(url: str, n: int) -> None:
    """n connections that each send a DISCOVER with a large answer and close
    before reading it."""
    big = json.dumps(
        {
            "method": "DISCOVER",
            "task_id": "t-gone",
            "parameters": {"intent": "audit contracts", "limit": 100, "include_evidence": True},
        }
    ).encode()
    for _ in range(n):
        client = RawH2(url)
        sid = client.start("DISCOVER", "/")
        client.finish(sid, big)
        client.close()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def open_fds(pid: int) -> int:
    """Open file descriptors of the server's process tree."""
    total = 0
    for p in tree(pid):
        try:
            total += len(os.listdir(f"/proc/{p}/fd"))
        except OSError:
            continue
    return total


def wait_until(condition: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_answers_nobody_reads_do_not_pile_up(tmp_path: Path, server_factory: Any) -> None:
    """A client that closes before reading its answer leaves nothing behind:
    hypercorn kept each such connection's answer and tasks for good (about
    100 KB a connection here, some 40 MB per round below). After a warm-up,
    two more rounds must not keep the server growing."""
    cfg = tmp_path / "ans.toml"
    cfg.write_text("[rate_limit]\nenabled = false\n")
    srv = server_factory(tmp_path / "data", "--demo", "--config", str(cfg))
    grown = []
    open_at_start = open_fds(srv.proc.pid)
    for _ in range(3):  # warm-up, then two measured rounds
        before = rss_kb(srv.proc.pid)
        ask_and_leave(srv.url, 400)
        # Measure once the server has closed the 400 connections, not after a
        # fixed pause (on a loaded machine it may still hold them).
        wait_until(lambda: open_fds(srv.proc.pid) <= open_at_start + 4, 60)
        grown.append(rss_kb(srv.proc.pid) - before)
    assert sum(grown[1:]) < 20_000, f"server grew {grown} KB per round of 400"
    ask_once(srv.url)  # and it still answers


def test_shutdown_does_not_wait_for_bodies_that_never_come(
    tmp_path: Path, server_factory: Any
) -> None:
    """Requests whose body never arrives, on connections the clients keep
    open, must not keep the server from stopping on SIGTERM."""
    srv = server_factory(tmp_path / "data", "--demo")
    clients = [RawH2(srv.url) for _ in range(5)]
    try:
        for client in clients:
            client.start("DISCOVER", "/")  # the body never follows
        time.sleep(0.5)
        srv.proc.terminate()
        srv.proc.wait(timeout=15)  # TimeoutExpired if shutdown hangs
    finally:
        for client in clients:
            client.close()


def test_a_rapid_reset_flood_gets_a_goaway_not_a_crash(demo: RunningServer) -> None:
    """Streams opened and reset at once pile up in hypercorn's priority tree;
    past its 1,000 the connection ends with GOAWAY ENHANCE_YOUR_CALM, not an
    unhandled error, and the server goes on serving."""
    client = RawH2(demo.url)
    try:
        # All of it in one write, so the server reads it in one go, as a
        # flood arrives: 1,100 requests, each reset at once.
        for _ in range(1100):
            sid = client.start("DISCOVER", "/", flush=False)
            client.conn.reset_stream(sid)
        client.sock.sendall(client.conn.data_to_send())
        client.read_until_terminated()
        assert client.goaway == 11  # ENHANCE_YOUR_CALM
    finally:
        client.close()
    ask_once(demo.url)
    assert not any("TooManyStreamsError" in line for line in demo.output)


def _rapid_resets(client: RawH2, n: int) -> bytes:
    for _ in range(n):
        sid = client.start("DISCOVER", "/", flush=False)
        client.conn.reset_stream(sid)
    return client.conn.data_to_send()


def _refused_discovers(client: RawH2, n: int, *, reset: bool) -> bytes:
    """n whole DISCOVERs (no body: ``{}``) whose scope lacks discovery:query,
    so that each one served writes a 451 audit record; each reset at once."""
    headers = [
        (":method", "DISCOVER"),
        (":path", "/"),
        (":scheme", "http"),
        (":authority", client.authority),
        ("agent-id", "agtp://o.example/agents/orch"),
        ("principal-id", "usr-1"),
        ("authority-scope", "documents:read"),
    ]
    for _ in range(n):
        sid = client.conn.get_next_available_stream_id()
        client.conn.send_headers(sid, headers, end_stream=True)
        client.answers[sid] = Answer()
        if reset:
            client.conn.reset_stream(sid)
    return client.conn.data_to_send()


def audit_records(data_dir: Path) -> int:
    return len((data_dir / "audit.jsonl").read_text().splitlines())


def test_requests_reset_as_they_arrive_are_never_started(demo: RunningServer) -> None:
    """A request reset in the same read as it began costs no task: 150 such
    refused DISCOVERs write no 451 record (one served does), stay within the
    budget, and the connection then serves as usual."""
    client = RawH2(demo.url)
    try:
        before = audit_records(demo.data_dir)
        client.sock.sendall(_refused_discovers(client, 1, reset=False))
        client.wait(max(client.answers))
        assert audit_records(demo.data_dir) == before + 1  # a served one is audited
        client.sock.sendall(_refused_discovers(client, 150, reset=True))
        for _ in range(3):
            sid = client.start("DISCOVER", "/")
            client.finish(sid)
            assert_answered(client.wait(sid))
        assert not client.terminated
        assert audit_records(demo.data_dir) == before + 1
    finally:
        client.close()


def test_sigterm_during_a_rapid_reset_flood_stops_cleanly(
    tmp_path: Path, server_factory: Any
) -> None:
    """hypercorn resets each request that arrives while it shuts down; one
    the client had already reset made h2 raise, and the server exited with
    status 1 and a traceback."""
    srv = server_factory(tmp_path / "data", "--demo")
    clients = [RawH2(srv.url) for _ in range(2)]
    for client in clients:
        _closed_stream(client)

    def flood(client: RawH2) -> None:
        deadline = time.monotonic() + 3.0
        try:
            while time.monotonic() < deadline:
                client.sock.sendall(_rapid_resets(client, 50))
        except OSError:
            pass  # the server closed it

    threads = [threading.Thread(target=flood, args=(c,), daemon=True) for c in clients]
    try:
        for thread in threads:
            thread.start()
        time.sleep(0.3)
        srv.proc.terminate()
        assert srv.proc.wait(timeout=15) == 0
    finally:
        for thread in threads:
            thread.join(5)
        for client in clients:
            client.close()
    assert not any("Traceback" in line or "ProtocolError" in line for line in srv.output)


def test_an_answer_the_client_never_lets_through_is_reset(
    tmp_path: Path, server_factory: Any
) -> None:
    """A client whose flow-control window stays shut cannot hold answers (and
    their tasks) for good: after write_timeout the stream is reset (CANCEL),
    and the connection serves on once the client reads."""
    cfg = tmp_path / "ans.toml"
    cfg.write_text("[server]\nwrite_timeout = 1\n\n[rate_limit]\nenabled = false\n")
    srv = server_factory(tmp_path / "data", "--demo", "--config", str(cfg))
    client = RawH2(srv.url)
    try:
        client.conn.update_settings({SettingsFrame.INITIAL_WINDOW_SIZE: 0})
        stuck = [client.start("DISCOVER", "/") for _ in range(3)]
        for sid in stuck:
            client.finish(sid)
        started = time.monotonic()
        for sid in stuck:
            assert client.wait(sid, reset=True).reset == 8  # CANCEL
        assert 0.5 < time.monotonic() - started < 8
        client.conn.update_settings({SettingsFrame.INITIAL_WINDOW_SIZE: 65535})
        sid = client.start("DISCOVER", "/")
        client.finish(sid)
        assert_answered(client.wait(sid))
    finally:
        client.close()


def test_connections_per_client_address_are_capped(tmp_path: Path, server_factory: Any) -> None:
    cfg = tmp_path / "ans.toml"
    cfg.write_text("[server]\nmax_connections_per_client = 3\n")
    srv = server_factory(tmp_path / "data", "--demo", "--config", str(cfg))
    held = [RawH2(srv.url) for _ in range(3)]
    try:
        for client in held:
            sid = client.start("DISCOVER", "/")
            client.finish(sid)
            assert_answered(client.wait(sid))  # all three accepted and served
        refused = RawH2(srv.url)
        try:
            refused.sock.settimeout(5)
            try:
                closed = refused.sock.recv(65536) == b""
            except ConnectionResetError:
                closed = True
            assert closed  # closed at once, before any answer or SETTINGS
        finally:
            refused.close()
        held.pop().close()  # a slot frees up
        for _ in range(50):  # bounded: up to 5 s for the server to notice
            try:
                ask_once(srv.url)
                break
            except (AssertionError, OSError):
                time.sleep(0.1)
        else:
            raise AssertionError("no slot freed after a connection closed")
    finally:
        for client in held:
            client.close()


def _pings(client: RawH2, n: int) -> bytes:
    for i in range(n):
        client.conn.ping(i.to_bytes(8, "big"))
    return client.conn.data_to_send()


def _settings(client: RawH2, n: int) -> bytes:
    return SettingsFrame(0, settings={SettingsFrame.MAX_CONCURRENT_STREAMS: 100}).serialize() * n


def _window_updates(client: RawH2, n: int) -> bytes:
    return WindowUpdateFrame(0, window_increment=1).serialize() * n


def _closed_stream(client: RawH2) -> int:
    """A stream that has had its answer: frames on it are handled inside h2,
    which produces no event for them."""
    sid = client.start("DISCOVER", "/")
    client.finish(sid)
    assert_answered(client.wait(sid))
    return sid


def _resets_on_a_closed_stream(client: RawH2, n: int) -> bytes:
    return RstStreamFrame(_closed_stream(client), error_code=8).serialize() * n


def _window_updates_on_a_closed_stream(client: RawH2, n: int) -> bytes:
    return WindowUpdateFrame(_closed_stream(client), window_increment=1).serialize() * n


def _padding_on_a_closed_stream(client: RawH2, n: int) -> bytes:
    padding = DataFrame(_closed_stream(client), data=b"", pad_length=200, flags={"PADDED"})
    return padding.serialize() * n


def _empty_data(client: RawH2, n: int) -> bytes:
    sid = client.start("DISCOVER", "/")  # a request whose body is all empty frames
    return DataFrame(sid, data=b"").serialize() * n


@pytest.mark.parametrize(
    "flood",
    [
        _pings,
        _settings,
        _window_updates,
        _empty_data,
        _resets_on_a_closed_stream,
        _window_updates_on_a_closed_stream,
        _padding_on_a_closed_stream,
    ],
    ids=[
        "ping",
        "settings",
        "window-update",
        "empty-data",
        "rst-closed-stream",
        "window-update-closed-stream",
        "padding-closed-stream",
    ],
)
def test_a_control_frame_flood_gets_a_goaway(demo: RunningServer, flood: Any) -> None:
    """Frames that make the server work but ask for nothing end the
    connection past a budget (GOAWAY ENHANCE_YOUR_CALM); the server goes on
    serving everyone else."""
    client = RawH2(demo.url)
    try:
        client.sock.sendall(flood(client, 1000))  # in one write, as a flood arrives
        client.read_until_terminated()
        assert client.goaway == 11  # ENHANCE_YOUR_CALM
        # The server stopped answering soon after the budget (200), not after
        # all it had read: at most one more 4 KB piece of PINGs (~240).
        assert client.ping_acks <= 200 + 4096 // 17
    finally:
        client.close()
    ask_once(demo.url)


def test_a_client_within_the_control_frame_budget_is_served(demo: RunningServer) -> None:
    """A hundred PINGs at once, SETTINGS changes and a request: all answered.
    Then large answers read through a small window (2 KB), acknowledged as
    they come: hundreds of WINDOW_UPDATEs, all earned by what was read."""
    client = RawH2(demo.url)
    try:
        client.sock.sendall(_pings(client, 100) + _settings(client, 20))
        for _ in range(3):
            sid = client.start("DISCOVER", "/")
            client.finish(sid)
            assert_answered(client.wait(sid))
        client.conn.update_settings({SettingsFrame.INITIAL_WINDOW_SIZE: 2048})
        big = json.dumps(
            {
                "method": "DISCOVER",
                "task_id": "t-good",
                # no intent: every demo agent, ranked on trust (an intent has only its matches)
                "parameters": {"limit": 100, "trust_tier_min": 3, "include_evidence": True},
            }
        ).encode()
        read = 0
        for _ in range(12):
            sid = client.start("DISCOVER", "/")
            client.finish(sid, big)
            answer = client.wait(sid)
            assert_answered(answer)
            read += len(answer.body)
        assert read > 250_000  # some 250 stream WINDOW_UPDATEs (one per KB), and more
        assert not client.terminated and client.goaway is None
    finally:
        client.close()


def closed_after(sock: socket.socket, start: float, limit: float) -> float:
    """Seconds from ``start`` until the server closes ``sock`` (reading and
    dropping anything it sends first); fails past ``limit``."""
    sock.settimeout(0.2)
    while time.monotonic() - start < limit:
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - start
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - start
    raise AssertionError(f"connection still open after {limit} s")


def test_a_connection_must_start_a_request_within_request_timeout(
    tmp_path: Path, server_factory: Any
) -> None:
    cfg = tmp_path / "ans.toml"
    cfg.write_text("[server]\nrequest_timeout = 1\n\n[rate_limit]\nenabled = false\n")
    srv = server_factory(tmp_path / "data", "--demo", "--config", str(cfg))
    host, port = srv.url.removeprefix("http://").rsplit(":", 1)
    start = time.monotonic()
    silent = socket.create_connection((host, int(port)), timeout=10)
    # HTTP/2: the preface and a header block that never ends (no END_HEADERS)
    half_h2 = RawH2(srv.url)
    block = hpack.Encoder().encode([(":method", "DISCOVER"), (":path", "/"), *IDENTITY])
    half_h2.sock.sendall(HeadersFrame(1, data=block).serialize())
    # HTTP/1.1: a request line and a header, but no blank line
    half_h1 = socket.create_connection((host, int(port)), timeout=10)
    half_h1.sendall(b"POST /agtp HTTP/1.1\r\nhost: ans\r\nagtp-method: DISCOVER\r\n")
    # A client that has asked may stay idle past the deadline and ask again.
    kept = RawH2(srv.url)
    try:
        sid = kept.start("DISCOVER", "/")
        kept.finish(sid)
        assert_answered(kept.wait(sid))
        for sock in (silent, half_h2.sock, half_h1):
            assert 0.8 < closed_after(sock, start, 8.0)  # by the deadline, not at once
        time.sleep(1.0)  # the kept connection has now been idle for about 2 s
        sid = kept.start("DISCOVER", "/")
        kept.finish(sid)
        assert_answered(kept.wait(sid))
    finally:
        for sock in (silent, half_h2.sock, half_h1, kept.sock):
            sock.close()


def closed_at_once(client: RawH2) -> bool:
    """The server closed this connection before sending anything."""
    client.sock.settimeout(5)
    try:
        return client.sock.recv(65536) == b""
    except ConnectionResetError:
        return True


def test_connections_in_all_are_capped(tmp_path: Path, server_factory: Any) -> None:
    """max_connections holds whatever the addresses. At the cap, the
    connection idle the longest makes room for a new one; when none is idle,
    the new one is refused. The per-client cap refuses outright.

    Every step waits for the server to have handled the one before (a PING
    round trip, see RawH2.sync), never for a while."""
    cfg = tmp_path / "ans.toml"
    cfg.write_text("[server]\nmax_connections = 3\nmax_connections_per_client = 2\n")
    srv = server_factory(tmp_path / "data", "--demo", "--config", str(cfg))
    held = [RawH2(srv.url), RawH2(srv.url, source="127.0.0.2"), RawH2(srv.url, source="127.0.0.3")]
    extra: list[RawH2] = []
    try:
        # All three busy: each has a request whose body is still to come.
        pending = [client.start("DISCOVER", "/") for client in held]
        for client in held:
            client.sync()  # the server has started the request: the connection is busy
        refused = RawH2(srv.url, source="127.0.0.4")
        extra.append(refused)
        assert closed_at_once(refused)  # no idle connection to take the place of
        # The first one finishes its request and so is idle, the longest.
        held[0].finish(pending[0])
        assert_answered(held[0].wait(pending[0]))
        held[0].sync()  # the server has seen the connection go idle
        newcomer = RawH2(srv.url, source="127.0.0.4")
        extra.append(newcomer)
        sid = newcomer.start("DISCOVER", "/")
        newcomer.finish(sid)
        assert_answered(newcomer.wait(sid))
        closed_after(held[0].sock, time.monotonic(), 30.0)  # it made room
        for client, sid in zip(held[1:], pending[1:], strict=True):  # the busy ones go on
            client.finish(sid)
            assert_answered(client.wait(sid))
            client.sync()
        # The newcomer asks again, so it is the one idle the shortest: the
        # next connection makes room by closing held[1], not the newcomer.
        sid = newcomer.start("DISCOVER", "/")
        newcomer.finish(sid)
        assert_answered(newcomer.wait(sid))
        newcomer.sync()
        over = RawH2(srv.url, source="127.0.0.4")  # the newcomer's address is at 1 of 2
        extra.append(over)
        over.sync()  # accepted and counted: its address is at 2 of 2
        closed_after(held[1].sock, time.monotonic(), 30.0)  # the longest idle made room
        over2 = RawH2(srv.url, source="127.0.0.4")
        extra.append(over2)
        assert closed_at_once(over2)  # over the per-client cap of 2
        sid = newcomer.start("DISCOVER", "/")  # the two it holds are served
        newcomer.finish(sid)
        assert_answered(newcomer.wait(sid))
        over.sync()
    finally:
        for client in held + extra:
            client.close()
