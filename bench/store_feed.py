"""Benchmark: the registry store's change feed on SQLite and PostgreSQL.

    .venv/bin/python bench/store_feed.py [--reads 5000] [--writes 300]

For each store (SQLite in a temporary directory, PostgreSQL in a fresh schema
of ``ANS_TEST_PG_URL``, skipped when none answers), with 10,000 agents stored:

- ``max_seq()`` -- what every worker/node reads before each DISCOVER -- against
  a floor measured in the same run: ``SELECT 1`` on the same kind of
  connection (the cost of any read at all);
- ``changes_since(head)`` when nothing changed, and after one write;
- one ACTIVATE-shaped write (upsert + audit record, committed durably);
- a 1,024-agent ``upsert_many`` (agents/s);
- three writer instances ("nodes") at once (writes/s; they serialise on the
  change_seq counter by design);
- feed wake-up: a follower on another instance blocked in
  ``wait_for_change`` -- from a write's return to the follower's wake-up
  (PostgreSQL: LISTEN/NOTIFY; SQLite: its 10 ms poll).

Prints a table and writes bench/results/store_feed.json. Timing figures are
for the machine it ran on (2 shared cores here); compare ratios to the floor.
"""

from __future__ import annotations

import argparse
import json
import platform
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ans.store_open import open_store  # noqa: E402
from ans.store_records import StoredAgent  # noqa: E402
from tools import pgtest  # noqa: E402


def agent(cid: str) -> StoredAgent:
    manifest = {
        "canonical_id": cid,
        "trust_tier": 1,
        "behavioral_trust_score": 0.9,
        "governance_zone": "zone:public",
        "org_domain": "bench.example",
        "authority_scope_categories": ["documents:query"],
        "job_description": "Summarises quarterly reports for analysts. " * 8,
        "signature": {"alg": "ES256", "kid": "k", "value": "x" * 86},
    }
    caps = {"capabilities": [{"id": f"cap-{i}", "description": "d" * 80} for i in range(6)]}
    return StoredAgent(cid, manifest, caps, "Active", "k", "t", "t")


def timed(fn: Callable[[], Any], n: int) -> dict[str, float]:
    for _ in range(min(n // 10, 200)):  # warm-up (prepared statements, caches)
        fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return {
        "p50_us": round(statistics.median(times) * 1e6, 1),
        "p99_us": round(times[int(len(times) * 0.99) - 1] * 1e6, 1),
        "n": n,
    }


def timed_pair(
    floor: Callable[[], Any], fn: Callable[[], Any], n: int, rounds: int = 10
) -> tuple[dict[str, float], dict[str, float]]:
    """``floor`` and ``fn`` measured in alternating rounds (the machine's noise
    hits both alike); each one's p50/p99 over all its calls."""
    per = max(n // rounds, 1)
    a: list[float] = []
    b: list[float] = []
    for f in (floor, fn):
        for _ in range(min(per, 200)):
            f()
    for _ in range(rounds):
        for f, sink in ((floor, a), (fn, b)):
            for _ in range(per):
                t0 = time.perf_counter()
                f()
                sink.append(time.perf_counter() - t0)

    def summary(xs: list[float]) -> dict[str, float]:
        xs.sort()
        return {
            "p50_us": round(statistics.median(xs) * 1e6, 1),
            "p99_us": round(xs[int(len(xs) * 0.99) - 1] * 1e6, 1),
            "n": len(xs),
        }

    return summary(a), summary(b)


def floor_reader(kind: str, target: str | Path) -> Callable[[], Any]:
    if kind == "sqlite":
        db = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
        return lambda: db.execute("SELECT 1").fetchone()
    import psycopg

    conn = psycopg.connect(str(target), autocommit=True)
    return lambda: conn.execute("SELECT 1").fetchone()


def run(kind: str, target: str | Path, reads: int, writes: int) -> dict[str, Any]:
    store = open_store(target, node="bench")
    out: dict[str, Any] = {}
    store.upsert_many([agent(f"seed-{i:05d}") for i in range(10_000)])
    out["floor_select_1"], out["max_seq"] = timed_pair(
        floor_reader(kind, target), store.max_seq, reads
    )
    out["max_seq_over_floor"] = round(out["max_seq"]["p50_us"] / out["floor_select_1"]["p50_us"], 2)
    head = store.max_seq()
    out["changes_since_nothing_new"] = timed(lambda: store.changes_since(head), reads // 5)
    store.upsert(agent("one-more"))
    out["changes_since_one_new"] = timed(lambda: store.changes_since(head), reads // 5)
    counter = iter(range(10**9))
    out["activate_write"] = timed(
        lambda: store.upsert(agent(f"w-{next(counter)}"), {"event": "activation"}), writes
    )
    batch = [agent(f"b-{i:05d}") for i in range(1024)]
    t0 = time.perf_counter()
    store.upsert_many(batch, {"event": "bulk_import_batch"})
    out["upsert_many_1024_agents_per_s"] = round(1024 / (time.perf_counter() - t0))

    nodes = [open_store(target, node=f"n{i}") for i in range(3)]
    per = max(writes // 3, 20)

    def write(i: int) -> None:
        for j in range(per):
            nodes[i].upsert(agent(f"n{i}-{j}"), {"event": "activation"})

    threads = [threading.Thread(target=write, args=(i,)) for i in range(3)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out["three_writers_writes_per_s"] = round(3 * per / (time.perf_counter() - t0))

    follower = open_store(target, node="follower")
    wakes: list[float] = []
    for i in range(min(writes, 200)):
        pos = follower.max_seq()
        box: list[float] = []
        ready = threading.Event()

        def wait(pos: int = pos, box: list[float] = box, ready: threading.Event = ready) -> None:
            ready.set()
            follower.wait_for_change(pos, 10)
            box.append(time.perf_counter())

        t = threading.Thread(target=wait)
        t.start()
        ready.wait()
        time.sleep(0.002)  # let it block
        nodes[0].upsert(agent(f"wake-{i}"))
        done = time.perf_counter()
        t.join()
        wakes.append(box[0] - done)
    wakes.sort()
    out["feed_wake_ms"] = {
        "p50": round(statistics.median(wakes) * 1e3, 2),
        "p99": round(wakes[int(len(wakes) * 0.99) - 1] * 1e3, 2),
        "n": len(wakes),
    }
    for s in (*nodes, follower, store):
        s.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reads", type=int, default=5000)
    ap.add_argument("--writes", type=int, default=300)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "store_feed.json")
    args = ap.parse_args()
    results: dict[str, Any] = {
        "machine": {
            "python": platform.python_version(),
            "cpus": len(__import__("os").sched_getaffinity(0)),
        },
        "stores": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        results["stores"]["sqlite"] = run(
            "sqlite", Path(tmp) / "registry.sqlite3", args.reads, args.writes
        )
    reason = pgtest.unreachable()
    if reason is None:
        schema = pgtest.create_schema("ans_bench")
        try:
            results["stores"]["postgresql"] = run(
                "postgresql", pgtest.schema_url(schema), args.reads, args.writes
            )
        finally:
            pgtest.drop_schema(schema)
    else:
        results["stores"]["postgresql"] = {"skipped": reason}
        print(f"postgresql skipped: {reason}")
    for kind, r in results["stores"].items():
        if "skipped" in r:
            continue
        print(f"\n{kind}")
        for key, value in r.items():
            print(f"  {key:32} {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwritten {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
