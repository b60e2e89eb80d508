"""API keys (``[[auth.api_keys]]``): the configuration entries, the presented
key (X-API-Key or Authorization: ApiKey), the constant-time lookup, binding
to the identity headers, and the gate accepting them in every auth mode
(accept, wrong key, revoked = removed from the configuration, scope
narrowing); ``ans apikey new`` prints an entry that loads and authenticates."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from ans.governance.apikeys import (
    ApiKeys,
    ConfigProblem,
    key_hash,
    new_key,
    parse_api_keys,
    presented_key,
)
from ans.governance.audit import AuditLog
from ans.governance.keys import SigningKey, TrustedKeys
from ans.protocol.errors import AuthenticationFailed, ErrorCode
from ans.protocol.messages import DescribeRequest, Identity
from ans.protocol.scope import parse_authority_scope

from ans.cli import main
from ans.config import Config, ConfigError, load
from ans.gate import Credentials, RequestGate

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
KEY = "ans_" + "k" * 43
ENTRY = {"hash": key_hash(KEY), "principal_id": "usr-1", "scopes": ["discovery:query"]}


def ident(principal: str = "usr-1", scope: str = "discovery:query agents:invoke") -> Identity:
    return Identity("agtp://c.example/agents/a", principal, parse_authority_scope(scope))


def test_entries_parse_and_bad_ones_are_named() -> None:
    (key,) = parse_api_keys([{**ENTRY, "zones": ["zone:finance"], "agent_id": "agtp://x/a"}])
    assert key.scopes == ("discovery:query", "zone:finance") and key.agent_id == "agtp://x/a"
    assert key.label == key_hash(KEY)[:19]
    bad: list[tuple[Any, str]] = [
        ({**ENTRY, "hash": "md5:00"}, "hash must be"),
        ({**ENTRY, "hash": key_hash(KEY).upper()}, "hash must be"),
        ({**ENTRY, "principal_id": ""}, "principal_id"),
        ({**ENTRY, "principal_id": "a\x01b"}, "principal_id must be printable ASCII"),
        ({**ENTRY, "principal_id": "ops\nteam"}, "principal_id must be printable ASCII"),
        ({**ENTRY, "agent_id": "agtp://x/\u00e9"}, "agent_id must be printable ASCII"),
        ({**ENTRY, "scopes": ["Not A Scope"]}, "scope token"),
        ({**ENTRY, "zones": ["finance"]}, "zone:name"),
        ({**ENTRY, "secret": "x"}, "unknown key 'secret'"),
        ("not a table", "must be a table"),
    ]
    for entry, words in bad:
        with pytest.raises(ConfigProblem, match=words):
            parse_api_keys([entry])
    with pytest.raises(ConfigProblem, match="twice"):
        parse_api_keys([ENTRY, ENTRY])


def test_presented_key_from_either_header() -> None:
    assert presented_key(None, KEY) == KEY
    assert presented_key(f"ApiKey {KEY}", None) == KEY
    assert presented_key(f"apikey   {KEY} ", None) == KEY
    assert presented_key(f"Bearer {KEY}", None) is None  # a token, not a key
    assert presented_key(None, None) is None
    assert len(presented_key(None, "x" * 10_000) or "") == 257  # bounded, will not match


def test_lookup_binding_and_scope_narrowing() -> None:
    keys = ApiKeys(parse_api_keys([ENTRY, {**ENTRY, "hash": key_hash("other")}]))
    effective, key = keys.authenticate(ident(), KEY)
    assert key.principal_id == "usr-1"
    assert str(effective.scope) == "discovery:query"  # header scope within the key's
    for wrong in ("", KEY + "x", "x" * 300):
        with pytest.raises(AuthenticationFailed) as exc:
            keys.authenticate(ident(), wrong)
        assert exc.value.code == ErrorCode.API_KEY_INVALID
    with pytest.raises(AuthenticationFailed) as exc:
        keys.authenticate(ident(principal="usr-2"), KEY)
    assert exc.value.code == ErrorCode.API_KEY_IDENTITY_MISMATCH
    bound = ApiKeys(parse_api_keys([{**ENTRY, "agent_id": "agtp://other/agents/b"}]))
    with pytest.raises(AuthenticationFailed) as exc:
        bound.authenticate(ident(), KEY)
    assert exc.value.code == ErrorCode.API_KEY_IDENTITY_MISMATCH
    alone = keys.identity_of(KEY)  # no identity headers sent (HAIDIP)
    assert alone.agent_id == "apikey:usr-1" and str(alone.scope) == "discovery:query"


def test_new_keys_are_random_and_prefixed() -> None:
    a, b = new_key(), new_key()
    assert a != b and a.startswith("ans_") and len(a) == 47
    assert new_key(lambda n: b"\0" * n) == "ans_" + "A" * 43


@pytest.fixture
def audit(tmp_path: Path) -> Iterator[AuditLog]:
    log = AuditLog(tmp_path / "audit.jsonl", lambda: NOW)
    yield log
    log.close()


def gate(
    audit: AuditLog, mode: str = "open", keys: tuple[dict[str, Any], ...] = (ENTRY,)
) -> RequestGate:
    token = SigningKey.generate()
    config = replace(
        Config(),
        auth_mode=mode,
        token_issuer="https://gov.example",
        auth_api_keys=parse_api_keys(list(keys)),
    )
    return RequestGate(
        config, audit, "own", TrustedKeys([token.public]) if mode == "token" else None, lambda: NOW
    )


def ask(g: RequestGate, headers: dict[str, str]) -> Identity:
    creds = Credentials.from_request(headers, None, client_address="127.0.0.1")
    req = DescribeRequest(ident(), "t-1", "some-agent")
    out = g.authenticate_and_limit("DESCRIBE", req, creds)
    assert out.identity is not None
    return out.identity


@pytest.mark.parametrize("mode", ["open", "token"])
def test_gate_accepts_refuses_and_forgets_removed_keys(audit: AuditLog, mode: str) -> None:
    g = gate(audit, mode)
    assert str(ask(g, {"x-api-key": KEY}).scope) == "discovery:query"
    assert str(ask(g, {"authorization": f"ApiKey {KEY}"}).scope) == "discovery:query"
    with pytest.raises(AuthenticationFailed) as exc:
        ask(g, {"x-api-key": "ans_wrong"})
    assert exc.value.code == ErrorCode.API_KEY_INVALID
    assert dict(exc.value.headers)["www-authenticate"].startswith("ApiKey")
    revoked = gate(audit, mode, keys=())  # the entry removed from the configuration
    with pytest.raises(AuthenticationFailed):
        ask(revoked, {"x-api-key": KEY})
    audit.close()
    raw = audit.path.read_text()
    assert "authentication_failed" in raw and '"credential":"api_key"' in raw.replace(" ", "")
    assert KEY not in raw and "ans_wrong" not in raw


def test_token_mode_without_a_key_still_wants_a_token(audit: AuditLog) -> None:
    with pytest.raises(AuthenticationFailed) as exc:
        ask(gate(audit, "token"), {})
    assert exc.value.code == ErrorCode.MISSING_TOKEN


def test_config_loads_api_keys(tmp_path: Path) -> None:
    cfg = tmp_path / "ans.toml"
    cfg.write_text(
        f'[[auth.api_keys]]\nhash = "{key_hash(KEY)}"\nprincipal_id = "usr-1"\n'
        'scopes = ["agents:invoke"]\n'
    )
    assert load(cfg, environ={}).auth_api_keys[0].principal_id == "usr-1"
    cfg.write_text('[[auth.api_keys]]\nhash = "nope"\nprincipal_id = "usr-1"\n')
    with pytest.raises(ConfigError, match="api_keys"):
        load(cfg, environ={})


def test_cli_prints_a_key_and_an_entry_that_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["apikey", "new", "--principal", "usr-9", "--scope", "agents:invoke"]
    assert main([*args, "--zone", "zone:finance"]) == 0
    out = capsys.readouterr().out
    key = out.splitlines()[0].rsplit(" ", 1)[1]
    toml = out[out.index("[[auth.api_keys]]") :]
    cfg = tmp_path / "ans.toml"
    cfg.write_text(toml)
    keys = ApiKeys(load(cfg, environ={}).auth_api_keys)
    assert str(keys.identity_of(key).scope) == "agents:invoke zone:finance"
    assert main(["apikey", "new", "--principal", "usr-9", "--scope", "Bad"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "scope token" in err
