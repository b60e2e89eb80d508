"""The efficient-discovery profile's DISCOVER parameters (issue 25 item 1):
parsing, bounds, the 422 rule for misspelled hard filters, and the names
answered in ``unsupported_filters``."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from ans.protocol.errors import AgtpError, ErrorCode
from ans.protocol.jcs import canonicalize
from ans.protocol.messages import Limits, parse_discover_params
from ans.protocol.profile_params import (
    KNOWN_PARAMETERS,
    MAX_CLIENT_CONTEXT_BYTES,
    MAX_TAGS,
    forwarded_parameters,
    misspelling_of,
    normalize_tag,
)

from ans.text import normalize_tag as index_normalize_tag

LIMITS = Limits()


def parse(p: dict[str, Any]) -> Any:
    return parse_discover_params(p, LIMITS)


def refused(p: dict[str, Any]) -> AgtpError:
    with pytest.raises(AgtpError) as info:
        parse(p)
    assert info.value.status == 422
    return info.value


def test_vector_13_3_lists_the_unknown_constraint() -> None:
    params = parse(
        {
            "query": "find a translation agent",
            "required_tags": ["translation"],
            "constraints": {"unsupported_private_filter": "example"},
        }
    )
    assert params.intent == "find a translation agent"
    assert params.profile.required_tags == ("translation",)
    assert params.profile.unsupported_filters == ("unsupported_private_filter",)


def test_vector_13_2_needs_no_evidence() -> None:
    params = parse({"query": "answer a short factual question", "protocols": ["https"], "limit": 1})
    assert params.intent == "answer a short factual question"
    assert params.profile.protocols == ("https",)
    assert params.limit == 1
    assert params.include_evidence is False
    assert params.profile.detail == "summary"


def test_query_is_an_alias_of_intent() -> None:
    assert parse({"query": "  book   a flight "}).intent == "book a flight"
    assert parse({"intent": "x", "query": " x "}).intent == "x"
    assert refused({"intent": "x", "query": "y"}).code == ErrorCode.INVALID_QUERY
    assert refused({"query": 3}).code == ErrorCode.INVALID_QUERY
    assert refused({"query": "a" * 2001}).code == ErrorCode.INVALID_QUERY
    assert refused({"query": "   "}).code == ErrorCode.INVALID_QUERY
    assert parse({}).intent is None


def test_tags_are_normalized_like_the_index() -> None:
    p = parse(
        {
            "required_tags": ["Invoice Processing", "invoice_processing"],
            "excluded_tags": ["HR"],
            "preferred_tags": ["JSON output"],
        }
    ).profile
    assert p.required_tags == ("invoice-processing",)
    assert p.excluded_tags == ("hr",)
    assert p.preferred_tags == ("json-output",)
    for raw in ("Invoice Processing", "  a__b  ", "Ünïcode tag", "x-y-z"):
        assert normalize_tag(raw) == index_normalize_tag(raw)


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("required_tags", ErrorCode.INVALID_REQUIRED_TAGS),
        ("excluded_tags", ErrorCode.INVALID_EXCLUDED_TAGS),
        ("preferred_tags", ErrorCode.INVALID_PREFERRED_TAGS),
    ],
)
def test_tag_lists_are_bounded(name: str, code: ErrorCode) -> None:
    for bad in ("hr", [1], ["---"], ["x" * 65], [f"t{i}" for i in range(MAX_TAGS + 1)]):
        assert refused({name: bad}).code == code
    parse({name: [f"t{i}" for i in range(MAX_TAGS)]})


def test_a_tag_both_required_and_excluded_is_refused() -> None:
    err = refused({"required_tags": ["HR"], "excluded_tags": ["hr"]})
    assert err.code == ErrorCode.INVALID_EXCLUDED_TAGS


def test_protocols() -> None:
    assert parse({"protocols": ["HTTPS", "agtp", "https"]}).profile.protocols == ("agtp", "https")
    for bad in ("https", [""], ["1tp"], ["a b"], ["p" * 33], [f"p{i}" for i in range(17)]):
        assert refused({"protocols": bad}).code == ErrorCode.INVALID_PROTOCOLS


def test_constraints_applied_and_unsupported() -> None:
    p = parse(
        {
            "constraints": {
                "max_results_age_seconds": 300,
                "region": "APAC",
                "zone": "zone:hr",
                "cost_max": 3,
                "latency_ms": 20,
            }
        }
    )
    assert p.profile.max_results_age_seconds == 300.0
    assert p.profile.regions == ("apac",)
    assert p.governance_zone == "zone:hr"  # constraints.zone is the zone gate
    assert p.profile.unsupported_filters == ("cost_max", "latency_ms")
    assert parse({"constraints": {"region": ["eu", "us"]}}).profile.regions == ("eu", "us")
    for bad in (
        [],
        {"max_results_age_seconds": -1},
        {"max_results_age_seconds": True},
        {"max_results_age_seconds": "300"},
        {"region": ""},
        {"region": []},
        {"region": ["eu", 3]},
        {"zone": "finance"},
        {f"k{i}": 1 for i in range(33)},
    ):
        assert refused({"constraints": bad}).code == ErrorCode.INVALID_CONSTRAINTS, bad
    err = refused({"governance_zone": "zone:a", "constraints": {"zone": "zone:b"}})
    assert err.code == ErrorCode.INVALID_CONSTRAINTS
    assert parse({"governance_zone": "zone:a", "constraints": {"zone": "zone:a"}})


def test_detail() -> None:
    assert parse({}).profile.detail == "summary"
    for level in ("minimal", "summary", "full"):
        assert parse({"detail": level}).profile.detail == level
    for bad in ("Full", 1, None if False else "verbose"):
        assert refused({"detail": bad}).code == ErrorCode.INVALID_DETAIL


def test_client_context_is_bounded_and_kept_as_a_digest() -> None:
    ctx = {"locale": "en-GB", "domain": "hr"}
    p = parse({"client_context": ctx}).profile
    assert p.client_context_digest == hashlib.sha256(canonicalize(ctx)).hexdigest()
    assert "en-GB" not in repr(p)
    assert refused({"client_context": "en"}).code == ErrorCode.INVALID_CLIENT_CONTEXT
    big = {"x": "a" * MAX_CLIENT_CONTEXT_BYTES}
    assert refused({"client_context": big}).code == ErrorCode.INVALID_CLIENT_CONTEXT


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("trust_tier_mn", "trust_tier_min"),
        ("trust-tier-min", "trust_tier_min"),
        ("TrustTierMin", "trust_tier_min"),
        ("behavioural_trust_min", "behavioral_trust_min"),
        ("required_tag", "required_tags"),
        ("requried_tags", "required_tags"),
        ("exclude_tags", "excluded_tags"),
        ("protocol", "protocols"),
        ("constraint", "constraints"),
        ("governance-zone", "governance_zone"),
        ("orgdomain", "org_domain"),
        ("capability_domain", "capability_domains"),
    ],
)
def test_a_misspelled_hard_filter_is_refused(name: str, meant: str) -> None:
    err = refused({name: 1})
    assert err.code == ErrorCode.MISSPELLED_PARAMETER
    assert repr(meant) in err.message


@pytest.mark.parametrize(
    "name", ["max_result_age_seconds", "Max-Results-Age-Seconds", "regoin", "regions", "zones"]
)
def test_a_misspelled_constraint_is_refused(name: str) -> None:
    err = refused({"constraints": {name: 1}})
    assert err.code == ErrorCode.MISSPELLED_PARAMETER


def test_other_unknown_parameters_are_listed_not_refused() -> None:
    p = parse({"include_evidense": True, "detial": "full", "x-vendor-hint": 1, "query": "q"})
    # soft parameters: a typo changes no filter, so the answer says what it ignored
    assert p.profile.unsupported_filters == ("detial", "include_evidense", "x-vendor-hint")
    assert p.include_evidence is False


def test_unknown_names_are_bounded() -> None:
    many = {f"vendor_{i:03d}": 1 for i in range(33)}
    assert refused(many).code == ErrorCode.INVALID_PARAMETERS
    assert refused({"v" * 65: 1}).code == ErrorCode.INVALID_PARAMETERS
    assert refused({"constraints": {"c" * 65: 1}}).code == ErrorCode.INVALID_PARAMETERS


def test_known_names_are_not_misspellings_of_each_other() -> None:
    for name in KNOWN_PARAMETERS:
        meant = misspelling_of(name, ("required_tags", "excluded_tags", "protocols"))
        assert meant in (None, name), (name, meant)


def test_forwarded_parameters() -> None:
    raw = {"query": "q", "client_context": {"a": 1}, "detail": "minimal"}
    assert forwarded_parameters(raw) == {"query": "q"}
    assert forwarded_parameters({"query": "q", "detail": "full"}) == {
        "query": "q",
        "detail": "full",
    }
