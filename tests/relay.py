"""A TCP relay to a server that a test can cut and mend: a process cut off from it, as by
a network partition, while everything else still reaches the server."""

from __future__ import annotations

import asyncio
import contextlib


class Relay:
    """Relays connections on a local port to ``host:port``; :meth:`cut` drops every
    connection and refuses new ones until :meth:`mend`."""

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._open: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.cut_off = False

    async def start(self) -> str:
        """Listen; returns the address to connect to instead of the server."""
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"127.0.0.1:{port}"

    def cut(self) -> None:
        """Drop every connection now, and every new one until mended."""
        self.cut_off = True
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    def mend(self) -> None:
        self.cut_off = False

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.transport.abort()
            return
        self._open |= {writer, up_writer}
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        self._open -= {writer, up_writer}


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    writer.transport.abort()
