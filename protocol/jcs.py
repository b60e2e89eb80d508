"""RFC 8785 JSON Canonicalization Scheme: the exact bytes that get signed.

Objects are sorted by the UTF-16 code units of their keys, strings use the
minimal JSON escaping, and numbers use the ECMAScript Number-to-String
algorithm. Only JSON values (dict with str keys, list, str, int, float,
bool, None) are accepted; anything else raises TypeError, and non-finite
numbers or integers outside IEEE-754 double precision raise ValueError.
"""

from __future__ import annotations

import math
import re
from typing import Any

import orjson

_ESCAPES = {
    0x08: "\\b",
    0x09: "\\t",
    0x0A: "\\n",
    0x0C: "\\f",
    0x0D: "\\r",
    0x22: '\\"',
    0x5C: "\\\\",
}
_MAX_SAFE_INT = 2**53
# bytes.translate table: every digit to "0", every other byte to " ", so that a
# run of N digits is a bytes search for N zeros (also protocol.jsonstrict's).
# Every integer beyond 2^53 prints with at least 16 digits (~7x faster than a
# regex over the text).
DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_SIXTEEN_DIGITS = b"0" * 16


_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\]')


def _escape(m: re.Match[str]) -> str:
    cp = ord(m.group())
    return _ESCAPES.get(cp) or f"\\u{cp:04x}"


def _string(s: str, out: list[str]) -> None:
    # Most strings need no escaping: one regex scan instead of a per-character loop.
    if _NEEDS_ESCAPE.search(s) is None:
        out.append(f'"{s}"')
    else:
        out.append(f'"{_NEEDS_ESCAPE.sub(_escape, s)}"')


def number_to_string(value: float) -> str:
    """ECMAScript Number.prototype.toString for finite doubles (RFC 8785 3.2.2.3)."""
    if not math.isfinite(value):
        raise ValueError("JCS cannot represent NaN or Infinity")
    if value == 0:
        return "0"
    if value < 0:
        return "-" + number_to_string(-value)
    # Python's repr gives the shortest round-tripping digits; reformat them.
    mantissa, _, exp_text = repr(value).partition("e")
    exponent = int(exp_text) if exp_text else 0
    int_part, _, frac_part = mantissa.partition(".")
    digits = (int_part + frac_part).lstrip("0")
    # position of the decimal point relative to the start of `digits`
    lead_zeros = len(int_part + frac_part) - len((int_part + frac_part).lstrip("0"))
    point = len(int_part) - lead_zeros + exponent
    digits = digits.rstrip("0") or "0"
    k = len(digits)
    n = point
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    exp = n - 1
    sign = "+" if exp >= 0 else "-"
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{head}e{sign}{abs(exp)}"


def _value(v: Any, out: list[str]) -> None:
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, str):
        _string(v, out)
    elif isinstance(v, int):
        if abs(v) > _MAX_SAFE_INT:
            raise ValueError("integer outside the I-JSON safe range cannot be canonicalized")
        out.append(str(v))
    elif isinstance(v, float):
        out.append(number_to_string(v))
    elif isinstance(v, dict):
        if not all(isinstance(key, str) for key in v):
            raise TypeError("JCS object keys must be strings")
        out.append("{")
        first = True
        # For ASCII keys UTF-16 code-unit order is plain string order; only
        # other keys need the (slower) UTF-16 sort key.
        ascii_keys = all(k.isascii() for k in v)
        for key in sorted(v) if ascii_keys else sorted(v, key=_utf16_key):
            if not first:
                out.append(",")
            first = False
            _string(key, out)
            out.append(":")
            _value(v[key], out)
        out.append("}")
    elif isinstance(v, (list, tuple)):
        out.append("[")
        for i, item in enumerate(v):
            if i:
                out.append(",")
            _value(item, out)
        out.append("]")
    else:
        raise TypeError(f"JCS cannot serialize {type(v).__name__}")


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be")


def canonicalize_reference(value: Any) -> bytes:
    """The straightforward RFC 8785 serializer (the reference for the fast path)."""
    out: list[str] = []
    _value(value, out)
    return "".join(out).encode("utf-8")


class _NeedsReference(Exception):
    """The fast path cannot vouch for this value; use the reference serializer."""


_SAFE_INT = 2**53


def _prepare(x: Any) -> Any:
    """Return ``x`` (or a copy) such that orjson with sorted keys emits its JCS
    bytes: ASCII keys only, and every float orjson would print differently from
    ECMAScript (integral values, exponent ranges) replaced by its JCS text.
    Containers are copied only where something changed."""
    t = type(x)
    if t is str or t is bool or x is None:
        return x
    if t is dict:
        out = None
        for k, v in x.items():
            if type(k) is not str or not k.isascii():
                raise _NeedsReference
            tv = type(v)
            if tv is str or tv is bool or v is None:
                continue
            new = _prepare(v)
            if new is not v:
                if out is None:
                    out = dict(x)
                out[k] = new
        return x if out is None else out
    if t is list or t is tuple:
        items = None
        for i, v in enumerate(x):
            tv = type(v)
            if tv is str or tv is bool or v is None:
                continue
            new = _prepare(v)
            if new is not v:
                if items is None:
                    items = list(x)
                items[i] = new
        return items if items is not None else (x if t is list else list(x))
    if t is float:
        if 1e-4 <= abs(x) < 1e16 and not x.is_integer():
            return x  # orjson prints these exactly as ECMAScript does
        if x.is_integer() and abs(x) < _SAFE_INT:
            return int(x)
        return orjson.Fragment(number_to_string(x).encode("ascii"))
    if t is int:
        if abs(x) > _MAX_SAFE_INT:
            raise ValueError("integer outside the I-JSON safe range cannot be canonicalized")
        return x
    raise _NeedsReference  # subclasses and non-JSON types: the reference decides


def unsafe_integer(value: Any, path: str = "") -> str | None:
    """The path (``.a[2].b``; ``.`` for the value itself) of the first integer
    in a parsed JSON value that :func:`canonicalize` refuses (beyond ±2^53, the
    I-JSON range), else None: such a document cannot be signed, so it is
    refused where it enters."""
    try:  # the common case, at a few microseconds: no run of 16 digits, no such integer
        if _SIXTEEN_DIGITS not in orjson.dumps(value).translate(DIGITS_AS_ZEROS):
            return None
    except (orjson.JSONEncodeError, TypeError):
        pass  # beyond 64 bits, or not plain JSON: the walk decides
    stack = [(value, path)]
    while stack:
        v, at = stack.pop()
        t = type(v)
        if t is int:
            if abs(v) > _MAX_SAFE_INT:
                return at or "."
        elif t is dict:
            stack.extend((item, f"{at}.{k}") for k, item in reversed(list(v.items())))
        elif t is list or t is tuple:
            stack.extend((item, f"{at}[{i}]") for i, item in reversed(list(enumerate(v))))
    return None


def canonicalize(value: Any) -> bytes:
    """Return the RFC 8785 canonical UTF-8 bytes of a JSON value.

    Fast path: orjson with sorted keys on a prepared copy (see :func:`_prepare`),
    byte-identical to :func:`canonicalize_reference` (tested on vectors and on
    random documents); anything it cannot vouch for goes to the reference.
    """
    try:
        return orjson.dumps(_prepare(value), option=orjson.OPT_SORT_KEYS)
    except (_NeedsReference, orjson.JSONEncodeError, RecursionError):
        return canonicalize_reference(value)
