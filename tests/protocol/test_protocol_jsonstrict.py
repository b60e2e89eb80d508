"""Strict, bounded JSON parsing: JSONTestSuite (nst/JSONTestSuite
test_parsing) plus unit cases for each rule of ``ans.protocol.jsonstrict``."""

from __future__ import annotations

import contextlib
import gc
from pathlib import Path
from typing import Any

import orjson
import pytest
from ans.protocol import jsonstrict
from ans.protocol.errors import AgtpError, BodyTooLarge, MalformedJson
from ans.protocol.jsonstrict import DEFAULT_MAX_BYTES, MAX_DEPTH, loads


def _find_vectors() -> Path | None:
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "vectors"
        if candidate.is_dir():
            return candidate
    return None


VECTORS = _find_vectors()
ABSENT = "shared/vectors is absent (clone outside the workspace); JSONTestSuite tests need it"
SUITE = VECTORS / "jsontestsuite" / "test_parsing" if VECTORS is not None else None

# RFC 8259 allows duplicate names (hence y_), but AGTP's strict policy rejects
# them by design: a duplicate key is ambiguous and could smuggle a second value
# past a signature check. These two y_ files must therefore be rejected.
DUPLICATE_KEY_FILES = {"y_object_duplicated_key.json", "y_object_duplicated_key_and_value.json"}


def _names(prefix: str) -> list[str]:
    if SUITE is None:
        return ["<vectors-absent>"]
    return sorted(p.name for p in SUITE.iterdir() if p.name.startswith(prefix))


def _read(name: str) -> bytes:
    if SUITE is None:
        pytest.skip(ABSENT)
    return (SUITE / name).read_bytes()


def _assert_agtp_400(exc: BaseException) -> None:
    assert isinstance(exc, AgtpError)
    assert exc.status == 400
    assert isinstance(exc.code, str) and exc.code


def test_suite_is_populated() -> None:
    if SUITE is None:
        pytest.skip(ABSENT)
    for prefix in ("y_", "n_", "i_"):
        assert _names(prefix), f"no {prefix}* files in {SUITE}"
    assert DUPLICATE_KEY_FILES <= set(_names("y_"))


@pytest.mark.parametrize("name", _names("y_"))
def test_y_files_parse(name: str) -> None:
    data = _read(name)
    if name in DUPLICATE_KEY_FILES:
        with pytest.raises(MalformedJson) as info:
            loads(data)
        assert "duplicate" in info.value.message
        _assert_agtp_400(info.value)
        return
    loads(data)


@pytest.mark.parametrize("name", _names("n_"))
def test_n_files_rejected(name: str) -> None:
    data = _read(name)
    expected = BodyTooLarge if len(data) > DEFAULT_MAX_BYTES else MalformedJson
    with pytest.raises(expected) as info:
        loads(data)
    _assert_agtp_400(info.value)


@pytest.mark.parametrize("name", _names("i_"))
def test_i_files_parse_or_raise_malformed_json(name: str) -> None:
    data = _read(name)
    try:
        loads(data)
    except MalformedJson as exc:
        _assert_agtp_400(exc)
    except BodyTooLarge as exc:
        assert len(data) > DEFAULT_MAX_BYTES
        _assert_agtp_400(exc)
    # any other exception type propagates and fails the test


# -- unit cases ----------------------------------------------------------------------


def _rejects(data: bytes, **kw: int) -> MalformedJson:
    with pytest.raises(MalformedJson) as info:
        loads(data, **kw)
    _assert_agtp_400(info.value)
    assert info.value.code == "malformed_json"
    return info.value


def test_valid_document_round_trip() -> None:
    assert loads(b' {"a": [1, 2.5, "x", true, null], "b": {}} ') == {
        "a": [1, 2.5, "x", True, None],
        "b": {},
    }


@pytest.mark.parametrize(
    "data",
    [
        b"NaN",
        b"[NaN]",
        b"Infinity",
        b"-Infinity",
        b'{"a": Infinity}',
        b'{"a": -Infinity}',
        b"[nan]",
        b"[inf]",
    ],
)
def test_non_finite_literals_rejected(data: bytes) -> None:
    _rejects(data)


