"""Native AGTP/1.0 framing: incremental parsing, bounds, and equivalence with
the HTTP/2 binding (same typed request from the same message)."""

from __future__ import annotations

import pytest
from ans.protocol.binding import MAX_HEADER_BYTES, UNIQUE_HEADERS, header_map
from ans.protocol.errors import AgtpError, BadRequest, BodyTooLarge, HeaderTooLarge
from ans.protocol.messages import Limits, parse_discover
from ans.protocol.native import (
    NativeParser,
    NativeResponse,
    NativeResponseParser,
    encode_request,
    encode_response,
)

# The discovery draft's section 3.2 example, byte for byte apart from CRLF.
DRAFT_EXAMPLE = (
    b"AGTP/1.0 DISCOVER\r\n"
    b"Agent-ID: agtp://agtp.acme.tld/agents/orchestrator\r\n"
    b"Principal-ID: usr-chris-hood\r\n"
    b"Authority-Scope: discovery:query agents:delegate\r\n"
    b"Session-ID: sess-discovery-01\r\n"
    b"Task-ID: task-disc-001\r\n"
    b"Content-Type: application/agtp+json\r\n"
)
BODY = (
    b'{"method": "DISCOVER", "task_id": "task-disc-001", "parameters": {"intent": '
    b'"Audit smart contracts for security vulnerabilities", "capability_domains": ["methods", "tools"], '
    b'"trust_tier_min": 1, "behavioral_trust_min": 0.85, "governance_zone": "zone:external-partner", '
    b'"limit": 5, "scope_negotiate": true}}'
)
MESSAGE = DRAFT_EXAMPLE + b"Content-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY


def test_draft_example_parses_to_the_same_typed_request_as_http2() -> None:
    (req,) = NativeParser().feed(MESSAGE)
    assert (req.version, req.method) == ("AGTP/1.0", "DISCOVER")
    assert req.headers["agent-id"] == "agtp://agtp.acme.tld/agents/orchestrator"
    native = parse_discover(req.headers, req.body, Limits())
    h2_headers = {
        "agent-id": "agtp://agtp.acme.tld/agents/orchestrator",
        "principal-id": "usr-chris-hood",
        "authority-scope": "discovery:query agents:delegate",
        "session-id": "sess-discovery-01",
        "task-id": "task-disc-001",
        "content-type": "application/agtp+json",
    }
    assert native == parse_discover(h2_headers, BODY, Limits())
    assert native.params.limit == 5 and native.params.trust_tier_min == 1


def test_byte_by_byte_and_pipelined() -> None:
    parser = NativeParser()
    got = []
    for i in range(len(MESSAGE)):
        got += parser.feed(MESSAGE[i : i + 1])
    assert len(got) == 1 and got[0].body == BODY
    two = NativeParser().feed(MESSAGE + MESSAGE.replace(b"\r\n", b"\n", 8))
    assert [r.method for r in two] == ["DISCOVER", "DISCOVER"] and two[1].body == BODY


@pytest.mark.parametrize(
    "data,code",
    [
        (b"GET / HTTP/1.1\r\n\r\n", "invalid_start_line"),
        (b"AGTP/1.0 discover\r\n\r\n", "invalid_start_line"),
        (b"AGTP/1.0 DISCOVER\r\nno colon here\r\n\r\n", "invalid_header_line"),
        (b"AGTP/1.0 DISCOVER\r\nContent-Length: -1\r\n\r\n", "invalid_content_length"),
        (b"AGTP/1.0 DISCOVER\r\nContent-Length: 999999999\r\n\r\n", "body_too_large"),
        (b"AGTP/1.0 DISCOVER\r\nX-Pad: " + b"a" * 20000, "header_too_large"),
    ],
)
def test_bad_framing_is_a_typed_400(data: bytes, code: str) -> None:
    with pytest.raises(AgtpError) as exc:
        NativeParser().feed(data)
    assert exc.value.status == 400 and exc.value.code == code


