"""The DISCOVER hard gates are stated twice on purpose: the scalar
``first_failed_gate`` (governance.policy; policy, routing and federation use
it) and the registry's vectorized ``gate_mask``. They must agree on every
agent for every query."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from ans.governance.policy import (
    GATE_LIFECYCLE,
    GATE_RESTRICTED,
    ZonePolicy,
    first_failed_gate,
    passes_gates,
)
from ans.protocol.messages import DiscoverParams, Limits, parse_discover_params
from ans.protocol.scope import parse_authority_scope

from ans.config import RankingWeights
from ans.registry import AgentEntry, Registry

ZONES = ("zone:public", "zone:partner", "zone:secret", "zone:finance")
ORGS = ("a.example", "b.example", "c.example")
POLICY = ZonePolicy.of(("zone:secret", "zone:finance"))
SCOPES = ("discovery:query", "discovery:query zone:secret", "discovery:query zone:*")


def _entries(rng: random.Random, n: int) -> list[AgentEntry]:
    return [
        AgentEntry(
            canonical_id=f"agent-{i:04d}",
            lifecycle_state="Active",
            trust_tier=rng.choice((1, 2, 3)),
            behavioral_trust_score=rng.choice((0.0, 0.5, 0.85, 0.9, 1.0, rng.random())),
            governance_zone=rng.choice(ZONES),
            org_domain=rng.choice(ORGS),
            required_scope="agents:invoke",
        )
        for i in range(n)
    ]


def _params(rng: random.Random) -> DiscoverParams:
    raw: dict[str, object] = {"limit": 10}
    if rng.random() < 0.6:
        raw["trust_tier_min"] = rng.choice((1, 2, 3))
    if rng.random() < 0.5:
        raw["behavioral_trust_min"] = rng.choice((0.0, 0.5, 0.85, 0.9, 1.0))
    if rng.random() < 0.4:
        raw["governance_zone"] = rng.choice((*ZONES, "zone:nowhere"))
    if rng.random() < 0.4:
        raw["org_domain"] = rng.choice((*ORGS, "B.EXAMPLE", "nowhere.example"))
    return parse_discover_params(raw, Limits())


@pytest.mark.parametrize("seed", range(8))
def test_scalar_and_vectorized_gates_agree(seed: int) -> None:
    rng = random.Random(seed)
    entries = _entries(rng, 300)
    registry = Registry(RankingWeights())
    registry.put_many(entries)
    for gone in rng.sample(entries, 30):  # freed slots must not pass
        registry.remove(gone.canonical_id)
    indexed = [e for e in entries if e.canonical_id in registry]
    slots = registry.slots_of(e.canonical_id for e in indexed)
    for _ in range(40):
        params = _params(rng)
        scope = parse_authority_scope(rng.choice(SCOPES))
        mask = registry.gate_mask(params, scope, POLICY)
        assert int(mask.sum()) == sum(
            first_failed_gate(e, params, scope, POLICY) is None for e in indexed
        )
        for e, slot in zip(indexed, slots.tolist(), strict=True):
            failed = first_failed_gate(e, params, scope, POLICY)
            assert bool(mask[slot]) == (failed is None), (e, params, failed)
            assert passes_gates(e, params, scope, POLICY) == (failed is None)


def test_first_failed_gate_names_the_gate() -> None:
    params = parse_discover_params({"limit": 10}, Limits())
    scope = parse_authority_scope("discovery:query")
    entry = AgentEntry("x", "Active", 1, 0.9, "zone:secret", "a.example", "s")
    assert first_failed_gate(entry, params, scope, POLICY) == GATE_RESTRICTED
    suspended = replace(entry, lifecycle_state="Suspended")
    assert first_failed_gate(suspended, params, scope, POLICY) == GATE_LIFECYCLE
    assert (
        first_failed_gate(replace(entry, governance_zone="zone:public"), params, scope, POLICY)
        is None
    )
