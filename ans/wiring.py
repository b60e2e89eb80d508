"""Wiring: an :class:`AnsService` and its collaborators built from a
:class:`Config` -- the data directory locked, the registry, signing key,
trusted governance keys, audit log, federator and capability index opened
(the index from its snapshot in ``DATA/index/`` when usable, else rebuilt and
snapshotted), the request gate and the freshness runner. ``ans serve`` serves
what :func:`build_service` returns (``server.py``); ``ans import`` uses
:func:`build_offline_service`. With ``--workers N`` the supervisor builds the
service once and each forked worker re-opens its own store and audit log
(:func:`rewire_worker`) around the index it shares, following the change feed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import structlog

from ans.federation.federator import Federator
from ans.federation.h2transport import H2PeerTransport
from ans.federation.native_transport import NativePeerTransport
from ans.federation.transport import HttpxTransport, SchemeRouter
from ans.governance.audit import AuditLog
from ans.governance.keys import KeyFileError, SigningKey, TrustedKeys
from ans.governance.policy import ZonePolicy

from .ann import AnnSettings
from .audited import WorkerAuditLog, recover_workers, worker_log_path
from .audited import recover as recover_audit
from .config import Config, ConfigError
from .datadir_lock import DataDirLock, WritersLock
from .follower import Follower
from .freshness_runner import FreshnessRunner
from .gate import RequestGate
from .index.embedder import embedder_fingerprint
from .index.facet_file import FACET_FILE, FacetFile
from .matcher import (
    CapabilityIndex,
    CapabilityProfile,
    Embedder,
    ProfileSource,
    WordLlamaEmbedder,
    profile_from,
)
from .metrics import TimedStore
from .outbox import Outbox
from .service import AnsService, Clock, utc_now
from .store import RegistryStore
from .store_open import default_node, open_store

SIGNING_KEY_FILE = "ans-signing-key.pem"
DEMO_GOVERNANCE_KEY_FILE = "demo-governance-key.pem"
OUTBOX_FILE = "outbox.sqlite3"
INDEX_DIR = "index"
log = structlog.get_logger("ans.server")


@dataclass
class Built:
    service: AnsService
    demo_key: SigningKey | None
    gate: RequestGate | None = None
    freshness: FreshnessRunner | None = None
    lock: DataDirLock | None = None
    profiles: StoreProfiles | None = None


class StoreProfiles:
    """Capability profiles read from the store on demand: the index keeps no
    text in memory (evidence examples, capability_domains re-embedding). A
    forked worker points it at its own store connection."""

    def __init__(self, store: RegistryStore) -> None:
        self.store = store

    def __call__(self, ids: Sequence[str]) -> Mapping[str, CapabilityProfile]:
        return {
            cid: profile_from(a.manifest, a.capabilities)
            for cid, a in self.store.get_many(ids).items()
        }


def profile_source(store: RegistryStore) -> ProfileSource:
    return StoreProfiles(store)


def load_index(
    directory: Path, embedder: Embedder, store: RegistryStore, settings: AnnSettings
) -> tuple[CapabilityIndex, dict[str, Any] | None]:
    """The capability index from its snapshot, with the snapshot's meta, or an
    empty index and None (no snapshot, corrupt, incompatible, or newer than
    the store). Never raises for a bad snapshot."""
    source = StoreProfiles(store)
    return _load_index(directory, embedder, store, settings, source)


def _load_index(
    directory: Path,
    embedder: Embedder,
    store: RegistryStore,
    settings: AnnSettings,
    source: StoreProfiles,
) -> tuple[CapabilityIndex, dict[str, Any] | None]:
    def empty() -> CapabilityIndex:
        return CapabilityIndex(embedder, settings=settings, profile_source=source)

    if not directory.is_dir():
        return empty(), None
    t0 = time.perf_counter()
    try:
        loaded = CapabilityIndex.load(directory, embedder, settings=settings, profile_source=source)
    except Exception as exc:  # a bad snapshot costs a rebuild, never the start-up
        log.warning("index snapshot unreadable; rebuilding", error=str(exc)[:200])
        loaded = None
    if loaded is not None:
        index, meta = loaded
        seq = meta.get("change_seq") if isinstance(meta, dict) else None
        if isinstance(seq, int) and 0 <= seq <= store.max_seq():
            log.info(
                "index snapshot loaded",
                change_seq=seq,
                count=meta.get("count"),
                mode=index.describe()["mode"],
                seconds=round(time.perf_counter() - t0, 3),
            )
            return index, meta
        log.warning("index snapshot does not match the registry; rebuilding", change_seq=seq)
    else:
        log.warning("index snapshot absent or incompatible; rebuilding")
    return empty(), None


def build_freshness(service: AnsService, config: Config) -> FreshnessRunner | None:
    """The refresh scheduler + outbox, unless disabled. ``--demo`` runs none:
    the demo catalog's agents have no endpoints to DESCRIBE."""
    settings = config.freshness
    if not settings.enabled or config.demo:
        return None
    return FreshnessRunner(
        service,
        settings,
        HttpxTransport(settings.max_response_bytes),
        Outbox(config.data_dir / OUTBOX_FILE),
    )


