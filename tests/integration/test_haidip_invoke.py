"""The HAIDIP invocation gateway against a real ``ans serve`` on loopback and
a real fake agent (hypercorn in this process: plain HTTP/1.1 and TLS with
HTTP/2, the TLS listener requiring the gateway's client certificate).

Agents are registered by governance ACTIVATE with ``bindings`` naming the
fake agent's endpoints; SUSPEND / REVOKE through LIFECYCLE. Covered: echo
success (caller credentials not forwarded, the gateway's own header and the
request id present), HTTP/2 + mTLS + CA bundle, SSE relayed incrementally,
504, 502, 502 too large, 413, 503 suspended, 410 retired, 404 unentitled
(restricted zone) and unknown, 403 without ``agents:invoke``, API keys (no
identity headers; wrong key 401), 429 per target, audit records without bodies.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import pytest
from ans.governance.apikeys import key_hash
from ans.governance.keys import SigningKey
from ans.governance.lifecycle import make_event
from ans.governance.signing import sign_document
from hypercorn.asyncio import serve
from hypercorn.config import Config as HypercornConfig

from tools.launcher import RunningServer, start_server, stop_server

pytestmark = pytest.mark.integration

CALLER = {
    "agent-id": "agtp://client.example/agents/orchestrator",
    "principal-id": "usr-invoke",
    "authority-scope": "agents:invoke",
    "content-type": "application/json",
}
GOVERNANCE = {
    "agent-id": "agtp://gov.example/agents/platform",
    "principal-id": "usr-gov",
    "authority-scope": "discovery:register",
    "content-type": "application/agtp+json",
}
GATEWAY_TOKEN = "gateway-token-" + uuid.uuid4().hex
API_KEY = "ans_test-key-" + uuid.uuid4().hex
READER_KEY = "ans_reader-key-" + uuid.uuid4().hex
BODY_MARKER = "BODY-MARKER-" + uuid.uuid4().hex
CALLER_SECRET = "caller-secret-" + uuid.uuid4().hex
PER_AGENT_BURST = 20


def cid_of(label: str) -> str:
    return hashlib.sha256(f"agtp://agtp.agents.example/agents/{label}".encode()).hexdigest()


# -- the fake agent ----------------------------------------------------------------------


class FakeAgent:
    """POST /echo (JSON: the body, the headers, the HTTP version), /sse (one
    event, then waits for ``release`` before two more), /slow (answers after
    5 s), /big (a Content-Length beyond the gateway's cap)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.released_in_time: bool | None = None

    async def app(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        path = scope["path"]
        if path == "/sse":
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")],
                }
            )
            await send({"type": "http.response.body", "body": b"data: one\n\n", "more_body": True})
            loop = asyncio.get_running_loop()
            self.released_in_time = await loop.run_in_executor(None, self.release.wait, 20)
            for event in (b"data: two\n\n", b"data: three\n\n"):
                await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        if path == "/endless":  # an event every 50 ms, for 100 s at most
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            for i in range(2000):
                event = f"data: {i}\n\n".encode()
                await send({"type": "http.response.body", "body": event, "more_body": True})
                await asyncio.sleep(0.05)
            await send({"type": "http.response.body", "body": b""})
            return
        if path == "/slow":
            await asyncio.sleep(5)
        if path == "/big":
            headers = [(b"content-type", b"application/json"), (b"content-length", b"900000")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b"x" * 900000})
            return
        out = orjson.dumps(
            {
                "echo": orjson.loads(body) if body else None,
                "headers": {k.decode(): v.decode() for k, v in scope["headers"]},
                "http_version": scope["http_version"],
            }
        )
        headers = [
            (b"content-type", b"application/json"),
            (b"set-cookie", b"agent=1"),
            (b"x-agent", b"fake"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": out})


def _listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


class Served:
    """hypercorn serving an ASGI app in a thread, until :meth:`stop`."""

    def __init__(self, app: Any, tls: tuple[Path, Path] | None = None) -> None:
        sock = _listening()
        self.port = sock.getsockname()[1]
        hc = HypercornConfig()
        hc.bind = [f"fd://{sock.detach()}"]
        hc.accesslog = None
        if tls is not None:
            hc.certfile, hc.keyfile = str(tls[0]), str(tls[1])
            hc.ca_certs = str(tls[0])  # the gateway's client certificate is this one
            hc.verify_mode = ssl.CERT_REQUIRED
            hc.alpn_protocols = ["h2", "http/1.1"]
        self.loop = asyncio.new_event_loop()
        self.stopped = asyncio.Event()
        self.thread = threading.Thread(
            target=self.loop.run_until_complete,
            args=(serve(app, hc, shutdown_trigger=self.stopped.wait),),
            daemon=True,
        )
        self.thread.start()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stopped.set)
        self.thread.join(timeout=10)


# -- the ANS and its agents ----------------------------------------------------------------


def manifest(label: str, key: SigningKey, zone: str = "zone:public") -> dict[str, Any]:
    uri = f"agtp://agtp.agents.example/agents/{label}"
    doc = {
        "document_type": "agtp-manifest",
        "schema_version": "1.0",
        "manifest_uri": uri,
        "canonical_id": cid_of(label),
        "agent_label": label,
        "org_domain": "agents.example",
        "governance_zone": zone,
        "trust_tier": 1,
        "package_format": "nomo",
        "package_integrity_hash": "sha256:" + "ab" * 32,
        "lifecycle_state": "Active",
        "cert_status": "Active",
        "principal_org": "Agents Inc",
        "activated_at": "2026-01-15T09:00:00Z",
        "behavioral_trust_score": 0.9,
        "authority_scope_categories": ["text:translate"],
        "supported_methods": ["QUERY"],
        "job_description": f"The {label} agent answers invocations for the gateway tests.",
    }
    return sign_document(doc, key, "signature")


def agtp(method: str, params: dict[str, Any]) -> bytes:
    return orjson.dumps({"method": method, "task_id": "task-inv", "parameters": params})


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
    test_gov_key: tuple[SigningKey, Path],
    self_signed: Callable[[Path, str], tuple[Path, Path]],
) -> Iterator[dict[str, Any]]:
    key, jwks = test_gov_key
    tmp = tmp_path_factory.mktemp("invoke")
    agent = FakeAgent()
    cert, cert_key = self_signed(tmp, "agent-")
    plain = Served(agent.app)
    tls = Served(agent.app, (cert, cert_key))
    closed = _listening()
    dead_port = closed.getsockname()[1]
    closed.close()
    (tmp / "gateway-token").write_text(GATEWAY_TOKEN + "\n")
    cfg = tmp / "ans.toml"
    cfg.write_text(
        f"""
[zones]
restricted = ["zone:finance"]

[[auth.api_keys]]
hash = "{key_hash(API_KEY)}"
principal_id = "usr-keyed"
scopes = ["agents:invoke"]

[[auth.api_keys]]
hash = "{key_hash(READER_KEY)}"
principal_id = "usr-reader"
scopes = ["discovery:query"]

[haidip.invoke]
allow_http = true
allow_private_targets = true
max_body_bytes = 65536
max_response_bytes = 100000
auth_header = "X-Gateway-Token"
auth_value_file = "gateway-token"
client_certfile = "{cert}"
client_keyfile = "{cert_key}"
ca_bundle = "{cert}"
per_agent_rate = 0.001
per_caller_burst = 1000
per_agent_burst = {PER_AGENT_BURST}

[haidip.invoke.agents."{cid_of("slow")}"]
read_timeout = 0.5
"""
    )
    base = f"http://127.0.0.1:{plain.port}"
    endpoints = {
        "echo": f"{base}/echo",
        "busy": f"{base}/echo",
        "tls-echo": f"https://127.0.0.1:{tls.port}/echo",
        "stream": f"{base}/sse",
        "endless": f"{base}/endless",
        "slow": f"{base}/slow",
        "big": f"{base}/big",
        "dead": f"http://127.0.0.1:{dead_port}/echo",
        "finance": f"{base}/echo",
        "paused": f"{base}/echo",
        "retired": f"{base}/echo",
        "agtp-only": "agtp://agtp.agents.example/agents/agtp-only",
    }
    srv = start_server(tmp / "data", "--governance-jwks", str(jwks), "--config", str(cfg))
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        for label, endpoint in endpoints.items():
            zone = "zone:finance" if label == "finance" else "zone:public"
            proto = endpoint.split(":", 1)[0]
            caps = {
                "supported_methods": ["QUERY"],
                "tags": ["gateway-test"],
                "bindings": [{"protocol": proto, "endpoint": endpoint}],
            }
            params = {"manifest": manifest(label, key, zone), "capabilities": caps}
            r = c.post(
                "/agtp",
                headers={**GOVERNANCE, "agtp-method": "ACTIVATE"},
                content=agtp("ACTIVATE", params),
            )
            assert r.status_code == 200, r.text
        now = datetime.now(UTC)
        for event, label in (("SUSPEND", "paused"), ("REVOKE", "retired")):
            doc = make_event(event, cid_of(label), key, now, event_id=f"evt-{uuid.uuid4().hex}")
            r = c.post(
                "/agtp",
                headers={**GOVERNANCE, "agtp-method": "LIFECYCLE"},
                content=agtp("LIFECYCLE", {"event": doc}),
            )
            assert r.status_code == 200, r.text
    yield {"srv": srv, "agent": agent}
    stop_server(srv)
    plain.stop()
    tls.stop()


