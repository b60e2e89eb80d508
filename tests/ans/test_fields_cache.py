"""ans.core.fields_cache: the two tiers of the result-fields cache, their
bounds, and the generation guard that keeps a read racing a write out."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from ans.config import Config
from ans.core.fields_cache import FieldsCache
from ans.result_fields import FIELDS_FORMAT


def doc(cid: str, pad: int = 0) -> tuple[dict[str, Any], bytes]:
    fields = {"canonical_id": cid, "pad": "x" * pad}
    return fields, orjson.dumps([FIELDS_FORMAT, fields])


def test_a_decoded_entry_falls_back_to_its_bytes_then_to_a_miss() -> None:
    cache = FieldsCache(dict_entries=2, blob_bytes=10_000)
    decoded, blobs = {}, {}
    for cid in ("a", "b", "c"):
        decoded[cid], blobs[cid] = doc(cid)
    cache.keep(decoded, blobs, cache.generation)
    found, held, missing = cache.lookup(["a", "b", "c", "d"])
    # two decoded entries are kept (the last two), "a" only as bytes
    assert sorted(found) == ["b", "c"]
    assert held == [("a", blobs["a"])]
    assert missing == ["d"]


def test_the_decoded_tier_shrinks_for_a_large_catalog() -> None:
    from ans.core.fields_cache import LARGE_CATALOG

    cache = FieldsCache(dict_entries=3, blob_bytes=10_000, dict_entries_large=1)
    decoded, blobs = {}, {}
    for cid in ("a", "b", "c"):
        decoded[cid], blobs[cid] = doc(cid)
    cache.keep(decoded, blobs, cache.generation, agents=LARGE_CATALOG)
    assert sorted(cache.lookup(["a", "b", "c"])[0]) == ["a", "b", "c"]
    cache.keep({}, {}, cache.generation, agents=LARGE_CATALOG + 1)  # the catalog grew
    found, held, _ = cache.lookup(["a", "b", "c"])
    assert sorted(found) == ["c"]
    assert sorted(cid for cid, _ in held) == ["a", "b"]  # still as bytes


def test_bytes_are_bounded_and_the_least_recent_go_first() -> None:
    one = len(doc("a", 100)[1])
    cache = FieldsCache(dict_entries=0, blob_bytes=3 * one)
    for cid in ("a", "b", "c"):
        cache.keep({}, {cid: doc(cid, 100)[1]}, cache.generation)
    cache.lookup(["a"])  # "a" is now the most recent
    cache.keep({}, {"d": doc("d", 100)[1]}, cache.generation)
    _, held, missing = cache.lookup(["a", "b", "c", "d"])
    assert [cid for cid, _ in held] == ["a", "c", "d"]
    assert missing == ["b"]
    # replacing an entry does not count its old bytes twice
    for _ in range(5):
        cache.keep({}, {"d": doc("d", 100)[1]}, cache.generation)
    assert len(cache.lookup(["a", "c", "d"])[1]) == 3


def test_forget_drops_both_tiers_and_a_racing_read_is_not_kept() -> None:
    cache = FieldsCache()
    fields, blob = doc("a")
    cache.keep({"a": fields}, {"a": blob}, cache.generation)
    gen = cache.generation
    cache.forget("a")
    assert cache.lookup(["a"]) == ({}, [], ["a"])
    cache.keep({"a": fields}, {"a": blob}, gen)  # read before the forget: stale
    assert cache.lookup(["a"]) == ({}, [], ["a"])
    cache.keep({"a": fields}, {"a": blob}, cache.generation)
    assert cache.lookup(["a"])[0] == {"a": fields}


def test_served_fields_are_the_same_from_every_tier(
    make_ans: Callable[..., Any], tmp_path: Path
) -> None:
    from tools.synth import generate

    svc = make_ans(Config(data_dir=tmp_path), load=True)
    pairs = list(generate(6, 5))
    stored, _, refused = svc.activate_many([(m, c, "kid") for m, c in pairs])
    assert not refused and len(stored) == 6
    ids = [m["canonical_id"] for m, _ in pairs]
    cache = svc.index.fields_cache
    cache.dict_entries = 2
    from_store = svc.index.result_fields(ids)  # a miss each: read from the store
    found, held, missing = cache.lookup(ids)
    assert len(found) == 2 and len(held) == 4 and not missing
    again = svc.index.result_fields(ids)  # four from bytes, two decoded
    assert sorted(again) == sorted(ids)
    for cid in ids:  # the same bytes (key order included) whichever tier served them
        assert orjson.dumps(again[cid]) == orjson.dumps(from_store[cid]), cid
    # an ACTIVATE of a new version re-derives: the cache never serves the old one
    manifest, caps = pairs[0]
    caps = {**caps, "description": "a new description for this agent"}
    _, _, refused = svc.activate_many([(manifest, caps, "kid")])
    assert not refused
    assert svc.index.result_fields([ids[0]])[ids[0]]["description"] == caps["description"]


def test_a_catalog_up_to_the_large_size_is_held_whole_and_a_larger_one_not() -> None:
    from ans.core.fields_cache import LARGE_CATALOG

    rows = [(cid, doc(cid, 50)[1]) for cid in ("a", "b", "c", "d")]
    small = FieldsCache(dict_entries=0, blob_bytes=1)
    assert small.hold(iter(rows), agents=LARGE_CATALOG) == 4
    found, held, missing = small.lookup(["a", "b", "c", "d"])
    assert not found and missing == [] and [cid for cid, _ in held] == ["a", "b", "c", "d"]
    # the bytes tier grew to what it holds and a quarter more: one later agent fits,
    # the next pushes out the least recent
    small.keep({}, {"e": doc("e", 50)[1]}, small.generation)
    assert small.lookup(["a", "e"])[2] == []
    small.keep({}, {"f": doc("f", 50)[1]}, small.generation)
    assert small.lookup(["b", "f"])[2] == ["b"]
    large = FieldsCache(dict_entries=0, blob_bytes=1)
    assert large.hold(iter(rows), agents=LARGE_CATALOG + 1) == 0
    assert large.lookup(["a"])[2] == ["a"]


def test_holding_stops_at_its_byte_bound(monkeypatch: Any) -> None:
    import ans.core.fields_cache as fc

    one = len(doc("a", 50)[1])
    monkeypatch.setattr(fc, "HOLD_BYTES", 2 * one)
    cache = FieldsCache(dict_entries=0, blob_bytes=1)
    rows = [(cid, doc(cid, 50)[1]) for cid in ("a", "b", "c")]
    assert cache.hold(iter(rows), agents=3) == 2
    assert cache.lookup(["a", "b", "c"])[2] == ["c"]
    cache.forget("a")  # a held document goes when its agent is re-indexed
    assert cache.lookup(["a"])[2] == ["a"]
