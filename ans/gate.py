"""The requester gate: where the request path rate limits per client address
(429), authenticates (401) and rate limits per Agent-ID (429).

:meth:`RequestGate.limit_address` charges the client address one token for
every AGTP request, whatever its method (DESCRIBE of this ANS included) and
before its body is parsed, so a flood of bad credentials, of rotated
Agent-IDs (auth mode ``open``), or of bodies that are malformed or costly to
parse is bounded by the same bucket. :meth:`RequestGate.authenticate_and_limit` then
authenticates an identity-bearing request and rate limits it per Agent-ID,
after parsing and before the service's scope (451) and zone (453) checks.

A request is identity-bearing when it carries an ``identity`` (DISCOVER,
ACTIVATE, DESCRIBE of an indexed agent, and any later method whose typed
request has one); DESCRIBE of this ANS itself is the bootstrap and needs no
credentials. On success the request comes back with its *effective* identity (in
token mode: scope = header scope ∩ token scope, plus the verified token for
federation), so every later check uses it. In mtls mode, a DISCOVER on a
federation path may come from a trusted forwarding ANS (``[auth] forwarders``)
speaking for the caller it names; that is audited as ``authentication_forwarded``.

In every mode a request may instead carry an API key (``X-API-Key`` or
``Authorization: ApiKey <key>``, ``[[auth.api_keys]]``,
:mod:`ans.governance.apikeys`): it is checked instead of the mode's
credential, binds the Principal-ID (and the Agent-ID when the key names one)
and narrows the scope to the key's; a refused key is ``authentication_failed``
with ``credential: "api_key"``. The key itself is never logged.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog

from ans.governance.apikeys import ApiKeys, presented_key
from ans.governance.audit import AuditLog
from ans.governance.auth import (
    Authenticated,
    TokenPolicy,
    authenticate_certificate,
    authenticate_token,
)
from ans.governance.ratelimit import AuditNote, RateLimiter, address_key, client_ip
from ans.governance.signing import KeyLookup
from ans.protocol.errors import AgtpError, ErrorCode, InvalidHeader, RateLimited
from ans.protocol.messages import ZONE_RE, DescribeRequest, DiscoverRequest, Identity

from .config import Config
from .service import Clock

log = structlog.get_logger("ans.gate")
ZONE_HEADER = "agtp-zone-id"
API_KEY_HEADER = "x-api-key"
# A body's share of the per-address charge: parsing it costs in proportion to
# its size (a 256 KiB body of nested lists ~15 ms, a small DISCOVER ~0.05 ms).
ADDRESS_BYTES_PER_TOKEN = 16 * 1024
# What a request turns out to cost, charged after it (RequestGate.settle): a
# plain DISCOVER takes well under [rate_limit] per_address_free_ms (2 ms) of
# CPU here; one with limit 100, evidence and a long intent ~12 ms. A refusal
# after parsing writes an audit record.
ADDRESS_MS_PER_TOKEN = 1.0
REFUSAL_TOKENS = 4.0
# A DISCOVER refusal is signed (ES256 over its JCS): ~0.05 ms of CPU here
# (bench/refusal_sign.py), charged as one whole token so that a flood of
# refusals pays for its signatures at least as fast as a flood of DISCOVERs.
SIGNED_REFUSAL_TOKENS = 1.0
REFUSED_AFTER_PARSING = frozenset({401, 451, 453})
# Identity headers of a request refused before parsing are audited up to this length.
AUDITED_HEADER_CHARS = 256
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Credentials:
    """What the transport saw besides the AGTP identity headers."""

    authorization: str | None = None
    zone_header: str | None = None
    client_cert_chain: tuple[str, ...] = ()  # PEM, leaf first (ASGI TLS extension)
    client_address: str | None = None  # the transport's peer host (ASGI scope["client"][0])
    # An API key (X-API-Key, or Authorization: ApiKey <key>); never logged.
    api_key: str | None = field(default=None, repr=False)

    @classmethod
    def from_request(
        cls,
        headers: dict[str, str],
        scope_extensions: dict[str, Any] | None,
        *,
        client_address: str | None = None,
    ) -> Credentials:
        chain: tuple[str, ...] = ()
        tls = (scope_extensions or {}).get("tls")
        if isinstance(tls, dict):
            certs = tls.get("client_cert_chain") or ()
            chain = tuple(c for c in certs if isinstance(c, str))
        authorization = headers.get("authorization")
        key = presented_key(authorization, headers.get(API_KEY_HEADER))
        return cls(authorization, headers.get(ZONE_HEADER), chain, client_address, key)

    def zone(self) -> str | None:
        """The AGTP-Zone-ID header, validated (400 when malformed)."""
        if self.zone_header is None or not self.zone_header.strip():
            return None
        zone = self.zone_header.strip()
        if ZONE_RE.fullmatch(zone) is None:
            raise InvalidHeader(
                "AGTP-Zone-ID must be a zone id such as 'zone:finance'",
                code=ErrorCode.INVALID_AGTP_ZONE_ID,
            )
        return zone


class RequestGate:
    def __init__(
        self,
        config: Config,
        audit: AuditLog,
        own_canonical_id: str,
        token_keys: KeyLookup | None = None,
        clock: Clock | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.mode = config.auth_mode
        self.audit = audit
        self.own_canonical_id = own_canonical_id
        self.token_keys = token_keys
        self.policy = TokenPolicy(config.token_issuer, config.audience, config.token_leeway)
        self.clock = clock
        self.forwarders = frozenset(config.auth_forwarders)
        self.api_keys = ApiKeys(config.auth_api_keys)
        self.limiter = RateLimiter(config.rate_limit, monotonic)
        self.address_limiter = RateLimiter(
            config.rate_limit.per_address(), monotonic, key_field="client_address"
        )
        self.exempt_addresses = config.rate_limit.exempt_addresses
        if self.mode == "token" and (token_keys is None or clock is None):
            raise ValueError("token mode needs token issuer keys and a clock")

    def identity_of(self, req: Any) -> Identity | None:
        if isinstance(req, DescribeRequest) and req.canonical_id in (None, self.own_canonical_id):
            return None  # DESCRIBE of this ANS: how a client bootstraps trust, never gated
        identity = getattr(req, "identity", None)
        return identity if isinstance(identity, Identity) else None

    def limit_address(
        self,
        method: str,
        creds: Credentials,
        headers: Mapping[str, str],
        body_bytes: int = 0,
        *,
        signed: bool = False,
    ) -> None:
        """Charge the client address for this AGTP request: one token, and one
        more per ``ADDRESS_BYTES_PER_TOKEN`` of body, since parsing costs in
        proportion to size (429 when its bucket holds too few), before the
        body is parsed: the audit record of
        a refusal names the Agent-ID, Principal-ID and Task-ID headers as
        sent (at most 256 characters each), or null. Not limited: no IP
        address (a unix socket, unknown), an exempt one, the limit off.
        When the refusal will be ``signed`` (DISCOVER), the address pays
        ``SIGNED_REFUSAL_TOKENS`` for it here, and its Retry-After says so."""
        key = self._address_key(creds)
        if key is None:
            return
        method = method[:32]
        cost = 1 + body_bytes // ADDRESS_BYTES_PER_TOKEN
        decision = self.address_limiter.check(
            key, method, cost, SIGNED_REFUSAL_TOKENS if signed else 0.0
        )
        if decision.notes:
            about = {
                field: _bounded(headers.get(header))
                for field, header in (
                    ("agent_id", "agent-id"),
                    ("principal_id", "principal-id"),
                    ("task_id", "task-id"),
                )
            }
            for note in decision.notes:
                self._write(note, method, about, "client_address", client_address=key)
        if not decision.allowed:
            raise RateLimited(
                f"too many requests from this client address; retry after {decision.retry_after}s",
                headers=(("retry-after", str(decision.retry_after)),),
            )

    def settle(
        self, creds: Credentials, cpu_seconds: float, refused: bool, *, signed: bool = False
    ) -> None:
        """Charge the client address for what its request turned out to cost:
        one token per ``ADDRESS_MS_PER_TOKEN`` of CPU beyond the first
        ``per_address_free_ms``, ``REFUSAL_TOKENS`` for a request refused
        after parsing (401, 451, 453: each writes an audit record), and
        ``SIGNED_REFUSAL_TOKENS`` for a signed refusal (any DISCOVER error
        answer after :meth:`limit_address` let it in; that method charges its
        own 429s). A costly query or a stream of refusals then uses the address's
        allowance faster than a plain DISCOVER does."""
        key = self._address_key(creds)
        if key is None:
            return
        free_ms = self.address_limiter.settings.per_address_free_ms
        extra = max(0.0, cpu_seconds * 1000.0 - free_ms) / ADDRESS_MS_PER_TOKEN
        if refused:
            extra += REFUSAL_TOKENS
        if signed:
            extra += SIGNED_REFUSAL_TOKENS
        self.address_limiter.debit(key, extra)

    def _address_key(self, creds: Credentials) -> str | None:
        """The client's bucket, or None when it is not limited: no IP address
        (a unix socket, unknown), an exempt one, or the limit off."""
        if not self.address_limiter.settings.enabled:
            return None
        ip = client_ip(creds.client_address)
        if ip is None or any(ip in net for net in self.exempt_addresses):
            return None
        key: str = address_key(ip)
        return key

    def authenticate_and_limit(self, method: str, req: R, creds: Credentials) -> R:
        """Authenticate, then rate limit per Agent-ID; return the request with
        its effective identity. The client address was charged before parsing
        (:meth:`limit_address`)."""
        identity = self.identity_of(req)
        if identity is None:
            return req
        task_id = getattr(req, "task_id", None)
        # A DISCOVER on a federation path may come from a trusted forwarding ANS.
        forwarded = isinstance(req, DiscoverRequest) and bool(req.federation_path)
        auth = self._authenticate(method, identity, creds, task_id, forwarded)
        self._rate_limit(method, auth.identity, task_id)
        if auth.identity is identity:
            return req
        return dataclasses.replace(req, identity=auth.identity)  # type: ignore[type-var]

    def _authenticate(
        self,
        method: str,
        identity: Identity,
        creds: Credentials,
        task_id: str | None,
        forwarded: bool = False,
    ) -> Authenticated:
        # A malformed AGTP-Zone-ID is a 400 in every mode (AGTP-02 defines the
        # header; only a token's zone claim reads it), before the 401 checks.
        creds.zone()
        try:
            if creds.api_key is not None:
                # An API key authenticates in every mode, instead of the mode's credential.
                effective, _ = self.api_keys.authenticate(identity, creds.api_key)
                return Authenticated(effective)
            if self.mode == "token":
                assert self.token_keys is not None and self.clock is not None
                return authenticate_token(
                    identity,
                    creds.authorization,
                    creds.zone(),
                    self.token_keys,
                    self.policy,
                    self.clock(),
                )
            if self.mode == "mtls":
                auth = authenticate_certificate(
                    identity, creds.client_cert_chain, self.forwarders, forwarded
                )
                if auth.forwarded_by is not None:
                    self._audit_auth(
                        "authentication_forwarded",
                        method,
                        identity,
                        task_id,
                        forwarded_by=auth.forwarded_by,
                    )
                return auth
        except AgtpError as exc:
            self._audit_auth(
                "authentication_failed",
                method,
                identity,
                task_id,
                status=exc.status,
                code=exc.code,
                reason=exc.message,
                zone_header=creds.zone_header[:128] if creds.zone_header else None,
                credential="api_key" if creds.api_key is not None else self.mode,
            )
            raise
        return Authenticated(identity)

    def identity_from_key(self, method: str, creds: Credentials, task_id: str | None) -> Identity:
        """The identity an API key speaks for, for a request that sent no
        identity headers (a HAIDIP caller); a refused key is audited as
        ``authentication_failed`` (401)."""
        assert creds.api_key is not None
        try:
            return self.api_keys.identity_of(creds.api_key)
        except AgtpError as exc:
            self.audit.record(
                "authentication_failed",
                status=exc.status,
                code=exc.code,
                reason=exc.message,
                credential="api_key",
                auth_mode=self.mode,
                method=method,
                agent_id=None,
                principal_id=None,
                task_id=task_id,
            )
            raise

    def _audit_auth(
        self, event: str, method: str, identity: Identity, task_id: str | None, **fields: Any
    ) -> None:
        self.audit.record(
            event,
            **fields,
            auth_mode=self.mode,
            method=method,
            agent_id=identity.agent_id,
            principal_id=identity.principal_id,
            task_id=task_id,
        )

    def _rate_limit(self, method: str, identity: Identity, task_id: str | None) -> None:
        decision = self.limiter.check(identity.agent_id, method)
        about = {
            "agent_id": identity.agent_id,
            "principal_id": identity.principal_id,
            "task_id": task_id,
        }
        for note in decision.notes:
            self._write(note, method, about, "agent_id")
        if not decision.allowed:
            raise RateLimited(
                f"too many requests from this Agent-ID; retry after {decision.retry_after}s",
                headers=(("retry-after", str(decision.retry_after)),),
            )

    def _write(
        self,
        note: AuditNote,
        method: str,
        about: dict[str, str | None],
        limit: str,
        **key: Any,
    ) -> None:
        """One limiter note as an audit record; ``about`` is the requester
        (agent_id, principal_id, task_id), ``limit`` ("agent_id" or
        "client_address") says which limit refused."""
        fields: dict[str, Any] = {"auth_mode": self.mode}
        if note.event == "rate_limited":
            fields.update(status=429, code=ErrorCode.RATE_LIMITED, limit=limit)
        if note.fields.get("summary"):
            # A summary of earlier refusals: not about the request at hand.
            fields.update(note.fields)
        else:
            fields.update(method=method, **about, **key, **note.fields)
        self.audit.record(note.event, **fields)
        if note.event == "enumeration_suspected":
            log.warning("enumeration suspected", agent_id=about["agent_id"])

    def flush(self) -> None:
        """Write pending suppressed-refusal counts of both limits (at shutdown)."""
        for limit, limiter in (
            ("agent_id", self.limiter),
            ("client_address", self.address_limiter),
        ):
            for note in limiter.flush():
                self.audit.record(
                    note.event,
                    auth_mode=self.mode,
                    status=429,
                    code=ErrorCode.RATE_LIMITED,
                    limit=limit,
                    **note.fields,
                )


def _bounded(value: str | None) -> str | None:
    """A header value as audited before parsing: stripped, at most
    AUDITED_HEADER_CHARS characters, None when absent or blank."""
    if value is None:
        return None
    return value.strip()[:AUDITED_HEADER_CHARS] or None