def invoke_path(label: str) -> str:
    return f"/haidip/v1/agents/{cid_of(label)}/invoke"


def audit(srv: RunningServer) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (srv.data_dir / "audit.jsonl").read_text().splitlines()]


# -- the tests -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["HTTP/2", "HTTP/1.1"])
def test_invoke_echo_forwards_json_not_the_callers_credentials(
    world: dict[str, Any], version: str
) -> None:
    h2 = version == "HTTP/2"
    with httpx.Client(base_url=world["srv"].url, http1=not h2, http2=h2, timeout=30) as c:
        r = c.post(
            invoke_path("echo"),
            headers={
                **CALLER,
                "authorization": f"Bearer {CALLER_SECRET}",
                "cookie": f"session={CALLER_SECRET}",
                "x-request-id": f"req-echo-{h2}",
            },
            content=orjson.dumps({"text": BODY_MARKER, "target_language": "fr"}),
        )
    assert r.status_code == 200, r.text
    assert r.http_version == version
    out = r.json()
    assert out["echo"] == {"text": BODY_MARKER, "target_language": "fr"}
    seen = out["headers"]
    assert seen["x-gateway-token"] == GATEWAY_TOKEN  # the gateway's own credential
    assert seen["x-request-id"] == f"req-echo-{h2}"
    assert seen["content-type"] == "application/json"
    assert "authorization" not in seen and "cookie" not in seen
    for name in ("agent-id", "principal-id", "authority-scope"):
        assert name not in seen
    assert r.headers["x-request-id"] == f"req-echo-{h2}"
    assert r.headers["x-agent"] == "fake" and "set-cookie" not in r.headers


