"""Uploads spread over forked processes, one per core, each with its own pool of threads.

A PUT costs ~3 ms of botocore and urllib3 in Python, so one process uploading thousands of
small blobs is one busy core however many threads it runs (the GIL). Forked uploaders share the
parent's memory copy-on-write (the sources, the client) and report each blob they sent on a
pipe: `<sha256> <size> <md5>` per line, or one `! <problem>` line before exiting 1.
"""

from __future__ import annotations

import gc
import os
import queue
import threading
from collections.abc import Callable, Generator, Iterator
from functools import partial
from typing import IO

from lifecycle.archive.parallel import bounded_map
from lifecycle.archive.sources import BlobSource
from lifecycle.archive.store import ArchiveError, BlobStore, os_problem
from lifecycle.forking import kill_and_reap, spawn

Sent = tuple[str, int, str]  # sha256, size, md5 of one blob uploaded
Upload = Callable[[BlobSource], tuple[BlobSource, str]]
_DONE = None  # what a pipe's reader queues at its end


def forked_uploads(
    store: BlobStore, todo: list[BlobSource], upload: Upload, processes: int, workers: int
) -> Iterator[Sent]:
    """Upload `todo` here and in `processes - 1` forked children, yielding each blob as it goes.

    The first problem any process reports is raised as an ArchiveError; the children still
    running are then killed (what they sent is harmless: blobs are content-addressed).
    """
    shares = [todo[n::processes] for n in range(processes)]
    threads = max(1, workers // processes)
    children: list[int] = []
    pipes: list[IO[str]] = []
    try:
        # Every child first, then any thread here: only a single-threaded process forks.
        # Frozen, the objects there are now stay out of the children's garbage collections,
        # which would otherwise write to (and so copy) every page holding one.
        gc.freeze()
        try:
            for share in shares[1:]:
                read, write = os.pipe()
                spawn(partial(_child, store, share, upload, threads, write), children)
                os.close(write)
                pipes.append(os.fdopen(read, "r"))
        finally:
            gc.unfreeze()
        reports: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        readers = [threading.Thread(target=_relay, args=(pipe, reports)) for pipe in pipes]
        for reader in readers:
            reader.start()
        open_pipes = len(readers)
        for source, md5 in bounded_map(upload, shares[0], threads, "upload"):
            yield source.sha256, source.size, md5
            while not reports.empty():
                open_pipes -= yield from _take(reports.get())
        while open_pipes:
            open_pipes -= yield from _take(reports.get())
        for reader in readers:
            reader.join()
        for pid in list(children):
            _, status = os.waitpid(pid, 0)
            children.remove(pid)
            if os.waitstatus_to_exitcode(status) != 0:
                raise ArchiveError(f"an uploader process ended with status {status}")
    finally:
        kill_and_reap(children)
        for pipe in pipes:
            pipe.close()


def _take(line: str | None) -> Generator[Sent, None, int]:
    """One relayed line: a blob sent (yielded), a problem (raised); returns 1 at a pipe's end."""
    if line is _DONE:
        return 1
    if line.startswith("! "):
        raise ArchiveError(line[2:].rstrip("\n"))
    sha256, size, md5 = line.split()
    yield sha256, int(size), md5
    return 0


def _relay(pipe: IO[str], reports: queue.SimpleQueue[str | None]) -> None:
    """Queue every line a child writes, then _DONE when it closes its end."""
    try:
        for line in pipe:
            reports.put(line)
    finally:
        reports.put(_DONE)


def _child(
    store: BlobStore, share: list[BlobSource], upload: Upload, threads: int, write: int
) -> bool:
    """In the forked child: upload `share`, a line per blob; a problem ends it with `! …`."""
    # The client's pooled connections are the parent's sockets too: drop them here (closing a
    # copied descriptor does not close the parent's connection) and open new ones.
    store.client.close()
    with os.fdopen(write, "w", buffering=1) as out:
        try:
            for source, md5 in bounded_map(upload, share, threads, "upload"):
                out.write(f"{source.sha256} {source.size} {md5}\n")
        except Exception as exc:  # reported, then raised by the parent as an ArchiveError
            out.write(f"! {_one_line(exc)}\n")
            return False
    return True


def _one_line(exc: Exception) -> str:
    words = os_problem(exc) if isinstance(exc, OSError) else str(exc)
    return " ".join(words.split()) or type(exc).__name__
