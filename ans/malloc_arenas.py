"""glibc's malloc settings for ``ans serve`` (and the workers it forks): how many
arenas it may create (:func:`limit_arenas`) and whether a DISCOVER's large
arrays stay in the heap between queries (:func:`keep_large_blocks`).

glibc gives each new thread its own arena (up to eight per core), and what a
thread frees stays in its arena, resident. ACTIVATE and LIFECYCLE run on
``asyncio.to_thread``'s pool: at 1M agents with two workers, 300 ACTIVATEs
left each worker ~100 MB of such freed memory across six arenas (their
parsing, embedding and signing buffers), against ~25 MB with two arenas
(docs/query-profile.md, fourteenth round). DISCOVER runs on the event loop's
thread (the main arena), so fewer arenas cost it no lock contention.

A DISCOVER at 1M agents allocates arrays of several MB each (the BM25 sums
of each query text are a million float64s, 8 MB). glibc serves blocks above
its mmap threshold with mmap, raises that threshold (up to 32 MB) to the size
of such a block once one is freed, and then gives the heap's free top back to
the kernel whenever it exceeds twice the threshold: every query faulted its
arrays' pages in again. Fixed thresholds (32 MB for mmap, 256 MB before the
heap is trimmed) keep the freed blocks for the next query: at 1M, c=1, two
workers, server CPU 17.25 -> 15.97 ms a DISCOVER and p99 48.7 -> 39.4 ms
(four runs each, alternated); at c=16 +8% req/s for ~100 MB more PSS a
worker; neutral at 100k (docs/query-profile.md, sixteenth round).

``MALLOC_ARENA_MAX``, ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_``
in the environment, read by glibc at start, win; elsewhere than glibc (musl,
macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Callable

# mallopt's parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
DEFAULT_ARENAS = 2
MMAP_THRESHOLD = 32 << 20  # glibc's largest on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 256 << 20


def _mallopt() -> Callable[[int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt


def limit_arenas(n: int = DEFAULT_ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``n`` for this process and its future
    forks (call it before starting threads). False when nothing was set: ``n``
    below 1, ``MALLOC_ARENA_MAX`` already set, or no glibc ``mallopt``."""
    if n < 1 or "MALLOC_ARENA_MAX" in os.environ:
        return False
    mallopt = _mallopt()
    return mallopt is not None and bool(mallopt(M_ARENA_MAX, n))


def keep_large_blocks(
    mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD
) -> bool:
    """Serve blocks up to ``mmap_threshold`` bytes from the heap and trim its
    free top only past ``trim_threshold`` (before the fork: the workers
    inherit it). False when nothing was set: a value the environment already
    gave glibc is left as it is, or no glibc ``mallopt``."""
    mallopt = _mallopt()
    if mallopt is None:
        return False
    done = False
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        done |= bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold))
    if "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        done |= bool(mallopt(M_TRIM_THRESHOLD, trim_threshold))
    return done
