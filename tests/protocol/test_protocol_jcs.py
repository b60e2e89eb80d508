"""RFC 8785 (JCS) canonicalization: the cyberphoria/json-canonicalization
vectors in shared/vectors/jcs, plus hand-computed unit cases for key order,
string escaping and ECMAScript number formatting."""

from __future__ import annotations

import json
import math
import random
import struct
from decimal import Decimal
from pathlib import Path

import pytest
from ans.protocol.jcs import canonicalize, canonicalize_reference, number_to_string


def _find_vectors() -> Path | None:
    """shared/vectors of the workspace (…/work/shared/vectors), if present."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "vectors"
        if candidate.is_dir():
            return candidate
    return None


VECTORS = _find_vectors()
ABSENT = "shared/vectors is absent (clone outside the workspace); JCS vector tests need it"


def _jcs_names() -> list[str]:
    if VECTORS is None:
        return ["<vectors-absent>"]
    return sorted(p.name for p in (VECTORS / "jcs" / "input").glob("*.json"))


def test_jcs_vectors_present_and_paired() -> None:
    if VECTORS is None:
        pytest.skip(ABSENT)
    inputs = sorted(p.name for p in (VECTORS / "jcs" / "input").glob("*.json"))
    outputs = sorted(p.name for p in (VECTORS / "jcs" / "output").glob("*.json"))
    assert inputs, "no JCS input vectors found"
    assert inputs == outputs


@pytest.mark.parametrize("name", _jcs_names())
def test_jcs_vector(name: str) -> None:
    if VECTORS is None:
        pytest.skip(ABSENT)
    source = (VECTORS / "jcs" / "input" / name).read_bytes()
    expected = (VECTORS / "jcs" / "output" / name).read_bytes()
    if expected.endswith(b"\n"):
        expected = expected[:-1]
    assert canonicalize(json.loads(source)) == expected


# -- key ordering ----------------------------------------------------------------


def test_keys_sorted_by_utf16_code_units() -> None:
    doc = {
        "\u20ac": "euro",
        "\r": "cr",
        "\U0001f600": "astral",  # UTF-16: D83D DE00
        "\ufb33": "dalet",
        "1": "one",
        "\u00f6": "o-umlaut",
        "\u0080": "c1",
    }
    # By UTF-16 code unit: 000D < 0031 < 0080 < 00F6 < 20AC < D83D(astral) < FB33
    expected = (
        '{"\\r":"cr","1":"one","\u0080":"c1","\u00f6":"o-umlaut",'
        '"\u20ac":"euro","\U0001f600":"astral","\ufb33":"dalet"}'
    ).encode("utf-8")
    assert canonicalize(doc) == expected


def test_astral_key_sorts_before_high_bmp_key_unlike_code_point_order() -> None:
    # Code point order would put U+FF61 before U+10000; UTF-16 order puts the
    # astral character (lead surrogate D800) first.
    assert ord("\uff61") < ord("\U00010000")
    out = canonicalize({"\uff61": 1, "\U00010000": 2})
    assert out == '{"\U00010000":2,"\uff61":1}'.encode("utf-8")


def test_sorting_is_by_code_unit_not_locale_or_case() -> None:
    out = canonicalize({"b": 1, "B": 2, "a": 3, "A": 4, "": 5, "aa": 6})
    assert out == b'{"":5,"A":4,"B":2,"a":3,"aa":6,"b":1}'


def test_nested_objects_sorted_arrays_keep_order() -> None:
    out = canonicalize({"z": [3, 1, {"y": 1, "x": 2}], "a": {"d": None, "c": True}})
    assert out == b'{"a":{"c":true,"d":null},"z":[3,1,{"x":2,"y":1}]}'


# -- strings -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("\n", b'"\\n"'),
        ("\t\b\f\r", b'"\\t\\b\\f\\r"'),
        ("\u000f", b'"\\u000f"'),
        ("\u001f", b'"\\u001f"'),
        ("\u0000", b'"\\u0000"'),
        ('"', b'"\\""'),
        ("\\", b'"\\\\"'),
        ("/", b'"/"'),  # solidus is not escaped
        ("\u007f", b'"\x7f"'),  # DEL is not escaped
        ("</script>", b'"</script>"'),
        ("\u20ac", '"\u20ac"'.encode("utf-8")),  # non-ASCII stays raw UTF-8
        ("A\u030a", '"A\u030a"'.encode("utf-8")),  # no Unicode normalization
    ],
    ids=[
        "newline",
        "short-escapes",
        "u000f",
        "u001f",
        "nul",
        "quote",
        "backslash",
        "solidus",
        "del",
        "script",
        "euro",
        "unnormalized",
    ],
)
def test_string_escaping(value: str, expected: bytes) -> None:
    assert canonicalize(value) == expected


# -- numbers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1e21, "1e+21"),
        (1e-7, "1e-7"),
        (0.000001, "0.000001"),
        (-0.0, "0"),
        (0.0, "0"),
        (100.0, "100"),
        (5e-324, "5e-324"),
        (-5e-324, "-5e-324"),
        (1e20, "100000000000000000000"),
        (1.5e21, "1.5e+21"),
        (1.5e-7, "1.5e-7"),
        (1.2345e-6, "0.0000012345"),
        (0.1, "0.1"),
        (-1.5, "-1.5"),
        (4.5, "4.5"),
        (2e-3, "0.002"),
        (1e30, "1e+30"),
        (333333333.33333329, "333333333.3333333"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
    ],
)
def test_number_to_string(value: float, expected: str) -> None:
    assert number_to_string(value) == expected


# RFC 8785 Appendix B: IEEE-754 bit patterns and their canonical text.
RFC8785_NUMBERS = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize(("bits", "expected"), RFC8785_NUMBERS, ids=[b for b, _ in RFC8785_NUMBERS])
def test_rfc8785_appendix_b_numbers(bits: str, expected: str) -> None:
    value = struct.unpack(">d", bytes.fromhex(bits))[0]
    assert number_to_string(value) == expected
    assert canonicalize([value]) == f"[{expected}]".encode()


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_raise_value_error(value: float) -> None:
    with pytest.raises(ValueError):
        number_to_string(value)
    with pytest.raises(ValueError):
        canonicalize({"a": [value]})


def test_integers_within_double_precision_are_plain() -> None:
    assert canonicalize(0) == b"0"
    assert canonicalize(-42) == b"-42"
    assert canonicalize(2**53) == b"9007199254740992"
    assert canonicalize(-(2**53)) == b"-9007199254740992"


@pytest.mark.parametrize("value", [2**53 + 1, -(2**53 + 1), 2**64, 10**30])
def test_integers_beyond_2_pow_53_raise_value_error(value: int) -> None:
    with pytest.raises(ValueError):
        canonicalize({"n": value})


def test_literals_and_no_whitespace() -> None:
    assert canonicalize([True, False, None, [], {}]) == b"[true,false,null,[],{}]"


# -- types ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [{1, 2}, b"bytes", object(), Decimal("1.5"), {"a": {"b": {1, 2}}}, [1, frozenset()]],
    ids=["set", "bytes", "object", "decimal", "nested-set", "frozenset-in-list"],
)
def test_non_json_types_raise_type_error(value: object) -> None:
    with pytest.raises(TypeError):
        canonicalize(value)


@pytest.mark.parametrize(
    "doc", [{1: "a"}, {"a": 1, None: 2}], ids=["int-key", "none-key-among-str-keys"]
)
def test_non_string_object_keys_raise_type_error(doc: dict) -> None:
    # The module promises TypeError for non-string keys, but the sort key
    # function (key.encode) runs before the isinstance check.
    with pytest.raises(TypeError):
        canonicalize(doc)


# -- the fast path is byte-identical to the reference serializer -------------------------

_ALPHABET = ["a", "Z", "_", " ", '"', "\\", "\x00", "\x1f", "\x7f", "é", "\u2028", "\ufeff", "😀"]


def _random_float(rng: random.Random) -> float:
    kind = rng.randrange(8)
    if kind == 0:
        return float(rng.randint(-(2**60), 2**60))  # integral, some beyond 2**53
    if kind == 1:
        return rng.uniform(-1, 1) * 10 ** rng.uniform(-30, 30)
    if kind == 2:
        return struct.unpack("<d", struct.pack("<Q", rng.getrandbits(62)))[0]  # any finite bits
    if kind == 3:
        return round(rng.random(), rng.randint(0, 7))
    if kind == 4:
        return rng.choice([0.0, -0.0, 1.0, 1e21, 1e-7, 1e16, 9007199254740992.0, 5e-324, 1e-4])
    return rng.uniform(-1e6, 1e6)


def _random_value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.randint(-(2**53), 2**53)
    if kind == 3:
        return _random_float(rng)
    if kind in (4, 5):
        return "".join(rng.choice(_ALPHABET) for _ in range(rng.randrange(6)))
    if kind == 6:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 7:
        return tuple(_random_value(rng, depth + 1) for _ in range(rng.randrange(3)))
    return {
        "".join(rng.choice(_ALPHABET) for _ in range(rng.randrange(1, 4))): _random_value(
            rng, depth + 1
        )
        for _ in range(rng.randrange(5))
    }


@pytest.mark.parametrize("seed", range(20))
def test_fast_path_matches_reference_on_random_documents(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        doc = _random_value(rng)
        assert canonicalize(doc) == canonicalize_reference(doc), doc


def test_fast_path_does_not_modify_its_input() -> None:
    doc = {"a": [1.0, {"b": 2.0}], "c": (3.0, 1e21)}
    before = repr(doc)
    assert canonicalize(doc) == b'{"a":[1,{"b":2}],"c":[3,1e+21]}'
    assert repr(doc) == before


def test_unsafe_integer_names_exactly_what_canonicalize_refuses() -> None:
    """``unsafe_integer`` first looks for 16 digits in a row in the value's JSON
    text and walks it only then: over documents with integers on either side of
    2^53 (also inside strings of digits, floats and deep lists), it names an
    integer exactly when ``canonicalize`` refuses the document, and the first
    such one in document order."""
    from ans.protocol.jcs import unsafe_integer

    rng = random.Random(53)
    edge = [2**53, 2**53 + 1, -(2**53), -(2**53) - 1, 10**15, 10**16, 2**63 - 1, 2**70]
    seen = {True: 0, False: 0}
    for _ in range(600):
        doc = {
            "a": [rng.choice(edge) if rng.random() < 0.3 else rng.randint(-999, 999)],
            "s": str(rng.choice(edge)),  # digits in a string never count
            "f": [_random_float(rng) for _ in range(2)],
            "d": {"x": [{"y": rng.choice(edge)}] if rng.random() < 0.2 else []},
        }
        where = unsafe_integer(doc)
        try:
            canonicalize(doc)
            refused = False
        except ValueError:
            refused = True
        assert (where is not None) == refused, doc
        seen[refused] += 1
        if refused:
            first = next(p for v, p in ((doc["a"][0], ".a[0]"),
                                        (doc["d"]["x"][0]["y"] if doc["d"]["x"] else 0, ".d.x[0].y"))
                         if abs(v) > 2**53)
            assert where == first
    assert seen[True] > 50 and seen[False] > 50  # both sides exercised
