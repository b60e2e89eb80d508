"""API keys: configured, hashed credentials mapped to a principal and scopes
(``[[auth.api_keys]]``, HAIDIP seed section 6). Sans-IO: the configured
entries and the presented key are passed in.

* :func:`parse_api_keys` — the ``[auth] api_keys`` list of tables
  ``{hash = "sha256:<hex>", principal_id, agent_id?, scopes = [...], zones?}``
  into frozen :class:`ApiKey` values (a :class:`ConfigProblem` names the bad entry).
* :func:`presented_key` — the key a request carries: ``Authorization: ApiKey
  <key>`` or ``X-API-Key: <key>`` (bounded; never logged).
* :class:`ApiKeys` — :meth:`ApiKeys.authenticate` compares the SHA-256 of the
  presented key with every configured hash in constant time
  (:func:`hmac.compare_digest`, no early exit) and binds the request's
  identity to the key: its principal, its agent id when set, and an
  effective scope of the key's scopes and zones, narrowed by the
  Authority-Scope header when one was sent. Every failure is a 401
  :class:`AuthenticationFailed` with code ``api_key_invalid`` or
  ``api_key_identity_mismatch``.
* :func:`new_key` / :func:`key_hash` — what ``ans apikey new`` prints.

Only hashes are configured, so a leaked configuration file does not leak
keys; a key is revoked by removing its entry.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ans.protocol.errors import AuthenticationFailed, ErrorCode, InvalidAuthorityScope
from ans.protocol.messages import ZONE_RE, Identity
from ans.protocol.request_types import _PRINTABLE_RE
from ans.protocol.scope import AuthorityScope, ScopeToken, parse_token

# Generated keys are "ans_" + 43 base64url characters (32 random bytes); a
# presented key longer than this bound is refused before it is hashed.
KEY_PREFIX = "ans_"
MAX_KEY_CHARS = 256
MAX_KEYS = 10_000
MAX_SCOPES = 64
MAX_FIELD_CHARS = 512
HASH_RE = re.compile(r"sha256:([0-9a-f]{64})")
HEADER = "x-api-key"
SCHEME = "apikey"
# The Agent-ID of a key-authenticated request that named none (HAIDIP
# callers need not send AGTP identity headers): "apikey:" + principal.
AGENT_ID_PREFIX = "apikey:"
REALM = "ANS"


class ConfigProblem(ValueError):
    """An ``[auth] api_keys`` entry is unusable (the config loader reports it)."""


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One configured key: its hash, who it authenticates, what it grants
    (``scopes`` holds the zone ids of ``zones`` too: a zone is a scope token)."""

    hash: str  # "sha256:<hex>"
    principal_id: str
    agent_id: str | None = None
    scopes: tuple[str, ...] = ()

    @property
    def digest(self) -> bytes:
        return bytes.fromhex(self.hash.removeprefix("sha256:"))

    @property
    def scope(self) -> AuthorityScope:
        return AuthorityScope(tuple(parse_token(t) for t in self.scopes))

    @property
    def label(self) -> str:
        """How audit records name the key: its hash's first 12 hex digits."""
        return self.hash[:19]


def key_hash(key: str) -> str:
    """The configured form of a key: ``sha256:<hex>``."""
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key(random_bytes: Callable[[int], bytes] = secrets.token_bytes) -> str:
    """A new random key (32 bytes of ``random_bytes``, base64url, prefixed)."""
    raw = base64.urlsafe_b64encode(random_bytes(32)).rstrip(b"=").decode("ascii")
    return KEY_PREFIX + raw


def _text(entry: Mapping[str, Any], name: str, where: str, *, required: bool) -> str | None:
    value = entry.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_FIELD_CHARS:
        raise ConfigProblem(f"{where}: {name} must be a non-empty string")
    if _PRINTABLE_RE.fullmatch(value.strip()) is None:
        # what an identity header may carry: the key stands for those headers
        raise ConfigProblem(f"{where}: {name} must be printable ASCII (no control characters)")
    return value.strip()


def _tokens(entry: Mapping[str, Any], name: str, where: str) -> list[ScopeToken]:
    values = entry.get(name, [])
    if not isinstance(values, list) or len(values) > MAX_SCOPES:
        raise ConfigProblem(f"{where}: {name} must be a list of at most {MAX_SCOPES} strings")
    out = []
    for value in values:
        if not isinstance(value, str):
            raise ConfigProblem(f"{where}: {name} must be a list of strings")
        if name == "zones" and ZONE_RE.fullmatch(value) is None:
            raise ConfigProblem(f"{where}: zone {value[:80]!r} must look like 'zone:name'")
        try:
            out.append(parse_token(value))
        except InvalidAuthorityScope as exc:
            raise ConfigProblem(f"{where}: {exc.message}") from None
    return out


