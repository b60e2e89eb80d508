"""Routing alternatives (discovery draft 6.1): DISCOVER ``preferred_agent``
on a real AnsService with the real wordllama embedder — the routing
position results[0], routing_reason for every cause, equivalence-based
choice of the alternative, no leak of restricted-zone agents, signatures."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from ans.governance.audit import verify_chain
from ans.governance.keys import SigningKey
from ans.protocol.errors import ERROR_CODES, AgtpError
from ans.protocol.messages import ActivateRequest, Identity, Limits, parse_discover, query_digest
from ans.protocol.scope import parse_authority_scope

from ans.client import verify_discover_result
from ans.config import Config
from ans.core.alternatives import ROUTING_REASONS
from ans.matcher import profile_from
from ans.service import AnsService

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
GOV = Identity(
    "agtp://gov.example/agents/platform",
    "gov-operator",
    parse_authority_scope("discovery:register"),
)
VAULT = "zone:vault"  # restricted


def caps(**kw: Any) -> dict[str, Any]:
    return {"supported_methods": ["QUERY"], "modalities": ["text"], **kw}


AGENTS: dict[str, dict[str, Any]] = {
    # The preferred agent of most tests: the lowest trust, so it is never
    # first by ranking alone.
    "vyper-auditor": dict(
        behavioral_trust_score=0.70,
        job_description="Audits Vyper smart contracts for security vulnerabilities.",
        caps=caps(tags=["smart-contracts", "security-audit"]),
    ),
    # Its natural alternative: same kind of work, middling trust.
    "solidity-auditor": dict(
        behavioral_trust_score=0.80,
        job_description="Audits Solidity smart contracts for reentrancy and overflow bugs.",
        caps=caps(tools=["slither"], tags=["smart-contracts", "security-audit"]),
    ),
    # Unrelated work with the highest trust: first by ranking, never "equivalent".
    "legal-translator": dict(
        behavioral_trust_score=0.99,
        job_description="Translates legal contracts between German and English.",
        caps=caps(tags=["translation", "legal"]),
    ),
    # A restricted-zone agent: invisible without the zone:vault grant.
    "vault-auditor": dict(
        behavioral_trust_score=0.95,
        governance_zone=VAULT,
        job_description="Audits Vyper smart contracts that custody vault assets.",
        caps=caps(tags=["smart-contracts", "security-audit"]),
    ),
}


@pytest.fixture
def world(make_ans: Any,
    tmp_path: Path, embedder: Any, gov_key: SigningKey, make_manifest: Callable[..., dict[str, Any]]
) -> Iterator[dict[str, Any]]:
    svc = make_ans(Config(data_dir=tmp_path, restricted_zones=(VAULT,)), fixed_ids=True)
    ids: dict[str, str] = {}
    for label, spec in AGENTS.items():
        spec = dict(spec)
        capabilities = spec.pop("caps")
        manifest = make_manifest(label, org_domain=f"{label}.example", **spec)
        svc.activate(ActivateRequest(GOV, f"t-{label}", manifest, capabilities))
        ids[label] = manifest["canonical_id"]
    yield {"svc": svc, "ids": ids, "label": {v: k for k, v in ids.items()}}
    svc.audit.close()
    svc.store.close()



def discover(svc: AnsService, scope: str = "discovery:query", **params: Any) -> dict[str, Any]:
    headers = {
        "agent-id": "agtp://o.example/agents/orch",
        "principal-id": "usr-1",
        "authority-scope": scope,
    }
    body = orjson.dumps({"method": "DISCOVER", "task_id": "t1", "parameters": params})
    return svc.discover(parse_discover(headers, body, Limits()))


def labels(result: dict[str, Any]) -> list[str]:
    return [r["agent_label"] for r in result["results"]]


def take_out(svc: AnsService, cid: str, state: str) -> None:
    """What SUSPEND/REVOKE/freshness removal do: store state, then out of the index."""
    stored = svc.store.get(cid)
    assert stored is not None
    svc.store.upsert(replace(stored, lifecycle_state=state))
    with svc.index.lock:
        assert svc.index.remove(cid) is not None


def audit_events(svc: AnsService, event: str) -> list[dict[str, Any]]:
    lines = svc.audit.path.read_bytes().splitlines()
    assert verify_chain(lines) is None
    return [r for r in map(orjson.loads, lines) if r["event"] == event]


# -- the preferred agent is available ----------------------------------------------------


def test_available_preferred_agent_is_first_even_with_a_lower_rank(world: dict[str, Any]) -> None:
    svc, ids = world["svc"], world["ids"]
    plain = labels(discover(svc))
    assert plain[0] == "legal-translator" and plain[-1] == "vyper-auditor"
    got = discover(svc, preferred_agent=ids["vyper-auditor"])
    assert labels(got) == ["vyper-auditor", *[x for x in plain if x != "vyper-auditor"]]
    assert [r["rank"] for r in got["results"]] == [1, 2, 3]
    assert got["routing"] == {"preferred_agent": ids["vyper-auditor"], "available": True}
    assert not any("routing_reason" in r or "alternative_to" in r for r in got["results"])
    assert got["total_matches"] == 3
    # limit counts the routing position; no duplicates
    got = discover(svc, preferred_agent=ids["vyper-auditor"], limit=2)
    assert labels(got) == ["vyper-auditor", "legal-translator"]


def test_available_preferred_agent_below_the_intent_floor_is_still_first(
    world: dict[str, Any],
) -> None:
    svc, ids = world["svc"], world["ids"]
    intent = "translate a contract from German into English"
    plain = discover(svc, intent=intent)
    assert "vyper-auditor" not in labels(plain)
    got = discover(svc, intent=intent, preferred_agent=ids["vyper-auditor"])
    assert labels(got) == ["vyper-auditor", *labels(plain)]
    assert got["total_matches"] == plain["total_matches"] + 1
    first = got["results"][0]
    assert 0.0 <= first["capability_match_score"] < svc.config.min_capability_match


# -- the preferred agent is unavailable: the most equivalent alternative -------------------


def test_at_capacity_gives_the_most_equivalent_alternative(world: dict[str, Any]) -> None:
    svc, ids = world["svc"], world["ids"]
    vyper = ids["vyper-auditor"]
    svc.mark_availability(vyper, "at_capacity")
    got = discover(svc, preferred_agent=vyper)
    first = got["results"][0]
    # The Solidity auditor, not the better-ranked translation agent.
    assert first["agent_label"] == "solidity-auditor"
    assert first["routing_reason"] == "at_capacity"
    assert first["alternative_to"] == vyper
    conf = first["equivalent_confidence"]
    assert isinstance(conf, float) and 0.0 < conf <= 1.0 and round(conf, 6) == conf
    assert conf > svc.config.min_equivalent_confidence
    # The unavailable preferred agent is not returned anywhere.
    assert labels(got) == ["solidity-auditor", "legal-translator"]
    assert "routing_reason" not in got["results"][1]
    assert got["routing"] == {
        "preferred_agent": vyper,
        "available": False,
        "routing_reason": "at_capacity",
        "alternative": ids["solidity-auditor"],
        "equivalent_confidence": conf,
    }
    # Deterministic: the same answer twice.
    again = discover(svc, preferred_agent=vyper)
    assert {**again, "ans_signature": None} == {**got, "ans_signature": None}
    # Available again: routed to the preferred agent itself.
    svc.mark_availability(vyper, None)
    assert labels(discover(svc, preferred_agent=vyper))[0] == "vyper-auditor"


def test_equivalence_is_the_capability_similarity(world: dict[str, Any]) -> None:
    svc, ids = world["svc"], world["ids"]
    stored = svc.store.get(ids["vyper-auditor"])
    assert stored is not None
    eq = svc.matcher.equivalence(profile_from(stored.manifest, stored.capabilities))
    assert set(eq) == set(ids.values())
    assert all(0.0 <= v <= 1.0 for v in eq.values())
    # the index stores int8-coded vectors: a self-match is 1 within their rounding
    assert eq[ids["vyper-auditor"]] == pytest.approx(1.0, abs=1e-3)
    assert eq[ids["solidity-auditor"]] > eq[ids["legal-translator"]] + 0.2
    # The confidence reported is this similarity.
    svc.mark_availability(ids["vyper-auditor"], "not_responding")
    first = discover(svc, preferred_agent=ids["vyper-auditor"])["results"][0]
    assert first["equivalent_confidence"] == eq[ids["solidity-auditor"]]
    assert first["routing_reason"] == "not_responding"


def test_the_alternative_must_match_the_intent(world: dict[str, Any]) -> None:
    svc, ids = world["svc"], world["ids"]
    vyper = ids["vyper-auditor"]
    svc.mark_availability(vyper, "at_capacity")
    intent = "audit smart contracts for security vulnerabilities"
    got = discover(svc, intent=intent, preferred_agent=vyper)
    assert got["results"][0]["agent_label"] == "solidity-auditor"
    # An intent the equivalent agent does not match: no alternative at all,
    # rather than an agent that cannot do what was asked.
    intent = "translate a contract from German into English"
    plain = discover(svc, intent=intent)
    assert "solidity-auditor" not in labels(plain)
    got = discover(svc, intent=intent, preferred_agent=vyper)
    assert got["routing"] == {
        "preferred_agent": vyper,
        "available": False,
        "routing_reason": "at_capacity",
    }
    assert labels(got) == labels(plain)
    assert not any("routing_reason" in r for r in got["results"])


def test_no_alternative_below_the_equivalence_floor(make_ans: Any,
    tmp_path: Path, embedder: Any, gov_key: SigningKey, make_manifest: Callable[..., Any]
) -> None:
    cfg = Config(data_dir=tmp_path, min_equivalent_confidence=0.99)
    svc = make_ans(cfg, fixed_ids=True)
    ids = {}
    for label in ("vyper-auditor", "solidity-auditor"):
        spec = dict(AGENTS[label])
        capabilities = spec.pop("caps")
        m = make_manifest(label, **spec)
        svc.activate(ActivateRequest(GOV, "t", m, capabilities))
        ids[label] = m["canonical_id"]
    svc.mark_availability(ids["vyper-auditor"], "at_capacity")
    got = discover(svc, preferred_agent=ids["vyper-auditor"])
    assert labels(got) == ["solidity-auditor"]
    assert "routing_reason" not in got["results"][0]
    assert "alternative" not in got["routing"] and got["routing"]["routing_reason"] == "at_capacity"
    svc.audit.close()
    svc.store.close()


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("Suspended", "suspended"),
        ("Revoked", "revoked"),
        ("Deprecated", "deprecated"),
        ("Removed", "removed"),
    ],
)
def test_lifecycle_state_out_of_the_index_is_the_reason(
    world: dict[str, Any], state: str, reason: str
) -> None:
    svc, ids = world["svc"], world["ids"]
    vyper = ids["vyper-auditor"]
    take_out(svc, vyper, state)
    got = discover(svc, preferred_agent=vyper)
    first = got["results"][0]
    assert first["agent_label"] == "solidity-auditor"
    assert first["routing_reason"] == reason
    assert got["routing"]["routing_reason"] == reason
    assert got["routing"]["alternative"] == ids["solidity-auditor"]
    assert "vyper-auditor" not in labels(got)


def test_preferred_agent_failing_the_gates_is_below_thresholds(world: dict[str, Any]) -> None:
    svc, ids = world["svc"], world["ids"]
    got = discover(svc, preferred_agent=ids["vyper-auditor"], behavioral_trust_min=0.75)
    assert got["results"][0]["agent_label"] == "solidity-auditor"
    assert got["results"][0]["routing_reason"] == "below_thresholds"
    assert got["routing"]["routing_reason"] == "below_thresholds"
    # The alternative passes the caller's gates too: none left at a higher floor.
    got = discover(svc, preferred_agent=ids["vyper-auditor"], behavioral_trust_min=0.9)
    assert labels(got) == ["legal-translator"]
    assert "routing_reason" not in got["results"][0]
    assert got["routing"]["routing_reason"] == "below_thresholds"
    assert "alternative" not in got["routing"]
    # Unavailable agents are never chosen as alternatives.
    svc.mark_availability(ids["solidity-auditor"], "at_capacity")
    got = discover(svc, preferred_agent=ids["vyper-auditor"], behavioral_trust_min=0.75)
    assert "alternative" not in got["routing"]


# -- unknown and invisible agents ----------------------------------------------------------


def without_query(result: dict[str, Any]) -> dict[str, Any]:
    """The parts of a result that do not depend on the exact parameters sent."""
    out = {k: v for k, v in result.items() if k not in ("query_digest", "ans_signature")}
    out["routing"] = {k: v for k, v in result["routing"].items() if k != "preferred_agent"}
    return out


def test_unknown_preferred_agent_is_not_indexed(world: dict[str, Any]) -> None:
    svc = world["svc"]
    plain = discover(svc)
    got = discover(svc, preferred_agent="no-such-agent")
    assert got["routing"] == {
        "preferred_agent": "no-such-agent",
        "available": False,
        "routing_reason": "not_indexed",
    }
    assert got["results"] == plain["results"]
    assert not any("routing_reason" in r for r in got["results"])


@pytest.mark.parametrize("how", ["indexed", "at_capacity", "suspended"])
def test_restricted_zone_preferred_agent_is_indistinguishable_from_unknown(
    world: dict[str, Any], how: str
) -> None:
    svc, ids = world["svc"], world["ids"]
    vault = ids["vault-auditor"]
    if how == "at_capacity":
        svc.mark_availability(vault, "at_capacity")
    elif how == "suspended":
        take_out(svc, vault, "Suspended")
    unknown = "f" * 64  # same length and alphabet as a real canonical_id
    hidden = discover(svc, preferred_agent=vault)
    assert without_query(hidden) == without_query(discover(svc, preferred_agent=unknown))
    assert hidden["routing"]["routing_reason"] == "not_indexed"
    assert "vault-auditor" not in labels(hidden)
    # With the grant the same agent is routed normally.
    granted = discover(svc, scope=f"discovery:query {VAULT}", preferred_agent=vault)
    if how == "indexed":
        assert granted["results"][0]["agent_label"] == "vault-auditor"
        assert granted["routing"]["available"] is True
    else:
        assert granted["routing"]["routing_reason"] == how
        assert granted["results"][0]["alternative_to"] == vault
    # Only the operator's audit log says what was hidden.
    hidden_records = [
        r for r in audit_events(svc, "routing_fallback") if r["preferred_agent"] == vault
    ]
    assert hidden_records[0]["routing_reason"] == "not_indexed"
    assert hidden_records[0]["restricted_zone_hidden"] is True


def test_routing_fallbacks_are_audited(world: dict[str, Any]) -> None:
    svc, ids = world["svc"], world["ids"]
    svc.mark_availability(ids["vyper-auditor"], "at_capacity")
    got = discover(svc, preferred_agent=ids["vyper-auditor"])
    discover(svc, preferred_agent=ids["solidity-auditor"])  # available: no record
    (rec,) = audit_events(svc, "routing_fallback")
    assert rec["preferred_agent"] == ids["vyper-auditor"]
    assert rec["routing_reason"] == "at_capacity"
    assert rec["alternative"] == ids["solidity-auditor"]
    assert rec["equivalent_confidence"] == got["routing"]["equivalent_confidence"]
    assert rec["agent_id"] == "agtp://o.example/agents/orch"
    assert rec["restricted_zone_hidden"] is False
    assert rec["query_digest"] == got["query_digest"]


# -- signature, digest, parameter validation ------------------------------------------------


def test_routed_result_is_signed_and_bound_to_the_preferred_agent(world: dict[str, Any]) -> None:
    svc, ids = world["svc"], world["ids"]
    svc.mark_availability(ids["vyper-auditor"], "at_capacity")
    params = {"preferred_agent": ids["vyper-auditor"]}
    got = discover(svc, **params)
    assert verify_discover_result(got, svc.jwks(), params) == svc.key.kid
    # The preferred agent is part of the signed query digest.
    assert got["query_digest"] == query_digest(params) != query_digest({})
    # Changing the routing summary or the alternative's fields breaks the signature.
    for tamper in (
        lambda r: r["routing"].update(equivalent_confidence=1.0),
        lambda r: r["results"][0].update(routing_reason="not_indexed"),
    ):
        forged = orjson.loads(orjson.dumps(got))
        tamper(forged)
        with pytest.raises(AgtpError):
            verify_discover_result(forged, svc.jwks(), params)


@pytest.mark.parametrize(
    "value", [42, True, ["abc"], {"id": "abc"}, "", "has space", "x/y", "é", "a" * 257]
)
def test_invalid_preferred_agent_is_422(world: dict[str, Any], value: Any) -> None:
    with pytest.raises(AgtpError) as exc:
        discover(world["svc"], preferred_agent=value)
    assert exc.value.status == 422
    assert exc.value.code == "invalid_preferred_agent"
    assert "invalid_preferred_agent" in ERROR_CODES


def test_routing_reasons_are_a_closed_set(world: dict[str, Any]) -> None:
    assert ROUTING_REASONS == {
        "not_indexed",
        "below_thresholds",
        "suspended",
        "revoked",
        "deprecated",
        "removed",
        "at_capacity",
        "not_responding",
    }


def test_equivalence_floor_is_configured_in_discovery(tmp_path: Path) -> None:
    from ans.config import ConfigError, load

    toml = tmp_path / "ans.toml"
    toml.write_text("[discovery]\nmin_equivalent_confidence = 0.5\n")
    assert load(toml).validate().min_equivalent_confidence == 0.5
    assert Config().min_equivalent_confidence == 0.2
    toml.write_text("[discovery]\nmin_equivalent_confidence = 1.5\n")
    with pytest.raises(ConfigError):
        load(toml).validate()
