"""The invocation gateway's parts without a server: ``[haidip.invoke]``
parsing (bounds, secrets never printed, per-agent timeouts, the gateway
secret from a value, the environment or a file), which endpoint an agent is
called at, the address policy (loopback/private refused by default), the
header allow-lists each way, and the HAIDIP error mapping."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from ans.protocol.errors import (
    AgtpError,
    BodyTooLarge,
    ErrorCode,
    Gone,
    NotFound,
    NotInvocable,
    RateLimited,
    ScopeViolation,
    ServerError,
    Unavailable,
    UpstreamTimeout,
    UpstreamUnreachable,
    ZoneViolation,
)

import ans.config as config_mod
from ans.config import ConfigError, load
from ans.config_env import show
from ans.invoke_config import InvokeConfigError, InvokeSettings, invoke_from_table
from ans.surfaces.haidip_errors import haidip_error
from ans.surfaces.haidip_invoke_upstream import (
    Resolver,
    check_address,
    downstream_headers,
    make_client,
    select_target,
    upstream_headers,
)

CID = "ab" * 32


def test_defaults_are_the_safe_ones() -> None:
    s = InvokeSettings()
    assert s.enabled and s.max_body_bytes == 1024 * 1024
    assert not s.allow_http and not s.allow_private_targets and not s.forward_credentials
    assert s.timeouts(CID).connect == 5.0 and s.timeouts(CID).read == 30.0


def test_table_parses_overrides_and_paths(tmp_path: Path) -> None:
    s = invoke_from_table(
        {
            "read_timeout": 12,
            "allow_http": True,
            "auth_header": "Authorization",
            "auth_value_file": "token.txt",
            "agents": {CID: {"read_timeout": 0.5}},
        },
        tmp_path,
    )
    assert s.timeouts("other", CID).read == 0.5 and s.timeouts(CID).connect == 5.0
    assert s.timeouts("unknown").read == 12
    assert s.auth_value_file == tmp_path / "token.txt"
    (tmp_path / "token.txt").write_text("Bearer from-file\n")
    assert s.gateway_secret({}) == "Bearer from-file"


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"max_body_bytes": 0}, "max_body_bytes"),
        ({"max_body_bytes": 1.5}, "integer"),
        ({"read_timeout": "fast"}, "read_timeout"),
        ({"allow_http": "yes"}, "true or false"),
        ({"nope": 1}, "unknown key 'nope'"),
        ({"auth_header": "X-Token"}, "needs auth_value"),
        ({"auth_value": "v"}, "needs auth_header"),
        ({"auth_header": "Content-Length", "auth_value": "v"}, "sets itself"),
        ({"auth_header": "Bad Header", "auth_value": "v"}, "header name"),
        ({"auth_header": "X", "auth_value": "v", "auth_value_env": "E"}, "at most one"),
        ({"client_certfile": "c.pem"}, "go together"),
        ({"base_path": "/x"}, "unknown key 'base_path'"),  # [haidip] base_path rules
        ({"agents": {CID: {"timeout": 1}}}, "unknown key 'timeout'"),
    ],
)
def test_bad_tables_are_one_line_errors(table: dict[str, Any], words: str) -> None:
    with pytest.raises(InvokeConfigError, match=words):
        invoke_from_table(table)


def test_secret_from_the_environment_and_never_printed(tmp_path: Path) -> None:
    s = invoke_from_table({"auth_header": "X-Gw", "auth_value_env": "GW_SECRET"})
    assert s.gateway_secret({"GW_SECRET": "s3"}) == "s3"
    with pytest.raises(InvokeConfigError, match="GW_SECRET"):
        s.gateway_secret({})
    cfg = tmp_path / "ans.toml"
    cfg.write_text('[haidip.invoke]\nauth_header = "X-Gw"\nauth_value = "top-secret-value"\n')
    loaded, origin = config_mod.load_with_origin(cfg, environ={})
    assert loaded.invoke.gateway_secret() == "top-secret-value"
    text = show(loaded, config_mod.SECTIONS, config_mod.RENAMED, config_mod.TABLES, origin)
    assert "[haidip.invoke]" in text and "top-secret-value" not in text
    assert "top-secret-value" not in repr(loaded)
    cfg.write_text("[haidip.invoke]\nmax_body_bytes = -1\n")
    with pytest.raises(ConfigError, match="max_body_bytes"):
        load(cfg, environ={})


def caps(*endpoints: str) -> dict[str, Any]:
    return {"bindings": [{"protocol": e.split(":")[0], "endpoint": e} for e in endpoints]}


def test_target_is_the_first_callable_binding() -> None:
    manifest = {"manifest_uri": "agtp://a.example/agents/x"}
    https = InvokeSettings()
    t = select_target(manifest, caps("agtp://a/x", "https://a.example:8443/run"), https)
    assert t.url == "https://a.example:8443/run" and t.origin == "https://a.example:8443"
    with pytest.raises(NotInvocable, match="allow_http"):
        select_target(manifest, caps("http://a.example/run"), https)
    plain = InvokeSettings(allow_http=True)
    assert select_target(manifest, caps("http://a.example/run"), plain).port == 80
    for bad in ("ftp://a.example/x", "https://user:pw@a.example/x", "javascript:alert(1)"):
        with pytest.raises(NotInvocable):
            select_target(manifest, caps(bad), plain)
    with pytest.raises(NotInvocable, match="no http"):
        select_target(manifest, {}, plain)  # only the implicit AGTP binding
    assert select_target(manifest, {"endpoint": "https://b.example/"}, https).host == "b.example"


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9/x", "http://10.1.2.3/x", "http://[::1]/x", "http://localhost/x"]
)
def test_loopback_and_private_targets_refused_unless_allowed(url: str) -> None:
    s = InvokeSettings(allow_http=True)
    target = select_target({}, caps(url), s)
    with pytest.raises(NotInvocable, match="allow_private_targets"):
        asyncio.run(check_address(target, s, 2.0))
    allowed = InvokeSettings(allow_http=True, allow_private_targets=True)
    asyncio.run(check_address(target, allowed, 2.0))  # no exception


def test_headers_each_way() -> None:
    caller = {
        "content-type": "application/json; charset=utf-8",
        "accept": "text/event-stream",
        "authorization": "Bearer caller",
        "cookie": "s=1",
        "x-api-key": "k",
        "agent-id": "agtp://c/agents/a",
        "connection": "close",
    }
    s = InvokeSettings(
        auth_header="Authorization",
        auth_value=invoke_from_table(
            {"auth_header": "Authorization", "auth_value": "Bearer gateway"}
        ).auth_value,
    )
    out = upstream_headers(caller, s, "rid-1", s.gateway_secret())
    assert out["authorization"] == "Bearer gateway"  # the gateway's, never the caller's
    assert "cookie" not in out and "x-api-key" not in out and "agent-id" not in out
    assert "connection" not in out and out["x-request-id"] == "rid-1"
    assert out["accept"] == "text/event-stream" and out["accept-encoding"] == "identity"
    forwarding = upstream_headers(caller, InvokeSettings(forward_credentials=True), "r", "")
    assert forwarding["authorization"] == "Bearer caller" and forwarding["cookie"] == "s=1"
    answer = httpx.Response(
        200,
        headers=[
            ("Content-Type", "text/event-stream"),
            ("Transfer-Encoding", "chunked"),
            ("Set-Cookie", "a=1"),
            ("Content-Length", "5"),
            ("X-Request-Id", "spoofed"),
            ("X-Agent", "y"),
        ],
    )
    relayed = dict(downstream_headers(answer, "rid-1", "x-request-id"))
    assert relayed == {
        b"content-type": b"text/event-stream",
        b"x-agent": b"y",
        b"x-request-id": b"rid-1",
    }


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (ScopeViolation("x"), 403, "Forbidden"),
        (ZoneViolation("x"), 403, "Forbidden"),
        (NotFound("x"), 404, "NotFound"),
        (BodyTooLarge("x"), 413, "PayloadTooLarge"),
        (Gone("x", code=ErrorCode.AGENT_RETIRED), 410, "Gone"),
        (Unavailable("x", code=ErrorCode.AGENT_SUSPENDED), 503, "AgentSuspended"),
        (RateLimited("x", headers=(("retry-after", "3"),)), 429, "RateLimited"),
        (UpstreamUnreachable("x"), 502, "AgentError"),
        (UpstreamTimeout("x"), 504, "AgentTimeout"),
        (NotInvocable("x"), 502, "AgentError"),
        (ServerError("x"), 503, "Unavailable"),
    ],
)
def test_gateway_failures_in_the_haidip_error_model(exc: AgtpError, status: int, code: str) -> None:
    err = haidip_error(exc, "rid-1")
    assert (err.status, err.body["error"]["code"]) == (status, code)
    assert err.body["error"]["detail"] == str(exc.code)  # e.g. upstream_timeout, not_invocable
    if status == 429:
        assert err.headers == (("retry-after", "3"),)


class _Agent:
    """A real HTTP/1.1 server on loopback that counts its connections and
    keeps the Host header of each request."""

    def __init__(self) -> None:
        self.connections = 0
        self.hosts: list[str] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        head = await reader.readuntil(b"\r\n\r\n")
        for line in head.decode("latin-1").split("\r\n"):
            if line.lower().startswith("host:"):
                self.hosts.append(line.split(":", 1)[1].strip())
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()


def _resolver(*answers: list[str]) -> tuple[Resolver, list[str]]:
    """A resolver that gives its answers in turn (the last one from then on)."""
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        return answers[min(len(asked), len(answers)) - 1]

    return resolve, asked


def test_a_name_that_rebinds_to_loopback_after_the_check_is_refused_at_connect() -> None:
    async def run() -> tuple[_Agent, list[str]]:
        agent = _Agent()
        server = await asyncio.start_server(agent.serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        s = InvokeSettings(allow_http=True)
        # public when the gateway checks, loopback when it would connect
        resolve, asked = _resolver(["93.184.216.34"], ["127.0.0.1"])
        target = select_target({}, caps(f"http://agent.example:{port}/run"), s)
        await check_address(target, s, 2.0, resolve)  # passes: a global address
        async with make_client(s, resolve) as client:
            with pytest.raises(NotInvocable, match="allow_private_targets"):
                await client.post(target.url, content=b"{}")
        server.close()
        await server.wait_closed()
        return agent, asked

    agent, asked = asyncio.run(run())
    assert asked == ["agent.example", "agent.example"]
    assert agent.connections == 0  # nothing reached the operator's own network


def test_the_connection_goes_to_the_checked_address_under_the_agents_name() -> None:
    async def run() -> tuple[_Agent, int, int]:
        agent = _Agent()
        server = await asyncio.start_server(agent.serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        s = InvokeSettings(allow_http=True, allow_private_targets=True)
        resolve, _ = _resolver(["127.0.0.1"])
        async with make_client(s, resolve) as client:
            r = await client.post(f"http://agent.example:{port}/run", content=b"{}")
        server.close()
        await server.wait_closed()
        return agent, r.status_code, port

    agent, status, port = asyncio.run(run())
    assert status == 200
    assert agent.connections == 1
    assert agent.hosts == [f"agent.example:{port}"]


def test_a_name_that_does_not_resolve_is_unreachable_not_a_crash() -> None:
    async def nowhere(host: str, port: int) -> list[str]:
        raise OSError("no such name")

    async def run() -> None:
        async with make_client(InvokeSettings(allow_http=True), nowhere) as client:
            await client.post("http://agent.example:9/run", content=b"{}")

    with pytest.raises(UpstreamUnreachable, match="does not resolve"):
        asyncio.run(run())
