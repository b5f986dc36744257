"""A thread-pool map that keeps only a window of tasks in flight, so memory stays bounded."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def bounded_map(
    fn: Callable[[Item], Result], items: Iterable[Item], workers: int, name: str
) -> Iterator[Result]:
    """`fn` over `items` on `workers` threads, results in order.

    Unlike `ThreadPoolExecutor.map`, which submits every item up front (20k futures and their
    arguments for a 20k-file cache), at most 4 x `workers` tasks exist at a time. On the
    first failure the tasks not yet started are dropped and the error is raised.
    """
    window = 4 * workers
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
    pending: deque[Future[Result]] = deque()
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
