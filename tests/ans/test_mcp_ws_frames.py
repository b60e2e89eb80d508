"""The MCP WebSocket's frame codec (ans.mcp.ws_frames): 1 type byte + UTF-8
JSON; every malformed frame a typed 400, control fields taken off."""

from __future__ import annotations

import pytest
from ans.protocol.errors import AgtpError

from ans.mcp import ws_frames as wf

LIMIT = 1024


def test_query_with_control_fields_is_parsed_and_they_are_taken_off() -> None:
    data = wf.client_frame(
        wf.QUERY,
        {
            "protocol_version": "v1.0",
            "query": {"capability": "x"},
            "request_id": "r-1",
            "subscribe": True,
        },
    )
    frame = wf.parse_frame(data, None, LIMIT)
    assert frame.kind == wf.QUERY and frame.name == "QUERY"
    assert frame.message == {"protocol_version": "v1.0", "query": {"capability": "x"}}
    assert frame.control == wf.Control("r-1", True, None)


def test_announce_round_trip_and_response_encoding() -> None:
    msg = {"protocol_version": "v1.0", "agent": {"agent_id": "a"}}
    assert wf.parse_frame(wf.client_frame(wf.ANNOUNCE, msg), None, LIMIT).message == msg
    assert wf.decode_response(wf.encode({"status": 200})) == {"status": 200}
    with pytest.raises(ValueError):
        wf.decode_response(wf.client_frame(wf.QUERY, {}))


@pytest.mark.parametrize(
    ("data", "text", "needle"),
    [
        (None, '{"query": {}}', "text frames"),
        (b"", None, "empty"),
        (b"\x02", None, "empty"),
        (b"\x03{}", None, "RESPONSE is sent by the registry"),
        (b"\x7f{}", None, "unknown type"),
        (b"\x02{not json", None, "QUERY frame"),
        (b"\x02[1, 2]", None, "JSON object"),
        (b'\x02{"a": 1, "a": 2}', None, "QUERY frame"),
        (b"\x02" + b"{" + b'"k":"' + b"x" * 2000 + b'"}', None, "limit"),
        (b'\x01{"subscribe": true}', None, "belong on a QUERY"),
        (b'\x02{"subscribe": "yes"}', None, "true or false"),
        (b'\x02{"unsubscribe": "../x"}', None, "subscription id"),
        (b'\x02{"unsubscribe": "s1", "subscribe": true}', None, "not both"),
        (b'\x02{"request_id": 7}', None, "request_id"),
        (b'\x02{"request_id": "' + b"r" * 200 + b'"}', None, "request_id"),
        (b"\x02\xff\xfe", None, "QUERY frame"),
    ],
)
def test_malformed_frames_are_typed_400s(data: bytes | None, text: str | None, needle: str) -> None:
    with pytest.raises(AgtpError) as info:
        wf.parse_frame(data, text, LIMIT)
    assert info.value.status == 400
    assert needle in info.value.message


def test_request_id_of_a_broken_frame_is_recovered_when_readable() -> None:
    assert wf.request_id_hint(b'\x03{"request_id": "r9"}') == "r9"
    assert wf.request_id_hint(b"\x02{broken") is None
    assert wf.request_id_hint(b'\x02{"request_id": "bad id"}') is None
    assert wf.request_id_hint(None) is None
