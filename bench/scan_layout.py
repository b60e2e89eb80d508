"""The exhaustive int8 scan: a packed copy of the rows against streaming the rows
as stored, with the rows in cache (hot) and evicted (cold), as they are in a
server between two queries (docs/query-profile.md, eighth round).

    .venv/bin/python bench/scan_layout.py [--agents 10000,20000] [--queries 3] [--reps 200]

Per catalog size N: N x 256 int8 rows (random codes; the numbers are exact integer
dot products either way, so only the time differs) and ``--queries`` query vectors
(an intent and its parts), through numkong as :mod:`ans.index.int8_rows` calls it:

* ``packed``: ``dots_packed(queries, dots_pack(rows))`` -- the rows packed once,
  as the index kept them until 2026-11-26;
* ``streamed``: ``dots_packed(rows, dots_pack(queries))`` -- the rows read as
  stored, the few query vectors packed per scan (``int_dots``, what the index does now).

``cold`` reads a 64 MiB buffer before every scan (evicting the rows from this
machine's caches, as a query's other work and the machine's other tenants do);
``hot`` scans back to back. Prints the medians in microseconds and writes
bench/results/scan_layout.json (``--out``: another file).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numkong
import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
EVICT_BYTES = 64 << 20
DIM = 256


def timed(scan: Callable[[], None], reps: int, evict: np.ndarray | None) -> float:
    """Median microseconds of ``scan()`` over ``reps`` runs."""
    out = []
    for _ in range(reps):
        if evict is not None:
            evict.sum()  # reads every byte: the rows leave the caches
        t0 = time.perf_counter()
        scan()
        out.append(time.perf_counter() - t0)
    return statistics.median(out) * 1e6


def measure(n: int, p: int, reps: int, evict: np.ndarray) -> dict[str, float]:
    rng = np.random.default_rng(n)
    rows = rng.integers(-127, 128, (n, DIM)).astype(np.int8)
    q8 = rng.integers(-127, 128, (p, DIM)).astype(np.int8)
    packed = numkong.dots_pack(rows)
    a = np.asarray(numkong.dots_packed(q8, packed))
    b = np.asarray(numkong.dots_packed(rows, numkong.dots_pack(q8))).T
    if not np.array_equal(a, b):
        raise SystemExit("the two layouts gave different dot products")

    def packed_scan() -> None:
        numkong.dots_packed(q8, packed)

    def streamed_scan() -> None:
        numkong.dots_packed(rows, numkong.dots_pack(q8))

    res: dict[str, float] = {"packed_bytes": packed.nbytes, "rows_bytes": rows.nbytes}
    for name, fn in (("packed", packed_scan), ("streamed", streamed_scan)):
        res[f"{name}_hot_us"] = round(timed(fn, reps, None), 1)
        res[f"{name}_cold_us"] = round(timed(fn, reps, evict), 1)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", default="10000,20000")
    ap.add_argument("--queries", type=int, default=3)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--out", type=Path, default=RESULTS / "scan_layout.json")
    args = ap.parse_args(argv)
    evict = np.ones(EVICT_BYTES, dtype=np.uint8)
    sizes = {}
    print("agents  layout    hot us  cold us")
    for n in (int(x) for x in args.agents.split(",")):
        r = measure(n, args.queries, args.reps, evict)
        sizes[str(n)] = r
        for name in ("packed", "streamed"):
            print(f"{n:>6}  {name:<8} {r[f'{name}_hot_us']:>7} {r[f'{name}_cold_us']:>8}")
    command = "bench/scan_layout.py " + " ".join(argv or sys.argv[1:])
    write_report(args.out, command, queries=args.queries, sizes=sizes)
    return 0


def write_report(out: Path, command: str, **fields: object) -> None:
    """Write ``fields`` as JSON to ``out`` with the command, the machine and
    numkong's kernels on it (bench/cold_cost.py writes its results this way too)."""
    report = {
        "command": command,
        "machine": platform.processor() or platform.machine(),
        "numkong_capabilities": sorted(k for k, v in numkong.get_capabilities().items() if v),
        **fields,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
