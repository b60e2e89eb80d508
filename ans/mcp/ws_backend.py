"""The MCP registry behind the WebSocket and the subscriptions: the
:class:`~ans.mcp.ws.WsBackend` and :class:`~ans.mcp.feed.AgentSource` of
:class:`~ans.mcp.registry.McpRegistry`, and :func:`build_ws`, which wires the
``/ws`` surface (and, with ``[mcp] mdns``, nothing more: mDNS is started by
the server, which knows its URL: :func:`build_mdns`).

The same registry object as ``POST {base}/agents`` and ``POST {base}/query``
answers every frame; the handshake authenticates as the REST surface does
(identity headers, else the bearer token's claims, then the gate); 200
answers are signed as the REST ones are (``signed_document``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ans.protocol.errors import AgtpError
from ans.protocol.mcp_messages import CURRENT_VERSION, MAX_MESSAGE_BYTES, version_hint

from ..gate import Credentials, RequestGate
from ..store_records import Change
from ..surfaces.profile_render import signed_document
from .errors import mcp_error
from .feed import AgentState, FeedHub
from .mdns import MdnsRegistry
from .registry import McpCaller, McpRegistry
from .surface import Asking, McpSurface
from .ws import GATE_METHOD, Reply, WsSurface


class RegistryBackend:
    """:class:`~ans.mcp.ws.WsBackend` over the registry."""

    def __init__(self, registry: McpRegistry, gate: RequestGate) -> None:
        self.registry = registry
        self.gate = gate

    def authenticate(
        self, headers: dict[str, str], creds: Credentials, method: str = GATE_METHOD
    ) -> McpCaller:
        identity = McpSurface.identity(headers)
        asking = self.gate.authenticate_and_limit(method, Asking(identity, None), creds)
        version = headers.get("mcp-protocol-version")
        return McpCaller.of(
            asking.identity,
            source="ws",
            protocol_version=version_hint({"protocol_version": version}) if version else None,
        )

    async def announce(self, message: dict[str, Any], caller: Any) -> Reply:
        return self._signed(await asyncio.to_thread(self.registry.announce, message, caller))

    async def query(self, message: dict[str, Any], caller: Any) -> Reply:
        return self._signed(await asyncio.to_thread(self.registry.query, message, caller))

    def _signed(self, reply: Any) -> Reply:
        body = reply.body
        if reply.status == 200:  # signed as the REST answers are
            body = signed_document(body, self.registry.service.key)
        return Reply(reply.status, body)

    def error(self, exc: AgtpError, version: str | None) -> Reply:
        err = mcp_error(exc, version)
        return Reply(err.status, err.body)

    def version_of(self, message: dict[str, Any]) -> str:
        return str(version_hint(message) or CURRENT_VERSION)


class RegistrySource:
    """:class:`~ans.mcp.feed.AgentSource`: a feed change of an announced
    agent's record to what the registry holds of it now."""

    def __init__(self, registry: McpRegistry) -> None:
        self.registry = registry

    def states(self, changes: Sequence[Change]) -> list[AgentState]:
        out: list[AgentState] = []
        for ch in changes:
            event = self.registry.change_event(ch.canonical_id, CURRENT_VERSION)
            if event is None:
                continue  # not an announced agent
            agent = event["agent"]
            agent_id = str(agent["agent_id"])
            if event["change"] != "upsert":
                out.append(AgentState(agent_id, None))
                continue
            view = event.get("registry") or {}
            out.append(AgentState(agent_id, agent, _epoch(view.get("first_seen")), view))
        return out


def _epoch(text: Any) -> float | None:
    """An RFC 3339 time of the registry view as POSIX seconds (None if absent)."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def build_ws(registry: McpRegistry, gate: RequestGate) -> tuple[WsSurface, FeedHub]:
    """The ``/ws`` surface and its process's feed hub (stopped at shutdown)."""
    svc = registry.service
    settings = registry.settings
    hub = FeedHub(
        svc.store,
        RegistrySource(registry),
        settings.ws_queue,
        clock=lambda: float(svc.clock().timestamp()),
    )
    surface = WsSurface(
        RegistryBackend(registry, gate),
        hub,
        gate,
        svc.audit,
        settings.base_path,
        MAX_MESSAGE_BYTES,
    )
    return surface, hub


def build_mdns(registry: McpRegistry, url: str) -> MdnsRegistry:
    """mDNS for ``[mcp] mdns = true``: the registry at ``url`` advertised,
    agents browsed and announced through ``registry`` (as the local caller
    ``ans:mdns``: same rules as POST)."""
    settings = registry.settings

    async def announce(message: dict[str, Any]) -> tuple[int, Any]:
        caller = McpCaller.local("mdns")
        reply = await asyncio.to_thread(registry.announce, message, caller)
        return reply.status, reply.body

    return MdnsRegistry(
        url=url,
        base_path=settings.base_path,
        agent_id=str(registry.service.config.agent_id),
        version=CURRENT_VERSION,
        interfaces=settings.mdns_interfaces,
        announce=announce,
        refresh=max(1.0, settings.ttl_seconds / 3),
    )
