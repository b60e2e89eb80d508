"""How many cores this process may run on (the default number of workers).
Its own module so ``ans serve`` can ask before importing the server."""

from __future__ import annotations

import os


def default_workers() -> int:
    """The number of cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)
