"""HAIDIP against a real ``ans serve`` on loopback (httpx, plain JSON): cards
imported with ``ans import-cards`` (public and a restricted zone) and a
governed ACTIVATE carrying a card; list paging and cursor stability, every
filter, entitlements, ETag/304, signatures, GET 404/410/503, audit records
of refusals, the seed's section-5 flow, and the switches' defaults."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import pytest
from ans.governance.keys import SigningKey, TrustedKeys
from ans.governance.signing import RESULT_SIGNATURE_FIELD, sign_document, verify_document
from ans.protocol.jcs import canonicalize

from tools.launcher import RunningServer, start_server, stop_server

pytestmark = pytest.mark.integration

ANS = Path(sys.executable).with_name("ans")
CARDS = Path(__file__).resolve().parent.parent / "fixtures" / "cards"
BASE = "/haidip/v1"
READER = {
    "agent-id": "agtp://client.example/agents/app",
    "principal-id": "usr-haidip",
    "authority-scope": "discovery:query",
}
FINANCE_READER = {**READER, "authority-scope": "discovery:query zone:finance"}
WRITER = {**READER, "authority-scope": "discovery:query discovery:register"}
GOVERNANCE = {
    "agent-id": "agtp://gov.example/agents/platform",
    "principal-id": "gov-1",
    "authority-scope": "discovery:register",
    "content-type": "application/agtp+json",
    "agtp-method": "ACTIVATE",
}
FLEET = 25


def run_ans(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ANS), *args], capture_output=True, text=True, timeout=120, check=False
    )


def fleet_cards() -> list[dict[str, Any]]:
    return [
        {
            "id": f"fleet-{i:02d}",
            "name": f"Fleet Router {i}",
            "description": f"Routes delivery vans for depot {i} and plans their stops.",
            "capabilities": ["fleet-routing"],
            "endpoint": f"https://fleet.example.com/agents/{i}",
        }
        for i in range(0, 2 * FLEET, 2)  # even numbers: odd ids can later sort between
    ]


def ledger_card() -> dict[str, Any]:
    return {
        "id": "ledger-audit",
        "name": "Ledger Auditor",
        "description": "Audits general ledger entries and flags suspicious journal postings.",
        "capabilities": ["accounting", "audit"],
        "supported_languages": ["en"],
        "authentication": "mTLS",
        "endpoint": "https://ledger.finance.example/agents/audit",
        "provider": "FinCo",
    }


def governed_manifest(label: str, key: SigningKey, **extra: Any) -> dict[str, Any]:
    uri = f"agtp://agtp.gov.example/agents/{label}"
    doc = {
        "document_type": "agtp-manifest",
        "schema_version": "1.0",
        "manifest_uri": uri,
        "canonical_id": hashlib.sha256(uri.encode()).hexdigest(),
        "agent_label": label,
        "org_domain": "gov.example",
        "governance_zone": "zone:public",
        "trust_tier": 1,
        "package_format": "nomo",
        "package_integrity_hash": "sha256:" + "ab" * 32,
        "lifecycle_state": "Active",
        "cert_status": "Active",
        "principal_org": "Gov Example",
        "activated_at": "2026-01-15T09:00:00Z",
        "behavioral_trust_score": 0.9,
        "authority_scope_categories": ["documents:query"],
        "supported_methods": ["QUERY"],
        "job_description": f"The {label} agent.",
        **extra,
    }
    return sign_document(doc, key, "signature")


def activate(c: httpx.Client, manifest: dict[str, Any], card: dict[str, Any]) -> httpx.Response:
    body = {
        "method": "ACTIVATE",
        "task_id": f"act-{manifest['agent_label']}",
        "parameters": {"manifest": manifest, "capabilities": {}, "agent_card": card},
    }
    return c.post("/agtp", headers=GOVERNANCE, content=orjson.dumps(body))


@pytest.fixture(scope="module")
def gov(tmp_path_factory: pytest.TempPathFactory) -> tuple[SigningKey, Path, Path]:
    d = tmp_path_factory.mktemp("haidip-gov")
    key = SigningKey.generate()
    jwks = d / "gov.jwks.json"
    jwks.write_text(json.dumps({"keys": [key.public.jwk()]}))
    pem = d / "gov.pem"
    key.save(pem)
    return key, jwks, pem


@pytest.fixture(scope="module")
def srv(
    tmp_path_factory: pytest.TempPathFactory, gov: tuple[SigningKey, Path, Path]
) -> Iterator[RunningServer]:
    d = tmp_path_factory.mktemp("haidip")
    data = d / "data"
    cfg = d / "ans.toml"
    cfg.write_text(
        "[rate_limit]\nenabled = false\n"
        '[zones]\nrestricted = ["zone:finance"]\n'
        "[haidip]\npublic_listing = true\ncard_upload = true\n"
    )
    (d / "fleet.json").write_text(json.dumps(fleet_cards()))
    (d / "ledger.json").write_text(json.dumps(ledger_card()))
    for args in (
        [str(CARDS)],
        [str(d / "fleet.json"), "--quiet"],
        [str(d / "ledger.json"), "--zone", "zone:finance"],
    ):
        r = run_ans("import-cards", *args, "--data-dir", str(data), "--config", str(cfg))
        assert r.returncode == 0, r.stderr
    server = start_server(data, "--config", str(cfg), "--governance-jwks", str(gov[1]))
    yield server
    stop_server(server)


@pytest.fixture
def c(srv: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=srv.url, http2=True, http1=False, timeout=30) as client:
        yield client


def keys_of(c: httpx.Client) -> TrustedKeys:
    return TrustedKeys.from_jwks(c.get("/.well-known/jwks.json").json())


def listing(c: httpx.Client, headers: dict[str, str] | None = None, **params: Any) -> Any:
    r = c.get(f"{BASE}/agents", params=params, headers=headers or READER)
    assert r.status_code == 200, r.text
    return r


def search(c: httpx.Client, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    r = c.post(f"{BASE}/agents/search", content=orjson.dumps(body), headers=headers or READER)
    assert r.status_code == 200, r.text
    return r.json()


def audit_records(srv: RunningServer) -> list[dict[str, Any]]:
    log = srv.data_dir / "audit.jsonl"
    return [orjson.loads(line) for line in log.read_bytes().splitlines()]


def test_import_cards_cli_summary_and_one_line_errors(tmp_path: Path) -> None:
    data = tmp_path / "data"
    bad = tmp_path / "cards.json"
    bad.write_text(json.dumps([ledger_card(), {"id": "no endpoint", "name": "x"}]))
    r = run_ans("import-cards", str(bad), "--data-dir", str(data))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "imported 1, unchanged 0, refused 1 (self-asserted, trust tier 3)"
    assert "imported ledger-audit (ledger-audit)" in r.stderr
    assert f"refused {bad}[1]: 422 invalid_capabilities" in r.stderr
    r = run_ans("import-cards", str(bad), "--data-dir", str(data), "--strict", "--quiet")
    assert r.returncode == 1 and r.stdout.startswith("imported 0, unchanged 1, refused 1")
    for args, text in (
        ([str(tmp_path / "missing.json")], "no such file or directory"),
        ([str(bad), "--zone", "finance"], "--zone must be a zone id"),
    ):
        r = run_ans("import-cards", *args, "--data-dir", str(data))
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert text in r.stderr and "Traceback" not in r.stderr


def test_list_pages_with_a_stable_cursor(c: httpx.Client, srv: RunningServer) -> None:
    keys = keys_of(c)
    first = listing(c, capability="fleet-routing", top=10).json()
    verify_document(first, keys, RESULT_SIGNATURE_FIELD)
    assert first["count"] == FLEET and first["top"] == 10
    ids = [a["id"] for a in first["agents"]]
    assert ids == sorted(ids) and ids[0] == "fleet-00" and len(ids) == 10
    cursor = first["next_cursor"]
    assert isinstance(cursor, str)
    # an agent added *before* the cursor's position does not move the next page
    new = {**fleet_cards()[0], "id": "fleet-03", "endpoint": "https://fleet.example.com/x"}
    r = c.post(f"{BASE}/agents", content=orjson.dumps(new), headers=WRITER)
    assert r.status_code == 201, r.text
    second = listing(c, capability="fleet-routing", top=10, cursor=cursor).json()
    assert [a["id"] for a in second["agents"]] == [f"fleet-{i:02d}" for i in range(20, 40, 2)]
    assert second["count"] == FLEET + 1
    third = listing(c, capability="fleet-routing", top=10, cursor=second["next_cursor"]).json()
    assert [a["id"] for a in third["agents"]] == [f"fleet-{i:02d}" for i in range(40, 50, 2)]
    assert third["next_cursor"] is None
    # skip is the plain offset: it does shift
    shifted = listing(c, capability="fleet-routing", top=10, skip=10).json()
    assert shifted["agents"][0]["id"] == "fleet-18"
    # a forged cursor, or one replayed with other filters, is refused
    head, _, tag = cursor.partition(".")
    for bad, params in (
        (head + "." + tag[::-1], {"capability": "fleet-routing"}),
        ("garbage", {"capability": "fleet-routing"}),
        (cursor, {"capability": "translation"}),
    ):
        r = c.get(f"{BASE}/agents", params={**params, "cursor": bad}, headers=READER)
        assert r.status_code == 400 and r.json()["error"]["code"] == "InvalidInput", r.text


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"capability": "translation"}, {"translator-001"}),
        ({"language": "fr"}, {"translator-001"}),
        ({"language": "en"}, {"translator-001", "doc-summarizer-en"}),
        ({"tag": "travel"}, {"https://travel.example.com/agents/planner"}),
        (
            {"protocol": "a2a"},
            {"https://travel.example.com/agents/planner", "https://currency.example.net/a2a/v1"},
        ),
        ({"provider": "Wanderly"}, {"https://travel.example.com/agents/planner"}),
        ({"provider": "Open Summaries Lab", "language": "en"}, {"doc-summarizer-en"}),
        ({"capability": "translation", "language": "de"}, set()),
    ],
)
def test_each_list_filter(c: httpx.Client, params: dict[str, str], expected: set[str]) -> None:
    body = listing(c, **params, top=100).json()
    assert {a["id"] for a in body["agents"]} == expected
    assert body["count"] == len(expected)


def test_search_filters_ranking_and_signature(c: httpx.Client) -> None:
    keys = keys_of(c)
    request = {
        "query": "convert 100 euros into japanese yen",
        "filters": {"authentication": "api key"},
        "top": 5,
        "include_metadata": True,
    }
    body = search(c, request)
    verify_document(body, keys, RESULT_SIGNATURE_FIELD)
    # bound to the request object as sent
    assert body["query_digest"] == hashlib.sha256(canonicalize(request)).hexdigest()
    assert body["results"][0]["id"] == "https://currency.example.net/a2a/v1"
    first = body["results"][0]
    for name in ("score", "capability_match_score", "trust_tier", "governed", "rank"):
        assert name in first, name
    assert first["card"]["ans"]["card_format"] == "a2a"
    assert body["relevance"]["gate"] and body["ranking"]
    assert isinstance(body["search_time"], float) and body["count"] >= 1
    only_https = search(c, {"query": "translate text", "filters": {"protocols": ["a2a"]}})
    assert "translator-001" not in {r["id"] for r in only_https["results"]}
    verified = search(c, {"query": "translate text", "filters": {"certification": "verified"}})
    assert all(r["trust_tier"] == 1 for r in verified["results"])
    unranked = search(c, {"filters": {"capabilities": "fleet-routing"}, "ranked": False, "top": 3})
    assert all("score" not in r for r in unranked["results"])
    ids = [r["id"] for r in unranked["results"]]
    assert ids == sorted(ids)
    r = c.post(f"{BASE}/agents/search", content=b'{"top": 90, "skip": 20}', headers=READER)
    assert r.status_code == 400 and r.json()["error"]["code"] == "InvalidInput"


def test_entitlements_never_show_a_restricted_agent(c: httpx.Client, srv: RunningServer) -> None:
    anonymous: dict[str, str] = {}
    for who, sees in ((anonymous, False), (READER, False), (FINANCE_READER, True)):
        listed = {a["id"] for a in listing(c, who, top=100).json()["agents"]}
        assert ("ledger-audit" in listed) is sees
        found = search(c, {"query": "audit general ledger journal entries"}, who)
        assert ("ledger-audit" in {r["id"] for r in found["results"]}) is sees
        r = c.get(f"{BASE}/agents/ledger-audit", headers=who)
        assert r.status_code == (200 if sees else 404), r.text
    # the restricted card's filters do not reveal it either
    assert listing(c, READER, provider="FinCo").json()["count"] == 0
    # a caller without discovery:query is refused (403) and audited
    r = c.get(f"{BASE}/agents", headers={**READER, "authority-scope": "agents:invoke"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "Forbidden"
    assert any(
        rec["event"] == "scope_violation" and rec.get("agent_id") == READER["agent-id"]
        for rec in audit_records(srv)
    )


def test_etag_and_304(c: httpx.Client) -> None:
    r = listing(c, capability="translation")
    etag = r.headers["etag"]
    assert r.headers["last-modified"].endswith("GMT")
    again = c.get(
        f"{BASE}/agents",
        params={"capability": "translation"},
        headers={**READER, "if-none-match": etag},
    )
    assert again.status_code == 304 and again.content == b""
    # another entitlement: another tag; another query: another tag
    assert listing(c, FINANCE_READER, capability="translation").headers["etag"] != etag
    assert listing(c, capability="translation", top=5).headers["etag"] != etag
    # a change in the registry moves the feed: the page is served again
    card = {**ledger_card(), "id": "etag-mover", "endpoint": "https://etag.example/x"}
    assert c.post(f"{BASE}/agents", content=orjson.dumps(card), headers=WRITER).status_code == 201
    moved = c.get(
        f"{BASE}/agents",
        params={"capability": "translation"},
        headers={**READER, "if-none-match": etag},
    )
    assert moved.status_code == 200 and moved.headers["etag"] != etag


def test_governed_card_suspended_and_retired(
    c: httpx.Client, srv: RunningServer, gov: tuple[SigningKey, Path, Path]
) -> None:
    key, _, pem = gov
    card = json.loads((CARDS / "translator-001.json").read_text())
    ids = {}
    for label in ("gov-translator", "gov-suspended", "gov-retired"):
        m = governed_manifest(label, key)
        r = activate(c, m, {**card, "id": label, "name": f"Governed {label}"})
        assert r.status_code == 200, r.text
        ids[label] = m["canonical_id"]
    # a governed card's declared id does not lead to it: its HAIDIP id is its canonical id
    got = c.get(f"{BASE}/agents/{ids['gov-translator']}", headers=READER)
    assert got.status_code == 200, got.text
    body = got.json()
    verify_document(body, keys_of(c), RESULT_SIGNATURE_FIELD)
    assert body["ans"]["governed"] is True and body["ans"]["trust_tier"] == 1
    assert body["id"] == ids["gov-translator"] and body["ans"]["declared_id"] == "gov-translator"
    assert (
        body["ans"]["card_format"] == "haidip"
        and body["supported_languages"] == card["supported_languages"]
    )
    verified = search(
        c, {"query": "translate text into french", "filters": {"certification": "verified"}}
    )
    assert ids["gov-translator"] in {r["id"] for r in verified["results"]}
    assert "translator-001" not in {r["id"] for r in verified["results"]}
    common = ["--server", srv.url, "--governance-key", str(pem)]
    assert run_ans("lifecycle", "suspend", ids["gov-suspended"], *common).returncode == 0
    assert run_ans("lifecycle", "deprecate", ids["gov-retired"], *common).returncode == 0
    r = c.get(f"{BASE}/agents/{ids['gov-suspended']}", headers=READER)
    assert r.status_code == 503 and r.json()["error"]["code"] == "AgentSuspended"
    r = c.get(f"{BASE}/agents/{ids['gov-retired']}", headers=READER)
    assert r.status_code == 410 and r.json()["error"]["code"] == "Gone"
    listed = {a["id"] for a in listing(c, capability="translation", top=100).json()["agents"]}
    assert ids["gov-translator"] in listed
    assert not listed & {ids["gov-suspended"], ids["gov-retired"]}


def test_refusals_are_haidip_errors_and_audited(c: httpx.Client, srv: RunningServer) -> None:
    cases: list[tuple[str, str, bytes, dict[str, str], int, str]] = [
        ("POST", f"{BASE}/agents/search", b"{nope", READER, 400, "InvalidInput"),
        (
            "POST",
            f"{BASE}/agents/search",
            b'{"query": "x", "extra": 1}',
            READER,
            400,
            "InvalidInput",
        ),
        ("POST", f"{BASE}/agents/search", b"x" * (300 * 1024), READER, 413, "PayloadTooLarge"),
        (
            "POST",
            f"{BASE}/agents/search",
            b'{"query": "x"}',
            {**READER, "content-type": "text/plain"},
            415,
            "UnsupportedMediaType",
        ),
        ("DELETE", f"{BASE}/agents/translator-001", b"", READER, 405, "MethodNotAllowed"),
        ("GET", f"{BASE}/agents?colour=red", b"", READER, 400, "InvalidInput"),
        ("GET", f"{BASE}/agents/no-such-agent", b"", READER, 404, "NotFound"),
        ("GET", f"{BASE}/agents/%2F", b"", READER, 404, "NotFound"),  # not the list
        ("GET", f"{BASE}/agents//", b"", READER, 404, "NotFound"),
        ("POST", f"{BASE}/agents", orjson.dumps(ledger_card()), {}, 401, "Unauthorized"),
        ("POST", f"{BASE}/agents", b'{"id": "x"}', WRITER, 422, "InvalidCard"),
        ("POST", f"{BASE}/agents", orjson.dumps(ledger_card()), READER, 403, "Forbidden"),
    ]
    for method, path, body, headers, status, code in cases:
        r = c.request(method, path, content=body, headers=headers)
        assert r.status_code == status, (path, r.text)
        error = r.json()["error"]
        assert error["code"] == code and len(error["message"]) <= 300 and error["correlation_id"]
    records = audit_records(srv)
    events = {(rec["event"], rec.get("status")) for rec in records}
    assert ("authentication_failed", 401) in events  # anonymous registration
    assert ("self_asserted_refused", 422) in events  # malformed card
    assert ("scope_violation", 451) in events  # registration without discovery:register
    # no request or response body in the audit log
    assert not any("Ledger Auditor" in json.dumps(rec) for rec in records)


def test_well_known_card_and_openapi(c: httpx.Client) -> None:
    card = c.get("/.well-known/agent-card.json").json()
    assert card["url"].endswith(BASE) and card["name"]
    skills = {s["id"] for s in card["skills"]}
    assert {"haidip-list", "haidip-search", "haidip-get", "haidip-register"} <= skills
    doc = c.get(f"{BASE}/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    assert f"{BASE}/agents/{{id}}/invoke" in doc["paths"]
    # invoke is the gateway's (ans/surfaces/haidip_invoke.py): READER lacks agents:invoke
    r = c.post(f"{BASE}/agents/translator-001/invoke", content=b"{}", headers=READER)
    assert r.status_code == 403 and r.json()["error"]["detail"] == "scope_violation"
    # HEAD wherever GET is served (RFC 9110 9.3.2): GET's status and headers, no body
    for path, headers in (("/.well-known/agent-card.json", {}), (f"{BASE}/agents", READER),
                          (f"{BASE}/openapi.json", {}), (f"{BASE}/agents/no-such", READER)):
        got, head = c.get(path, headers=headers), c.head(path, headers=headers)
        assert head.status_code == got.status_code, (path, head.status_code)
        assert head.content == b""
        assert head.headers.get("content-type") == got.headers.get("content-type")
        if "content-length" in got.headers:
            assert head.headers.get("content-length") == got.headers["content-length"]


def search_pick_get(c: httpx.Client, keys: TrustedKeys) -> dict[str, Any]:
    """Section 5, steps 1-2: search, select the best result, fetch its card."""
    request = {
        "query": "summarize an English document",
        "filters": {"capabilities": ["summarization"], "supported_language": "en"},
        "top": 3,
    }
    found = search(c, request)
    verify_document(found, keys, RESULT_SIGNATURE_FIELD)
    assert 1 <= len(found["results"]) <= 3
    best = found["results"][0]
    assert {"id", "name", "description", "score"} <= set(best)
    r = c.get(f"{BASE}/agents/{quote(best['id'], safe='')}", headers=READER)
    assert r.status_code == 200, r.text
    card: dict[str, Any] = r.json()
    verify_document(card, keys, RESULT_SIGNATURE_FIELD)
    return card


def test_seed_section_5_flow(c: httpx.Client) -> None:
    card = search_pick_get(c, keys_of(c))
    assert card["id"] == "doc-summarizer-en"
    assert card["endpoint"] == "https://summarize.example.org/v1/invoke"
    assert [op["name"] for op in card["operations"]] == ["summarize", "key_points"]
    # step 3, invoke through the gateway, needs an agent that answers: see
    # tests/integration/test_haidip_invoke.py::test_seed_section_5_flow_search_get_invoke


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    d = tmp_path_factory.mktemp("haidip-defaults")
    r = run_ans("import-cards", str(CARDS), "--data-dir", str(d / "data"), "--quiet")
    assert r.returncode == 0, r.stderr
    server = start_server(d / "data")
    yield server
    stop_server(server)


def test_switches_are_off_by_default(defaults: RunningServer) -> None:
    with httpx.Client(base_url=defaults.url, timeout=30) as c:
        r = c.get(f"{BASE}/agents")
        assert r.status_code == 401 and r.json()["error"]["code"] == "Unauthorized"
        r = c.post(f"{BASE}/agents/search", content=b'{"query": "translate"}')
        assert r.status_code == 401
        assert listing(c, READER).json()["count"] == 4  # with credentials: served
        r = c.post(f"{BASE}/agents", content=orjson.dumps(ledger_card()), headers=WRITER)
        assert r.status_code == 404 and r.json()["error"]["code"] == "NotFound"
    records = audit_records(defaults)
    assert any(
        rec["event"] == "self_asserted_refused" and rec.get("status") == 404 for rec in records
    )
    assert any(
        rec["event"] == "authentication_failed" and rec.get("method") == "haidip.list"
        for rec in records
    )
    now = datetime.now(UTC).isoformat()
    assert now  # the records above were written by this run's server
