"""Strict, bounded JSON parsing for AGTP bodies.

RFC 8259 syntax only: no NaN/Infinity, no numbers that overflow to infinity,
no duplicate object keys, no lone surrogates, UTF-8 only, bounded size and
nesting depth. orjson validates syntax and encoding; the stdlib decoder then
re-parses with hooks that reject duplicate keys and non-finite numbers.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson

from .errors import BodyTooLarge, MalformedJson

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


_DECODER = json.JSONDecoder(
    object_pairs_hook=_no_duplicates,
    parse_constant=_reject_constant,
    parse_float=_finite_float,
    strict=True,
)


_STRING_RE = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def _depth_ok(data: bytes, limit: int) -> bool:
    """Cheap nesting-depth bound before any recursive decoder runs: drop the
    strings (one regex pass), keep only brackets, then count."""
    skeleton = _STRING_RE.sub(b"", data).translate(None, _NOT_BRACKETS)
    depth = 0
    for byte in skeleton:
        if byte in (0x5B, 0x7B):
            depth += 1
            if depth > limit:
                return False
        else:
            depth -= 1
    return True


def loads(data: bytes, *, max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """Parse ``data`` strictly or raise MalformedJson / BodyTooLarge."""
    if len(data) > max_bytes:
        raise BodyTooLarge(f"body is {len(data)} bytes; the limit is {max_bytes}")
    if not _depth_ok(data, max_depth):
        raise MalformedJson(f"JSON nesting deeper than {max_depth} levels")
    try:
        orjson.loads(data)  # syntax, UTF-8 validity, lone surrogates, NaN literals
    except orjson.JSONDecodeError as exc:
        raise MalformedJson(f"malformed JSON: {str(exc)[:160]}") from None
    try:
        return _DECODER.decode(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise MalformedJson(f"malformed JSON: {str(exc)[:160]}") from None
