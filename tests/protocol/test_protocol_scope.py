"""Authority-Scope grammar: parsing, rejection, wildcard coverage and
intersection (``ans.protocol.scope``)."""

from __future__ import annotations

import pytest
from ans.protocol.errors import AgtpError, InvalidAuthorityScope
from ans.protocol.scope import (
    MAX_SCOPE_HEADER,
    MAX_SCOPE_TOKENS,
    AuthorityScope,
    ScopeToken,
    parse_authority_scope,
    parse_token,
)


def tokens(value: str) -> list[str]:
    return [str(t) for t in parse_authority_scope(value).tokens]


# -- parsing -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (
            "discovery:query agents:delegate audit:*",
            ["discovery:query", "agents:delegate", "audit:*"],
        ),
        ("*:query", ["*:query"]),
        ("*:*", ["*:*"]),
        ("discovery:query    agents:delegate", ["discovery:query", "agents:delegate"]),
        ("  discovery:query  ", ["discovery:query"]),
        ("a1.b_c-d:x-y.z_0", ["a1.b_c-d:x-y.z_0"]),
    ],
    ids=["three-tokens", "wild-domain", "wild-both", "multiple-spaces", "padded", "punctuation"],
)
def test_parse_valid(header: str, expected: list[str]) -> None:
    assert tokens(header) == expected


def test_parse_splits_domain_and_action() -> None:
    scope = parse_authority_scope("discovery:query *:register")
    assert scope.tokens == (ScopeToken("discovery", "query"), ScopeToken("*", "register"))


def test_duplicates_removed_order_kept() -> None:
    assert tokens("b:x a:y b:x a:y") == ["b:x", "a:y"]
    assert str(parse_authority_scope("b:x  a:y b:x")) == "b:x a:y"


def test_max_tokens_exactly_accepted() -> None:
    header = " ".join(f"d{i}:a" for i in range(MAX_SCOPE_TOKENS))
    assert len(parse_authority_scope(header).tokens) == MAX_SCOPE_TOKENS


@pytest.mark.parametrize(
    "header",
    [
        "Discovery:query",
        "discovery:Query",
        "a:b:c",
        "discovery",
        "discovery:",
        ":query",
        ":",
        "",
        "   ",
        "discovery:qüery",
        "d\u00e9couverte:query",
        "discovery:query\tagents:delegate",
        "discovery:query\nagents:delegate",
        "discovery:query?x=1",
        "discovery/x:query",
        "discovery:que/ry",
        "discovery:query,agents:delegate",
        "-discovery:query",
        "**:query",
        "disc*:query",
        "discovery:query agents",
    ],
    ids=[
        "uppercase-domain",
        "uppercase-action",
        "two-colons",
        "no-colon",
        "empty-action",
        "empty-domain",
        "only-colon",
        "empty",
        "only-spaces",
        "non-ascii-action",
        "non-ascii-domain",
        "tab-separator",
        "newline-separator",
        "question-mark",
        "slash-domain",
        "slash-action",
        "comma-separator",
        "leading-hyphen",
        "double-star",
        "partial-wildcard",
        "one-bad-token-of-two",
    ],
)
def test_parse_invalid(header: str) -> None:
    with pytest.raises(InvalidAuthorityScope) as info:
        parse_authority_scope(header)
    err = info.value
    assert isinstance(err, AgtpError)
    assert err.status == 400
    assert err.code == "invalid_authority_scope"


def test_too_many_tokens_rejected() -> None:
    header = " ".join(f"d{i}:a" for i in range(MAX_SCOPE_TOKENS + 1))
    assert len(header) < MAX_SCOPE_HEADER  # so the token count is what trips
    with pytest.raises(InvalidAuthorityScope) as info:
        parse_authority_scope(header)
    assert info.value.code == "invalid_authority_scope"


def test_header_over_max_length_rejected() -> None:
    # one valid token padded with spaces: only the length is wrong
    header = "discovery:query" + " " * (MAX_SCOPE_HEADER - len("discovery:query") + 1)
    assert len(header) == MAX_SCOPE_HEADER + 1
    with pytest.raises(InvalidAuthorityScope) as info:
        parse_authority_scope(header)
    assert info.value.code == "invalid_authority_scope"
    # the same token padded to exactly the limit is fine
    assert tokens(header[:-1]) == ["discovery:query"]


def test_overlong_token_part_rejected() -> None:
    assert str(parse_token("a" * 64 + ":q")) == "a" * 64 + ":q"
    with pytest.raises(InvalidAuthorityScope):
        parse_token("a" * 65 + ":q")


# -- coverage ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("granted", "required", "covered"),
    [
        ("discovery:*", "discovery:query", True),
        ("*:query", "discovery:query", True),
        ("*:*", "discovery:query", True),
        ("*:*", "anything:else", True),
        ("discovery:query", "discovery:query", True),
        ("discovery:register", "discovery:query", False),
        ("query:discovery", "discovery:query", False),
        ("discovery:*", "agents:query", False),
        ("*:query", "discovery:register", False),
        # a concrete grant does not cover a wildcard requirement
        ("discovery:query", "discovery:*", False),
        ("discovery:query", "*:query", False),
        ("discovery:query", "*:*", False),
    ],
)
def test_covers(granted: str, required: str, covered: bool) -> None:
    scope = parse_authority_scope(granted)
    assert scope.covers(required) is covered
    assert scope.covers(parse_token(required)) is covered


def test_covers_any_token_of_several() -> None:
    scope = parse_authority_scope("agents:delegate audit:* discovery:register")
    assert scope.covers("audit:read")
    assert scope.covers("discovery:register")
    assert not scope.covers("discovery:query")


def test_covers_rejects_malformed_requirement() -> None:
    with pytest.raises(InvalidAuthorityScope):
        parse_authority_scope("*:*").covers("Discovery:query")


# -- intersection --------------------------------------------------------------------


def test_intersect_keeps_tokens_of_self_granted_by_other() -> None:
    requested = parse_authority_scope("discovery:query agents:delegate audit:read")
    policy = parse_authority_scope("discovery:* audit:read")
    assert str(requested.intersect(policy)) == "discovery:query audit:read"


def test_intersect_with_full_wildcard_is_identity() -> None:
    requested = parse_authority_scope("b:x a:y")
    assert requested.intersect(parse_authority_scope("*:*")) == requested


def test_intersect_disjoint_is_empty() -> None:
    result = parse_authority_scope("a:x").intersect(parse_authority_scope("b:x"))
    assert result.tokens == ()
    assert not result.covers("a:x")


def test_intersect_is_not_symmetric_for_wildcards() -> None:
    # A wildcard on self is kept only if other grants the whole wildcard.
    wide = parse_authority_scope("discovery:*")
    narrow = parse_authority_scope("discovery:query")
    assert wide.intersect(narrow).tokens == ()
    assert narrow.intersect(wide) == narrow


def test_intersect_result_never_exceeds_either_side() -> None:
    a = parse_authority_scope("discovery:query discovery:register audit:* agents:delegate")
    b = parse_authority_scope("discovery:* audit:read *:delegate")
    result = a.intersect(b)
    assert str(result) == "discovery:query discovery:register agents:delegate"
    for t in result.tokens:
        assert a.covers(t) and b.covers(t)


def test_authority_scope_is_immutable_value() -> None:
    scope = AuthorityScope((ScopeToken("a", "b"),))
    assert scope == parse_authority_scope("a:b")
    with pytest.raises(AttributeError):
        scope.tokens = ()  # type: ignore[misc]
