"""Wiring and serving: build an :class:`AnsService` from a :class:`Config`
and serve it with hypercorn (h2c prior knowledge + HTTP/1.1 on plain TCP,
TLS with ALPN ``h2`` when a certificate is configured).

The listening socket is bound here (``--listen 127.0.0.1:0`` picks a free
port) and handed to hypercorn as ``fd://``; the bound address is printed on
stdout as ``ANS listening on http://HOST:PORT`` once the server is ready.

Cold start: the data directory is locked (``ans import`` takes the same
lock), the capability index is loaded from its snapshot in ``DATA/index/``
when usable (else rebuilt, then snapshotted), and a new snapshot is written
on clean shutdown when anything changed.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import ssl
import sys
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from hypercorn.asyncio import serve
from hypercorn.config import Config as HypercornConfig

from ans.federation.federator import Federator
from ans.federation.h2transport import H2PeerTransport
from ans.federation.native_transport import NativePeerTransport
from ans.federation.transport import HttpxTransport, SchemeRouter
from ans.governance.audit import AuditLog
from ans.governance.keys import KeyFileError, SigningKey, TrustedKeys
from ans.governance.policy import ZonePolicy

from . import drain, http2_defences, resolver
from .ann import AnnSettings
from .app import AnsApp
from .audited import recover as recover_audit
from .config import Config, ConfigError
from .datadir_lock import DataDirLock
from .freshness_runner import FreshnessRunner
from .gate import RequestGate
from .matcher import (
    CapabilityIndex,
    CapabilityProfile,
    Embedder,
    ProfileSource,
    WordLlamaEmbedder,
    profile_from,
)
from .mtls import serve_with_client_certs
from .native_server import MAX_CONNECTIONS as NATIVE_MAX_CONNECTIONS
from .native_server import SCHEME_CLEARTEXT, SCHEME_TLS, NativeListener, native_ssl_context
from .outbox import Outbox
from .preflight import open_registry
from .service import AnsService, Clock, utc_now
from .store import RegistryStore, SQLiteStore

SIGNING_KEY_FILE = "ans-signing-key.pem"
DEMO_GOVERNANCE_KEY_FILE = "demo-governance-key.pem"
OUTBOX_FILE = "outbox.sqlite3"
REGISTRY_FILE = "registry.sqlite3"
INDEX_DIR = "index"
log = structlog.get_logger("ans.server")


def configure_logging(level: str = "info", fmt: str = "console") -> None:
    """Operational logs (structlog) go to stderr; the audit log is separate."""
    lvl = getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(level=lvl, stream=sys.stderr, format="%(message)s")
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    for noisy in ("httpx", "httpcore", "hpack", "h2"):  # one line per peer request otherwise
        logging.getLogger(noisy).setLevel(logging.WARNING)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


@dataclass
class Built:
    service: AnsService
    demo_key: SigningKey | None
    gate: RequestGate | None = None
    freshness: FreshnessRunner | None = None
    lock: DataDirLock | None = None


def profile_source(store: RegistryStore) -> ProfileSource:
    """Capability profiles read from the store on demand: the index keeps no
    text in memory (evidence examples, capability_domains re-embedding)."""

    def profiles(ids: Sequence[str]) -> Mapping[str, CapabilityProfile]:
        return {
            cid: profile_from(a.manifest, a.capabilities) for cid, a in store.get_many(ids).items()
        }

    return profiles


def load_index(
    directory: Path, embedder: Embedder, store: RegistryStore, settings: AnnSettings
) -> tuple[CapabilityIndex, dict[str, Any] | None]:
    """The capability index from its snapshot, with the snapshot's meta, or an
    empty index and None (no snapshot, corrupt, incompatible, or newer than
    the store). Never raises for a bad snapshot."""
    source = profile_source(store)

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
    store = open_registry(data / REGISTRY_FILE)
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
    recover_audit(store, audit)  # committed changes a crash left without their record
    matcher, snapshot = load_index(
        data / INDEX_DIR, embedder or WordLlamaEmbedder(), store, config.index
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
    return Built(service, demo_key, build_gate(config, service, trusted, clock), freshness, lock)


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
    store = SQLiteStore(data / REGISTRY_FILE)
    audit = AuditLog(data / "audit.jsonl", clock, fsync=config.audit_fsync)
    recover_audit(store, audit)
    matcher, snapshot = load_index(
        data / INDEX_DIR, embedder or WordLlamaEmbedder(), store, config.index
    )
    service = AnsService(
        config=config,
        store=store,
        matcher=matcher,
        signing_key=signing_key,
        governance_keys=trusted,
        audit=audit,
        clock=clock,
    )
    service.load(snapshot)
    return service, trusted


def bind_socket(config: Config) -> socket.socket:
    host, port = config.host_port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def hypercorn_config(
    config: Config, sock: socket.socket, max_connections: int | None = None
) -> HypercornConfig:
    """hypercorn's settings for ``config``; ``max_connections`` is the cap in
    all (``ans serve`` passes the one :func:`connection_caps` sets under the
    open-file limit; default ``config.max_connections``)."""
    """Hypercorn settings; the bound socket is handed over (hypercorn closes it)."""
    hc = HypercornConfig()
    hc.bind = [f"fd://{sock.detach()}"]
    # AGTP sessions are long-lived: orchestrators and peers keep one HTTP/2
    # connection for many requests, so allow many before hypercorn recycles it.
    hc.keep_alive_max_requests = config.keep_alive_max_requests
    hc.keep_alive_timeout = config.keep_alive_timeout
    hc.h11_max_incomplete_size = 16 * 1024
    hc.h2_max_header_list_size = 16 * 1024
    hc.h2_max_concurrent_streams = 100
    hc.include_server_header = False
    hc.accesslog = None
    hc.errorlog = logging.getLogger("hypercorn.error")  # through our handler, once
    hc.graceful_timeout = config.graceful_timeout
    http2_defences.attach(
        hc,
        http2_defences.Http2Defences(
            max_connections_per_client=config.max_connections_per_client,
            max_connections=config.max_connections if max_connections is None else max_connections,
            first_request_timeout=config.request_timeout,
            write_timeout=config.write_timeout,
            before_shutdown_close=drain.finish_http2,  # on SIGTERM: PING, then GOAWAY
        ),
    )
    hc.ssl_handshake_timeout = config.request_timeout
    if config.tls_certfile is not None:
        hc.certfile = str(config.tls_certfile)
        hc.keyfile = str(config.tls_keyfile)
        hc.alpn_protocols = ["h2", "http/1.1"]
    if config.auth_mode == "mtls":
        # Every connection must present a certificate issued by the client CA.
        hc.ca_certs = str(config.tls_client_ca)
        hc.verify_mode = ssl.CERT_REQUIRED
    return hc


FD_RESERVE = 256  # descriptors kept for the stores, logs, key files and peer connections


def raise_open_file_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit (as Go
    programs do by default) and return it: each connection holds one."""
    try:
        import resource
    except ImportError:  # not on POSIX: nothing to raise, no known limit
        return 1 << 20
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        wanted = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return int(soft)