def parse_api_keys(entries: Any) -> tuple[ApiKey, ...]:
    """The ``[auth] api_keys`` list of tables as :class:`ApiKey` values."""
    if not isinstance(entries, list) or len(entries) > MAX_KEYS:
        raise ConfigProblem(f"[auth] api_keys must be a list of at most {MAX_KEYS} tables")
    keys: list[ApiKey] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"[auth] api_keys[{i}]"
        if not isinstance(entry, dict):
            raise ConfigProblem(f"{where} must be a table")
        unknown = sorted(set(entry) - {"hash", "principal_id", "agent_id", "scopes", "zones"})
        if unknown:
            raise ConfigProblem(f"{where}: unknown key {unknown[0]!r}")
        m = HASH_RE.fullmatch(str(entry.get("hash", "")))
        if m is None:
            raise ConfigProblem(
                f'{where}: hash must be "sha256:<64 lowercase hex digits>" (ans apikey new)'
            )
        digest = m.group(0)
        if digest in seen:
            raise ConfigProblem(f"{where}: the same key hash is configured twice")
        seen.add(digest)
        principal = _text(entry, "principal_id", where, required=True)
        assert principal is not None
        # "" is no agent id (as ``ans config show`` prints an unset one)
        agent = (
            None if entry.get("agent_id") == "" else _text(entry, "agent_id", where, required=False)
        )
        tokens = _tokens(entry, "scopes", where) + _tokens(entry, "zones", where)
        scopes = tuple(dict.fromkeys(str(t) for t in tokens))
        keys.append(ApiKey(digest, principal, agent, scopes))
    return tuple(keys)


def presented_key(authorization: str | None, x_api_key: str | None) -> str | None:
    """The API key of a request, or None when it carries none: ``X-API-Key``
    first, else an ``Authorization: ApiKey <key>`` header. An empty or
    over-long key is returned as is (it will not match)."""
    if x_api_key is not None and x_api_key.strip():
        return x_api_key.strip()[: MAX_KEY_CHARS + 1]
    if authorization is None:
        return None
    scheme, _, rest = authorization.strip().partition(" ")
    if scheme.lower() != SCHEME:
        return None
    return rest.strip()[: MAX_KEY_CHARS + 1]


def _fail(code: ErrorCode, message: str) -> AuthenticationFailed:
    challenge = f'ApiKey realm="{REALM}"'
    return AuthenticationFailed(message, code=code, headers=(("www-authenticate", challenge),))


class ApiKeys:
    """The configured keys (``[auth] api_keys``), hashes and scopes decoded
    once; empty: no key is accepted."""

    def __init__(self, keys: Sequence[ApiKey] = ()) -> None:
        self.keys = tuple(keys)
        self._entries = tuple((k.digest, k, k.scope) for k in self.keys)

    def __bool__(self) -> bool:
        return bool(self.keys)

    def lookup(self, presented: str) -> tuple[ApiKey, AuthorityScope]:
        """The entry whose hash is that of ``presented`` (401 when none).
        Every configured hash is compared, in constant time each."""
        if not presented or len(presented) > MAX_KEY_CHARS:
            raise _fail(ErrorCode.API_KEY_INVALID, "the API key is not valid")
        digest = hashlib.sha256(presented.encode("utf-8", "replace")).digest()
        found: tuple[ApiKey, AuthorityScope] | None = None
        for expected, key, scope in self._entries:
            if hmac.compare_digest(digest, expected) and found is None:
                found = (key, scope)
        if found is None:
            raise _fail(ErrorCode.API_KEY_INVALID, "the API key is not valid")
        return found

    def identity_of(self, presented: str) -> Identity:
        """The identity a key speaks for when the request sent no identity
        headers (HAIDIP): its agent id (else ``apikey:<principal>``), its
        principal, all its scopes."""
        key, scope = self.lookup(presented)
        agent = key.agent_id or AGENT_ID_PREFIX + key.principal_id
        return Identity(agent, key.principal_id, scope, scope_header=str(scope))

    def authenticate(self, identity: Identity, presented: str) -> tuple[Identity, ApiKey]:
        """Bind ``identity`` (from the request's headers) to the key: the
        Principal-ID must be the key's, the Agent-ID the key's when it names
        one; the effective scope is the header's scope within the key's."""
        key, scope = self.lookup(presented)
        if identity.principal_id != key.principal_id:
            raise _fail(
                ErrorCode.API_KEY_IDENTITY_MISMATCH,
                "the Principal-ID header is not the API key's principal",
            )
        if key.agent_id is not None and identity.agent_id != key.agent_id:
            raise _fail(
                ErrorCode.API_KEY_IDENTITY_MISMATCH,
                "the Agent-ID header is not the API key's agent",
            )
        effective = dataclasses.replace(identity, scope=identity.scope.intersect(scope))
        return effective, key
