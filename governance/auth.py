"""Requester authentication: governance-issued bearer tokens (compact JWS/JWT,
ES256 only) and client-certificate identity (mTLS). Sans-IO: time, keys and
the presented credentials are passed in; nothing is read from the network.

Two layers, each testable on its own:

* :func:`verify_compact_jws` — the JWS layer: size bound, compact shape,
  protected header (``alg`` pinned to ES256, no ``crit``/``b64``/``zip``
  extensions) checked here; the compact JWS itself, the key by ``kid`` from a
  trusted key set (a joserfc key-resolution callable) and the P1363
  signature are joserfc's (``algorithms=["ES256"]``).
* :func:`check_claims` / :func:`authenticate_token` — the JWT claims bound to
  the request: ``iss``, ``aud``, ``exp``/``nbf`` with leeway, ``sub`` =
  Agent-ID, ``principal`` = Principal-ID, ``scope`` (the effective scope is
  header scope ∩ token scope) and the optional ``zone``.

:func:`authenticate_certificate` binds Agent-ID to a SubjectAltName URI of the
verified client certificate, or accepts a forwarded DISCOVER from a trusted
forwarding ANS (``[auth] forwarders``). Every failure is an :class:`AuthenticationFailed`
(401) with a distinct code: ``ErrorCode.MISSING_TOKEN``, an ``ErrorCode.TOKEN_*``
or an ``ErrorCode.*CERTIFICATE*`` member.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ans.protocol import jsonstrict
from ans.protocol.errors import AuthenticationFailed, ErrorCode, InvalidAuthorityScope
from ans.protocol.messages import ZONE_RE, Identity
from ans.protocol.scope import AuthorityScope, parse_authority_scope
from cryptography import x509
from joserfc import jws
from joserfc.errors import JoseError

from .jose import ALGORITHM, REGISTRY
from .keys import b64url_decode
from .signing import KeyLookup, es256_verify, kid_resolver

# A governance token is a few hundred bytes; 8 KiB leaves room and bounds the work.
MAX_TOKEN_BYTES = 8 * 1024
MAX_CLAIMS_NESTING = 8
DEFAULT_LEEWAY = 30.0
REALM = "ANS"
# Header parameters that change how the JWS must be processed; we implement none.
_UNSUPPORTED_HEADERS = ("crit", "b64", "zip", "enc")


def _fail(code: ErrorCode, message: str) -> AuthenticationFailed:
    """A 401 with an RFC 6750 challenge: no error attribute when no token was
    sent (3.1), ``error="invalid_token"`` when one was sent and refused."""
    if code == ErrorCode.MISSING_TOKEN:
        challenge = f'Bearer realm="{REALM}"'
    else:
        challenge = f'Bearer realm="{REALM}", error="invalid_token"'
    return AuthenticationFailed(message, code=code, headers=(("www-authenticate", challenge),))


# -- the JWS layer ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VerifiedJws:
    header: Mapping[str, Any]
    payload: bytes
    kid: str


def _json_object(segment: str, what: str) -> dict[str, Any]:
    try:
        raw = b64url_decode(segment)
        doc = jsonstrict.loads(raw, max_bytes=MAX_TOKEN_BYTES, max_depth=MAX_CLAIMS_NESTING)
    except Exception:  # base64url or strict-JSON failure: the token is malformed
        raise _fail(ErrorCode.TOKEN_MALFORMED, f"the token {what} is not base64url JSON") from None
    if not isinstance(doc, dict):
        raise _fail(ErrorCode.TOKEN_MALFORMED, f"the token {what} is not a JSON object")
    return doc


def verify_compact_jws(token: str, keys: KeyLookup) -> VerifiedJws:
    """Verify a compact JWS ``header.payload.signature`` with ES256 pinned."""
    if len(token) > MAX_TOKEN_BYTES:
        raise _fail(ErrorCode.TOKEN_TOO_LARGE, f"the token is longer than {MAX_TOKEN_BYTES} bytes")
    if not token.isascii():
        raise _fail(ErrorCode.TOKEN_MALFORMED, "the token is not ASCII")
    parts = token.split(".")
    if len(parts) == 5:
        raise _fail(
            ErrorCode.TOKEN_MALFORMED, "encrypted tokens (JWE) are not accepted; send a JWS"
        )
    if len(parts) != 3 or not all(parts):
        raise _fail(
            ErrorCode.TOKEN_MALFORMED,
            "the token is not a signed compact JWS (header.payload.signature)",
        )
    header = _json_object(parts[0], "header")
    alg = header.get("alg")
    if alg != ALGORITHM:
        shown = alg[:20] if isinstance(alg, str) else type(alg).__name__
        raise _fail(
            ErrorCode.TOKEN_ALGORITHM_NOT_ALLOWED, f"token alg {shown!r} is not allowed; only ES256"
        )
    unsupported = [h for h in _UNSUPPORTED_HEADERS if h in header]
    if unsupported:
        raise _fail(
            ErrorCode.TOKEN_UNSUPPORTED_HEADER,
            f"token header parameter {unsupported[0]!r} is not supported",
        )
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid or len(kid) > 256:
        raise _fail(
            ErrorCode.TOKEN_MALFORMED, "the token header needs a kid naming the issuer's key"
        )
    if keys.get(kid) is None:
        raise _fail(
            ErrorCode.TOKEN_UNKNOWN_KEY, f"token key {kid[:80]!r} is not a trusted issuer key"
        )
    try:
        obj = jws.extract_compact(token.encode("ascii"), registry=REGISTRY)
        verified = es256_verify(obj, kid_resolver(keys, _unknown_key)(obj))
    except (JoseError, ValueError):
        raise _fail(
            ErrorCode.TOKEN_MALFORMED, "the token payload or signature is not base64url"
        ) from None
    if not verified:
        raise _fail(ErrorCode.TOKEN_SIGNATURE_INVALID, "the token signature does not verify")
    return VerifiedJws(header, obj.payload, kid)


def _unknown_key(kid: str) -> Exception:
    message = f"token key {kid[:80]!r} is not a trusted issuer key"
    exc: Exception = _fail(ErrorCode.TOKEN_UNKNOWN_KEY, message)
    return exc


# -- the claims layer ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TokenPolicy:
    """What a token must say to be accepted by this ANS."""

    issuer: str
    audience: str
    leeway: float = DEFAULT_LEEWAY


@dataclass(frozen=True, slots=True)
class TokenClaims:
    issuer: str
    subject: str
    principal: str
    scope: AuthorityScope
    expires: float
    zone: str | None
    kid: str


def _number(claims: Mapping[str, Any], name: str, *, required: bool) -> float | None:
    value = claims.get(name)
    if value is None:
        if required:
            raise _fail(ErrorCode.TOKEN_MISSING_CLAIM, f"the token has no {name} claim")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(ErrorCode.TOKEN_INVALID_CLAIM, f"the token {name} claim must be a NumericDate")
    return float(value)


def _text(claims: Mapping[str, Any], name: str) -> str:
    value = claims.get(name)
    if value is None:
        raise _fail(ErrorCode.TOKEN_MISSING_CLAIM, f"the token has no {name} claim")
    if not isinstance(value, str) or not value:
        raise _fail(
            ErrorCode.TOKEN_INVALID_CLAIM, f"the token {name} claim must be a non-empty string"
        )
    return value


def check_claims(
    claims: Mapping[str, Any],
    policy: TokenPolicy,
    identity: Identity,
    zone_header: str | None,
    now: datetime,
    kid: str = "",
) -> TokenClaims:
    """Check the claims against this ANS and the request's identity headers."""
    t = now.timestamp()
    issuer = _text(claims, "iss")
    if issuer != policy.issuer:
        raise _fail(
            ErrorCode.TOKEN_WRONG_ISSUER, "the token was not issued by the configured issuer"
        )
    aud = claims.get("aud")
    if aud is None:
        raise _fail(ErrorCode.TOKEN_MISSING_CLAIM, "the token has no aud claim")
    audiences = [aud] if isinstance(aud, str) else aud
    if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
        raise _fail(
            ErrorCode.TOKEN_INVALID_CLAIM, "the token aud claim must be a string or strings"
        )
    if policy.audience not in audiences:
        raise _fail(ErrorCode.TOKEN_WRONG_AUDIENCE, "the token is not addressed to this ANS (aud)")
    exp = _number(claims, "exp", required=True)
    assert exp is not None
    if t >= exp + policy.leeway:
        raise _fail(ErrorCode.TOKEN_EXPIRED, "the token has expired")
    nbf = _number(claims, "nbf", required=False)
    if nbf is not None and t < nbf - policy.leeway:
        raise _fail(ErrorCode.TOKEN_NOT_YET_VALID, "the token is not valid yet (nbf)")
    subject = _text(claims, "sub")
    if subject != identity.agent_id:
        raise _fail(ErrorCode.TOKEN_SUBJECT_MISMATCH, "the token sub is not the Agent-ID header")
    principal = _text(claims, "principal")
    if principal != identity.principal_id:
        raise _fail(
            ErrorCode.TOKEN_PRINCIPAL_MISMATCH, "the token principal is not the Principal-ID header"
        )
    try:
        scope = parse_authority_scope(_text(claims, "scope"))
    except InvalidAuthorityScope as exc:
        raise _fail(
            ErrorCode.TOKEN_INVALID_CLAIM, f"the token scope claim: {exc.message}"
        ) from None
    zone = claims.get("zone")
    if zone is not None:
        if not isinstance(zone, str) or ZONE_RE.fullmatch(zone) is None:
            raise _fail(ErrorCode.TOKEN_INVALID_CLAIM, "the token zone claim must be a zone id")
        if zone_header is not None and zone_header != zone:
            raise _fail(
                ErrorCode.TOKEN_ZONE_MISMATCH, "the token zone is not the AGTP-Zone-ID header"
            )
    return TokenClaims(issuer, subject, principal, scope, exp, zone, kid)