@pytest.mark.parametrize("data", [b"1e400", b"[-1e400]", b'{"x": 1.5e309}'])
def test_overflowing_numbers_rejected(data: bytes) -> None:
    _rejects(data)


def test_large_but_finite_number_accepted() -> None:
    assert loads(b"[1.7976931348623157e308]") == [1.7976931348623157e308]


@pytest.mark.parametrize(
    "data",
    [
        b'{"a": 1, "a": 2}',
        b'{"a": {"b": 1, "b": 1}}',
        b'{"outer": [{"ok": 1}, {"inner": {"c": 1, "d": 2, "c": 3}}]}',
        b'[[[{"k": null, "k": null}]]]',
    ],
    ids=["top", "depth2-same-value", "inside-array", "depth4"],
)
def test_duplicate_keys_rejected_at_any_depth(data: bytes) -> None:
    assert "duplicate" in _rejects(data).message


def test_same_key_in_sibling_objects_is_fine() -> None:
    assert loads(b'[{"a": 1}, {"a": 2}]') == [{"a": 1}, {"a": 2}]


def test_nesting_exactly_max_depth_accepted() -> None:
    data = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    value = loads(data)
    for _ in range(MAX_DEPTH - 1):
        value = value[0]
    assert value == []


@pytest.mark.parametrize(
    "data",
    [
        b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1),
        b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1),
        b"[" * 100_000,
    ],
    ids=["arrays", "objects", "unclosed-100k"],
)
def test_nesting_deeper_than_max_depth_rejected(data: bytes) -> None:
    assert "nesting" in _rejects(data).message


def test_custom_max_depth() -> None:
    _rejects(b"[[[1]]]", max_depth=2)
    assert loads(b"[[1]]", max_depth=2) == [[1]]


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    deep_text = "[" * (MAX_DEPTH * 3)
    data = ('["' + deep_text + '\\"{{{{"]').encode()
    assert loads(data) == [deep_text + '"{{{{']


def test_body_over_max_bytes() -> None:
    data = b'{"k": "' + b"x" * 100 + b'"}'
    with pytest.raises(BodyTooLarge) as info:
        loads(data, max_bytes=len(data) - 1)
    _assert_agtp_400(info.value)
    assert info.value.code == "body_too_large"
    assert loads(data, max_bytes=len(data)) == {"k": "x" * 100}


def test_default_max_bytes_enforced() -> None:
    data = b'"' + b"a" * DEFAULT_MAX_BYTES + b'"'
    with pytest.raises(BodyTooLarge):
        loads(data)


@pytest.mark.parametrize(
    "data",
    [b'"\\ud800"', b'["\\udc00"]', b'{"\\ud800": 1}', b'"\\ud800\\u0041"', b'"\\udc00\\ud800"'],
    ids=["lone-high", "lone-low", "lone-in-key", "high-then-bmp", "inverted-pair"],
)
def test_lone_surrogate_escapes_rejected(data: bytes) -> None:
    _rejects(data)


def test_valid_surrogate_pair_escape_accepted() -> None:
    assert loads(b'"\\ud83d\\ude00"') == "\U0001f600"


@pytest.mark.parametrize(
    "data",
    [
        b'["\xff"]',
        b'"\xc0\xaf"',
        b'"\xed\xa0\x80"',
        b'"\xe2\x82"',
        b'"\x80"',
        b"\xfe\xff\x00[\x00]",
        b'"\xf4\x90\x80\x80"',
    ],
    ids=[
        "ff-byte",
        "overlong",
        "utf8-surrogate",
        "truncated",
        "lone-continuation",
        "utf16-bom",
        "beyond-u10ffff",
    ],
)
def test_invalid_utf8_rejected(data: bytes) -> None:
    _rejects(data)
    with pytest.raises(MalformedJson, match="not UTF-8 \\(byte"):
        loads(data)  # said so, with where: not "surrogates not allowed" for a Latin-1 body


