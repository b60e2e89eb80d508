"""Which int8 layout an exhaustive scan reads on this machine: a packed copy or the rows as stored.

An exhaustive scan (up to ``exact_max`` agents) takes the exact integer dot
products of every stored row with the query's few int8 vectors. numkong
computes them two ways, with the same integers:

* ``packed``: a copy of the rows in numkong's tiled layout (28% larger), made
  once and patched where rows change (:class:`.int8_rows.PackedCopy`), scanned
  against the query vectors;
* ``streamed``: the rows read as stored against the query vectors packed per
  scan (``int_dots``).

Which is faster depends on the CPU. On an AVX-512 machine (2026-11-26,
docs/query-profile.md eighth round) the streamed kernel was cheap and the
packed copy lost ~35% once the rows had left the caches; on an AVX2-only
machine of the same kind (2026-11-27, twelfth round) the streamed kernel costs
~58 ns a row whatever the number of query vectors (it is bound by arithmetic,
not memory), 4-6x the packed copy with the rows in cache and no less with them
evicted. :func:`scan_layout` therefore measures both, once per process, on a
synthetic block of rows, hot and with the caches flushed, and keeps the packed
copy only where it is clearly cheaper. The choice changes the time of a scan,
never a number (the dot products are exact integers either way).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal

import numkong
import numpy as np

Layout = Literal["packed", "streamed"]

DIM = 256
CALIBRATION_ROWS = 8192  # 2 MiB of int8 rows: a small exhaustive scan
CALIBRATION_QUERIES = 2  # an intent and one part (the load's mean is ~1.4 texts)
CALIBRATION_REPS = 5
EVICT_BYTES = 64 << 20  # read between cold runs: more than this kind's L3 (32 MiB)
# The packed copy costs memory (28% over the rows) and upkeep: it must win clearly.
PACKED_WINS_BELOW = 0.8

_lock = threading.Lock()
_choice: Layout | None = None
_measured: dict[str, float] = {}


def scan_layout() -> Layout:
    """The layout exhaustive scans use in this process (measured on first call)."""
    global _choice
    if _choice is None:
        with _lock:
            if _choice is None:
                measured = calibrate()
                _measured.update(measured)
                _choice = choose(measured)
    return _choice


def force_layout(layout: Layout | None) -> None:
    """Use ``layout`` from now on (tests, A/B benchmarks); None: measure again."""
    global _choice
    with _lock:
        _choice = layout
        _measured.clear()


def describe() -> dict[str, object]:
    """The layout in use and what it was chosen from (the health endpoint's index)."""
    return {"scan_layout": _choice, "scan_layout_us": dict(_measured)}


def choose(measured: dict[str, float]) -> Layout:
    """Packed when its hot plus cold time is under PACKED_WINS_BELOW of the streamed one's."""
    packed = measured["packed_hot_us"] + measured["packed_cold_us"]
    streamed = measured["streamed_hot_us"] + measured["streamed_cold_us"]
    return "packed" if packed < PACKED_WINS_BELOW * streamed else "streamed"


def calibrate(
    rows: int = CALIBRATION_ROWS, reps: int = CALIBRATION_REPS, evict_bytes: int = EVICT_BYTES
) -> dict[str, float]:
    """Best-of-``reps`` microseconds of each layout's scan of ``rows`` random int8
    rows, hot (back to back) and cold (after reading ``evict_bytes``)."""
    rng = np.random.default_rng(rows)
    codes = rng.integers(-127, 128, (rows, DIM), dtype=np.int8)
    q8 = rng.integers(-127, 128, (CALIBRATION_QUERIES, DIM), dtype=np.int8)
    packed = numkong.dots_pack(codes)
    evict = np.ones(max(evict_bytes // 8, 1), dtype=np.uint64)

    def packed_scan() -> None:
        numkong.dots_packed(q8, packed)

    def streamed_scan() -> None:
        numkong.dots_packed(codes, numkong.dots_pack(q8))

    out: dict[str, float] = {}
    for name, scan in (("packed", packed_scan), ("streamed", streamed_scan)):
        scan()  # first-call costs (page faults, dispatch) are not the layout's
        out[f"{name}_hot_us"] = _best(scan, reps, None)
        out[f"{name}_cold_us"] = _best(scan, reps, evict)
    return out


def _best(scan: Callable[[], None], reps: int, evict: np.ndarray | None) -> float:
    best = float("inf")
    for _ in range(reps):
        if evict is not None:
            evict.max()  # reads every byte: the rows leave the caches
        t0 = time.perf_counter()
        scan()
        best = min(best, time.perf_counter() - t0)
    return round(best * 1e6, 1)
