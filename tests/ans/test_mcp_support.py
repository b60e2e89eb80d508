"""Helpers for the MCP registry tests: agent key pairs (EC P-256, RSA),
signed Announce messages, and an in-process world (AnsService + AnsApp with
``[mcp]`` enabled) whose clock the test moves."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from ans.governance.audit import AuditLog
from ans.governance.keys import SigningKey, TrustedKeys, b64url
from ans.governance.ratelimit import RateLimitSettings
from ans.protocol.jcs import canonicalize
from ans.protocol.messages import Identity
from ans.protocol.scope import parse_authority_scope
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from ans.app import AnsApp
from ans.config import Config
from ans.gate import RequestGate
from ans.matcher import CapabilityIndex
from ans.mcp.config import McpSettings
from ans.service import AnsService
from ans.store import SQLiteStore

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
ISSUER = "https://governance.example"
ANS_ID = "agtp://ans.example/agents/ans"
ORCH = "agtp://o.example/agents/orch"
TOKEN_KEY = SigningKey.generate()
GOV = Identity("agtp://gov/agents/p", "gov", parse_authority_scope("discovery:register"))


class AgentKey:
    """An agent's long-term key pair (EC P-256 or RSA)."""

    def __init__(self, kind: str = "ec") -> None:
        self.kind = kind
        self.private: Any = (
            ec.generate_private_key(ec.SECP256R1())
            if kind == "ec"
            else rsa.generate_private_key(public_exponent=65537, key_size=2048)
        )
        self.pem = (
            self.private.public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            .decode()
        )

    def sign(self, data: bytes, *, raw: bool = False) -> str:
        if self.kind == "ec":
            der = self.private.sign(data, ec.ECDSA(hashes.SHA256()))
            if raw:
                r, s = decode_dss_signature(der)
                der = r.to_bytes(32, "big") + s.to_bytes(32, "big")
            return base64.b64encode(der).decode()
        return base64.b64encode(
            self.private.sign(data, padding.PKCS1v15(), hashes.SHA256())
        ).decode()


def agent_object(
    key: AgentKey, agent_id: str | None = None, name: str = "data-processor", **caps: str
) -> dict[str, Any]:
    return {
        "agent_id": agent_id or str(uuid.uuid4()),
        "agent_name": name,
        "capabilities": caps or {"task-manager": "1.4", "metrics": "2.0"},
        "public_key": key.pem,
        "transport": {"type": "tcp", "endpoint": "10.0.0.12:9000"},
        "metadata": {"__os": "linux", "__arch": "amd64"},
    }


def announce(
    key: AgentKey,
    agent: dict[str, Any],
    *,
    version: str = "v1.0",
    raw: bool = False,
    signer: AgentKey | None = None,
    rotation: AgentKey | None = None,
) -> dict[str, Any]:
    data = canonicalize(agent)
    msg = {
        "protocol_version": version,
        "agent": agent,
        "signature": (signer or key).sign(data, raw=raw),
    }
    if rotation is not None:
        msg["rotation_signature"] = rotation.sign(data)
    return msg


def mint(**claims: Any) -> str:
    body = {
        "iss": ISSUER,
        "aud": ANS_ID,
        "sub": ORCH,
        "principal": "usr-1",
        "scope": "discover:read",
        "exp": int((NOW + timedelta(days=30)).timestamp()),
        **claims,
    }
    h = b64url(orjson.dumps({"alg": "ES256", "kid": TOKEN_KEY.kid, "typ": "JWT"}))
    p = b64url(orjson.dumps(body))
    return f"{h}.{p}.{b64url(TOKEN_KEY.sign_raw(f'{h}.{p}'.encode()))}"


@dataclass
class Clock:
    now: datetime = NOW

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now = self.now + timedelta(seconds=seconds)


@dataclass
class World:
    app: AnsApp
    svc: AnsService
    clock: Clock
    calls: list[Any] = field(default_factory=list)

    @property
    def registry(self) -> Any:
        assert self.app.mcp is not None
        return self.app.mcp.registry

    def audit(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.svc.audit.path.read_text().splitlines()]

    def call(
        self,
        method: str,
        path: str,
        doc: Any = None,
        *,
        body: bytes | None = None,
        scope: str | None = "discover:read discover:write",
        headers: dict[str, str] | None = None,
        query: str = "",
        tls_chain: list[str] | None = None,
    ) -> tuple[int, dict[str, str], dict[str, Any]]:
        hdrs: dict[str, str] = {"content-type": "application/json"}
        if scope is not None:
            hdrs.update({"agent-id": ORCH, "principal-id": "usr-1", "authority-scope": scope})
        hdrs.update(headers or {})
        if body is None:
            body = b"" if doc is None else orjson.dumps(doc)
        asgi: dict[str, Any] = {
            "type": "http",
            "method": method,
            "path": path,
            "query_string": query.encode(),
            "headers": [(k.encode(), v.encode()) for k, v in hdrs.items()],
            "extensions": {},
        }
        if tls_chain is not None:
            asgi["extensions"]["tls"] = {"client_cert_chain": tls_chain}
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        asyncio.run(self.app(asgi, receive, send))
        out = {k.decode(): v.decode() for k, v in sent[0]["headers"]}
        return sent[0]["status"], out, orjson.loads(sent[1]["body"])

    def post(self, msg: Any, **kw: Any) -> tuple[int, dict[str, Any]]:
        status, _, body = self.call("POST", "/mcp/v1/agents", msg, **kw)
        return status, body


def make_world_factory(
    tmp_path: Path, embedder: Any, gov_key: SigningKey
) -> Iterator[Callable[..., World]]:
    made: list[AnsService] = []

    def make(mode: str = "open", store: Any = None, **mcp: Any) -> World:
        d = tmp_path / f"svc{len(made)}"
        d.mkdir()
        settings = {"enabled": True, "allow_list": ("*",), **mcp}
        cfg = Config(
            data_dir=d,
            agent_id=ANS_ID,
            auth_mode=mode,
            token_issuer=ISSUER,
            rate_limit=RateLimitSettings(enabled=False),
            mcp=McpSettings(**settings).validate(),
        )
        clock = Clock()
        svc = AnsService(
            config=cfg,
            store=store if store is not None else SQLiteStore(d / "registry.sqlite3"),
            matcher=CapabilityIndex(embedder),
            signing_key=SigningKey.generate(),
            governance_keys=TrustedKeys([gov_key.public]),
            audit=AuditLog(d / "audit.jsonl", clock),
            clock=clock,
        )
        made.append(svc)
        keys = TrustedKeys([TOKEN_KEY.public]) if mode == "token" else None
        gate = RequestGate(cfg, svc.audit, svc.manifest["canonical_id"], keys, clock)
        return World(AnsApp(svc, gate), svc, clock)

    yield make
    for svc in made:
        svc.audit.close()
        svc.store.close()
