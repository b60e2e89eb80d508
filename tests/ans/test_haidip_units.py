"""HAIDIP pieces without a server: the [haidip] section (file and
environment, the invoke table left alone), the error mapping (every core
code to a documented HAIDIP code, never a 500), cursors and ETags, the
list query parser's bounds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ans.governance.keys import SigningKey
from ans.protocol.errors import ERROR_CODES, AgtpError, BadRequest, ErrorCode, Unavailable
from ans.protocol.haidip_query import parse_list_query, parse_search

from ans.config import ConfigError, load
from ans.haidip_config import HaidipConfigError, HaidipSettings, haidip_from_table
from ans.surfaces.haidip_errors import HAIDIP_STATUS, HaidipCode, haidip_error
from ans.surfaces.haidip_paging import Cursors, etag_of, matches

DOCS = Path(__file__).resolve().parents[2] / "docs" / "haidip.md"
CARD = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "cards" / "translator-001.json").read_text()
)


def test_defaults_and_the_invoke_table_is_skipped(tmp_path: Path) -> None:
    assert load(None, environ={}).haidip == HaidipSettings()
    cfg = tmp_path / "ans.toml"
    cfg.write_text(
        "[haidip]\npublic_listing = true\nbase_path = '/agents-api/v2'\n"
        "[haidip.invoke]\nread_timeout = 5.0  # the gateway parses this table\n"
    )
    loaded = load(cfg, environ={})
    settings = loaded.haidip
    assert loaded.invoke.read_timeout == 5.0
    assert settings.public_listing and settings.base_path == "/agents-api/v2"
    assert not settings.card_upload and settings.enabled
    env = {"ANS_HAIDIP__CARD_UPLOAD": "true", "ANS_HAIDIP__TRUST_TIER_MIN": "2"}
    settings = load(None, environ=env).haidip
    assert settings.card_upload and settings.trust_tier_min == 2


@pytest.mark.parametrize(
    ("table", "text"),
    [
        ({"public_listing": "yes"}, "true or false"),
        ({"base_path": "haidip"}, "absolute path"),
        ({"base_path": "/agtp/x"}, "hide an ANS route"),
        ({"trust_tier_min": 4}, "1, 2 or 3"),
        ({"colour": 1}, "unknown key"),
    ],
)
def test_bad_values_are_one_line_errors(table: dict[str, object], text: str) -> None:
    with pytest.raises(HaidipConfigError, match=text):
        haidip_from_table(table)


def test_bad_section_through_load(tmp_path: Path) -> None:
    cfg = tmp_path / "ans.toml"
    cfg.write_text("[haidip]\nenabled = 1\n")
    with pytest.raises(ConfigError, match=r"\[haidip\] enabled"):
        load(cfg, environ={})


def test_every_core_code_maps_to_a_documented_haidip_code() -> None:
    documented = DOCS.read_text(encoding="utf-8") if DOCS.exists() else ""
    for status in (400, 401, 404, 408, 409, 410, 422, 429, 451, 453, 500, 503):
        for code in ERROR_CODES:
            exc = AgtpError("m" * 1000, code=ErrorCode(code))
            exc.status = status  # type: ignore[misc]
            err = haidip_error(exc, "corr")
            assert (
                err.status != 500
                and err.status == HAIDIP_STATUS[HaidipCode(err.body["error"]["code"])]
            )
            assert len(err.body["error"]["message"]) <= 300
    for code in HaidipCode:
        assert f"`{code}`" in documented, f"{code} is not documented in docs/haidip.md"


def test_specific_mappings() -> None:
    assert haidip_error(BadRequest("x", code=ErrorCode.BODY_TOO_LARGE), "c").status == 413
    suspended = haidip_error(Unavailable("s", code=ErrorCode.AGENT_SUSPENDED), "c")
    assert suspended.status == 503 and suspended.body["error"]["code"] == "AgentSuspended"
    assert ("retry-after", "1") in suspended.headers
    missing = haidip_error(BadRequest("x", code=ErrorCode.MISSING_AGENT_ID), "c")
    assert missing.status == 401


def test_cursor_is_bound_to_key_and_filters() -> None:
    key = SigningKey.generate()
    cursors = Cursors(key)
    c = cursors.make("fleet-10", "ab" * 32)
    assert cursors.open(c, "ab" * 32) == "fleet-10"
    assert Cursors(key).open(c, "ab" * 32) == "fleet-10"  # another worker, same key
    for bad, digest in ((c, "cd" * 32), (c + "x", "ab" * 32), ("a.b", "ab" * 32)):
        with pytest.raises(BadRequest):
            cursors.open(bad, digest)
    with pytest.raises(BadRequest):
        Cursors(SigningKey.generate()).open(c, "ab" * 32)


def test_etag_covers_feed_query_and_entitlement() -> None:
    q = {"filters": {}, "top": 20}
    tag = etag_of(7, q, "discovery:query")
    assert tag == etag_of(7, dict(q), "discovery:query")
    assert tag != etag_of(8, q, "discovery:query")
    assert tag != etag_of(7, {**q, "top": 5}, "discovery:query")
    assert tag != etag_of(7, q, "discovery:query zone:finance")
    assert matches(f'"x", W/{tag}', tag) and matches("*", tag) and not matches('"y"', tag)


@pytest.mark.parametrize(
    "qs",
    [
        b"top=0",
        b"top=101",
        b"skip=-1",
        b"top=abc",
        b"colour=red",
        b"top=1&top=2",
        b"tag=" + b"x" * 5000,
        # a hard filter with nothing left once normalized is refused, never dropped
        b"tag=---",
        b"tag=%00",
        b"capability=%21%21",
        b"tag=ok,--",
    ],
)
def test_list_query_bounds(qs: bytes) -> None:
    with pytest.raises(BadRequest):
        parse_list_query(qs)


def test_list_query_values() -> None:
    q = parse_list_query(b"capability=Translation,Language&capability=nlp&language=FR&top=5")
    assert q.filters.capabilities == ("translation", "language", "nlp")
    assert parse_list_query(b"tag=Smart Contracts,smart-contracts").filters.tags == (
        "smart-contracts",
    )
    assert q.filters.languages == ("fr",) and q.top == 5 and q.skip == 0


@pytest.mark.parametrize(
    "doc",
    [
        {"query": 1},
        {"filters": []},
        {"filters": {"colour": "red"}},
        {"filters": {"tags": [1]}},
        {"filters": {"certification": "gold"}},
        {"ranked": "yes"},
        {"top": 0},
        {"skip": 99, "top": 2},
        {"query": "x" * 2001},
        {"filters": {"tags": ["t"] * 17}},
        {"filters": {"capabilities": ["!!!"]}},
        {"filters": {"certification": {"verified": "yes"}}},
        {"filters": {"certification": {"governed": 1}}},
        {"top": "3"},  # a JSON body's integers are JSON numbers
        {"skip": "2"},
        {"trust_tier_min": "2"},
    ],
)
def test_search_body_bounds(doc: dict[str, object]) -> None:
    with pytest.raises(AgtpError) as info:
        parse_search(doc, 100)
    assert info.value.status == 400


def test_bulk_import_line_carries_a_card_like_activate(
    make_manifest: Any, gov_key: SigningKey
) -> None:
    import orjson
    from ans.governance.keys import TrustedKeys
    from ans.protocol.haidip_cards import CARD_FIELD

    from ans.importer import verify_line

    card = {**CARD, "id": "bulk-translator"}
    line = orjson.dumps({"manifest": make_manifest("bulk-translator"), "agent_card": card})
    manifest, caps, kid = verify_line(line, TrustedKeys([gov_key.public]), 1 << 20)
    assert kid == gov_key.kid and manifest["agent_label"] == "bulk-translator"
    assert caps[CARD_FIELD] == {"format": "haidip", "card": card}
    assert "lang-fr" in caps["tags"]
    bad = orjson.dumps({"manifest": make_manifest("x"), "agent_card": {"id": "x"}})
    with pytest.raises(AgtpError) as info:
        verify_line(bad, TrustedKeys([gov_key.public]), 1 << 20)
    assert info.value.status == 422


def test_listing_order_pages_like_a_sort_of_the_mask() -> None:
    import random

    import numpy as np

    from ans.config import RankingWeights
    from ans.registry import AgentEntry, Registry
    from ans.surfaces.haidip_listing import ListingOrder

    rng = random.Random(7)
    registry = Registry(RankingWeights())
    ids = [f"agent-{rng.randrange(10**6):06d}-{i}" for i in range(300)]
    for cid in ids:
        registry.put(AgentEntry(cid, "Active", 1, 0.5, "zone:public", "x.example", ""))
    for cid in ids[::7]:  # freed slots, some reused below
        registry.remove(cid)
    live = sorted(set(ids) - set(ids[::7]) | {"agent-new-1", "agent-new-2"})
    for cid in ("agent-new-1", "agent-new-2"):
        registry.put(AgentEntry(cid, "Active", 1, 0.5, "zone:public", "x.example", ""))
    order = ListingOrder()
    for position in (1, 1, 2):  # cached, then rebuilt
        mask = np.zeros(len(registry._ids), dtype=bool)
        chosen = {cid for cid in live if rng.random() < 0.6}
        mask[registry.slots_of(sorted(chosen))] = True
        expected = sorted(chosen)
        after = expected[40]
        page = order.page(registry, mask, position, after, 5, 20)
        assert page.ids == expected[46:66] and page.count == len(expected) and page.more
        tail = order.page(registry, mask, position, expected[-3], 0, 20)
        assert tail.ids == expected[-2:] and not tail.more
        first = order.page(registry, mask, position, None, 0, 10)
        assert first.ids == expected[:10]
        gone = order.page(registry, mask, position, "agent-zzz", 0, 10)
        assert gone.ids == [] and not gone.more
