"""The native AGTP/1.0 listener of a real ``ans serve --native-listen``
(federation over it is in test_integration_federation.py).

Requests are written with ``encode_request`` on plain blocking sockets (every
read bounded by a socket timeout) and read with ``NativeResponseParser``;
answers are compared with what the HTTP/2 listener gives for the same query."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from ans.federation.native_transport import NativePeerTransport
from ans.federation.peers import Peer
from ans.protocol.errors import AgtpError
from ans.protocol.messages import CONTENT_TYPE
from ans.protocol.native import (
    NativeResponse,
    NativeResponseParser,
    encode_request,
)

from ans.app import AnsApp
from ans.cli import main
from ans.client import AgtpClient, NativeAgtpClient, connect, verify_discover_result
from ans.config import Config
from ans.native_server import NativeListener
from ans.wiring import build_service
from tools.launcher import RunningServer

pytestmark = pytest.mark.integration

IDENTITY = {"agent-id": "agtp://orch.example/agents/o", "principal-id": "usr-1"}


def agtp_request(
    method: str,
    params: dict[str, Any],
    task_id: str,
    scope: str = "discovery:query",
) -> bytes:
    body = orjson.dumps({"method": method, "task_id": task_id, "parameters": params})
    headers = {
        "Agent-ID": IDENTITY["agent-id"],
        "Principal-ID": IDENTITY["principal-id"],
        "Authority-Scope": scope,
        "Task-ID": task_id,
        "Content-Type": CONTENT_TYPE,
    }
    return encode_request(method, headers, body)


class NativeClient:
    """One blocking connection to a native listener; every read is bounded."""

    def __init__(self, url: str, timeout: float = 10.0, tls: ssl.SSLContext | None = None):
        parts = urlsplit(url)
        assert parts.hostname == "127.0.0.1" and parts.port is not None
        sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        self.sock = tls.wrap_socket(sock, server_hostname="127.0.0.1") if tls else sock
        self.parser = NativeResponseParser(8 * 1024 * 1024)
        self.answers: list[NativeResponse] = []
        self.closed = False

    def __enter__(self) -> NativeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            self.closed = True
        else:
            self.answers += self.parser.feed(data)

    def read(self, n: int) -> list[NativeResponse]:
        """The next ``n`` answers (the connection must stay open for them)."""
        while len(self.answers) < n:
            assert not self.closed, "the server closed the connection early"
            self._recv()
        out, self.answers = self.answers[:n], self.answers[n:]
        return out

    def read_until_closed(self) -> list[NativeResponse]:
        """Every answer until the server closes (socket.timeout if it never does)."""
        while not self.closed:
            self._recv()
        out, self.answers = self.answers, []
        return out

    def call(self, method: str, params: dict[str, Any], task_id: str) -> NativeResponse:
        self.send(agtp_request(method, params, task_id))
        (answer,) = self.read(1)
        return answer


def body_of(answer: NativeResponse) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(answer.body)
    return doc


def h2_client(url: str, scope: str = "discovery:query") -> AgtpClient:
    return AgtpClient(
        url, agent_id=IDENTITY["agent-id"], principal_id=IDENTITY["principal-id"], scope=scope
    )


# -- the listener ------------------------------------------------------------------------


def test_native_url_is_announced(demo: RunningServer) -> None:
    assert demo.native_url is not None and demo.native_url.startswith("agtp+cleartext://")
    assert urlsplit(demo.native_url).port != urlsplit(demo.url).port
    lines = [ln for ln in demo.output if "listening on" in ln]
    assert lines[0].startswith("ANS native AGTP listening on agtp+cleartext://127.0.0.1:")
    assert lines[1].startswith("ANS listening on http://127.0.0.1:")


def test_discover_same_results_as_http2_and_signed(demo: RunningServer) -> None:
    assert demo.native_url is not None
    params = {"intent": "audit Solidity smart contracts for reentrancy", "limit": 10}
    with NativeClient(demo.native_url) as nc:
        answer = nc.call("DISCOVER", params, "task-native-1")
    assert answer.status == 200
    assert answer.headers["agtp-status"] == "200" and answer.headers["task-id"] == "task-native-1"
    assert answer.headers["content-type"] == CONTENT_TYPE
    assert answer.headers["server-agent-id"].startswith("agtp://")
    doc = body_of(answer)
    assert doc["status"] == 200 and doc["task_id"] == "task-native-1"
    native = doc["result"]
    with h2_client(demo.url) as c:
        resp = c.discover(params, task_id="task-h2-1")
        jwks = c.jwks()
    assert resp.status == 200
    ids = [r["canonical_id"] for r in native["results"]]
    assert len(ids) >= 3  # a real ranking to compare, not two empty lists
    assert ids == [r["canonical_id"] for r in resp.result["results"]]
    assert [r["rank_score"] for r in native["results"]] == [
        r["rank_score"] for r in resp.result["results"]
    ]
    kid = verify_discover_result(native, jwks, params)
    assert kid == jwks["keys"][0]["kid"]
    # The signature covers the result: a changed ranking no longer verifies.
    tampered = {**native, "results": list(reversed(native["results"]))}
    with pytest.raises(AgtpError) as bad:
        verify_discover_result(tampered, jwks, params)
    assert bad.value.code == "signature_invalid"


def test_pipelined_requests_are_answered_in_order(demo: RunningServer) -> None:
    assert demo.native_url is not None
    wire = (
        agtp_request("DISCOVER", {"intent": "translate a contract into German"}, "pipe-1")
        + agtp_request("DESCRIBE", {}, "pipe-2")
        + agtp_request("DISCOVER", {"intent": "summarize quarterly sales"}, "pipe-3")
    )
    with NativeClient(demo.native_url) as nc:
        nc.send(wire)  # one write
        answers = nc.read(3)
        assert [a.headers["task-id"] for a in answers] == ["pipe-1", "pipe-2", "pipe-3"]
        assert [body_of(a)["task_id"] for a in answers] == ["pipe-1", "pipe-2", "pipe-3"]
        assert [a.status for a in answers] == [200, 200, 200]
        assert "results" in body_of(answers[0])["result"]
        assert body_of(answers[1])["result"]["document_type"] == "agtp-manifest"
        # The connection stays open for more.
        assert nc.call("DESCRIBE", {}, "after").headers["task-id"] == "after"


@pytest.mark.parametrize("same_write", [True, False])
def test_framing_error_after_a_valid_request(demo: RunningServer, same_write: bool) -> None:
    """The valid request is answered, then the typed 400, then the server hangs up."""
    assert demo.native_url is not None
    good = agtp_request("DISCOVER", {"intent": "book a flight"}, "before-the-error")
    bad = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with NativeClient(demo.native_url) as nc:
        if same_write:
            nc.send(good + bad)
        else:
            nc.send(good)
            nc.read(1)
            nc.send(bad)
        answers = nc.read_until_closed()
    if same_write:
        assert len(answers) == 2
        first, error = answers
        assert first.status == 200 and first.headers["task-id"] == "before-the-error"
    else:
        (error,) = answers
    assert error.status == 400 and error.headers["agtp-status"] == "400"
    doc = body_of(error)
    assert doc["status"] == 400 and doc["error"]["code"] == "invalid_start_line"
    assert "AGTP/1.0 METHOD" in doc["error"]["message"]


@pytest.mark.parametrize(
    ("head", "code"),
    [
        (b"AGTP/1.0 DISCOVER\r\nContent-Length: 262145\r\n\r\n", "body_too_large"),
        (b"AGTP/1.0 DISCOVER\r\nContent-Length: 12abc\r\n\r\n", "invalid_content_length"),
        (b"AGTP/1.0 DISCOVER\r\nAgent-ID\r\n\r\n", "invalid_header_line"),
    ],
)
def test_bad_frames_get_typed_400s(demo: RunningServer, head: bytes, code: str) -> None:
    """A body declared over ``max_body_bytes`` (256 KiB) is refused from its
    header alone; so are other unusable heads. Then the server hangs up."""
    assert demo.native_url is not None
    with NativeClient(demo.native_url) as nc:
        nc.send(head)
        (error,) = nc.read_until_closed()
    assert error.status == 400
    assert body_of(error)["error"]["code"] == code


def test_a_refused_body_still_being_sent_does_not_cost_the_client_its_400(
    demo: RunningServer,
) -> None:
    """The server closes after a framing error's 400. Closing with the client's
    unread body in the socket reset the connection, and the reset could discard
    the 400 before the client read it. Now the server half-closes and drops
    the rest (bounded): the client reads the 400, then a clean end of stream."""
    assert demo.native_url is not None
    declared = 262_145  # over max_body_bytes: refused from the head alone
    for _attempt in range(3):
        with NativeClient(demo.native_url) as nc:
            failures: list[BaseException] = []

            def keep_sending(sock: socket.socket = nc.sock) -> None:
                try:
                    sock.sendall(b"AGTP/1.0 DISCOVER\r\nContent-Length: %d\r\n\r\n" % declared)
                    for _ in range(declared // 16_384):
                        sock.sendall(b"x" * 16_384)
                except OSError as exc:
                    failures.append(exc)

            sender = threading.Thread(target=keep_sending)
            sender.start()
            try:
                (error,) = nc.read_until_closed()  # ConnectionResetError before the fix
            finally:
                sender.join(timeout=10)
            assert error.status == 400
            assert body_of(error)["error"]["code"] == "body_too_large"
            assert not failures, failures  # the body was read (and dropped), not reset


def test_at_the_body_limit_is_parsed_not_refused(demo: RunningServer) -> None:
    """256 KiB exactly passes the framing (and then fails as JSON, typed)."""
    assert demo.native_url is not None
    body = b"{" + b" " * (256 * 1024 - 2) + b"}"
    head = b"AGTP/1.0 DISCOVER\r\nContent-Type: application/agtp+json\r\n"
    with NativeClient(demo.native_url) as nc:
        nc.send(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        (answer,) = nc.read(1)
    assert answer.status == 400
    assert body_of(answer)["error"]["code"] != "body_too_large"


def test_451_without_discovery_query_is_audited(demo: RunningServer) -> None:
    assert demo.native_url is not None
    wire = agtp_request(
        "DISCOVER", {"intent": "x"}, "task-native-451", scope="agents:delegate documents:query"
    )
    with NativeClient(demo.native_url) as nc:
        nc.send(wire)
        (answer,) = nc.read(1)
        # A governance refusal is an answer, not a framing error: the connection stays.
        assert nc.call("DESCRIBE", {}, "still-open").status == 200
    assert answer.status == 451 and answer.headers["agtp-status"] == "451"
    doc = body_of(answer)
    assert doc["error"]["code"] == "scope_violation" and doc["task_id"] == "task-native-451"
    # The audit line is written as the answer goes out: allow it a moment.
    audit = demo.data_dir / "audit.jsonl"
    deadline = time.monotonic() + 5
    hits: list[dict[str, Any]] = []
    while not hits and time.monotonic() < deadline:
        records = [json.loads(line) for line in audit.read_text().splitlines()]
        hits = [r for r in records if r.get("task_id") == "task-native-451"]
        if not hits:
            time.sleep(0.05)
    assert len(hits) == 1
    rec = hits[0]
    assert rec["event"] == "scope_violation" and rec["method"] == "DISCOVER"
    assert rec["agent_id"] == IDENTITY["agent-id"]
    assert rec["scope_presented"] == "agents:delegate documents:query"
    assert rec["scope_required"] == "discovery:query"


# -- hostile task ids and repeated identity headers, on every transport ----------------

# Body task_ids a hostile client sends to split header lines, forge a second
# answer, or trip the HTTP/1.1 and HTTP/2 encoders.
HOSTILE_TASK_IDS = [
    "a\r\nSet-Cookie: pwn=1\r\nX-Injected: yes",
    "x\r\n\r\nAGTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
    "nul\x00byte",
    "caf\u00e9 \u65e5\u672c",
]
H2_IDENTITY = {
    "agent-id": IDENTITY["agent-id"],
    "principal-id": IDENTITY["principal-id"],
    "authority-scope": "discovery:query",
    "content-type": CONTENT_TYPE,
}


def clean_refusal(
    status: int, raw_headers: list[tuple[bytes, bytes]], body: bytes, task_id: str | None = None
) -> dict[str, Any]:
    """A 400 invalid_task_id whose headers are only the server's own lines:
    no injected field, no task-id unless ``task_id``, every value printable ASCII."""
    assert status == 400, body
    doc: dict[str, Any] = orjson.loads(body)
    assert doc["status"] == 400 and doc["error"]["code"] == "invalid_task_id"
    assert "task_id" in doc["error"]["message"] and doc["task_id"] == task_id
    names = [n.lower() for n, _ in raw_headers]
    assert b"set-cookie" not in names and b"x-injected" not in names
    assert names.count(b"agtp-status") == 1 and names.count(b"content-length") == 1
    got = [v for n, v in raw_headers if n.lower() == b"task-id"]
    assert got == ([] if task_id is None else [task_id.encode()])
    for _, value in raw_headers:
        assert all(0x20 <= c < 0x7F for c in value), value
    return doc


def native_raw_headers(answer: NativeResponse) -> list[tuple[bytes, bytes]]:
    return [(k.encode(), v.encode("latin-1")) for k, v in answer.headers.items()]


def new_output(server: RunningServer, since: int) -> str:
    time.sleep(0.3)  # the log pump is a thread: let it catch up
    return "".join(server.output[since:])


@pytest.mark.parametrize("header_task_id", [None, "t-header-ok"])
@pytest.mark.parametrize("task_id", HOSTILE_TASK_IDS)
def test_a_hostile_body_task_id_is_refused_on_every_transport(
    demo: RunningServer, task_id: str, header_task_id: str | None
) -> None:
    """HTTP/2, HTTP/1.1 (POST /agtp) and the native listener answer 400
    invalid_task_id, echo no part of it, forge nothing and log no traceback.
    A valid Task-ID header next to it is still echoed."""
    assert demo.native_url is not None
    since = len(demo.output)
    body = orjson.dumps({"method": "DISCOVER", "task_id": task_id, "parameters": {"intent": "x"}})
    headers = dict(H2_IDENTITY)
    if header_task_id is not None:
        headers["task-id"] = header_task_id
    with httpx.Client(base_url=demo.url, http1=False, http2=True, timeout=20) as h2:
        resp = h2.request("DISCOVER", "/", content=body, headers=headers)
        assert resp.http_version == "HTTP/2"
        clean_refusal(resp.status_code, resp.headers.raw, resp.content, header_task_id)
        assert h2.request("DESCRIBE", "/", content=b"{}", headers=headers).status_code == 200
    with httpx.Client(base_url=demo.url, timeout=20) as h1:
        resp = h1.post("/agtp", content=body, headers={**headers, "agtp-method": "DISCOVER"})
        assert resp.http_version == "HTTP/1.1"
        clean_refusal(resp.status_code, resp.headers.raw, resp.content, header_task_id)
        assert h1.request("DESCRIBE", "/", content=b"{}", headers=headers).status_code == 200
    with NativeClient(demo.native_url) as nc:
        nc.send(encode_request("DISCOVER", headers, body))
        (answer,) = nc.read(1)
        clean_refusal(answer.status, native_raw_headers(answer), answer.body, header_task_id)
        # Nothing was forged after it: the next answer is the next request's.
        after = nc.call("DESCRIBE", {}, "after-the-hostile-one")
        assert after.status == 200 and after.headers["task-id"] == "after-the-hostile-one"
        assert nc.answers == []
    out = new_output(demo, since)
    assert "Traceback" not in out and "LocalProtocolError" not in out, out


@pytest.mark.parametrize("name", ["Agent-ID", "Principal-ID", "Authority-Scope", "Task-ID"])
def test_a_repeated_identity_header_is_refused_on_both_listeners(
    demo: RunningServer, name: str
) -> None:
    """Two Agent-ID lines are not joined into "a, b": 400 duplicate_header over
    the native framing (then the server hangs up, as after any bad head), as
    over HTTP/2."""
    assert demo.native_url is not None
    extra = "agtp://evil.example/agents/x" if name == "Agent-ID" else "second"
    wire = agtp_request("DISCOVER", {"intent": "x"}, "t-dup").replace(
        b"\r\nContent-Type:", f"\r\n{name}: {extra}\r\nContent-Type:".encode()
    )
    with NativeClient(demo.native_url) as nc:
        nc.send(wire)
        (native,) = nc.read(1)
        assert native.status == 400 and native.headers["agtp-status"] == "400"
        native_err = body_of(native)["error"]
        assert native_err["code"] == "duplicate_header"
        assert nc.read_until_closed() == []
    with httpx.Client(base_url=demo.url, http1=False, http2=True, timeout=20) as h2:
        headers = [(k, v) for k, v in {**H2_IDENTITY, "task-id": "t-dup"}.items()]
        resp = h2.request("DISCOVER", "/", content=b"{}", headers=[*headers, (name.lower(), extra)])
    assert resp.status_code == 400
    # the same refusal; over HTTP/2 the DISCOVER's error object is signed too
    # (on the native listener a bad head is a framing error: README, "Signed refusals")
    h2_err = resp.json()["error"]
    assert {k: h2_err[k] for k in native_err} == native_err and "ans_signature" in h2_err


def test_an_error_answer_echoes_the_body_task_id(demo: RunningServer) -> None:
    """A 422 (the envelope parsed, a parameter did not) echoes the body's
    task_id as a 200 would, in the body and the task-id header."""
    assert demo.native_url is not None
    body = orjson.dumps({"method": "DISCOVER", "task_id": "t-body-422", "parameters": {"limit": 0}})
    with httpx.Client(base_url=demo.url, http1=False, http2=True, timeout=20) as h2:
        resp = h2.request("DISCOVER", "/", content=body, headers=H2_IDENTITY)
    with NativeClient(demo.native_url) as nc:
        nc.send(encode_request("DISCOVER", H2_IDENTITY, body))
        (native,) = nc.read(1)
    for status, headers, doc in [
        (resp.status_code, resp.headers, resp.json()),
        (native.status, native.headers, body_of(native)),
    ]:
        assert status == 422 and doc["error"]["code"] == "invalid_limit"
        assert doc["task_id"] == "t-body-422" and headers["task-id"] == "t-body-422"
    # refused after parsing (451): the same
    body = orjson.dumps({"method": "DISCOVER", "task_id": "t-body-451", "parameters": {}})
    unscoped = {**H2_IDENTITY, "authority-scope": "documents:read"}
    with httpx.Client(base_url=demo.url, http1=False, http2=True, timeout=20) as h2:
        resp = h2.request("DISCOVER", "/", content=body, headers=unscoped)
    assert resp.status_code == 451 and resp.json()["error"]["code"] == "scope_violation"
    assert resp.json()["task_id"] == "t-body-451" and resp.headers["task-id"] == "t-body-451"


def idle_after_one_second(server_factory: Any, tmp_path: Path) -> Any:
    """A server whose native listener closes connections idle for 1 s."""
    (tmp_path / "ans.toml").write_text("[server]\nkeep_alive_timeout = 1\n")
    return server_factory(
        tmp_path, "--native-listen", "127.0.0.1:0", "--config", str(tmp_path / "ans.toml")
    )


def test_idle_connection_closed_after_keep_alive_timeout(
    server_factory: Any, tmp_path: Path
) -> None:
    # keep-alive 3 s, asked at 1.5 s: 1.5 s of headroom each way for a loaded
    # machine; the 30 s request deadline is the only other timer.
    (tmp_path / "ans.toml").write_text("[server]\nkeep_alive_timeout = 3\nrequest_timeout = 30\n")
    srv = server_factory(
        tmp_path, "--native-listen", "127.0.0.1:0", "--config", str(tmp_path / "ans.toml")
    )
    with (
        NativeClient(srv.native_url, timeout=60) as idle,
        NativeClient(srv.native_url, timeout=60) as busy,
    ):
        started = time.monotonic()
        time.sleep(1.5)
        assert busy.call("DESCRIBE", {}, "t-1").status == 200  # still open at 1.5 s
        answered = time.monotonic()
        assert idle.read_until_closed() == []  # never asked anything: closed for idling
        assert 2.25 <= time.monotonic() - started < 20.0
        assert busy.read_until_closed() == []
        # Its clock restarted at the answer: a full 3 s of idling, not the 1.5 left.
        assert 2.25 <= time.monotonic() - answered < 20.0


def test_tls_listener(server_factory: Any, tmp_path: Path, tls_cert: tuple[Path, Path]) -> None:
    """With a certificate the native listener is agtp:// (TLS 1.3 only)."""
    cert, key = tls_cert
    cfg = tmp_path / "ans.toml"
    cfg.write_text(f'[server]\ntls_certfile = "{cert}"\ntls_keyfile = "{key}"\n')
    srv = server_factory(tmp_path, "--native-listen", "127.0.0.1:0", "--config", str(cfg))
    assert srv.native_url.startswith("agtp://127.0.0.1:")
    ctx = ssl.create_default_context(cafile=str(cert))
    with NativeClient(srv.native_url, tls=ctx) as nc:
        assert nc.sock.version() == "TLSv1.3"  # type: ignore[attr-defined]
        assert nc.call("DESCRIBE", {}, "t-tls").status == 200
    old = ssl.create_default_context(cafile=str(cert))
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        NativeClient(srv.native_url, tls=old)
    with native_client(srv.native_url, verify=str(cert)) as verified:
        assert verified.call("DESCRIBE", {}).status == 200
    with native_client(srv.native_url) as unknown_ca, pytest.raises(ssl.SSLError):
        unknown_ca.call("DESCRIBE", {})  # the system store does not know the test CA

    async def through_the_transport() -> int:
        t = NativePeerTransport(1024 * 1024)
        try:
            peer = Peer(url=srv.native_url, tier=2, cacert=cert)
            body = orjson.dumps({"method": "DESCRIBE", "parameters": {}})
            headers = {"Content-Type": CONTENT_TYPE}
            reply = await t.send(peer, "DESCRIBE", srv.native_url + "/", headers, body, 5)
            return reply.status
        finally:
            await t.aclose()

    assert asyncio.run(through_the_transport()) == 200


