"""``ans import --server URL``: bulk registration against a running server.

Each line (an ACTIVATE ``parameters`` object) is sent as one ACTIVATE over
one HTTP/2 connection, ``concurrency`` requests in flight, so the server
verifies, stores, embeds, indexes and audits every agent exactly as it does
any ACTIVATE, while it keeps serving. A 429 (rate limit) or 503 (storage
unavailable, draining) is retried after the server's ``Retry-After`` (at most
``MAX_RETRIES`` times), so a throttled import is slower, never lossy; list the
importing Agent-ID in ``[rate_limit] exempt_agent_ids`` (and its address in
``exempt_addresses``) for full speed. Every other refusal is reported with
its file and line and counted; the run ends with one summary.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from ans.protocol import jsonstrict
from ans.protocol.errors import AgtpError
from ans.protocol.messages import AGTP_VERSION, CONTENT_TYPE

from .import_progress import ImportProgress, count_records

MAX_LINE = 1 << 20  # bytes of one line (an ACTIVATE body is bounded by the server too)
MAX_RETRIES = 20
RETRY_CAP = 30.0  # s: the longest single wait for Retry-After


@dataclass(frozen=True, slots=True)
class OnlineRefusal:
    file: str
    line: int
    status: int
    code: str
    message: str


@dataclass
class OnlineReport:
    records: int = 0
    imported: int = 0
    unchanged: int = 0
    retried: int = 0
    refused: list[OnlineRefusal] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        return (
            f"ans import: {self.records:,} records in {self.seconds:.1f} s "
            f"({self.rate:,.0f}/s) to the running server: {self.imported:,} imported, "
            f"{self.unchanged:,} unchanged, {len(self.refused):,} refused"
            + (f" ({self.retried:,} retries after 429/503)" if self.retried else "")
        )


def _records(files: Sequence[Path]) -> Iterator[tuple[str, int, bytes]]:
    for path in files:
        with open(path, "rb") as fh:
            for lineno, line in enumerate(fh, start=1):
                if line.strip():
                    yield str(path), lineno, line[: MAX_LINE + 1]


def _retry_after(resp: httpx.Response) -> float:
    try:
        return min(max(float(resp.headers.get("retry-after", "1")), 0.05), RETRY_CAP)
    except ValueError:
        return 1.0


async def _send_all(
    client: httpx.AsyncClient,
    url: str,
    identity: dict[str, str],
    files: Sequence[Path],
    concurrency: int,
    report: OnlineReport,
    progress: ImportProgress,
) -> None:
    queue: asyncio.Queue[tuple[str, int, bytes] | None] = asyncio.Queue(concurrency * 4)

    async def one(name: str, lineno: int, line: bytes) -> None:
        try:
            jsonstrict.loads(line)  # one JSON value, as the server parses it
        except AgtpError as exc:  # malformed, or over the body limit
            report.refused.append(OnlineRefusal(name, lineno, exc.status, exc.code, exc.message))
            return
        task_id = f"import-{lineno}"
        # The line goes as written: a re-serialization would turn an integer
        # beyond 64 bits into a float the server then stores.
        body = b'{"method":"ACTIVATE","task_id":"%s","parameters":%s}' % (
            task_id.encode(),
            line.strip(),
        )
        headers = {
            "agtp-version": AGTP_VERSION,
            "content-type": CONTENT_TYPE,
            "task-id": task_id,
            **identity,
        }
        for attempt in range(MAX_RETRIES + 1):
            resp = await client.request("ACTIVATE", url, content=body, headers=headers)
            if resp.status_code in (429, 503) and attempt < MAX_RETRIES:
                report.retried += 1
                await asyncio.sleep(_retry_after(resp))
                continue
            break
        try:
            doc = resp.json()
        except ValueError:
            doc = {}
        if resp.status_code == 200:
            result = doc.get("result", {}) if isinstance(doc, dict) else {}
            if isinstance(result, dict) and result.get("unchanged"):
                report.unchanged += 1
            else:
                report.imported += 1
            return
        error = doc.get("error", {}) if isinstance(doc, dict) else {}
        error = error if isinstance(error, dict) else {}
        report.refused.append(
            OnlineRefusal(
                name,
                lineno,
                resp.status_code,
                str(error.get("code", "http_error"))[:64],
                str(error.get("message", resp.text[:200]))[:300],
            )
        )

    async def worker() -> None:
        while (item := await queue.get()) is not None:
            try:
                await one(*item)
            finally:
                report.records += 1
                progress.update(report.records)

    workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
    try:
        for item in _records(files):
            await queue.put(item)
        for _ in workers:
            await queue.put(None)
        await asyncio.gather(*workers)
    finally:
        for w in workers:
            w.cancel()


def import_online(
    server: str,
    files: Sequence[Path],
    *,
    agent_id: str,
    principal_id: str,
    scope: str = "discovery:register",
    concurrency: int = 16,
    timeout: float = 30.0,
    verify: bool | str = True,
    progress_stream: IO[str] | None = None,
) -> OnlineReport:
    """ACTIVATE every line of ``files`` on the running server ``server``."""
    if not server.startswith(("http://", "https://")):
        raise ValueError(f"--server must be an http:// or https:// URL, got {server[:100]!r}")
    identity = {"agent-id": agent_id, "principal-id": principal_id, "authority-scope": scope}
    progress = ImportProgress(count_records(files), progress_stream)
    report = OnlineReport()
    started = time.monotonic()

    async def run() -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(
            http1=False, http2=True, timeout=timeout, verify=verify, limits=limits
        ) as client:
            await _send_all(
                client, server.rstrip("/") + "/", identity, files, concurrency, report, progress
            )

    try:
        asyncio.run(run())
    except httpx.TransportError as exc:  # unreachable, refused, cut: one line, not a traceback
        raise OSError(
            f"cannot import into {server}: {type(exc).__name__}: {str(exc)[:200]}"
        ) from None
    finally:
        report.seconds = time.monotonic() - started
        progress.done(report.summary())
    return report
