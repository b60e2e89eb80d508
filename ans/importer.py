"""``ans import``: bulk registration from JSON-lines files.

Each line is the ``parameters`` object of an ACTIVATE:
``{"manifest": {...}, "capabilities": {...}}``. Every line gets the same
verification as ACTIVATE — strict bounded JSON, capability document
validation, the governance signature against the trusted keys, lifecycle
Active — in a pool of worker processes (chunks of lines, a bounded number in
flight), which also embed each verified line's capability profile when the
index uses the bundled embedder (the same model, by fingerprint: the same
vectors bit for bit; embedding was ~40% of the main process's work, which
bounded the import while the workers idled). The main process then applies
the admissibility rules (tombstoned, Suspended, stale, unchanged; a later
line for the same canonical id checked against the earlier one, as
sequential ACTIVATEs would be) and stores and indexes each batch at once
(:meth:`AnsService.activate_many`), embedding itself whatever a worker did not.

Audit: one ``activation_refused`` record per refused line (the fields of
ACTIVATE's, plus file and line), one ``bulk_import_batch`` record per stored
batch (count, first and last canonical id) instead of one ``activation``
record per agent, and one ``bulk_import`` record per run with the counts.

The data directory is locked for the whole run (``ans serve`` takes the same
lock), and the capability-index snapshot is written at the end, so the next
``ans serve`` starts without re-embedding.
"""

from __future__ import annotations

import getpass
import multiprocessing
import os
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.pool import AsyncResult
from pathlib import Path
from typing import IO, Any

from ans.governance.keys import TrustedKeys
from ans.governance.manifest import validate_capabilities, verify_manifest
from ans.governance.policy import requester_fields
from ans.protocol.errors import (
    AgtpError,
    ErrorCode,
    InvalidParameter,
    MalformedJson,
    UnknownSigningKey,
)
from ans.protocol.haidip_cards import with_card
from ans.protocol.jsonstrict import loads as strict_loads
from ans.protocol.messages import Identity
from ans.protocol.scope import parse_authority_scope

from .config import Config
from .import_progress import ImportProgress, count_records
from .index.embedder import (
    WORDLLAMA_FINGERPRINT,
    Embedder,
    WordLlamaEmbedder,
    embedder_fingerprint,
)
from .index.profiles import ProfileVectors, embed_profiles, profile_from
from .service import AnsService

DEFAULT_BATCH = 2000
CHUNK_LINES = 250  # lines per worker task
IMPORT_AGENT = "agtp://localhost/agents/ans-import"

# (line number, "ok", (manifest, capabilities, signer_kid, ProfileVectors | None)) or
# (line number, "refused", (status, code, message, canonical_id, key_id))
Outcome = tuple[int, str, tuple[Any, ...]]

_worker_keys: TrustedKeys | None = None
_worker_max_bytes = 0
_worker_embedder: Embedder | None = None


def _init_worker(
    jwks: list[dict[str, Any]], max_bytes: int, fingerprint: str | None, dim: int
) -> None:
    """Per worker process, once. ``fingerprint``: the index's embedder, when
    it is the bundled one (``dim`` wide); the worker embeds only if its own is
    the same."""
    global _worker_keys, _worker_max_bytes, _worker_embedder  # set once by the pool
    _worker_keys = TrustedKeys.from_jwks({"keys": jwks})
    _worker_max_bytes = max_bytes
    _worker_embedder = None
    if fingerprint is not None:
        emb = WordLlamaEmbedder(dim)
        if embedder_fingerprint(emb) == fingerprint:
            _worker_embedder = emb


def worker_fingerprint(service: AnsService) -> str | None:
    """The index's embedder fingerprint if a worker can load that embedder
    (the bundled wordllama weights), else None: the main process embeds."""
    fp = service.matcher.embedder_fingerprint
    return fp if fp.startswith(WORDLLAMA_FINGERPRINT) else None


def verify_line(data: bytes, keys: TrustedKeys, max_bytes: int) -> tuple[Any, ...]:
    """(manifest, capabilities, signer_kid) of one valid line; raises AgtpError."""
    params = strict_loads(data, max_bytes=max_bytes)
    if not isinstance(params, dict):
        raise MalformedJson(
            'each line must be a JSON object {"manifest": ..., "capabilities": ...}'
        )
    manifest = params.get("manifest")
    if not isinstance(manifest, dict):
        raise InvalidParameter("manifest", "a complete signed Agent Manifest Document is required")
    caps = params.get("capabilities", {})
    if not isinstance(caps, dict):
        raise InvalidParameter("capabilities", "must be a DESCRIBE Capability Document object")
    metadata = params.get("metadata")  # the profile's agent metadata, as ACTIVATE takes it
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise InvalidParameter("capabilities", "metadata must be an agent metadata object")
        caps = {**metadata, **caps}
    card = params.get("agent_card")  # a HAIDIP or A2A card, as ACTIVATE takes it
    if card is not None:
        caps = with_card(caps, card)
    validate_capabilities(caps)
    verified = verify_manifest(manifest, keys)
    return verified.manifest, caps, verified.signer_kid


