"""mDNS for the MCP registry (issue 28.8) on the loopback interface only:
a real zeroconf browser in the test sees ``ans serve``'s
``_agentsc._tcp.local.`` advertisement (TTL 10 s, TXT <= 512 bytes), and an
agent advertised by a real zeroconf instance in the test (TXT ``ann`` =
where its signed announcement is served) is registered through the same
rules as POST: a tampered one is dropped and audited, and once the agent
leaves the link it expires with its TTL."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from zeroconf import IPVersion, ServiceBrowser, ServiceInfo, ServiceStateChange, Zeroconf

from ans.mcp.mdns import MAX_TXT_BYTES, SERVICE_TYPE, TTL, txt_bytes
from tests.ans.test_mcp_support import AgentKey, agent_object, announce
from tests.integration.test_mcp_ws_support import ORCH, mcp_config
from tools.launcher import RunningServer, start_server, stop_server

pytestmark = pytest.mark.integration
LOOPBACK = "127.0.0.1"
READ = {**ORCH, "authority-scope": "discover:read"}


def loopback_zeroconf() -> Zeroconf:
    return Zeroconf(interfaces=[LOOPBACK], ip_version=IPVersion.V4Only)


def multicast_on_loopback() -> str | None:
    """None when two zeroconf instances on 127.0.0.1 see each other, else why not."""
    label = f"probe-{uuid.uuid4().hex[:12]}"  # never the name of an earlier probe
    a, b = loopback_zeroconf(), loopback_zeroconf()
    seen = threading.Event()
    info = ServiceInfo(
        "_ansprobe._tcp.local.",
        f"{label}._ansprobe._tcp.local.",
        addresses=[socket.inet_aton(LOOPBACK)],
        port=9,
        server=f"{label}.local.",
    )
    try:
        browser = ServiceBrowser(b, "_ansprobe._tcp.local.", handlers=[lambda **kw: seen.set()])
        a.register_service(info)
        ok = seen.wait(10)
        browser.cancel()
        return None if ok else "multicast on the loopback interface is not delivered here"
    finally:
        a.close()
        b.close()


class Announcements(http.server.BaseHTTPRequestHandler):
    """Serves the signed announcements by path (set on the server)."""

    def do_GET(self) -> None:
        body = self.server.docs.get(self.path)  # type: ignore[attr-defined]
        if body is None:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def agents_http() -> Iterator[http.server.ThreadingHTTPServer]:
    srv = http.server.ThreadingHTTPServer((LOOPBACK, 0), Announcements)
    srv.docs = {}  # type: ignore[attr-defined]
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def mdns_server(tmp_path: Path) -> Iterator[RunningServer]:
    reason = multicast_on_loopback()
    if reason is not None:
        pytest.skip(reason)
    cfg = mcp_config(tmp_path / "ans.toml", mdns="true", mdns_interfaces='["127.0.0.1"]')
    srv = start_server(tmp_path / "data", "--config", str(cfg))
    yield srv
    stop_server(srv)


def wait_for(check: Any, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    return check()


def test_the_registry_is_advertised_and_seen_by_a_real_browser(
    mdns_server: RunningServer,
) -> None:
    port = int(mdns_server.url.rsplit(":", 1)[1])
    zc = loopback_zeroconf()
    found: list[str] = []
    browser = ServiceBrowser(
        zc,
        SERVICE_TYPE,
        handlers=[
            lambda zeroconf, service_type, name, state_change: (
                found.append(name) if state_change is ServiceStateChange.Added else None
            )
        ],
    )
    try:

        def ours() -> ServiceInfo | None:
            for name in list(found):
                info = zc.get_service_info(SERVICE_TYPE, name, timeout=3000)
                if info is not None and info.port == port:
                    return info
            return None

        info = wait_for(ours)
        assert info is not None, f"no {SERVICE_TYPE} advertisement on port {port}: {found}"
        props = {k.decode(): (v or b"").decode() for k, v in info.properties.items()}
        assert props["role"] == "registry" and props["path"] == "/mcp/v1"
        assert props["ws"] == "/mcp/v1/ws" and props["pv"].startswith("v1.")
        assert txt_bytes(props) <= MAX_TXT_BYTES and len(info.text or b"") <= MAX_TXT_BYTES
        assert LOOPBACK in info.parsed_addresses()
        # the records as received (the browser's cache) carry the seed's TTL
        ttls = {r.ttl for r in zc.cache.entries_with_name(info.name)}
        assert ttls == {TTL}, ttls
        # what it advertises works: the REST surface at path + /agents
        r = httpx.get(f"http://{LOOPBACK}:{info.port}{props['path']}/agents", headers=READ)
        assert r.status_code == 200
    finally:
        browser.cancel()
        zc.close()


def test_an_agent_advertised_on_the_link_is_registered_then_expires(
    mdns_server: RunningServer, agents_http: http.server.ThreadingHTTPServer
) -> None:
    good_key, bad_key = AgentKey(), AgentKey()
    good = agent_object(good_key, name="mdns-agent", **{"mdns-cap": "1.0"})
    bad = agent_object(bad_key, name="mdns-tampered", **{"mdns-cap": "1.0"})
    tampered = announce(bad_key, bad)
    tampered["agent"] = {**bad, "agent_name": "changed"}
    docs = agents_http.docs  # type: ignore[attr-defined]
    docs["/good.json"], docs["/bad.json"] = announce(good_key, good), tampered
    http_port = agents_http.server_address[1]
    zc = loopback_zeroconf()
    infos = [
        ServiceInfo(
            SERVICE_TYPE,
            f"{label}.{SERVICE_TYPE}",
            addresses=[socket.inet_aton(LOOPBACK)],
            port=http_port,
            properties={"role": "agent", "id": agent["agent_id"], "pv": "v1.0", "ann": path},
            server=f"{label}.local.",
            host_ttl=TTL,
            other_ttl=TTL,
        )
        for label, agent, path in (
            ("mdns-agent", good, "/good.json"),
            ("mdns-tampered", bad, "/bad.json"),
        )
    ]
    base = mdns_server.url + "/mcp/v1/agents/"
    try:
        for info in infos:
            zc.register_service(info)
        got = wait_for(
            lambda: (
                (r := httpx.get(base + good["agent_id"], headers=READ)).status_code == 200
                and r.json()
            )
        )
        assert got and got["agent"] == good and got["registry"]["trust_tier"] == 3
        # still there after more than its TTL (3 s): the link keeps announcing it
        time.sleep(4)
        assert httpx.get(base + good["agent_id"], headers=READ).status_code == 200
        assert httpx.get(base + bad["agent_id"], headers=READ).status_code == 404
        audit = (mdns_server.data_dir / "audit.jsonl").read_text().splitlines()
        drops = [json.loads(x) for x in audit if "mcp_announcement_dropped" in x]
        assert any(
            d.get("mcp_agent_id") == bad["agent_id"] and d.get("transport") == "mdns" for d in drops
        )
        zc.unregister_service(infos[0])  # it leaves the link
        assert wait_for(lambda: httpx.get(base + good["agent_id"], headers=READ).status_code == 404)
    finally:
        zc.close()
