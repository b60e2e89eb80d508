"""``[haidip.invoke]``: the settings of the HAIDIP invocation gateway
(``POST {base_path}/agents/{id}/invoke``, :mod:`ans.surfaces.haidip_invoke`)
as one frozen :class:`InvokeSettings`, parsed by :func:`invoke_from_table`.

Defaults are the safe ones: HTTPS targets only, no loopback/private/link-local
targets, the caller's credentials never forwarded, 1 MiB request bodies,
16 MiB answers, 5 s to connect and 30 s between answer bytes. Per-agent
timeouts come from ``[haidip.invoke.agents."<canonical id>"]``. The secret
the gateway presents to agents (``auth_value``) may instead be read from an
environment variable (``auth_value_env``) or a file (``auth_value_file``) at
start-up, so it need not sit in the TOML file.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ans.governance.ratelimit import RateLimitSettings

HEADER_NAME_RE = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}")
BASE_PATH_RE = re.compile(r"(?:/[A-Za-z0-9._~-]+){1,8}")
MAX_AGENT_OVERRIDES = 10_000
# Headers the gateway must set itself: a configured auth_header may not be one.
RESERVED_HEADERS = frozenset(
    {"host", "content-length", "content-type", "transfer-encoding", "connection", "te"}
)


class Secret:
    """A configured secret: printed (``ans config show``, repr, logs) as
    ``<redacted>``; :meth:`reveal` gives the value."""

    __slots__ = ("_value",)

    def __init__(self, value: str = "") -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __str__(self) -> str:
        return "<redacted>" if self._value else ""

    __repr__ = __str__


class InvokeConfigError(ValueError):
    """``[haidip.invoke]`` is unusable; the config loader reports it."""


@dataclass(frozen=True, slots=True)
class AgentTimeouts:
    """Seconds to connect to an agent and to wait for each piece of its answer."""

    connect: float = 5.0
    read: float = 30.0


@dataclass(frozen=True, slots=True)
class InvokeSettings:
    enabled: bool = True
    # Until the HAIDIP surface's own [haidip] base_path exists, the gateway's.
    base_path: str = "/haidip/v1"
    max_body_bytes: int = 1024 * 1024
    max_response_bytes: int = 16 * 1024 * 1024
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    # canonical id -> timeouts ([haidip.invoke.agents."<id>"] connect_timeout / read_timeout)
    agent_timeouts: Mapping[str, AgentTimeouts] = field(default_factory=dict)
    # Target policy: https only unless allow_http; no loopback / private /
    # link-local / reserved addresses unless allow_private_targets.
    allow_http: bool = False
    allow_private_targets: bool = False
    http2: bool = True
    # The caller's Authorization, Cookie and X-API-Key go to the agent only when on.
    forward_credentials: bool = False
    # How the gateway authenticates itself to agents.
    auth_header: str = ""
    auth_value: Secret = field(default_factory=Secret)
    auth_value_env: str = ""
    auth_value_file: Path | None = None
    client_certfile: Path | None = None
    client_keyfile: Path | None = None
    ca_bundle: Path | None = None
    request_id_header: str = "x-request-id"
    # Rate limits: per caller (Agent-ID) and per target agent (canonical id).
    per_caller_rate: float = 10.0
    per_caller_burst: int = 20
    per_agent_rate: float = 20.0
    per_agent_burst: int = 40

    def timeouts(self, *names: str) -> AgentTimeouts:
        """The timeouts of the first of ``names`` with an override, else the defaults."""
        for name in names:
            found = self.agent_timeouts.get(name)
            if found is not None:
                return found
        return AgentTimeouts(self.connect_timeout, self.read_timeout)

    def caller_limit(self, limit: RateLimitSettings) -> RateLimitSettings:
        """The per-caller limiter's settings: its own rate and burst (0: off),
        the rest ([rate_limit] audit_window, max_tracked, ...) from ``limit``."""
        return _limiter(limit, self.per_caller_rate, self.per_caller_burst)

    def agent_limit(self, limit: RateLimitSettings) -> RateLimitSettings:
        return _limiter(limit, self.per_agent_rate, self.per_agent_burst)

    def gateway_secret(self, environ: Mapping[str, str] | None = None) -> str:
        """The value of ``auth_header``: auth_value, else the environment
        variable auth_value_env, else the first line of auth_value_file."""
        if self.auth_value:
            return self.auth_value.reveal()
        env = os.environ if environ is None else environ
        if self.auth_value_env:
            value = env.get(self.auth_value_env, "")
            if not value:
                raise InvokeConfigError(
                    f"[haidip.invoke] auth_value_env: ${self.auth_value_env} is not set"
                )
            return value
        if self.auth_value_file is not None:
            try:
                text = self.auth_value_file.read_text(encoding="utf-8")
            except OSError as exc:
                raise InvokeConfigError(f"[haidip.invoke] auth_value_file: {exc}") from None
            lines = text.splitlines()
            value = lines[0].strip() if lines else ""
            if value:
                return value
            raise InvokeConfigError("[haidip.invoke] auth_value_file is empty")
        return ""


def _limiter(limit: RateLimitSettings, rate: float, burst: int) -> RateLimitSettings:
    return replace(
        limit,
        enabled=rate > 0,
        rate=rate if rate > 0 else 1.0,
        burst=burst,
        exempt_agent_ids=limit.exempt_agent_ids,
        enumeration_threshold=0,
    )


_NUMBERS: dict[str, tuple[float, float]] = {
    "max_body_bytes": (1, 64 * 1024 * 1024),
    "max_response_bytes": (1, 1024 * 1024 * 1024),
    "connect_timeout": (0.01, 300),
    "read_timeout": (0.01, 3600),
    "per_caller_rate": (0, 1_000_000),
    "per_caller_burst": (1, 1_000_000),
    "per_agent_rate": (0, 1_000_000),
    "per_agent_burst": (1, 1_000_000),
}
_BOOLS = {"enabled", "allow_http", "allow_private_targets", "http2", "forward_credentials"}
_STRINGS = {"base_path", "auth_header", "auth_value", "auth_value_env", "request_id_header"}
_SECRETS = {"auth_value"}
_PATHS = {"auth_value_file", "client_certfile", "client_keyfile", "ca_bundle"}


def _number(key: str, value: Any) -> float:
    low, high = _NUMBERS[key]
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not low <= value <= high:
        raise InvokeConfigError(f"[haidip.invoke] {key} must be a number in [{low:g}, {high:g}]")
    if key.endswith(("_bytes", "_burst")) and not isinstance(value, int):
        raise InvokeConfigError(f"[haidip.invoke] {key} must be an integer")
    return int(value) if isinstance(value, int) else float(value)


def _agent_timeouts(body: Any, defaults: AgentTimeouts) -> dict[str, AgentTimeouts]:
    if not isinstance(body, dict) or len(body) > MAX_AGENT_OVERRIDES:
        raise InvokeConfigError(
            '[haidip.invoke.agents] must be a table of [haidip.invoke.agents."<id>"] tables'
        )
    out: dict[str, AgentTimeouts] = {}
    for agent, table in body.items():
        if not isinstance(table, dict):
            raise InvokeConfigError(f"[haidip.invoke.agents.{agent[:80]!r}] must be a table")
        values = {"connect": defaults.connect, "read": defaults.read}
        for key, value in table.items():
            if key not in ("connect_timeout", "read_timeout"):
                raise InvokeConfigError(
                    f"unknown key {key!r} in [haidip.invoke.agents.{agent[:80]!r}] "
                    "(connect_timeout, read_timeout)"
                )
            values[key.removesuffix("_timeout")] = _number(key, value)
        out[agent] = AgentTimeouts(values["connect"], values["read"])
    return out


def invoke_from_table(body: Any, base: Path | None = None) -> InvokeSettings:
    """``[haidip.invoke]`` as :class:`InvokeSettings`; relative paths are
    taken from ``base`` (the config file's directory)."""
    if not isinstance(body, dict):
        raise InvokeConfigError("[haidip.invoke] must be a table")
    known = {f.name for f in fields(InvokeSettings)} - {"agent_timeouts"}
    values: dict[str, Any] = {}
    for key, value in body.items():
        if key == "agents":
            continue
        if key not in known:
            raise InvokeConfigError(f"unknown key {key!r} in [haidip.invoke]")
        if key in _NUMBERS:
            values[key] = _number(key, value)
        elif key in _BOOLS:
            if not isinstance(value, bool):
                raise InvokeConfigError(f"[haidip.invoke] {key} must be true or false")
            values[key] = value
        elif key in _STRINGS:
            if not isinstance(value, str) or len(value) > 4096:
                raise InvokeConfigError(f"[haidip.invoke] {key} must be a string")
            values[key] = Secret(value) if key in _SECRETS else value
        else:
            if not isinstance(value, str) or not value:
                raise InvokeConfigError(f"[haidip.invoke] {key} must be a file path")
            path = Path(value)
            values[key] = path if path.is_absolute() or base is None else base / path
    settings = replace(InvokeSettings(), **values)
    if "agents" in body:
        defaults = AgentTimeouts(settings.connect_timeout, settings.read_timeout)
        settings = replace(settings, agent_timeouts=_agent_timeouts(body["agents"], defaults))
    problem = _problem(settings)
    if problem:
        raise InvokeConfigError(f"[haidip.invoke] {problem}")
    return settings


def _problem(s: InvokeSettings) -> str | None:
    if BASE_PATH_RE.fullmatch(s.base_path) is None:
        return "base_path must be an absolute path such as /haidip/v1 (no trailing slash)"
    for name in ("auth_header", "request_id_header"):
        value = getattr(s, name)
        if value and HEADER_NAME_RE.fullmatch(value) is None:
            return f"{name} must be an HTTP header name"
    if s.auth_header.lower() in RESERVED_HEADERS:
        return f"auth_header {s.auth_header!r} is a header the gateway sets itself"
    secrets = [bool(s.auth_value), bool(s.auth_value_env), s.auth_value_file is not None]
    if sum(secrets) > 1:
        return "set at most one of auth_value, auth_value_env, auth_value_file"
    if any(secrets) and not s.auth_header:
        return "auth_value (or _env, _file) needs auth_header (e.g. Authorization)"
    if s.auth_header and not any(secrets):
        return "auth_header needs auth_value, auth_value_env or auth_value_file"
    if any(ord(c) < 32 or ord(c) == 127 for c in s.auth_value.reveal()):
        return "auth_value must not contain control characters"
    if (s.client_certfile is None) != (s.client_keyfile is None):
        return "client_certfile and client_keyfile go together"
    if not s.request_id_header:
        return "request_id_header must be an HTTP header name"
    return None
