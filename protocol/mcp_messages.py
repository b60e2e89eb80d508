"""The MCP-orchestrator discovery protocol's messages (seed 002 sections 2,
4 and 8), sans-IO: a decoded JSON value in, a frozen typed value or a typed
error (:mod:`.mcp_errors`) out.

* :func:`parse_version` -- ``protocol_version`` ``vMAJOR.MINOR``; an unknown
  major is :class:`McpUnsupportedVersion` naming :data:`SUPPORTED_VERSIONS`,
  an unknown minor of a known major is accepted (section 8.1), and answers
  carry the client's own string;
* :func:`parse_agent` -- the agent identity model (section 2), bounded;
* :func:`parse_announce` / :func:`parse_query` -- the Announce and Query
  messages (section 4.1);
* :func:`signed_bytes` -- what a signature covers: the RFC 8785 bytes of the
  ``agent`` object exactly as sent (unknown fields included).

Keys are checked for shape here (PEM framing, size); whether they are EC
P-256 / RSA >= 2048 and whether a signature verifies is governance's
(``ans.governance.mcp_signature``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from .jcs import canonicalize
from .mcp_errors import McpMalformed, McpUnsupportedVersion

# Majors this registry speaks; the minors it was written against (a newer
# minor of a supported major is accepted: section 8.1).
SUPPORTED_MAJORS = (1,)
SUPPORTED_VERSIONS = ("v1.0", "v1.1")
CURRENT_VERSION = "v1.1"

MAX_MESSAGE_BYTES = 64 * 1024
MAX_CAPABILITIES = 64
MAX_CAPABILITY_NAME = 128
MAX_CAPABILITY_VALUE = 256
MAX_PUBLIC_KEY_CHARS = 8192
MAX_ENDPOINT_CHARS = 512
MAX_METADATA_KEYS = 32
MAX_METADATA_BYTES = 8 * 1024
MAX_SIGNATURE_CHARS = 2048
MAX_AGENT_BYTES = 32 * 1024
RESERVED_METADATA_KEYS = ("__mcp_version", "__os", "__arch")

_VERSION_RE = re.compile(r"v(\d{1,4})\.(\d{1,4})")
# RFC 4122 version 4 (variant 10xx), either case.
UUID4_RE = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-4[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}"
)
_DNS_LABEL_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_TRANSPORT_TYPE_RE = re.compile(r"[a-z][a-z0-9+.-]{0,31}")
_PEM_RE = re.compile(
    r"\s*-----BEGIN (PUBLIC KEY|CERTIFICATE)-----\r?\n[A-Za-z0-9+/=\r\n]+-----END \1-----\s*"
)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class ProtocolVersion:
    """A supported ``vMAJOR.MINOR``; ``text`` is the client's string."""

    major: int
    minor: int
    text: str


@dataclass(frozen=True, slots=True)
class McpAgent:
    """One agent object (section 2). ``raw`` is the object as sent: it is
    what was signed, what is stored and what is echoed."""

    agent_id: str  # lowercase
    agent_name: str | None
    capabilities: tuple[tuple[str, str], ...]
    public_key: str
    transport_type: str
    endpoint: str
    metadata: Mapping[str, Any]
    raw: Mapping[str, Any] = field(repr=False)

    def capability_map(self) -> dict[str, str]:
        return dict(self.capabilities)


@dataclass(frozen=True, slots=True)
class Announce:
    version: ProtocolVersion
    agent: McpAgent
    signature: str | None
    # Key rotation: the new agent object signed with the key pinned before
    # (standard base64, as ``signature``); see docs/mcp-registry.md.
    rotation_signature: str | None = None


@dataclass(frozen=True, slots=True)
class Query:
    version: ProtocolVersion
    capability: str
    agent_id: str | None = None  # lowercase


def parse_version(value: Any) -> ProtocolVersion:
    """``protocol_version``: required, ``vMAJOR.MINOR``, a supported major."""
    if value is None:
        raise McpMalformed('protocol_version is required (e.g. "v1.0")')
    if not isinstance(value, str) or (m := _VERSION_RE.fullmatch(value)) is None:
        raise McpMalformed('protocol_version must be a string "v<major>.<minor>"')
    major, minor = int(m.group(1)), int(m.group(2))
    if major not in SUPPORTED_MAJORS:
        raise McpUnsupportedVersion(
            f"protocol_version {value} is not supported; this registry speaks "
            + ", ".join(SUPPORTED_VERSIONS),
            supported=SUPPORTED_VERSIONS,
        )
    return ProtocolVersion(major, minor, value)


def version_hint(doc: Any) -> str | None:
    """The client's ``protocol_version`` when it is a supported one (errors
    are answered in it), else None."""
    if isinstance(doc, Mapping):
        try:
            return parse_version(doc.get("protocol_version")).text
        except (McpMalformed, McpUnsupportedVersion):
            return None
    return None


def _text(obj: Mapping[str, Any], name: str, limit: int, *, required: bool = True) -> str | None:
    value = obj.get(name)
    if value is None:
        if required:
            raise McpMalformed(f"agent.{name} is required")
        return None
    if not isinstance(value, str) or not value.strip():
        raise McpMalformed(f"agent.{name} must be a non-empty string")
    if len(value) > limit:
        raise McpMalformed(f"agent.{name} is longer than {limit} characters")
    return value


def is_uuid4(value: Any) -> bool:
    return isinstance(value, str) and UUID4_RE.fullmatch(value) is not None


def parse_agent_id(value: Any, where: str = "agent.agent_id") -> str:
    """An RFC 4122 UUIDv4, lowercased."""
    if not is_uuid4(value):
        raise McpMalformed(f"{where} must be an RFC 4122 version-4 UUID")
    return str(value).lower()


