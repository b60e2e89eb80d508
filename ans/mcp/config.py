"""The ``[mcp]`` section: the MCP-orchestrator registry surface (seed 002).

Off by default (DESIGN.md "Switches"). ``allow_list`` is empty by default, so
even when enabled nobody may announce until an operator lists ``agent_id``
values or glob patterns (``["*"]`` admits any). ``ttl_seconds`` defaults to
3 x the seed's 30 s heartbeat. The WebSocket and mDNS keys (``mdns``,
``mdns_interfaces``, ``ws_ping_interval``, ``ws_queue``) are read here too so
the section is one settings value.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The seed's heartbeat (section 5.3: every 30 s); an agent is dropped after
# three missed announcements.
ANNOUNCE_INTERVAL = 30.0
MAX_ALLOW_LIST = 1024
_PATTERN_RE = re.compile(r"[A-Za-z0-9*?\[\]!-]{1,64}")
_BASE_RE = re.compile(r"/[A-Za-z0-9._~/-]{1,100}")
_ZONE_RE = re.compile(r"zone:[a-z0-9][a-z0-9._-]{0,62}")
_IFACE_RE = re.compile(r"[A-Za-z0-9._:%-]{1,64}")


class McpConfigError(ValueError):
    """The ``[mcp]`` section is unusable."""


@dataclass(frozen=True, slots=True)
class McpSettings:
    enabled: bool = False
    base_path: str = "/mcp/v1"
    # agent_id values or glob patterns (fnmatch, case-insensitive); [] = nobody.
    allow_list: tuple[str, ...] = ()
    ttl_seconds: float = 3 * ANNOUNCE_INTERVAL
    # How long a rotated-out key is still accepted for its agent.
    key_grace_seconds: float = 86400.0
    # How often the sweeper removes agents past their TTL.
    sweep_interval: float = 5.0
    # The governance zone announced records are indexed in.
    zone: str = "zone:public"
    # Bounds: live agents in the registry, list page size.
    max_agents: int = 100_000
    page_size: int = 50
    max_page_size: int = 500
    # WebSocket /mcp/v1/ws and mDNS (built on this registry's seam).
    mdns: bool = False
    mdns_interfaces: tuple[str, ...] = ()
    ws_ping_interval: float = 30.0
    ws_queue: int = 256

    def allows(self, agent_id: str) -> bool:
        """Whether ``agent_id`` matches an allow-list entry."""
        lowered = agent_id.lower()
        return any(fnmatch.fnmatchcase(lowered, p.lower()) for p in self.allow_list)

    def validate(self) -> McpSettings:
        def within(name: str, lo: float, hi: float) -> None:
            v = getattr(self, name)
            if not lo <= v <= hi:
                raise McpConfigError(f"[mcp] {name} must be {lo:g}..{hi:g}, got {v!r}")

        within("ttl_seconds", 0.05, 30 * 86400)
        within("key_grace_seconds", 0, 365 * 86400)
        within("sweep_interval", 0.01, 3600)
        within("max_agents", 1, 10_000_000)
        within("page_size", 1, self.max_page_size)
        within("max_page_size", 1, 10_000)
        within("ws_ping_interval", 0.05, 3600)
        within("ws_queue", 1, 1_000_000)
        if _BASE_RE.fullmatch(self.base_path) is None or self.base_path.endswith("/"):
            raise McpConfigError(
                f"[mcp] base_path must be an absolute path without a trailing '/', "
                f"got {self.base_path[:100]!r}"
            )
        if _ZONE_RE.fullmatch(self.zone) is None:
            raise McpConfigError("[mcp] zone must be a zone id such as 'zone:public'")
        if len(self.allow_list) > MAX_ALLOW_LIST:
            raise McpConfigError(f"[mcp] allow_list has more than {MAX_ALLOW_LIST} entries")
        for entry in self.allow_list:
            if _PATTERN_RE.fullmatch(entry) is None:
                raise McpConfigError(
                    f"[mcp] allow_list entries are agent_id values or glob patterns, "
                    f"got {entry[:80]!r}"
                )
        for iface in self.mdns_interfaces:
            if _IFACE_RE.fullmatch(iface) is None:
                raise McpConfigError(f"[mcp] mdns_interfaces: bad entry {iface[:80]!r}")
        return self


_FLOATS = {"ttl_seconds", "key_grace_seconds", "sweep_interval", "ws_ping_interval"}
_INTS = {"max_agents", "page_size", "max_page_size", "ws_queue"}
_BOOLS = {"enabled", "mdns"}
_STRS = {"base_path", "zone"}
_LISTS = {"allow_list", "mdns_interfaces"}


def mcp_from_table(table: Mapping[str, Any]) -> McpSettings:
    """Parse the ``[mcp]`` TOML table; every bad value raises McpConfigError."""
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key in _FLOATS:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise McpConfigError(f"[mcp] {key} must be a number")
            if not math.isfinite(value):
                raise McpConfigError(f"[mcp] {key} must be finite")
            values[key] = float(value)
        elif key in _INTS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise McpConfigError(f"[mcp] {key} must be an integer")
            values[key] = value
        elif key in _BOOLS:
            if not isinstance(value, bool):
                raise McpConfigError(f"[mcp] {key} must be true or false")
            values[key] = value
        elif key in _STRS:
            if not isinstance(value, str):
                raise McpConfigError(f"[mcp] {key} must be a string")
            values[key] = value.strip()
        elif key in _LISTS:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise McpConfigError(f"[mcp] {key} must be a list of strings")
            values[key] = tuple(v.strip() for v in value)
        else:
            raise McpConfigError(f"unknown key {key!r} in [mcp]")
    return McpSettings(**values).validate()
