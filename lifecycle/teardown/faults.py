"""TEST-ONLY fault injection: SIGKILL the teardown process at a named step boundary.

The crash-safety tests run `lifecycle teardown` with LIFECYCLE_TEST_CRASH_AT=POINT[:N] and check
that the next run converges without deleting anything unverified. POINT is one of CRASH_POINTS;
N (default 1) picks the N-th time the point is reached, i.e. the N-th cache. Unset, the
checkpoint does nothing; never set it outside tests.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping

from lifecycle.errors import LifecycleError

CRASH_ENV = "LIFECYCLE_TEST_CRASH_AT"
CRASH_POINTS = (
    "after-intent",  # intent journalled, nothing verified yet
    "after-verified",  # archive verified and journalled, dir untouched
    "after-rename",  # dir moved to its trash, `deleted` not journalled yet
    "after-deleted",  # `deleted` journalled, trash not removed yet
    "after-rmtree",  # trash removed, `done` not journalled yet
)

Checkpoint = Callable[[str], None]


def crash_checkpoint(environ: Mapping[str, str]) -> Checkpoint:
    """The checkpoint teardown calls at each boundary: a no-op unless CRASH_ENV names one."""
    wanted = environ.get(CRASH_ENV, "")
    if not wanted:
        return lambda point: None
    point, _, nth = wanted.partition(":")
    if point not in CRASH_POINTS or not (nth or "1").isdigit():
        expected = f"expected one of {', '.join(CRASH_POINTS)}, then :N if wanted"
        raise LifecycleError(f"{CRASH_ENV}={wanted!r}: {expected}")
    reached = [0]

    def checkpoint(name: str) -> None:
        if name == point:
            reached[0] += 1
            if reached[0] == int(nth or 1):
                os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no finally: a real crash

    return checkpoint