def _capabilities(value: Any) -> tuple[tuple[str, str], ...]:
    if value is None:
        raise McpMalformed("agent.capabilities is required (an object; {} when none)")
    if not isinstance(value, dict):
        raise McpMalformed("agent.capabilities must be an object of name -> version")
    if len(value) > MAX_CAPABILITIES:
        raise McpMalformed(f"agent.capabilities has more than {MAX_CAPABILITIES} entries")
    out: list[tuple[str, str]] = []
    for name, version in value.items():
        if not name.strip() or len(name) > MAX_CAPABILITY_NAME or _CONTROL_RE.search(name):
            raise McpMalformed(
                f"agent.capabilities names are 1..{MAX_CAPABILITY_NAME} printable characters"
            )
        if not isinstance(version, str) or len(version) > MAX_CAPABILITY_VALUE:
            raise McpMalformed(
                f"agent.capabilities[{name[:40]!r}] must be a string "
                f"(a version or description, at most {MAX_CAPABILITY_VALUE} characters)"
            )
        out.append((name, version))
    return tuple(out)


def _transport(value: Any) -> tuple[str, str]:
    if not isinstance(value, dict):
        raise McpMalformed('agent.transport is required: {"type", "endpoint"}')
    kind, endpoint = value.get("type"), value.get("endpoint")
    if not isinstance(kind, str) or _TRANSPORT_TYPE_RE.fullmatch(kind) is None:
        raise McpMalformed("agent.transport.type must be a short lowercase name (tcp, ws, unix)")
    if (
        not isinstance(endpoint, str)
        or not endpoint.strip()
        or len(endpoint) > MAX_ENDPOINT_CHARS
        or _CONTROL_RE.search(endpoint)
    ):
        raise McpMalformed(
            f"agent.transport.endpoint must be a string of 1..{MAX_ENDPOINT_CHARS} characters"
        )
    return kind, endpoint


def _metadata(value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise McpMalformed("agent.metadata must be an object")
    if len(value) > MAX_METADATA_KEYS:
        raise McpMalformed(f"agent.metadata has more than {MAX_METADATA_KEYS} keys")
    if len(orjson.dumps(value)) > MAX_METADATA_BYTES:
        raise McpMalformed(f"agent.metadata is larger than {MAX_METADATA_BYTES} bytes")
    return value


def parse_agent(value: Any) -> McpAgent:
    """The agent identity model of section 2, every field bounded."""
    if not isinstance(value, dict):
        raise McpMalformed("agent must be an object (section 2)")
    try:
        size = len(canonicalize(value))
    except (TypeError, ValueError):
        raise McpMalformed("agent is not canonicalizable JSON (RFC 8785)") from None
    if size > MAX_AGENT_BYTES:
        raise McpMalformed(f"agent is larger than {MAX_AGENT_BYTES} bytes")
    agent_id = parse_agent_id(value.get("agent_id"))
    name = _text(value, "agent_name", 63, required=False)
    if name is not None and _DNS_LABEL_RE.fullmatch(name) is None:
        raise McpMalformed("agent.agent_name must be a DNS label (letters, digits, '-')")
    caps = _capabilities(value.get("capabilities"))
    key = _text(value, "public_key", MAX_PUBLIC_KEY_CHARS)
    assert key is not None
    if _PEM_RE.fullmatch(key) is None:
        raise McpMalformed(
            "agent.public_key must be PEM: a SubjectPublicKeyInfo (BEGIN PUBLIC KEY) "
            "or an X.509 certificate (BEGIN CERTIFICATE)"
        )
    kind, endpoint = _transport(value.get("transport"))
    metadata = _metadata(value.get("metadata"))
    return McpAgent(agent_id, name, caps, key, kind, endpoint, metadata, value)


def _object(doc: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(doc, dict):
        raise McpMalformed(f"{what} must be a JSON object")
    return doc


def _signature(doc: Mapping[str, Any], name: str) -> str | None:
    value = doc.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_SIGNATURE_CHARS:
        raise McpMalformed(f"{name} must be a base64 string of at most {MAX_SIGNATURE_CHARS}")
    return value


def parse_announce(doc: Any) -> Announce:
    """An Announce message (section 4.1.1). ``timestamp`` is allowed and
    ignored; other unknown top-level fields are ignored too."""
    doc = _object(doc, "an Announce message")
    version = parse_version(doc.get("protocol_version"))
    agent = parse_agent(doc.get("agent"))
    return Announce(
        version, agent, _signature(doc, "signature"), _signature(doc, "rotation_signature")
    )


def parse_query(doc: Any) -> Query:
    """A Query message (section 4.1.2): ``query.capability`` required,
    ``agent_id`` optional (in ``query`` or beside it)."""
    doc = _object(doc, "a Query message")
    version = parse_version(doc.get("protocol_version"))
    query = doc.get("query")
    if not isinstance(query, dict):
        raise McpMalformed('query is required: {"capability": ...}')
    capability = query.get("capability")
    if not isinstance(capability, str) or not capability.strip():
        raise McpMalformed("query.capability is required (a non-empty string)")
    if len(capability) > MAX_CAPABILITY_VALUE:
        raise McpMalformed(f"query.capability is longer than {MAX_CAPABILITY_VALUE} characters")
    raw_id = query.get("agent_id", doc.get("agent_id"))
    agent_id = None if raw_id is None else parse_agent_id(raw_id, "query.agent_id")
    return Query(version, capability.strip(), agent_id)


def signed_bytes(agent: Mapping[str, Any]) -> bytes:
    """The bytes a signature covers: RFC 8785 of the agent object as sent."""
    return canonicalize(agent)
