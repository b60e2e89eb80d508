"""mDNS pieces that need no link (ans.mcp.mdns): the registry's TXT record
within the seed's 512 bytes, the agents' TXT convention to a fetch URL on the
advertising host only, and a link that refuses mDNS leaves the server
serving without it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ans.mcp.mdns import (
    MAX_TXT_BYTES,
    MdnsError,
    MdnsRegistry,
    agent_target,
    instance_name,
    registry_txt,
    txt_bytes,
)


def test_registry_txt_fits_and_a_too_long_one_is_refused() -> None:
    props = registry_txt("/mcp/v1", "https", "agtp://ans.example/agents/ans", "v1.1")
    assert props["role"] == "registry" and props["ws"] == "/mcp/v1/ws"
    assert txt_bytes(props) <= MAX_TXT_BYTES
    with pytest.raises(MdnsError):
        registry_txt("/" + "p" * 400, "https", "x" * 200, "v1.1")


def test_instance_names_are_dns_labels() -> None:
    name = instance_name("host.with dots_and spaces", 4480)
    label = name.split(".", 1)[0]
    assert name.endswith("._agentsc._tcp.local.") and len(label) <= 63
    assert all(c.isalnum() or c == "-" for c in label)


@pytest.mark.parametrize(
    ("props", "addresses", "port", "want"),
    [
        ({"ann": "/a.json", "id": "x"}, ["10.0.0.5"], 8080, ("http://10.0.0.5:8080/a.json", "x")),
        ({"ann": "/a.json", "id": "x"}, ["fe80::1"], 80, ("http://[fe80::1]:80/a.json", "x")),
        ({"ann": "http://evil.example/a", "id": "x"}, ["10.0.0.5"], 80, None),  # not a path
        (
            {"ann": "//evil.example/a", "id": "x"},
            ["10.0.0.5"],
            80,
            ("http://10.0.0.5:80//evil.example/a", "x"),
        ),
        ({"ann": "/a@evil", "id": "x"}, ["10.0.0.5"], 80, None),
        ({"ann": "/a.json"}, ["10.0.0.5"], 80, None),  # no id
        ({"ann": "/a.json", "id": "x"}, [], 80, None),  # no address
        ({"ann": "/a.json", "id": "x"}, ["10.0.0.5"], 0, None),
    ],
)
def test_agent_fetch_urls_stay_on_the_advertising_host(
    props: dict[str, str], addresses: list[str], port: int, want: Any
) -> None:
    got = agent_target(props, addresses, port)
    assert got == want
    if got is not None:
        assert got[0].startswith(f"http://{addresses[0] if ':' not in addresses[0] else '['}")


def test_a_link_without_mdns_leaves_the_registry_serving() -> None:
    async def announce(message: dict[str, Any]) -> tuple[int, Any]:
        return 200, {}

    async def run() -> None:
        mdns = MdnsRegistry(
            url="http://127.0.0.1:9",
            base_path="/mcp/v1",
            agent_id="agtp://ans.example/agents/ans",
            version="v1.1",
            interfaces=["198.51.100.7"],  # no interface here has it
            announce=announce,
            refresh=1.0,
        )
        await mdns.start()  # logs, does not raise
        assert mdns.stats.advertised is False
        await mdns.stop()

    asyncio.run(run())
