"""An indexed agent (its manifest and capability document) as a HAIDIP
agent card (draft-cui section 3), as a pure function (:func:`card_of`).

A card kept at ingestion (:data:`~.haidip_cards.CARD_FIELD`) comes back
verbatim (an A2A card translated to HAIDIP fields: skills as operations,
``url`` as id and endpoint, security schemes as authentication); any other
agent's card is built from its manifest and capability document. Either way
the card carries ``ans``: what this ANS vouches for (canonical id, trust
tier, governed, zone, behavioral score); ``certification`` stays the
provider's own claim.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .haidip_cards import (
    A2A,
    CARD_FIELD,
    HAIDIP,
    MAX_LIST,
    MAX_PROTOCOLS,
    auth_type_of,
    dedup,
    provider_name,
)


def a2a_to_haidip(card: Mapping[str, Any]) -> dict[str, Any]:
    """An A2A card's fields as a HAIDIP card (the A2A card is the source)."""
    skills = [s for s in card.get("skills") or [] if isinstance(s, Mapping)]
    tags: list[str] = []
    for s in skills:
        tags.extend(t for t in s.get("tags") or [] if isinstance(t, str))
    default_in = list(card.get("defaultInputModes") or [])
    default_out = list(card.get("defaultOutputModes") or [])
    ops = []
    for s in skills:
        op: dict[str, Any] = {"name": s["id"], "title": s.get("name", s["id"])}
        if s.get("description"):
            op["description"] = s["description"]
        op["inputs"] = {"modes": list(s.get("inputModes") or default_in)}
        op["outputs"] = {"modes": list(s.get("outputModes") or default_out)}
        if s.get("examples"):
            op["examples"] = list(s["examples"])
        ops.append(op)
    schemes = card.get("securitySchemes")
    auth = (
        [auth_type_of(v) for v in schemes.values()]
        if isinstance(schemes, Mapping) and schemes
        else ["none"]
    )
    out: dict[str, Any] = {
        "id": card["url"],
        "name": card["name"],
        "description": card["description"],
        "capabilities": dedup(tags or [str(s["id"]) for s in skills], MAX_LIST),
        "operations": ops,
        "inputs": {"modes": default_in},
        "outputs": {"modes": default_out},
        "endpoint": card["url"],
        "authentication": auth[0] if len(auth) == 1 else auth,
        "tags": dedup(tags, MAX_LIST),
        "protocols": ["a2a"],
    }
    if card.get("version") is not None:
        out["version"] = card["version"]
    provider = provider_name(card.get("provider"))
    if provider is not None:
        out["provider"] = provider
    return out


def _built_card(manifest: Mapping[str, Any], caps: Mapping[str, Any]) -> dict[str, Any]:
    """The card of an agent registered without one: from its manifest and
    capability document (profile fields first, then the manifest's)."""
    raw_tags = caps.get("tags")
    tags = [t for t in raw_tags if isinstance(t, str)] if isinstance(raw_tags, list) else []
    plain = [t for t in tags if not t.startswith(("lang-", "provider-", "auth-"))]
    tools = caps.get("tools")
    if isinstance(tools, list) and tools:
        ops = [
            {"name": t["name"], **({"description": t["description"]} if "description" in t else {})}
            if isinstance(t, Mapping)
            else {"name": str(t)}
            for t in tools
        ]
    else:
        methods = caps.get("supported_methods") or manifest.get("supported_methods") or []
        ops = [{"name": str(m)} for m in methods if isinstance(m, str)]
    bindings = [b for b in caps.get("bindings") or [] if isinstance(b, Mapping)]
    uri = manifest.get("manifest_uri")
    endpoint = bindings[0].get("endpoint") if bindings else uri
    protocols = dedup([str(b.get("protocol", "")) for b in bindings] or ["agtp"], MAX_PROTOCOLS)
    media = caps.get("modalities")
    modes = [m for m in media if isinstance(m, str)] if isinstance(media, list) else []
    auth = caps.get("auth")
    card: dict[str, Any] = {
        "id": caps["id"] if isinstance(caps.get("id"), str) else manifest["canonical_id"],
        "name": caps.get("name", manifest.get("agent_label", "")),
        "description": caps.get("description", manifest.get("job_description", "")),
        "capabilities": plain,
        "operations": ops,
        "inputs": {"modes": modes or ["application/json"]},
        "outputs": {"modes": modes or ["application/json"]},
        "endpoint": endpoint,
        "authentication": auth.get("type", "none") if isinstance(auth, Mapping) else "none",
        "tags": plain,
        "protocols": protocols,
    }
    langs = caps.get("supported_languages")
    if isinstance(langs, list):
        card["supported_languages"] = [x for x in langs if isinstance(x, str)]
    version = caps.get("version", manifest.get("version"))
    if version is not None:
        card["version"] = version
    if manifest.get("principal_org"):
        card["provider"] = manifest["principal_org"]
    if isinstance(caps.get("license"), str):
        card["license"] = caps["license"]
    return card


def card_of(
    manifest: Mapping[str, Any], caps: Mapping[str, Any], *, last_update: str | None = None
) -> dict[str, Any]:
    """The HAIDIP card of an indexed agent: the card it was registered with
    (verbatim; an A2A card as HAIDIP fields), else one built from its
    manifest and capability document; plus ``last_update`` when the card
    has none, and ``ans`` (what this ANS vouches for)."""
    kept = caps.get(CARD_FIELD)
    fmt = kept.get("format") if isinstance(kept, Mapping) else None
    source = kept.get("card") if isinstance(kept, Mapping) else None
    if fmt == HAIDIP and isinstance(source, Mapping):
        card = dict(source)
    elif fmt == A2A and isinstance(source, Mapping):
        card = a2a_to_haidip(source)
    else:
        card = _built_card(manifest, caps)
        fmt = None
    if last_update is not None and "last_update" not in card:
        card["last_update"] = last_update
    card["ans"] = trust_fields(manifest, fmt)
    return card


def trust_fields(manifest: Mapping[str, Any], fmt: str | None = None) -> dict[str, Any]:
    """What the ANS vouches for about an agent (never the card's claims)."""
    out = {
        "canonical_id": manifest.get("canonical_id"),
        "trust_tier": manifest.get("trust_tier"),
        "behavioral_trust_score": manifest.get("behavioral_trust_score"),
        "governed": not isinstance(manifest.get("self_asserted"), Mapping),
        "governance_zone": manifest.get("governance_zone"),
        "org_domain": manifest.get("org_domain"),
    }
    if fmt is not None:
        out["card_format"] = fmt
    return out
