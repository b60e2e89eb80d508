"""Signed DISCOVER refusals against real servers (discovery draft 3.4, 7.1):
every DISCOVER answer is signed with the ANS key, a refusal too; the client
verifies it and rejects an unsigned or forged one."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from ans.governance.keys import SigningKey
from ans.protocol.errors import SignatureInvalid, UnsignedResponse
from ans.protocol.messages import query_digest

from ans.client import AgtpClient, AgtpResponse, NativeAgtpClient, verify_discover_answer

from .conftest import RunningServer, start_server, stop_server

IDENTITY = {
    "agent-id": "agtp://refusals.example/agents/orch",
    "principal-id": "usr-refusals",
    "authority-scope": "discovery:query",
}


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server with a restricted zone, a per-address limit of 40 tokens and
    the native listener too."""
    cfg = tmp_path_factory.mktemp("refusals-config") / "ans.toml"
    cfg.write_text(
        '[zones]\nrestricted = ["zone:finance"]\n\n'
        "[rate_limit]\nper_address_rate = 0.05\nper_address_burst = 40\nrate = 100.0\n"
        "burst = 200\n",
        encoding="utf-8",
    )
    srv = start_server(
        tmp_path_factory.mktemp("refusals-data"),
        "--native-listen",
        "127.0.0.1:0",
        "--config",
        str(cfg),
    )
    yield srv
    stop_server(srv)


def client(url: str, scope: str = "discovery:query") -> AgtpClient:
    return AgtpClient(url, agent_id=IDENTITY["agent-id"], principal_id="usr-refusals", scope=scope)


def test_every_discover_refusal_is_signed_and_verifies(limited: RunningServer) -> None:
    with client(limited.url) as c:
        jwks = c.jwks()
        kid = jwks["keys"][0]["kid"]
        # 422: the parameters parsed, so the refusal names the query
        params = {"intent": "audit", "limit": 0}
        resp, got = c.discover_verified(params, task_id="t-422")
        assert (resp.status, got) == (422, kid)
        err = resp.error or {}
        assert err["code"] == "invalid_limit" and err["status"] == 422
        assert err["task_id"] == "t-422" and err["query_digest"] == query_digest(params)
        assert err["generated_at"].endswith("Z") and err["ans_signature"]["key_id"] == kid
        # 453: restricted zone without the grant
        resp, _ = c.discover_verified({"governance_zone": "zone:finance"}, task_id="t-453")
        assert resp.status == 453 and (resp.error or {})["code"] == "zone_violation"
    # 451: no discovery:query
    with client(limited.url, scope="documents:read") as c:
        resp, _ = c.discover_verified({"intent": "x"}, jwks=jwks, task_id="t-451")
        assert resp.status == 451 and (resp.error or {})["query_digest"] == query_digest(
            {"intent": "x"}
        )
    # 400: a body that does not parse is signed too, with no query_digest
    with httpx.Client(base_url=limited.url, http1=False, http2=True, timeout=20) as h:
        raw = h.request(
            "DISCOVER", "/", headers={**IDENTITY, "task-id": "t-400"}, content=b'{"parameters":'
        )
    resp = AgtpResponse(raw.status_code, dict(raw.headers), raw.json())
    assert verify_discover_answer(resp, jwks, None, "t-400") == kid
    assert (resp.error or {})["code"] == "malformed_json"
    assert "query_digest" not in (resp.error or {})
    # the native listener signs its DISCOVER refusals the same way
    assert limited.native_url is not None
    with NativeAgtpClient(
        limited.native_url, agent_id=IDENTITY["agent-id"], principal_id="u", scope="x:y"
    ) as n:
        resp, got = n.discover_verified({"intent": "x"}, jwks=jwks, task_id="t-native")
        assert (resp.status, got) == (451, kid)


