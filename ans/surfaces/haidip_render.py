"""HAIDIP's messages out, as pure functions: one listed agent, one search
result (from a core DISCOVER result item: nothing recomputed), HTTP dates,
and this ANS's own A2A-shaped agent card (``/.well-known/agent-card.json``:
its skills are the surfaces it offers), and the OpenAPI document under the
configured base path.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import format_datetime
from importlib import resources
from typing import Any

from ans.governance.profile_metadata import epoch

from .. import __version__
from ..config import Config
from ..profile_metadata import profile_canonical_id

FACET_PREFIXES = ("lang-", "provider-", "auth-")
A2A_PROTOCOL_VERSION = "0.3.0"
DEFAULT_BASE = "/haidip/v1"  # the paths of ans/openapi/haidip.json
MAX_HOST_CHARS = 256


def _protocols(bindings: Any) -> list[str]:
    out: list[str] = []
    for b in bindings if isinstance(bindings, list) else []:
        p = b.get("protocol") if isinstance(b, Mapping) else None
        if isinstance(p, str) and p not in out:
            out.append(p)
    return out


def _endpoint(bindings: Any, fallback: Any) -> Any:
    for b in bindings if isinstance(bindings, list) else []:
        if isinstance(b, Mapping) and isinstance(b.get("endpoint"), str):
            return b["endpoint"]
    return fallback


def _capabilities(tags: Any) -> list[str]:
    return [t for t in tags or [] if isinstance(t, str) and not t.startswith(FACET_PREFIXES)]


def haidip_id(declared: Any, canonical_id: str) -> str:
    """The id HAIDIP clients name an agent by: its declared id when that id
    leads back to it (``GET {base}/agents/{id}`` maps an id to a canonical id
    as the profile binding does), else its canonical id (a governed agent
    whose card declares another id)."""
    if isinstance(declared, str) and profile_canonical_id(declared) == canonical_id:
        return declared
    return canonical_id


def with_public_id(card: dict[str, Any], canonical_id: str) -> dict[str, Any]:
    """``card`` under its HAIDIP id; a declared id that is not it is kept as
    ``ans.declared_id``."""
    declared = card.get("id")
    public = haidip_id(declared, canonical_id)
    if declared != public:
        card["id"] = public
        card.setdefault("ans", {})["declared_id"] = declared
    return card


def summary(fields: Mapping[str, Any]) -> dict[str, Any]:
    """One agent as a list/search entry: its HAIDIP id, name, description,
    capabilities, endpoint and protocols, and ANS's trust fields."""
    cid = str(fields["canonical_id"])
    fresh = fields.get("freshness")
    out: dict[str, Any] = {
        "id": haidip_id(fields.get("profile_id"), cid),
        "name": fields.get("name", fields.get("agent_label")),
        "description": fields.get("description", fields.get("job_description")),
        "capabilities": _capabilities(fields.get("tags")),
        "endpoint": _endpoint(fields.get("bindings"), fields.get("manifest_uri")),
        "protocols": _protocols(fields.get("bindings")) or ["agtp"],
        "canonical_id": cid,
        "trust_tier": fields.get("trust_tier"),
        "behavioral_trust_score": fields.get("behavioral_trust_score"),
        "governed": fields.get("governed", True),
        "governance_zone": fields.get("governance_zone"),
    }
    if isinstance(fresh, Mapping) and fresh.get("updated_at"):
        out["last_update"] = fresh["updated_at"]
    return out


def search_result(item: Mapping[str, Any], ranked: bool) -> dict[str, Any]:
    """A core DISCOVER result item as a HAIDIP search result: ``score`` is
    the item's ``rank_score`` (relevance gate passed, 0.3/0.4/0.3 formula),
    with ``capability_match_score`` beside it."""
    out = summary(item)
    if ranked:
        out["score"] = item.get("rank_score")
        out["rank"] = item.get("rank")
        out["capability_match_score"] = item.get("capability_match_score")
    for name in ("score_components", "available", "availability_reason", "trust_warning"):
        if name in item:
            out[name] = item[name]
    return out


def http_date(rfc3339: str | None) -> str | None:
    """An RFC 3339 time as an HTTP-date (Last-Modified)."""
    seconds = epoch(rfc3339)
    if seconds is None:
        return None
    return format_datetime(datetime.fromtimestamp(int(seconds), UTC), usegmt=True)


def _skill(sid: str, name: str, description: str, tags: list[str], example: str) -> dict[str, Any]:
    return {
        "id": sid,
        "name": name,
        "description": description,
        "tags": tags,
        "examples": [example],
        "inputModes": ["application/json"],
        "outputModes": ["application/json"],
    }


