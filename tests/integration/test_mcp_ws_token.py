"""The MCP WebSocket in token mode on a real ``ans serve`` (issue 28.7 +
28.4): the upgrade request carries only ``Authorization: Bearer <JWT>``
(ES256, issued by the governance platform's key); ``discover:read`` may
query and subscribe, ``discover:write`` may announce, a token from another
issuer or an expired one is refused 401 ``ErrAuth`` and audited."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from ans.governance.keys import SigningKey, b64url
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from ans.mcp import ws_frames as wf
from tests.ans.test_mcp_support import AgentKey, agent_object, announce
from tests.integration.test_mcp_ws_support import SUBPROTOCOL, ask, events, mcp_config, ws_url
from tools.launcher import start_server, stop_server

pytestmark = pytest.mark.integration
ANS_ID = "agtp://ans.test/agents/ans"
ISSUER = "https://governance.test"


def mint(key: SigningKey, scope: str, *, exp_in: float = 300.0, **claims: Any) -> str:
    now = time.time()
    body = {
        "iss": ISSUER,
        "aud": [ANS_ID],
        "sub": "agtp://o.example/agents/orch",
        "principal": "usr-1",
        "scope": scope,
        "exp": int(now + exp_in),
        "nbf": int(now - 60),
        **claims,
    }
    h = b64url(orjson.dumps({"alg": "ES256", "kid": key.kid, "typ": "JWT"}))
    p = b64url(orjson.dumps(body))
    return f"{h}.{p}.{b64url(key.sign_raw(f'{h}.{p}'.encode()))}"


def test_bearer_tokens_on_the_websocket(tmp_path: Path) -> None:
    issuer = SigningKey.generate()
    jwks = tmp_path / "issuer.jwks.json"
    jwks.write_text(json.dumps({"keys": [issuer.public.jwk()]}))
    cfg = mcp_config(tmp_path / "ans.toml")
    cfg.write_text(
        f'[ans]\nagent_id = "{ANS_ID}"\n'
        f'[auth]\nmode = "token"\ntoken_issuer = "{ISSUER}"\ntoken_jwks = ["{jwks}"]\n'
        "token_leeway = 0\n" + cfg.read_text()
    )
    srv = start_server(tmp_path / "data", "--config", str(cfg))

    def ws(token: str) -> Any:
        return connect(
            ws_url(srv.url),
            subprotocols=[SUBPROTOCOL],  # type: ignore[list-item]
            additional_headers={"authorization": f"Bearer {token}"},
            open_timeout=10,
        )

    try:
        key = AgentKey()
        agent = agent_object(key, name="token-agent", **{"tok-cap": "1"})
        with ws(mint(issuer, "discover:read")) as reader, ws(mint(issuer, "discover:write")) as w:
            q = {"protocol_version": "v1.0", "query": {"capability": "tok-cap"}}
            assert ask(reader, wf.QUERY, {**q, "subscribe": True})["status"] == 200
            assert ask(reader, wf.ANNOUNCE, announce(key, agent))["status"] == 403
            assert ask(w, wf.QUERY, q)["status"] == 403
            assert ask(w, wf.ANNOUNCE, announce(key, agent))["status"] == 200
            (ev,) = events(reader, 1)
            assert ev["event"] == "new" and ev["agent"] == agent
        # a token that expires during the session: the next frame is 401, then 1008
        expires = time.time() + 8
        with ws(mint(issuer, "discover:read", exp_in=8)) as short:
            q = {"protocol_version": "v1.0", "query": {"capability": "tok-cap"}}
            assert ask(short, wf.QUERY, q)["status"] == 200
            time.sleep(max(0.0, expires - time.time()) + 1.5)
            assert ask(short, wf.QUERY, q)["status"] == 401
            with pytest.raises(ConnectionClosed) as closed:
                short.recv(timeout=10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        for bad in (
            mint(issuer, "discover:read", exp_in=-3600),
            mint(SigningKey.generate(), "discover:read"),
            mint(issuer, "discover:read", iss="https://evil.test"),
        ):
            with pytest.raises(InvalidStatus) as info:
                with ws(bad):
                    pass
            assert info.value.response.status_code == 401
            assert json.loads(bytes(info.value.response.body or b""))["error"]["code"] == "ErrAuth"
    finally:
        stop_server(srv)
    audit = [json.loads(x) for x in (tmp_path / "data" / "audit.jsonl").read_text().splitlines()]
    failed = [r for r in audit if r["event"] == "authentication_failed"]
    assert len(failed) >= 4 and {r["method"] for r in failed} == {"MCP-WS", "MCP-QUERY"}
