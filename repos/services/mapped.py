"""A file mapped into every process that opens it: what the processes of one machine share
without a database (the credential generation, the rate limit's buckets)."""

from __future__ import annotations

import fcntl
import mmap
import os
from pathlib import Path


def map_shared(path: Path, size: int) -> tuple[int, mmap.mmap]:
    """The file's descriptor (for ``flock``) and a shared, writable mapping of its first ``size``
    bytes; a new or shorter file is extended with zeros, under the lock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        return fd, mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except BaseException:
        os.close(fd)
        raise
