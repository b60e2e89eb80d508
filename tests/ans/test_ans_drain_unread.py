"""ans.drain.has_unread_bytes: a stopping connection is not idle while bytes
its client sent before the stop are still unread (in the stream reader or the
socket). Without it, a server too busy to read within the PING's ACK wait
sent GOAWAY 0 and closed a connection whose requests were on the wire."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from ans.drain import has_unread_bytes


def test_unread_bytes_in_the_socket_or_the_reader_count() -> None:
    async def go() -> list[bool]:
        got: list[bool] = []
        accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.get_running_loop().create_future()
        )

        async def on_connect(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            accepted.set_result((r, w))

        server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, client = await asyncio.open_connection("127.0.0.1", port)
        reader, writer = await accepted
        conn = SimpleNamespace(reader=reader, writer=writer)
        got.append(has_unread_bytes(conn))  # nothing sent
        client.write(b"DISCOVER on the wire")
        await client.drain()
        for _ in range(200):  # until the kernel has the bytes (or the reader took them)
            if has_unread_bytes(conn):
                break
            await asyncio.sleep(0.01)
        got.append(has_unread_bytes(conn))  # in the socket, or in the reader's buffer
        await reader.readexactly(len(b"DISCOVER on the wire"))
        got.append(has_unread_bytes(conn))  # all handled
        client.close()
        writer.close()
        server.close()
        await server.wait_closed()
        return got

    assert asyncio.run(go()) == [False, True, False]


def test_a_connection_without_a_socket_has_nothing_unread() -> None:
    assert has_unread_bytes(SimpleNamespace()) is False
