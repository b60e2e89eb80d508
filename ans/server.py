"""Serving: run a built :class:`AnsService` (``wiring.py`` builds it) with
hypercorn (h2c prior knowledge + HTTP/1.1 on plain TCP, TLS with ALPN ``h2``
when a certificate is configured), beside the native AGTP listener when one
is configured; and the process set-up that goes with it (logging, the
open-file limit and the connection caps under it).

The listening socket is bound here (``--listen 127.0.0.1:0`` picks a free
port) and handed to hypercorn as ``fd://``; the bound address is printed on
stdout as ``ANS listening on http://HOST:PORT`` once the server is ready.

On clean shutdown a new index snapshot is written to ``DATA/index/`` when
anything changed, and the stores and the data-directory lock are released.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import ssl
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import structlog
from hypercorn.asyncio import serve
from hypercorn.config import Config as HypercornConfig

from . import drain, http2_defences, resolver
from .app import AnsApp
from .config import Config
from .datadir_lock import DataDirLock
from .freshness_runner import FreshnessRunner
from .gate import RequestGate
from .loop_errors import unhandled_in_loop
from .mcp import ws_heartbeat
from .mcp.ws import MAX_FRAME as MCP_MAX_FRAME
from .mcp.ws_backend import build_mdns
from .mtls import serve_with_client_certs
from .native_server import MAX_CONNECTIONS as NATIVE_MAX_CONNECTIONS
from .native_server import SCHEME_CLEARTEXT, SCHEME_TLS, NativeListener, native_ssl_context
from .observability import build_request_log
from .service import AnsService
from .wiring import INDEX_DIR

log = structlog.get_logger("ans.server")


class CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler writing to ``sys.stderr`` as it is when a line is written, not
    as it was when logging was configured: a stream replaced since (a test
    harness's capture, closed afterwards) would make every later line from any
    thread fail with "I/O operation on closed file"."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure_logging(level: str = "info", fmt: str = "console") -> None:
    """Operational logs (structlog) go to stderr; the audit log is separate."""
    lvl = getattr(logging, level.upper(), logging.INFO)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    # Lines of the standard library's loggers (hypercorn's, asyncio's) are
    # rendered like ours, so a --log-format json stream holds JSON lines only.
    handler = CurrentStderr()
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[
                structlog.stdlib.add_logger_name,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.format_exc_info,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(lvl)
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    for noisy in ("httpx", "httpcore", "hpack", "h2"):  # one line per peer request otherwise
        logging.getLogger(noisy).setLevel(logging.WARNING)
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


def bind_socket(config: Config) -> socket.socket:
    return listening_socket(*config.host_port)


def listening_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A TCP socket listening on (host, port); ``reuse_port``: SO_REUSEPORT,
    so that each worker of ``ans serve --workers N`` has its own on one port
    (the kernel spreads new connections over them)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket, tls: bool) -> str:
    host, port = sock.getsockname()[:2]
    return f"{'https' if tls else 'http'}://{'[' + host + ']' if ':' in host else host}:{port}"


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
    if config.mcp.enabled:  # the MCP WebSocket: pings (ans.mcp.ws_heartbeat), frame bound
        hc.websocket_ping_interval = config.mcp.ws_ping_interval
        hc.websocket_max_message_size = MCP_MAX_FRAME
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


def native_url(host: str, port: int, tls: ssl.SSLContext | None) -> str:
    scheme = SCHEME_TLS if tls is not None else SCHEME_CLEARTEXT
    return f"{scheme}://{'[' + host + ']' if ':' in host else host}:{port}"


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
    *,
    listeners: tuple[socket.socket, socket.socket | None] | None = None,
    announce: bool = True,
    save_snapshot: bool = True,
    before_close: Callable[[], None] | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT, then drain and close. One worker of
    ``ans serve --workers N`` passes its ``listeners`` (HTTP, native; bound by
    the supervisor), does not ``announce`` the URLs on stdout (the supervisor
    does, once every worker is ready: ``on_ready``), and only worker 0
    writes the index snapshot; ``before_close`` runs before the snapshot
    and the stores are closed (the change-feed follower stops)."""
    open_files = raise_open_file_limit()
    http_cap, native_cap = connection_caps(config, open_files)
    log.info(
        "connection caps",
        open_files=open_files,
        http=http_cap,
        native=native_cap,
        per_client=config.max_connections_per_client,
    )
    sock = bind_socket(config) if listeners is None else listeners[0]
    native_sock = None if listeners is None else listeners[1]
    url = url_of(sock, config.tls_certfile is not None)
    native_drain = NativeDrain()
    app = AnsApp(
        service,
        gate,
        # Stopped in reverse order: the native listener's drain is waited for first.
        (*((freshness,) if freshness is not None else ()), native_drain),
        body_timeout=config.request_timeout,
        requests=build_request_log(config, service),
    )
    native_at = config.native_host_port
    native_tls = native_ssl_context(config) if native_at is not None else None
    hc = hypercorn_config(config, sock, http_cap)
    drain.install()  # the HTTP/2 defences, and on SIGTERM the drain: see the modules
    if config.mcp.enabled:
        ws_heartbeat.install()  # the MCP WebSocket closes on a missed pong
    if app.mcp is not None and config.mcp.mdns and save_snapshot:  # one per node
        app.background = (*app.background, build_mdns(app.mcp.registry, url))
    # hypercorn does not hand the peer certificate to the app; in mtls mode
    # our accept loop adds it as the ASGI TLS extension (see ans.mtls).
    serve_fn = serve_with_client_certs if config.auth_mode == "mtls" else serve

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(unhandled_in_loop)  # no request bytes in the log
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
            n_host, n_port = await native.start(*native_at, native_tls, sock=native_sock)
            if announce:
                print(
                    f"ANS native AGTP listening on {native_url(n_host, n_port, native_tls)}",
                    flush=True,
                )

        async def shutdown() -> None:
            await stop.wait()
            log.info("stopping: answering what was received", grace=config.graceful_timeout)
            if native is not None:  # drains while hypercorn drains the HTTP/2 listener
                native_drain.begin(native.stop(config.graceful_timeout))
            if app.mcp_ws is not None:  # WebSocket sessions would hold the drain open
                app.mcp_ws.going_away()

        server = asyncio.create_task(serve_fn(app, hc, shutdown_trigger=shutdown))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        if announce:
            # one write (under PYTHONUNBUFFERED print writes the newline apart,
            # and another process's output could land between)
            sys.stdout.write(f"ANS listening on {url}\n")
            sys.stdout.flush()
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
        if before_close is not None:
            before_close()
        try:
            if save_snapshot:
                service.save_snapshot(config.data_dir / INDEX_DIR)
        except Exception as exc:  # the next start applies the delta instead
            log.warning("index snapshot not written at shutdown", error=str(exc)[:200])
        service.audit.close()
        service.store.close()
        if lock is not None:
            lock.release()
