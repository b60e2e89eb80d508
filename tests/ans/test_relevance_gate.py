"""The relevance gate (ans.relevance): what counts as a match, before trust orders it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from ans.governance.keys import SigningKey
from ans.protocol.messages import ActivateRequest, Identity, Limits, parse_discover
from ans.protocol.scope import parse_authority_scope

from ans.client import verify_discover_result
from ans.config import Config, ConfigError
from ans.demo import activate_demo, load_catalog
from ans.relevance import FITTED, RelevanceGate, part_features, whole_features
from ans.wiring import build_service

README_SOLIDITY = (
    "Audit Solidity smart contracts for reentrancy, overflow, and access control misconfiguration"
)
# The demo catalog's smart-contract agents (their descriptions are about contracts on a chain).
SMART_CONTRACT_AGENTS = {
    "solidity-auditor",
    "vyper-auditor",
    "contract-fuzzer",
    "defi-risk-scanner",
    "smart-contract-reviewer",
    "audit-report-writer",
}
GOV = Identity(
    "agtp://gov.example/agents/platform", "ops", parse_authority_scope("discovery:register")
)


def discover(service: Any, **params: Any) -> dict[str, Any]:
    headers = {
        "agent-id": "agtp://o.example/agents/orch",
        "principal-id": "usr-1",
        "authority-scope": "discovery:query",
    }
    body = orjson.dumps({"method": "DISCOVER", "task_id": "t1", "parameters": params})
    result: dict[str, Any] = service.discover(parse_discover(headers, body, Limits()))
    return result


def labels(result: dict[str, Any]) -> list[str]:
    return [r["agent_label"] for r in result["results"]]


@pytest.fixture
def demo(tmp_path: Path, embedder: Any) -> Iterator[Any]:
    built = build_service(Config(data_dir=tmp_path / "demo", demo=True), embedder=embedder)
    assert built.demo_key is not None
    activate_demo(built.service, built.demo_key)
    yield built.service
    built.service.store.close()
    if built.lock is not None:
        built.lock.release()


def test_demo_catalog_names_the_smart_contract_agents() -> None:
    catalog = {e["agent_label"]: e for e in load_catalog()}
    for label in SMART_CONTRACT_AGENTS:
        text = orjson.dumps(catalog[label]).decode().lower()
        assert "contract" in text or "solidity" in text, label


@pytest.mark.parametrize(("tier_min", "limit"), [(None, 10), (3, 5), (3, 10), (1, 10)])
def test_readme_solidity_query_returns_only_smart_contract_agents(
    demo: Any, tier_min: int | None, limit: int
) -> None:
    params: dict[str, Any] = {"intent": README_SOLIDITY, "limit": limit}
    if tier_min is not None:
        params["trust_tier_min"] = tier_min
    got = discover(demo, **params)
    found = labels(got)
    assert found, "the gate must not leave a capable catalog without an answer"
    assert set(found) <= SMART_CONTRACT_AGENTS, found
    assert "solidity-auditor" in found
    assert got["total_matches"] == len(found) or got["total_matches"] > limit
    assert got["relevance"]["gate"] == "calibrated"
    assert all(
        r["capability_match_score"] >= got["relevance"]["min_capability_match_score"]
        for r in got["results"]
    )


def test_before_the_gate_unrelated_trusted_agents_crowded_in(tmp_path: Path, embedder: Any) -> None:
    """The defect the gate fixes, kept visible: the floor gate admits unrelated agents."""
    cfg = Config(data_dir=tmp_path / "floor", demo=True, relevance_gate="floor")
    built = build_service(cfg, embedder=embedder)
    assert built.demo_key is not None
    activate_demo(built.service, built.demo_key)
    try:
        got = discover(built.service, intent=README_SOLIDITY, trust_tier_min=3, limit=10)
        assert not set(labels(got)) <= SMART_CONTRACT_AGENTS
        assert got["relevance"] == {"gate": "floor", "min_capability_match_score": 0.05}
    finally:
        built.service.store.close()
        if built.lock is not None:
            built.lock.release()


def _service(tmp_path: Path, embedder: Any, gov_key: SigningKey, **cfg: Any) -> Any:
    jwks = tmp_path / "gov.jwks.json"
    jwks.write_text(orjson.dumps({"keys": [gov_key.public.jwk()]}).decode())
    config = Config(data_dir=tmp_path / "data", governance_jwks=(jwks,), **cfg)
    built = build_service(config, embedder=embedder)
    return built


def _activate(service: Any, make_manifest: Any, label: str, **spec: Any) -> str:
    caps = spec.pop("caps", {"supported_methods": ["QUERY"]})
    manifest = make_manifest(label, **spec)
    service.activate(ActivateRequest(GOV, f"t-{label}", manifest, caps))
    return str(manifest["canonical_id"])


@pytest.fixture
def small(tmp_path: Path, embedder: Any, gov_key: SigningKey, make_manifest: Any) -> Iterator[Any]:
    built = _service(tmp_path, embedder, gov_key)
    svc = built.service
    _activate(
        svc,
        make_manifest,
        "k8s-doctor",
        trust_tier=2,
        behavioral_trust_score=0.6,
        job_description="Diagnoses failing Kubernetes pods, crash loops and broken deployments.",
    )
    _activate(
        svc,
        make_manifest,
        "perfect-poet",
        trust_tier=1,
        behavioral_trust_score=1.0,
        job_description="Writes rhyming poems and song lyrics for birthdays and weddings.",
    )
    _activate(
        svc,
        make_manifest,
        "tax-helper",
        trust_tier=1,
        behavioral_trust_score=1.0,
        job_description="Prepares personal income tax returns and explains deductions.",
    )
    yield svc
    svc.store.close()
    if built.lock is not None:
        built.lock.release()


def test_perfect_trust_unrelated_agent_never_outranks_a_capable_one(small: Any) -> None:
    got = discover(small, intent="my kubernetes pod is stuck in a crash loop, find out why")
    assert labels(got) == ["k8s-doctor"]
    assert got["total_matches"] == 1


def test_weakly_matched_but_only_relevant_agent_is_still_returned(small: Any) -> None:
    # Few words in common with its description, and a modest fused score: still the only match.
    got = discover(small, intent="help with containers that keep restarting on the cluster")
    assert labels(got)[:1] == ["k8s-doctor"]
    assert "perfect-poet" not in labels(got)
    components = discover(
        small,
        intent="help with containers that keep restarting on the cluster",
        include_evidence=True,
    )["results"][0]["score_components"]
    assert components["fused"] < 0.5  # weakly matched on the raw evidence


def test_without_intent_every_gate_passing_agent_is_ranked_on_trust(small: Any) -> None:
    got = discover(small)
    assert set(labels(got)) == {"k8s-doctor", "perfect-poet", "tax-helper"}
    assert "relevance" not in got
    assert all(r["capability_match_score"] == 0.0 for r in got["results"])


def test_relevant_runner_up_is_not_gated_out_by_a_star(
    tmp_path: Path, embedder: Any, gov_key: SigningKey, make_manifest: Any
) -> None:
    built = _service(tmp_path, embedder, gov_key)
    svc = built.service
    try:
        for label, text, tags in (
            (
                "solidity-auditor",
                "Audits Solidity smart contracts for reentrancy and overflow bugs.",
                ["smart-contracts", "security-audit"],
            ),
            (
                "contract-reviewer",
                "Security review of Ethereum and Solidity smart contracts and DeFi protocols.",
                ["blockchain", "security-audit"],
            ),
            (
                "legal-translator",
                "Translates legal contracts between German and English.",
                ["translation", "legal"],
            ),
        ):
            caps = {"supported_methods": ["QUERY"], "tags": tags}
            _activate(svc, make_manifest, label, job_description=text, caps=caps)
        got = discover(
            svc, intent="audit Solidity smart contracts for reentrancy", include_evidence=True
        )
        assert set(labels(got)) == {"solidity-auditor", "contract-reviewer"}
        reviewer = next(r for r in got["results"] if r["agent_label"] == "contract-reviewer")
        star = next(r for r in got["results"] if r["agent_label"] == "solidity-auditor")
        # far behind the star on the evidence, yet capable on its own
        assert star["score_components"]["fused"] - reviewer["score_components"]["fused"] > 0.3
        assert reviewer["capability_match_score"] >= svc.relevance.min_relevance
    finally:
        svc.store.close()
        if built.lock is not None:
            built.lock.release()


def test_gate_is_deterministic_and_signed(demo: Any) -> None:
    a = discover(demo, intent=README_SOLIDITY)
    b = discover(demo, intent=README_SOLIDITY)
    strip = ("query_id", "generated_at", "ans_signature")
    assert {k: v for k, v in a.items() if k not in strip} == {
        k: v for k, v in b.items() if k not in strip
    }
    params = {"intent": README_SOLIDITY}
    verify_discover_result(a, demo.jwks(), params)
    tampered = {**a, "relevance": {**a["relevance"], "min_capability_match_score": 0.0}}
    with pytest.raises(Exception):
        verify_discover_result(tampered, demo.jwks(), params)


def test_replicas_of_one_agent_all_stay_matches(
    tmp_path: Path, embedder: Any, gov_key: SigningKey, make_manifest: Any
) -> None:
    """No rank feature: twenty agents with one description are all matches, not just a few."""
    built = _service(tmp_path, embedder, gov_key)
    svc = built.service
    try:
        text = "Converts currencies at the daily exchange rate."
        for i in range(20):
            _activate(svc, make_manifest, f"fx-{i}", job_description=text)
        _activate(svc, make_manifest, "gardener", job_description="Plans vegetable gardens.")
        got = discover(svc, intent="convert 100 euros to dollars at today's rate", limit=50)
        assert got["total_matches"] == 20
        assert "gardener" not in labels(got)
        # the shortlist (3 at limit 5) keeps every replica: within near_best of the best
        few = discover(svc, intent="convert 100 euros to dollars at today's rate", limit=5)
        assert few["relevance"]["shortlist_size"] == 3
        assert few["returned"] == 5 and few["total_matches"] == 20
    finally:
        svc.store.close()
        if built.lock is not None:
            built.lock.release()


def test_calibration_features_and_scores() -> None:
    final = np.array([0.6, 0.3, 0.0])
    comps = [np.array([0.8, 0.4, 0.0])] * 3
    x = whole_features(final, comps)
    assert x.shape == (3, 4 + 2 * 3)
    assert x[0, 2] == 0.0 and x[1, 2] == pytest.approx(0.3)  # margin to the best
    assert x[1, 3] == pytest.approx(0.5)  # ratio to the best
    assert part_features(final).shape == (3, 4)
    assert len(FITTED.whole) == 10 and len(FITTED.part) == 4
    gate = RelevanceGate()
    assert gate.admits(gate.min_relevance) and not gate.admits(gate.min_relevance - 1e-6)


def test_shortlist_keeps_the_most_relevant_ties_and_strong_matches() -> None:
    gate = RelevanceGate(shortlist=0.5, strong_match=0.35, near_best=0.95)  # explicit
    assert gate.shortlist_size(10) == 5 and gate.shortlist_size(1) == 1
    assert gate.shortlist_size(3) == 2
    cms = np.array([0.9, 0.5, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05])
    fused = np.array([0.6, 0.3, 0.3, 0.2, 0.2, 0.1, 0.1, 0.05])
    # limit 4: the 2 best by capability_match_score, plus the tie for second place
    assert gate.shortlisted(cms, fused, 4).tolist() == [1, 1, 1, 0, 0, 0, 0, 0]
    # a strong match (fused >= strong_match) stays whatever its place
    strong = fused.copy()
    strong[6] = 0.4
    assert gate.shortlisted(cms, strong, 4).tolist() == [1, 1, 1, 0, 0, 0, 1, 0]
    # near the best fused score: a replica of the star stays
    near = fused.copy()
    near[7] = 0.58
    assert gate.shortlisted(cms, near, 4)[7]
    # a merged set (no fused scores): the shortlist alone
    assert gate.shortlisted(cms, None, 4).tolist() == [1, 1, 1, 0, 0, 0, 0, 0]
    # fewer candidates than the shortlist, or no shortlist: all stay
    assert gate.shortlisted(cms[:3], fused[:3], 10).all()
    assert RelevanceGate(shortlist=0).shortlisted(cms, fused, 1).all()
    assert RelevanceGate(kind="floor").shortlist_size(10) is None


def test_config_validates_the_gate() -> None:
    with pytest.raises(ConfigError):
        Config(relevance_gate="fuzzy").validate()
    with pytest.raises(ConfigError):
        Config(min_relevance=1.5).validate()
    assert Config(min_relevance=0.2).relevance.min_relevance == 0.2


def test_routing_preferred_agent_outside_the_match_set_keeps_a_calibrated_score(
    small: Any,
) -> None:
    ids = {r["agent_label"]: r["canonical_id"] for r in discover(small)["results"]}
    got = discover(
        small,
        intent="my kubernetes pod is stuck in a crash loop, find out why",
        preferred_agent=ids["perfect-poet"],
    )
    assert labels(got)[0] == "perfect-poet"  # the routing position
    assert (
        got["results"][0]["capability_match_score"] < got["relevance"]["min_capability_match_score"]
    )
    assert "tax-helper" not in labels(got)
