"""Every indexed agent's facet sums, on disk: what a ``capability_domains``
query would otherwise re-embed.

A restricted query scores its best candidates by a capability vector over the
allowed facets only, built from the per-facet token-vector sums. Holding those
sums in memory for a million agents would cost ~7 GB, so the index keeps only
the whole-document vector and, before this file, re-read and re-embedded the
profiles of a restricted query's 64 candidates on every such query (15-25 ms of
CPU at 10k agents, most of a worker's time on that 10% of queries).

Whoever embeds an agent (import, the ACTIVATE writer, a worker's follower, the
cold start) writes its sums here; a restricted query reads its candidates'
sums with one indexed read and re-embeds only what is missing (then writes it,
so a data dir from before this file fills itself). A row is keyed by the
digest of the profile text it was embedded from (:func:`.profiles.profile_digest`);
the index keeps every slot's digest, so a row of an older version of an agent
is never used (and is dropped when the agent changes or leaves). The
embedder's fingerprint is kept too: another model empties the file.

The file is a cache, never the registry's truth: a missing, damaged or
locked file costs re-embedding, never an answer. Rows are int16 codes with a
scale per facet (3.6 KB an agent): scores move by <= 2e-5 and no top 10 changed
order on 1,120 restricted queries (docs/query-profile.md). One SQLite file (WAL)
in the data dir, shared by every worker; each process opens its own connection
(a forked worker reopens on first use). Thread-safe.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

import numpy as np
import numpy.typing as npt
import structlog

from .profiles import FACETS

log = structlog.get_logger("ans.index.facet_file")

FACET_FILE = "facet-sums.sqlite"
LEVELS = 32767  # int16 codes per facet: code = round(sum / facet max * LEVELS)
CHUNK = 500  # digests per SELECT (SQLite's bound-parameter limit is 32766; keep it small)
BUSY_MS = 200  # a writer holding the file longer costs a re-embed, not a wait
RETRY_S = 60.0  # after a failure (disk full, I/O), the file is tried again this much later
# 16 KB pages hold four 3.6 KB rows each (a 4 KB page holds one, plus an
# overflow page). The digest is the rowid: one B-tree lookup a row (a text key
# with its own index took two, ~7 ms for 64 rows of a 4 GB file at 1M agents).
PAGE_SIZE = 16384
# Rows a process keeps in memory, as read (int16 codes, keyed by digest), so
# that a candidate of recent restricted queries is not read from SQLite again:
# ~4,600 rows at 256 dimensions (the load's restricted queries at 10k agents:
# 75% of rows from memory; 8 MB: 41%). A hit costs a dict lookup, a miss ~6 us.
# Above LARGE_CATALOG agents a quarter of it: there every worker's megabytes
# count against the memory target, and fewer rows repeat.
ROW_CACHE_BYTES = 16 * 1024 * 1024
LARGE_CATALOG = 250_000


def catalog_sized(small: int, large: int, agents: int) -> int:
    """A worker cache's bound for a catalog of ``agents``: ``small`` up to
    LARGE_CATALOG agents, ``large`` above (the fields cache uses it too)."""
    return small if agents <= LARGE_CATALOG else large


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "DROP TABLE IF EXISTS sums",  # the layout of development builds (keyed by id)
    "CREATE TABLE IF NOT EXISTS by_digest (digest INTEGER PRIMARY KEY, sums BLOB NOT NULL)",
)

FacetSums = npt.NDArray[np.float32]  # (len(FACETS), dim)


def encode(sums: npt.NDArray[np.float32]) -> bytes:
    """A row: per facet its largest magnitude (float32), then every value as an
    int16 code of it (error <= 1.5e-5 of that magnitude)."""
    sums = np.asarray(sums, dtype=np.float32)
    scale = np.abs(sums).max(axis=1)
    codes = np.rint(sums * (LEVELS / np.where(scale > 0, scale, 1.0))[:, None])
    row: bytes = scale.astype("<f4").tobytes() + codes.astype("<i2").tobytes()
    return row


def decode(row: bytes, shape: tuple[int, int]) -> FacetSums:
    scale = np.frombuffer(row, dtype="<f4", count=shape[0])
    codes = np.frombuffer(row, dtype="<i2", offset=4 * shape[0]).reshape(shape)
    return (codes.astype(np.float32) * (scale / LEVELS)[:, None]).astype(np.float32)


def decode_rows(rows: Sequence[bytes], shape: tuple[int, int]) -> npt.NDArray[np.float32]:
    """:func:`decode` of several rows at once, bit for bit: (len(rows), *shape).
    One conversion for a query's 64 candidates instead of 64 small ones (the
    per-call overhead was ~8 us a row)."""
    nf, dim = shape
    raw = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows), nf * (4 + 2 * dim))
    scale = raw[:, : 4 * nf].view("<f4")
    out = raw[:, 4 * nf :].view("<i2").reshape(len(rows), nf, dim).astype(np.float32)
    out *= (scale / LEVELS)[:, :, None]
    return out


def _busy(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def stored_precision(sums: npt.NDArray[np.float32]) -> FacetSums:
    """``sums`` as a row of the file reads back: a restricted query scores the
    same whether its candidates' sums were just embedded or read."""
    return decode(encode(sums), sums.shape)


