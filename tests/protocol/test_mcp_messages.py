"""The MCP messages, sans-IO (seed 002 sections 2, 4, 8): version
negotiation, the agent identity model's bounds, Announce and Query."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from ans.protocol.mcp_errors import McpMalformed, McpUnsupportedVersion
from ans.protocol.mcp_messages import (
    MAX_AGENT_BYTES,
    MAX_CAPABILITIES,
    SUPPORTED_VERSIONS,
    parse_agent,
    parse_announce,
    parse_query,
    parse_version,
    signed_bytes,
    version_hint,
)

PEM = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"


def agent(**over: Any) -> dict[str, Any]:
    a: dict[str, Any] = {
        "agent_id": "3cde1b52-1fc2-4f7b-8d8c-5e3e6f5c9c1d",
        "agent_name": "data-processor",
        "capabilities": {"metrics": "2.0"},
        "public_key": PEM,
        "transport": {"type": "tcp", "endpoint": "10.0.0.12:9000"},
    }
    a.update(over)
    return {k: v for k, v in a.items() if v is not None}


def test_versions() -> None:
    assert parse_version("v1.0").text == "v1.0"
    v = parse_version("v1.9")  # an unknown minor is accepted
    assert (v.major, v.minor, v.text) == (1, 9, "v1.9")
    with pytest.raises(McpUnsupportedVersion) as exc:
        parse_version("v2.0")
    assert exc.value.supported == SUPPORTED_VERSIONS and "v1.0" in exc.value.message
    for bad in (None, "1.0", "v1", "v1.0.0", 1.0, "v99999.0", "V1.0"):
        with pytest.raises(McpMalformed):
            parse_version(bad)
    assert version_hint({"protocol_version": "v1.4"}) == "v1.4"
    assert version_hint({"protocol_version": "v3.0"}) is None
    assert version_hint([]) is None


def test_agent_model() -> None:
    a = parse_agent(agent(agent_id="3CDE1B52-1FC2-4F7B-8D8C-5E3E6F5C9C1D", metadata={"__os": "x"}))
    assert a.agent_id == "3cde1b52-1fc2-4f7b-8d8c-5e3e6f5c9c1d"
    assert a.capability_map() == {"metrics": "2.0"} and a.metadata == {"__os": "x"}
    assert parse_agent(agent(capabilities={})).capabilities == ()
    assert parse_agent(agent(agent_name=None)).agent_name is None
    bad = [
        agent(agent_id=str(uuid.uuid1())),
        agent(agent_id=None),
        agent(capabilities=None),
        agent(capabilities=[]),
        agent(capabilities={f"c{i}": "1" for i in range(MAX_CAPABILITIES + 1)}),
        agent(capabilities={"x" * 129: "1"}),
        agent(capabilities={"ok": "v" * 257}),
        agent(agent_name="-bad"),
        agent(agent_name="a" * 64),
        agent(public_key="ssh-rsa AAAA"),
        agent(public_key=None),
        agent(transport={"type": "TCP", "endpoint": "x"}),
        agent(transport={"type": "tcp", "endpoint": ""}),
        agent(transport={"type": "tcp", "endpoint": "a\nb"}),
        agent(metadata=[1]),
        agent(metadata={f"k{i}": 1 for i in range(33)}),
        agent(metadata={"blob": "x" * 9000}),
        agent(extra="y" * MAX_AGENT_BYTES),
        "not an object",
    ]
    for value in bad:
        with pytest.raises(McpMalformed):
            parse_agent(value)


def test_announce_and_query() -> None:
    ann = parse_announce(
        {
            "protocol_version": "v1.1",
            "agent": agent(),
            "signature": "AAAA",
            "timestamp": "ignored",
            "rotation_signature": "BBBB",
        }
    )
    assert ann.signature == "AAAA" and ann.rotation_signature == "BBBB"
    assert parse_announce({"protocol_version": "v1.0", "agent": agent()}).signature is None
    with pytest.raises(McpMalformed):
        parse_announce({"protocol_version": "v1.0", "agent": agent(), "signature": 5})
    with pytest.raises(McpUnsupportedVersion):
        parse_announce({"protocol_version": "v2.0", "agent": agent()})
    q = parse_query({"protocol_version": "v1.0", "query": {"capability": " metrics "}})
    assert (q.capability, q.agent_id) == ("metrics", None)
    q = parse_query(
        {
            "protocol_version": "v1.0",
            "query": {"capability": "m"},
            "agent_id": "3cde1b52-1fc2-4f7b-8d8c-5e3e6f5c9c1d",
        }
    )
    assert q.agent_id == "3cde1b52-1fc2-4f7b-8d8c-5e3e6f5c9c1d"
    for doc in (
        {"protocol_version": "v1.0"},
        {"protocol_version": "v1.0", "query": {}},
        {"protocol_version": "v1.0", "query": {"capability": ""}},
        {"protocol_version": "v1.0", "query": {"capability": "m", "agent_id": "x"}},
        {"query": {"capability": "m"}},
    ):
        with pytest.raises(McpMalformed):
            parse_query(doc)


def test_signed_bytes_are_jcs_of_the_agent_as_sent() -> None:
    a = agent(extra={"b": 1, "a": [1.0, "é"]})
    assert signed_bytes(a).startswith(b'{"agent_id":')
    assert b'"extra":{"a":[1,"\xc3\xa9"],"b":1}' in signed_bytes(a)