def load_keys(paths: tuple[Path, ...], into: TrustedKeys | None = None) -> TrustedKeys:
    keys = into if into is not None else TrustedKeys()
    for path in paths:
        loaded = TrustedKeys.load_jwks_file(Path(path))
        for kid in loaded.kids():
            key = loaded.get(kid)
            assert key is not None
            keys.add(key)
    return keys


def build_gate(
    config: Config, service: AnsService, governance_keys: TrustedKeys, clock: Clock
) -> RequestGate:
    """Requester authentication and rate limits. Token issuer keys: token_jwks,
    or by default the trusted governance keys."""
    token_keys = None
    if config.auth_mode == "token":
        token_keys = load_keys(config.token_jwks) if config.token_jwks else governance_keys
        if len(token_keys) == 0:
            log.warning("auth mode token without issuer keys: every token will be refused")
    return RequestGate(
        config, service.audit, service.manifest["canonical_id"], token_keys, clock=clock
    )


def peer_transport(max_response_bytes: int) -> SchemeRouter:
    """Peer DISCOVERs and key fetches: ``http(s)://`` peers over the lean h2
    transport (a third of httpx's CPU per request), a jwks_url on another
    origin (which may speak only HTTP/1.1) through httpx, and native
    ``agtp[+cleartext]://`` peers over the native AGTP framing."""
    h2 = H2PeerTransport(max_response_bytes, other_origins=HttpxTransport(max_response_bytes))
    native = NativePeerTransport(max_response_bytes)
    return SchemeRouter({"http": h2, "https": h2, "agtp": native, "agtp+cleartext": native})


def timed(store: RegistryStore) -> RegistryStore:
    """``store`` with every call timed into the ``ans_store_seconds`` metric."""
    return cast(RegistryStore, TimedStore(store))


def build_service(
    config: Config, *, embedder: Embedder | None = None, clock: Clock = utc_now
) -> Built:
    """Lock the data directory, open the store, keys, audit log and index;
    load the registry (from the index snapshot when usable)."""
    data = config.data_dir
    data.mkdir(parents=True, exist_ok=True)
    lock = DataDirLock.acquire(data, "ans serve")
    t0 = time.perf_counter()
    # The registry first: one that cannot be read stops the start before a
    # signing key is made for it.
    store = timed(
        open_store(config.store or None, data_dir=data, node=default_node(config.store, data))
    )
    signing_key = load_signing_key(data / SIGNING_KEY_FILE)
    trusted = load_keys(config.governance_jwks)
    demo_key = None
    if config.demo:
        demo_key = SigningKey.load_or_create(data / DEMO_GOVERNANCE_KEY_FILE)
        trusted.add(demo_key.public)
    import faiss

    faiss.omp_set_num_threads(1)  # one request = one core; the event loop is the parallelism
    audit = AuditLog(data / "audit.jsonl", clock, fsync=config.audit_fsync)
    zones_policy = ZonePolicy.of(
        config.restricted_zones, config.public_zones, config.unlisted_zones == "restricted"
    )
    federator = None
    if config.peers:
        federator = Federator(
            self_id=signing_key.kid,
            peers=config.peers,
            settings=config.federation,
            transport=peer_transport(config.federation.max_response_bytes),
            audit=audit,
            zones=zones_policy,
            min_capability_match=config.relevance.threshold,
            clock=clock,
        )
    service, snapshot, profiles = _assemble(
        config, store, audit, signing_key, trusted, embedder, clock, federator
    )
    n = service.load(snapshot)
    if snapshot is None:
        service.save_snapshot(data / INDEX_DIR)
    if len(trusted) == 0:
        log.warning(
            "no trusted governance keys: every ACTIVATE will be refused; "
            "pass --governance-jwks FILE (or --demo)"
        )
    log.info(
        "registry loaded",
        agents=n,
        index_loaded_from=service.index_loaded_from,
        seconds=round(time.perf_counter() - t0, 3),
        data_dir=str(data),
        signing_kid=signing_key.kid,
        trusted_governance_keys=trusted.kids(),
        federation_peers=[f"{p.tier}@{p.url}" for p in config.peers],
        auth_mode=config.auth_mode,
        rate_limit=config.rate_limit.enabled,
    )
    freshness = build_freshness(service, config)
    if config.demo and config.freshness.enabled:
        log.info("index freshness off: the demo catalog's agents have no endpoints")
    if freshness is not None:
        s = config.freshness
        log.info(
            "index freshness on",
            interval=s.interval,
            status_interval=s.status_interval,
            failures_before_removal=s.failures_before_removal,
            webhook=s.webhook_url is not None,
        )
    gate = build_gate(config, service, trusted, clock)
    return Built(service, demo_key, gate, freshness, lock, profiles)


