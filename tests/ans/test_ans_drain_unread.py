"""ans.drain.has_unread_bytes: a stopping connection is not idle while bytes
its client sent before the stop are still unread (in the stream reader or the
socket). Without it, a server too busy to read within the PING's ACK wait
sent GOAWAY 0 and closed a connection whose requests were on the wire. And
ans.drain.read_task_waiting: bytes the read task has taken from the reader
but not yet handed to h2 count too."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from ans.drain import has_unread_bytes, read_task_waiting


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


def test_a_read_task_holding_what_it_read_is_not_waiting() -> None:
    """read_task_waiting: only a read parked on an empty reader holds nothing.
    Bytes the reader has handed to a read that has not yet resumed are in
    neither the reader nor the socket: has_unread_bytes misses them."""

    async def go() -> list[tuple[bool, bool]]:
        reader = asyncio.StreamReader()
        conn = SimpleNamespace(reader=reader)
        seen = [(read_task_waiting(conn), has_unread_bytes(conn))]  # no read yet
        read = asyncio.create_task(reader.read(100))
        await asyncio.sleep(0)
        seen.append((read_task_waiting(conn), has_unread_bytes(conn)))  # parked, nothing held
        reader.feed_data(b"DISCOVER")  # wakes the read; the bytes are still in the reader
        seen.append((read_task_waiting(conn), has_unread_bytes(conn)))
        assert await read == b"DISCOVER"  # taken: held by the task that read them
        seen.append((read_task_waiting(conn), has_unread_bytes(conn)))
        reader.feed_eof()
        seen.append((read_task_waiting(conn), has_unread_bytes(conn)))  # nothing more will come
        return seen

    assert asyncio.run(go()) == [
        (False, False),
        (True, False),
        (False, True),
        (False, False),
        (True, False),
    ]
