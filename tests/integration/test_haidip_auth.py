"""HAIDIP in token mode on a real ``ans serve --demo``: the bearer token's
scope is what the caller is entitled to (a restricted zone's agents appear
only when the token grants the zone), a missing or expired token is a HAIDIP
401 audited as ``authentication_failed``, and with ``public_listing`` a
caller with no credentials at all sees public zones only."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from ans.governance.keys import SigningKey, b64url

pytestmark = pytest.mark.integration

AGENT = "agtp://o.example/agents/app"
ANS_ID = "agtp://ans.test/agents/ans"
ISSUER = "https://governance.test"
BASE = "/haidip/v1"


def mint(key: SigningKey, scope: str, *, exp_in: float = 300.0) -> str:
    now = time.time()
    body = {
        "iss": ISSUER,
        "aud": [ANS_ID],
        "sub": AGENT,
        "principal": "usr-1",
        "scope": scope,
        "exp": int(now + exp_in),
        "nbf": int(now - 60),
    }
    h = b64url(orjson.dumps({"alg": "ES256", "kid": key.kid, "typ": "JWT"}))
    p = b64url(orjson.dumps(body))
    return f"{h}.{p}.{b64url(key.sign_raw(f'{h}.{p}'.encode()))}"


def headers(token: str | None, scope: str = "discovery:query zone:finance") -> dict[str, str]:
    out = {"agent-id": AGENT, "principal-id": "usr-1", "authority-scope": scope}
    if token is not None:
        out["authorization"] = f"Bearer {token}"
    return out


def zones_listed(c: httpx.Client, h: dict[str, str]) -> set[str]:
    r = c.get(f"{BASE}/agents", params={"top": 100}, headers=h)
    assert r.status_code == 200, r.text
    return {a["governance_zone"] for a in r.json()["agents"]}


def test_token_scopes_are_the_entitlements(tmp_path: Path, server_factory: Any) -> None:
    issuer = SigningKey.generate()
    jwks = tmp_path / "issuer.jwks.json"
    jwks.write_text(json.dumps({"keys": [issuer.public.jwk()]}))
    cfg = tmp_path / "ans.toml"
    cfg.write_text(
        f'[ans]\nagent_id = "{ANS_ID}"\n'
        f'[auth]\nmode = "token"\ntoken_issuer = "{ISSUER}"\ntoken_jwks = ["{jwks}"]\n'
        '[zones]\nrestricted = ["zone:finance"]\n'
        "[rate_limit]\nenabled = false\n[haidip]\npublic_listing = true\n"
    )
    data = tmp_path / "data"
    srv = server_factory(data, "--config", str(cfg), "--demo")
    plain = mint(issuer, "discovery:query")
    finance = mint(issuer, "discovery:query zone:finance")
    with httpx.Client(base_url=srv.url, http1=False, http2=True, timeout=30) as c:
        # the header asks for zone:finance; only the token that grants it gets it
        assert "zone:finance" not in zones_listed(c, headers(plain))
        assert "zone:finance" in zones_listed(c, headers(finance))
        # same headers, other token: another entitlement, another ETag
        tags = {
            c.get(f"{BASE}/agents", headers=headers(t)).headers["etag"] for t in (plain, finance)
        }
        assert len(tags) == 2
        query = {"query": "audit a Solidity smart contract for reentrancy", "top": 10}
        found = c.post(
            f"{BASE}/agents/search", content=orjson.dumps(query), headers=headers(plain)
        ).json()
        assert found["results"] and all(
            r["governance_zone"] != "zone:finance" for r in found["results"]
        )
        found = c.post(
            f"{BASE}/agents/search", content=orjson.dumps(query), headers=headers(finance)
        ).json()
        hidden = [r for r in found["results"] if r["governance_zone"] == "zone:finance"]
        assert hidden
        cid = hidden[0]["id"]
        assert c.get(f"{BASE}/agents/{cid}", headers=headers(finance)).status_code == 200
        assert c.get(f"{BASE}/agents/{cid}", headers=headers(plain)).status_code == 404
        # no credentials at all, public_listing on: public zones only
        assert "zone:finance" not in zones_listed(c, {})
        assert c.get(f"{BASE}/agents/{cid}").status_code == 404
        # identity headers without a token, or with an expired one: 401
        r = c.get(f"{BASE}/agents", headers={**headers(None), "task-id": "t-no"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "Unauthorized"
        assert r.json()["error"]["detail"] == "missing_token"
        assert r.headers["www-authenticate"].startswith("Bearer")
        late = mint(issuer, "discovery:query", exp_in=-3600)
        r = c.get(f"{BASE}/agents", headers=headers(late))
        assert r.status_code == 401 and r.json()["error"]["detail"] == "token_expired"
    records = [json.loads(x) for x in (data / "audit.jsonl").read_text().splitlines()]
    failures = [r for r in records if r["event"] == "authentication_failed"]
    assert [r["code"] for r in failures] == ["missing_token", "token_expired"]
    assert failures[0]["task_id"] == "t-no" and failures[0]["agent_id"] == AGENT
