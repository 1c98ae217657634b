"""The git processes the bridge starts close each of their descriptors once, under uvloop.

A descriptor closed twice closes, the second time, whatever file another thread opened with
that number in between: a request thread's object file, a database, a pack. One clean-clone CI
run lost a blob upload that way (``OSError: [Errno 9]`` in the object store's directory fsync)
while clones ran. Here threads open and use files while the event loop runs git processes, as
the server's request threads do beside its clones and pushes, and no file of theirs may be
closed under them. With the streams on pipes this found 6-28 such closes per 300-1 000
processes; the test fails on any.
"""

from __future__ import annotations

import os
import subprocess
import threading

import uvloop

from repos.git_http.processes import GitProcess, git_env

PROCESSES = 400


def _open_and_use(stop: threading.Event, closed_under_us: list[int]) -> None:
    while not stop.is_set():
        fd = os.open(os.curdir, os.O_RDONLY)
        try:
            for _ in range(20):
                os.fstat(fd)
            os.close(fd)
        except OSError as error:
            closed_under_us.append(error.errno)


async def _run_processes() -> None:
    for index in range(PROCESSES):
        payload = f"{index}\n".encode() * 20
        process = await GitProcess.start(["cat"], git_env())
        out, _err = await process.communicate(payload)
        assert out == payload and process.returncode == 0
        walk = await GitProcess.start(["cat"], git_env(), stdout=subprocess.DEVNULL)  # as the push's walk
        await walk.communicate(payload)


def test_no_descriptor_of_another_thread_is_closed_while_git_processes_run():
    stop = threading.Event()
    closed_under_us: list[int] = []
    threads = [threading.Thread(target=_open_and_use, args=(stop, closed_under_us)) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        uvloop.run(_run_processes())
    finally:
        stop.set()
        for thread in threads:
            thread.join()

    assert closed_under_us == []
