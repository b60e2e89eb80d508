"""What a DISCOVER's heaviest pieces cost when the caches still hold them (hot) and
after other memory traffic (cold), as they run inside a served request.

    .venv/bin/python bench/cold_cost.py [--agents 10000] [--reps 150] [--out FILE]

A served DISCOVER at 10k agents reads ~5.5 MB of int8 rows (the context and the
capability rows of every agent, each a packed copy of N x 256) plus the
postings, the interpreter's and hypercorn's working sets; between two uses of
one piece, the rest of the request has gone through the caches. Each piece
below is timed ``--reps`` times back to back (``hot``) and after reading a
buffer of each size in ``--evict`` (MiB) before every call (the rest of a
request, or another tenant, going through the caches):

* ``scan_p1`` / ``scan_p3``: the exhaustive int8 scan of N rows as
  :class:`ans.index.int8_rows.QRows` runs it (numkong, packed copy; 1 and 3
  query vectors: an intent alone, an intent with two parts);
* ``es256``: :func:`ans.governance.signing.signature_object` of a DISCOVER
  answer's canonical bytes (~5 KB), the ANS key's ES256 signature.

Prints the medians in microseconds (and each cold one as a multiple of the hot
one) and writes bench/results/cold_cost.json. Read it beside
``bench/served_profile.py``: where a served component costs several times its
hot figure here, fewer bytes touched per request (or like work done back to
back, as :mod:`ans.core.scan_batch` does for scans) is the lever, not fewer
instructions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numkong
import numpy as np
from ans.governance.keys import SigningKey
from ans.governance.signing import signature_object
from scan_layout import write_report  # bench/ is on sys.path when run as a script

RESULTS = Path(__file__).resolve().parent / "results"
DIM = 256


def median_us(call: Callable[[], object], reps: int, evict: np.ndarray | None) -> float:
    out = []
    for _ in range(reps):
        if evict is not None:
            evict.sum()  # reads every byte of the buffer
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return statistics.median(out) * 1e6


def pieces(n: int) -> dict[str, Callable[[], object]]:
    rng = np.random.default_rng(n)
    # two tables, as the index holds (context and capability rows), scanned alternately
    packed = [numkong.dots_pack(rng.integers(-127, 128, (n, DIM)).astype(np.int8)) for _ in "cc"]
    q1 = rng.integers(-127, 128, (1, DIM)).astype(np.int8)
    q3 = rng.integers(-127, 128, (3, DIM)).astype(np.int8)
    turn = [0]

    def scan(q: np.ndarray) -> Callable[[], object]:
        def run() -> object:
            turn[0] ^= 1
            return numkong.dots_packed(q, packed[turn[0]])

        return run

    key = SigningKey.generate()
    answer = json.dumps(
        {"results": [{"rank": i, "text": "x" * 400} for i in range(10)]},
        separators=(",", ":"),
    ).encode()
    return {
        "scan_p1": scan(q1),
        "scan_p3": scan(q3),
        "es256": lambda: signature_object(answer, key),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=150)
    ap.add_argument("--evict", default="1,4,16,64", help="MiB read before each call")
    ap.add_argument("--out", type=Path, default=RESULTS / "cold_cost.json")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.evict.split(",") if x]
    buffers = {mib: np.ones(mib << 20, dtype=np.uint8) for mib in sizes}
    table: dict[str, dict[str, float]] = {}
    print("piece     hot us  " + "  ".join(f"after {m} MiB" for m in sizes))
    for name, call in pieces(args.agents).items():
        call()
        hot = median_us(call, args.reps, None)
        row = {"hot_us": round(hot, 1)}
        cells = []
        for mib in sizes:
            cold = median_us(call, args.reps, buffers[mib])
            row[f"after_{mib}_mib_us"] = round(cold, 1)
            cells.append(f"{cold:7.0f} ({cold / hot:3.1f}x)")
        table[name] = row
        print(f"{name:<8} {hot:7.0f}  " + "  ".join(cells))
    command = "bench/cold_cost.py " + " ".join(argv if argv is not None else sys.argv[1:])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    write_report(args.out, command, when=when, agents=args.agents, pieces=table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
