"""TLS with ALPN h2 on a real server, and a tampering server on loopback that
shows the CLI refuses a result whose signature does not verify."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

pytestmark = pytest.mark.integration

IDENTITY = {
    "agent-id": "agtp://o.example/agents/orch",
    "principal-id": "usr-1",
    "authority-scope": "discovery:query",
}


def test_tls_alpn_h2(tmp_path: Path, server_factory: Any, tls_cert: tuple[Path, Path]) -> None:
    cert, key = tls_cert
    cfg = tmp_path / "ans.toml"
    cfg.write_text(f'[server]\ntls_certfile = "{cert}"\ntls_keyfile = "{key}"\n')
    srv = server_factory(tmp_path / "data", "--config", str(cfg), "--demo")
    assert srv.url.startswith("https://127.0.0.1:")
    ctx = ssl.create_default_context(cafile=str(cert))
    with httpx.Client(base_url=srv.url, http2=True, verify=ctx, timeout=20) as c:
        resp = c.request(
            "DISCOVER",
            "/",
            headers=IDENTITY,
            content=orjson.dumps({"parameters": {"intent": "book a flight"}}),
        )
    assert resp.http_version == "HTTP/2" and resp.status_code == 200
    out = subprocess.run(
        [
            str(Path(sys.executable).with_name("ans")),
            "discover",
            "book a flight",
            "--server",
            srv.url,
            "--cacert",
            str(cert),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "signature: verified" in out.stdout


@pytest.fixture
def tampering_server(server: Any) -> Iterator[str]:
    """A loopback h2c server replaying a real signed answer with one field changed."""
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    with httpx.Client(base_url=server.url, http1=False, http2=True, timeout=20) as c:
        real = c.request(
            "DISCOVER",
            "/",
            headers=IDENTITY,
            content=orjson.dumps({"parameters": {"intent": "audit Solidity smart contracts"}}),
        )
        jwks = c.get("/.well-known/jwks.json").content
    body = real.json()
    body["result"]["results"][0]["behavioral_trust_score"] = 0.99  # forged upgrade
    forged = orjson.dumps(body)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        data = jwks if scope["path"] == "/.well-known/jwks.json" else forged
        while (await receive()).get("more_body"):
            pass
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/agtp+json")],
            }
        )
        await send({"type": "http.response.body", "body": data})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    cfg = Config()
    cfg.bind = [f"fd://{sock.detach()}"]  # hypercorn owns and closes it
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


def test_cli_rejects_a_tampered_result(tampering_server: str) -> None:
    out = subprocess.run(
        [
            str(Path(sys.executable).with_name("ans")),
            "discover",
            "audit Solidity smart contracts",
            "--server",
            tampering_server,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert "NOT VERIFIED" in out.stderr