@pytest.mark.parametrize(
    "data",
    [b"", b"   ", b"{", b"[1,]", b'{"a" 1}', b"'x'", b'"\x01"', b"01", b"[1] [2]", b"{a: 1}"],
    ids=[
        "empty",
        "blank",
        "unclosed",
        "trailing-comma",
        "no-colon",
        "single-quotes",
        "raw-control-char",
        "leading-zero",
        "two-values",
        "bare-key",
    ],
)
def test_syntax_errors_rejected(data: bytes) -> None:
    _rejects(data)


# -- the round-trip shortcut (a body orjson writes back byte for byte) ---------------------


@pytest.mark.parametrize(
    "body",
    [b'{"a":1,"a":1}', b'{"x":{"k":"v","k":"v"}}', b'[{"a":0.5,"b":[1,2],"a":0.5}]'],
    ids=["same-value", "nested", "in-list"],
)
def test_compact_duplicates_are_refused_although_orjson_takes_them(body: bytes) -> None:
    orjson.loads(body)  # orjson alone would accept it
    with pytest.raises(MalformedJson, match="duplicate key"):
        jsonstrict.loads(body)


def test_compact_orjson_body_parses_like_the_strict_decoder() -> None:
    doc = {
        "result": {
            "results": [{"rank": 1, "score": 0.912345, "zone": "zone:public", "ok": True}],
            "text": 'caf\u00e9 \u2028 "q" \\ \x01',
            "n": None,
            "big": 2**53,
            "neg": -0.0,
            "tiny": 5e-324,
        }
    }
    body = orjson.dumps(doc)
    assert orjson.dumps(orjson.loads(body)) == body  # the shortcut applies
    assert jsonstrict.loads(body) == jsonstrict._DECODER.decode(body.decode()) == doc


# -- any other body: decided on the text outside strings, in linear time -------------------


@pytest.mark.parametrize(
    "body",
    [
        b'{"a": 1, "\\u0061": 2}',
        b'{ "a" : ":" , "a" : 1 }',
        b'{"k": "x", "k\\"": 1, "k\\"": 2}',
        b'[ {"x": {"k": null}}, {"y": {"k": 1, "k": null}} ]',
        b'{"a": {"n": null, "m": 1}, "a": {"n": null}}',
    ],
    ids=["escaped-spelling", "colon-in-value", "escaped-quote-in-key", "nested-null", "subtree"],
)
def test_spaced_duplicates_are_refused(body: bytes) -> None:
    assert "duplicate key" in _rejects(body).message


@pytest.mark.parametrize(
    "body, value",
    [
        (b'{ "a:b" : "c:d", "e" : "\\":", "n": "null" }', {"a:b": "c:d", "e": '":', "n": "null"}),
        (b'{"\\\\": {"\\\\\\"": [null, ":"]}}', {"\\": {'\\"': [None, ":"]}}),
        (b'[ "\\u003a", {"\\u003a": null} ]', [":", {":": None}]),
        (b'{"a" :1,"b":1e2, "c": 0.10}', {"a": 1, "b": 100.0, "c": 0.1}),
    ],
    ids=["colons-and-null-in-strings", "escapes", "escaped-colon", "number-spellings"],
)
def test_spaced_documents_parse_like_the_strict_decoder(body: bytes, value: object) -> None:
    assert loads(body) == jsonstrict._DECODER.decode(body.decode()) == value


def _spy(monkeypatch: pytest.MonkeyPatch, name: str) -> list[str]:
    """Record every call of the stdlib decoder ``name`` in jsonstrict."""
    calls: list[str] = []
    decoder = getattr(jsonstrict, name)

    class Spy:
        def decode(self, text: str) -> object:
            calls.append(text)
            return decoder.decode(text)

    monkeypatch.setattr(jsonstrict, name, Spy())
    return calls


