"""The data directory's lock: one process (``ans serve`` or ``ans import``) at
a time works on a registry. The worker processes of ``ans serve --workers N``
inherit the supervisor's lock (one open file, forked), so a second ``ans
serve`` is refused until the supervisor and every worker have exited; among
themselves they take :class:`WritersLock` for each state change."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

LOCK_FILE = "ans.lock"


class DataDirBusy(OSError):
    """Another process (a server or an import) holds the data directory."""


class DataDirLock:
    """An exclusive advisory lock (flock) on ``DATA/ans.lock``: ``ans serve``
    and ``ans import`` never work on the same registry at once. The kernel
    drops it when the process dies, so a killed server leaves no stale lock."""

    def __init__(self, fh: IO[str], path: Path) -> None:
        self._fh: IO[str] | None = fh
        self.path = path

    @classmethod
    def acquire(cls, data_dir: Path, holder: str) -> DataDirLock:
        data_dir.mkdir(parents=True, exist_ok=True)
        path = data_dir / LOCK_FILE
        fh = open(path, "a+", encoding="utf-8")  # held until release()
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            who = fh.read().strip()[:200] or "another process"
            fh.close()
            raise DataDirBusy(
                f"data directory {data_dir} is in use ({who}); stop it first"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{holder} pid {os.getpid()}\n")
        fh.flush()
        return cls(fh, path)

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


WRITERS_LOCK_FILE = "writers.lock"


class WritersLock:
    """The registry writers' lock across the worker processes of one ``ans
    serve`` (``--workers N``): an exclusive flock on ``DATA/writers.lock``
    taken around every state change (ACTIVATE, lifecycle events, freshness
    writes, snapshots), after this process's own thread lock. A writer that
    holds it has seen every other worker's committed change (see
    :mod:`ans.follower`), so admissibility checks read the registry as it is.
    The kernel drops it when the holder dies."""

    def __init__(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / WRITERS_LOCK_FILE
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)

    def acquire(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def release(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