def test_seed_section_5_flow_search_get_invoke(world: dict[str, Any]) -> None:
    """Seed 003 section 5: search, pick, get the card, invoke through the gateway."""
    caller = {**CALLER, "authority-scope": "discovery:query agents:invoke"}
    query = {"query": "the echo agent answers invocations for the gateway tests", "top": 20}
    with httpx.Client(base_url=world["srv"].url, timeout=30) as c:
        r = c.post("/haidip/v1/agents/search", headers=caller, content=orjson.dumps(query))
        assert r.status_code == 200, r.text
        best = next(x for x in r.json()["results"] if x["name"] == "echo")
        assert {"id", "name", "description", "score"} <= set(best)
        r = c.get(f"/haidip/v1/agents/{quote(best['id'], safe='')}", headers=caller)
        assert r.status_code == 200, r.text
        card = r.json()
        assert card["endpoint"].endswith("/echo")
        r = c.post(
            f"/haidip/v1/agents/{quote(card['id'], safe='')}/invoke",
            headers=caller,
            content=orjson.dumps({"text": "Hello, how are you?", "target_language": "fr"}),
        )
    assert r.status_code == 200, r.text
    assert r.json()["echo"] == {"text": "Hello, how are you?", "target_language": "fr"}


def test_invoke_over_tls_with_http2_and_the_gateways_client_certificate(
    world: dict[str, Any],
) -> None:
    with httpx.Client(base_url=world["srv"].url, timeout=30) as c:
        r = c.post(invoke_path("tls-echo"), headers=CALLER, content=b'{"q": 1}')
    assert r.status_code == 200, r.text
    assert r.json()["http_version"] == "2" and r.json()["echo"] == {"q": 1}
    records = audit(world["srv"])
    done = [a for a in records if a["event"] == "invocation" and a["target"] == cid_of("tls-echo")]
    assert done and done[-1]["http_version"] == "HTTP/2"


def test_event_stream_arrives_incrementally(world: dict[str, Any]) -> None:
    agent: FakeAgent = world["agent"]
    got = b""
    with httpx.Client(base_url=world["srv"].url, http2=True, timeout=30) as c:
        with c.stream("POST", invoke_path("stream"), headers=CALLER, content=b"{}") as r:
            assert r.status_code == 200
            assert r.headers["content-type"] == "text/event-stream"
            chunks = r.iter_raw()
            while b"data: one" not in got:  # the agent holds the rest until released
                got += next(chunks)
            assert b"data: two" not in got
            agent.release.set()
            for chunk in chunks:
                got += chunk
    assert agent.released_in_time is True  # the first event came through before the rest
    assert got == b"data: one\n\ndata: two\n\ndata: three\n\n"


