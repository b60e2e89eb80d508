"""Configuration: one frozen dataclass, loaded from TOML and CLI flags.

Every policy number that closes a gap in the drafts lives here (ranking
weights, default and maximum ``limit``, the capability-match floor, body
size, restricted zones) so that it is documented in one place.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ans.federation.peers import (
    FederationSettings,
    Peer,
    PeerConfigError,
    check_peers,
    federation_from_table,
)
from ans.governance.apikeys import ApiKey, ConfigProblem, parse_api_keys
from ans.governance.ratelimit import RateLimitSettings, parse_networks

from .ann import AnnSettings
from .config_env import PREFIX, EnvError, env_table, merge, strip_origins
from .freshness_policy import FreshnessConfigError, FreshnessSettings, freshness_from_table
from .haidip_config import HaidipConfigError, HaidipSettings, haidip_from_table
from .index.embedder import EMBEDDING_DIMS
from .invoke_config import InvokeConfigError, InvokeSettings, invoke_from_table
from .mcp.config import McpConfigError, McpSettings, mcp_from_table
from .relevance import GATES, RelevanceGate


class ConfigError(ValueError):
    """The configuration is unusable; the CLI prints it and exits 2."""


@dataclass(frozen=True, slots=True)
class RankingWeights:
    """rank_score = trust_tier*tier_norm + behavioral_trust*score + capability_match*match."""

    name: str = "agtp-discovery-00-default"
    trust_tier: float = 0.3
    behavioral_trust: float = 0.4
    capability_match: float = 0.3


PROFILE_PATH_RE = re.compile(r"(?:/[A-Za-z0-9._~-]+){1,8}")


@dataclass(frozen=True, slots=True)
class ProfileSettings:
    """[profile]: the efficient-discovery profile's JSON binding (D2):
    ``POST {base_path}/discover``, ``GET``/``PUT {base_path}/agents/{id}``.
    ``self_registration`` admits self-asserted tier-3 records through PUT."""

    enabled: bool = True
    base_path: str = "/discovery/v1"
    self_registration: bool = False

    def problems(self) -> list[str]:
        if PROFILE_PATH_RE.fullmatch(self.base_path) is None:
            return [
                "base_path must be an absolute path such as /discovery/v1 "
                "(1 to 8 segments of A-Z a-z 0-9 . _ ~ -, no trailing slash)"
            ]
        if self.base_path.split("/")[1] in ("agtp", ".well-known", "healthz"):
            return [f"base_path {self.base_path!r} would hide an ANS route"]
        return []


@dataclass(frozen=True, slots=True)
class Config:
    # [server]
    listen: str = "127.0.0.1:4480"
    # The native AGTP/1.0 listener (TCP, or TLS 1.3 with tls_certfile): off when empty.
    native_listen: str = ""
    tls_certfile: Path | None = None
    tls_keyfile: Path | None = None
    keep_alive_max_requests: int = 100_000
    # HTTP/2 (and HTTP/1.1) connections one client address may hold; 0: no cap.
    max_connections_per_client: int = 256
    # HTTP/2 (and HTTP/1.1) connections in all; also bounded by the open-file
    # limit (see ans.server.connection_caps).
    max_connections: int = 4096
    keep_alive_timeout: float = 300.0
    # A connection must start its first request, and a request must arrive
    # whole (headers and body), within this many seconds (408 otherwise).
    request_timeout: float = 10.0
    # An answer the client does not read within this many seconds is dropped:
    # the HTTP/2 stream is reset, the native connection closed.
    write_timeout: float = 30.0
    # On SIGTERM/SIGINT the server stops accepting and answers what it has
    # received for at most this many seconds (both listeners), then exits.
    graceful_timeout: float = 10.0
    # Worker processes of ``ans serve`` on the same listeners (see ans.workers);
    # 0: one per core; 1: a single process.
    workers: int = 0
    tls_client_ca: Path | None = None  # CA bundle for client certificates (auth mode mtls)
    # [ans] identity of this server
    data_dir: Path = Path("ans-data")
    # The registry store: "" for SQLite in data_dir (the embedded default), a
    # path to a SQLite file, or a postgresql:// URL shared by several nodes.
    store: str = ""
    agent_id: str = "agtp://localhost/agents/ans"
    agent_label: str = "ans"
    org_domain: str = "localhost"
    governance_zone: str = "zone:public"
    principal_org: str = "ANS operator"
    # [governance]
    governance_jwks: tuple[Path, ...] = ()
    restricted_zones: tuple[str, ...] = ()
    audit_fsync: bool = False
    # [zones]: restricted = [...] (same as restricted_zones), public = [...],
    # unlisted = "public" | "restricted" for zones in neither list.
    public_zones: tuple[str, ...] = ()
    unlisted_zones: str = "public"
    # Lifecycle events older than this (s) or issued further than the skew
    # (s) in the future are refused (409 stale_event).
    lifecycle_max_age: float = 86400.0
    lifecycle_max_skew: float = 300.0
    # [auth] requester authentication: "open" (self-asserted identity headers),
    # "token" (governance-issued ES256 JWT in Authorization: Bearer) or "mtls"
    auth_mode: str = "open"
    token_issuer: str = ""  # required in token mode: the iss every token must carry
    token_audience: str = ""  # the aud this ANS accepts; "" means agent_id
    token_jwks: tuple[Path, ...] = ()  # token issuer keys; () means governance_jwks
    token_leeway: float = 30.0  # seconds of clock skew allowed on exp/nbf
    # mtls mode: SubjectAltName URIs of peer ANS servers trusted to forward a
    # DISCOVER (AGTP-Federation-Path set) on behalf of the caller they name.
    auth_forwarders: tuple[str, ...] = ()
    # [[auth.api_keys]]: hashed API keys, each mapped to a principal and scopes
    # (ans.governance.apikeys); accepted in every auth mode.
    auth_api_keys: tuple[ApiKey, ...] = ()
    # [rate_limit] per Agent-ID and per client address
    rate_limit: RateLimitSettings = field(default_factory=RateLimitSettings)
    # [index] exact below exact_max agents, FAISS IVF-PQ fast-scan candidates above
    index: AnnSettings = field(default_factory=AnnSettings)
    # [discovery]
    default_limit: int = 10
    max_limit: int = 100
    # What counts as a match (ans.relevance): the relevance gate, the least
    # calibrated capability_match_score of a match, the least fused score, and
    # the weight of a compound intent's best part.
    relevance_gate: str = "calibrated"
    min_capability_match: float = 0.05
    min_relevance: float = 0.005
    relevance_part_weight: float = 0.1
    strong_match: float = 0.35
    # The shortlist (a share of the request's limit) and the near-best share.
    relevance_shortlist: float = 0.5
    near_best: float = 0.9
    # Routing alternatives (preferred_agent): the least equivalent_confidence
    # an alternative must have to replace an unavailable preferred agent.
    min_equivalent_confidence: float = 0.2
    max_body_bytes: int = 256 * 1024
    # [profile] (the efficient-discovery profile): fields removed from the
    # detail=full documents ("manifest.<field>" / "capabilities.<field>"),
    # and how much the request's preferred_tags may raise the capability
    # evidence (share of the gap to 1.0 when every preferred tag is held).
    profile_redact: tuple[str, ...] = ()
    preferred_tag_boost: float = 0.15
    # [profile]: the efficient-discovery profile's JSON binding (enabled,
    # base_path) and its self-registration (PUT of self-asserted tier-3 records)
    profile_enabled: bool = True
    profile_base_path: str = "/discovery/v1"
    profile_self_registration: bool = False
    ranking: RankingWeights = field(default_factory=RankingWeights)
    # [federation] and [[federation.peers]]; --peer TIER@URL adds peers
    federation: FederationSettings = field(default_factory=FederationSettings)
    peers: tuple[Peer, ...] = ()
    # [freshness]: refresh scheduler, availability polling, governance webhook
    freshness: FreshnessSettings = field(default_factory=FreshnessSettings)
    # [haidip]: the HAIDIP REST surface (ans.haidip_config)
    haidip: HaidipSettings = field(default_factory=HaidipSettings)
    # [haidip.invoke]: the HAIDIP invocation gateway (ans.invoke_config)
    invoke: InvokeSettings = field(default_factory=InvokeSettings)
    # [mcp]: the MCP-orchestrator registry (seed 002), off by default
    mcp: McpSettings = field(default_factory=McpSettings)
    # [logging]
    log_level: str = "info"
    log_format: str = "console"
    # One line per answered request (ans.request_log): sampled share of the
    # successful ones, lines a second at most, intents only when asked for.
    request_log: bool = True
    request_log_sample: float = 1.0
    request_log_per_second: float = 200.0
    log_intents: bool = False
    # [metrics] Prometheus text exposition at /metrics on the listener
    metrics_enabled: bool = True
    # --demo
    demo: bool = False

    @property
    def relevance(self) -> RelevanceGate:
        """The relevance gate of [discovery] (what counts as a match)."""
        return RelevanceGate(
            kind=self.relevance_gate,
            min_relevance=self.min_relevance,
            min_capability_match=self.min_capability_match,
            part_weight=self.relevance_part_weight,
            strong_match=self.strong_match,
            shortlist=self.relevance_shortlist,
            near_best=self.near_best,
        )

    @property
    def profile(self) -> ProfileSettings:
        """The [profile] binding settings as one value."""
        return ProfileSettings(
            self.profile_enabled, self.profile_base_path, self.profile_self_registration
        )

    @property
    def host_port(self) -> tuple[str, int]:
        host, sep, port = self.listen.rpartition(":")
        if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ConfigError(f"listen must be HOST:PORT, got {self.listen!r}")
        return host.strip("[]") or "127.0.0.1", int(port)

    @property
    def native_host_port(self) -> tuple[str, int] | None:
        if not self.native_listen:
            return None
        host, sep, port = self.native_listen.rpartition(":")
        if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ConfigError(f"native_listen must be HOST:PORT, got {self.native_listen!r}")
        return host.strip("[]") or "127.0.0.1", int(port)

    def validate(self) -> Config:
        host, port = self.host_port  # raises ConfigError when malformed
        native = self.native_host_port
        if native is not None and port != 0 and native[1] == port:
            # SO_REUSEPORT would let both listeners bind it, and the kernel would
            # hand each connection to either one (HTTP/2 or native framing) at random
            wild = {"0.0.0.0", "::", ""}  # noqa: S104 - compared with, not bound
            if native[0] == host or native[0] in wild or host in wild:
                raise ConfigError(
                    f"native_listen {self.native_listen!r} and listen {self.listen!r} "
                    "share a port; give each listener its own"
                )
        if not 1 <= self.default_limit <= self.max_limit <= 10_000:
            raise ConfigError("need 1 <= default_limit <= max_limit <= 10000")
        if not 0.0 <= self.min_capability_match <= 1.0:
            raise ConfigError("min_capability_match must be in [0, 1]")
        if self.relevance_gate not in GATES:
            raise ConfigError(f"relevance_gate must be one of {', '.join(GATES)}")
        if not 0.0 <= self.min_relevance <= 1.0:
            raise ConfigError("min_relevance must be in [0, 1]")
        if not 0.0 <= self.relevance_part_weight <= 1.0:
            raise ConfigError("part_weight must be in [0, 1]")
        if not 0.0 <= self.strong_match <= 1.0:
            raise ConfigError("strong_match must be in [0, 1]")
        if not 0.0 <= self.relevance_shortlist <= 10.0:
            raise ConfigError("shortlist must be in [0, 10] (a share of the request's limit)")
        if not 0.0 <= self.near_best <= 1.0:
            raise ConfigError("near_best must be in [0, 1]")
        if not 0.0 <= self.request_log_sample <= 1.0:
            raise ConfigError("request_log_sample must be in [0, 1]")
        if not 0.0 < self.request_log_per_second <= 1_000_000:
            raise ConfigError("request_log_per_second must be in (0, 1000000]")
        if not 0.0 <= self.min_equivalent_confidence <= 1.0:
            raise ConfigError("min_equivalent_confidence must be in [0, 1]")
        if not 0.0 <= self.preferred_tag_boost <= 0.5:
            raise ConfigError("[profile] preferred_tag_boost must be in [0, 0.5]")
        for path in self.profile_redact:
            section, _, name = path.partition(".")
            if section not in ("manifest", "capabilities") or not name:
                raise ConfigError(
                    f"[profile] redact entries are 'manifest.<field>' or "
                    f"'capabilities.<field>', not {path[:80]!r}"
                )
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ConfigError("tls_certfile and tls_keyfile go together")
        if not 0 <= self.max_connections_per_client <= 1_000_000:
            raise ConfigError("max_connections_per_client must be 0 (no cap) .. 1000000")
        if not 1 <= self.max_connections <= 1_000_000:
            raise ConfigError("max_connections must be 1 .. 1000000")
        if not 0 < self.request_timeout <= 300:
            raise ConfigError("request_timeout must be more than 0 and at most 300 seconds")
        if not 0 < self.write_timeout <= 3600:
            raise ConfigError("write_timeout must be more than 0 and at most 3600 seconds")
        if not (isinstance(self.workers, int) and 0 <= self.workers <= 256):
            raise ConfigError("workers must be an integer from 0 (one per core) to 256")
        if not 0 < self.graceful_timeout <= 3600:
            raise ConfigError("graceful_timeout must be more than 0 and at most 3600 seconds")
        w = self.ranking
        if (
            min(w.trust_tier, w.behavioral_trust, w.capability_match) < 0
            or abs(w.trust_tier + w.behavioral_trust + w.capability_match - 1.0) > 1e-9
        ):
            raise ConfigError("ranking weights must be non-negative and sum to 1")
        if not (0 < self.lifecycle_max_skew <= 3600 and 60 <= self.lifecycle_max_age):
            raise ConfigError("need 0 < lifecycle_max_skew <= 3600 and lifecycle_max_age >= 60")
        for z in (*self.restricted_zones, *self.public_zones):
            if not z.startswith("zone:"):
                raise ConfigError(f"zone {z!r} must look like 'zone:name'")
        both = sorted(set(self.restricted_zones) & set(self.public_zones))
        if both:
            raise ConfigError(f"zone {both[0]!r} is listed both public and restricted")
        if self.unlisted_zones not in ("public", "restricted"):
            raise ConfigError('[zones] unlisted must be "public" or "restricted"')
        self._validate_auth()
        problems = self.profile.problems()
        if problems:
            raise ConfigError(f"[profile]: {problems[0]}")
        return self

    @property
    def audience(self) -> str:
        """The token audience this ANS accepts."""
        return self.token_audience or self.agent_id

    def _validate_auth(self) -> None:
        if self.auth_mode not in AUTH_MODES:
            raise ConfigError(f"auth mode must be one of {', '.join(AUTH_MODES)}")
        if self.auth_mode == "token":
            if not self.token_issuer:
                raise ConfigError("auth mode token needs token_issuer in [auth]")
            if not (self.token_jwks or self.governance_jwks or self.demo):
                raise ConfigError(
                    "auth mode token needs token issuer keys: token_jwks in [auth] "
                    "(or governance_jwks)"
                )
            if not 0 <= self.token_leeway <= 600:
                raise ConfigError("token_leeway must be between 0 and 600 seconds")
        if self.auth_mode == "mtls":
            if self.tls_certfile is None or self.tls_client_ca is None:
                raise ConfigError(
                    "auth mode mtls needs tls_certfile, tls_keyfile and tls_client_ca in [server]"
                )
        elif self.tls_client_ca is not None:
            raise ConfigError("tls_client_ca is only used with auth mode mtls")
        if self.auth_forwarders and self.auth_mode != "mtls":
            raise ConfigError(
                "[auth] forwarders applies only in auth mode mtls (in token mode a "
                "forwarding ANS passes the caller's own token on)"
            )
        if len(self.auth_forwarders) > MAX_FORWARDERS or not all(
            isinstance(f, str) and FORWARDER_RE.fullmatch(f) for f in self.auth_forwarders
        ):
            raise ConfigError(
                f"[auth] forwarders must be at most {MAX_FORWARDERS} URIs "
                "(the SubjectAltName URI of each forwarding ANS's client certificate)"
            )
        problems = self.rate_limit.problems()
        if problems:
            raise ConfigError(f"[rate_limit]: {problems[0]}")


AUTH_MODES = ("open", "token", "mtls")
MAX_FORWARDERS = 64
FORWARDER_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[^\s]{1,500}")


_SECTIONS = {
    "profile": {"redact", "preferred_tag_boost", "enabled", "base_path", "self_registration"},
    "server": {
        "listen",
        "native_listen",
        "tls_certfile",
        "tls_keyfile",
        "keep_alive_max_requests",
        "max_connections_per_client",
        "max_connections",
        "keep_alive_timeout",
        "request_timeout",
        "write_timeout",
        "graceful_timeout",
        "workers",
        "tls_client_ca",
    },
    "ans": {
        "data_dir",
        "store",
        "agent_id",
        "agent_label",
        "org_domain",
        "governance_zone",
        "principal_org",
    },
    "governance": {
        "governance_jwks",
        "restricted_zones",
        "audit_fsync",
        "lifecycle_max_age",
        "lifecycle_max_skew",
    },
    "zones": {"restricted", "public", "unlisted"},
    "discovery": {
        "default_limit",
        "max_limit",
        "min_capability_match",
        "relevance_gate",
        "min_relevance",
        "part_weight",
        "strong_match",
        "shortlist",
        "near_best",
        "max_body_bytes",
        "min_equivalent_confidence",
    },
    "logging": {
        "log_level",
        "log_format",
        "request_log",
        "request_log_sample",
        "request_log_per_second",
        "log_intents",
    },
    "metrics": {"enabled"},
    "auth": {
        "mode",
        "token_issuer",
        "token_audience",
        "token_jwks",
        "token_leeway",
        "forwarders",
        "api_keys",
    },
}
# TOML keys whose Config field has another name.
_RENAMED: dict[tuple[str, str], str] = {
    ("auth", "mode"): "auth_mode",
    ("profile", "redact"): "profile_redact",
    ("auth", "forwarders"): "auth_forwarders",
    ("auth", "api_keys"): "auth_api_keys",
    ("profile", "enabled"): "profile_enabled",
    ("profile", "base_path"): "profile_base_path",
    ("profile", "self_registration"): "profile_self_registration",
    ("discovery", "part_weight"): "relevance_part_weight",
    ("discovery", "shortlist"): "relevance_shortlist",
    ("metrics", "enabled"): "metrics_enabled",
    ("zones", "restricted"): "restricted_zones",
    ("zones", "public"): "public_zones",
    ("zones", "unlisted"): "unlisted_zones",
}
_PATHS = {"tls_certfile", "tls_keyfile", "tls_client_ca", "data_dir"}
_PATH_LISTS = {"governance_jwks", "token_jwks"}


def _coerce(name: str, value: Any, base: Path) -> Any:
    if name in _PATHS:
        p = Path(value)
        return p if p.is_absolute() else base / p
    if name in _PATH_LISTS:
        items = [value] if isinstance(value, str) else list(value)
        return tuple(Path(v) if Path(v).is_absolute() else base / v for v in items)
    if name in ("restricted_zones", "public_zones"):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name} must be a list of zone ids")
        return tuple(value)
    if name == "profile_redact":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError("[profile] redact must be a list of field paths")
        return tuple(value)
    if name == "auth_api_keys":
        try:
            return parse_api_keys(value)
        except ConfigProblem as exc:
            raise ConfigError(str(exc)) from None
    if name == "auth_forwarders":
        if not isinstance(value, list):
            raise ConfigError("[auth] forwarders must be a list of URIs")
        return tuple(value)
    return value


def load(path: Path | None, environ: Mapping[str, str] | None = None, **overrides: Any) -> Config:
    """Defaults, then the TOML file (if any), then the ``ANS_<SECTION>__<KEY>``
    environment variables (:mod:`ans.config_env`; ``environ`` defaults to
    ``os.environ``), then non-None CLI overrides."""
    return load_with_origin(path, environ, **overrides)[0]


# The flat sections and their renamed keys (``ans config show`` prints them).
SECTIONS = _SECTIONS
RENAMED = _RENAMED
# Sections whose body is one settings dataclass: section -> Config field.
TABLES = {
    "federation": "federation",
    "freshness": "freshness",
    "haidip": "haidip",
    "mcp": "mcp",
    "rate_limit": "rate_limit",
    "index": "index",
    "ranking": "ranking",
    "haidip.invoke": "invoke",
}


def load_with_origin(
    path: Path | None, environ: Mapping[str, str] | None = None, **overrides: Any
) -> tuple[Config, dict[tuple[str, str], str]]:
    """:func:`load`, and where each (section, key) was set: the file, the
    environment variable's name, or the flag (the rest are defaults)."""
    values: dict[str, Any] = {}
    origin: dict[tuple[str, str], str] = {}
    doc: dict[str, Any] = {}
    if path is not None:
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config {path}: {exc}") from None
        for section, table in doc.items():
            for key in table if isinstance(table, dict) else ():
                origin[(section, key)] = f"file {path}"
    try:
        env = env_table(os.environ if environ is None else environ)
    except EnvError as exc:
        raise ConfigError(str(exc)) from None
    for section, table in env.items():
        for key, variable in table.get("__origin__", {}).items():
            origin[(section, key)] = variable
    doc = merge(doc, strip_origins(env))
    file_base = path.parent if path is not None else Path.cwd()
    if doc:
        for section, body in doc.items():
            if section == "federation":
                if not isinstance(body, dict):
                    raise ConfigError("[federation] must be a table")
                try:
                    values["federation"], values["peers"] = federation_from_table(body, file_base)
                except PeerConfigError as exc:
                    raise ConfigError(str(exc)) from None
                continue
            if section == "freshness":
                if not isinstance(body, dict):
                    raise ConfigError("[freshness] must be a table")
                try:
                    values["freshness"] = freshness_from_table(body)
                except FreshnessConfigError as exc:
                    raise ConfigError(str(exc)) from None
                continue
            if section == "haidip":
                try:
                    values["haidip"] = haidip_from_table(body)
                    if "invoke" in body:  # the gateway's nested table
                        values["invoke"] = invoke_from_table(body["invoke"], file_base)
                except (HaidipConfigError, InvokeConfigError) as exc:
                    raise ConfigError(str(exc)) from None
                continue
            if section == "mcp":
                if not isinstance(body, dict):
                    raise ConfigError("[mcp] must be a table")
                try:
                    values["mcp"] = mcp_from_table(body)
                except McpConfigError as exc:
                    raise ConfigError(str(exc)) from None
                continue
            if section == "rate_limit":
                values["rate_limit"] = _rate_limit(body)
                continue
            if section == "index":
                values["index"] = _index(body)
                continue
            if section == "ranking":
                try:
                    values["ranking"] = RankingWeights(**body)
                except TypeError as exc:
                    raise ConfigError(f"[ranking]: {exc}") from None
                continue
            allowed = _SECTIONS.get(section)
            if allowed is None or not isinstance(body, dict):
                names = sorted(v for (sec, _), v in origin.items() if sec == section)
                hint = f" (set by {names[0]})" if names and names[0].startswith(PREFIX) else ""
                raise ConfigError(f"unknown config section [{section}]{hint}")
            for key, value in body.items():
                if key not in allowed:
                    where = origin.get((section, key), "")
                    hint = f" (set by {where})" if where.startswith(PREFIX) else ""
                    raise ConfigError(f"unknown key {key!r} in [{section}]{hint}")
                name: str = _RENAMED.get((section, key)) or key
                if name in ("restricted_zones", "public_zones"):
                    if not isinstance(value, list):
                        raise ConfigError(f"[{section}] {key} must be a list")
                    value = tuple(values.get(name, ())) + tuple(value)
                base = Path.cwd() if origin[(section, key)].startswith(PREFIX) else file_base
                values[name] = _coerce(name, value, base)
    known = {f.name for f in fields(Config)}
    for key, value in overrides.items():
        if key not in known:
            raise ConfigError(f"unknown setting {key}")
        if value is None:
            continue
        origin[("flag", key)] = "--" + key.replace("_", "-")
        if key == "governance_jwks":
            value = tuple(values.get("governance_jwks", ())) + tuple(value)
        if key == "peers":
            try:
                value = check_peers(tuple(values.get("peers", ())) + tuple(value))
            except PeerConfigError as exc:
                raise ConfigError(str(exc)) from None
        values[key] = value
    defaults = Config()
    for key, value in values.items():
        _check_type(key, value, getattr(defaults, key))
    try:
        cfg = replace(defaults, **values)
    except TypeError as exc:
        raise ConfigError(str(exc)) from None
    return cfg.validate(), origin


