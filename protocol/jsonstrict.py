"""Strict, bounded JSON parsing for AGTP bodies.

RFC 8259 syntax only: no NaN/Infinity, no numbers that overflow to infinity,
no duplicate object keys, no lone surrogates, UTF-8 only, bounded size and
nesting depth. orjson validates syntax, encoding and numbers; the rest is
checked on the text, in time linear in its length whatever its shape (see
:func:`loads`), so no body within the size limit costs much more to parse
than the same document written compactly.
"""

from __future__ import annotations

import gc
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import orjson

from .errors import BodyTooLarge, MalformedJson
from .jcs import DIGITS_AS_ZEROS

DEFAULT_MAX_BYTES = 256 * 1024
MAX_DEPTH = 32


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"duplicate key {key[:60]!r}")
        obj[key] = value
    return obj


# The strict stdlib decoder: only for documents nested deeper than orjson
# writes back (a caller's max_depth above ~250), see loads().
_DECODER = json.JSONDecoder(
    object_pairs_hook=_no_duplicates,
    parse_constant=_reject_constant,
    parse_float=_finite_float,
    strict=True,
)
# For a document already checked in full that holds integers beyond 64 bits,
# which orjson turns into floats and the stdlib keeps exact.
_EXACT = json.JSONDecoder(parse_constant=_reject_constant, strict=True)
# Integers orjson keeps exact: 64 bits, i.e. any of up to 19 digits, 18 if negative.
_LONG_POSITIVE, _LONG_NEGATIVE = 20, 19
_FRACTION_OR_EXPONENT = np.frombuffer(b".eE+", dtype=np.uint8)
_EXPONENT = np.frombuffer(b"eE", dtype=np.uint8)

_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_BRACKET_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
# Up to this many brackets a Python loop is cheaper than NumPy's set-up.
_LOOP_MAX = 256
# Above this many quotes NumPy finds the strings faster than bytes.split.
_SPLIT_MAX_QUOTES = 2048


def _outside_strings(data: bytes) -> bytes:
    """The bytes of ``data`` that are not inside a string (quotes dropped).

    Escaped backslashes and then escaped quotes are deleted (no regex, which
    costs ~0.6 ms on a 9 KB answer), so every quote left delimits a string.
    Exact for valid JSON; on invalid JSON it may be off, which only the depth
    pre-check sees, and orjson rejects such a document right after."""
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    quotes = data.count(b'"')
    if quotes == 0:
        return data
    if quotes <= _SPLIT_MAX_QUOTES:
        return b"".join(data.split(b'"')[::2])
    text = np.frombuffer(data, dtype=np.uint8)
    is_quote = text == ord('"')
    outside = (np.cumsum(is_quote, dtype=np.uint8) & 1) == 0  # parity of quotes so far
    outside &= ~is_quote
    return bytes(text[outside])


def _depth(skeleton: bytes) -> int:
    """The deepest nesting of the brackets in ``skeleton`` (no strings in it)."""
    steps = skeleton.translate(_BRACKET_STEPS, _NOT_BRACKETS)
    if len(steps) <= _LOOP_MAX:
        depth = deepest = 0
        for step in steps:
            depth += 1 if step == 1 else -1
            deepest = max(deepest, depth)
        return deepest
    if not steps:
        return 0
    return int(np.frombuffer(steps, dtype=np.int8).cumsum(dtype=np.int32).max())


