"""What one AGTP body costs ``ans.protocol.jsonstrict.loads``, per adversarial shape.

    .venv/bin/python bench/parse_cost.py [--repeat 15] [--heap 80000] [--out FILE]
    git show REV:protocol/jsonstrict.py > /tmp/old.py
    .venv/bin/python bench/parse_cost.py --module /tmp/old.py --out FILE  # an older version

Every shape is about 256 KB (the default body limit), built the way a hostile
client would: whitespace everywhere, many tiny containers, nesting at the
depth limit, numbers and strings that orjson writes back differently, a
duplicate key at the very end. Each is parsed ``--repeat`` times in this
process; the median is printed beside the same document written compactly by
orjson (``compact_ms``: what the parse of that shape costs at the least, since
orjson must build the same Python objects) and as a ratio to it and to a
compact 256 KB string body (``ratio_to_string``).

``--heap`` long-lived objects (a demo server holds about 80,000 tracked by the
garbage collector) are allocated first so that the cyclic garbage
collector works as hard as in a running server (a body of many containers
triggers collections whose cost grows with the heap); 0 for a bare process.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from ans.protocol import jsonstrict

ROOT = Path(__file__).resolve().parent.parent
SIZE = 262_000  # a little under DEFAULT_MAX_BYTES (262,144)
DEEP = b"[" * 30 + b"0" + b"]" * 30  # with the two levels around it: depth 32, the limit


def fill(prefix: bytes, unit: bytes, suffix: bytes, size: int = SIZE) -> bytes:
    """``prefix + unit * k + suffix`` with ``k`` as large as fits in ``size``."""
    return prefix + unit * ((size - len(prefix) - len(suffix)) // len(unit)) + suffix


def shapes() -> dict[str, bytes]:
    head = b' {"method": "DISCOVER", "task_id": "t", "parameters": {"intent": "x", "limit": 0}, '
    string = {"method": "DISCOVER", "task_id": "t", "parameters": {"intent": "x", "pad": ""}}
    string["parameters"]["pad"] = "a" * (SIZE - len(orjson.dumps(string)))
    nested_objects = b'{"a": ' * 30 + b"0" + b"}" * 30 + b", "
    return {
        "compact_string": orjson.dumps(string),
        "spaced_empty_objects": fill(head + b'"pad": [', b"{}, ", b"{}]}"),
        "depth31_lists": fill(head + b'"pad": [', DEEP + b",", b"1]}"),
        "depth31_lists_compact_dup": fill(b'{"a":0,"pad":[', DEEP + b",", b'1],"a":0}'),
        "depth31_objects_spaced": fill(head + b'"pad": [', nested_objects, b"1]}"),
        "spaced_small_objects": fill(head + b'"pad": [', b'{"a": 1}, ', b"{}]}"),
        "short_numbers_1e2": fill(head + b'"pad": [', b"1e2,", b"1]}"),
        "floats_1.0_spaced": fill(head + b'"pad": [', b"1.0, ", b"1]}"),
        "ints_19_digits": fill(head + b'"pad": [', b"1234567890123456789,", b"1]}"),
        "ints_over_64_bits": fill(head + b'"pad": [', b"123456789012345678901,", b"1]}"),
        "one_long_float": fill(head + b'"pad": 1.', b"1", b"}"),
        "unicode_escapes": fill(head + b'"pad": "', b"\\u0041", b'"}'),
        "surrogate_pair_escapes": fill(head + b'"pad": "', b"\\ud83d\\ude00", b'"}'),
        "escaped_quotes_brackets": fill(head + b'"pad": "', b'\\"[', b'"}'),
        "escaped_backslashes": fill(head + b'"pad": "', b"\\\\", b'"}'),
        "brackets_in_string": fill(head + b'"pad": "', b"[", b'"}'),
        "empty_strings": fill(head + b'"pad": [', b'"", ', b'""]}'),
        "literals_spaced": fill(head + b'"pad": [', b"true, null, false, ", b"1]}"),
        "many_keys_one_object": head
        + b'"pad": {'
        + b", ".join(b'"%d": 0' % i for i in range(22_500))
        + b"}}",
        "long_keys": head
        + b'"pad": {'
        + b", ".join(b'"%s": 1' % (b"%04d" % i + b"k" * 996) for i in range(250))
        + b"}}",
        "duplicate_key_at_end": fill(head + b'"pad": [', b"{}, ", b'{}], "pad": 1}'),
        "depth31_lists_one_long_int": fill(
            head + b'"pad": [', DEEP + b",", b"-1234567890123456789]}"
        ),
        "spaced_empty_objects_one_long_int": fill(
            head + b'"pad": [', b"{}, ", b"12345678901234567890]}"
        ),
    }


def load_module(path: Path) -> None:
    """Use the jsonstrict implementation in ``path`` (as ans.protocol.jsonstrict)."""
    global jsonstrict
    spec = importlib.util.spec_from_file_location("ans.protocol.jsonstrict", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    jsonstrict = module


def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def outcome(body: bytes) -> str:
    try:
        jsonstrict.loads(body)
    except Exception as exc:
        return f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"[:80]
    return "ok"


def parse(body: bytes) -> None:
    with contextlib.suppress(Exception):  # refusals are timed like answers
        jsonstrict.loads(body, max_bytes=max(len(body), jsonstrict.DEFAULT_MAX_BYTES))


def compact_of(body: bytes) -> bytes:
    """The same document as orjson writes it (it may come out longer than the
    body, e.g. ``1e2`` as ``100.0``); when that is not the same document
    (a duplicate key dropped, an integer beyond 64 bits, a long number
    rounded), the body without its whitespace outside strings."""
    try:
        compact = orjson.dumps(orjson.loads(body))
        if compact.count(b":") == body.count(b":") and len(compact) * 4 > len(body):
            return compact
    except orjson.JSONDecodeError:
        pass
    return re.sub(rb'("(?:[^"\\]|\\.)*")|\s+', lambda m: m.group(1) or b"", body)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--heap", type=int, default=80_000)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "parse_cost.json")
    ap.add_argument("--module", type=Path, help="time this jsonstrict.py instead (e.g. an old one)")
    args = ap.parse_args(argv)
    if args.module is not None:
        load_module(args.module)
    heap = [[i] for i in range(args.heap)]  # kept alive until the end
    gc.collect()
    print(f"{len(gc.get_objects())} objects tracked by the garbage collector")
    bodies = shapes()
    string_ms = median_ms(lambda: parse(bodies["compact_string"]), args.repeat)
    rows = []
    print(f"{'shape':28} {'bytes':>7} {'ms':>7} {'compact':>8} {'x cmp':>6} {'x str':>6}  outcome")
    for name, body in bodies.items():
        assert len(body) <= jsonstrict.DEFAULT_MAX_BYTES, name
        compact = compact_of(body)
        ms = median_ms(lambda b=body: parse(b), args.repeat)  # type: ignore[misc]
        cms = median_ms(lambda b=compact: parse(b), args.repeat)  # type: ignore[misc]
        row = {
            "shape": name,
            "bytes": len(body),
            "median_ms": round(ms, 3),
            "compact_ms": round(cms, 3),
            "ratio_to_compact": round(ms / cms, 2),
            "ratio_to_string": round(ms / string_ms, 1),
            "outcome": outcome(body),
        }
        rows.append(row)
        print(
            f"{name:28} {len(body):7} {ms:7.2f} {cms:8.2f} {ms / cms:6.2f} "
            f"{ms / string_ms:6.1f}  {row['outcome']}"
        )
    worst = max(rows, key=lambda r: r["median_ms"])
    print(f"worst: {worst['shape']} {worst['median_ms']} ms; compact string {string_ms:.2f} ms")
    result = {
        "bench": "parse_cost",
        "command": "python bench/parse_cost.py " + " ".join(argv or sys.argv[1:]),
        "module": str(args.module or "ans.protocol.jsonstrict"),
        "machine": {"python": platform.python_version(), "orjson": orjson.__version__},
        "repeat": args.repeat,
        "heap_objects": args.heap,
        "compact_string_ms": round(string_ms, 3),
        "worst": {"shape": worst["shape"], "median_ms": worst["median_ms"]},
        "shapes": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out}")
    del heap
    return 0


if __name__ == "__main__":
    sys.exit(main())