@pytest.mark.parametrize(
    "body, ok",
    [
        (b' {"pad": [' + b"{}, " * 20_000 + b"{}]}", True),
        (b'{"pad": [' + (b"[" * 30 + b"0" + b"]" * 30 + b", ") * 2_000 + b"1]}", True),
        (b'{"pad": "' + b"\\u0041" * 10_000 + b'", "n": [1e2, 1.0, -0, 0.5E-3]}', True),
        (b'{"pad": [' + b"{}, " * 20_000 + b'{}], "pad": 1}', False),
    ],
    ids=["spaced-empty-objects", "depth-31-lists", "escapes-and-numbers", "duplicate-at-end"],
)
def test_no_body_is_parsed_twice(monkeypatch: pytest.MonkeyPatch, body: bytes, ok: bool) -> None:
    """The slow path that a hostile client could force (orjson, then the
    stdlib with Python hooks: 100 ms for 256 KB) is gone."""
    strict, exact = _spy(monkeypatch, "_DECODER"), _spy(monkeypatch, "_EXACT")
    with contextlib.nullcontext() if ok else pytest.raises(MalformedJson):
        loads(body)
    assert strict == exact == []


@pytest.mark.parametrize(
    "body, value",
    [
        (b"[98765432109876543210]", [98765432109876543210]),
        (b"[ -1234567890123456789 ]", [-1234567890123456789]),
        (b'{"n": 340282366920938463463374607431768211456}', {"n": 2**128}),
    ],
)
def test_integers_beyond_64_bits_stay_exact(
    monkeypatch: pytest.MonkeyPatch, body: bytes, value: Any
) -> None:
    calls = _spy(monkeypatch, "_EXACT")
    assert loads(body) == value
    assert calls, "orjson turns these into floats; the stdlib keeps them exact"
    (number,) = value.values() if isinstance(value, dict) else value
    assert type(number) is int
    assert loads(body) == jsonstrict._DECODER.decode(body.decode())


@pytest.mark.parametrize(
    "body, value",
    [
        (b"[1234567890123456789]", [1234567890123456789]),
        (b"[ -123456789012345678 ]", [-123456789012345678]),
        (b"[ 0.12345678901234567890 ]", [0.12345678901234567890]),
        (b"[ 12345678901234567890.5 ]", [12345678901234567890.5]),
        (b"[ 1e-12345678901234567890 ]", [0.0]),
        (b"[ 1.5E+0000000000000000000001 ]", [15.0]),
    ],
    ids=["19-digits", "18-digits-negative", "fraction", "integer-part", "exponent", "exponent+"],
)
def test_other_long_digit_runs_need_no_second_parse(
    monkeypatch: pytest.MonkeyPatch, body: bytes, value: list[object]
) -> None:
    calls = _spy(monkeypatch, "_EXACT")
    assert loads(body) == value
    assert type(loads(body)[0]) is type(value[0])
    assert calls == []


def test_integer_beyond_a_double_rejected() -> None:
    _rejects(b"[ " + b"9" * 400 + b" ]")


def test_nesting_deeper_than_orjson_writes_back() -> None:
    data = b" " + b"[" * 300 + b"]" * 300  # orjson reads 300 levels but writes at most ~250
    value = loads(data, max_depth=300)
    for _ in range(299):
        value = value[0]
    assert value == []


@pytest.mark.parametrize("body", [b'[[{"a": 1}], {"b": [2, 3]}]', b"[", b'{"a":1,"a":2}'])
def test_garbage_collector_is_left_as_it_was(body: bytes) -> None:
    assert gc.isenabled()
    with contextlib.suppress(MalformedJson):
        loads(body)
    assert gc.isenabled()
    gc.disable()
    try:
        with contextlib.suppress(MalformedJson):
            loads(body)
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("strings", [10, 5_000], ids=["few-quotes", "many-quotes"])
def test_strings_full_of_colons_and_brackets(strings: int) -> None:
    """Both ways of finding the strings (bytes.split, NumPy past 2,048 quotes)."""
    items = [f'"k{i}": "v:{{[null\\\\\\":"' for i in range(strings)]
    body = ("{ " + ", ".join(items) + " }").encode()
    value = loads(body)
    assert len(value) == strings and value["k0"] == 'v:{[null\\":'
    _rejects(body[:-1] + b', "k0": 1}')  # a duplicate of the first key, at the end
    deep = ("[" * MAX_DEPTH + '"' + "[" * 100 + '", "x:"' + "]" * MAX_DEPTH).encode()
    assert loads(deep)