def _rate_limit(body: Any) -> RateLimitSettings:
    if not isinstance(body, dict):
        raise ConfigError("[rate_limit] must be a table")
    defaults = RateLimitSettings()
    values: dict[str, Any] = {}
    for key, value in body.items():
        if key not in {f.name for f in fields(RateLimitSettings)}:
            raise ConfigError(f"unknown key {key!r} in [rate_limit]")
        if key == "exempt_agent_ids":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError("[rate_limit] exempt_agent_ids must be a list of Agent-IDs")
            value = tuple(value)
        elif key == "exempt_addresses":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(
                    "[rate_limit] exempt_addresses must be a list of IP addresses or "
                    'CIDR networks, e.g. ["10.0.0.0/8", "2001:db8::/32"]'
                )
            try:
                value = parse_networks(value)
            except ValueError as exc:
                raise ConfigError(f"[rate_limit] exempt_addresses: {exc}") from None
        else:
            try:
                _check_type(key, value, getattr(defaults, key))
            except ConfigError:
                raise ConfigError(f"[rate_limit] {key} has the wrong type") from None
        values[key] = value
    return replace(defaults, **values)


SCAN_LAYOUTS = ("auto", "packed", "streamed")
_INDEX_BOUNDS = {
    "exact_max": (0, 100_000_000),
    "candidates": (8, 10_000),
    "part_candidates": (0, 10_000),
    "nprobe": (1, 4096),
    "train_size": (1000, 10_000_000),
    "threads": (1, 256),
    "seed": (0, 2**31 - 1),
}


