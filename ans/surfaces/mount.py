"""The REST and WebSocket surfaces a server mounts beside AGTP, in routing
order, and the background tasks they bring (DESIGN.md "Surfaces").

Every surface is a translation of messages over the one core: it is built
from the same :class:`~ans.service.AnsService` and the same
:class:`~ans.gate.RequestGate` as AGTP. Routing order matters only where
paths overlap: the HAIDIP invocation gateway claims
``{base}/agents/{id}/invoke`` before the HAIDIP surface sees the rest of
``{base}``. A request no surface claims stays AGTP's (``:method DISCOVER``
on any path is AGTP's whatever the path).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..asgi_types import ReadBody, Receive, Scope, Send
from ..gate import RequestGate
from ..mcp.registry import McpRegistry
from ..mcp.surface import McpSurface
from ..mcp.sweeper import McpSweeper
from ..mcp.ws import WsSurface
from ..mcp.ws_backend import build_ws
from ..service import AnsService
from .haidip import HaidipSurface
from .haidip_invoke import InvokeSurface
from .profile import ProfileSurface


class Background(Protocol):
    """A task that runs for the server's lifetime (e.g. the freshness scheduler)."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...


class RestSurface(Protocol):
    """A surface that answers the plain HTTP requests under its paths."""

    def owns(self, path: str) -> bool: ...
    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None: ...


@dataclass(frozen=True, slots=True)
class Mounted:
    """What :func:`mount` built: the REST surfaces in routing order, the
    background tasks they need, and the named ones other parts reach."""

    rest: tuple[RestSurface, ...]
    background: tuple[Background, ...]
    mcp: McpSurface | None
    mcp_ws: WsSurface | None


def mount(
    service: AnsService,
    gate: RequestGate,
    read_body: ReadBody,
    cpu_clock: Callable[[], float],
    body_timeout: float,
) -> Mounted:
    """The surfaces ``service.config`` enables, each over ``service`` and ``gate``."""
    config = service.config
    rest: list[RestSurface] = []
    background: list[Background] = []
    haidip = config.haidip
    if haidip.enabled and config.invoke.enabled:
        # Its upstream client closes with the lifespan.
        invoke = InvokeSurface(
            service, gate, config.invoke, base_path=haidip.base_path, body_timeout=body_timeout
        )
        rest.append(invoke)
        background.append(invoke)
    if config.profile.enabled:
        rest.append(ProfileSurface(service, gate, config.profile, read_body, cpu_clock))
    if haidip.enabled:
        rest.append(HaidipSurface(service, gate, haidip, read_body, cpu_clock))
    mcp: McpSurface | None = None
    mcp_ws: WsSurface | None = None
    if config.mcp.enabled:
        registry = McpRegistry(service, config.mcp)
        mcp = McpSurface(registry, gate, read_body, cpu_clock)
        rest.append(mcp)
        background.append(McpSweeper(registry))
        # Its subscriptions follow the store's change feed.
        mcp_ws, hub = build_ws(registry, gate)
        background.append(hub)
    return Mounted(tuple(rest), tuple(background), mcp, mcp_ws)
