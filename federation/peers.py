"""Who we federate with: peer ANS servers, the tier we grant each, where
its key comes from, and the federation settings (hops, timeouts, deadline).

Parsed from the ``[federation]`` TOML section and from ``ans serve --peer
TIER@URL``; every malformed value raises :class:`PeerConfigError`.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

JWKS_PATH = "/.well-known/jwks.json"
# Peers reached over the native AGTP/1.0 framing (``ans serve --native-listen``):
# agtp:// is TLS, agtp+cleartext:// plain TCP. Their key defaults to DESCRIBE.
NATIVE_SCHEMES = ("agtp", "agtp+cleartext")
NATIVE_DEFAULT_PORT = 8080  # the AGTP draft's working port for AGTP/TCP+TLS


def is_native(url: str) -> bool:
    """Whether ``url`` names a peer over the native AGTP framing."""
    return url.split("://", 1)[0] in NATIVE_SCHEMES


KEY_SOURCES = ("jwks_url", "jwks_file", "describe")
_ZONE_RE = re.compile(r"zone:[a-z0-9][a-z0-9._-]{0,119}")
MAX_PEERS = 64


class PeerConfigError(ValueError):
    """A peer entry or federation setting is unusable."""


@dataclass(frozen=True, slots=True)
class FederationSettings:
    """Bounds on forwarding. ``deadline`` caps the whole fan-out; ``peer_timeout``
    caps one peer (a peer may override it). After ``failures_before_skip``
    consecutive timeouts or refused connections a peer is skipped for
    ``skip_seconds`` (doubling after each failed probe, up to
    ``max_skip_seconds``); 0 never skips."""

    max_hops: int = 2
    peer_timeout: float = 2.0
    deadline: float = 3.0
    key_ttl: float = 3600.0
    key_retry: float = 10.0
    max_response_bytes: int = 4 * 1024 * 1024
    max_clock_skew: float = 300.0
    failures_before_skip: int = 3
    skip_seconds: float = 5.0
    max_skip_seconds: float = 60.0

    def validate(self) -> FederationSettings:
        if not 0 <= self.max_hops <= 8:
            raise PeerConfigError("federation max_hops must be 0..8")
        for name in ("peer_timeout", "deadline"):
            if not 0.01 <= getattr(self, name) <= 60.0:
                raise PeerConfigError(f"federation {name} must be 0.01..60 seconds")
        if not 1.0 <= self.key_ttl <= 7 * 86400:
            raise PeerConfigError("federation key_ttl must be 1 s..7 days")
        if not 0.0 <= self.key_retry <= 3600:
            raise PeerConfigError("federation key_retry must be 0..3600 seconds")
        if not 1024 <= self.max_response_bytes <= 64 * 1024 * 1024:
            raise PeerConfigError("federation max_response_bytes must be 1 KiB..64 MiB")
        if not 1.0 <= self.max_clock_skew <= 86400:
            raise PeerConfigError("federation max_clock_skew must be 1 s..1 day")
        if not 0 <= self.failures_before_skip <= 100:
            raise PeerConfigError("federation failures_before_skip must be 0..100")
        if not 0.1 <= self.skip_seconds <= 3600:
            raise PeerConfigError("federation skip_seconds must be 0.1..3600 seconds")
        if not self.skip_seconds <= self.max_skip_seconds <= 3600:
            raise PeerConfigError("federation max_skip_seconds must be skip_seconds..3600 seconds")
        return self


@dataclass(frozen=True, slots=True)
class Peer:
    """A peer ANS server and how far we trust it.

    ``tier`` is the trust tier we grant (1 best .. 3): no result it supplies
    is ever presented as better than that. ``zones``, when set, are the only
    zones we accept from it (and we only ask it about those).
    """

    url: str
    tier: int
    key_source: str = "jwks_url"
    jwks_url: str | None = None
    jwks_file: Path | None = None
    zones: tuple[str, ...] = ()
    timeout: float | None = None
    cacert: Path | None = None
    name: str = field(default="")
    # Our TLS client certificate for this peer (a peer in auth mode mtls lists
    # its SubjectAltName URI in its [auth] forwarders).
    client_cert: Path | None = None
    client_key: Path | None = None

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.url)

    @property
    def native(self) -> bool:
        return is_native(self.url)

    @property
    def key_url(self) -> str:
        return self.jwks_url or self.url + JWKS_PATH

    @property
    def tls_client(self) -> tuple[str, str] | None:
        """(certificate, key) paths to present in the TLS handshake, if any."""
        if self.client_cert is None or self.client_key is None:
            return None
        return str(self.client_cert), str(self.client_key)

    def accepts_zone(self, zone: str | None) -> bool:
        return not self.zones or zone is None or zone in self.zones


def _check_url(url: Any, what: str, schemes: tuple[str, ...] = ("http", "https")) -> str:
    kinds = "an http(s) or agtp[+cleartext] URL" if "agtp" in schemes else "an http(s) URL"
    if not isinstance(url, str) or len(url) > 2048:
        raise PeerConfigError(f"{what} must be {kinds}")
    parts = urlsplit(url.strip())
    try:
        parts.port  # noqa: B018 - raises ValueError when out of range
    except ValueError:
        raise PeerConfigError(f"{what} has an invalid port: {url[:100]!r}") from None
    if parts.scheme not in schemes or not parts.hostname:
        raise PeerConfigError(f"{what} must be {kinds}, got {url[:100]!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise PeerConfigError(f"{what} must not carry credentials, a query or a fragment")
    if parts.scheme in NATIVE_SCHEMES and parts.path not in ("", "/"):
        raise PeerConfigError(f"{what}: a native AGTP URL has no path, got {url[:100]!r}")
    return url.strip().rstrip("/")


PEER_SCHEMES = ("http", "https", *NATIVE_SCHEMES)


def _check_tier(tier: Any) -> int:
    if isinstance(tier, bool) or not isinstance(tier, int) or tier not in (1, 2, 3):
        raise PeerConfigError(f"peer tier must be 1, 2 or 3, got {tier!r}")
    return tier


def parse_peer_flag(text: str) -> Peer:
    """``TIER@URL`` (``--peer 2@http://127.0.0.1:4481``); the key comes from the
    peer's ``/.well-known/jwks.json``, or for a native ``agtp[+cleartext]://``
    peer from its Agent Manifest (DESCRIBE)."""
    tier_text, sep, url = text.partition("@")
    if not sep or not tier_text.strip().isdigit():
        raise PeerConfigError(f"--peer takes TIER@URL (e.g. 2@https://ans.example), got {text!r}")
    peer = Peer(url=_check_url(url, "--peer URL", PEER_SCHEMES), tier=_check_tier(int(tier_text)))
    return replace(peer, key_source="describe") if peer.native else peer


_PEER_KEYS = {
    "url",
    "tier",
    "jwks_url",
    "jwks_file",
    "describe",
    "zones",
    "timeout",
    "cacert",
    "name",
    "client_cert",
    "client_key",
}


def peer_from_table(table: Mapping[str, Any], base: Path) -> Peer:
    """One ``[[federation.peers]]`` table. Key source: exactly one of
    ``jwks_url``, ``jwks_file`` or ``describe = true`` (default: the peer's
    well-known JWKS URL; DESCRIBE for a native ``agtp[+cleartext]://`` peer)."""
    unknown = sorted(set(table) - _PEER_KEYS)
    if unknown:
        raise PeerConfigError(f"unknown key {unknown[0]!r} in [[federation.peers]]")
    url = _check_url(table.get("url"), "peer url", PEER_SCHEMES)
    tier = _check_tier(table.get("tier"))
    chosen = [k for k in KEY_SOURCES if table.get(k) not in (None, False)]
    if len(chosen) > 1:
        raise PeerConfigError(f"peer {url}: choose one of jwks_url, jwks_file, describe")
    # A native peer serves no /.well-known/jwks.json: its manifest is the default.
    source = chosen[0] if chosen else ("describe" if is_native(url) else "jwks_url")
    jwks_url = _check_url(table["jwks_url"], "peer jwks_url") if "jwks_url" in table else None
    jwks_file = None
    if "jwks_file" in table:
        if not isinstance(table["jwks_file"], str):
            raise PeerConfigError(f"peer {url}: jwks_file must be a path")
        p = Path(table["jwks_file"])
        jwks_file = p if p.is_absolute() else base / p
    if "describe" in table and not isinstance(table["describe"], bool):
        raise PeerConfigError(f"peer {url}: describe must be true or false")
    zones = table.get("zones", [])
    if not isinstance(zones, list) or not all(
        isinstance(z, str) and _ZONE_RE.fullmatch(z) for z in zones
    ):
        raise PeerConfigError(f"peer {url}: zones must be a list of zone ids like 'zone:finance'")
    timeout = table.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not 0.01 <= timeout <= 60
    ):
        raise PeerConfigError(f"peer {url}: timeout must be 0.01..60 seconds")
    cacert = None
    if "cacert" in table:
        if not isinstance(table["cacert"], str):
            raise PeerConfigError(f"peer {url}: cacert must be a path")
        c = Path(table["cacert"])
        cacert = c if c.is_absolute() else base / c
    name = table.get("name", "")
    if not isinstance(name, str) or len(name) > 200:
        raise PeerConfigError(f"peer {url}: name must be a short string")
    client_cert, client_key = _client_identity(table, url, base)
    return Peer(
        url=url,
        tier=tier,
        key_source=source,
        jwks_url=jwks_url,
        jwks_file=jwks_file,
        zones=tuple(zones),
        timeout=float(timeout) if timeout is not None else None,
        cacert=cacert,
        name=name,
        client_cert=client_cert,
        client_key=client_key,
    )


def _client_identity(
    table: Mapping[str, Any], url: str, base: Path
) -> tuple[Path | None, Path | None]:
    """``client_cert`` + ``client_key``: both or neither, a TLS peer only, and
    loadable now (a bad pair is a configuration error, not a peer failure)."""
    given = [k for k in ("client_cert", "client_key") if k in table]
    if not given:
        return None, None
    if len(given) == 1:
        raise PeerConfigError(f"peer {url}: client_cert and client_key go together")
    if urlsplit(url).scheme not in ("https", "agtp"):
        raise PeerConfigError(f"peer {url}: client_cert needs a TLS peer (https:// or agtp://)")
    paths = []
    for k in given:
        if not isinstance(table[k], str) or not table[k]:
            raise PeerConfigError(f"peer {url}: {k} must be a path")
        p = Path(table[k])
        paths.append(p if p.is_absolute() else base / p)
    cert, key = paths
    try:
        ssl.create_default_context().load_cert_chain(str(cert), str(key))
    except (OSError, ssl.SSLError) as exc:
        raise PeerConfigError(f"peer {url}: cannot load client_cert/client_key: {exc}") from None
    return cert, key


_SETTING_KEYS = {
    "max_hops",
    "peer_timeout",
    "deadline",
    "key_ttl",
    "key_retry",
    "max_response_bytes",
    "max_clock_skew",
    "failures_before_skip",
    "skip_seconds",
    "max_skip_seconds",
}
_INTEGER_KEYS = ("max_hops", "max_response_bytes", "failures_before_skip")


def federation_from_table(
    table: Mapping[str, Any], base: Path
) -> tuple[FederationSettings, tuple[Peer, ...]]:
    """The whole ``[federation]`` section: settings plus ``[[federation.peers]]``."""
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key == "peers":
            continue
        if key not in _SETTING_KEYS:
            raise PeerConfigError(f"unknown key {key!r} in [federation]")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PeerConfigError(f"[federation] {key} must be a number")
        if key in _INTEGER_KEYS and not isinstance(value, int):
            raise PeerConfigError(f"[federation] {key} must be an integer")
        values[key] = value if key in _INTEGER_KEYS else float(value)
    settings = FederationSettings(**values).validate()
    raw_peers = table.get("peers", [])
    if not isinstance(raw_peers, list) or not all(isinstance(p, dict) for p in raw_peers):
        raise PeerConfigError("[[federation.peers]] entries must be tables")
    peers = tuple(peer_from_table(p, base) for p in raw_peers)
    return settings, check_peers(peers)


def check_peers(peers: tuple[Peer, ...]) -> tuple[Peer, ...]:
    if len(peers) > MAX_PEERS:
        raise PeerConfigError(f"at most {MAX_PEERS} peers")
    urls = [p.url for p in peers]
    if len(set(urls)) != len(urls):
        raise PeerConfigError("a peer URL is listed twice")
    return peers