def _verify_chunk(chunk: list[tuple[int, bytes]]) -> list[Outcome]:
    keys = _worker_keys
    assert keys is not None
    out: list[Outcome] = []
    for lineno, data in chunk:
        try:
            out.append((lineno, "ok", verify_line(data, keys, _worker_max_bytes)))
        except AgtpError as exc:
            cid, kid = _ids_of(data)
            out.append((lineno, "refused", (exc.status, exc.code, exc.message, cid, kid)))
        except Exception as exc:  # never a traceback for a bad line
            cid, kid = _ids_of(data)
            out.append((lineno, "refused", (422, "invalid_line", str(exc)[:300], cid, kid)))
    return _with_vectors(out)


def _with_vectors(out: list[Outcome]) -> list[Outcome]:
    """Each verified line with its profile's vectors (one embedder call for
    the chunk), or None when this worker does not embed or the embedding
    failed: the main process then embeds it, and meets any error there."""
    ok = [i for i, (_, kind, _) in enumerate(out) if kind == "ok"]
    vectors: list[ProfileVectors | None] = [None] * len(ok)
    if _worker_embedder is not None and ok:
        try:
            profiles = [profile_from(out[i][2][0], out[i][2][1]) for i in ok]
            vectors = list(embed_profiles(_worker_embedder, profiles))
        except Exception:  # noqa: S110 - the main process embeds it and reports
            pass
    for i, v in zip(ok, vectors, strict=True):
        lineno, kind, data = out[i]
        out[i] = (lineno, kind, (*data, v))
    return out


def _ids_of(data: bytes) -> tuple[str, str | None]:
    """Best-effort canonical id and signing key id of a refused line, for the report."""
    try:
        import orjson

        doc = orjson.loads(data)
        m = doc.get("manifest") if isinstance(doc, dict) else None
        if isinstance(m, dict):
            sig = m.get("signature")
            kid = sig.get("key_id") if isinstance(sig, dict) else None
            return str(m.get("canonical_id"))[:256], kid if isinstance(kid, str) else None
    except Exception:  # noqa: S110 - a line that does not parse has no id to report
        pass
    return "None", None


@dataclass
class Refusal:
    file: str
    line: int
    status: int
    code: str
    message: str
    canonical_id: str


@dataclass
class ImportReport:
    imported: int = 0
    unchanged: int = 0
    refused: list[Refusal] = field(default_factory=list)
    lines: int = 0
    seconds: float = 0.0
    batches: int = 0
    snapshot: bool = False

    @property
    def rate(self) -> float:
        return self.lines / self.seconds if self.seconds > 0 else 0.0


def _read_lines(
    files: Sequence[Path], max_line: int, counter: list[int]
) -> Iterator[tuple[int, int, bytes]]:
    """(file index, line number, bytes) of every non-blank line; an over-long
    line is passed on truncated to max_line + 1 bytes so the strict parser
    refuses it as too large without holding it."""
    for fi, path in enumerate(files):
        with open(path, "rb") as fh:
            lineno = 0
            while True:
                line = fh.readline(max_line + 1)
                if not line:
                    break
                counter[0] += len(line)
                lineno += 1
                if len(line) > max_line and not line.endswith(b"\n"):
                    # skip the rest of the over-long line
                    while True:
                        rest = fh.readline(1 << 20)
                        counter[0] += len(rest)
                        if not rest or rest.endswith(b"\n"):
                            break
                    yield fi, lineno, line
                    continue
                if line.strip():
                    yield fi, lineno, line


