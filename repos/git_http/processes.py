"""What the git surface's request handlers and push share: git child processes with asyncio
streams (:class:`GitProcess`), their environment, and database work run off the event loop
(:func:`in_thread`). Here so that the fetch side (app) and the push side (push) both import it
and neither imports the other."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
from collections.abc import Callable

from asgiref.sync import sync_to_async
from django.db import connections


async def in_thread(function: Callable, *args):
    """Run database work in a worker thread, its connection given back afterwards."""

    def run():
        try:
            return function(*args)
        finally:
            connections.close_all()

    return await sync_to_async(run, thread_sensitive=False)(*())


class GitProcess:
    """A git child process with asyncio streams for its standard input, output and error (what
    ``asyncio.subprocess`` gives), started by :mod:`subprocess`.

    The server runs on uvloop, whose subprocesses are started with ``fork()``: 25–35 ms from a
    server process of a few hundred MB (its page tables are copied), with the event loop blocked
    meanwhile, and a clone or a push starts up to three. :mod:`subprocess` uses ``vfork()``:
    about 3 ms.

    The child's standard streams are socket pairs, not pipes. A loop transport made on a pipe's
    file object closes the descriptor twice under uvloop: libuv closes it, then uvloop closes the
    file object (expecting EBADF). Between the two, another thread may have opened a file and
    been given that number, and its file is what the second close closes (one clean-clone CI run
    failed a blob upload that way: ``OSError: [Errno 9]`` in the object store's directory fsync).
    uvloop detaches a socket object instead of closing it, and asyncio's own loop closes it once,
    so every descriptor here is closed exactly once — when its transport is closed. A transport
    left to the garbage collector is closed by uvloop without that care, so whoever starts a
    process closes it (:meth:`close`; :meth:`communicate` does)."""

    def __init__(
        self,
        popen: subprocess.Popen,
        stdin: asyncio.StreamWriter,
        stdout: asyncio.StreamReader | None,
        stderr: asyncio.StreamReader,
        transports: list[asyncio.BaseTransport],
    ) -> None:
        self._popen = popen
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self._transports = transports

    @classmethod
    async def start(cls, argv: list[str], env: dict[str, str], *, stdout: int = subprocess.PIPE) -> GitProcess:
        """``argv`` with its stdin and stderr connected, and stdout connected or ``subprocess.DEVNULL``."""
        with contextlib.ExitStack() as ours:  # our ends, until a transport owns them
            names = ("stdin", "stderr", "stdout") if stdout == subprocess.PIPE else ("stdin", "stderr")
            pairs = {name: socket.socketpair() for name in names}
            for mine, _theirs in pairs.values():
                ours.callback(mine.close)
            try:
                popen = subprocess.Popen(
                    argv,
                    stdin=pairs["stdin"][1].fileno(),
                    stdout=pairs["stdout"][1].fileno() if "stdout" in pairs else stdout,
                    stderr=pairs["stderr"][1].fileno(),
                    env=env,
                )
            finally:
                for _mine, theirs in pairs.values():
                    theirs.close()  # the child has its copies: its ends of the streams
            loop = asyncio.get_running_loop()
            transports: list[asyncio.BaseTransport] = []
            try:
                transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, pairs["stdin"][0])
                transports.append(transport)
                writer = asyncio.StreamWriter(transport, protocol, None, loop)
                errors = await _read_pipe(loop, pairs["stderr"][0], transports)
                output = await _read_pipe(loop, pairs["stdout"][0], transports) if "stdout" in pairs else None
            except BaseException:
                for made in transports:
                    made.close()
                popen.kill()
                popen.wait()
                raise
            ours.pop_all()  # each end is its transport's now
        return cls(popen, writer, output, errors, transports)

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        if self._popen.poll() is None:
            await asyncio.to_thread(self._popen.wait)
        return self._popen.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self._popen.kill()

    def close(self) -> None:
        """Close the process's streams (what is unread is dropped); closing again does nothing."""
        for transport in self._transports:
            transport.close()

    async def communicate(self, input: bytes = b"") -> tuple[bytes, bytes]:
        """Write ``input`` and close stdin, read stdout (if a pipe) and stderr to their ends, wait."""

        async def feed() -> None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                if input:
                    self.stdin.write(input)
                    await self.stdin.drain()
            self.stdin.close()

        stdout = self.stdout.read() if self.stdout is not None else asyncio.sleep(0, b"")
        try:
            _fed, out, err = await asyncio.gather(feed(), stdout, self.stderr.read())
            await self.wait()
        finally:
            self.close()
        return out, err


async def _read_pipe(
    loop: asyncio.AbstractEventLoop, end: socket.socket, transports: list[asyncio.BaseTransport]
) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=1 << 20, loop=loop)
    transport, _protocol = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), end)
    transports.append(transport)
    return reader


def git_env(**extra: str) -> dict[str, str]:
    """The environment of git processes: none of the server's own GIT_* variables or user config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"})
    env.setdefault("HOME", "/nonexistent")
    env.update(extra)
    return env
