"""The efficient-discovery profile in the core (issue 25 items 1, 2, 3, 5), on
AnsService: every request field, the response fields, detail levels,
redaction, expiry, bindings, unknown-field preservation, self-asserted
records, and the profile's response translation. Signatures verified."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from ans.governance.keys import SigningKey, TrustedKeys
from ans.governance.signing import RESULT_SIGNATURE_FIELD, verify_document
from ans.protocol.errors import AgtpError, ErrorCode
from ans.protocol.messages import (
    ActivateRequest,
    DescribeRequest,
    Identity,
    Limits,
    parse_activate,
    parse_discover,
)
from ans.protocol.scope import parse_authority_scope

from ans.client import verify_discover_result
from ans.config import Config
from ans.core.profile_view import candidate, profile_response
from ans.profile_metadata import SELF_ASSERTED_KID, profile_canonical_id
from ans.service import AnsService

T0 = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
GOV = Identity(
    "agtp://gov.example/agents/platform",
    "gov-operator",
    parse_authority_scope("discovery:register"),
)
PUBLISHER = Identity(
    "agtp://pub.example/agents/publisher", "pub-1", parse_authority_scope("discovery:register")
)


def iso(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


HR_CORE_BINDINGS = [
    {
        "protocol": "https",
        "endpoint": "https://agents.example.net/hr-core/invoke",
        "media_types": ["application/json"],
        "interaction_model": "request-response",
        "priority": 2,
        "x-vendor-weight": 7,  # unknown nested field: kept
    },
    {"protocol": "agtp", "endpoint": "agtp://agents.example.net/hr-core", "priority": 1},
]

AGENTS: dict[str, dict[str, Any]] = {
    "hr-core": dict(
        job_description="Optimizes HR workflows, onboarding checks and employee records.",
        caps=dict(
            id="https://agents.example.net/id/hr-core-automator",
            name="HR Core Automator",
            description="Optimizes HR workflows and onboarding checks.",
            tags=["hr", "workflow", "onboarding", "api-automation"],
            examples=[
                {"id": "ex-1", "text": "Prepare a new-employee onboarding workflow."},
                {"id": "ex-2", "text": "Check an employee record for missing payroll fields."},
            ],
            bindings=HR_CORE_BINDINGS,
            auth={"schemes": ["oauth2"], "token_url": "https://auth.example.net/token"},
            constraints={"region": "apac", "cost_class": "low"},
            status="active",
            version="1.0.0",
            updated_at=iso(T0 - timedelta(seconds=100)),
            **{"x-example-extension": {"kept": True}},
        ),
    ),
    "hr-lite": dict(
        trust_tier=2,
        behavioral_trust_score=0.8,
        job_description="Answers payroll and HR policy questions for employees.",
        caps=dict(
            tags=["hr", "payroll"],
            bindings=[{"protocol": "grpc", "endpoint": "grpc://hr-lite.example:443"}],
            constraints={"regions": ["eu"]},
            updated_at=iso(T0 - timedelta(days=10)),
        ),
    ),
    "legal-translator": dict(
        behavioral_trust_score=0.6,
        job_description="Translates legal contracts between German and English.",
        caps=dict(
            tags=["translation", "legal"],
            bindings=[{"protocol": "https", "endpoint": "https://lex.example/translate"}],
        ),
    ),
    "certified-translator": dict(
        behavioral_trust_score=0.5,
        job_description="Certified translation of documents between German and English.",
        caps=dict(
            tags=["translation", "certified"],
            bindings=[{"protocol": "https", "endpoint": "https://cert.example/translate"}],
        ),
    ),
    "plain-agent": dict(
        job_description="Summarizes quarterly financial reports.",
        caps=dict(tags=["finance"]),  # no bindings: the implicit AGTP one
    ),
}


def discover_req(params: dict[str, Any], scope: str = "discovery:query") -> Any:
    headers = {
        "agent-id": "agtp://o.example/agents/orch",
        "principal-id": "usr-1",
        "authority-scope": scope,
    }
    body = orjson.dumps({"method": "DISCOVER", "task_id": "t1", "parameters": params})
    return parse_discover(headers, body, Limits())


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def world(
    make_ans: Any,
    tmp_path: Path,
    clock: Clock,
    make_manifest: Callable[..., dict[str, Any]],
) -> Iterator[dict[str, Any]]:
    cfg = Config(
        data_dir=tmp_path,
        profile_redact=("capabilities.auth", "manifest.principal_org"),
    )
    svc = make_ans(cfg, clock=clock, fixed_ids=True)
    ids: dict[str, str] = {}
    for label, spec in AGENTS.items():
        spec = dict(spec)
        caps = spec.pop("caps")
        manifest = make_manifest(label, **spec)
        svc.activate(ActivateRequest(GOV, f"t-{label}", manifest, caps))
        ids[label] = manifest["canonical_id"]
    yield {"svc": svc, "ids": ids, "cfg": cfg, "clock": clock, "make": make_manifest}


def run(svc: AnsService, **params: Any) -> dict[str, Any]:
    result = svc.discover(discover_req(params))
    verify_discover_result(result, svc.jwks(), params)  # every answer is signed
    return result


def labels(result: dict[str, Any]) -> list[str]:
    return sorted(r["agent_label"] for r in result["results"])


# -- hard filters ------------------------------------------------------------------


def test_required_tags_are_a_hard_filter(world: dict[str, Any]) -> None:
    svc = world["svc"]
    assert labels(run(svc, required_tags=["hr"])) == ["hr-core", "hr-lite"]
    assert labels(run(svc, required_tags=["hr", "payroll"])) == ["hr-lite"]
    assert labels(run(svc, required_tags=["HR", "Onboarding"])) == ["hr-core"]  # normalized
    assert run(svc, required_tags=["no-such-tag"])["results"] == []
    r = run(svc, required_tags=["hr"])
    assert r["total_matches"] == 2
    assert r["applied_filters"] == {"required_tags": ["hr"]}


def test_excluded_tags_are_a_hard_filter(world: dict[str, Any]) -> None:
    svc = world["svc"]
    assert labels(run(svc, excluded_tags=["hr"])) == [
        "certified-translator",
        "legal-translator",
        "plain-agent",
    ]
    assert labels(run(svc, excluded_tags=["hr", "translation"])) == ["plain-agent"]


def test_hard_filters_apply_before_the_relevance_shortlist(world: dict[str, Any]) -> None:
    """With limit 1 the shortlist holds one agent. The legal translator is the
    better match for this intent; with required_tags=["certified"] the
    certified one must still be found: the filter acts with the hard gates,
    before the shortlist, not on what the shortlist kept."""
    svc = world["svc"]
    intent = "translate legal contracts from German to English"
    best = run(svc, intent=intent, limit=1)
    assert [r["agent_label"] for r in best["results"]] == ["legal-translator"]
    got = run(svc, intent=intent, limit=1, required_tags=["certified"])
    assert [r["agent_label"] for r in got["results"]] == ["certified-translator"]
    got = run(svc, intent=intent, limit=1, excluded_tags=["legal"])
    assert [r["agent_label"] for r in got["results"]] == ["certified-translator"]


def test_protocols_filter_on_bindings(world: dict[str, Any]) -> None:
    svc = world["svc"]
    assert labels(run(svc, protocols=["grpc"])) == ["hr-lite"]
    # plain-agent has no declared binding: its implicit AGTP one counts
    assert labels(run(svc, protocols=["agtp"])) == ["hr-core", "plain-agent"]
    assert labels(run(svc, protocols=["HTTPS"])) == [
        "certified-translator",
        "hr-core",
        "legal-translator",
    ]
    r = run(svc, protocols=["grpc", "agtp"])
    assert labels(r) == ["hr-core", "hr-lite", "plain-agent"]
    for item in r["results"]:
        assert item["score_components"]["protocol"] == 1.0


def test_constraints_age_region_zone_and_unsupported(world: dict[str, Any]) -> None:
    svc = world["svc"]
    # hr-lite's metadata is 10 days old; the base manifests are from January
    assert labels(run(svc, constraints={"max_results_age_seconds": 3600})) == ["hr-core"]
    r = run(svc, constraints={"max_results_age_seconds": 30 * 86400})
    assert labels(r) == ["hr-core", "hr-lite"]
    for item in r["results"]:
        assert 0.0 <= item["score_components"]["freshness"] <= 1.0
    assert labels(run(svc, constraints={"region": "APAC"})) == ["hr-core"]
    assert labels(run(svc, constraints={"region": ["eu", "apac"]})) == ["hr-core", "hr-lite"]
    assert run(svc, constraints={"zone": "zone:nowhere"})["results"] == []
    r = run(svc, constraints={"region": "apac", "cost_max": 3, "latency_ms": 5})
    assert labels(r) == ["hr-core"]
    assert r["unsupported_filters"] == ["cost_max", "latency_ms"]
    assert r["applied_filters"] == {"constraints": {"region": ["apac"]}}
    assert any(w["code"] == "unsupported_filter" for w in r["warnings"])


def test_vector_13_3(world: dict[str, Any]) -> None:
    params = {
        "query": "find a translation agent",
        "required_tags": ["translation"],
        "constraints": {"unsupported_private_filter": "example"},
    }
    r = run(world["svc"], **params)
    assert r["results"], "the translators match"
    assert all("translation" in item["tags"] for item in r["results"])
    assert r["unsupported_filters"] == ["unsupported_private_filter"]


def test_vector_13_2_without_evidence(world: dict[str, Any]) -> None:
    r = run(world["svc"], query="translate a legal contract", protocols=["https"], limit=1)
    assert r["returned"] <= 1
    item = r["results"][0]
    assert item["bindings"][0]["protocol"] == "https"
    assert item["status"] == "active"
    assert "matched_examples" not in item  # evidence only when asked
    assert set(item["score_components"]) == {"policy", "protocol"}


def test_unknown_parameters_listed_and_misspelled_filters_refused(world: dict[str, Any]) -> None:
    svc = world["svc"]
    r = run(svc, required_tags=["hr"], x_vendor_hint="a", detial="full")
    assert r["unsupported_filters"] == ["detial", "x_vendor_hint"]
    assert labels(r) == ["hr-core", "hr-lite"]
    for bad in ({"required_tag": ["hr"]}, {"trust_tier_mn": 1}, {"protocol": ["https"]}):
        with pytest.raises(AgtpError) as info:
            svc.discover(discover_req(bad))
        assert info.value.status == 422
        assert info.value.code == ErrorCode.MISSPELLED_PARAMETER


# -- response fields ---------------------------------------------------------------


def test_result_items_carry_the_profile_fields(world: dict[str, Any]) -> None:
    r = run(
        world["svc"],
        required_tags=["onboarding"],
        include_evidence=True,
        intent="prepare an onboarding workflow for a new employee",
    )
    (item,) = r["results"]
    assert item["profile_id"] == "https://agents.example.net/id/hr-core-automator"
    assert item["name"] == "HR Core Automator"
    assert item["governed"] is True
    assert item["redacted"] is False
    # bindings round trip: as declared (unknown fields kept), ordered by priority
    assert item["bindings"] == [HR_CORE_BINDINGS[1], HR_CORE_BINDINGS[0]]
    assert item["freshness"]["updated_at"] == iso(T0 - timedelta(seconds=100))
    assert "age_seconds" not in item["freshness"]  # only when a freshness constraint is asked
    aged = run(
        world["svc"], required_tags=["onboarding"], constraints={"max_results_age_seconds": 600}
    )
    assert aged["results"][0]["freshness"]["age_seconds"] == 100
    assert candidate(item, aged["generated_at"])["freshness"]["age_seconds"] == 100
    assert item["freshness"]["indexed_at"] == iso(T0).replace("Z", "+00:00") or item["freshness"][
        "indexed_at"
    ].startswith("2026-11-21T12:00:00")
    comps = item["score_components"]
    assert {"policy", "tag", "context", "example"} <= set(comps)
    assert "onboarding" in item["matched_tags"]
    assert {"id", "text", "score"} == set(item["matched_examples"][0])
    w = world["svc"].config.ranking
    # rank_score = capability part + policy part
    assert (
        abs(
            item["rank_score"]
            - (w.capability_match * item["capability_match_score"] + comps["policy"])
        )
        <= 2e-6
    )


def test_a_legacy_discover_stays_lean_a_profile_one_gets_the_shape(world: dict[str, Any]) -> None:
    svc = world["svc"]
    legacy = run(svc, intent="translate contracts")["results"][0]
    assert legacy["bindings"]  # declared ones
    assert not {"freshness", "tags", "governed", "redacted", "score_components"} & set(legacy)
    plain = run(svc, intent="summarize quarterly financial reports")["results"][0]
    assert plain["agent_label"] == "plain-agent"
    assert "bindings" not in plain and "status" not in plain  # implicit agtp, active
    shaped = run(svc, query="translate contracts")["results"][0]
    assert {"bindings", "status", "freshness", "governed", "redacted", "score_components"} <= set(
        shaped
    )
    assert "tags" not in shaped  # only with a tag filter (what a federating ANS checks)
    assert "tags" in run(svc, query="translate contracts", excluded_tags=["x"])["results"][0]
    evidence = run(svc, intent="translate contracts", include_evidence=True)["results"][0]
    assert {"policy", "context", "capability"} <= set(evidence["score_components"])


def test_preferred_tags_raise_the_evidence_not_the_trust(world: dict[str, Any]) -> None:
    svc = world["svc"]
    intent = "translate contracts from German to English"
    plain = {i["agent_label"]: i for i in run(svc, query=intent)["results"]}
    pref = {
        i["agent_label"]: i
        for i in run(svc, intent=intent, preferred_tags=["certified"])["results"]
    }
    a, b = plain["certified-translator"], pref["certified-translator"]
    assert b["capability_match_score"] > a["capability_match_score"]
    assert b["score_components"]["preferred_tags"] == pytest.approx(0.15)
    assert b["score_components"]["policy"] == a["score_components"]["policy"]
    assert b["trust_tier"] == a["trust_tier"]
    assert b["behavioral_trust_score"] == a["behavioral_trust_score"]
    other = pref["legal-translator"]
    assert other["score_components"]["preferred_tags"] == 0.0
    assert other["capability_match_score"] == plain["legal-translator"]["capability_match_score"]
    # without an intent the boost is the whole capability evidence
    r = run(svc, preferred_tags=["certified"], required_tags=["translation"])
    assert r["results"][0]["agent_label"] == "certified-translator"


def test_detail_minimal_summary_full_and_redaction(
    world: dict[str, Any], gov_key: SigningKey
) -> None:
    svc = world["svc"]
    summary = run(svc, required_tags=["onboarding"])["results"][0]
    minimal = run(svc, required_tags=["onboarding"], detail="minimal")["results"][0]
    assert set(minimal) <= set(summary)
    assert {"canonical_id", "manifest_uri", "status", "bindings", "rank_score"} <= set(minimal)
    assert "job_description" not in minimal and "tags" not in minimal
    full_r = run(svc, required_tags=["onboarding"], detail="full")
    full = full_r["results"][0]
    assert full["redacted"] is True
    assert full["redacted_fields"] == ["manifest.principal_org", "capabilities.auth"]
    assert "principal_org" not in full["manifest"] and "auth" not in full["capabilities"]
    assert full["capabilities"]["x-example-extension"] == {"kept": True}
    assert full["capabilities"]["constraints"] == {"region": "apac", "cost_class": "low"}
    assert any(w["code"] == "redacted" for w in full_r["warnings"])
    assert full_r["detail"] == "full"


def test_full_detail_without_redaction_is_the_governance_signed_manifest(
    make_ans: Any,
    tmp_path: Path,
    make_manifest: Callable[..., dict[str, Any]],
    gov_key: SigningKey,
) -> None:
    svc = make_ans(Config(data_dir=tmp_path))
    m = make_manifest("plain", job_description="Plain agent for reports.")
    svc.activate(ActivateRequest(GOV, "t", m, {"tags": ["reports"]}))
    item = run(svc, detail="full", trust_tier_min=3)["results"][0]
    assert item["redacted"] is False
    assert item["manifest"] == m
    verify_document(item["manifest"], TrustedKeys([gov_key.public]), "signature")


def test_a_stored_document_no_signature_can_carry_is_left_out_not_a_500(
    world: dict[str, Any], tmp_path: Path
) -> None:
    """A record stored before ANS refused integers beyond 2^53 where they enter
    (RFC 8785 cannot canonicalize them, so no signed answer can carry them):
    detail=full gives that item its summary with a warning, the others their
    documents, all signed; a signed DESCRIBE is 409 naming where; the record
    itself stays as stored."""
    import sqlite3

    svc, ids = world["svc"], world["ids"]
    cid = ids["hr-core"]
    with sqlite3.connect(tmp_path / "registry.sqlite3") as db:  # as an older ANS stored it
        (blob,) = db.execute(
            "SELECT capabilities FROM agents WHERE canonical_id = ?", (cid,)
        ).fetchone()
        caps = {**orjson.loads(blob), "build": {"n": 2**60}}
        db.execute(
            "UPDATE agents SET capabilities = ? WHERE canonical_id = ?",
            (json.dumps(caps).encode(), cid),
        )
    got = run(svc, required_tags=["hr"], detail="full")  # signed and verified
    items = {i["agent_label"]: i for i in got["results"]}
    assert set(items) == {"hr-core", "hr-lite"}
    assert not {"manifest", "capabilities", "redacted_fields"} & set(items["hr-core"])
    assert items["hr-core"]["canonical_id"] == cid and items["hr-core"]["tags"]  # its summary
    assert items["hr-lite"]["capabilities"]["tags"] == ["hr", "payroll"]
    (warning,) = [w for w in got["warnings"] if w["code"] == "full_detail_unavailable"]
    assert "1 result(s)" in warning["message"] and "capabilities.build.n" in warning["message"]
    assert cid in warning["message"]
    assert labels(run(svc, required_tags=["hr"])) == ["hr-core", "hr-lite"]  # summary as before
    asking = discover_req({}).identity
    with pytest.raises(AgtpError) as info:
        svc.describe(DescribeRequest(asking, "d1", cid))
    assert (info.value.status, info.value.code) == (409, ErrorCode.CONFLICT)
    assert "capabilities.build.n" in info.value.message and "re-ACTIVATE" in info.value.message
    # the invocation gateway signs none of it: it still reads the bindings
    unsigned = svc.describe(DescribeRequest(asking, "d2", cid), signed=False)
    assert unsigned["capabilities"]["bindings"] == HR_CORE_BINDINGS
    stored = svc.store.get(cid)
    assert stored is not None and stored.capabilities["build"] == {"n": 2**60}  # nothing lost


# -- metadata: bindings, unknown fields, expiry ----------------------------------------


def test_unknown_fields_preserved_through_describe(world: dict[str, Any]) -> None:
    svc = world["svc"]
    got = svc.describe(DescribeRequest(discover_req({}).identity, "d1", world["ids"]["hr-core"]))
    caps = got["capabilities"]
    assert caps["x-example-extension"] == {"kept": True}
    assert caps["bindings"] == HR_CORE_BINDINGS
    assert caps["auth"]["schemes"] == ["oauth2"]
    assert caps["constraints"]["cost_class"] == "low"


@pytest.mark.parametrize(
    "bad",
    [
        {"bindings": []},
        {"bindings": "https://x"},
        {"bindings": [{"endpoint": "https://x"}]},
        {"bindings": [{"protocol": "HTTPS", "endpoint": "https://x"}]},
        {"bindings": [{"protocol": "https", "endpoint": "no scheme"}]},
        {"bindings": [{"protocol": "https", "endpoint": "https://x", "priority": -1}]},
        {"bindings": [{"protocol": "https", "endpoint": "https://x", "media_types": "json"}]},
        {"bindings": [{"protocol": "https", "endpoint": "https://x"}] * 17},
        {"status": "running"},
        {"expires_at": "tomorrow"},
        {"updated_at": 5},
        {"auth": "oauth"},
        {"constraints": {"region": 3}},
        {"name": ""},
        {"id": "has space"},
    ],
)
def test_malformed_profile_metadata_is_422(world: dict[str, Any], bad: dict[str, Any]) -> None:
    m = world["make"]("bad-agent")
    with pytest.raises(AgtpError) as info:
        world["svc"].activate(ActivateRequest(GOV, "t", m, bad))
    assert info.value.status == 422
    assert info.value.code == ErrorCode.INVALID_CAPABILITIES


def test_expired_records_are_not_served(world: dict[str, Any]) -> None:
    svc, clock, make = world["svc"], world["clock"], world["make"]
    m = make("short-lived", job_description="Translates menus.")
    caps = {"tags": ["translation"], "expires_at": iso(T0 + timedelta(seconds=60))}
    svc.activate(ActivateRequest(GOV, "t", m, caps))
    assert "short-lived" in labels(run(svc, required_tags=["translation"]))
    assert svc.describe(DescribeRequest(discover_req({}).identity, "d", m["canonical_id"]))
    clock.now = T0 + timedelta(seconds=61)
    r = run(svc, required_tags=["translation"])
    assert "short-lived" not in labels(r)
    assert "short-lived" not in labels(run(svc, intent="translate a restaurant menu"))
    assert r["total_matches"] == 2  # not counted either
    with pytest.raises(AgtpError) as info:
        svc.describe(DescribeRequest(discover_req({}).identity, "d", m["canonical_id"]))
    assert (info.value.status, info.value.code) == (410, ErrorCode.METADATA_EXPIRED)
    # a refresh with a later expiry brings it back at once
    m2 = make("short-lived", job_description="Translates menus.", last_updated=iso(clock.now))
    caps2 = {**caps, "expires_at": iso(clock.now + timedelta(hours=1))}
    svc.activate(ActivateRequest(GOV, "t2", m2, caps2))
    assert "short-lived" in labels(run(svc, required_tags=["translation"]))


def test_activate_with_passed_expiry_is_409(world: dict[str, Any]) -> None:
    m = world["make"]("stale-agent")
    caps = {"expires_at": iso(T0 - timedelta(seconds=1))}
    with pytest.raises(AgtpError) as info:
        world["svc"].activate(ActivateRequest(GOV, "t", m, caps))
    assert (info.value.status, info.value.code) == (409, ErrorCode.STALE_METADATA)


def test_filters_survive_a_restart(
    world: dict[str, Any], make_ans: Any, clock: Clock, embedder: Any, gov_key: SigningKey
) -> None:
    """Start-up fills the filter columns on both paths: rebuild from the store,
    and a capability-index snapshot (which does not hold them)."""
    from ans.governance.audit import AuditLog

    from ans.matcher import CapabilityIndex
    from ans.store import SQLiteStore

    svc, cfg = world["svc"], world["cfg"]
    snap = cfg.data_dir / "snap"
    svc.save_snapshot(snap, force=True)
    # changed after the snapshot: start-up must take this, not the snapshot's columns
    spec = dict(AGENTS["hr-lite"])
    caps = {**spec.pop("caps"), "tags": ["hr", "payroll", "benefits"], "updated_at": iso(T0)}
    m = world["make"]("hr-lite", **spec, last_updated=iso(T0))
    svc.activate(ActivateRequest(GOV, "t-again", m, caps))
    svc.audit.close()
    svc.store.close()
    for mode in ("rebuild", "snapshot", "snapshot without columns", "older snapshot"):
        if mode != "rebuild":
            loaded = CapabilityIndex.load(snap, embedder)
            assert loaded is not None
            matcher, meta = loaded
            assert "profile_values" in meta and "profile_col_tags_codes" in meta
            if mode != "snapshot":  # one written before the columns (or before their arrays)
                for key in [k for k in meta if k.startswith("profile_")]:
                    del meta[key]
            if mode == "older snapshot":  # one dict by canonical id, JSON lists
                hr_core = world["ids"]["hr-core"]
                tags = ["api-automation", "from-snapshot", "hr", "onboarding", "workflow"]
                updated = (T0 - timedelta(seconds=100)).timestamp()
                meta["profile_columns"] = {  # the others: no tags, no known age
                    cid: [[], ["https"], [], None, None] for cid in world["ids"].values()
                }
                meta["profile_columns"][hr_core] = [tags, ["https"], ["apac"], None, updated]
            elif mode == "snapshot":  # proof that they are read from the snapshot, not the store
                slot = meta["slot_ids"].index(world["ids"]["hr-core"])
                mark = len(meta["profile_values"]["tags"])
                meta["profile_values"]["tags"].append("from-snapshot")
                lens = meta["profile_col_tags_lens"]
                end = int(lens[: slot + 1].sum())  # hr-core's tags end here: one more
                meta["profile_col_tags_codes"] = np.insert(meta["profile_col_tags_codes"], end, mark)
                lens[slot] += 1
            again = AnsService(
                config=cfg,
                store=SQLiteStore(cfg.data_dir / "registry.sqlite3"),
                matcher=matcher,
                signing_key=SigningKey.load_or_create(cfg.data_dir / "ans-signing-key.pem"),
                governance_keys=TrustedKeys([gov_key.public]),
                audit=AuditLog(cfg.data_dir / "audit.jsonl", clock),
                clock=clock,
            )
            again.load(meta)
            assert again.index_loaded_from == "snapshot"
        else:
            again = make_ans(cfg, clock=clock, load=True)
            assert again.index_loaded_from == "rebuild"
        assert labels(run(again, required_tags=["hr"])) == ["hr-core", "hr-lite"], mode
        assert labels(run(again, required_tags=["benefits"])) == ["hr-lite"], mode
        marked = labels(run(again, required_tags=["from-snapshot"]))
        assert marked == (["hr-core"] if mode in ("snapshot", "older snapshot") else []), mode
        assert labels(run(again, protocols=["grpc"])) == ["hr-lite"], mode
        assert labels(run(again, constraints={"region": "apac"})) == ["hr-core"], mode
        assert labels(run(again, constraints={"max_results_age_seconds": 3600})) == [
            "hr-core",
            "hr-lite",
        ], mode
        again.audit.close()
        again.store.close()


# -- D0 intake and self-asserted records ---------------------------------------------

D0 = {
    "id": "https://example.net/agents/minimal",
    "name": "Minimal Agent",
    "description": "Answers short factual questions.",
    "bindings": [{"protocol": "https", "endpoint": "https://example.net/agent/invoke"}],
}


def test_vector_13_1_inside_a_governed_activate(world: dict[str, Any]) -> None:
    svc = world["svc"]
    m = world["make"]("minimal", job_description="Answers short factual questions.")
    body = orjson.dumps(
        {"method": "ACTIVATE", "parameters": {"manifest": m, "metadata": {**D0, "x-extra": 1}}}
    )
    headers = {
        "agent-id": GOV.agent_id,
        "principal-id": GOV.principal_id,
        "authority-scope": "discovery:register",
    }
    svc.activate(parse_activate(headers, body, Limits()))
    r = run(svc, query="answer a short factual question", protocols=["https"], limit=1)
    (item,) = r["results"]
    assert item["profile_id"] == D0["id"] and item["name"] == "Minimal Agent"
    assert item["bindings"] == D0["bindings"]
    got = svc.describe(DescribeRequest(discover_req({}).identity, "d", m["canonical_id"]))
    assert got["capabilities"]["x-extra"] == 1  # unknown fields kept
    c = candidate(item)
    assert (c["id"], c["name"], c["description"]) == (
        D0["id"],
        "Minimal Agent",
        "Answers short factual questions.",
    )


def test_self_asserted_record_is_tier3_ungoverned_and_excluded_by_default(
    world: dict[str, Any],
) -> None:
    svc = world["svc"]
    out = svc.admit_self_asserted(D0, source="profile", identity=PUBLISHER, task_id="p1")
    cid = profile_canonical_id(D0["id"])
    assert out == {
        **out,
        "canonical_id": cid,
        "governed": False,
        "trust_tier": 3,
        "unchanged": False,
    }
    assert svc.store.get(cid).signer_kid == SELF_ASSERTED_KID
    q = {"query": "answer a short factual question"}
    assert cid not in [i["canonical_id"] for i in run(svc, **q)["results"]]
    got = run(svc, **q, trust_tier_min=3)
    item = next(i for i in got["results"] if i["canonical_id"] == cid)
    assert (item["trust_tier"], item["behavioral_trust_score"], item["governed"]) == (3, 0.0, False)
    assert item["profile_id"] == D0["id"]
    # idempotent; the same owner may update; another principal may not
    again = svc.admit_self_asserted(D0, source="profile", identity=PUBLISHER)
    assert again["unchanged"] is True
    other = Identity("agtp://x/agents/y", "pub-2", parse_authority_scope("discovery:register"))
    with pytest.raises(AgtpError) as info:
        svc.admit_self_asserted(D0, source="profile", identity=other)
    assert (info.value.status, info.value.code) == (409, ErrorCode.CONFLICT)
    # scope
    reader = Identity("agtp://x/agents/y", "pub-1", parse_authority_scope("discovery:query"))
    with pytest.raises(AgtpError) as info:
        svc.admit_self_asserted(D0, source="profile", identity=reader)
    assert info.value.status == 451
    # malformed, or not signable (an integer beyond RFC 8785's range): nothing stored
    for bad in (
        {**D0, "bindings": []},
        {k: v for k, v in D0.items() if k != "name"},
        "x",
        {**D0, "id": "urn:example:big", "zzz": 2**60},
        {**D0, "id": "urn:example:big", "extra": [{"n": -(2**80)}]},
    ):
        with pytest.raises(AgtpError) as info:
            svc.admit_self_asserted(bad, source="profile", identity=PUBLISHER)
        assert info.value.status == 422
    assert svc.store.get(profile_canonical_id("urn:example:big")) is None


def test_self_assertion_never_replaces_a_governed_record(world: dict[str, Any]) -> None:
    svc = world["svc"]
    governed = world["ids"]["plain-agent"]
    with pytest.raises(AgtpError) as info:
        svc.admit_self_asserted({**D0, "id": governed}, source="profile", identity=PUBLISHER)
    assert (info.value.status, info.value.code) == (409, ErrorCode.CONFLICT)
    assert svc.store.get(governed).signer_kid != SELF_ASSERTED_KID


def test_governance_activate_turns_a_self_asserted_record_governed(
    world: dict[str, Any],
) -> None:
    svc = world["svc"]
    cid = svc.admit_self_asserted(D0, source="profile", identity=PUBLISHER)["canonical_id"]
    m = world["make"]("minimal", canonical_id=cid, job_description="Answers factual questions.")
    svc.activate(ActivateRequest(GOV, "g", m, dict(D0)))
    stored = svc.store.get(cid)
    assert stored.signer_kid != SELF_ASSERTED_KID
    item = next(
        i
        for i in run(svc, query="answer a short factual question")["results"]
        if i["canonical_id"] == cid
    )
    assert item["governed"] is True and item["trust_tier"] == 1


def test_self_asserted_records_survive_a_restart(
    world: dict[str, Any], make_ans: Any, clock: Clock
) -> None:
    svc = world["svc"]
    cid = svc.admit_self_asserted(D0, source="profile", identity=PUBLISHER)["canonical_id"]
    svc.audit.close()
    svc.store.close()
    again = make_ans(world["cfg"], clock=clock, load=True)
    assert cid in again.indexed_ids()
    assert cid in [i["canonical_id"] for i in run(again, trust_tier_min=3)["results"]]


# -- client_context, profile response --------------------------------------------------


def test_client_context_is_never_logged_in_clear(
    world: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    svc = world["svc"]
    secret = "locale-zz-SECRET-hint-4711"
    r = run(svc, query="translate contracts", client_context={"hint": secret})
    assert any(w["code"] == "client_context_unused" for w in r["warnings"])
    # a refused request too
    with pytest.raises(AgtpError):
        svc.discover(discover_req({"client_context": {"hint": secret}}, scope="agents:invoke"))
    svc.audit.close()
    audit = (world["cfg"].data_dir / "audit.jsonl").read_text()
    out = capsys.readouterr()
    assert secret not in audit and secret not in out.out and secret not in out.err
    assert secret not in json.dumps(r)


def test_profile_response_is_a_signed_translation(world: dict[str, Any]) -> None:
    svc = world["svc"]
    params = {
        "query": "find a translation agent",
        "required_tags": ["translation"],
        "constraints": {"unsupported_private_filter": "example"},
        "include_evidence": True,
    }
    result = run(svc, **params)
    resp = profile_response(result, svc.key)
    verify_document(resp, TrustedKeys.from_jwks(svc.jwks()), RESULT_SIGNATURE_FIELD)
    assert resp["request_id"] == result["query_id"]
    assert resp["unsupported_filters"] == ["unsupported_private_filter"]
    assert resp["applied_filters"] == {"required_tags": ["translation"]}
    assert all(isinstance(w, str) for w in resp["warnings"])
    assert [c["id"] for c in resp["candidates"]] == [i["canonical_id"] for i in result["results"]]
    for c in resp["candidates"]:
        assert {
            "id",
            "name",
            "description",
            "bindings",
            "status",
            "score",
            "score_components",
            "matched_tags",
            "matched_examples",
            "freshness",
            "redacted",
        } <= set(c)
        assert "metadata_updated_at" in c["freshness"]
    # tampering breaks the signature
    resp["candidates"][0]["score"] = 1.0
    with pytest.raises(AgtpError):
        verify_document(resp, TrustedKeys.from_jwks(svc.jwks()), RESULT_SIGNATURE_FIELD)


def test_client_context_digest_matches(world: dict[str, Any]) -> None:
    ctx = {"locale": "en-GB"}
    req = discover_req({"client_context": ctx})
    digest = hashlib.sha256(b'{"locale":"en-GB"}').hexdigest()
    assert req.params.profile.client_context_digest == digest


def test_a_peer_entry_must_prove_it_passes_the_profile_filters() -> None:
    """A federated entry is kept only when what it carries shows it passes the
    request's profile filters (an older peer that sends no tags fails them)."""
    from ans.governance.profile_metadata import item_filter_failure

    now = T0.timestamp()
    p = discover_req(
        {
            "required_tags": ["translation"],
            "excluded_tags": ["internal"],
            "protocols": ["https"],
            "constraints": {"region": "eu", "max_results_age_seconds": 3600},
        }
    ).params.profile
    ok = {
        "tags": ["translation"],
        "bindings": [{"protocol": "https", "endpoint": "https://x"}],
        "regions": ["eu"],
        "freshness": {"updated_at": iso(T0 - timedelta(seconds=10))},
    }
    assert item_filter_failure(ok, p, now) is None
    broken = [
        {k: v for k, v in ok.items() if k != "tags"},
        {**ok, "tags": ["legal"]},
        {**ok, "tags": ["translation", "internal"]},
        {**ok, "bindings": [{"protocol": "grpc", "endpoint": "grpc://x"}]},
        {k: v for k, v in ok.items() if k != "regions"},
        {**ok, "freshness": {"updated_at": iso(T0 - timedelta(hours=2))}},
        {**ok, "freshness": {}},
    ]
    for item in broken:
        assert item_filter_failure(item, p, now) is not None, item
    expired = {"freshness": {"expires_at": iso(T0 - timedelta(seconds=1))}}
    none = discover_req({}).params.profile
    assert item_filter_failure(expired, none, now) == "expired"
    assert item_filter_failure({}, none, now) is None


def test_import_lines_take_the_metadata_as_activate_does(
    make_manifest: Callable[..., dict[str, Any]], gov_key: SigningKey
) -> None:
    from ans.importer import verify_line

    m = make_manifest("minimal-import")
    line = orjson.dumps({"manifest": m, "metadata": D0, "capabilities": {"tags": ["facts"]}})
    _, caps, _ = verify_line(line, TrustedKeys([gov_key.public]), 1 << 20)
    assert caps == {**D0, "tags": ["facts"]}
    bad = orjson.dumps({"manifest": m, "metadata": {**D0, "bindings": []}})
    with pytest.raises(AgtpError) as info:
        verify_line(bad, TrustedKeys([gov_key.public]), 1 << 20)
    assert info.value.code == ErrorCode.INVALID_CAPABILITIES