@pytest.mark.parametrize(
    "name", ["Agent-ID", "Principal-ID", "Authority-Scope", "Task-ID", "AGTP-Method"]
)
def test_repeated_identity_header_is_refused_as_over_http2(name: str) -> None:
    """Two Agent-ID lines are not joined into one "a, b" identity: 400
    duplicate_header, the code (and message) header_map gives on HTTP/2."""
    head = DRAFT_EXAMPLE.replace(b"Session-ID:", name.lower().encode() + b": other\r\nSession-ID:")
    wire = head + f"{name}: again\r\n".encode() + b"Content-Length: 0\r\n\r\n"
    parser = NativeParser()
    with pytest.raises(AgtpError) as exc:
        parser.feed(wire)
    assert (exc.value.status, exc.value.code) == (400, "duplicate_header")
    with pytest.raises(AgtpError) as h2:
        header_map([(name.encode(), b"one"), (name.encode(), b"two")])
    assert (h2.value.code, h2.value.message) == (exc.value.code, exc.value.message)
    assert parser.failed is exc.value  # the stream is not read past it


def test_unique_headers_are_the_identity_headers() -> None:
    assert {"agent-id", "principal-id", "authority-scope", "task-id"} <= UNIQUE_HEADERS


def test_other_repeated_headers_are_still_joined() -> None:
    wire = b"AGTP/1.0 DISCOVER\r\nAccept: a\r\naccept: b\r\nSession-ID: s\r\n\r\n"
    (req,) = NativeParser().feed(wire)
    assert req.headers == {"accept": "a, b", "session-id": "s"}
    # Answers may repeat any field (the client side refuses nothing extra).
    (resp,) = NativeResponseParser(1024).feed(
        b"AGTP/1.0 200 OK\r\nTask-ID: a\r\nTask-ID: b\r\n\r\n"
    )
    assert resp.headers["task-id"] == "a, b"


@pytest.mark.parametrize(
    "value",
    [
        "a\r\nSet-Cookie: pwn=1\r\nX-Injected: yes",
        "x\r\n\r\nAGTP/1.0 200 OK\r\nContent-Length: 0",
        "lf\nonly",
        "nul\x00byte",
        "\u65e5\u672c",
    ],
)
def test_encode_response_never_splits_a_header_line(value: str) -> None:
    out = encode_response(400, [("Task-ID", value), ("Retry-After", "1")], b"{}")
    assert out == (
        b"AGTP/1.0 400 Bad Request\r\nRetry-After: 1\r\n"
        b"Content-Type: application/agtp+json\r\nContent-Length: 2\r\n\r\n{}"
    )
    (resp,) = NativeResponseParser(1024).feed(out)
    assert resp.status == 400 and "task-id" not in resp.headers
    # Nor can a bad name, or a second Content-Length, get through.
    bad = encode_response(200, [("X-A\r\nX-B", "1"), ("Content-Length", "0")], b"{}")
    assert b"X-B" not in bad and bad.count(b"Content-Length") == 1


def test_encode_response() -> None:
    out = encode_response(200, [("Task-ID", "t1")], b'{"status":200}')
    assert out.startswith(b"AGTP/1.0 200 OK\r\nTask-ID: t1\r\n")
    assert b"Content-Type: application/agtp+json\r\n" in out
    assert out.endswith(b"Content-Length: 14\r\n\r\n" + b'{"status":200}')
    assert encode_response(451, []).startswith(b"AGTP/1.0 451 Scope Violation\r\n")
    assert b"Content-Length" not in encode_response(204, [])


# -- the client side: encode_request and NativeResponseParser -----------------------------


def test_encode_request_round_trips_through_the_parser() -> None:
    headers = {"Agent-ID": "agtp://a.example/agents/o", "Task-ID": "t-7", "X-Empty": ""}
    wire = encode_request("DISCOVER", headers, BODY)
    assert wire.startswith(b"AGTP/1.0 DISCOVER\r\nAgent-ID: agtp://a.example/agents/o\r\n")
    parser = NativeParser()
    (req,) = parser.feed(wire)
    assert (req.version, req.method, req.body) == ("AGTP/1.0", "DISCOVER", BODY)
    assert req.headers == {
        "agent-id": "agtp://a.example/agents/o",
        "task-id": "t-7",
        "x-empty": "",
        "content-length": str(len(BODY)),
    }
    assert parser.buffered == 0 and parser.failed is None
    # No body: still a Content-Length (0), so the next request starts right after.
    (a, b) = NativeParser().feed(encode_request("DESCRIBE", {}) + encode_request("PING", {}))
    assert (a.method, a.body, a.headers) == ("DESCRIBE", b"", {"content-length": "0"})
    assert b.method == "PING"