def test_a_forged_or_unsigned_refusal_is_rejected(limited: RunningServer) -> None:
    with client(limited.url, scope="documents:read") as c:
        jwks = c.jwks()
        real = c.discover({"intent": "x"}, task_id="t-forge")
    assert real.status == 451
    verify_discover_answer(real, jwks, {"intent": "x"}, "t-forge")

    def variant(status: int, change: Any) -> AgtpResponse:
        body = orjson.loads(orjson.dumps(real.body))
        change(body)
        return AgtpResponse(status, real.headers, body)

    unsigned = variant(451, lambda b: b["error"].pop("ans_signature"))
    with pytest.raises(UnsignedResponse):
        verify_discover_answer(unsigned, jwks, {"intent": "x"}, "t-forge")
    reworded = variant(451, lambda b: b["error"].update(code="rate_limited"))
    with pytest.raises(SignatureInvalid, match="does not verify"):
        verify_discover_answer(reworded, jwks, {"intent": "x"}, "t-forge")
    # a real signed refusal replayed as another status, task or query
    restatus = variant(453, lambda b: b.update(status=453))
    with pytest.raises(SignatureInvalid) as exc:
        verify_discover_answer(restatus, jwks, {"intent": "x"}, "t-forge")
    assert exc.value.code == "refusal_mismatch"
    with pytest.raises(SignatureInvalid) as exc:
        verify_discover_answer(real, jwks, {"intent": "x"}, "t-other")
    assert exc.value.code == "refusal_mismatch"
    with pytest.raises(SignatureInvalid) as exc:
        verify_discover_answer(real, jwks, {"intent": "y"}, "t-forge")
    assert exc.value.code == "digest_mismatch"
    # signed by a key the ANS does not publish
    other = SigningKey.generate()
    with pytest.raises(SignatureInvalid):
        verify_discover_answer(real, {"keys": [other.public.jwk()]}, {"intent": "x"}, "t-forge")


def test_rate_limited_refusals_are_signed_and_pay_for_their_signature(
    tmp_path: Path,
) -> None:
    cfg = tmp_path / "ans.toml"
    cfg.write_text("[rate_limit]\nper_address_rate = 0.5\nper_address_burst = 4\n")
    srv = start_server(tmp_path / "data", "--config", str(cfg))
    try:
        with client(srv.url) as c:
            jwks = c.jwks()
            # a signed 422 costs 2 tokens (request + signature): two fit in 4
            statuses = [c.discover({"limit": 0}, task_id=f"t{i}").status for i in range(3)]
            assert statuses == [422, 422, 429]
            resp, _ = c.discover_verified({"limit": 0}, jwks=jwks, task_id="t-429")
        assert resp.status == 429
        err = resp.error or {}
        # refused before parsing: no query_digest; Retry-After is covered
        assert err["code"] == "rate_limited" and "query_digest" not in err
        assert err["retry_after"] == int(resp.headers["retry-after"]) >= 2
    finally:
        stop_server(srv)


@pytest.fixture
def unsigned_refusing_server() -> Iterator[str]:
    """A loopback h2c server that answers DISCOVER with an unsigned 451 and
    publishes a real JWKS: what a forger without the ANS key can send."""
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    key = SigningKey.generate()
    jwks = orjson.dumps({"keys": [key.public.jwk()]})
    refusal = orjson.dumps(
        {
            "status": 451,
            "task_id": "task-cli-discover",
            "error": {"code": "scope_violation", "message": "forged"},
        }
    )

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        jwks_path = scope["path"] == "/.well-known/jwks.json"
        while (await receive()).get("more_body"):
            pass
        start = {"type": "http.response.start", "status": 200 if jwks_path else 451}
        await send({**start, "headers": [(b"content-type", b"application/agtp+json")]})
        await send({"type": "http.response.body", "body": jwks if jwks_path else refusal})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    cfg = Config()
    cfg.bind = [f"fd://{sock.detach()}"]
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    thread = threading.Thread(
        target=lambda: loop.run_until_complete(serve(app, cfg, shutdown_trigger=stop.wait)),
        daemon=True,
    )
    thread.start()
    yield f"http://127.0.0.1:{port}"
    loop.call_soon_threadsafe(stop.set)
    thread.join(timeout=10)


def test_cli_rejects_an_unsigned_refusal(unsigned_refusing_server: str) -> None:
    out = subprocess.run(
        [
            str(Path(sys.executable).with_name("ans")),
            "discover",
            "audit Solidity smart contracts",
            "--server",
            unsigned_refusing_server,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1, out.stderr
    assert "NOT VERIFIED" in out.stderr and "not signed" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr
