"""Index freshness and availability: the decisions, without any I/O.

Discovery draft 4.4 (Index Freshness) and 6.2 (Agent Availability Signals),
base -02 6.5.4 (status sub-resource). This module owns

* :class:`FreshnessSettings` — the ``[freshness]`` TOML section, validated;
* where an agent is reached (:func:`agent_endpoint`), what a DESCRIBE answer
  must look like (:func:`capabilities_from_describe`) and what a status
  document means for routing (:func:`availability_from_status`);
* :class:`FreshnessSchedule` — per-agent due times spread over the interval
  and the three-strikes counter, driven by an explicit ``now``.

The network side (httpx, the asyncio task, the webhook outbox) lives in
:mod:`ans.freshness_runner` and :mod:`ans.outbox`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any
from urllib.parse import urlsplit

import orjson

from ans.governance.manifest import validate_capabilities
from ans.protocol.errors import AgtpError

# Reasons an Active, indexed agent is marked unavailable (AnsService.mark_availability).
SUSPENDED = "suspended"
AT_CAPACITY = "at_capacity"
NOT_RESPONDING = "not_responding"
# Reasons an agent is removed from the index.
DESCRIBE_FAILED = "describe_failed"
DESCRIBE_GONE = "describe_gone"
# The capability-document fields the governance platform, not the agent, controls:
# a DESCRIBE answer cannot move where this ANS refreshes the agent from.
PINNED_CAPABILITY_FIELDS = ("endpoint",)
MAX_ERROR_TEXT = 300


class FreshnessConfigError(ValueError):
    """The ``[freshness]`` section is unusable."""


@dataclass(frozen=True, slots=True)
class FreshnessSettings:
    """The ``[freshness]`` section. Times are seconds."""

    enabled: bool = True
    interval: float = 86400.0  # DESCRIBE every indexed agent this often (draft 4.4: 24 h)
    retry_interval: float = 3600.0  # after a failed DESCRIBE (capped at interval)
    status_interval: float = 300.0  # poll {endpoint}/status this often; 0 = off
    timeout: float = 5.0  # per request
    concurrency: int = 8  # requests in flight at once
    failures_before_removal: int = 3  # consecutive failed DESCRIBEs
    scheme: str = "https"  # agtp://host[:port]/path -> {scheme}://host[:port]/path
    max_response_bytes: int = 1024 * 1024
    webhook_url: str | None = None
    webhook_timeout: float = 5.0
    webhook_backoff_initial: float = 1.0
    webhook_backoff_max: float = 3600.0
    webhook_max_attempts: int = 50

    @property
    def effective_retry_interval(self) -> float:
        return min(self.retry_interval, self.interval)

    def validate(self) -> FreshnessSettings:
        def within(name: str, lo: float, hi: float) -> None:
            v = getattr(self, name)
            if not lo <= v <= hi:
                raise FreshnessConfigError(f"[freshness] {name} must be {lo:g}..{hi:g}, got {v!r}")

        within("interval", 0.05, 30 * 86400)
        within("retry_interval", 0.05, 30 * 86400)
        if self.status_interval != 0:
            within("status_interval", 0.05, 86400)
        within("timeout", 0.05, 60)
        within("concurrency", 1, 256)
        within("failures_before_removal", 1, 100)
        within("max_response_bytes", 1024, 64 * 1024 * 1024)
        within("webhook_timeout", 0.05, 60)
        within("webhook_backoff_initial", 0.01, 86400)
        within("webhook_backoff_max", self.webhook_backoff_initial, 7 * 86400)
        within("webhook_max_attempts", 1, 10_000)
        if self.scheme not in ("http", "https"):
            raise FreshnessConfigError("[freshness] scheme must be 'https' or 'http'")
        if self.webhook_url is not None:
            check_http_url(self.webhook_url, "[freshness] webhook_url")
        return self


_FLOATS = {
    "interval",
    "retry_interval",
    "status_interval",
    "timeout",
    "webhook_timeout",
    "webhook_backoff_initial",
    "webhook_backoff_max",
}
_INTS = {"concurrency", "failures_before_removal", "max_response_bytes", "webhook_max_attempts"}
_BOOLS = {"enabled"}
_STRS = {"scheme", "webhook_url"}


def freshness_from_table(table: Mapping[str, Any]) -> FreshnessSettings:
    """Parse the ``[freshness]`` TOML table; every bad value raises."""
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key in _FLOATS:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise FreshnessConfigError(f"[freshness] {key} must be a number")
            if not math.isfinite(value):
                raise FreshnessConfigError(f"[freshness] {key} must be finite")
            values[key] = float(value)
        elif key in _INTS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise FreshnessConfigError(f"[freshness] {key} must be an integer")
            values[key] = value
        elif key in _BOOLS:
            if not isinstance(value, bool):
                raise FreshnessConfigError(f"[freshness] {key} must be true or false")
            values[key] = value
        elif key in _STRS:
            if not isinstance(value, str):
                raise FreshnessConfigError(f"[freshness] {key} must be a string")
            values[key] = value.strip()
        else:
            raise FreshnessConfigError(f"unknown key {key!r} in [freshness]")
    return FreshnessSettings(**values).validate()


def check_http_url(url: str, what: str) -> str:
    """An absolute http(s) URL without credentials or fragment."""
    if not isinstance(url, str) or not 0 < len(url) <= 2048:
        raise FreshnessConfigError(f"{what} must be an http(s) URL")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise FreshnessConfigError(f"{what} is not a valid URL: {url[:100]!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FreshnessConfigError(f"{what} must be an http(s) URL, got {url[:100]!r}")
    if parts.username or parts.password or parts.fragment:
        raise FreshnessConfigError(f"{what} must not carry credentials or a fragment")
    return url


# -- where an agent is reached ---------------------------------------------------------


class EndpointError(ValueError):
    """No usable URL can be derived for an agent."""


def agent_endpoint(manifest_uri: str, capabilities: Mapping[str, Any], scheme: str) -> str:
    """The agent's base URL: the capability document's ``endpoint`` (set by the
    governance platform at ACTIVATE) if present, else its ``manifest_uri``
    ``agtp://host[:port]/path`` mapped to ``{scheme}://host[:port]/path``."""
    endpoint = capabilities.get("endpoint")
    if isinstance(endpoint, str):
        try:
            return check_http_url(endpoint, "capabilities.endpoint").rstrip("/")
        except FreshnessConfigError as exc:
            raise EndpointError(str(exc)) from None
    try:
        parts = urlsplit(manifest_uri)
        port = parts.port
    except ValueError:
        raise EndpointError(f"manifest_uri {manifest_uri[:100]!r} is not a URI") from None
    if parts.scheme != "agtp" or not parts.hostname:
        raise EndpointError(f"manifest_uri {manifest_uri[:100]!r} is not agtp://host/path")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise EndpointError("manifest_uri carries credentials, a query or a fragment")
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    return f"{scheme}://{netloc}{parts.path.rstrip('/')}"


def status_url(endpoint: str) -> str:
    """The -02 6.5.4 status sub-resource of an agent endpoint."""
    return endpoint.rstrip("/") + "/status"


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


# -- what came back ---------------------------------------------------------------------


class DocumentError(ValueError):
    """An agent's answer is not the document we asked for."""


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise DocumentError("answer is not JSON") from None
    if not isinstance(doc, dict):
        raise DocumentError("answer is not a JSON object")
    return doc


def capabilities_from_describe(body: bytes) -> dict[str, Any]:
    """The Capability Document in an AGTP DESCRIBE 200 body.

    Accepted: ``{"result": <capability document>}`` or ``{"result":
    {"capabilities": <capability document>, ...}}`` (the shape an ANS answers
    for an indexed agent). The document must name at least one capability
    domain and pass :func:`validate_capabilities`."""
    doc = _json_object(body)
    if doc.get("status", 200) != 200:
        raise DocumentError(f"DESCRIBE answer carries AGTP status {str(doc['status'])[:16]}")
    result = doc.get("result")
    if not isinstance(result, dict):
        raise DocumentError("DESCRIBE answer has no result object")
    caps = result.get("capabilities", result)
    if not isinstance(caps, dict):
        raise DocumentError("result.capabilities is not an object")
    known = {"supported_methods", "modalities", "tools", "zones_accepted", "tags", "examples"}
    if not known & caps.keys():
        raise DocumentError("DESCRIBE result is not a Capability Document")
    try:
        validate_capabilities(caps)
    except AgtpError as exc:
        raise DocumentError(exc.message) from None
    return caps


def merge_pinned(described: Mapping[str, Any], stored: Mapping[str, Any]) -> dict[str, Any]:
    """The refreshed capability document: what the agent described, with the
    fields the governance platform controls taken from the stored one."""
    caps = {k: v for k, v in described.items() if k not in PINNED_CAPABILITY_FIELDS}
    for name in PINNED_CAPABILITY_FIELDS:
        if name in stored:
            caps[name] = stored[name]
    return caps


def _count(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        return None
    return v


def availability_from_status(
    body: bytes, canonical_id: str, capabilities: Mapping[str, Any]
) -> str | None:
    """None if the agent may be routed to, else why not.

    The body is an ``agtp-status`` document (-02 6.5.4), bare or as an AGTP
    ``result``. ``lifecycle_state`` other than Active -> that state in lower
    case (``"suspended"``); ``active_session_count >= max_sessions`` ->
    ``"at_capacity"``, where ``max_sessions`` comes from the status document,
    else from the capability document (no capacity known: never at capacity).
    Raises DocumentError for anything else."""
    doc = _json_object(body)
    if isinstance(doc.get("result"), dict):
        doc = doc["result"]
    if doc.get("document_type") != "agtp-status":
        raise DocumentError("status answer is not an agtp-status document")
    cid = doc.get("canonical_id")
    if cid is not None and cid != canonical_id:
        raise DocumentError("status document names another canonical_id")
    state = doc.get("lifecycle_state")
    if not isinstance(state, str) or not 0 < len(state) <= 32 or not state.isalpha():
        raise DocumentError("status document has no lifecycle_state")
    if state != "Active":
        return state.lower()
    active = _count(doc.get("active_session_count"))
    capacity = _count(doc.get("max_sessions"))
    if capacity is None:
        capacity = _count(capabilities.get("max_sessions"))
    if active is not None and capacity is not None and active >= capacity:
        return AT_CAPACITY
    return None


def short_error(text: str) -> str:
    return text if len(text) <= MAX_ERROR_TEXT else text[: MAX_ERROR_TEXT - 1] + "…"


# -- when, and three strikes --------------------------------------------------------------


def phase(canonical_id: str) -> float:
    """A stable fraction in [0, 1) per agent: where in each interval it is due,
    so the agents are spread over the interval rather than all at once."""
    digest = hashlib.sha256(canonical_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class Outcome(Enum):
    KEEP = "keep"  # success, or a failure below the threshold
    REMOVE = "remove"  # the threshold is reached (or the agent said 410 Gone)


@dataclass(slots=True)
class AgentClock:
    next_describe: float
    next_status: float
    failures: int = 0
    last_error: str = ""


@dataclass(slots=True)
class FreshnessSchedule:
    """Due times and consecutive-failure counts for the indexed agents.

    ``sync(ids, now)`` adopts newly indexed agents (first due at
    ``now + (1 + phase) * interval``) and forgets removed ones; ``due_*`` say who
    is due; ``describe_ok``/``describe_failed`` record outcomes and schedule
    the next attempt (a failure is retried after ``retry_interval``)."""

    settings: FreshnessSettings
    agents: dict[str, AgentClock] = field(default_factory=dict)

    def sync(self, canonical_ids: Iterable[str], now: float) -> None:
        s = self.settings
        current = set(canonical_ids)
        for cid in list(self.agents):
            if cid not in current:
                del self.agents[cid]
        for cid in current:
            if cid not in self.agents:
                p = phase(cid)
                # First due one interval (plus its phase) after it is first seen:
                # an agent just activated or just loaded is as fresh as it gets.
                self.agents[cid] = AgentClock(
                    next_describe=now + (1.0 + p) * s.interval,
                    next_status=now + (1.0 + p) * s.status_interval,
                )

    def due_describe(self, now: float) -> list[str]:
        return sorted(c for c, a in self.agents.items() if a.next_describe <= now)

    def due_status(self, now: float) -> list[str]:
        if self.settings.status_interval <= 0:
            return []
        return sorted(c for c, a in self.agents.items() if a.next_status <= now)

    def next_due(self) -> float | None:
        times = [a.next_describe for a in self.agents.values()]
        if self.settings.status_interval > 0:
            times += [a.next_status for a in self.agents.values()]
        return min(times, default=None)

    def describe_ok(self, cid: str, now: float) -> None:
        a = self.agents.get(cid)
        if a is None:
            return
        a.failures, a.last_error = 0, ""
        a.next_describe = _next(a.next_describe, self.settings.interval, now)

    def describe_failed(self, cid: str, now: float, error: str, *, gone: bool = False) -> Outcome:
        a = self.agents.get(cid)
        if a is None:
            return Outcome.KEEP
        a.failures += 1
        a.last_error = short_error(error)
        a.next_describe = now + self.settings.effective_retry_interval
        if gone or a.failures >= self.settings.failures_before_removal:
            return Outcome.REMOVE
        return Outcome.KEEP

    def status_polled(self, cid: str, now: float) -> None:
        a = self.agents.get(cid)
        if a is not None:
            a.next_status = _next(a.next_status, self.settings.status_interval, now)

    def failures(self, cid: str) -> int:
        a = self.agents.get(cid)
        return a.failures if a is not None else 0


def _next(previous: float, interval: float, now: float) -> float:
    """Keep the agent's place in the interval; skip slots missed while busy."""
    nxt = previous + interval
    if nxt <= now:
        nxt += math.ceil((now - nxt) / interval + 1e-9) * interval
    return nxt
