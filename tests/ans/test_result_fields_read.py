"""The result fields a DISCOVER returns come from the store's
``result_fields`` column (one small document an agent), and are derived from
the manifest and capability document where that column is empty (a row
written before it existed) or in another format -- with the same bytes."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from ans.config import Config
from ans.result_fields import FIELDS_FORMAT


def test_fields_from_the_column_and_derived_ones_are_the_same_bytes(
    make_ans: Callable[..., Any], tmp_path: Path
) -> None:
    from tools.synth import generate

    svc = make_ans(Config(data_dir=tmp_path), load=True)
    pairs = list(generate(8, 11))
    stored, _, refused = svc.activate_many([(m, c, "kid") for m, c in pairs])
    assert not refused and len(stored) == 8
    ids = [m["canonical_id"] for m, _ in pairs]
    from_column = svc.index.result_fields(ids)
    assert sorted(from_column) == sorted(ids)

    db = sqlite3.connect(tmp_path / "registry.sqlite3")
    # rows as an older ANS left them, and rows in a format this one does not know
    db.executemany("UPDATE agents SET result_fields = NULL WHERE canonical_id = ?",
                   [(cid,) for cid in ids[:3]])
    stale = orjson.dumps([FIELDS_FORMAT + 1, {"canonical_id": "stale"}])
    db.executemany("UPDATE agents SET result_fields = ? WHERE canonical_id = ?",
                   [(stale, cid) for cid in ids[3:6]])
    # the column is what is served: a marked document in the current format comes back
    marked = {"canonical_id": ids[6], "marker": 1}
    db.execute("UPDATE agents SET result_fields = ? WHERE canonical_id = ?",
               (orjson.dumps([FIELDS_FORMAT, marked]), ids[6]))
    db.commit()
    db.close()
    for cid in ids:
        svc.index.forget_fields(cid)
    again = svc.index.result_fields(ids)
    assert again[ids[6]] == marked
    for cid in ids[:6] + ids[7:]:
        assert orjson.dumps(again[cid]) == orjson.dumps(from_column[cid]), cid
