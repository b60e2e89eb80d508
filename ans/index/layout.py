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
synthetic block of rows, hot and with the caches flushed, for a DISCOVER
scanning alone and for a batch of concurrent ones, each scan as far as the
float similarities it hands on, and keeps the packed copy only where it is
clearly cheaper. On an Intel machine with AMX (2026-11-28, nineteenth round)
the dot products of two query vectors alone were a near tie (the choice
flipped between starts), while the streamed product's transposed output made
the whole scan of 8-32 query vectors (a batch) 1.25-1.75x the packed one's.
The choice changes the time of a scan, never a number (the dot products are
exact integers either way); ``[index] scan_layout`` pins it. Rows of another
width (``[index] embedding_dims``) are measured at that width: half the bytes
a row can tip the choice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal

import numpy as np

Layout = Literal["packed", "streamed"]

DIM = 256  # the default width ([index] embedding_dims)
CALIBRATION_ROWS = 8192  # 2 MiB of int8 rows: a small exhaustive scan
# Query vectors a scan takes: an intent and one part (a DISCOVER scanning alone;
# the load's mean is ~1.4 texts), and a batch of concurrent DISCOVERs' texts
# (ans.core.scan_batch: under load most scans are batched). Each layout's
# figures are the sums over both.
CALIBRATION_QUERIES = (2, 16)
# best of: on the AMX machine the packed/streamed ratio spread 0.68-0.86 over
# five starts with 5, 0.79-0.83 with 9 (~0.2 s at start-up)
CALIBRATION_REPS = 9
# read between cold runs: more than an AMD machine of this kind's L3 (32 MiB); an
# Intel one's is 480 MiB, and there "cold" means out of L1/L2 only
EVICT_BYTES = 64 << 20
# The packed copy costs memory (28% over the rows: ~6 MB at 10k agents) and a
# re-pack once a sixteenth of the rows changed: it must win, and clearly enough
# that a near tie does not flip the layout from one start to the next
# (``[index] scan_layout`` pins it).
PACKED_WINS_BELOW = 0.9

_lock = threading.Lock()
_pinned: Layout | None = None  # chosen by force_layout, not measured
# per row width: the layout measured and the figures it was chosen from
_choice: dict[int, Layout] = {}
_measured: dict[int, dict[str, float]] = {}


def scan_layout(dim: int = DIM) -> Layout:
    """The layout exhaustive scans of ``dim``-wide rows use in this process
    (measured on the first call for that width, unless pinned)."""
    if _pinned is not None:
        return _pinned
    choice = _choice.get(dim)
    if choice is None:
        with _lock:
            if _pinned is not None:
                return _pinned
            choice = _choice.get(dim)
            if choice is None:
                measured = calibrate(dim=dim)
                _measured[dim] = measured
                choice = _choice[dim] = choose(measured)
    return choice


def force_layout(layout: Layout | None) -> None:
    """Use ``layout`` from now on, at every width (``[index] scan_layout``, tests,
    A/B benchmarks); None: measure again."""
    global _pinned
    with _lock:
        _pinned = layout
        _choice.clear()
        _measured.clear()


def describe(dim: int = DIM) -> dict[str, object]:
    """The layout in use for ``dim``-wide rows and what it was chosen from (the
    health endpoint's index); ``scan_layout`` is None until it is measured."""
    return {
        "scan_layout": _pinned if _pinned is not None else _choice.get(dim),
        "scan_layout_pinned": _pinned is not None,
        "scan_layout_us": dict(_measured.get(dim, {})),
    }


def choose(measured: dict[str, float]) -> Layout:
    """Packed when its hot plus cold time is under PACKED_WINS_BELOW of the streamed one's."""
    packed = measured["packed_hot_us"] + measured["packed_cold_us"]
    streamed = measured["streamed_hot_us"] + measured["streamed_cold_us"]
    return "packed" if packed < PACKED_WINS_BELOW * streamed else "streamed"


def calibrate(
    rows: int = CALIBRATION_ROWS,
    reps: int = CALIBRATION_REPS,
    evict_bytes: int = EVICT_BYTES,
    dim: int = DIM,
) -> dict[str, float]:
    """Best-of-``reps`` microseconds of each layout's scan of ``rows`` random int8
    rows ``dim`` wide, hot (back to back) and cold (after reading ``evict_bytes``), summed
    over the query counts of :data:`CALIBRATION_QUERIES`."""
    from .int8_rows import PackedCopy, finish_scan, int_dots  # imports this module: here

    rng = np.random.default_rng(rows)
    codes = rng.integers(-127, 128, (rows, dim), dtype=np.int8)
    scale = rng.random(rows, dtype=np.float32)
    packed = PackedCopy()
    packed.pack(codes, rows)
    evict = np.ones(max(evict_bytes // 8, 1), dtype=np.uint64)
    out = dict.fromkeys(
        ("packed_hot_us", "packed_cold_us", "streamed_hot_us", "streamed_cold_us"), 0.0
    )
    for count in CALIBRATION_QUERIES:
        q8 = rng.integers(-127, 128, (count, dim), dtype=np.int8)
        q_scale = rng.random(count, dtype=np.float32)

        # Each scan as far as the similarities it hands on (int8_rows.finish_scan):
        # the streamed product comes out transposed, and with many query vectors
        # its conversion is a large share of the scan.
        def packed_scan(q8: np.ndarray = q8, q_scale: np.ndarray = q_scale) -> None:
            finish_scan(packed.dots(codes, q8, rows), scale, q_scale)

        def streamed_scan(q8: np.ndarray = q8, q_scale: np.ndarray = q_scale) -> None:
            finish_scan(int_dots(codes, q8), scale, q_scale)

        for name, scan in (("packed", packed_scan), ("streamed", streamed_scan)):
            scan()  # first-call costs (page faults, dispatch) are not the layout's
            out[f"{name}_hot_us"] += _best(scan, reps, None)
            out[f"{name}_cold_us"] += _best(scan, reps, evict)
    return {k: round(v, 1) for k, v in out.items()}


def _best(scan: Callable[[], None], reps: int, evict: np.ndarray | None) -> float:
    best = float("inf")
    for _ in range(reps):
        if evict is not None:
            evict.max()  # reads every byte: the rows leave the caches
        t0 = time.perf_counter()
        scan()
        best = min(best, time.perf_counter() - t0)
    return round(best * 1e6, 1)
