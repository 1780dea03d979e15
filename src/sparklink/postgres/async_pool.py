"""A small pool of ``psycopg.AsyncConnection`` for one event loop (executor side).

Connections are opened lazily, up to ``size``; a caller waits for a free one. The pool belongs
to the event loop it is used on (one per task, see :mod:`sparklink.asyncio`) and is closed
with it. Picklable while closed: nothing live is held until :meth:`acquire`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import psycopg

from sparklink.errors import ConfigError
from sparklink.postgres.connection import ConnectionSettings


class AsyncConnectionPool:
    def __init__(self, connection: ConnectionSettings, size: int):
        if size < 1:
            raise ConfigError("pool_size", f"must be at least 1, got {size}")
        self.connection = connection
        self.size = size
        self._idle: list[psycopg.AsyncConnection] = []
        self._all: list[psycopg.AsyncConnection] = []
        self._slots: asyncio.Semaphore | None = None

    def __getstate__(self):
        return {"connection": self.connection, "size": self.size}

    def __setstate__(self, state):
        self.__init__(state["connection"], state["size"])

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[psycopg.AsyncConnection]:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.size)
        async with self._slots:
            conn = self._idle.pop() if self._idle else None
            if conn is None or conn.closed:
                conn = await self.connection.connect_async(autocommit=True)
                self._all.append(conn)
            try:
                yield conn
            except BaseException:
                await conn.close()  # state unknown after a failure (cancelled query): do not reuse
                raise
            else:
                self._idle.append(conn)

    async def close(self) -> None:
        for conn in self._all:
            await conn.close()
        self._all.clear()
        self._idle.clear()
        self._slots = None
