"""Zones on a real AnsService: public/restricted/unlisted configuration, the
zone-token grant, 453 Zone Violation, and no leak of restricted agents."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from ans.governance.audit import AuditLog
from ans.governance.keys import SigningKey, TrustedKeys
from ans.protocol.errors import AgtpError
from ans.protocol.messages import ActivateRequest, DescribeRequest, Identity, Limits, parse_discover
from ans.protocol.scope import parse_authority_scope

from ans.config import Config, ConfigError, load
from ans.matcher import CapabilityIndex
from ans.service import AnsService
from ans.store import SQLiteStore

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
GOV = Identity("agtp://gov.example/agents/p", "op", parse_authority_scope("discovery:register"))
JOB = "Reconciles invoices against purchase orders and flags mismatches."
ZONES = ["zone:public", "zone:finance", "zone:hr", "zone:secret"]


@pytest.fixture
def svc(
    tmp_path: Path, embedder: Any, gov_key: SigningKey, make_manifest: Callable[..., Any]
) -> Iterator[AnsService]:
    # zone:public is listed public, zone:finance restricted; zone:hr and
    # zone:secret are unlisted and therefore restricted too.
    cfg = Config(
        data_dir=tmp_path,
        restricted_zones=("zone:finance",),
        public_zones=("zone:public",),
        unlisted_zones="restricted",
    )
    service = AnsService(
        config=cfg,
        store=SQLiteStore(tmp_path / "r.sqlite3"),
        matcher=CapabilityIndex(embedder),
        signing_key=SigningKey.generate(),
        governance_keys=TrustedKeys([gov_key.public]),
        audit=AuditLog(tmp_path / "audit.jsonl", lambda: NOW),
        clock=lambda: NOW,
    )
    for zone in ZONES:
        label = f"reconciler-{zone.split(':')[1]}"
        m = make_manifest(label, governance_zone=zone, job_description=JOB)
        service.activate(ActivateRequest(GOV, "t", m, {"supported_methods": ["QUERY"]}))
    yield service
    service.audit.close()
    service.store.close()


def ask(svc: AnsService, scope: str, **params: Any) -> dict[str, Any]:
    headers = {"agent-id": "agtp://o.example/agents/o", "principal-id": "u", "authority-scope": scope}
    body = orjson.dumps({"method": "DISCOVER", "parameters": {"intent": JOB, **params}})
    return svc.discover(parse_discover(headers, body, Limits()))


def zones_of(result: dict[str, Any]) -> set[str]:
    return {r["governance_zone"] for r in result["results"]}


@pytest.mark.parametrize(
    ("scope", "visible"),
    [
        ("discovery:query", {"zone:public"}),
        ("discovery:query zone:finance", {"zone:public", "zone:finance"}),
        ("discovery:query zone:hr", {"zone:public", "zone:hr"}),
        ("discovery:query zone:*", set(ZONES)),
        ("discovery:*", {"zone:public"}),  # a discovery wildcard is no zone grant
    ],
)
def test_visibility_follows_the_zone_grant(svc: AnsService, scope: str, visible: set[str]) -> None:
    result = ask(svc, scope)
    assert zones_of(result) == visible
    assert result["total_matches"] == len(visible)  # counts leak nothing either


@pytest.mark.parametrize("zone", ["zone:finance", "zone:hr"])
def test_asking_for_a_restricted_zone_without_grant_is_453_and_audited(
    svc: AnsService, tmp_path: Path, zone: str
) -> None:
    with pytest.raises(AgtpError) as info:
        ask(svc, "discovery:query zone:other", governance_zone=zone)
    assert (info.value.status, info.value.code) == (453, "zone_violation")
    last = orjson.loads((tmp_path / "audit.jsonl").read_bytes().splitlines()[-1])
    assert (last["event"], last["status"], last["scope_required"]) == ("zone_violation", 453, zone)
    assert zones_of(ask(svc, f"discovery:query {zone}", governance_zone=zone)) == {zone}


def test_describe_of_a_restricted_agent_is_404_without_grant(svc: AnsService) -> None:
    cid = next(
        cid for cid, e in svc.index.registry.items() if e.governance_zone == "zone:secret"
    )
    no_grant = Identity("agtp://o/agents/o", "u", parse_authority_scope("discovery:query"))
    with pytest.raises(AgtpError) as info:
        svc.describe(DescribeRequest(no_grant, "t", cid))
    assert info.value.status == 404
    grant = Identity("agtp://o/agents/o", "u", parse_authority_scope("discovery:query zone:secret"))
    assert svc.describe(DescribeRequest(grant, "t", cid))["manifest"]["canonical_id"] == cid


def test_zones_section_in_config(tmp_path: Path) -> None:
    f = tmp_path / "ans.toml"
    f.write_text(
        '[governance]\nrestricted_zones = ["zone:finance"]\n'
        '[zones]\nrestricted = ["zone:hr"]\npublic = ["zone:public"]\nunlisted = "restricted"\n'
    )
    cfg = load(f)
    assert set(cfg.restricted_zones) == {"zone:finance", "zone:hr"}
    assert cfg.public_zones == ("zone:public",) and cfg.unlisted_zones == "restricted"
    for bad in (
        '[zones]\nunlisted = "sometimes"\n',
        '[zones]\npublic = ["zone:a"]\nrestricted = ["zone:a"]\n',
        '[zones]\npublic = ["finance"]\n',
        '[zones]\npublic = "zone:a"\n',
    ):
        f.write_text(bad)
        with pytest.raises(ConfigError):
            load(f)