def _has_long_integer(skeleton: bytes) -> bool:
    """Whether ``skeleton`` (valid JSON, no strings in it) holds an integer
    literal orjson may have turned into a float: 20 digits or more, or 19
    after a minus sign (fraction and exponent digits do not count).

    A bytes search rules out most bodies; only one with a run of 19 digits
    looks at every run, vectorised (a regex costs ~20 ns a byte on digits)."""
    if b"0" * _LONG_NEGATIVE not in skeleton.translate(DIGITS_AS_ZEROS):
        return False
    text = np.frombuffer(b"  " + skeleton + b" ", dtype=np.uint8)  # room before and after
    edges = np.diff((text - ord("0") < 10).view(np.int8))  # +1 where a run starts, -1 after it
    starts = np.flatnonzero(edges == 1) + 1
    ends = np.flatnonzero(edges == -1) + 1
    before = text[starts - 1]
    digits = ends - starts
    integer = (digits >= _LONG_POSITIVE) | ((digits >= _LONG_NEGATIVE) & (before == ord("-")))
    integer &= ~np.isin(before, _FRACTION_OR_EXPONENT)  # a fraction's or exponent's digits
    integer &= ~((before == ord("-")) & np.isin(text[starts - 2], _EXPONENT))
    integer &= ~np.isin(text[ends], _FRACTION_OR_EXPONENT[:3])  # an integer part
    return bool(integer.any())


@contextmanager
def _no_collection() -> Iterator[None]:
    """Hold off the cyclic garbage collector while a decoder builds containers.

    A body of 130,000 tiny lists would otherwise set off a collection every
    700 of them, full ones over the whole heap among them: 4x the decoder's
    own time in a server. The decoders run no Python code and make no cycles,
    so nothing is left for the collector to find. Only re-enabled if it was
    enabled, so concurrent callers cannot leave it off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def loads(data: bytes, *, max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """Parse ``data`` strictly or raise MalformedJson / BodyTooLarge.

    orjson parses (syntax, UTF-8 validity, lone surrogates, NaN literals,
    numbers beyond a double); a body it writes back byte for byte is done: no
    member was dropped. Otherwise (whitespace, escapes, other number
    spellings) the text outside strings decides, in linear time: orjson keeps
    the last of duplicate keys without a word, so the body has a duplicate
    exactly when it has more name separators (``:``) than orjson's writing
    of its value. Only a body with integers orjson may have turned into
    floats is decoded again, once, by the stdlib, which keeps them exact."""
    if len(data) > max_bytes:
        raise BodyTooLarge(f"body is {len(data)} bytes; the limit is {max_bytes}")
    skeleton = None
    if data.count(b"[") + data.count(b"{") > max_depth:  # else too few openers to be deep
        skeleton = _outside_strings(data)
        if _depth(skeleton) > max_depth:
            raise MalformedJson(f"JSON nesting deeper than {max_depth} levels")
    try:
        with _no_collection():
            value = orjson.loads(data)
        written = orjson.dumps(value)
    except orjson.JSONDecodeError as exc:
        raise MalformedJson(f"malformed JSON: {_not_utf8(data) or str(exc)[:160]}") from None
    except orjson.JSONEncodeError:  # nested deeper than orjson writes (~250 levels)
        return _decode(_DECODER, data)
    if written == data:
        return value  # e.g. a compact body written by orjson, such as a peer ANS's answer
    if skeleton is None:
        skeleton = _outside_strings(data)
    kept = _outside_strings(written)
    if skeleton.count(b":") != kept.count(b":"):
        raise MalformedJson("malformed JSON: duplicate key in an object")
    if skeleton.count(b"null") != kept.count(b"null"):  # a number that came back as null
        raise MalformedJson("malformed JSON: a number is out of range")
    if _has_long_integer(skeleton):
        del value
        return _decode(_EXACT, data)
    return value


def _not_utf8(data: bytes) -> str | None:
    """Where ``data`` stops being UTF-8 (orjson says "surrogates not allowed"
    of any invalid byte, a Latin-1 or UTF-16 body's included), else None."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"the body is not UTF-8 (byte {exc.start}: {exc.reason})"
    return None


def _decode(decoder: json.JSONDecoder, data: bytes) -> Any:
    try:
        with _no_collection():
            return decoder.decode(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise MalformedJson(f"malformed JSON: {str(exc)[:160]}") from None
