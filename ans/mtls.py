"""Serving with client certificates (auth mode ``mtls``).

hypercorn (0.18) verifies client certificates (``verify_mode=CERT_REQUIRED``,
``ca_certs``) but does not pass the peer certificate to the ASGI app
(pgjones/hypercorn#62, #324: the ASGI TLS extension is not implemented). So
this module runs hypercorn's own per-connection ``TCPServer`` from an accept
loop of ours, in place of ``hypercorn.asyncio.serve``: when a TLS connection
is accepted, the verified leaf certificate is read from the connection's
``ssl_object`` and every request on that connection gets it as
``scope["extensions"]["tls"]`` in the shape of the ASGI TLS extension
(``client_cert_chain``: PEM strings, leaf first). When hypercorn implements
the extension the app code does not change; only this loop goes away.

hypercorn's public API cannot do this: ``Config.verify_mode`` and
``ca_certs`` make it verify the certificate, but ``hypercorn.asyncio.serve``
offers no hook per connection and its scopes carry no ``tls`` extension, so
the certificate can only be read where the connection is accepted. The
``TCPServer`` constructor this loop calls is one of the hypercorn internals
:func:`ans.http2_defences.install` checks (``ans.http2_defences.hooks``).

It serves the secure sockets of the hypercorn config (the mtls
configuration always has TLS), with hypercorn's lifespan handling, graceful
shutdown and ``keep_alive_max_requests``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from hypercorn.asyncio.lifespan import Lifespan
from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.asyncio.worker_context import WorkerContext
from hypercorn.config import Config as HypercornConfig
from hypercorn.typing import AppWrapper, ASGIFramework
from hypercorn.utils import wrap_app


def tls_extension(ssl_object: ssl.SSLObject | None) -> dict[str, Any] | None:
    """The ASGI TLS extension for one connection (None for plain TCP)."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    chain = [ssl.DER_cert_to_PEM_cert(der)] if der else []
    return {
        "server_cert": None,
        "client_cert_chain": chain,
        "client_cert_name": None,
        "client_cert_error": None,
        "tls_version": None,
        "cipher_suite": None,
    }


class _WithTls:
    """Per-connection app wrapper adding the TLS extension to each scope."""

    def __init__(self, app: AppWrapper, tls: dict[str, Any] | None) -> None:
        self.app = app
        self.tls = tls

    async def __call__(
        self,
        scope: Any,
        receive: Any,
        send: Any,
        sync_spawn: Callable[..., Any],
        call_soon: Callable[..., Any],
    ) -> None:
        if self.tls is not None and scope.get("type") in ("http", "websocket"):
            scope.setdefault("extensions", {})["tls"] = self.tls
        await self.app(scope, receive, send, sync_spawn, call_soon)


async def serve_with_client_certs(
    app: ASGIFramework,
    config: HypercornConfig,
    *,
    shutdown_trigger: Callable[[], Awaitable[Any]],
) -> None:
    loop = asyncio.get_running_loop()
    wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")
    state: dict[str, Any] = {}
    lifespan = Lifespan(wrapped, config, loop, state)
    lifespan_task = loop.create_task(lifespan.handle_lifespan())
    await lifespan.wait_for_startup()
    sockets = config.create_sockets()
    ssl_context = config.create_ssl_context()
    context = WorkerContext(None)
    connections: set[asyncio.Task[Any]] = set()

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            connections.add(task)
            task.add_done_callback(connections.discard)
        conn_app = _WithTls(wrapped, tls_extension(writer.get_extra_info("ssl_object")))
        await TCPServer(conn_app, loop, config, context, state, reader, writer)

    servers = [
        await asyncio.start_server(
            on_connection,
            backlog=config.backlog,
            ssl=ssl_context,
            sock=sock,
            ssl_handshake_timeout=config.ssl_handshake_timeout,
        )
        for sock in sockets.secure_sockets
    ]
    try:
        await shutdown_trigger()
    finally:
        await context.terminated.set()
        for server in servers:
            server.close()
            await server.wait_closed()
        if connections:
            await asyncio.wait(connections, timeout=config.graceful_timeout)
        await lifespan.wait_for_shutdown()
        lifespan_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await lifespan_task