def load_signing_key(path: Path) -> SigningKey:
    """The ANS signing key; a new one is generated (and said loudly: clients
    that pinned the old key will refuse this server's answers) when the file
    does not exist. A corrupt key file is a ConfigError naming it."""
    existed = path.exists()
    try:
        key = SigningKey.load_or_create(path)
    except (KeyFileError, OSError) as exc:
        raise ConfigError(f"signing key {path}: {exc}") from None
    if not existed:
        log.warning("NEW ANS signing key generated", path=str(path), kid=key.kid)
    return key


def build_offline_service(
    config: Config, *, embedder: Embedder | None = None, clock: Clock = utc_now
) -> tuple[AnsService, TrustedKeys]:
    """The service without network parts (no federation, gate or refresh), for
    ``ans import``; the caller holds the data-directory lock. The registry and
    index are loaded as at server start-up."""
    data = config.data_dir
    data.mkdir(parents=True, exist_ok=True)
    signing_key = SigningKey.load_or_create(data / SIGNING_KEY_FILE)
    trusted = load_keys(config.governance_jwks)
    if config.demo:
        trusted.add(SigningKey.load_or_create(data / DEMO_GOVERNANCE_KEY_FILE).public)
    import faiss

    faiss.omp_set_num_threads(1)
    store = open_store(config.store or None, data_dir=data, node=default_node(config.store, data))
    audit = AuditLog(data / "audit.jsonl", clock, fsync=config.audit_fsync)
    service, snapshot, _ = _assemble(config, store, audit, signing_key, trusted, embedder, clock)
    service.load(snapshot, hold_fields=False)
    return service, trusted


def _assemble(
    config: Config,
    store: RegistryStore,
    audit: AuditLog,
    signing_key: SigningKey,
    trusted: TrustedKeys,
    embedder: Embedder | None,
    clock: Clock,
    federator: Federator | None = None,
) -> tuple[AnsService, Any, StoreProfiles]:
    """Complete what a crash left unaudited, open the index (its snapshot, if
    usable) and build the service over them; the caller loads it."""
    # Committed changes a crash left without their record, in every worker's log.
    recover_workers(store, config.data_dir, audit, worker_audit(config, clock))
    profiles = StoreProfiles(store)
    embedder = embedder or WordLlamaEmbedder(config.index.embedding_dims)
    matcher, snapshot = _load_index(
        config.data_dir / INDEX_DIR, embedder, store, config.index, profiles
    )
    matcher.facet_file = FacetFile(
        config.data_dir / FACET_FILE, embedder_fingerprint(embedder), embedder.dim
    )
    service = AnsService(
        config=config,
        store=store,
        matcher=matcher,
        signing_key=signing_key,
        governance_keys=trusted,
        audit=audit,
        clock=clock,
        federator=federator,
    )
    return service, snapshot, profiles


def worker_audit(config: Config, clock: Clock) -> Callable[[int], WorkerAuditLog]:
    """Opens worker N's audit log (:func:`ans.audited.worker_log_path`)."""

    def open_log(worker: int) -> WorkerAuditLog:
        path = worker_log_path(config.data_dir, worker)
        return WorkerAuditLog(path, clock, fsync=config.audit_fsync, worker=worker)

    return open_log


def rewire_worker(built: Built, config: Config, worker: int, applied: int) -> Follower:
    """In a forked worker: its own store connections and audit log (worker
    0's is ``audit.jsonl``) in place of the supervisor's (closed before the
    fork), its own outbox rows recovered, and the index following the store's
    change feed from ``applied``. The follower is returned, started."""
    service = built.service
    data = config.data_dir
    store = timed(
        open_store(config.store or None, data_dir=data, node=default_node(config.store, data))
    )
    audit = worker_audit(config, service.clock)(worker)
    # Its own rows only: the supervisor completes the others' logs and trims.
    recover_audit(store, audit, worker=worker, trim=False)
    service.store = store
    service.index.store = store
    if built.profiles is not None:
        built.profiles.store = store
    service.audit = audit
    if built.gate is not None:
        built.gate.audit = audit
    if service.federator is not None:
        service.federator.audit = audit
    follower = Follower(service.ctx, service.index, WritersLock(data), applied, worker=worker)
    service.index.follow(follower)
    follower.catch_up()
    follower.start()
    return follower