def test_a_caller_that_leaves_ends_the_upstream_stream(world: dict[str, Any]) -> None:
    with httpx.Client(base_url=world["srv"].url, timeout=30) as c:
        with c.stream("POST", invoke_path("endless"), headers=CALLER, content=b"{}") as r:
            assert r.status_code == 200
            assert next(r.iter_raw()).startswith(b"data: 0")
    # the gateway notices at the agent's next event and stops relaying
    found: list[dict[str, Any]] = []
    for _ in range(200):  # bounded wait for the audit record, not a timing assertion
        found = [
            a
            for a in audit(world["srv"])
            if a["event"] == "invocation" and a["target"] == cid_of("endless")
        ]
        if found:
            break
        time.sleep(0.05)
    assert found and found[-1]["outcome"] == "client_gone"
    assert found[-1]["bytes_out"] < 2000 * 8  # far from the whole stream


@pytest.mark.parametrize(
    ("label", "status", "code"),
    [
        ("slow", 504, "AgentTimeout/upstream_timeout"),
        ("dead", 502, "AgentError/upstream_unreachable"),
        ("big", 502, "AgentError/upstream_too_large"),
        ("paused", 503, "AgentSuspended/agent_suspended"),
        ("retired", 410, "Gone/agent_retired"),
        ("finance", 404, "NotFound/not_found"),  # a restricted zone the caller lacks
        ("agtp-only", 502, "AgentError/not_invocable"),
    ],
)
def test_typed_failures_never_500(
    world: dict[str, Any], label: str, status: int, code: str
) -> None:
    with httpx.Client(base_url=world["srv"].url, timeout=30) as c:
        r = c.post(invoke_path(label), headers=CALLER, content=b'{"x": 1}')
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert f"{error['code']}/{error['detail']}" == code and error["message"]
    assert error["correlation_id"] == r.headers["x-request-id"]


def test_unknown_and_unentitled_look_alike_and_entitled_works(world: dict[str, Any]) -> None:
    with httpx.Client(base_url=world["srv"].url, timeout=30) as c:
        unknown = c.post("/haidip/v1/agents/" + "0" * 64 + "/invoke", headers=CALLER, content=b"{}")
        hidden = c.post(invoke_path("finance"), headers=CALLER, content=b"{}")
        granted = {**CALLER, "authority-scope": "agents:invoke zone:finance"}
        ok = c.post(invoke_path("finance"), headers=granted, content=b"{}")
    assert unknown.status_code == hidden.status_code == 404
    assert unknown.json()["error"]["code"] == hidden.json()["error"]["code"] == "NotFound"
    assert ok.status_code == 200, ok.text


def test_scope_body_size_method_and_content_type(world: dict[str, Any]) -> None:
    """Refusals on one HTTP/1.1 connection: a small unread body is drained so
    the connection stays usable; an over-size one is not read at all."""
    with httpx.Client(base_url=world["srv"].url, timeout=30) as c:
        no_scope = {**CALLER, "authority-scope": "discovery:query"}
        r = c.post(invoke_path("echo"), headers=no_scope, content=b"{}")
        assert r.status_code == 403 and r.json()["error"]["code"] == "Forbidden"
        big = b'{"x": "' + b"a" * 70000 + b'"}'
        r = c.post(invoke_path("echo"), headers=CALLER, content=big)
        assert r.status_code == 413 and r.json()["error"]["code"] == "PayloadTooLarge"
        assert r.headers["connection"] == "close"  # not read: the HTTP/1.1 connection ends
        r = c.get(invoke_path("echo"), headers=CALLER)
        assert r.status_code == 405 and r.headers["allow"] == "POST"
        r = c.post(
            invoke_path("echo"), headers={**CALLER, "content-type": "text/plain"}, content=b"hi"
        )
        assert r.status_code == 415
        r = c.post(invoke_path("echo"), headers=CALLER, content=b"{not json")
        assert r.status_code == 400 and r.json()["error"]["code"] == "InvalidInput"
        r = c.post(invoke_path("echo"), headers={"content-type": "application/json"}, content=b"{}")
        assert r.status_code == 401  # no identity at all


