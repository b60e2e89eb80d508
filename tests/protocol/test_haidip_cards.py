"""HAIDIP / A2A card mapping (protocol/haidip_cards.py): round trips of the
fixture cards through a capability document, the facet tags the filters use,
the A2A translation, and refusals of malformed cards (422, field named)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from ans.governance.manifest import validate_capabilities
from ans.protocol.errors import InvalidCapabilities
from ans.protocol.haidip_card_view import card_of
from ans.protocol.haidip_cards import (
    CARD_FIELD,
    auth_type_of,
    capabilities_from_card,
    card_format,
    with_card,
)
from ans.protocol.haidip_query import discover_parameters, parse_filters, parse_search

CARDS = Path(__file__).resolve().parent.parent / "fixtures" / "cards"


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((CARDS / name).read_text())
    return doc


def manifest(caps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "canonical_id": "cid-1",
        "manifest_uri": "agtp://x.example/agents/a",
        "agent_label": "a",
        "job_description": "A.",
        "trust_tier": 3,
        "behavioral_trust_score": 0.0,
        "governance_zone": "zone:public",
        "org_domain": "x.example",
        "self_asserted": {"source": "haidip", "owner": "me"},
        **extra,
    }


@pytest.mark.parametrize("name", ["translator-001.json", "summarizer-en.json"])
def test_haidip_card_round_trips_verbatim(name: str) -> None:
    card = load(name)
    caps = capabilities_from_card(copy.deepcopy(card))
    validate_capabilities(caps)  # a valid capability document for the registry
    assert caps["id"] == card["id"] and caps[CARD_FIELD]["format"] == "haidip"
    back = card_of(manifest(caps), caps, last_update="2026-01-01T00:00:00Z")
    ans = back.pop("ans")
    assert back == card  # every field as sent, unknown ones included
    assert ans["trust_tier"] == 3 and ans["governed"] is False and ans["card_format"] == "haidip"


def test_facet_tags_carry_language_provider_and_auth() -> None:
    caps = capabilities_from_card(load("translator-001.json"))
    tags = set(caps["tags"])
    assert {"translation", "language", "nlp", "english"} <= tags
    assert {"lang-en", "lang-fr", "lang-es", "provider-exampleai", "auth-api-key"} <= tags
    assert caps["bindings"] == [
        {
            "protocol": "https",
            "endpoint": "https://api.example.com/agents/translator-001",
            "media_types": ["application/json"],
        }
    ]
    assert caps["updated_at"] == "2026-10-01T12:00:00Z"
    summarizer = capabilities_from_card(load("summarizer-en.json"))
    assert "provider-open-summaries-lab" in summarizer["tags"]
    assert [t["name"] for t in summarizer["tools"]] == ["summarize", "key_points"]


@pytest.mark.parametrize("name", ["a2a-currency-agent.json", "a2a-travel-planner.json"])
def test_a2a_card_is_imported_and_rendered_as_haidip(name: str) -> None:
    a2a = load(name)
    assert card_format(a2a) == "a2a"
    caps = capabilities_from_card(a2a)
    validate_capabilities(caps)
    assert caps["id"] == a2a["url"] and caps["name"] == a2a["name"]
    assert caps[CARD_FIELD] == {"format": "a2a", "card": a2a}  # the A2A card kept verbatim
    examples = [e["text"] for e in caps["examples"]]
    assert examples == [ex for s in a2a["skills"] for ex in s.get("examples", [])]
    assert [t["name"] for t in caps["tools"]] == [s["id"] for s in a2a["skills"]]
    assert caps["bindings"][0]["protocol"] == "a2a"
    card = card_of(manifest(caps), caps)
    assert card["id"] == a2a["url"] and card["endpoint"] == a2a["url"]
    assert card["provider"] == a2a["provider"]["organization"]
    assert [op["name"] for op in card["operations"]] == [s["id"] for s in a2a["skills"]]
    assert card["protocols"] == ["a2a"] and card["ans"]["card_format"] == "a2a"
    assert card["version"] == a2a["version"]


def test_a2a_security_schemes_map_to_auth_types() -> None:
    assert capabilities_from_card(load("a2a-currency-agent.json"))["auth"] == {"type": "api-key"}
    travel = capabilities_from_card(load("a2a-travel-planner.json"))
    assert travel["auth"] == {"type": "oauth2"} and "auth-oauth2" in travel["tags"]
    assert "provider-wanderly" in travel["tags"]
    assert {"travel", "flights", "itinerary", "find-flights"} <= set(travel["tags"])


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("API Key", "api-key"),
        ("OAuth2", "oauth2"),
        ("mTLS", "mtls"),
        ("none", "none"),
        (None, "none"),
        ({"type": "http", "scheme": "bearer"}, "oauth2"),
        ({"type": "http", "scheme": "basic"}, "basic"),
        ({"type": "mutualTLS"}, "mtls"),
        ({"type": "openIdConnect"}, "oauth2"),
        ("kerberos", "other"),
    ],
)
def test_auth_types(value: Any, kind: str) -> None:
    assert auth_type_of(value) == kind


def test_agent_without_card_gets_a_built_card() -> None:
    caps = {"tags": ["invoices", "auth-oauth2"], "tools": [{"name": "parse", "description": "P"}]}
    m = manifest(caps, principal_org="Acme", version="3.0")
    del m["self_asserted"]
    m["trust_tier"] = 1
    card = card_of(m, caps, last_update="2026-02-01T00:00:00Z")
    assert card["id"] == "cid-1" and card["name"] == "a" and card["description"] == "A."
    assert card["capabilities"] == ["invoices"]  # facet tags are not capabilities
    assert card["operations"] == [{"name": "parse", "description": "P"}]
    assert card["endpoint"] == "agtp://x.example/agents/a" and card["protocols"] == ["agtp"]
    assert card["provider"] == "Acme" and card["last_update"] == "2026-02-01T00:00:00Z"
    assert card["ans"]["governed"] is True and card["ans"]["trust_tier"] == 1


def test_with_card_lets_the_capability_document_win() -> None:
    card = load("translator-001.json")
    caps = with_card({"name": "Governed Translator", "tags": ["translation"]}, card)
    assert caps["name"] == "Governed Translator" and caps["tags"] == ["translation"]
    assert caps[CARD_FIELD]["card"] == card


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda c: c.pop("endpoint"), "endpoint"),
        (lambda c: c.update(id="has space"), "id"),
        (lambda c: c.update(name=""), "name"),
        (lambda c: c.update(capabilities="translation"), "capabilities"),
        (lambda c: c.update(supported_languages=["english!"]), "supported_languages"),
        (lambda c: c.update(operations=[{"description": "no name"}]), "name"),
        (lambda c: c.update(last_update="yesterday"), "last_update"),
        (lambda c: c.update(tags=["x" * 65]), "tags"),
        (lambda c: c.update(blob="x" * 70_000), "bytes"),
    ],
)
def test_malformed_cards_are_refused_naming_the_field(mutate: Any, field: str) -> None:
    card = load("translator-001.json")
    mutate(card)
    with pytest.raises(InvalidCapabilities) as info:
        capabilities_from_card(card)
    assert field in info.value.message and info.value.status == 422


def test_not_a_card() -> None:
    for doc in ([], "card", {"name": "x"}, {"url": "https://x", "name": "x"}):
        with pytest.raises(InvalidCapabilities):
            capabilities_from_card(doc)


def test_search_filters_become_core_hard_filters() -> None:
    q = parse_search(
        {
            "query": "translate English to Spanish",
            "filters": {
                "capabilities": ["Translation"],
                "supported_language": "es",
                "provider": "ExampleAI",
                "authentication": ["API Key", "none"],
                "protocols": ["https"],
                "certification": "verified",
            },
            "top": 5,
            "skip": 5,
        },
        100,
    )
    params = discover_parameters(q.filters, intent=q.query, limit=q.skip + q.top, tier=3)
    assert params["required_tags"] == ["translation", "lang-es", "provider-exampleai"]
    assert set(params["excluded_tags"]) == {"auth-oauth2", "auth-mtls", "auth-basic", "auth-other"}
    assert params["protocols"] == ["https"] and params["limit"] == 10
    assert params["trust_tier_min"] == 1  # certification is ANS's trust, not the card's claim
    one = discover_parameters(parse_filters({"auth": "mTLS"}), intent=None, limit=1, tier=3)
    assert one["required_tags"] == ["auth-mtls"]