def parse_bearer(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header."""
    if authorization is None or not authorization.strip():
        raise _fail(
            ErrorCode.MISSING_TOKEN, "this ANS requires Authorization: Bearer <governance token>"
        )
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise _fail(ErrorCode.MISSING_TOKEN, "the Authorization scheme must be Bearer")
    token = token.strip()
    if not token:
        raise _fail(ErrorCode.MISSING_TOKEN, "the Authorization header carries no token")
    return token


@dataclass(frozen=True, slots=True)
class Authenticated:
    identity: Identity  # the effective identity: scope = header scope ∩ token scope
    claims: TokenClaims | None = None
    certificate_uri: str | None = None
    # mtls: the forwarding ANS (its certificate URI) that vouched for the identity
    forwarded_by: str | None = None


def authenticate_token(
    identity: Identity,
    authorization: str | None,
    zone_header: str | None,
    keys: KeyLookup,
    policy: TokenPolicy,
    now: datetime,
) -> Authenticated:
    """Verify the bearer token and bind it to the identity headers."""
    token = parse_bearer(authorization)
    jws = verify_compact_jws(token, keys)
    claims = jsonstrict_claims(jws.payload)
    checked = check_claims(claims, policy, identity, zone_header, now, jws.kid)
    effective = dataclasses.replace(
        identity,
        scope=identity.scope.intersect(checked.scope),
        bearer_token=token,
        token_zone=checked.zone,
    )
    return Authenticated(effective, claims=checked)


def jsonstrict_claims(payload: bytes) -> dict[str, Any]:
    try:
        doc = jsonstrict.loads(payload, max_bytes=MAX_TOKEN_BYTES, max_depth=MAX_CLAIMS_NESTING)
    except Exception:
        raise _fail(
            ErrorCode.TOKEN_MALFORMED, "the token payload is not a JSON claims set"
        ) from None
    if not isinstance(doc, dict):
        raise _fail(ErrorCode.TOKEN_MALFORMED, "the token payload is not a JSON object")
    return doc


# -- mTLS --------------------------------------------------------------------------------


def certificate_uris(pem: str) -> list[str]:
    """The SubjectAltName URI entries of a PEM certificate (empty if none)."""
    try:
        cert = x509.load_pem_x509_certificate(pem.encode("ascii"))
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    except (ValueError, UnicodeEncodeError):
        return []
    return [str(u) for u in san.value.get_values_for_type(x509.UniformResourceIdentifier)]


def authenticate_certificate(
    identity: Identity,
    chain: Sequence[str],
    forwarders: frozenset[str] = frozenset(),
    forwarded: bool = False,
) -> Authenticated:
    """Agent-ID must equal one SubjectAltName URI of the (already verified)
    client certificate, ``chain[0]`` -- or, for a ``forwarded`` request (a
    DISCOVER on a federation path), the certificate names one of the trusted
    ``forwarders``: a peer ANS that authenticated the caller itself and passes
    the caller's identity headers on unchanged."""
    if not chain:
        raise AuthenticationFailed(
            "this ANS requires a TLS client certificate", code=ErrorCode.CLIENT_CERTIFICATE_REQUIRED
        )
    uris = certificate_uris(chain[0])
    if identity.agent_id in uris:
        return Authenticated(identity, certificate_uri=identity.agent_id)
    if forwarded:
        forwarder = next((u for u in uris if u in forwarders), None)
        if forwarder is not None:
            return Authenticated(identity, certificate_uri=forwarder, forwarded_by=forwarder)
    raise AuthenticationFailed(
        "Agent-ID is not a SubjectAltName URI of the client certificate",
        code=ErrorCode.CERTIFICATE_IDENTITY_MISMATCH,
    )
