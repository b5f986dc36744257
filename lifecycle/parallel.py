"""Thread-pool maps that drop the tasks not yet started on the first failure: `bounded_map`
keeps only a window of tasks in flight (memory stays bounded), `pool_map` keeps the order."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def bounded_map(
    fn: Callable[[Item], Result], items: Iterable[Item], workers: int, name: str
) -> Iterator[Result]:
    """`fn` over `items` on `workers` threads, results in completion order.

    Unlike `ThreadPoolExecutor.map` or a list of submits, which create every task up front
    (20k futures for a 20k-file cache), at most 4 x `workers` tasks exist at a time, and a
    slow task at the head does not hold back the others. On the first failure the tasks not
    yet started are dropped and the error is raised.
    """
    window = 4 * workers
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
    pending: set[Future[Result]] = set()
    try:
        for item in items:
            pending.add(pool.submit(fn, item))
            if len(pending) >= window:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                yield from (future.result() for future in done)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            yield from (future.result() for future in done)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def pool_map(
    fn: Callable[[Item], Result], items: Iterable[Item], workers: int, name: str
) -> list[Result]:
    """`fn` over `items` on `workers` threads, results in the order of `items`; on the first
    failure the tasks not yet started are dropped and the error is raised."""
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
    try:
        return list(pool.map(fn, items))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
