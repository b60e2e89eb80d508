"""How many malloc arenas glibc may create in ``ans serve`` (and the workers it forks).

glibc gives each new thread its own arena (up to eight per core), and what a
thread frees stays in its arena, resident. ACTIVATE and LIFECYCLE run on
``asyncio.to_thread``'s pool: at 1M agents with two workers, 300 ACTIVATEs
left each worker ~100 MB of such freed memory across six arenas (their
parsing, embedding and signing buffers), against ~25 MB with two arenas
(docs/query-profile.md, fourteenth round). DISCOVER runs on the event loop's
thread (the main arena), so fewer arenas cost it no lock contention.

``MALLOC_ARENA_MAX`` in the environment, read by glibc at start, wins; elsewhere
than glibc (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_ARENA_MAX = -8  # mallopt's parameter (malloc.h)
DEFAULT_ARENAS = 2


def limit_arenas(n: int = DEFAULT_ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``n`` for this process and its future
    forks (call it before starting threads). False when nothing was set: ``n``
    below 1, ``MALLOC_ARENA_MAX`` already set, or no glibc ``mallopt``."""
    if n < 1 or "MALLOC_ARENA_MAX" in os.environ or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, n))