def run_import(
    service: AnsService,
    files: Sequence[Path],
    *,
    trusted_jwks: list[dict[str, Any]],
    batch: int = DEFAULT_BATCH,
    workers: int | None = None,
    max_line_bytes: int | None = None,
    progress: ImportProgress | None = None,
) -> ImportReport:
    """Verify every line in worker processes, then store and index in batches."""
    max_line = max_line_bytes or service.config.max_body_bytes
    workers = workers or os.cpu_count() or 1
    report = ImportReport()
    identity = Identity(
        agent_id=IMPORT_AGENT,
        principal_id=_principal(),
        scope=parse_authority_scope("discovery:register"),
    )
    names = [str(f) for f in files]
    read = [0]
    t0 = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    pending: list[tuple[int, int, tuple[Any, ...]]] = []  # (file, line, verified)

    def refuse(fi: int, lineno: int, status: int, code: str, msg: str, cid: str) -> None:
        report.refused.append(Refusal(names[fi], lineno, status, code, msg, cid))
        service.audit.record(
            "activation_refused",
            status=status,
            code=code,
            **requester_fields(identity, "ACTIVATE", f"import:{lineno}"),
            canonical_id=cid[:256],
            reason=msg,
            file=names[fi],
            line=lineno,
        )

    def flush() -> None:
        if not pending:
            return
        stored, unchanged, refused = service.activate_many(
            [v[:3] for _, _, v in pending],
            requester_fields(identity, "ACTIVATE", None),
            vectors=[v[3] for _, _, v in pending],
        )
        for i, exc in refused:
            fi, lineno, v = pending[i]
            refuse(fi, lineno, exc.status, exc.code, exc.message, v[0]["canonical_id"])
        report.unchanged += unchanged
        if stored:  # audited with the batch's own transaction
            report.imported += len(stored)
            report.batches += 1
        pending.clear()

    init = (trusted_jwks, max_line, worker_fingerprint(service), service.matcher.dim)
    with ctx.Pool(workers, _init_worker, init) as pool:
        inflight: deque[tuple[int, AsyncResult[list[Outcome]]]] = deque()
        window = 8 * workers + 2  # workers keep verifying while a batch is embedded

        def drain_one() -> None:
            fi, res = inflight.popleft()
            for lineno, kind, data in res.get():
                report.lines += 1
                if kind == "ok":
                    pending.append((fi, lineno, data))
                    if len(pending) >= batch:
                        flush()
                else:
                    status, code, msg, cid, kid = data
                    if code == UnknownSigningKey.code:
                        status, code, msg = _explain_removed_key(service, cid, kid, msg)
                    refuse(fi, lineno, status, code, msg, cid)
                if progress is not None:
                    progress.update(report.lines)

        chunk: list[tuple[int, bytes]] = []
        chunk_file = 0
        for fi, lineno, data in _read_lines(files, max_line, read):
            if chunk and fi != chunk_file:
                inflight.append((chunk_file, pool.apply_async(_verify_chunk, (chunk,))))
                chunk = []
            chunk_file = fi
            chunk.append((lineno, data))
            if len(chunk) >= CHUNK_LINES:
                inflight.append((fi, pool.apply_async(_verify_chunk, (chunk,))))
                chunk = []
            while len(inflight) >= window:
                drain_one()
        if chunk:
            inflight.append((chunk_file, pool.apply_async(_verify_chunk, (chunk,))))
        while inflight:
            drain_one()
    flush()
    report.seconds = time.perf_counter() - t0
    return report


def _explain_removed_key(
    service: AnsService, cid: str, kid: str | None, message: str
) -> tuple[int, str, str]:
    """401 signing_key_removed when the unknown key once signed the stored agent."""
    previous = service.store.get(cid)
    if previous is not None and kid is not None and kid == previous.signer_kid:
        return (
            401,
            ErrorCode.SIGNING_KEY_REMOVED,
            f"manifest is signed by governance key {kid[:80]!r}, which signed this agent "
            "before but is no longer trusted",
        )
    return 401, UnknownSigningKey.code, message


def _principal() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "ans-import"


def summary(report: ImportReport) -> str:
    return (
        f"ans import: {report.lines:,} records in {report.seconds:.1f} s "
        f"({report.rate:,.0f}/s): {report.imported:,} imported, "
        f"{report.unchanged:,} unchanged, {len(report.refused):,} refused"
    )


def import_files(
    config: Config,
    files: Sequence[Path],
    *,
    batch: int = DEFAULT_BATCH,
    workers: int | None = None,
    progress_stream: IO[str] | None = None,
) -> ImportReport:
    """Lock the data directory, load the registry and index, import, write the
    index snapshot, record the run in the audit log."""
    from .datadir_lock import DataDirLock
    from .wiring import INDEX_DIR, build_offline_service

    lock = DataDirLock.acquire(config.data_dir, "ans import")
    try:
        service, trusted = build_offline_service(config)
        try:
            progress = ImportProgress(count_records(files), progress_stream)
            report = run_import(
                service,
                files,
                trusted_jwks=list(trusted.jwks()["keys"]),
                batch=batch,
                workers=workers,
                progress=progress,
            )
            service.matcher.merge_pending()  # no workers here: the lists grow once, saved
            report.snapshot = service.save_snapshot(config.data_dir / INDEX_DIR, force=True)
            codes: dict[str, int] = {}
            for r in report.refused:
                code = str(r.code)  # a plain str: orjson refuses str subclasses as keys
                codes[code] = codes.get(code, 0) + 1
            service.audit.record(
                "bulk_import",
                files=[str(f) for f in files],
                lines=report.lines,
                imported=report.imported,
                unchanged=report.unchanged,
                refused=len(report.refused),
                refused_by_code=codes,
                batches=report.batches,
                seconds=round(report.seconds, 3),
                agents_per_s=round(report.rate, 1),
                snapshot=report.snapshot,
            )
            progress.done(summary(report))
        finally:
            service.audit.close()
            service.store.close()
    finally:
        lock.release()
    return report