def connection_caps(config: Config, open_files: int) -> tuple[int, int]:
    """(HTTP/2 listener, native listener) connection caps that together stay
    below the open-file limit, keeping FD_RESERVE for everything else: a
    process out of descriptors can accept nobody on either listener."""
    usable = max(8, open_files - FD_RESERVE)
    native = min(NATIVE_MAX_CONNECTIONS, usable // 4) if config.native_host_port else 0
    return max(1, min(config.max_connections, usable - native)), native


class NativeDrain:
    """The native listener's drain as a lifespan background task: it runs
    alongside hypercorn's, and the lifespan shutdown (which closes the
    service's parts) waits for it."""

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None

    def begin(self, drain: Coroutine[Any, Any, None]) -> None:
        self.task = asyncio.create_task(drain, name="ans-native-drain")

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        if self.task is not None:
            await self.task


def serve_forever(
    service: AnsService,
    config: Config,
    on_ready: Callable[[str], None] | None = None,
    freshness: FreshnessRunner | None = None,
    gate: RequestGate | None = None,
    lock: DataDirLock | None = None,
) -> None:
    open_files = raise_open_file_limit()
    http_cap, native_cap = connection_caps(config, open_files)
    log.info(
        "connection caps",
        open_files=open_files,
        http=http_cap,
        native=native_cap,
        per_client=config.max_connections_per_client,
    )
    sock = bind_socket(config)
    host, port = sock.getsockname()[:2]
    scheme = "https" if config.tls_certfile else "http"
    url = f"{scheme}://{'[' + host + ']' if ':' in host else host}:{port}"
    native_drain = NativeDrain()
    app = AnsApp(
        service,
        gate,
        # Stopped in reverse order: the native listener's drain is waited for first.
        (*((freshness,) if freshness is not None else ()), native_drain),
        body_timeout=config.request_timeout,
    )
    native_at = config.native_host_port
    native_tls = native_ssl_context(config) if native_at is not None else None
    hc = hypercorn_config(config, sock, http_cap)
    drain.install()  # the HTTP/2 defences, and on SIGTERM the drain: see the modules
    # hypercorn does not hand the peer certificate to the app; in mtls mode
    # our accept loop adds it as the ASGI TLS extension (see ans.mtls).
    serve_fn = serve_with_client_certs if config.auth_mode == "mtls" else serve

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        native = None
        if native_at is not None:
            native = NativeListener(
                app,
                keep_alive_timeout=config.keep_alive_timeout,
                request_timeout=config.request_timeout,
                write_timeout=config.write_timeout,
                max_connections=native_cap,
            )
            n_host, n_port = await native.start(*native_at, native_tls)
            scheme = SCHEME_TLS if native_tls is not None else SCHEME_CLEARTEXT
            shown = f"[{n_host}]" if ":" in n_host else n_host
            print(f"ANS native AGTP listening on {scheme}://{shown}:{n_port}", flush=True)

        async def shutdown() -> None:
            await stop.wait()
            log.info("stopping: answering what was received", grace=config.graceful_timeout)
            if native is not None:  # drains while hypercorn drains the HTTP/2 listener
                native_drain.begin(native.stop(config.graceful_timeout))

        server = asyncio.create_task(serve_fn(app, hc, shutdown_trigger=shutdown))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        print(f"ANS listening on {url}", flush=True)
        if on_ready:
            on_ready(url)
        await server

    try:
        # Name lookups on daemon threads: exit does not wait for a lookup
        # still in flight (a freshness poll of an agent whose name resolves
        # slowly); see ans.resolver.
        with asyncio.Runner(loop_factory=resolver.new_event_loop) as runner:
            runner.run(main())
    finally:
        if freshness is not None:
            freshness.close()
        try:
            service.save_snapshot(config.data_dir / INDEX_DIR)
        except Exception as exc:  # the next start applies the delta instead
            log.warning("index snapshot not written at shutdown", error=str(exc)[:200])
        service.audit.close()
        service.store.close()
        if lock is not None:
            lock.release()
