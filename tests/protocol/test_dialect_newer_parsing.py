"""Parsing newer-dialect requests (protocol/newer.py) and the body-shape rule
both dialects share (protocol/envelope.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from ans.protocol import newer
from ans.protocol.errors import AgtpError, ErrorCode
from ans.protocol.messages import Limits, parse_describe, parse_discover
from ans.protocol.newer import AgentRef, agent_ref, parse_scope
from ans.protocol.scope import ScopeToken

IDENT = {
    "agent-id": "agtp://agtp.acme.tld/agents/orchestrator",
    "owner-id": "usr-chris-hood",
    "authority-scope": "discovery:query, agents:delegate",
}
OLD = {"agent-id": "a", "principal-id": "p", "authority-scope": "discovery:query"}
HEX = "AB" * 32


def discover(doc: Any, headers: dict[str, str] = IDENT, target: str | None = "/") -> Any:
    return newer.parse_discover(headers, orjson.dumps(doc), Limits(), target)


def code_of(fn: Any, *args: Any) -> str:
    with pytest.raises(AgtpError) as exc:
        fn(*args)
    return str(exc.value.code)


# -- scopes and identity ---------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "tokens"),
    [
        ("discovery:query, agents:delegate", ["discovery:query", "agents:delegate"]),
        ("discovery:query,agents:delegate", ["discovery:query", "agents:delegate"]),
        ("discovery:query agents:delegate", ["discovery:query", "agents:delegate"]),
        ("mcp:tools:execute, *:query", ["mcp:tools:execute", "*:query"]),
        ("", []),
    ],
)
def test_scopes(value: str, tokens: list[str]) -> None:
    assert [str(t) for t in parse_scope(value).tokens] == tokens


@pytest.mark.parametrize("value", ["discovery", "Discovery:Query", "a::b", "a:b;c:d"])
def test_bad_scopes(value: str) -> None:
    assert code_of(parse_scope, value) == ErrorCode.INVALID_AUTHORITY_SCOPE


def test_multi_segment_scope_covers() -> None:
    wanted = ScopeToken("mcp:tools", "execute")
    assert parse_scope("mcp:tools:*").covers(wanted)
    assert not parse_scope("mcp:tools:read").covers(wanted)
    assert parse_scope("discovery:query, mcp:tools:read").covers("discovery:query")


def test_identity() -> None:
    ident = newer.parse_identity({**IDENT, "agent-id": HEX})
    assert ident is not None
    assert ident.agent_id == HEX.lower()  # 64-hex canonical ids in lowercase
    assert ident.principal_id == "usr-chris-hood"
    assert ident.scope.covers("discovery:query")
    assert ident.scope_header == "discovery:query agents:delegate"  # what -02 peers read
    assert newer.parse_identity({}) is None


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({"agent-id": "a"}, ErrorCode.MISSING_OWNER_ID),
        ({"owner-id": "o"}, ErrorCode.MISSING_AGENT_ID),
        ({"authority-scope": "discovery:query"}, ErrorCode.MISSING_AGENT_ID),
    ],
)
def test_identity_missing(headers: dict[str, str], code: str) -> None:
    assert code_of(newer.parse_identity, headers) == code


# -- DISCOVER bodies --------------------------------------------------------------


def test_discovery_01_envelope() -> None:
    nd = discover({"method": "DISCOVER", "task_id": "t", "parameters": {"intent": "x", "limit": 2}})
    assert nd.request is not None
    assert nd.request.params.intent == "x" and nd.request.params.limit == 2
    assert nd.task_id == "t"


def test_flat_and_base09_forms_mean_the_same_query() -> None:
    flat = discover({"intent": "audit", "limit": 2}).request
    env = discover({"parameters": {"intent": "audit", "limit": 2}}).request
    b09 = discover({"parameters": {"criteria": "audit", "max_results": 2}}).request
    filt = discover(
        {"criteria": {"intent": "audit"}, "max_results": 2, "filter": {"trust_tier_min": 1}}
    ).request
    assert flat is not None and env is not None and b09 is not None and filt is not None
    assert flat.params == env.params == b09.params
    assert filt.params.trust_tier_min == 1 and filt.params.limit == 2


def test_target_is_the_path() -> None:
    nd = discover({"target": "agents", "intent": "x"}, target=None)
    assert nd.request is not None
    assert code_of(discover, {"target": "methods", "intent": "x"}) == ErrorCode.UNKNOWN_PATH
    assert code_of(discover, {"target": "agents"}, IDENT, "/tools") == ErrorCode.INVALID_BODY


@pytest.mark.parametrize(
    ("doc", "code"),
    [
        ({"target": "agents"}, ErrorCode.MISSING_QUERY),  # never an unfiltered answer
        ({}, ErrorCode.MISSING_QUERY),
        ({"parameters": {"limit": 3}}, ErrorCode.MISSING_QUERY),
        ({"intent": "x", "parameters": {"limit": 2}}, ErrorCode.UNKNOWN_BODY_FIELD),
        (
            {"parameters": {"intent": "x", "limit": 2}, "max_results": 2},
            ErrorCode.UNKNOWN_BODY_FIELD,
        ),
        ({"parameters": {"intent": "x", "criteria": "y"}}, ErrorCode.UNKNOWN_BODY_FIELD),
        (
            {"parameters": {"limit": 2, "max_results": 3, "intent": "x"}},
            ErrorCode.UNKNOWN_BODY_FIELD,
        ),
        ({"parameters": []}, ErrorCode.INVALID_PARAMETERS),
        ({"intent": 3}, ErrorCode.INVALID_INTENT),
        ({"name": 3}, ErrorCode.INVALID_NAME),
        ({"name": "not a name"}, ErrorCode.INVALID_NAME),
        ({"method": "DESCRIBE", "intent": "x"}, ErrorCode.METHOD_MISMATCH),
    ],
)
def test_bodies_refused(doc: dict[str, Any], code: str) -> None:
    assert code_of(discover, doc) == code


def test_unknown_parameters_follow_the_profile_rule() -> None:
    """Unknown names go to unsupported_filters; a misspelled hard filter is 422."""
    nd = discover({"intent": "x", "private_ranking_knob": 1})
    assert nd.request is not None
    assert nd.request.params.profile.unsupported_filters == ("private_ranking_knob",)
    assert code_of(discover, {"intent": "x", "trust_tier_mn": 1}) == "misspelled_parameter"


def test_anonymous() -> None:
    bare = newer.parse_discover({}, b"", Limits(), "/")
    assert bare.request is None and not bare.has_query
    asked = newer.parse_discover({}, orjson.dumps({"intent": "x"}), Limits(), "/")
    assert asked.request is None and asked.has_query


def test_content_types() -> None:
    for ctype in ("application/vnd.agtp+json", "application/json"):
        assert discover({"intent": "x"}, {**IDENT, "content-type": ctype}).request is not None
    headers = {**IDENT, "content-type": "text/plain"}
    assert code_of(discover, {"intent": "x"}, headers) == ErrorCode.UNSUPPORTED_CONTENT_TYPE


def test_name_parameter() -> None:
    nd = discover({"name": "Solidity-Auditor.Auditor.TLD"})
    assert nd.name == AgentRef(name="solidity-auditor.auditor.tld")


# -- references to agents ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("solidity-auditor.auditor.tld", AgentRef(name="solidity-auditor.auditor.tld")),
        ("agtp://auditor.tld/agents/bookbot", AgentRef(name="bookbot.auditor.tld")),
        ("agtp://agtp.auditor.tld/agents/bookbot", AgentRef(name="bookbot.auditor.tld")),
        (HEX, AgentRef(canonical_id=HEX.lower())),
        (f"agtp://{HEX}", AgentRef(canonical_id=HEX.lower())),
        (f"agtp://{HEX}@agents.acme.com:9999", AgentRef(canonical_id=HEX.lower())),
        ("urn:profile:abc", AgentRef(canonical_id="urn:profile:abc")),
    ],
)
def test_agent_ref(text: str, ref: AgentRef) -> None:
    assert agent_ref(text) == ref


@pytest.mark.parametrize("text", ["", "a b", "agtp://", "x" * 400])
def test_bad_agent_refs(text: str) -> None:
    with pytest.raises(ValueError):
        agent_ref(text)


# -- DESCRIBE ---------------------------------------------------------------------


def describe(headers: dict[str, str], target: str | None = "/", doc: Any = None) -> Any:
    body = orjson.dumps(doc) if doc is not None else b""
    return newer.parse_describe(headers, body, Limits(), target)


def test_describe_targets() -> None:
    assert describe({}).target is None  # this ANS
    sol = "agtp://agtp.auditor.tld/agents/solidity-auditor"
    by_header = describe({"target-agent": sol})
    assert by_header.target == AgentRef(name="solidity-auditor.auditor.tld")
    assert by_header.request.identity is None
    assert by_header.request.canonical_id == "solidity-auditor.auditor.tld"  # gated as an agent
    assert describe({}, "/agents/bookbot.acme.tld").target == AgentRef(name="bookbot.acme.tld")
    lone = describe({"agent-id": HEX})  # the reference client's first version
    assert lone.target == AgentRef(canonical_id=HEX.lower()) and lone.request.identity is None
    asked = describe({**IDENT, "target-agent": HEX})
    assert asked.request.identity is not None and asked.target.canonical_id == HEX.lower()
    by_body = describe(IDENT, "/", {"parameters": {"canonical_id": HEX}})
    assert by_body.target.canonical_id == HEX.lower()
    # the path and Target-Agent may both name the agent: the same one, in any spelling
    both = describe({**IDENT, "target-agent": f"agtp://{HEX}"}, f"/agents/{HEX}")
    assert both.target == AgentRef(canonical_id=HEX.lower())


@pytest.mark.parametrize(
    ("headers", "target", "doc", "code"),
    [
        ({}, "/agents", None, ErrorCode.UNKNOWN_PATH),
        ({}, "/other", None, ErrorCode.UNKNOWN_PATH),
        ({"target-agent": "a b"}, "/", None, ErrorCode.INVALID_TARGET_AGENT),
        ({"target-agent": "bookbot.acme.tld"}, f"/agents/{HEX}", None,
         ErrorCode.INVALID_TARGET_AGENT),
        (IDENT, "/", {"parameters": {"canonical_id": 3}}, ErrorCode.INVALID_CANONICAL_ID),
        (IDENT, "/", {"parameters": {"intent": "x"}}, ErrorCode.UNKNOWN_BODY_FIELD),
        (IDENT, "/", {"target": "x"}, ErrorCode.UNKNOWN_BODY_FIELD),
    ],
)
def test_describe_refused(headers: dict[str, str], target: str, doc: Any, code: str) -> None:
    assert code_of(describe, headers, target, doc) == code


# -- -02: the body shape ------------------------------------------------------------


@pytest.mark.parametrize(
    "doc",
    [
        {"target": "agents"},
        {"intent": "audit", "limit": 2},
        {"method": "DISCOVER", "parameters": {"intent": "x"}, "limit": 2},
        {"method": "DISCOVER", "task_id": "t", "paramters": {"intent": "x"}},
    ],
)
def test_02_unknown_top_level_keys_are_422(doc: dict[str, Any]) -> None:
    with pytest.raises(AgtpError) as exc:
        parse_discover(OLD, orjson.dumps(doc), Limits())
    assert exc.value.code == ErrorCode.UNKNOWN_BODY_FIELD
    assert exc.value.status == 422


def test_02_envelope_keys_still_accepted() -> None:
    doc = {"method": "DISCOVER", "task_id": "t", "session_id": "s", "context": {}, "parameters": {}}
    assert parse_discover(OLD, orjson.dumps(doc), Limits()).task_id == "t"


def test_02_describe_honours_target_agent() -> None:
    req = parse_describe({**OLD, "target-agent": f"agtp://{HEX}"}, b"", Limits())
    assert req.canonical_id == HEX.lower()
    with pytest.raises(AgtpError) as exc:
        parse_describe(
            {**OLD, "target-agent": HEX},
            orjson.dumps({"parameters": {"canonical_id": "other"}}),
            Limits(),
        )
    assert exc.value.code == ErrorCode.INVALID_TARGET_AGENT


def test_02_describe_takes_a_name_parameter_and_refuses_any_other() -> None:
    def describe(params: dict[str, Any], **headers: str) -> Any:
        body = orjson.dumps({"method": "DESCRIBE", "task_id": "t", "parameters": params})
        return parse_describe({**OLD, **headers}, body, Limits())

    assert describe({"name": "solidity-auditor.chainguard-audits.example"}).canonical_id == (
        "solidity-auditor.chainguard-audits.example"
    )
    assert describe({"name": f"agtp://{HEX}"}).canonical_id == HEX.lower()
    assert describe({"name": f"agtp://{HEX}", "canonical_id": HEX.lower()}).canonical_id == (
        HEX.lower()
    )
    assert describe({"agent_id": HEX}).canonical_id == HEX.lower()  # as the newer DESCRIBE
    assert describe({}).canonical_id is None  # this ANS itself
    for params, field in (
        ({"agent": HEX}, "agent"),  # never this ANS's own manifest for a named agent
        ({"nme": "x.example"}, "nme"),
        ({"name": 5}, "name"),
        ({"name": f"agtp://{HEX}", "canonical_id": "other"}, "name"),
    ):
        with pytest.raises(AgtpError) as exc:
            describe(params)
        assert (exc.value.status, exc.value.task_id) == (422, "t")
        assert field in exc.value.message