def test_api_key_without_identity_headers(world: dict[str, Any]) -> None:
    with httpx.Client(base_url=world["srv"].url, timeout=30) as c:
        r = c.post(
            invoke_path("echo"),
            headers={"x-api-key": API_KEY, "content-type": "application/json"},
            content=b'{"k": true}',
        )
        assert r.status_code == 200, r.text
        assert "x-api-key" not in r.json()["headers"]  # never forwarded by default
        r = c.post(
            invoke_path("echo"),
            headers={"authorization": f"ApiKey {API_KEY}x", "content-type": "application/json"},
            content=b"{}",
        )
        assert r.status_code == 401 and r.json()["error"]["code"] == "Unauthorized"
        assert r.json()["error"]["detail"] == "api_key_invalid"
    records = audit(world["srv"])
    ok = [a for a in records if a["event"] == "invocation" and a["principal_id"] == "usr-keyed"]
    assert ok and ok[-1]["agent_id"] == "apikey:usr-keyed"
    failed = [a for a in records if a["event"] == "authentication_failed"]
    assert failed and failed[-1]["credential"] == "api_key"


def test_api_keys_on_agtp_discover(world: dict[str, Any]) -> None:
    """The same keys authenticate AGTP: accepted, its scopes enforced (451
    when the key lacks discovery:query), bound to its principal, wrong key 401."""
    reader = {
        "agent-id": "agtp://client.example/agents/reader",
        "principal-id": "usr-reader",
        "authority-scope": "discovery:query",
        "content-type": "application/agtp+json",
        "agtp-method": "DISCOVER",
    }
    body = agtp("DISCOVER", {"intent": "answer invocations for the gateway tests"})
    with httpx.Client(base_url=world["srv"].url, timeout=30) as c:
        ok = c.post("/agtp", headers={**reader, "x-api-key": READER_KEY}, content=body)
        assert ok.status_code == 200, ok.text
        assert ok.json()["result"]["returned"] >= 1
        keyed = {**reader, "principal-id": "usr-keyed", "x-api-key": API_KEY}
        r = c.post("/agtp", headers=keyed, content=body)
        assert r.status_code == 451 and r.json()["error"]["code"] == "scope_violation"
        r = c.post("/agtp", headers={**reader, "x-api-key": API_KEY}, content=body)
        assert r.status_code == 401 and r.json()["error"]["code"] == "api_key_identity_mismatch"
        r = c.post("/agtp", headers={**reader, "authorization": "ApiKey nope"}, content=body)
        assert r.status_code == 401 and r.json()["error"]["code"] == "api_key_invalid"


def test_rate_limit_per_target_agent(world: dict[str, Any]) -> None:
    statuses = []
    with httpx.Client(base_url=world["srv"].url, timeout=30) as c:
        for i in range(PER_AGENT_BURST + 1):
            caller = {**CALLER, "agent-id": f"agtp://client.example/agents/c{i}"}
            statuses.append(c.post(invoke_path("busy"), headers=caller, content=b"{}"))
        other = c.post(invoke_path("echo"), headers=CALLER, content=b"{}")
    assert [r.status_code for r in statuses] == [200] * PER_AGENT_BURST + [429]
    assert statuses[-1].json()["error"]["code"] == "RateLimited"
    assert int(statuses[-1].headers["retry-after"]) >= 1
    assert other.status_code == 200  # another agent is not limited by this one
    limited = [a for a in audit(world["srv"]) if a["event"] == "rate_limited"]
    assert limited and limited[-1]["limit"] == "invoke_target"
    assert limited[-1]["target"] == cid_of("busy")


def test_audit_records_invocations_and_refusals_without_bodies(world: dict[str, Any]) -> None:
    with httpx.Client(base_url=world["srv"].url, timeout=30) as c:
        c.post(invoke_path("echo"), headers=CALLER, content=orjson.dumps({"m": BODY_MARKER}))
        c.post(invoke_path("dead"), headers=CALLER, content=orjson.dumps({"m": BODY_MARKER}))
        c.post(invoke_path("paused"), headers=CALLER, content=b"{}")
    records = audit(world["srv"])
    done = [a for a in records if a["event"] == "invocation" and a["target"] == cid_of("echo")]
    assert done
    last = done[-1]
    assert last["status"] == 200 and last["outcome"] == "complete"
    assert last["agent_id"] == CALLER["agent-id"] and last["principal_id"] == "usr-invoke"
    assert last["bytes_in"] > 0 and last["bytes_out"] > 0 and last["duration_ms"] >= 0
    assert last["endpoint"].startswith("http://127.0.0.1:")
    refused = {(a["target"], a["code"]) for a in records if a["event"] == "invocation_refused"}
    assert (cid_of("dead"), "upstream_unreachable") in refused
    assert (cid_of("paused"), "agent_suspended") in refused
    raw = (world["srv"].data_dir / "audit.jsonl").read_text()
    assert BODY_MARKER not in raw and CALLER_SECRET not in raw
    assert GATEWAY_TOKEN not in raw and API_KEY not in raw
    assert not any("Traceback" in line for line in world["srv"].output)
