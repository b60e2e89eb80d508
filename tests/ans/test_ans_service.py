"""AnsService in-process: ACTIVATE verification, every DISCOVER gate, the
ranking formula, determinism, durability and the audit trail."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from ans.governance.audit import verify_chain
from ans.governance.keys import SigningKey, TrustedKeys
from ans.protocol.errors import AgtpError
from ans.protocol.jcs import canonicalize
from ans.protocol.messages import ActivateRequest, Identity, Limits, parse_discover
from ans.protocol.scope import parse_authority_scope
from joserfc import jws
from joserfc.jwk import ECKey

from ans.config import Config
from ans.service import AnsService

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
GOV = Identity(
    "agtp://gov.example/agents/platform",
    "gov-operator",
    parse_authority_scope("discovery:register"),
)


def caps(**kw: Any) -> dict[str, Any]:
    return {"supported_methods": ["QUERY"], "modalities": ["text"], **kw}


AGENTS: dict[str, dict[str, Any]] = {
    # label: manifest overrides (+ "caps")
    "solidity-auditor": dict(
        trust_tier=1,
        behavioral_trust_score=0.97,
        governance_zone="zone:finance",
        org_domain="audit.example",
        job_description="Audits Solidity smart contracts for reentrancy and overflow bugs.",
        caps=caps(tools=["slither"], tags=["smart-contracts", "security-audit"]),
    ),
    "contract-reviewer": dict(
        trust_tier=2,
        behavioral_trust_score=0.85,
        governance_zone="zone:finance",
        org_domain="review.example",
        job_description="Security review of Ethereum smart contracts and DeFi protocols.",
        caps=caps(tags=["blockchain", "security-audit"]),
    ),
    "fuzzer": dict(
        trust_tier=3,
        behavioral_trust_score=0.95,
        governance_zone="zone:partner",
        org_domain="lab.example",
        job_description="Fuzzes Solidity smart contracts to find reentrancy and invariant bugs.",
        caps=caps(tools=["echidna"]),
    ),
    "legal-translator": dict(
        trust_tier=1,
        behavioral_trust_score=0.93,
        governance_zone="zone:legal",
        org_domain="lex.example",
        job_description="Translates legal contracts between German and English.",
        caps=caps(tags=["translation", "legal"]),
    ),
    "clinical-coder": dict(
        trust_tier=1,
        behavioral_trust_score=0.91,
        governance_zone="zone:healthcare",
        org_domain="med.example",
        job_description="Assigns ICD-10 codes to clinical notes and discharge summaries.",
        caps=caps(tags=["medical-coding"]),
    ),
}


@pytest.fixture
def world(make_ans: Any,
    tmp_path: Path, embedder: Any, gov_key: SigningKey, make_manifest: Callable[..., dict[str, Any]]
) -> Iterator[dict[str, Any]]:
    cfg = Config(data_dir=tmp_path, restricted_zones=("zone:healthcare",))
    svc = make_ans(cfg, fixed_ids=True)
    ids: dict[str, str] = {}
    for label, spec in AGENTS.items():
        spec = dict(spec)
        capabilities = spec.pop("caps")
        manifest = make_manifest(label, **spec)
        svc.activate(ActivateRequest(GOV, f"t-{label}", manifest, capabilities))
        ids[label] = manifest["canonical_id"]
    yield {"svc": svc, "ids": ids, "cfg": cfg, "path": tmp_path}
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


SOLIDITY = "audit Solidity smart contracts for reentrancy"


# -- gates: each test fails if its gate is removed ------------------------------------


def test_default_tiers_exclude_tier3_and_explicit_tier3_includes_it(world: dict[str, Any]) -> None:
    assert "fuzzer" not in labels(discover(world["svc"], intent=SOLIDITY))
    assert "fuzzer" in labels(discover(world["svc"], intent=SOLIDITY, trust_tier_min=3))


def test_trust_tier_min_1_admits_only_verified(world: dict[str, Any]) -> None:
    got = labels(discover(world["svc"], intent=SOLIDITY, trust_tier_min=1))
    assert "solidity-auditor" in got and "contract-reviewer" not in got
    assert "contract-reviewer" in labels(discover(world["svc"], intent=SOLIDITY, trust_tier_min=2))


def test_behavioral_trust_floor(world: dict[str, Any]) -> None:
    got = labels(discover(world["svc"], intent=SOLIDITY, behavioral_trust_min=0.9))
    assert got == ["solidity-auditor"]
    assert "contract-reviewer" in labels(
        discover(world["svc"], intent=SOLIDITY, behavioral_trust_min=0.85)
    )


def test_governance_zone_filter(world: dict[str, Any]) -> None:
    got = discover(world["svc"], intent=SOLIDITY, trust_tier_min=3, governance_zone="zone:partner")
    assert labels(got) == ["fuzzer"]
    assert all(r["governance_zone"] == "zone:partner" for r in got["results"])


def test_org_domain_filter(world: dict[str, Any]) -> None:
    got = discover(world["svc"], intent=SOLIDITY, org_domain="REVIEW.example")
    assert labels(got) == ["contract-reviewer"]


def test_capability_floor_drops_unrelated_agents(world: dict[str, Any]) -> None:
    got = discover(world["svc"], intent=SOLIDITY)
    assert "legal-translator" not in labels(got)
    assert all(
        r["capability_match_score"] >= world["cfg"].relevance.threshold for r in got["results"]
    )
    # without an intent nothing is capability-filtered: ranked on trust alone
    assert "legal-translator" in labels(discover(world["svc"]))


def test_restricted_zone_invisible_without_grant_and_453_when_asked(world: dict[str, Any]) -> None:
    svc = world["svc"]
    assert "clinical-coder" not in labels(discover(svc))
    with pytest.raises(AgtpError) as exc:
        discover(svc, governance_zone="zone:healthcare")
    assert (exc.value.status, exc.value.code) == (453, "zone_violation")
    granted = discover(
        svc, scope="discovery:query zone:healthcare", governance_zone="zone:healthcare"
    )
    assert labels(granted) == ["clinical-coder"]
    assert "clinical-coder" in labels(discover(svc, scope="discovery:query zone:*"))
    audit = (world["path"] / "audit.jsonl").read_text().splitlines()
    assert any(orjson.loads(line)["event"] == "zone_violation" for line in audit)


def test_scope_violation_is_451_and_audited_once(world: dict[str, Any]) -> None:
    before = len((world["path"] / "audit.jsonl").read_text().splitlines())
    with pytest.raises(AgtpError) as exc:
        discover(world["svc"], scope="discovery:register agents:delegate", intent="x")
    assert (exc.value.status, exc.value.code) == (451, "scope_violation")
    lines = (world["path"] / "audit.jsonl").read_text().splitlines()
    assert len(lines) == before + 1
    rec = orjson.loads(lines[-1])
    assert rec["event"] == "scope_violation"
    assert rec["agent_id"] == "agtp://o.example/agents/orch" and rec["principal_id"] == "usr-1"
    assert rec["scope_presented"] == "discovery:register agents:delegate"
    assert rec["scope_required"] == "discovery:query"
    assert rec["task_id"] == "t1" and rec["method"] == "DISCOVER" and rec["time"]
    assert verify_chain(p.encode() for p in lines) is None


@pytest.mark.parametrize("scope", ["discovery:*", "*:query", "*:*"])
def test_wildcards_cover_discovery_query(world: dict[str, Any], scope: str) -> None:
    assert discover(world["svc"], scope=scope, intent=SOLIDITY)["returned"] >= 1


# -- ranking -----------------------------------------------------------------------------------


def test_rank_scores_hand_computed_without_intent(world: dict[str, Any]) -> None:
    # No intent: capability_match_score = 0, so rank = 0.3*tier_norm + 0.4*behavioral.
    got = discover(world["svc"], trust_tier_min=3, limit=10)
    expected = {
        "solidity-auditor": 0.3 * 1.0 + 0.4 * 0.97,  # 0.688
        "legal-translator": 0.3 * 1.0 + 0.4 * 0.93,  # 0.672
        "contract-reviewer": 0.3 * 0.5 + 0.4 * 0.85,  # 0.490
        "fuzzer": 0.3 * 0.0 + 0.4 * 0.95,  # 0.380
    }
    assert labels(got) == list(expected)  # clinical-coder is in a restricted zone
    for r in got["results"]:
        assert r["rank_score"] == pytest.approx(expected[r["agent_label"]], abs=1e-9)
        assert r["capability_match_score"] == 0.0
    assert [r["rank"] for r in got["results"]] == [1, 2, 3, 4]
    assert got["total_matches"] == 4


def test_rank_score_formula_with_intent(world: dict[str, Any]) -> None:
    got = discover(world["svc"], intent=SOLIDITY, trust_tier_min=3)
    tier_norm = {1: 1.0, 2: 0.5, 3: 0.0}
    scores = [r["rank_score"] for r in got["results"]]
    assert scores == sorted(scores, reverse=True)
    for r in got["results"]:
        want = (
            0.3 * tier_norm[r["trust_tier"]]
            + 0.4 * r["behavioral_trust_score"]
            + 0.3 * r["capability_match_score"]
        )
        assert r["rank_score"] == pytest.approx(want, abs=2e-6)
        assert 0.0 <= r["capability_match_score"] <= 1.0
    assert got["results"][0]["agent_label"] == "solidity-auditor"


def test_same_discover_twice_same_ranking(world: dict[str, Any]) -> None:
    a = discover(world["svc"], intent=SOLIDITY, trust_tier_min=3)
    b = discover(world["svc"], intent=SOLIDITY, trust_tier_min=3)
    strip = lambda r: {k: v for k, v in r.items() if k != "ans_signature"}  # noqa: E731
    assert strip(a) == strip(b)


def test_limit_cuts_but_total_matches_counts_all(world: dict[str, Any]) -> None:
    # without an intent every gate-passing agent is a match; limit cuts the answer only
    got = discover(world["svc"], trust_tier_min=3, limit=1)
    assert got["returned"] == 1 and len(got["results"]) == 1
    assert got["total_matches"] >= 3


def test_scope_negotiate_adds_required_scope(world: dict[str, Any]) -> None:
    plain = discover(world["svc"], intent=SOLIDITY)
    assert all("required_scope" not in r for r in plain["results"])
    neg = discover(world["svc"], intent=SOLIDITY, scope_negotiate=True)
    assert neg["results"][0]["required_scope"] == "documents:query"


def test_result_fields_and_signature_verify_with_joserfc(world: dict[str, Any]) -> None:
    svc = world["svc"]
    got = discover(svc, intent=SOLIDITY, trust_tier_min=1)
    top = got["results"][0]
    for field in (
        "rank",
        "manifest_uri",
        "canonical_id",
        "agent_label",
        "org_domain",
        "trust_tier",
        "behavioral_trust_score",
        "supported_methods",
        "capability_match_score",
        "governance_zone",
        "job_description",
    ):
        assert field in top
    assert got["query_id"] == "qry-fixed" and got["generated_at"] == "2026-11-21T12:00:00.000Z"
    sig = got["ans_signature"]
    header_b64, empty, sig_b64 = sig["value"].split(".")
    assert empty == "" and sig["algorithm"] == "ES256" and sig["key_id"] == svc.key.kid
    payload = canonicalize({k: v for k, v in got.items() if k != "ans_signature"})
    token = f"{header_b64}.{base64.urlsafe_b64encode(payload).rstrip(b'=').decode()}.{sig_b64}"
    key = ECKey.import_key(svc.jwks()["keys"][0])
    obj = jws.deserialize_compact(token, key, algorithms=["ES256"])
    assert obj.protected == {"alg": "ES256", "kid": svc.key.kid}
    # changing any byte of the result breaks the signature
    tampered = dict(got, total_matches=got["total_matches"] + 1)
    bad = canonicalize({k: v for k, v in tampered.items() if k != "ans_signature"})
    token2 = f"{header_b64}.{base64.urlsafe_b64encode(bad).rstrip(b'=').decode()}.{sig_b64}"
    with pytest.raises(Exception):
        jws.deserialize_compact(token2, key, algorithms=["ES256"])


def test_behavioral_score_comes_from_the_manifest(
    world: dict[str, Any], make_manifest: Callable[..., dict[str, Any]]
) -> None:
    svc = world["svc"]
    m = make_manifest("honest", behavioral_trust_score=0.61, job_description="Books hotel rooms.")
    svc.activate(ActivateRequest(GOV, "t", m, caps(behavioral_trust_score=0.99, tags=["hotels"])))
    got = discover(svc, intent="book a hotel room")
    entry = next(r for r in got["results"] if r["agent_label"] == "honest")
    assert entry["behavioral_trust_score"] == 0.61


# -- ACTIVATE ------------------------------------------------------------------------------------


def _refused(
    svc: AnsService,
    manifest: dict[str, Any],
    capabilities: dict[str, Any] | None = None,
    identity: Identity = GOV,
) -> AgtpError:
    before = svc.store.count()
    with pytest.raises(AgtpError) as exc:
        svc.activate(ActivateRequest(identity, "t-bad", manifest, capabilities or caps()))
    assert svc.store.count() == before
    return exc.value


def test_activate_refusals(
    world: dict[str, Any], make_manifest: Callable[..., dict[str, Any]]
) -> None:
    svc = world["svc"]
    good = make_manifest("newcomer", job_description="Plans trips to Japan.")
    tampered = dict(good, behavioral_trust_score=0.99)
    assert (_refused(svc, tampered).code, _refused(svc, tampered).status) == (
        "signature_invalid",
        401,
    )
    stranger = make_manifest("newcomer", key=SigningKey.generate())
    assert _refused(svc, stranger).code == "unknown_signing_key"
    suspended = make_manifest("newcomer", lifecycle_state="Suspended")
    err = _refused(svc, suspended)
    assert (err.code, err.status) == ("lifecycle_not_active", 422)
    missing = make_manifest("newcomer")
    del missing["principal_org"]
    err = _refused(svc, missing)
    assert err.code == "manifest_missing_field" and "principal_org" in err.message
    # a document no signed answer could carry (RFC 8785 has no integer beyond 2^53)
    err = _refused(svc, good, capabilities=caps(tools=["slither"], build={"n": 2**60}))
    assert (err.status, err.code) == (422, "invalid_capabilities")
    assert "capabilities.build.n" in err.message
    no_scope = Identity("agtp://x.example/agents/a", "p", parse_authority_scope("discovery:query"))
    err = _refused(svc, good, identity=no_scope)
    assert (err.status, err.code) == (451, "scope_violation")
    assert svc.store.get(good["canonical_id"]) is None
    assert "newcomer" not in labels(discover(svc, intent="plan a trip to Japan", trust_tier_min=3))
    events = [
        orjson.loads(line)["event"]
        for line in (world["path"] / "audit.jsonl").read_text().splitlines()
    ]
    assert events.count("activation_refused") >= 6 and "scope_violation" in events


def test_activate_then_next_discover_finds_it(
    world: dict[str, Any], make_manifest: Callable[..., dict[str, Any]]
) -> None:
    svc = world["svc"]
    m = make_manifest(
        "tokyo-planner", job_description="Plans multi-city trips in Japan with rail passes."
    )
    out = svc.activate(ActivateRequest(GOV, "t", m, caps(tags=["travel"])))
    assert out["canonical_id"] == m["canonical_id"] and out["lifecycle_state"] == "Active"
    assert labels(discover(svc, intent="plan a rail trip across Japan"))[0] == "tokyo-planner"


def test_reactivation_replaces_the_record(
    world: dict[str, Any], make_manifest: Callable[..., dict[str, Any]]
) -> None:
    svc = world["svc"]
    m = make_manifest(
        "legal-translator",
        org_domain="lex.example",
        trust_tier=1,
        behavioral_trust_score=0.5,
        governance_zone="zone:legal",
        job_description="Translates legal contracts between German and English.",
        last_updated="2026-02-01T00:00:00Z",  # newer than the stored registration
    )
    svc.activate(ActivateRequest(GOV, "t", m, caps()))
    got = discover(svc, intent="translate a legal contract into English")
    assert [
        r["behavioral_trust_score"]
        for r in got["results"]
        if r["agent_label"] == "legal-translator"
    ] == [0.5]
    assert svc.store.count() == len(AGENTS)


def restarted(make_ans: Any, world: dict[str, Any]) -> tuple[dict[str, Any], AnsService, int]:
    """The world's answer to SOLIDITY (tiers 1-3), then the service closed and
    started again on its data dir (it replaces the world's): (answer, the new
    service, how many agents it loaded)."""
    svc = world["svc"]
    first = discover(svc, intent=SOLIDITY, trust_tier_min=3)
    svc.audit.close()
    svc.store.close()
    again = make_ans(world["cfg"], fixed_ids=True)
    loaded = again.load()
    world["svc"] = again
    return first, again, loaded


def test_registry_survives_restart(make_ans: Any,
    world: dict[str, Any], embedder: Any, gov_key: SigningKey
) -> None:
    kid = world["svc"].key.kid
    first, again, loaded = restarted(make_ans, world)
    assert loaded == len(AGENTS)
    assert again.key.kid == kid  # the signing key is reused, kid stable
    second = discover(again, intent=SOLIDITY, trust_tier_min=3)
    assert labels(first) == labels(second)
    assert (world["path"] / "ans-signing-key.pem").stat().st_mode & 0o777 == 0o600


def test_a_restart_holds_every_agents_result_fields_and_a_reactivation_replaces_them(
    make_ans: Any, world: dict[str, Any], make_manifest: Callable[..., dict[str, Any]]
) -> None:
    first, again, _ = restarted(make_ans, world)
    ids = list(world["ids"].values())
    cache = again.index.fields_cache
    found, held, missing = cache.lookup(ids)
    assert not found and missing == []  # every one held as stored bytes, none decoded yet
    assert sorted(cid for cid, _ in held) == sorted(ids)
    reads: list[list[str]] = []
    stored = again.store.stored_result_fields

    def counted(canonical_ids: Any) -> dict[str, bytes | None]:
        reads.append(list(canonical_ids))
        return stored(canonical_ids)

    again.store.stored_result_fields = counted  # type: ignore[method-assign]
    second = discover(again, intent=SOLIDITY, trust_tier_min=3)
    assert reads == []  # the answer's fields came from memory, not the store
    assert [{k: v for k, v in r.items() if k != "freshness"} for r in second["results"]] == [
        {k: v for k, v in r.items() if k != "freshness"} for r in first["results"]
    ]
    # A held document is replaced when its agent is ACTIVATEd again.
    m = make_manifest(
        "fuzzer",
        org_domain="lab.example",
        trust_tier=3,
        behavioral_trust_score=0.95,
        governance_zone="zone:partner",
        job_description="Fuzzes Solidity smart contracts to find reentrancy and invariant bugs (Foundry).",
        last_updated="2026-02-01T00:00:00Z",
    )
    again.activate(ActivateRequest(GOV, "t-again", m, caps(tools=["echidna"])))
    third = discover(again, intent=SOLIDITY, trust_tier_min=3)
    assert [
        r["job_description"] for r in third["results"] if r["agent_label"] == "fuzzer"
    ] == ["Fuzzes Solidity smart contracts to find reentrancy and invariant bugs (Foundry)."]


def test_capability_domains_restrict_matching(
    world: dict[str, Any], make_manifest: Callable[..., dict[str, Any]]
) -> None:
    svc = world["svc"]
    m = make_manifest(
        "generalist", job_description="General back-office assistant for small teams."
    )
    svc.activate(
        ActivateRequest(GOV, "t", m, caps(tools=["slither", "mythril", "solidity-compiler"]))
    )
    intent = "slither mythril solidity compiler"
    with_tools = {
        r["agent_label"]: r["capability_match_score"]
        for r in discover(svc, intent=intent, capability_domains=["tools"])["results"]
    }
    without = {
        r["agent_label"]: r["capability_match_score"]
        for r in discover(svc, intent=intent, capability_domains=["modalities"])["results"]
    }
    assert "generalist" in with_tools
    assert without.get("generalist", 0.0) < with_tools["generalist"]


def test_describe_returns_own_signed_manifest(world: dict[str, Any]) -> None:
    from ans.governance.signing import verify_document
    from ans.protocol.messages import DescribeRequest

    svc = world["svc"]
    doc = svc.describe(DescribeRequest(None, None, None))
    assert doc["public_key"] == svc.jwks()["keys"][0]
    assert verify_document(doc, TrustedKeys.from_jwks(svc.jwks()), "signature") == svc.key.kid
    assert doc["lifecycle_state"] == "Active" and "DISCOVER" in doc["supported_methods"]


def test_config_is_validated() -> None:
    from ans.config import ConfigError

    with pytest.raises(ConfigError):
        replace(Config(), max_limit=0).validate()
    with pytest.raises(ConfigError):
        replace(Config(), listen="nonsense").validate()


def test_config_file_loading(tmp_path: Path) -> None:
    from ans.config import ConfigError, load

    example = Path(__file__).resolve().parents[2] / "deploy" / "ans.example.toml"
    cfg = load(example, listen="127.0.0.1:0")
    assert cfg.listen == "127.0.0.1:0" and cfg.restricted_zones == ("zone:finance", "zone:hr")
    assert cfg.public_zones == ("zone:public",) and cfg.lifecycle_max_age == 86400
    assert cfg.governance_jwks == (example.parent / "governance.jwks.json",)
    bad = tmp_path / "bad.toml"
    for text in (
        "[server]\nlisten = 5\n",
        "[server]\nbogus = 1\n",
        "[nowhere]\nx = 1\n",
        "[ranking]\ntrust_tier = 0.9\n",
        '[discovery]\nmax_limit = "many"\n',
        "not toml [",
    ):
        bad.write_text(text)
        with pytest.raises(ConfigError):
            load(bad)


def test_lifecycle_gate_excludes_non_active_entries(world: dict[str, Any]) -> None:
    from ans.governance.policy import passes_gates
    from ans.protocol.messages import parse_discover_params

    svc = world["svc"]
    entry = svc.index.registry[world["ids"]["solidity-auditor"]]
    params = parse_discover_params({}, Limits())
    scope = parse_authority_scope("discovery:query")
    assert passes_gates(entry, params, scope, svc.zones)
    assert not passes_gates(replace(entry, lifecycle_state="Suspended"), params, scope, svc.zones)


def test_warm_builds_the_slot_link_the_first_discover_would_build(
    world: dict[str, Any],
) -> None:
    # ans serve --workers warms before the fork: built in each worker, the link
    # cost the first DISCOVER ~1 s at 1M agents and unshared most of the heap.
    svc = world["svc"]
    registry = svc.index.registry
    assert registry._link_token is None  # nothing has asked yet
    svc.discovery.warm()
    link = registry._link
    assert registry._link_token is not None and len(link) >= len(world["ids"])
    before = labels(discover(svc, intent="translate legal contracts", limit=5))
    assert registry._link is link  # the DISCOVER used the warm link as it was
    assert before == labels(discover(svc, intent="translate legal contracts", limit=5))
