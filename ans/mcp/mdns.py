"""mDNS for the MCP registry (seed 002 sections 3.1, 5.1), with python-zeroconf,
when ``[mcp] mdns = true``: one instance per node (the single process, or
worker 0 of ``ans serve --workers N``).

**The registry advertises itself** as a ``_agentsc._tcp.local.`` service
(records' TTL 10 s), its TXT record (<= 512 bytes, checked) saying::

    role=registry  pv=v1.0  path=/mcp/v1  ws=/mcp/v1/ws  scheme=http  id=<ANS agent id>

so an orchestrator on the link finds the registry fallback (``path`` +
``/agents`` is the REST surface, ``ws`` the WebSocket) without configuration.

**It browses the link for agents' announcements.** A signed Announce
message does not fit 512 bytes of TXT (a PEM key and a signature alone are
~300 bytes, RSA far more), so an agent advertises *where to fetch it*, on the
same service type::

    role=agent  id=<agent_id>  pv=v1.0  ann=/announce.json

(TXT ``ann``: an absolute path, <= 256 characters). The registry fetches
``http://<the service's own address>:<its SRV port><ann>`` -- only ever the
advertising host, never a URL named in the record, so a record on the link
cannot point the registry at another host -- with a deadline, no redirects,
at most ``max_bytes``, and hands the message to the registry's announce
(:data:`Announce`): the same rules as ``POST {base}/agents`` (schema,
signature, trust store, allow-list, coalescing; refusals counted and
audited there). While the service stays on the link it is fetched again
every ``refresh`` seconds (the heartbeat); once it leaves, the registry's
TTL removes the agent. An ``id`` that differs from the fetched agent's is
dropped.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import ifaddr  # zeroconf's own dependency: the host's interface addresses
import structlog
from zeroconf import InterfaceChoice, IPVersion, ServiceStateChange, Zeroconf
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from ans.protocol import jsonstrict

log = structlog.get_logger("ans.mcp.mdns")

SERVICE_TYPE = "_agentsc._tcp.local."
TTL = 10  # s: the seed's mDNS TTL (3.1)
MAX_TXT_BYTES = 512  # the seed's payload bound (5.1)
MAX_TRACKED = 1024  # agents' services followed at once
FETCH_TIMEOUT = 3.0
RESOLVE_MS = 3000
MAX_ANNOUNCE_BYTES = 64 * 1024
_PATH_RE = re.compile(r"/[A-Za-z0-9._~/%+-]{0,255}")
_NAME_RE = re.compile(r"[^A-Za-z0-9-]+")

# The registry's announce: an Announce message in, (status, body) out.
Announce = Callable[[dict[str, Any]], Awaitable[tuple[int, Mapping[str, Any]]]]


class MdnsError(ValueError):
    """The advertisement cannot be built (e.g. its TXT exceeds 512 bytes)."""


def txt_bytes(properties: Mapping[str, str]) -> int:
    """The TXT record's RDATA size: one length byte + ``key=value`` per entry."""
    return sum(1 + len(f"{k}={v}".encode()) for k, v in properties.items())


def registry_txt(base_path: str, scheme: str, agent_id: str, version: str) -> dict[str, str]:
    props = {
        "role": "registry",
        "pv": version,
        "path": base_path,
        "ws": base_path.rstrip("/") + "/ws",
        "scheme": scheme,
        "id": agent_id[:200],
    }
    if txt_bytes(props) > MAX_TXT_BYTES:
        raise MdnsError(f"the registry's TXT record is {txt_bytes(props)} bytes (limit 512)")
    return props


def instance_name(host: str, port: int) -> str:
    label = _NAME_RE.sub("-", f"ans-{host}-{port}").strip("-")[:63]
    return f"{label}.{SERVICE_TYPE}"


def interfaces_of(configured: Sequence[str]) -> tuple[Any, IPVersion]:
    """zeroconf's ``interfaces`` and IP version for ``[mcp] mdns_interfaces``
    (IP addresses; none: every IPv4 interface)."""
    if not configured:
        return InterfaceChoice.All, IPVersion.V4Only
    v6 = any(ipaddress.ip_address(a).version == 6 for a in configured)
    v4 = any(ipaddress.ip_address(a).version == 4 for a in configured)
    version = IPVersion.All if v4 and v6 else (IPVersion.V6Only if v6 else IPVersion.V4Only)
    return list(configured), version