class FacetFile:
    """The facet sums of agents, keyed by canonical id and profile digest."""

    def __init__(
        self, path: Path, fingerprint: str, dim: int, cache_bytes: int = ROW_CACHE_BYTES
    ) -> None:
        self.path = Path(path)
        self._fingerprint = fingerprint
        self._shape = (len(FACETS), dim)
        self._row_bytes = len(FACETS) * (4 + 2 * dim)
        self._lock = threading.Lock()
        # Rows read, by digest (least recently used first). A digest names one
        # profile text and the file one embedder, so a kept row is never stale;
        # forget() drops it all the same. Not filled by put(): an import writes
        # every agent, a query reads few.
        self._rows: OrderedDict[int, bytes] = OrderedDict()
        self._rows_max = cache_bytes // self._row_bytes
        self._db: sqlite3.Connection | None = None
        self._pid = -1
        self._retry_at = 0.0  # monotonic: after a failure, not tried before this
        self._damaged = False  # replace the file at the next open

    # -- connection --------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection | None:
        """This process's connection (opened, and the schema checked, on first
        use); None while the file is busy or, after a failure, for RETRY_S."""
        if time.monotonic() < self._retry_at:
            return None
        if self._db is not None and self._pid == os.getpid():
            return self._db
        self._db = None  # a forked child never uses its parent's connection
        for attempt in (1, 2):
            try:
                self._db, self._pid = self._open(), os.getpid()
                return self._db
            except sqlite3.OperationalError as exc:
                if _busy(exc):
                    return None  # another process is writing: try again next time
                self._give_up("open", exc)
                return None
            except sqlite3.DatabaseError as exc:  # not a database, malformed
                if attempt == 2:
                    self._give_up("open", exc)
                    return None
                self._replace(exc)
        return None

    def _open(self) -> sqlite3.Connection:
        if self._damaged:
            self._replace(None)
        db = sqlite3.connect(
            self.path, timeout=BUSY_MS / 1000, isolation_level="IMMEDIATE",
            check_same_thread=False,
        )
        try:
            db.execute(f"PRAGMA page_size={PAGE_SIZE}")  # a new file only
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # a cache: no fsync per commit
            for sql in _SCHEMA:
                db.execute(sql)
            row = db.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
            if row is None or row[0] != self._fingerprint:
                with db:  # BEGIN IMMEDIATE ... COMMIT
                    db.execute("DELETE FROM by_digest")
                    db.execute(
                        "INSERT OR REPLACE INTO meta (key, value) VALUES ('embedder', ?)",
                        (self._fingerprint,),
                    )
        except BaseException:
            db.close()
            raise
        return db

    def _replace(self, exc: Exception | None) -> None:
        """A damaged file is a cache lost: removed, to be written again."""
        self._damaged = False
        for side in ("", "-wal", "-shm", "-journal"):
            with suppress(FileNotFoundError):
                os.unlink(f"{self.path}{side}")
        log.warning("facet-sums file damaged; starting a new one", path=str(self.path),
                    error=str(exc)[:200] if exc else "malformed on read")

    def _give_up(self, what: str, exc: Exception) -> None:
        """An unusable file (disk full, I/O error): restricted queries re-embed
        for RETRY_S, then the file is tried again; a damaged one is replaced."""
        self._retry_at = time.monotonic() + RETRY_S
        self._damaged = isinstance(exc, sqlite3.DatabaseError) and not isinstance(
            exc, sqlite3.OperationalError
        )
        if self._db is not None and self._pid == os.getpid():
            with suppress(sqlite3.Error):
                self._db.close()
        self._db = None
        log.warning("facet-sums file unusable; restricted queries re-embed",
                    path=str(self.path), during=what, error=str(exc)[:200],
                    retry_in_s=RETRY_S)

    @contextmanager
    def _using(self, what: str) -> Iterator[sqlite3.Connection | None]:
        """This process's connection under the lock (None: unusable). A busy or
        locked file skips the operation; any other SQLite error gives up on the
        file for RETRY_S."""
        with self._lock:
            db = self._conn()
            try:
                yield db
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    self._give_up(what, exc)
            except sqlite3.Error as exc:
                self._give_up(what, exc)

    # -- reads and writes --------------------------------------------------------------
    def get(self, wanted: Mapping[str, int], agents: int = 0) -> dict[str, FacetSums]:
        """The sums of ``wanted`` (canonical id -> profile digest) whose digest has
        a row (agents with the same profile text share one); rows read before
        come from memory, the others with one read; a busy file reads as empty.
        ``agents``: the catalog's size, which sizes the rows kept in memory."""
        digests = sorted({d for d in wanted.values() if d})  # in key order: fewer page reads
        keys: list[int] = []
        blobs: list[bytes] = []
        missing: list[int] = []
        with self._lock:
            for d in digests:
                blob = self._rows.get(d)
                if blob is None:
                    missing.append(d)
                else:
                    self._rows.move_to_end(d)
                    keys.append(d)
                    blobs.append(blob)
        read: list[tuple[int, bytes]] = []
        if missing:
            with self._using("read") as db:
                for a in range(0, len(missing) if db is not None else 0, CHUNK):
                    part = missing[a : a + CHUNK]
                    marks = ",".join("?" * len(part))  # placeholders only: values are bound
                    rows = db.execute(  # type: ignore[union-attr]
                        f"SELECT digest, sums FROM by_digest WHERE digest IN ({marks})",  # noqa: S608
                        part,
                    ).fetchall()
                    read += [(d, b) for d, b in rows if len(b) == self._row_bytes]
        if read:
            with self._lock:
                for digest, blob in read:
                    self._rows[digest] = blob
                    keys.append(digest)
                    blobs.append(blob)
                cap = catalog_sized(self._rows_max, self._rows_max // 4, agents)
                while len(self._rows) > cap:
                    self._rows.popitem(last=False)
        # views of one array: a caller that keeps a row copies it
        found = dict(zip(keys, decode_rows(blobs, self._shape), strict=True)) if blobs else {}
        return {cid: found[digest] for cid, digest in wanted.items() if digest in found}

    def put(self, rows: Iterable[tuple[int, FacetSums]]) -> None:
        """Write (profile digest, facet sums) rows in one transaction; a busy
        file skips them (re-embedded when a query needs them)."""
        params = [(digest, encode(sums)) for digest, sums in rows if digest]
        if not params:
            return
        with self._using("write") as db:
            if db is not None:
                with db:  # BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on an error
                    db.executemany(
                        "INSERT OR REPLACE INTO by_digest (digest, sums) VALUES (?, ?)", params
                    )

    def forget(self, digests: Iterable[int]) -> None:
        """Drop the rows of profile versions no agent holds any more (an agent
        removed or changed; best effort: another agent with the same text
        re-embeds it when a query needs it)."""
        params = [(d,) for d in digests if d]
        with self._lock:
            for (d,) in params:
                self._rows.pop(d, None)
        with self._using("delete") as db:
            if db is not None and params:
                with db:
                    db.executemany("DELETE FROM by_digest WHERE digest = ?", params)

    def close(self) -> None:
        with self._lock:
            if self._db is not None and self._pid == os.getpid():
                self._db.close()
            self._db = None