def _index(body: Any) -> AnnSettings:
    if not isinstance(body, dict):
        raise ConfigError("[index] must be a table")
    values: dict[str, Any] = {}
    for key, value in body.items():
        if key == "embedding_dims":
            if not isinstance(value, int) or isinstance(value, bool) or value not in EMBEDDING_DIMS:
                raise ConfigError(
                    f"[index] embedding_dims must be one of {', '.join(map(str, EMBEDDING_DIMS))}"
                )
            values[key] = value
            continue
        if key == "scan_layout":
            if value not in SCAN_LAYOUTS:
                raise ConfigError(f"[index] scan_layout must be one of {', '.join(SCAN_LAYOUTS)}")
            values[key] = value
            continue
        bounds = _INDEX_BOUNDS.get(key)
        if bounds is None:
            raise ConfigError(f"unknown key {key!r} in [index]")
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"[index] {key} must be an integer")
        if not bounds[0] <= value <= bounds[1]:
            raise ConfigError(f"[index] {key} must be in [{bounds[0]}, {bounds[1]}]")
        values[key] = value
    return replace(AnnSettings(), **values)


def _check_type(key: str, value: Any, default: Any) -> None:
    if key in ("tls_certfile", "tls_keyfile", "tls_client_ca"):
        ok = isinstance(value, Path)
    elif key == "peers":
        ok = isinstance(value, tuple) and all(isinstance(v, Peer) for v in value)
    elif key == "auth_api_keys":
        ok = isinstance(value, tuple) and all(isinstance(v, ApiKey) for v in value)
    elif isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, tuple):
        ok = isinstance(value, tuple) and all(isinstance(v, (str, Path)) for v in value)
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise ConfigError(f"setting {key} has the wrong type ({type(value).__name__})")