def advertised_addresses(bound_host: str, configured: Sequence[str]) -> list[bytes]:
    """The A/AAAA addresses of the registry: the bound host, or (bound to
    every address) the configured interfaces' (else every IPv4 one)."""
    ip = ipaddress.ip_address(bound_host)
    if not ip.is_unspecified:
        return [ip.packed]
    hosts = list(configured) or [
        str(ip.ip)
        for adapter in ifaddr.get_adapters()
        for ip in adapter.ips
        if isinstance(ip.ip, str) and not ip.ip.startswith("127.")
    ]
    return [ipaddress.ip_address(a).packed for a in hosts]


@dataclass(eq=False)
class Tracked:
    """An agent's service on the link: where its announcement is fetched."""

    name: str
    url: str
    agent_id: str
    task: asyncio.Task[None] | None = field(default=None, repr=False)


@dataclass
class MdnsStats:
    advertised: bool = False
    seen: int = 0  # agents' services resolved
    registered: int = 0  # announcements the registry accepted
    refused: int = 0  # fetched, and refused by the registry (or malformed)
    failed: int = 0  # not resolved or not fetched


class MdnsRegistry:
    """Advertises the registry and browses for agents (a lifespan task)."""

    def __init__(
        self,
        *,
        url: str,
        base_path: str,
        agent_id: str,
        version: str,
        interfaces: Sequence[str],
        announce: Announce,
        refresh: float,
        ttl: int = TTL,
        max_bytes: int = MAX_ANNOUNCE_BYTES,
        fetch_timeout: float = FETCH_TIMEOUT,
    ) -> None:
        parsed = httpx.URL(url)
        self.scheme = parsed.scheme
        self.host = parsed.host or "127.0.0.1"
        self.port = parsed.port or (443 if self.scheme == "https" else 80)
        self.interfaces = tuple(interfaces)
        self.ttl = ttl
        self.refresh = refresh
        self.announce = announce
        self.max_bytes = max_bytes
        self.fetch_timeout = fetch_timeout
        self.properties = registry_txt(base_path, self.scheme, agent_id, version)
        self.name = instance_name(socket.gethostname(), self.port)
        self.stats = MdnsStats()
        self.tracked: dict[str, Tracked] = {}
        self._zc: AsyncZeroconf | None = None
        self._browser: AsyncServiceBrowser | None = None
        self._info: AsyncServiceInfo | None = None
        self._http: httpx.AsyncClient | None = None
        self._fetching = asyncio.Semaphore(4)
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Advertise and browse; when the link refuses (no multicast, port 5353
        unusable), log it and serve on without mDNS: the registry's REST and
        WebSocket are the seed's fallback for exactly that case (3.2)."""
        try:
            await self._start()
        except Exception as exc:
            log.error("mDNS unavailable: serving without it", error=str(exc)[:300])
            await self.stop()

    async def _start(self) -> None:
        interfaces, version = interfaces_of(self.interfaces)
        self._zc = zc = AsyncZeroconf(interfaces=interfaces, ip_version=version)
        self._http = httpx.AsyncClient(timeout=self.fetch_timeout, follow_redirects=False)
        self._info = AsyncServiceInfo(
            SERVICE_TYPE,
            self.name,
            addresses=advertised_addresses(self.host, self.interfaces),
            port=self.port,
            properties=self.properties,
            server=self.name.split(".", 1)[0] + ".local.",
            host_ttl=self.ttl,
            other_ttl=self.ttl,
        )
        await zc.async_register_service(self._info, allow_name_change=True)
        self.stats.advertised = True
        self._browser = AsyncServiceBrowser(zc.zeroconf, SERVICE_TYPE, handlers=[self._on_change])
        log.info("mDNS: advertising the MCP registry", name=self._info.name, port=self.port)

    async def stop(self) -> None:
        for t in list(self._tasks) + [t.task for t in self.tracked.values() if t.task]:
            t.cancel()
        self.tracked.clear()
        if self._browser is not None:
            await self._browser.async_cancel()
            self._browser = None
        if self._zc is not None:
            if self._info is not None and self.stats.advertised:
                await self._zc.async_unregister_service(self._info)
            await self._zc.async_close()
            self._zc = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        self.stats.advertised = False

    # -- browsing ---------------------------------------------------------------------
    def _on_change(
        self,
        zeroconf: Zeroconf,
        service_type: str,
        name: str,
        state_change: ServiceStateChange,
    ) -> None:
        """zeroconf's handler (on the event loop): follow or forget ``name``."""
        if self._info is not None and name == self._info.name:
            return
        if state_change is ServiceStateChange.Removed:
            gone = self.tracked.pop(name, None)
            if gone is not None and gone.task is not None:
                gone.task.cancel()
            return
        task = asyncio.get_running_loop().create_task(self._resolve(name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resolve(self, name: str) -> None:
        assert self._zc is not None
        info = AsyncServiceInfo(SERVICE_TYPE, name)
        try:
            found = await info.async_request(self._zc.zeroconf, RESOLVE_MS)
        except Exception:
            found = False
        if not found or info.port is None:
            self.stats.failed += 1
            return
        props = {
            (k or b"").decode("utf-8", "replace"): (v or b"").decode("utf-8", "replace")
            for k, v in info.properties.items()
        }
        if props.get("role") != "agent":
            return  # a registry (this one on another node, or another), not an agent
        target = agent_target(props, info.parsed_addresses(), info.port)
        if target is None:
            self.stats.failed += 1
            log.info("mDNS: an agent's service without a usable ann/address", name=name[:120])
            return
        self.stats.seen += 1
        url, agent_id = target
        old = self.tracked.pop(name, None)
        if old is not None and old.task is not None:
            old.task.cancel()
        if len(self.tracked) >= MAX_TRACKED:
            log.warning("mDNS: too many agents on the link; not followed", name=name[:120])
            return
        tracked = Tracked(name, url, agent_id)
        tracked.task = asyncio.get_running_loop().create_task(self._follow(tracked))
        self.tracked[name] = tracked

    async def _follow(self, tracked: Tracked) -> None:
        """Fetch and announce now, and every ``refresh`` seconds while the
        service stays on the link."""
        while True:
            async with self._fetching:
                await self.fetch_and_announce(tracked)
            await asyncio.sleep(self.refresh)

    async def fetch_and_announce(self, tracked: Tracked) -> None:
        assert self._http is not None
        try:
            doc = await fetch_announcement(self._http, tracked.url, self.max_bytes)
        except Exception as exc:
            self.stats.failed += 1
            log.info("mDNS: announcement not fetched", url=tracked.url, error=str(exc)[:200])
            return
        agent = doc.get("agent")
        if not isinstance(agent, dict) or agent.get("agent_id") != tracked.agent_id:
            self.stats.refused += 1
            log.info("mDNS: the announcement is not the advertised agent's", url=tracked.url)
            return
        status, _body = await self.announce(doc)
        if status == 200:
            self.stats.registered += 1
        else:
            self.stats.refused += 1


def agent_target(
    props: Mapping[str, str], addresses: Sequence[str], port: int
) -> tuple[str, str] | None:
    """(fetch URL, advertised agent_id) of an agent's service, or None when
    its TXT or addresses are unusable. Only the service's own address."""
    path, agent_id = props.get("ann", ""), props.get("id", "")
    if _PATH_RE.fullmatch(path) is None or not agent_id or len(agent_id) > 64:
        return None
    if not addresses or not 0 < port < 65536:
        return None
    ip = ipaddress.ip_address(addresses[0])
    host = f"[{ip}]" if ip.version == 6 else str(ip)
    return f"http://{host}:{port}{path}", agent_id


async def fetch_announcement(client: httpx.AsyncClient, url: str, max_bytes: int) -> dict[str, Any]:
    """GET ``url`` (no redirects; at most ``max_bytes``) as a JSON object."""
    async with client.stream("GET", url, headers={"accept": "application/json"}) as resp:
        if resp.status_code != 200:
            raise ValueError(f"HTTP {resp.status_code}")
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.aiter_bytes():
            size += len(chunk)
            if size > max_bytes:
                raise ValueError(f"more than {max_bytes} bytes")
            chunks.append(chunk)
    doc = jsonstrict.loads(b"".join(chunks), max_bytes=max_bytes)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return doc
