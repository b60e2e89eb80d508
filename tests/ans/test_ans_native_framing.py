"""Native AGTP/1.0 framing: incremental parsing, bounds, and equivalence with
the HTTP/2 binding (same typed request from the same message)."""

from __future__ import annotations

import pytest
from ans.protocol.errors import AgtpError
from ans.protocol.messages import Limits, parse_discover
from ans.protocol.native import NativeParser, encode_response

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


def test_encode_response() -> None:
    out = encode_response(200, [("Task-ID", "t1")], b'{"status":200}')
    assert out.startswith(b"AGTP/1.0 200 OK\r\nTask-ID: t1\r\n")
    assert b"Content-Type: application/agtp+json\r\n" in out
    assert out.endswith(b"Content-Length: 14\r\n\r\n" + b'{"status":200}')
    assert encode_response(451, []).startswith(b"AGTP/1.0 451 Scope Violation\r\n")
    assert b"Content-Length" not in encode_response(204, [])
