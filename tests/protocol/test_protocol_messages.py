"""DISCOVER request parsing (``ans.protocol.messages``) and the HTTP binding
(``ans.protocol.binding``): identity headers, envelope, parameter
validation, query digest, and the error-code registry."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import pytest
from ans.protocol import binding
from ans.protocol.errors import (
    ERROR_CODES,
    AgtpError,
    BodyTooLarge,
    ErrorCode,
    HeaderTooLarge,
    InvalidBody,
    InvalidHeader,
    InvalidParameter,
    MalformedJson,
    MethodMismatch,
    MissingHeader,
    TaskIdMismatch,
    UnsupportedContentType,
    UnsupportedVersion,
)
from ans.protocol.jcs import canonicalize
from ans.protocol.messages import (
    MAX_TASK_ID_LEN,
    Limits,
    is_task_id,
    parse_activate,
    parse_describe,
    parse_discover,
    parse_lifecycle,
    task_id_hint,
)

HEADERS = {
    "agent-id": "agtp://acme.example/agents/buyer",
    "principal-id": "alice@acme.example",
    "authority-scope": "discovery:query",
}


def body(parameters: Any = None, **envelope: Any) -> bytes:
    doc: dict[str, Any] = {"method": "DISCOVER", **envelope}
    if parameters is not None:
        doc["parameters"] = parameters
    return orjson.dumps(doc)


def discover(parameters: Any = None, headers: dict[str, str] | None = None, **envelope: Any):
    return parse_discover(
        headers if headers is not None else HEADERS, body(parameters, **envelope), Limits()
    )


# Every code the tests below expect; each must be registered in ERROR_CODES
# (checked by test_raised_code_is_registered, one case per code).
CODES_UNDER_TEST = (
    "missing_agent_id",
    "missing_principal_id",
    "missing_authority_scope",
    "invalid_agent_id",
    "invalid_authority_scope",
    "unsupported_agtp_version",
    "unsupported_content_type",
    "malformed_json",
    "body_too_large",
    "method_mismatch",
    "task_id_mismatch",
    "invalid_body",
    "invalid_parameters",
    "invalid_limit",
    "invalid_trust_tier_min",
    "invalid_behavioral_trust_min",
    "invalid_governance_zone",
    "invalid_org_domain",
    "invalid_scope_negotiate",
    "invalid_capability_domains",
    "invalid_intent",
    "missing_agtp_method",
    "invalid_agtp_method",
    "header_too_large",
    "duplicate_header",
    "invalid_federation_path",
    "invalid_federation_budget",
    "invalid_task_id",
)


def expect(exc_type: type[AgtpError], status: int, code: str, fn, *args: Any) -> AgtpError:
    with pytest.raises(exc_type) as info:
        fn(*args)
    err = info.value
    assert err.status == status
    assert err.code == code
    assert code in CODES_UNDER_TEST, f"add {code!r} to CODES_UNDER_TEST"
    assert err.to_error_object() == {"code": code, "message": err.message}
    return err


@pytest.mark.parametrize("code", CODES_UNDER_TEST)
def test_raised_code_is_registered(code: str) -> None:
    assert code in ERROR_CODES, f"code {code!r} is raised but not registered in ERROR_CODES"


# -- happy path and defaults ----------------------------------------------------------


def test_minimal_request_defaults() -> None:
    req = discover({"intent": "audit a solidity contract"})
    assert req.identity.agent_id == HEADERS["agent-id"]
    assert req.identity.principal_id == HEADERS["principal-id"]
    assert req.identity.scope.covers("discovery:query")
    assert req.identity.session_id is None
    p = req.params
    assert p.intent == "audit a solidity contract"
    assert p.limit == 10 == Limits().default_limit
    assert p.scope_negotiate is False
    assert p.capability_domains is None
    assert p.trust_tier_min is None
    assert p.behavioral_trust_min is None
    assert p.governance_zone is None
    assert p.org_domain is None


def test_empty_body_uses_defaults() -> None:
    req = parse_discover(HEADERS, b"", Limits())
    assert req.params.limit == 10
    assert req.task_id is None
    assert req.query_digest == hashlib.sha256(b"{}").hexdigest()


def test_all_parameters_accepted_and_normalized() -> None:
    req = discover(
        {
            "intent": "  find \n  an   auditor ",
            "capability_domains": ["tools", "methods", "tools"],
            "trust_tier_min": 2,
            "behavioral_trust_min": 1,
            "governance_zone": "zone:finance",
            "org_domain": "Acme.Example.",
            "limit": 100,
            "scope_negotiate": True,
        }
    )
    p = req.params
    assert p.intent == "find an auditor"
    assert p.capability_domains == ("methods", "tools")
    assert p.trust_tier_min == 2
    assert p.behavioral_trust_min == 1.0 and isinstance(p.behavioral_trust_min, float)
    assert p.governance_zone == "zone:finance"
    assert p.org_domain == "acme.example"
    assert p.limit == 100
    assert p.scope_negotiate is True


def test_capability_domains_comma_string_accepted() -> None:
    assert discover({"capability_domains": "methods,tools"}).params.capability_domains == (
        "methods",
        "tools",
    )


def test_task_id_from_header_or_body() -> None:
    assert parse_discover({**HEADERS, "task-id": "t-1"}, body({}), Limits()).task_id == "t-1"
    assert discover({}, task_id="t-2").task_id == "t-2"
    same = parse_discover({**HEADERS, "task-id": "t-3"}, body({}, task_id="t-3"), Limits())
    assert same.task_id == "t-3"


@pytest.mark.parametrize("params", [None, [], "x", 3])
def test_parameters_that_are_no_object_are_refused_with_the_bodys_task_id(params: Any) -> None:
    doc = {"method": "DISCOVER", "task_id": "t-9", "parameters": params}
    with pytest.raises(AgtpError) as exc:
        parse_discover(HEADERS, orjson.dumps(doc), Limits())
    assert (exc.value.status, exc.value.task_id) == (422, "t-9")


def test_lowercase_body_method_accepted() -> None:
    assert (
        parse_discover(HEADERS, orjson.dumps({"method": "discover"}), Limits()).params.limit == 10
    )


# -- identity headers -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "code"),
    [
        ("agent-id", "missing_agent_id"),
        ("principal-id", "missing_principal_id"),
        ("authority-scope", "missing_authority_scope"),
    ],
)
def test_missing_identity_header(header: str, code: str) -> None:
    headers = {k: v for k, v in HEADERS.items() if k != header}
    expect(MissingHeader, 400, code, parse_discover, headers, body({}), Limits())
    blank = {**HEADERS, header: "   "}
    expect(MissingHeader, 400, code, parse_discover, blank, body({}), Limits())


def test_invalid_agent_id_header() -> None:
    headers = {**HEADERS, "agent-id": "bad\x01id"}
    expect(InvalidHeader, 400, "invalid_agent_id", parse_discover, headers, b"", Limits())


def test_invalid_authority_scope_header() -> None:
    headers = {**HEADERS, "authority-scope": "Discovery:Query"}
    expect(AgtpError, 400, "invalid_authority_scope", parse_discover, headers, b"", Limits())


# -- envelope headers -----------------------------------------------------------------


def test_unsupported_agtp_version() -> None:
    headers = {**HEADERS, "agtp-version": "AGTP/2.0"}
    expect(
        UnsupportedVersion, 400, "unsupported_agtp_version", parse_discover, headers, b"", Limits()
    )


@pytest.mark.parametrize("version", ["AGTP/1.0", "AGTP/1", " AGTP/1.1 "])
def test_supported_agtp_versions(version: str) -> None:
    assert parse_discover({**HEADERS, "agtp-version": version}, b"", Limits()).params.limit == 10


def test_unsupported_content_type() -> None:
    headers = {**HEADERS, "content-type": "text/plain"}
    expect(
        UnsupportedContentType,
        400,
        "unsupported_content_type",
        parse_discover,
        headers,
        body({}),
        Limits(),
    )


@pytest.mark.parametrize(
    "ctype", ["application/json", "application/agtp+json", "Application/JSON; charset=utf-8"]
)
def test_accepted_content_types(ctype: str) -> None:
    assert parse_discover({**HEADERS, "content-type": ctype}, body({}), Limits()).params.limit == 10


# -- envelope body ---------------------------------------------------------------------


def test_malformed_json_body() -> None:
    expect(MalformedJson, 400, "malformed_json", parse_discover, HEADERS, b'{"method": ', Limits())


@pytest.mark.parametrize(
    "data", [b" ", b"\x0b", b"\x0c", b"\n", b" \t\r\n"], ids=["sp", "vt", "ff", "lf", "mixed"]
)
@pytest.mark.parametrize("parse", [parse_discover, parse_describe], ids=["discover", "describe"])
def test_a_blank_body_is_not_an_empty_one(parse: Any, data: bytes) -> None:
    """Only a truly empty body means "no parameters"; whitespace (JSON's, or
    \x0b/\x0c, which are not JSON whitespace) must parse, and does not."""
    expect(MalformedJson, 400, "malformed_json", parse, HEADERS, data, Limits())


def test_body_too_large() -> None:
    limits = Limits(max_body_bytes=32)
    expect(
        BodyTooLarge,
        400,
        "body_too_large",
        parse_discover,
        HEADERS,
        body({"intent": "x" * 64}),
        limits,
    )


def test_method_mismatch() -> None:
    data = orjson.dumps({"method": "DESCRIBE", "parameters": {}})
    expect(MethodMismatch, 400, "method_mismatch", parse_discover, HEADERS, data, Limits())


def test_task_id_mismatch() -> None:
    headers = {**HEADERS, "task-id": "task-1"}
    expect(
        TaskIdMismatch,
        400,
        "task_id_mismatch",
        parse_discover,
        headers,
        body({}, task_id="task-2"),
        Limits(),
    )


# What a hostile client puts in the body's task_id to split or forge response
# header lines, plus values the Task-ID header rule refuses anyway.
BAD_TASK_IDS: list[Any] = [
    "a\r\nSet-Cookie: pwn=1\r\nX-Injected: yes",
    "x\r\n\r\nAGTP/1.0 200 OK\r\nContent-Length: 0",
    "lf\nonly",
    "cr\ronly",
    "nul\x00byte",
    "tab\there",
    "del\x7f",
    "caf\u00e9",
    "\u65e5\u672c",
    " padded",
    "padded ",
    "",
    "x" * (MAX_TASK_ID_LEN + 1),
    5,
    True,
    ["t-1"],
    {"id": "t-1"},
]


@pytest.mark.parametrize("value", BAD_TASK_IDS)
def test_body_task_id_obeys_the_task_id_header_rule(value: Any) -> None:
    err = expect(
        AgtpError,
        400,
        "invalid_task_id",
        parse_discover,
        HEADERS,
        body({}, task_id=value),
        Limits(),
    )
    assert "task_id" in err.message and "printable ASCII" in err.message
    if isinstance(value, str) and value:
        assert value not in err.message  # the message does not echo it either
    # Same rule for every method's envelope, and with a valid Task-ID header too.
    data = orjson.dumps({"method": "DESCRIBE", "task_id": value})
    expect(AgtpError, 400, "invalid_task_id", parse_describe, {}, data, Limits())
    headers = {**HEADERS, "task-id": "t-1"}
    expect(
        AgtpError,
        400,
        "invalid_task_id",
        parse_discover,
        headers,
        body({}, task_id=value),
        Limits(),
    )


@pytest.mark.parametrize("value", ["t", "task-disc-001", "with inner space", "x" * MAX_TASK_ID_LEN])
def test_valid_body_task_id_is_kept_as_sent(value: str) -> None:
    assert is_task_id(value)
    assert discover({}, task_id=value).task_id == value


@pytest.mark.parametrize("value", [v for v in BAD_TASK_IDS if isinstance(v, str) and v.strip()])
def test_task_id_header_rule_is_the_same(value: str) -> None:
    assert not is_task_id(value)
    if value.strip() == value:  # the header is trimmed first; everything else is refused
        headers = {**HEADERS, "task-id": value}
        expect(InvalidHeader, 400, "invalid_task_id", discover, {}, headers)
        assert task_id_hint(headers) is None


def parse_error(parser: Any, headers: dict[str, str], payload: bytes) -> AgtpError:
    try:
        parser(headers, payload, Limits())
    except AgtpError as exc:
        return exc
    raise AssertionError("no error")


def test_a_refusal_after_the_envelope_carries_its_task_id() -> None:
    """An error raised once the envelope has parsed carries the request's
    Task-ID (the header's, else the body's), for the error answer to echo;
    one raised before it, or about the task id itself, carries none."""
    bad_limit = body({"limit": 0}, task_id="t-body")
    exc = parse_error(parse_discover, HEADERS, bad_limit)
    assert (exc.code, exc.task_id) == ("invalid_limit", "t-body")
    exc = parse_error(parse_discover, {**HEADERS, "task-id": " t-h "}, body({"limit": 0}))
    assert (exc.code, exc.task_id) == ("invalid_limit", "t-h")
    describe = body({"canonical_id": "a b"}, method="DESCRIBE", task_id="t-d")
    exc = parse_error(parse_describe, HEADERS, describe)
    assert (exc.code, exc.task_id) == ("invalid_canonical_id", "t-d")
    exc = parse_error(
        parse_activate, HEADERS, body({"manifest": 1}, method="ACTIVATE", task_id="t-a")
    )
    assert (exc.code, exc.task_id) == ("invalid_manifest", "t-a")
    exc = parse_error(parse_lifecycle, HEADERS, body({}, method="LIFECYCLE", task_id="t-l"))
    assert (exc.code, exc.task_id) == ("invalid_event", "t-l")
    for value in BAD_TASK_IDS:  # the task id itself refused: nothing to echo
        assert parse_error(parse_discover, HEADERS, body({}, task_id=value)).task_id is None
    assert parse_error(parse_discover, HEADERS, b"[1]").task_id is None
    assert parse_error(parse_discover, HEADERS, b'{"task_id": "t", "task_id": "u"}').task_id is None
    exc = parse_error(parse_describe, HEADERS, body({}, task_id="t-2"))  # method_mismatch
    assert exc.task_id is None


@pytest.mark.parametrize("data", [b"[]", b'[{"method": "DISCOVER"}]', b'"DISCOVER"', b"null"])
def test_body_not_an_object(data: bytes) -> None:
    expect(InvalidBody, 400, "invalid_body", parse_discover, HEADERS, data, Limits())


@pytest.mark.parametrize("params", [[], "limit=5", 5, None])
def test_parameters_not_an_object(params: Any) -> None:
    data = orjson.dumps({"method": "DISCOVER", "parameters": params})
    err = expect(
        InvalidParameter, 422, "invalid_parameters", parse_discover, HEADERS, data, Limits()
    )
    assert "parameters" in err.message


# -- parameter validation --------------------------------------------------------------

INVALID_PARAMETERS = [
    ("limit", 0),
    ("limit", 100_000),
    ("limit", 101),
    ("limit", -1),
    ("limit", "5"),
    ("limit", True),
    ("limit", 2.5),
    ("limit", 5.0),
    ("trust_tier_min", 0),
    ("trust_tier_min", 4),
    ("trust_tier_min", 7),
    ("trust_tier_min", "1"),
    ("trust_tier_min", True),
    ("trust_tier_min", 1.0),
    ("behavioral_trust_min", -0.1),
    ("behavioral_trust_min", 2),
    ("behavioral_trust_min", 1.0001),
    ("behavioral_trust_min", "0.5"),
    ("behavioral_trust_min", True),
    ("governance_zone", "finance"),
    ("governance_zone", "zone:"),
    ("governance_zone", "zone:Finance"),
    ("governance_zone", 5),
    ("org_domain", "not a domain"),
    ("org_domain", "-acme.example"),
    ("org_domain", "acme..example"),
    ("org_domain", 7),
    ("scope_negotiate", "yes"),
    ("scope_negotiate", 1),
    ("capability_domains", ["methods", "bogus"]),
    ("capability_domains", "methods,bogus"),
    ("capability_domains", [1, 2]),
    ("capability_domains", {"methods": True}),
    ("intent", "x" * 5000),
    ("intent", 12),
    ("intent", ["find", "agent"]),
]


@pytest.mark.parametrize(
    ("name", "value"),
    INVALID_PARAMETERS,
    ids=[f"{n}={str(v)[:20]!r}" for n, v in INVALID_PARAMETERS],
)
def test_invalid_parameter(name: str, value: Any) -> None:
    err = expect(InvalidParameter, 422, f"invalid_{name}", discover, {name: value})
    assert name in err.message
    assert err.parameter == name  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("limit", 1),
        ("limit", 100),
        ("trust_tier_min", 1),
        ("trust_tier_min", 3),
        ("behavioral_trust_min", 0),
        ("behavioral_trust_min", 0.5),
        ("org_domain", "localhost"),
        ("intent", "x" * 2000),
        ("scope_negotiate", False),
    ],
)
def test_boundary_values_accepted(name: str, value: Any) -> None:
    discover({name: value})


def test_a_blank_intent_is_refused_and_an_absent_one_asks_on_the_filters() -> None:
    """A blank text asks for nothing: a 422, never the index ranked on trust
    alone (which a DISCOVER without an intent asks for, as the draft allows)."""
    for blank in (" \t\n ", ""):
        with pytest.raises(InvalidParameter) as info:
            discover({"intent": blank})
        assert info.value.code == ErrorCode.INVALID_INTENT and "blank" in info.value.message
    assert discover({"trust_tier_min": 2}).params.intent is None


def test_limit_bound_follows_limits() -> None:
    limits = Limits(default_limit=3, max_limit=5)
    assert parse_discover(HEADERS, body({}), limits).params.limit == 3
    with pytest.raises(InvalidParameter) as info:
        parse_discover(HEADERS, body({"limit": 6}), limits)
    assert info.value.code == "invalid_limit"


def test_uncanonicalizable_parameters_rejected() -> None:
    # the digest needs JCS, which refuses integers beyond 2**53
    data = b'{"method": "DISCOVER", "parameters": {"extra": 99999999999999999999}}'
    expect(InvalidParameter, 422, "invalid_parameters", parse_discover, HEADERS, data, Limits())


# -- query digest ----------------------------------------------------------------------


def test_query_digest_is_sha256_of_jcs_parameters() -> None:
    params = {
        "intent": "audit  contracts",
        "limit": 5,
        "capability_domains": ["tools"],
        "behavioral_trust_min": 0.5,
        "x-extension": {"b": 1, "a": [1, 2]},
    }
    req = discover(params)
    assert req.query_digest == hashlib.sha256(canonicalize(params)).hexdigest()
    # digest is over the parameters as sent, not the normalized ones
    assert req.params.intent == "audit contracts"


def test_query_digest_independent_of_key_order() -> None:
    a = b'{"method":"DISCOVER","parameters":{"limit":5,"intent":"x","org_domain":"acme.example"}}'
    b = b'{"parameters":{"org_domain":"acme.example","intent":"x","limit":5},"method":"DISCOVER"}'
    da = parse_discover(HEADERS, a, Limits()).query_digest
    db = parse_discover(HEADERS, b, Limits()).query_digest
    assert da == db
    assert len(da) == 64 and da == da.lower()


def test_query_digest_changes_with_parameters() -> None:
    assert discover({"limit": 5}).query_digest != discover({"limit": 6}).query_digest


# -- binding -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "headers", "expected"),
    [
        ("DISCOVER", "/anything", {}, "DISCOVER"),
        ("discover", "/", {}, "DISCOVER"),
        ("POST", "/agtp", {"agtp-method": "discover"}, "DISCOVER"),
        ("POST", "/agtp/", {"agtp-method": " describe "}, "DESCRIBE"),
        ("GET", "/x", {}, None),
        ("POST", "/other", {"agtp-method": "DISCOVER"}, None),
        ("HEAD", "/agtp", {}, None),
    ],
)
def test_agtp_method(method: str, path: str, headers: dict[str, str], expected: str | None) -> None:
    assert binding.agtp_method(method, path, headers) == expected


@pytest.mark.parametrize("headers", [{}, {"agtp-method": "  "}])
def test_post_agtp_without_method_header(headers: dict[str, str]) -> None:
    expect(MissingHeader, 400, "missing_agtp_method", binding.agtp_method, "POST", "/agtp", headers)


@pytest.mark.parametrize("value", ["DIS COVER", "1DISCOVER", "DISCOVER?", "X" * 33])
def test_post_agtp_with_bad_method_header(value: str) -> None:
    expect(
        InvalidHeader,
        400,
        "invalid_agtp_method",
        binding.agtp_method,
        "POST",
        "/agtp",
        {"agtp-method": value},
    )


def test_header_map_lowercases_and_joins() -> None:
    raw = [(b"Agent-ID", b"a"), (b"Accept", b"x"), (b"accept", b"y")]
    assert binding.header_map(raw) == {"agent-id": "a", "accept": "x, y"}


def test_header_map_rejects_oversize_value() -> None:
    raw = [(b"x-big", b"v" * binding.MAX_HEADER_BYTES)]
    expect(HeaderTooLarge, 400, "header_too_large", binding.header_map, raw)


def test_header_map_rejects_too_many_fields() -> None:
    raw = [(f"x-h{i}".encode(), b"v") for i in range(binding.MAX_HEADER_COUNT + 1)]
    expect(HeaderTooLarge, 400, "header_too_large", binding.header_map, raw)
    assert len(binding.header_map(raw[:-1])) == binding.MAX_HEADER_COUNT


@pytest.mark.parametrize(
    "name", [b"agent-id", b"Principal-ID", b"authority-scope", b"task-id", b"agtp-method"]
)
def test_header_map_rejects_repeated_identity_header(name: bytes) -> None:
    raw = [(name, b"one"), (name.lower(), b"two")]
    expect(InvalidHeader, 400, "duplicate_header", binding.header_map, raw)


def test_task_id_of_refused_headers() -> None:
    dup = [(b"task-id", b"t-7"), (b"principal-id", b"a"), (b"principal-id", b"b")]
    assert binding.refused_headers_task_id(dup) == "t-7"
    assert binding.refused_headers_task_id([(b"Task-ID", b" t-8 ")]) == "t-8"
    assert binding.refused_headers_task_id([(b"task-id", b"a"), (b"task-id", b"b")]) is None
    assert binding.refused_headers_task_id([(b"task-id", b"x" * 1000)]) is None
    assert binding.refused_headers_task_id([(b"x", b"y")] * 200 + [(b"task-id", b"t")]) is None


def test_response_headers() -> None:
    headers = dict(binding.response_headers(200, "t-1", "agtp://ans.example"))
    assert headers[b"agtp-version"] == b"AGTP/1.0"
    assert headers[b"agtp-status"] == b"200"
    assert headers[b"task-id"] == b"t-1"
    assert headers[b"server-agent-id"] == b"agtp://ans.example"
    assert headers[b"content-type"] == b"application/agtp+json"
    bare = dict(binding.response_headers(204, None, "s", body=False))
    assert b"task-id" not in bare and b"content-type" not in bare


@pytest.mark.parametrize("value", [v for v in BAD_TASK_IDS if isinstance(v, str)])
def test_response_headers_never_send_an_invalid_task_id(value: str) -> None:
    """Defence in depth: whoever passes the task id, no CR/LF/NUL/non-ASCII
    (or over-long) value becomes a response header; the header is left out."""
    headers = binding.response_headers(400, value, "agtp://ans.example")
    assert [n for n, _ in headers] == [
        b"agtp-version",
        b"agtp-status",
        b"server-agent-id",
        b"content-type",
    ]
    for _, v in headers:
        assert all(0x20 <= c < 0x7F for c in v)


# -- federation headers ---------------------------------------------------------------


def test_federation_headers_parsed() -> None:
    kid = "3DU7x0AyenMppSugvNAjqRrmZV-JNrl_180y_oPpfc0"
    req = discover(
        {"intent": "x"},
        headers={
            **HEADERS,
            "agtp-federation-path": f"{kid}, other_ans-1",
            "agtp-federation-budget-ms": "1500",
        },
    )
    assert req.federation_path == (kid, "other_ans-1")
    assert req.federation_budget_ms == 1500
    assert req.identity.scope_header == "discovery:query"
    plain = discover({"intent": "x"})
    assert plain.federation_path == () and plain.federation_budget_ms is None


@pytest.mark.parametrize(
    "value",
    ["a,,b", "has space", "x" * 129, ",".join(["a"] * 17), "a;b", "é"],
)
def test_invalid_federation_path(value: str) -> None:
    headers = {**HEADERS, "agtp-federation-path": value}
    expect(InvalidHeader, 400, "invalid_federation_path", discover, {"intent": "x"}, headers)


@pytest.mark.parametrize("value", ["0", "-5", "1.5", "abc", "600001", ""])
def test_invalid_federation_budget(value: str) -> None:
    headers = {**HEADERS, "agtp-federation-budget-ms": value}
    expect(InvalidHeader, 400, "invalid_federation_budget", discover, {"intent": "x"}, headers)
