"""One exhaustive scan for the DISCOVERs that reach the matcher together.

Up to ``exact_max`` agents every DISCOVER scans the context and the capability
rows of every agent (:meth:`.int8_rows.QRows.scan`). Served under load, each
scan reads the rows from memory: between two queries the rest of a request's
work evicts them (on the 2-core machine of 2026-11-27 the packed rows of 10k
agents, 6.6 MB, went from ~210 µs for both scans back to back to ~680 µs after 8 MB
of other traffic). When several DISCOVERs are waiting at once (``ans serve``
under concurrent load: :mod:`ans.core.scan_batch` gathers the ones that reach
the matcher in one turn of the event loop) one pass over the rows with all
their query vectors costs about what one query's pass costs, and each query
then takes its columns.

The numbers are the same as a query's own scan, bit for bit: a column of a
scan depends only on the rows and that query vector (exact integer dot
products, then the row's and the vector's scales). A result is used only if
the rows have not changed since (the rows' versions and the row count are
checked under the index's lock); otherwise the query scans on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from .int8_rows import QRows, Vectors, query_codes


class Scanned(NamedTuple):
    ctx: Vectors  # (n, P): every row's similarity with each of the query's texts
    cap: Vectors


class _Batch(NamedTuple):
    ctx: QRows  # the row stores scanned, their versions then, and the row count
    cap: QRows
    versions: tuple[int, int, int]
    by_texts: dict[tuple[str, ...], Scanned]

    def current(self, ctx: QRows, cap: QRows, n: int) -> bool:
        same = ctx is self.ctx and cap is self.cap
        return same and self.versions == (ctx.version, cap.version, n)


class ScanPrefetch:
    """The last batch's scans, by query texts (not thread-safe: the index's lock)."""

    def __init__(self) -> None:
        self._batch: _Batch | None = None

    def fill(
        self, ctx: QRows, cap: QRows, n: int, queries: Mapping[tuple[str, ...], Vectors]
    ) -> int:
        """Scan rows [0, n) once for every query's vectors (by its texts); returns
        the queries kept."""
        self._batch = None
        if len(queries) < 2 or n <= 0:
            return 0
        qc = query_codes(np.concatenate(list(queries.values())))
        ctx_all, cap_all = ctx.scan(qc, n), cap.scan(qc, n)
        out: dict[tuple[str, ...], Scanned] = {}
        j = 0
        for key, q in queries.items():
            p = len(q)
            out[key] = Scanned(ctx_all[:, j : j + p], cap_all[:, j : j + p])
            j += p
        self._batch = _Batch(ctx, cap, (ctx.version, cap.version, n), out)
        return len(out)

    def take(self, ctx: QRows, cap: QRows, n: int, texts: tuple[str, ...]) -> Scanned | None:
        """This query's scans from the last batch, if its rows are unchanged since."""
        batch = self._batch
        if batch is None:
            return None
        if not batch.current(ctx, cap, n):
            self._batch = None
            return None
        return batch.by_texts.get(texts)

    def clear(self) -> None:
        self._batch = None
