"""How an announced MCP agent maps onto the registry, and back.

* :func:`canonical_id_of` -- the ANS canonical id of an ``agent_id``:
  ``urn:uuid:<agent_id>`` (RFC 4122 URN). A governance ACTIVATE of a manifest
  with that canonical id is "the same agent": it turns the self-asserted
  record into a governed one.
* :func:`self_asserted_metadata` -- the profile metadata object the
  registrar admits as a self-asserted tier-3 record (``source`` "mcp"): name,
  a description and tags made of the capabilities (what the capability index
  and the relevance gate read), one binding for the transport, and the
  announced agent object itself under ``mcp`` (kept, never interpreted).
* :func:`response_object` -- one Response message (section 4.1.3): the agent
  as announced, ``matched``, and ``registry``: how this ANS holds it
  (``governed``, ``trust_tier``, ``canonical_id``, ``last_seen``,
  ``expires_at``, ``key_id``), so announced and governed agents are never
  confused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ans.governance.audit import rfc3339
from ans.protocol.mcp_messages import McpAgent

from ..profile_metadata import is_self_asserted
from ..store_records import StoredAgent
from .trust_store import McpTrust

SOURCE = "mcp"
CANONICAL_PREFIX = "urn:uuid:"
MAX_DESCRIPTION = 4000
MAX_TAGS = 32
_URI_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")


def canonical_id_of(agent_id: str) -> str:
    return CANONICAL_PREFIX + agent_id.lower()


def agent_id_of(canonical_id: str) -> str | None:
    if canonical_id.startswith(CANONICAL_PREFIX):
        return canonical_id[len(CANONICAL_PREFIX) :]
    return None


def binding_endpoint(transport_type: str, endpoint: str) -> str:
    """The transport as a URI: itself when it is one, else ``type://endpoint``."""
    if _URI_RE.fullmatch(endpoint):
        return endpoint
    return f"{transport_type}://{endpoint.strip()}"


def describe(agent: McpAgent) -> str:
    """A description the capability index can match: the agent's name and
    each capability with its version or description."""
    name = agent.agent_name or "agent " + agent.agent_id[:8]
    parts = [f"{k} ({v})" if v else k for k, v in agent.capabilities]
    text = f"MCP agent {name}" + (": " + "; ".join(parts) if parts else "")
    return text[:MAX_DESCRIPTION]


def self_asserted_metadata(agent: McpAgent, protocol_version: str) -> dict[str, Any]:
    tags = [k.lower() for k, _ in agent.capabilities if len(k) <= 64][:MAX_TAGS]
    return {
        "id": canonical_id_of(agent.agent_id),
        "name": agent.agent_name or "mcp-agent-" + agent.agent_id[:8],
        "description": describe(agent),
        "tags": tags,
        "bindings": [
            {
                "protocol": agent.transport_type,
                "endpoint": binding_endpoint(agent.transport_type, agent.endpoint),
            }
        ],
        "mcp": {"protocol_version": protocol_version, "agent": dict(agent.raw)},
    }


def has_capability(agent: Mapping[str, Any], name: str, version: str | None = None) -> bool:
    """Whether the announced agent object lists capability ``name`` (case-
    insensitive) at ``version`` (exact, or a dotted prefix: "1" matches
    "1.4")."""
    caps = agent.get("capabilities")
    if not isinstance(caps, Mapping):
        return False
    wanted = name.lower()
    for key, value in caps.items():
        if key.lower() != wanted:
            continue
        if version is None:
            return True
        have = str(value)
        return have == version or have.startswith(version + ".")
    return False


def registry_view(trust: McpTrust, stored: StoredAgent | None, ttl: float) -> dict[str, Any]:
    governed = stored is not None and not is_self_asserted(stored.signer_kid)
    tier = int(stored.manifest.get("trust_tier", 3)) if stored is not None else 3
    return {
        "canonical_id": canonical_id_of(trust.agent_id),
        "governed": governed,
        "trust_tier": tier,
        "lifecycle_state": stored.lifecycle_state if stored is not None else None,
        "key_id": trust.key_id,
        "first_seen": _time(trust.first_seen),
        "last_seen": _time(trust.last_seen),
        "expires_at": _time(trust.last_seen + ttl),
    }


def response_object(
    version: str,
    agent: Mapping[str, Any],
    matched: bool,
    registry: Mapping[str, Any],
    **extra: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "protocol_version": version,
        "agent": dict(agent),
        "matched": matched,
        "registry": dict(registry),
    }
    out.update(extra)
    return out


def _time(epoch: float) -> str:
    return str(rfc3339(datetime.fromtimestamp(epoch, UTC)))
