"""The profile filter columns (tags, protocols, regions by slot) against a
plain dict-of-sets model, through single writes, bulk writes, clears and
slots holding more values than a matrix row (the spill)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from ans.governance.profile_metadata import ProfileAttrs

from ans.profile_columns import MultiColumn, ProfileColumns
from ans.registry import BULK_PROFILES

VALUES = [f"v{i}" for i in range(12)]


def model_any(model: dict[int, tuple[str, ...]], values: tuple[str, ...], n: int) -> list[bool]:
    return [bool(set(model.get(s, ())) & set(values)) for s in range(n)]


def test_multi_column_matches_a_dict_of_sets_through_random_writes() -> None:
    rng = random.Random(7)
    col = MultiColumn(width=3)  # rows of 3: slots with 4+ values spill
    model: dict[int, tuple[str, ...]] = {}
    for step in range(600):
        op = rng.random()
        if op < 0.6:
            slot = rng.randrange(80)
            vals = tuple(sorted(rng.sample(VALUES, rng.randrange(0, 6))))
            col.set(slot, vals)
            model[slot] = vals
        elif op < 0.7:
            slots = rng.sample(range(80), rng.randrange(1, 30))
            vals = [tuple(sorted(rng.sample(VALUES, rng.randrange(0, 6)))) for _ in slots]
            col.set_many(slots, vals)
            model.update(zip(slots, vals, strict=True))
        else:
            n = rng.randrange(1, 100)
            asked = tuple(rng.sample([*VALUES, "never-seen"], rng.randrange(1, 4)))
            assert col.any_of(asked, n).tolist() == model_any(model, asked, n), step
        probe = rng.randrange(90)
        assert col.get(probe) == model.get(probe, ())


def attrs(tags: tuple[str, ...], expires: float = math.inf) -> ProfileAttrs:
    return ProfileAttrs(tags=tags, protocols=("agtp",), regions=(), expires_at=expires,
                        updated_at=100.0)


def test_profile_columns_round_trip_clear_and_expiry() -> None:
    cols = ProfileColumns()
    cols.set(3, attrs(("a", "b"), expires=50.0))
    cols.set_many([0, 1, 2], [attrs(("a",)), attrs(()), attrs(("b", "c"))])
    assert cols.attrs(3) == attrs(("a", "b"), expires=50.0)
    assert cols.attrs(1) == attrs(())
    assert cols.attrs(7) is None and not cols.known(7)
    mask = np.ones(4, dtype=bool)

    class Filters:  # the ProfileParams fields apply() reads
        filters = True
        required_tags = ("a",)
        excluded_tags = ("c",)
        protocols = ("agtp",)
        regions = ()
        max_results_age_seconds = None

    cols.apply(mask, Filters(), now=10.0)  # type: ignore[arg-type]
    assert mask.tolist() == [True, False, False, True]
    mask = np.ones(4, dtype=bool)
    cols.apply(mask, Filters(), now=60.0)  # type: ignore[arg-type]
    assert mask.tolist() == [True, False, False, False]  # slot 3 expired
    cols.set(3, None)  # a freed slot holds nothing
    assert cols.attrs(3) is None
    assert not cols.tags.any_of(("a", "b"), 4)[3]
    mask = np.ones(4, dtype=bool)
    cols.apply(mask, Filters(), now=60.0)  # type: ignore[arg-type]
    assert mask.tolist() == [True, False, False, False]
    assert cols._expiring == 0
    np.testing.assert_allclose(cols.share_of(np.array([0, 2]), ("a", "c")), [0.5, 0.5])


def test_a_bulk_registry_write_keeps_the_last_attributes_of_a_slot_written_twice() -> None:
    from ans.config import RankingWeights
    from ans.registry import AgentEntry, Registry

    reg = Registry(RankingWeights())

    def entry(i: int, tags: tuple[str, ...]) -> AgentEntry:
        return AgentEntry(f"{i:064x}", "Active", 1, 0.9, "zone:a", "org.example", "", "",
                          attrs(tags))

    batch = [entry(i, ("first",)) for i in range(BULK_PROFILES + 10)]
    batch.append(entry(5, ("second",)))  # written twice in one batch: the last wins
    reg.put_many(batch)
    assert reg.profile_of(f"{5:064x}") == attrs(("second",))
    assert reg.profile_of(f"{6:064x}") == attrs(("first",))
    slot5 = reg._slot_of[f"{5:064x}"]
    hit = reg.profiles.tags.any_of(("first",), len(reg._ids))
    assert not hit[slot5] and hit.sum() == BULK_PROFILES + 9


def test_a_start_up_batch_fills_the_registry_as_row_by_row_writes_do() -> None:
    """The bulk path of put_many (new store rows, no free slot) against the
    general one: same slots, columns, interned codes, gate counts and link log."""
    from ans.config import RankingWeights
    from ans.registry import Registry
    from ans.store import IndexRow

    rng = random.Random(3)
    rows = [
        IndexRow(f"{i:064x}", rng.choice(["kid-a", "kid-b"]), rng.choice([1, 2, 3]),
                 rng.choice([0.5, 0.75, 0.9]), rng.choice(["zone:a", "zone:b"]),
                 rng.choice(["a.example", "b.example"]), rng.choice(["", "finance:read"]))
        for i in range(300)
    ]
    bulk, general = Registry(RankingWeights()), Registry(RankingWeights())
    general._put_new = lambda entries: False  # type: ignore[method-assign]
    for reg in (bulk, general):
        reg.put_many(rows[:200])
        reg.put_many(rows[200:])
    assert bulk._ids == general._ids and bulk._slot_of == general._slot_of
    for col in ("_tier", "_behavioral", "_score0", "_zone", "_org", "_scope", "_kid", "_valid"):
        a, b = getattr(bulk, col)[:300], getattr(general, col)[:300]  # capacities may differ
        np.testing.assert_array_equal(a, b, err_msg=col)
    assert bulk.gate_counts == general.gate_counts
    assert bulk._link_log == general._link_log
    for codes in ("_zones", "_orgs", "_scopes", "_kids"):
        assert getattr(bulk, codes).values == getattr(general, codes).values
    # an id already indexed, or a free slot: the general path (nothing half-done)
    bulk.remove(rows[5].canonical_id)
    bulk.put_many([rows[5]])
    assert bulk._slot_of[rows[5].canonical_id] == general._slot_of[rows[5].canonical_id]


def test_saved_columns_round_trip_and_inconsistent_ones_change_nothing() -> None:
    cols = ProfileColumns()
    cols.set_many([0, 1, 2], [attrs(("a", "b")), attrs(()), attrs(("c",), expires=9.0)])
    order = np.array([2, -1, 0, 1, 7], dtype=np.int64)  # a snapshot's slots -> these
    arrays, values = cols.state(order)
    again = ProfileColumns()
    again.restore(np.array([5, 6, 3, 4, 8], dtype=np.int64), arrays, values)
    assert again.attrs(5) == cols.attrs(2) and again.attrs(3) == cols.attrs(0)
    assert again.attrs(4) == cols.attrs(1) and again.attrs(6) is None and again.attrs(8) is None
    assert again.tags.any_of(("a",), 9).tolist() == [i == 3 for i in range(9)]
    assert again._expiring == 1
    for broken in (
        {**arrays, "tags_codes": arrays["tags_codes"][:-1]},  # counts and codes disagree
        {**arrays, "known": arrays["known"][:3]},  # not one entry per slot
        {**arrays, "tags_codes": arrays["tags_codes"] + 50},  # outside the value table
    ):
        fresh = ProfileColumns()
        with pytest.raises(ValueError):
            fresh.restore(np.arange(5, dtype=np.int64), broken, values)
        assert not any(fresh.known(s) for s in range(5))  # nothing half-written


def test_an_agent_written_twice_in_one_batch_is_counted_once() -> None:
    """put_many keeps the last entry of an agent written twice in one batch: its
    gate columns and the per-(zone, tier) counts DISCOVER's bound reads."""
    from ans.config import RankingWeights
    from ans.registry import AgentEntry, Registry

    reg = Registry(RankingWeights())
    cid = f"{7:064x}"
    reg.put_many([
        AgentEntry(cid, "Active", 2, 0.8, "zone:a", "org.example", "", "", attrs(("x",))),
        AgentEntry(f"{8:064x}", "Active", 1, 0.9, "zone:a", "org.example", "", "", attrs(())),
        AgentEntry(cid, "Active", 1, 0.9, "zone:b", "org.example", "", "", attrs(("y",))),
    ])
    assert {k: v for k, v in reg.gate_counts.items() if v} == {("zone:a", 1): 1, ("zone:b", 1): 1}
    assert reg[cid].governance_zone == "zone:b" and reg[cid].trust_tier == 1
