"""The dialect table (protocol/dialect.py), the request line with a path, and
what changes per dialect in an answer: status codes and code spelling."""

from __future__ import annotations

from pathlib import Path

import pytest
from ans.protocol.dialect import Dialect, code_for, recognise, status_for
from ans.protocol.errors import AgtpError, ErrorCode
from ans.protocol.native import NativeParser, encode_request
from ans.protocol.status import REASON

NEWER, OLD = Dialect.NEWER, Dialect.AGTP_02
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dialect"


@pytest.mark.parametrize(
    ("headers", "target", "dialect"),
    [
        ({"content-type": "application/vnd.agtp+json"}, None, NEWER),
        ({"content-type": "application/vnd.agtp+json; charset=utf-8"}, None, NEWER),
        ({"owner-id": "usr-1"}, None, NEWER),
        ({"target-agent": "a.b"}, None, NEWER),
        ({}, "/", NEWER),
        ({}, "/agents", NEWER),
        ({"authority-scope": "discovery:query, agents:delegate"}, None, NEWER),
        ({"agtp-version": "AGTP/1.0"}, None, OLD),
        ({"principal-id": "usr-1"}, None, OLD),
        ({"content-type": "application/agtp+json"}, None, OLD),
        # nothing either way: today's behaviour
        ({}, None, OLD),
        ({"agent-id": "a", "authority-scope": "discovery:query"}, None, OLD),
        ({"content-type": "application/json"}, None, OLD),
        # both: ambiguous, -02 wins (a -02 client sees no change)
        ({"principal-id": "p", "owner-id": "o"}, None, OLD),
        ({"agtp-version": "AGTP/1.0"}, "/agents", OLD),
        ({"content-type": "application/agtp+json", "authority-scope": "a:b, c:d"}, None, OLD),
        ({"principal-id": "p", "content-type": "application/vnd.agtp+json"}, None, OLD),
    ],
)
def test_recognise(headers: dict[str, str], target: str | None, dialect: Dialect) -> None:
    assert recognise(headers, target) is dialect


def test_status_codes_per_dialect() -> None:
    assert [status_for(NEWER, s) for s in (451, 452, 453)] == [455, 456, 457]
    assert [status_for(OLD, s) for s in (451, 452, 453)] == [451, 452, 453]
    for s in (200, 400, 401, 404, 422, 429, 500, 503):
        assert status_for(NEWER, s) == s
    assert {REASON[s] for s in (262, 455, 457)} == {
        "Authorization Required",
        "Scope Violation",
        "Zone Violation",
    }


def test_codes_are_kebab_case_in_the_newer_dialect() -> None:
    assert code_for(NEWER, ErrorCode.SCOPE_VIOLATION) == "scope-violation"
    assert code_for(OLD, ErrorCode.SCOPE_VIOLATION) == "scope_violation"


@pytest.mark.parametrize(
    ("line", "method", "target"),
    [
        (b"AGTP/1.0 DISCOVER", "DISCOVER", None),
        (b"AGTP/1.0 DISCOVER /", "DISCOVER", "/"),
        (b"AGTP/1.0 DISCOVER /agents", "DISCOVER", "/agents"),
        (
            b"AGTP/1.0 DESCRIBE /agents/bookbot?format=json",
            "DESCRIBE",
            "/agents/bookbot?format=json",
        ),
    ],
)
def test_request_line_with_a_path(line: bytes, method: str, target: str | None) -> None:
    (req,) = NativeParser().feed(line + b"\r\n\r\n")
    assert (req.method, req.target) == (method, target)


@pytest.mark.parametrize(
    "line",
    [
        b"AGTP/1.0 DISCOVER agents",  # not path-absolute
        b"AGTP/1.0 DISCOVER /agents#frag",  # -09: a fragment is malformed
        b"AGTP/1.0 DISCOVER /a b",
        b"AGTP/1.0 DISCOVER  /",
        b"AGTP/1.0 DISCOVER /" + b"a" * 2048,
    ],
)
def test_bad_request_targets_are_400(line: bytes) -> None:
    with pytest.raises(AgtpError) as exc:
        NativeParser().feed(line + b"\r\n\r\n")
    assert exc.value.code == ErrorCode.INVALID_START_LINE


def test_encode_request_writes_a_target() -> None:
    raw = encode_request("DISCOVER", {"Owner-ID": "o"}, b"{}", target="/agents")
    assert raw.startswith(b"AGTP/1.0 DISCOVER /agents\r\nOwner-ID: o\r\n")
    with pytest.raises(ValueError):
        encode_request("DISCOVER", {}, b"", target="/a#b")
    with pytest.raises(ValueError):
        encode_request("DISCOVER", {}, b"", target="agents")


def test_fixtures_are_framed_and_marked_as_named() -> None:
    """Every fixture parses as one native request, in the dialect its name says."""
    names = sorted(FIXTURES.glob("*.agtp"))
    assert len(names) >= 30
    for path in names:
        (req,) = NativeParser().feed(path.read_bytes())
        want = NEWER if path.name.startswith("09_") else OLD
        assert recognise(req.headers, req.target) is want, path.name