def own_card(config: Config, base_url: str) -> dict[str, Any]:
    """This ANS as an A2A agent card; ``base_url`` is how the caller reached
    it (scheme and authority)."""
    h = config.haidip
    base = base_url + h.base_path
    skills = [
        _skill(
            "haidip-list",
            "List agents",
            f"GET {h.base_path}/agents: agents the caller may see, paged (top, skip, "
            "cursor), filtered by capability, language, tag, protocol, provider.",
            ["discovery", "haidip", "directory"],
            f"GET {h.base_path}/agents?capability=translation&top=10",
        ),
        _skill(
            "haidip-search",
            "Search agents",
            f"POST {h.base_path}/agents/search: semantic search ranked by relevance "
            "and trust (0.3 tier + 0.4 behavioral + 0.3 capability match), signed.",
            ["discovery", "search", "haidip"],
            '{"query": "summarize an English document", "top": 3}',
        ),
        _skill(
            "haidip-get",
            "Get an agent card",
            f"GET {h.base_path}/agents/{{id}}: the agent's HAIDIP card, signed.",
            ["discovery", "haidip", "agent-card"],
            f"GET {h.base_path}/agents/translator-001",
        ),
        _skill(
            "agtp-discover",
            "AGTP DISCOVER",
            "The AGTP DISCOVER method over HTTP/2 (or POST /agtp): ranked, ES256-signed "
            "Agent Manifest Documents.",
            ["discovery", "agtp"],
            '{"method": "DISCOVER", "parameters": {"intent": "translate a contract"}}',
        ),
    ]
    if h.card_upload:
        skills.append(
            _skill(
                "haidip-register",
                "Register an agent card",
                f"POST {h.base_path}/agents: a HAIDIP or A2A card, admitted as a "
                "self-asserted tier-3 record.",
                ["registration", "haidip", "a2a"],
                '{"id": "translator-001", "name": "...", "endpoint": "https://..."}',
            )
        )
    if config.profile.enabled:
        skills.append(
            _skill(
                "profile-discover",
                "Efficient-discovery profile",
                f"POST {config.profile.base_path}/discover: the efficient-discovery "
                "profile's JSON binding (level D2).",
                ["discovery", "profile"],
                '{"query": "audit a contract", "limit": 5}',
            )
        )
    schemes: dict[str, Any] = {
        "open": {
            "agtpIdentity": {
                "type": "apiKey",
                "in": "header",
                "name": "Agent-ID",
                "description": "Self-asserted Agent-ID, Principal-ID and Authority-Scope headers",
            }
        },
        "token": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
        "mtls": {"mtls": {"type": "mutualTLS"}},
    }[config.auth_mode]
    return {
        "protocolVersion": A2A_PROTOCOL_VERSION,
        "name": config.agent_label,
        "description": "AGTP Agent Name Service: a governed, trust-ranked, signed directory "
        "of AI agents (AGTP DISCOVER, HAIDIP REST, the efficient-discovery profile).",
        "url": base,
        "preferredTransport": "HTTP+JSON",
        "version": __version__,
        "provider": {"organization": config.principal_org, "url": f"https://{config.org_domain}"},
        "capabilities": {"streaming": False, "pushNotifications": False},
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "skills": skills,
        "securitySchemes": schemes,
        "security": [{name: []} for name in schemes],
        "documentationUrl": f"{base}/openapi.json",
    }


def epoch_key(value: str) -> float:
    """Sort key of an RFC 3339 time (0 when it is not one)."""
    return epoch(value) or 0.0


def base_url(scope: Mapping[str, Any], headers: Mapping[str, str]) -> str:
    """scheme://authority the caller used (Host / :authority), else the listener's."""
    scheme = str(scope.get("scheme", "http"))
    host = headers.get("host") or headers.get(":authority")
    if (
        host is None
        or len(host) > MAX_HOST_CHARS
        or not all(c.isalnum() or c in ".-:[]" for c in host)
    ):
        server = scope.get("server")
        host = f"{server[0]}:{server[1]}" if server else "localhost"
    return f"{scheme}://{host}"


def load_openapi() -> bytes:
    """The OpenAPI 3.1 document of this surface (ans/openapi/haidip.json)."""
    return resources.files("ans").joinpath("openapi/haidip.json").read_bytes()


def openapi_document(base: str) -> dict[str, Any]:
    """The document, its paths moved under ``base`` when configured so."""
    doc: dict[str, Any] = json.loads(load_openapi())
    if base != DEFAULT_BASE:
        doc["paths"] = {
            (base + p[len(DEFAULT_BASE) :] if p.startswith(DEFAULT_BASE) else p): v
            for p, v in doc["paths"].items()
        }
    return doc
