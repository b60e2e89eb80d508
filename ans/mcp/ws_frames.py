"""The frames of the MCP registry's WebSocket (seed 002 section 5.3), as pure
functions: one binary WebSocket message = a 1-byte type + a UTF-8 JSON object.

========  ==========  =============================================
type      direction   body
========  ==========  =============================================
``0x01``  client->    ANNOUNCE: an Announce message (section 4.1.1)
``0x02``  client->    QUERY: a Query message (4.1.2), or a subscription
                      request / cancellation (see :class:`Control`)
``0x03``  ->client    RESPONSE: an answer, an event, or an error
========  ==========  =============================================

Besides the seed's fields a client message may carry (they are taken off
before the message reaches the registry, so its schema never sees them):

* ``request_id`` (string, <= 128 characters): echoed in the RESPONSE(s) that
  answer this message, so a client can match them;
* on a QUERY, ``subscribe: true``: answer the query now and then stream
  ``new`` / ``updated`` / ``removed`` events of the agents it matches; and
  ``unsubscribe: "<subscription id>"`` (with no ``query``) to stop one.

Every malformed frame is a typed :class:`~ans.protocol.errors.AgtpError`
(400); nothing here does I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from ans.protocol import jsonstrict
from ans.protocol.errors import BodyTooLarge, InvalidBody, MalformedJson

ANNOUNCE, QUERY, RESPONSE = 0x01, 0x02, 0x03
NAMES = {ANNOUNCE: "ANNOUNCE", QUERY: "QUERY", RESPONSE: "RESPONSE"}
CLIENT_TYPES = frozenset({ANNOUNCE, QUERY})
MAX_REQUEST_ID = 128
_ID_RE = re.compile(r"[\x21-\x7e]{1,128}")
_SUB_RE = re.compile(r"s[0-9]{1,9}")


@dataclass(frozen=True, slots=True)
class Control:
    """What a client message asks of the connection itself, beside the
    registry: its ``request_id`` to echo, whether a QUERY subscribes, and the
    subscription a QUERY cancels."""

    request_id: str | None = None
    subscribe: bool = False
    unsubscribe: str | None = None


@dataclass(frozen=True, slots=True)
class Frame:
    """One parsed client frame: its type, the seed message (control fields
    taken off), and the control fields."""

    kind: int
    message: dict[str, Any]
    control: Control

    @property
    def name(self) -> str:
        return NAMES[self.kind]


def request_id_hint(data: bytes | None) -> str | None:
    """The ``request_id`` of a frame that failed to parse, when it can be read
    (so even the error answers the right request); None otherwise."""
    if not data or len(data) < 2:
        return None
    try:
        doc = orjson.loads(data[1:])
    except orjson.JSONDecodeError:
        return None
    rid = doc.get("request_id") if isinstance(doc, dict) else None
    return rid if isinstance(rid, str) and _ID_RE.fullmatch(rid) else None


def parse_frame(data: bytes | None, text: str | None, max_bytes: int) -> Frame:
    """A client's WebSocket message to a :class:`Frame`, or a 400 AgtpError
    (text frames, an unknown or server-only type, bad JSON, a non-object, a
    bad control field); at most ``max_bytes`` of JSON."""
    if data is None:
        size = len(text or "")
        raise InvalidBody(
            f"text frames are not used here ({size} characters); send a binary frame: "
            "1 type byte (0x01 ANNOUNCE, 0x02 QUERY) + UTF-8 JSON"
        )
    if len(data) < 2:
        raise InvalidBody("a frame is 1 type byte followed by a JSON object; this one is empty")
    kind = data[0]
    if kind not in CLIENT_TYPES:
        what = "RESPONSE is sent by the registry only" if kind == RESPONSE else "unknown type"
        raise InvalidBody(
            f"frame type 0x{kind:02x}: {what}; a client sends 0x01 ANNOUNCE or 0x02 QUERY"
        )
    if len(data) - 1 > max_bytes:
        raise BodyTooLarge(f"frame body is {len(data) - 1} bytes; the limit is {max_bytes}")
    try:
        doc = jsonstrict.loads(data[1:], max_bytes=max_bytes)
    except MalformedJson as exc:
        raise MalformedJson(f"{NAMES[kind]} frame: {exc.message}") from None
    if not isinstance(doc, dict):
        raise InvalidBody(f"a {NAMES[kind]} frame carries a JSON object")
    control = _control(kind, doc)
    return Frame(kind, doc, control)


def _control(kind: int, doc: dict[str, Any]) -> Control:
    """Take the connection's control fields off ``doc`` (in place)."""
    rid = doc.pop("request_id", None)
    if rid is not None and (not isinstance(rid, str) or _ID_RE.fullmatch(rid) is None):
        raise InvalidBody(
            f"request_id must be a string of 1..{MAX_REQUEST_ID} printable ASCII characters"
        )
    subscribe = doc.pop("subscribe", False)
    unsubscribe = doc.pop("unsubscribe", None)
    if kind != QUERY and (subscribe is not False or unsubscribe is not None):
        raise InvalidBody("subscribe / unsubscribe belong on a QUERY frame")
    if not isinstance(subscribe, bool):
        raise InvalidBody("subscribe must be true or false")
    if unsubscribe is not None:
        if not isinstance(unsubscribe, str) or _SUB_RE.fullmatch(unsubscribe) is None:
            raise InvalidBody("unsubscribe names a subscription id such as 's1'")
        if subscribe:
            raise InvalidBody("a QUERY either subscribes or unsubscribes, not both")
    return Control(rid, subscribe, unsubscribe)


def encode(body: dict[str, Any]) -> bytes:
    """A RESPONSE frame carrying ``body``."""
    return bytes((RESPONSE,)) + orjson.dumps(body)


def decode_response(data: bytes) -> dict[str, Any]:
    """A RESPONSE frame's body (for clients and tests); ValueError otherwise."""
    if not data or data[0] != RESPONSE:
        raise ValueError(f"not a RESPONSE frame: {data[:1]!r}")
    doc = orjson.loads(data[1:])
    if not isinstance(doc, dict):
        raise ValueError("a RESPONSE frame carries a JSON object")
    return doc


def client_frame(kind: int, message: dict[str, Any]) -> bytes:
    """A client's frame (for clients and tests)."""
    return bytes((kind,)) + orjson.dumps(message)