@pytest.mark.parametrize(
    "value",
    [
        "x\r\nX-Injected: 1",
        "x\nX-Injected: 1",
        "x\rX-Injected: 1",
        "nul\x00byte",
        "bell\x07",
        "del\x7f",
        "x" * (MAX_HEADER_BYTES + 1),
    ],
)
def test_encode_request_refuses_values_that_would_split_a_header(value: str) -> None:
    with pytest.raises(ValueError, match="Agent-ID"):
        encode_request("DISCOVER", {"Agent-ID": value})


@pytest.mark.parametrize("name", ["Content-Length", "content-length", "CONTENT-LENGTH"])
def test_encode_request_refuses_a_caller_content_length(name: str) -> None:
    # The encoder alone writes Content-Length; a second one would desync the stream.
    with pytest.raises(ValueError, match="cannot be sent"):
        encode_request("DISCOVER", {name: "0"}, b"")


@pytest.mark.parametrize(
    "name", ["Bad Name", "a:b", "", "x\r\ny", "caf\u00e9", "n" * 65, "Agent-ID\n"]
)
def test_encode_request_refuses_bad_header_names(name: str) -> None:
    with pytest.raises(ValueError, match="header name"):
        encode_request("DISCOVER", {name: "v"})


@pytest.mark.parametrize(
    "method", ["discover", "DIS COVER", "", "1DISCOVER", "DISCOVER\r\nX: 1", "A" * 33]
)
def test_encode_request_refuses_bad_methods(method: str) -> None:
    with pytest.raises(ValueError, match="not an AGTP method"):
        encode_request(method, {})


def answer(status: int, body: bytes = b"", task_id: str = "t1") -> bytes:
    return encode_response(status, [("Task-ID", task_id)], body)


def test_response_parser_one_answer() -> None:
    parser = NativeResponseParser(1024)
    (resp,) = parser.feed(answer(200, b'{"status":200}'))
    assert resp == NativeResponse(
        200,
        {
            "task-id": "t1",
            "content-type": "application/agtp+json",
            "content-length": "14",
        },
        b'{"status":200}',
    )
    assert parser.buffered == 0 and parser.failed is None
    # A reason phrase is optional, and 204 carries no Content-Length (empty body).
    (bare,) = NativeResponseParser(1024).feed(b"AGTP/1.0 451\r\nContent-Length: 2\r\n\r\n{}")
    assert (bare.status, bare.body) == (451, b"{}")
    (empty,) = NativeResponseParser(1024).feed(encode_response(204, []))
    assert (empty.status, empty.body) == (204, b"")


def test_response_parser_pipelined_answers_keep_their_order() -> None:
    wire = answer(200, b"one", "t1") + answer(429, b"two", "t2") + answer(200, b"three", "t3")
    got = NativeResponseParser(1024).feed(wire)
    assert [(r.status, r.headers["task-id"], r.body) for r in got] == [
        (200, "t1", b"one"),
        (429, "t2", b"two"),
        (200, "t3", b"three"),
    ]
    # A partial next answer stays buffered until it is complete.
    parser = NativeResponseParser(1024)
    first = answer(200, b"one", "t1")
    second = answer(200, b"two", "t2")
    assert [r.body for r in parser.feed(first + second[:10])] == [b"one"]
    assert parser.buffered == 10
    assert [r.body for r in parser.feed(second[10:])] == [b"two"]
    assert parser.buffered == 0


def test_response_parser_byte_by_byte() -> None:
    wire = answer(200, BODY, "t1") + answer(503, b"", "t2")
    parser = NativeResponseParser(4096)
    got: list[NativeResponse] = []
    sizes = []
    for i in range(len(wire)):
        got += parser.feed(wire[i : i + 1])
        sizes.append(len(got))
    assert [(r.status, r.body) for r in got] == [(200, BODY), (503, b"")]
    # The first answer completes exactly on its last byte, not before.
    first_len = len(answer(200, BODY, "t1"))
    assert sizes.index(1) == first_len - 1
    assert parser.buffered == 0