# -- the native client: ans.client.NativeAgtpClient and the CLI over agtp URLs ------------


def native_client(url: str, **kw: Any) -> NativeAgtpClient:
    client = connect(
        url, agent_id=IDENTITY["agent-id"], principal_id="usr-1", scope="discovery:query", **kw
    )
    assert isinstance(client, NativeAgtpClient)
    return client


def test_cli_discover_over_the_native_framing(
    demo: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert demo.native_url is not None
    intent = "audit Solidity smart contracts for reentrancy"  # several matches at tiers 1-2
    assert main(["discover", intent, "--limit", "8", "--server", demo.native_url, "--json"]) == 0
    captured = capsys.readouterr()
    with h2_client(demo.url) as c:
        kid = c.jwks()["keys"][0]["kid"]
        over_h2 = c.discover({"intent": intent, "limit": 8}).result
    # with --json, stdout is the JSON document alone; the verdict is on stderr
    assert f"signature: verified (ES256, kid {kid}, query_digest matches)" in captured.err
    body = json.loads(captured.out)
    ids = [r["canonical_id"] for r in body["result"]["results"]]
    assert len(ids) >= 3 and ids == [r["canonical_id"] for r in over_h2["results"]]
    # A typed AGTP error comes back as such, not as a transport failure.
    assert main(["discover", "x", "--domains", "nope", "--server", demo.native_url]) == 2
    assert "422 invalid_capability_domains" in capsys.readouterr().err


def test_native_client_keys_are_the_servers_jwks(demo: RunningServer) -> None:
    assert demo.native_url is not None
    with native_client(demo.native_url) as nc, h2_client(demo.url) as c:
        assert nc.jwks() == c.jwks()  # from its signed manifest, over the same connection


def test_cli_cannot_reach_or_cannot_use_a_native_url(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"agtp+cleartext://127.0.0.1:{s.getsockname()[1]}"
    assert main(["discover", "x", "--server", dead]) == 2
    assert f"cannot reach {dead}" in capsys.readouterr().err
    assert main(["discover", "x", "--server", "agtp+cleartext://"]) == 2
    assert "--server agtp+cleartext://: not a native AGTP URL" in capsys.readouterr().err


def test_native_client_reconnects_once_after_an_idle_close(
    server_factory: Any, tmp_path: Path
) -> None:
    srv = idle_after_one_second(server_factory, tmp_path)
    with native_client(srv.native_url, timeout=5) as nc:
        assert nc.call("DESCRIBE", {}).status == 200
        first = nc._sock
        assert first is not None
        # The listener closes the idle connection after 1 s: wait for its EOF.
        first.settimeout(30)
        assert first.recv(1, socket.MSG_PEEK) == b""
        assert nc.call("DESCRIBE", {}).status == 200  # on a fresh connection
        assert nc._sock is not first


class OneShotServer:
    """Accepts connections on 127.0.0.1, reads a request, answers ``reply``
    (raw bytes) and closes; every wait bounded."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.sock.settimeout(5)
        self.url = f"agtp+cleartext://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        for _ in range(2):
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(65536)
                    conn.sendall(self.reply)
                except OSError:
                    return

    def __enter__(self) -> OneShotServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()
        self.thread.join(timeout=10)


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "bad AGTP framing"),
        (b"AGTP/1.0 200 OK\r\nContent-Length: 50\r\n\r\n{}", "closed the connection mid-answer"),
        (b"", "closed the connection without answering"),
        (
            b"AGTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}"
            b"AGTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}",
            "more than one answer",
        ),
    ],
)
def test_native_client_refuses_a_server_that_breaks_the_framing(reply: bytes, message: str) -> None:
    with OneShotServer(reply) as server, native_client(server.url, timeout=5) as nc:
        with pytest.raises(ConnectionError, match=message):
            nc.call("DESCRIBE", {})
        assert nc._sock is None  # never reused
    assert server.accepted == 1  # a fresh connection is not retried


# -- the listener's bounds, in process (timeouts too short to set from the CLI) -----------


@pytest.fixture
def app(tmp_path: Path, embedder: Any) -> Iterator[AnsApp]:
    """A real AnsApp (service + gate) over an empty registry."""
    built = build_service(
        Config(data_dir=tmp_path / "data", listen="127.0.0.1:0"), embedder=embedder
    )
    yield AnsApp(built.service, built.gate, ())
    built.service.audit.close()
    built.service.store.close()
    if built.lock is not None:
        built.lock.release()


@contextlib.asynccontextmanager
async def listening(app: AnsApp, **bounds: Any) -> AsyncIterator[tuple[NativeListener, int]]:
    """A native listener on a free loopback port with these bounds, stopped on exit."""
    listener = NativeListener(app, **{"keep_alive_timeout": 5.0, **bounds})
    _, port = await listener.start("127.0.0.1", 0, None)
    try:
        yield listener, port
    finally:
        await listener.stop(grace=1)


async def read_all(reader: asyncio.StreamReader, within: float = 3.0) -> list[NativeResponse]:
    """Every answer until the server closes (bounded)."""
    data = await asyncio.wait_for(reader.read(), within)  # read() = until EOF
    return NativeResponseParser(1024 * 1024).feed(data) if data else []


async def one_over(
    port: int, n: int
) -> tuple[list[tuple[asyncio.StreamReader, asyncio.StreamWriter]], NativeResponse]:
    """Hold n connections open, then open one more: the held ones and the
    single answer the extra one gets before it is closed."""
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(n)]
    await asyncio.sleep(0.05)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    (answer,) = await read_all(reader)
    writer.close()
    return held, answer


def test_over_max_connections_is_503_and_closed(app: AnsApp) -> None:
    async def go() -> None:
        async with listening(app, max_connections=2) as (listener, port):
            held, refused = await one_over(port, 2)
            assert refused.status == 503
            assert orjson.loads(refused.body)["error"]["code"] == "unavailable"
            assert len(listener.connections) == 2
            # The held connections still work; closing one frees a slot.
            r1, w1 = held[0]
            w1.write(agtp_request("DESCRIBE", {}, "held"))
            head = await asyncio.wait_for(r1.readuntil(b"\r\n"), 3)
            assert head == b"AGTP/1.0 200 OK\r\n"
            for _, w in held:
                w.close()
            for _ in range(100):
                if not listener.connections:
                    break
                await asyncio.sleep(0.01)
            r4, w4 = await asyncio.open_connection("127.0.0.1", port)
            w4.write(agtp_request("DESCRIBE", {}, "freed"))
            w4.write_eof()  # asked everything: answered, then closed
            (answer,) = await read_all(r4)
            w4.close()
            assert answer.status == 200 and answer.headers["task-id"] == "freed"

    asyncio.run(go())


def test_a_request_trickling_in_is_cut_off_after_request_timeout(app: AnsApp) -> None:
    async def go() -> None:
        # No other timer near: only the 0.3 s request deadline can cut it off.
        bounds = {"request_timeout": 0.3, "keep_alive_timeout": 60.0}
        async with listening(app, **bounds) as (_listener, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            wire = agtp_request("DESCRIBE", {"pad": "x" * 2000}, "slow")
            sent = 0

            async def trickle() -> None:
                nonlocal sent
                for byte in wire:  # one byte every 20 ms: the whole request takes 40 s
                    if writer.is_closing():
                        return
                    writer.write(bytes([byte]))
                    sent += 1
                    await asyncio.sleep(0.02)

            trickler = asyncio.ensure_future(trickle())
            started = time.monotonic()
            try:
                got = await asyncio.wait_for(reader.read(), 30)
            except ConnectionResetError:  # closed with our latest byte unread: RST, not FIN
                got = b""
            assert got == b""  # closed, nothing answered
            elapsed = time.monotonic() - started
            trickler.cancel()
            writer.close()
            # Cut off by the request deadline: not before it, and long before the
            # request was complete, our 30 s read limit or the 60 s keep-alive
            # (the bound leaves a loaded machine 30 times the deadline).
            assert 0.3 <= elapsed < 10.0
            assert 5 < sent < len(wire)  # it had been receiving bytes all along

    asyncio.run(go())


def test_a_long_pipeline_is_paused_and_resumed_not_dropped(app: AnsApp) -> None:
    async def go() -> None:
        async with listening(app, max_pipeline=4) as (_listener, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            tasks = [f"p-{i}" for i in range(18)]
            # 12 at once: reading pauses at 4 waiting; the rest only gets read if it resumes.
            writer.write(b"".join(agtp_request("DESCRIBE", {}, t) for t in tasks[:12]))
            await asyncio.sleep(0.05)
            writer.write(b"".join(agtp_request("DESCRIBE", {}, t) for t in tasks[12:]))
            writer.write_eof()
            answers = await read_all(reader, within=5)
            writer.close()
            assert [a.headers["task-id"] for a in answers] == tasks
            assert {a.status for a in answers} == {200}

    asyncio.run(go())


async def only_connection(listener: NativeListener) -> Any:
    """The listener's one connection, once accepted (bounded wait)."""
    for _ in range(300):
        if listener.connections:
            (conn,) = listener.connections
            return conn
        await asyncio.sleep(0.01)
    raise AssertionError("the listener never accepted the connection")


async def small_buffers(
    listener: NativeListener, port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Any]:
    """A connection whose socket buffers (ours and the server's) hold only
    4 KiB, so that a client that stops reading is felt at once."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=sock)
    conn = await only_connection(listener)
    assert conn.transport is not None
    conn.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    return reader, writer, conn


def test_a_client_that_does_not_read_gets_no_more_answers_queued(app: AnsApp) -> None:
    """Pipelined requests from a client that reads nothing: answers stop at the
    transport's high-water mark (and so does reading), instead of piling up
    in memory; once it reads, every answer arrives, in order."""

    async def go() -> None:
        async with listening(app, max_pipeline=4) as (listener, port):
            reader, writer, conn = await small_buffers(listener, port)
            tasks = [f"q-{i}" for i in range(300)]
            writer.write(b"".join(agtp_request("DESCRIBE", {}, t) for t in tasks))
            await writer.drain()
            # The server answers until the transport is over its high-water mark.
            await until(lambda: not conn.writable.is_set(), "writing paused")
            high = conn.transport.get_write_buffer_limits()[1]
            one = len(encode_request("DESCRIBE", {}, b"x" * 4096))  # > one DESCRIBE answer
            assert conn.transport.get_write_buffer_size() <= high + one
            assert conn.queue  # the rest waits as requests, not as answers in memory
            writer.write_eof()
            answers = await read_all(reader, within=20)
            writer.close()
            assert [a.headers["task-id"] for a in answers] == tasks

    asyncio.run(go())


def test_a_client_that_never_reads_is_disconnected(app: AnsApp) -> None:
    async def go() -> None:
        async with listening(app, max_pipeline=4, write_timeout=0.5) as (listener, port):
            _, writer, _ = await small_buffers(listener, port)
            writer.write(b"".join(agtp_request("DESCRIBE", {}, f"n-{i}") for i in range(300)))
            for _ in range(300):  # bounded: 3 s
                if not listener.connections:
                    break
                await asyncio.sleep(0.01)
            assert not listener.connections and not listener.per_client
            writer.close()

    asyncio.run(go())


def test_a_silent_connection_is_closed_after_request_timeout(app: AnsApp) -> None:
    async def go() -> None:
        # No other timer near: only the 0.3 s request deadline can close it.
        bounds = {"request_timeout": 0.3, "keep_alive_timeout": 60.0}
        async with listening(app, **bounds) as (_listener, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            started = time.monotonic()
            assert await asyncio.wait_for(reader.read(), 30) == b""  # closed, never a byte sent
            # At the request deadline (0.25: the connection was accepted before
            # `started`), long before our 30 s read limit or the 60 s keep-alive.
            assert 0.25 <= time.monotonic() - started < 10.0
            writer.close()

    asyncio.run(go())


def test_connections_per_client_address_are_capped(app: AnsApp) -> None:
    async def go() -> None:
        async with listening(app, max_per_client=2) as (listener, port):
            held, refused = await one_over(port, 2)
            assert refused.status == 503
            assert "this address" in orjson.loads(refused.body)["error"]["message"]
            assert listener.per_client == {"127.0.0.1": 2}
            for _, w in held:
                w.close()
            for _ in range(100):
                if not listener.per_client:
                    break
                await asyncio.sleep(0.01)
            assert listener.per_client == {}

    asyncio.run(go())


async def until(condition: Any, what: str) -> None:
    """Wait for ``condition()`` (bounded: 30 s, only as a guard)."""
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


def test_stop_answers_what_is_still_in_the_socket_buffer(app: AnsApp) -> None:
    """Stopping the listener (SIGTERM) answers every request the connection
    has received, those still in its socket buffer because reading was
    paused too, in order, and then closes it."""

    async def go() -> None:
        listener = NativeListener(app, keep_alive_timeout=5.0, max_pipeline=4)
        _, port = await listener.start("127.0.0.1", 0, None)
        reader, writer, conn = await small_buffers(listener, port)
        tasks = [f"s-{i}" for i in range(300)]
        writer.write(b"".join(agtp_request("DESCRIBE", {}, t) for t in tasks[:100]))
        await writer.drain()
        # We read nothing: the server stops writing, then reading.
        await until(lambda: conn.paused and not conn.writable.is_set(), "reading paused")
        writer.write(b"".join(agtp_request("DESCRIBE", {}, t) for t in tasks[100:]))
        await writer.drain()  # into the server's socket buffer, unread
        stopping = asyncio.ensure_future(listener.stop(grace=60))
        await until(lambda: conn.draining, "the listener stopping")
        answers = await read_all(reader, within=60)  # now we read: the server goes on
        await stopping
        writer.close()
        assert [a.headers["task-id"] for a in answers] == tasks
        assert not listener.connections

    asyncio.run(go())
