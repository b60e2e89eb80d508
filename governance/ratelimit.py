"""Rate limits per Agent-ID (discovery draft 7.2) and per client address, sans-IO.

* A token bucket per key: ``rate`` tokens per second, at most ``burst``;
  each request takes one; an empty bucket is a 429 with ``Retry-After`` =
  the whole seconds until one token is back (at least 1). The key is the
  Agent-ID, or (a second :class:`RateLimiter`, settings from
  :meth:`RateLimitSettings.per_address`) the client address from
  :func:`address_key`: in auth mode ``open`` the Agent-ID is self-asserted,
  so a caller rotating Agent-IDs is bounded only by its address. The server
  charges the address once per AGTP request, whatever its method, before the
  body is parsed, so malformed or costly bodies are bounded by it too.
* Audit without flooding the audit log: the first refusal for an Agent-ID
  writes a ``rate_limited`` note and opens an ``audit_window``; refusals
  inside the window are only counted. The count is written as ``suppressed``
  on the next note for that Agent-ID: the first refusal after the window, or
  (``summary: true``) its next admitted request after the window, its
  eviction, or :meth:`RateLimiter.flush` at shutdown.
* Enumeration signal: ``enumeration_threshold`` or more DISCOVERs within
  ``enumeration_window`` seconds (sliding-window estimate from the current
  and previous fixed windows) writes one ``enumeration_suspected`` note per
  Agent-ID per window, whether or not the requests were served.
* Memory is bounded: at most ``max_tracked`` Agent-IDs; a new one evicts the
  least recently seen idle Agent-ID (bucket full, nothing pending) or, if
  none of the oldest ``EVICTION_SCAN`` is idle, the least recently seen.
* Client addresses: an IPv4-mapped IPv6 address counts as its IPv4 address;
  other IPv6 addresses are keyed by their /64 (one host usually holds a whole
  /64, so rotating inside it must not escape the limit). What is not an IP
  address (a unix socket, unknown) has no key and is not limited.

The limiter returns :class:`AuditNote` values; the caller writes them.
Time comes from an injected monotonic clock.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

Monotonic = Callable[[], float]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
EVICTION_SCAN = 64
IPV6_KEY_PREFIX = 64  # IPv6 clients are keyed by their /64
_IPV4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")


@dataclass(frozen=True, slots=True)
class RateLimitSettings:
    enabled: bool = True
    rate: float = 50.0  # tokens per second
    burst: int = 100
    exempt_agent_ids: tuple[str, ...] = ()
    max_tracked: int = 10_000
    audit_window: float = 60.0  # seconds: at most one rate_limited record per Agent-ID
    enumeration_threshold: int = 300  # DISCOVERs ... (0 disables the signal)
    enumeration_window: float = 10.0  # ... within this many seconds
    # Per client address (every AGTP request, before parsing); 0 disables this limit only.
    per_address_rate: float = 200.0  # tokens per second
    per_address_burst: int = 400
    # CPU a request may use before it costs its address more than its one token
    # (then one token per further millisecond).
    per_address_free_ms: float = 2.0
    exempt_addresses: tuple[IPNetwork, ...] = ()  # parsed by parse_networks

    def per_address(self) -> RateLimitSettings:
        """The settings of the per-client-address limiter (no enumeration signal,
        no exempt Agent-IDs; the exempt addresses are the caller's to apply)."""
        on = self.enabled and self.per_address_rate > 0
        return replace(
            self,
            enabled=on,
            rate=self.per_address_rate if on else 1.0,
            burst=self.per_address_burst,
            exempt_agent_ids=(),
            enumeration_threshold=0,
        )

    def problems(self) -> list[str]:
        out = []
        if not (self.rate > 0 and math.isfinite(self.rate)):
            out.append("rate must be a positive number of requests per second")
        if self.burst < 1:
            out.append("burst must be at least 1")
        if self.max_tracked < 1:
            out.append("max_tracked must be at least 1")
        if not self.audit_window > 0:
            out.append("audit_window must be positive")
        if self.enumeration_threshold < 0:
            out.append("enumeration_threshold must be >= 0 (0 disables it)")
        if not self.enumeration_window > 0:
            out.append("enumeration_window must be positive")
        r = self.per_address_rate
        if not (r == 0 or (r > 0 and math.isfinite(r))):
            out.append(
                "per_address_rate must be a positive number of requests per second "
                "(0 turns the per-address limit off)"
            )
        if self.per_address_burst < 1:
            out.append("per_address_burst must be at least 1")
        if not (self.per_address_free_ms >= 0 and math.isfinite(self.per_address_free_ms)):
            out.append("per_address_free_ms must be a number of milliseconds >= 0")
        if not all(isinstance(n, IPNetwork) for n in self.exempt_addresses):
            out.append("exempt_addresses must be IP networks (see parse_networks)")
        return out


def parse_networks(entries: Iterable[str]) -> tuple[IPNetwork, ...]:
    """IP addresses or CIDR networks, IPv4 or IPv6 (host bits allowed);
    IPv4-mapped IPv6 networks become IPv4 ones. ValueError names a bad entry."""
    out: list[IPNetwork] = []
    for entry in entries:
        try:
            net = ipaddress.ip_network(entry.strip(), strict=False)
        except ValueError:
            raise ValueError(f"{entry!r} is not an IP address or CIDR network") from None
        if isinstance(net, ipaddress.IPv6Network) and net.subnet_of(_IPV4_MAPPED):
            net = ipaddress.IPv4Network((int(net.network_address) & 0xFFFFFFFF, net.prefixlen - 96))
        out.append(net)
    return tuple(out)


def client_ip(address: str | None) -> IPAddress | None:
    """The IP address a client connected from (IPv4-mapped IPv6 as IPv4), or
    None when ``address`` is not an IP address (a unix socket, unknown)."""
    if not address:
        return None
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def address_key(ip: IPAddress) -> str:
    """The rate-limit key of a client IP: the IPv4 address, or the IPv6 /64."""
    if isinstance(ip, ipaddress.IPv4Address):
        return str(ip)
    return str(ipaddress.IPv6Network((int(ip), IPV6_KEY_PREFIX), strict=False))


@dataclass(frozen=True, slots=True)
class AuditNote:
    event: str
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    retry_after: int = 0  # whole seconds, >= 1 when refused
    notes: tuple[AuditNote, ...] = ()


@dataclass(slots=True)
class _Agent:
    tokens: float
    updated: float
    audit_until: float | None = None  # end of the open rate_limited audit window
    suppressed: int = 0  # refusals in the window without a record of their own
    win_start: float = 0.0  # enumeration: current fixed window
    win_count: int = 0
    prev_count: int = 0
    reported_until: float = field(default=-math.inf)


class RateLimiter:
    """Token buckets per key; ``key_field`` names the key in summary notes."""

    def __init__(
        self,
        settings: RateLimitSettings,
        monotonic: Monotonic = time.monotonic,
        key_field: str = "agent_id",
    ) -> None:
        self.settings = settings
        self.key_field = key_field
        self._now = monotonic
        self._exempt = frozenset(settings.exempt_agent_ids)
        self._agents: OrderedDict[str, _Agent] = OrderedDict()

    def __len__(self) -> int:
        return len(self._agents)

    def check(
        self, agent_id: str, method: str, cost: float = 1.0, refusal_cost: float = 0.0
    ) -> Decision:
        """Count one request by ``agent_id``; refuse it if its bucket holds
        fewer than ``cost`` tokens (at most ``burst``: a request always fits
        in a full bucket). A refusal takes ``refusal_cost`` tokens (what
        answering it costs, e.g. a signature; the bucket goes down to at most
        -burst), and its ``retry_after`` counts them: a client that waits
        that long is served, one that does not waits longer."""
        s = self.settings
        now = self._now()
        limited = s.enabled and agent_id not in self._exempt
        counts = method == "DISCOVER" and s.enumeration_threshold > 0
        if not limited and not counts:
            return Decision(True)
        notes: list[AuditNote] = []
        agent = self._agent(agent_id, now, notes)
        if counts:
            self._count_discover(agent_id, agent, now, notes)
        if not limited:
            return Decision(True, notes=tuple(notes))
        self._refill(agent, now)
        need = min(max(cost, 1.0), float(s.burst))
        if agent.tokens >= need:
            agent.tokens -= need
            if agent.suppressed and agent.audit_until is not None and now >= agent.audit_until:
                notes.append(self._summary(agent_id, agent))
            return Decision(True, notes=tuple(notes))
        if refusal_cost > 0:
            agent.tokens = max(-float(s.burst), agent.tokens - refusal_cost)
        retry = max(1, math.ceil((need - agent.tokens) / s.rate))
        if agent.audit_until is None or now >= agent.audit_until:
            notes.append(
                AuditNote(
                    "rate_limited",
                    {"retry_after": retry, "suppressed": agent.suppressed, "summary": False},
                )
            )
            agent.suppressed = 0
            agent.audit_until = now + s.audit_window
        else:
            agent.suppressed += 1
        return Decision(False, retry, tuple(notes))

    def debit(self, key: str, tokens: float) -> None:
        """Take ``tokens`` more from ``key``'s bucket for work it has already
        had done (never refused here; the bucket may go down to -burst, so
        its next requests wait until the work is paid for)."""
        s = self.settings
        agent = self._agents.get(key)
        if tokens <= 0 or agent is None or not s.enabled or key in self._exempt:
            return
        self._refill(agent, self._now())
        agent.tokens = max(-float(s.burst), agent.tokens - tokens)

    def flush(self) -> list[AuditNote]:
        """Summaries of every pending suppressed count (e.g. at shutdown)."""
        notes = []
        for agent_id, agent in self._agents.items():
            if agent.suppressed:
                notes.append(self._summary(agent_id, agent))
        return notes

    # -- internals ---------------------------------------------------------------------
    def _agent(self, agent_id: str, now: float, notes: list[AuditNote]) -> _Agent:
        agent = self._agents.get(agent_id)
        if agent is not None:
            self._agents.move_to_end(agent_id)
            return agent
        if len(self._agents) >= self.settings.max_tracked:
            self._evict(now, notes)
        agent = _Agent(tokens=float(self.settings.burst), updated=now, win_start=now)
        self._agents[agent_id] = agent
        return agent

    def _evict(self, now: float, notes: list[AuditNote]) -> None:
        victim = None
        for i, (agent_id, agent) in enumerate(self._agents.items()):
            if i >= EVICTION_SCAN:
                break
            self._refill(agent, now)
            if agent.tokens >= self.settings.burst and not agent.suppressed:
                victim = agent_id
                break
        if victim is None:
            victim = next(iter(self._agents))
        agent = self._agents.pop(victim)
        if agent.suppressed:
            notes.append(self._summary(victim, agent))

    def _refill(self, agent: _Agent, now: float) -> None:
        elapsed = max(0.0, now - agent.updated)
        agent.tokens = min(float(self.settings.burst), agent.tokens + elapsed * self.settings.rate)
        agent.updated = now

    def _summary(self, agent_id: str, agent: _Agent) -> AuditNote:
        note = AuditNote(
            "rate_limited",
            {self.key_field: agent_id, "suppressed": agent.suppressed, "summary": True},
        )
        agent.suppressed = 0
        agent.audit_until = None
        return note

    def _count_discover(
        self, agent_id: str, agent: _Agent, now: float, notes: list[AuditNote]
    ) -> None:
        s = self.settings
        w = s.enumeration_window
        elapsed = now - agent.win_start
        if elapsed >= w:
            # Roll the fixed windows forward; a gap of two windows forgets the past.
            agent.prev_count = agent.win_count if elapsed < 2 * w else 0
            agent.win_start += w * math.floor(elapsed / w)
            agent.win_count = 0
            elapsed = now - agent.win_start
        agent.win_count += 1
        estimate = agent.prev_count * (1.0 - elapsed / w) + agent.win_count
        if estimate >= s.enumeration_threshold and now >= agent.reported_until:
            agent.reported_until = now + w
            notes.append(
                AuditNote(
                    "enumeration_suspected",
                    {
                        "discover_count": round(estimate),
                        "threshold": s.enumeration_threshold,
                        "window_seconds": w,
                    },
                )
            )