def test_response_body_over_the_limit() -> None:
    parser = NativeResponseParser(100)
    assert parser.feed(answer(200, b"x" * 100))[0].body == b"x" * 100  # at the limit: fine
    with pytest.raises(BodyTooLarge) as exc:
        parser.feed(answer(200, b"x" * 101))
    assert exc.value.status == 400 and exc.value.code == "body_too_large"
    assert "101" in exc.value.message
    # Refused on the declared length: the body itself need not have arrived.
    with pytest.raises(BodyTooLarge):
        NativeResponseParser(100).feed(b"AGTP/1.0 200 OK\r\nContent-Length: 99999\r\n\r\n")


@pytest.mark.parametrize(
    "line",
    [
        b"HTTP/1.1 200 OK",
        b"AGTP/1.0 200OK",
        b"AGTP/1.0 99 Low",
        b"AGTP/1.0 600 High",
        b"AGTP/1.0 OK 200",
        b"AGTP/2.0 200 OK",
        b"AGTP/1.0 200 " + b"r" * 200,
        b"AGTP/1.0 DISCOVER",
    ],
)
def test_response_bad_status_line(line: bytes) -> None:
    with pytest.raises(BadRequest) as exc:
        NativeResponseParser(1024).feed(line + b"\r\nContent-Length: 0\r\n\r\n")
    assert exc.value.code == "invalid_start_line"


def test_response_header_section_too_large() -> None:
    # Unterminated: refused as soon as the buffer passes the limit.
    parser = NativeResponseParser(1024)
    with pytest.raises(HeaderTooLarge) as exc:
        parser.feed(b"AGTP/1.0 200 OK\r\nX-Pad: " + b"a" * MAX_HEADER_BYTES)
    assert exc.value.code == "header_too_large"
    # Terminated but over the limit: refused too.
    big = b"AGTP/1.0 200 OK\r\nX-Pad: " + b"a" * MAX_HEADER_BYTES + b"\r\n\r\n"
    with pytest.raises(HeaderTooLarge):
        NativeResponseParser(1024).feed(big)
    # Too many fields, each small.
    many = b"AGTP/1.0 200 OK\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(101))
    with pytest.raises(HeaderTooLarge):
        NativeResponseParser(1024).feed(many + b"\r\n")
    # Just under the limit is fine.
    ok = b"AGTP/1.0 200 OK\r\nX-Pad: " + b"a" * (MAX_HEADER_BYTES - 100) + b"\r\n\r\n"
    assert NativeResponseParser(1024).feed(ok)[0].status == 200


@pytest.mark.parametrize("which", ["request", "response"])
def test_good_frames_before_a_bad_one_are_returned_then_the_error(which: str) -> None:
    parser: NativeParser | NativeResponseParser
    if which == "request":
        parser = NativeParser()
        good = encode_request("DISCOVER", {"Task-ID": "a"}, b"{}") + encode_request("PING", {})
        bad = b"GET / HTTP/1.1\r\n\r\n"
    else:
        parser = NativeResponseParser(1024)
        good = answer(200, b"a", "a") + answer(200, b"b", "b")
        bad = b"HTTP/1.1 200 OK\r\n\r\n"
    got = parser.feed(good + bad + good)
    assert len(got) == 2  # the two before the bad frame, nothing after it
    assert parser.failed is not None and parser.failed.code == "invalid_start_line"
    failed = parser.failed
    with pytest.raises(AgtpError) as exc:
        parser.feed(good)  # the stream is broken: every later feed raises the same error
    assert exc.value is failed
    with pytest.raises(AgtpError):
        parser.feed(b"")


def test_a_bad_first_frame_raises_at_once_and_stays_failed() -> None:
    parser = NativeParser()
    with pytest.raises(AgtpError) as exc:
        parser.feed(b"AGTP/1.0 DISCOVER\r\nContent-Length: x\r\n\r\n")
    assert exc.value.code == "invalid_content_length"
    assert parser.failed is exc.value
    with pytest.raises(AgtpError) as again:
        parser.feed(encode_request("PING", {}))
    assert again.value is exc.value


def test_an_error_in_a_later_feed_keeps_the_earlier_frames() -> None:
    parser = NativeResponseParser(1024)
    assert len(parser.feed(answer(200, b"ok"))) == 1
    assert parser.feed(answer(200, b"more")[:5]) == []
    with pytest.raises(AgtpError):
        parser.feed(b"garbage\r\n\r\n")  # completes a head whose start line is bad
    assert parser.failed is not None
