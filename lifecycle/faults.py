"""TEST-ONLY fault injection: SIGKILL at a named step boundary, or sleep there to widen a race.

The crash-safety tests run `lifecycle teardown` (or `gc --remote`) with
LIFECYCLE_TEST_CRASH_AT=POINT[:N] and check that the next run converges without deleting anything
unverified. POINT is one of CRASH_POINTS (teardown's), GC_CRASH_POINTS or another verb's; N
(default 1) picks the N-th time the point is reached, i.e. the N-th cache (or batch).

The race tests set LIFECYCLE_TEST_DELAY=POINT=SECONDS[,POINT=SECONDS...] to hold a boot or a
teardown at a point (one of DELAY_POINTS) while the other one runs.

Unset, a checkpoint does nothing; never set either outside tests.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping

from lifecycle.errors import LifecycleError

CRASH_ENV = "LIFECYCLE_TEST_CRASH_AT"
DELAY_ENV = "LIFECYCLE_TEST_DELAY"
CRASH_POINTS = (
    "after-intent",  # intent journalled, nothing verified yet
    "after-verified",  # archive verified and journalled, dir untouched, lease held
    "after-rename",  # dir moved to its trash, `deleted` not journalled yet
    "after-deleted",  # `deleted` journalled, trash not removed yet
    "after-rmtree",  # trash removed, `done` not journalled yet
)
# `teardown --images`' (and apply's): an image removed by dockerd, not recorded yet (`:N`: the
# N-th image).
IMAGE_CRASH_POINTS = ("teardown-image-removed",)
# `gc --remote`'s step boundaries (lifecycle.gc); `:N` picks the N-th batch deleted.
GC_CRASH_POINTS = (
    "gc-planned",  # the plan journalled, nothing deleted yet
    "gc-looked",  # the sweep's intent written, its last look taken, nothing deleted yet
    "gc-after-batch",  # a batch of objects deleted and journalled as removed
)
# `apply`'s own: the policy's caches archived, nothing removed yet (then teardown's, gc's).
APPLY_CRASH_POINTS = ("apply-archived",)
# `bake`'s: its image built and checked, not recorded; recorded, not pushed; pushed and its
# image record written, its provenance not kept in the home.
BAKE_CRASH_POINTS = ("bake-built", "bake-recorded", "bake-pushed")
# `bake --format mcv`'s: an MCV image built and checked, not recorded (`:N`: the N-th).
MCV_CRASH_POINTS = ("bake-mcv-built",)
# `build`'s: its attempt recorded as running, nothing sent to dockerd; dockerd's image built and
# tagged, its outcome not recorded; with --push, the image tagged for the registry, not pushed.
BUILD_CRASH_POINTS = ("build-started", "build-tagged", "push-tagged")
# A night's (and tune's): a run's results recorded where its boot ran, its summary not yet back
# with the night (reached where the boot runs: on a cluster, in the run's task on its node, which
# the driver hands these settings); a run's summary journalled as done (`:N`: the N-th), the runs
# started beside it still under way (on a cluster: their boots on other nodes); a ladder's value
# written into its manifest, not journalled; every value written and journalled, the end not
# begun; the end actions taken and journalled, the night not finished; finished, its report not
# written.
NIGHT_CRASH_POINTS = (
    "night-run-recorded", "night-run-done", "night-written", "night-settled", "night-ended",
    "night-finished",
)  # fmt: skip
# A port's: it holds its lock and state dir, nothing replayed yet; a `--continue`'s: git's
# `cherry-pick --continue` returned (git may have stopped at the next patch), nothing saved yet.
PORT_CRASH_POINTS = ("port-claimed", "port-continued")
# A restore's: a file (or a pack's region of files) written into the partial tree beside its
# place (`:N`: the N-th), nothing renamed into place; with --file, the file's bytes written to
# its partial beside FILE, not yet linked to FILE.
RESTORE_CRASH_POINTS = ("restore-fetched",)
DELAY_POINTS = (
    *CRASH_POINTS,
    *GC_CRASH_POINTS,
    "teardown-planned",  # the plan is made and agreed; no cache touched yet
    "apply-planned",  # apply's plan is made, shown and agreed; nothing archived yet
    "boot-caches-picked",  # a boot holds its caches' leases; its intent is not recorded yet
    "boot-recorded",  # a boot's intent is recorded; its container is not created yet
    "boot-engine-ended",  # a boot's engine exited, its caches given back; none scanned yet
    "port-claimed",  # a port holds its lock and state dir; nothing replayed yet
    "push-tagged",  # a push's image is tagged for the registry; dockerd not asked to push yet
    "night-run-recorded",  # a run's results are recorded; its summary is not back with the night
    *RESTORE_CRASH_POINTS,
)

Checkpoint = Callable[[str], None]


def crash_checkpoint(environ: Mapping[str, str]) -> Checkpoint:
    """The checkpoint steps call at each boundary: a no-op unless CRASH_ENV or DELAY_ENV is set."""
    crash = _crash_at(environ.get(CRASH_ENV, ""))
    delays = _delays(environ.get(DELAY_ENV, ""))
    if crash is None and not delays:
        return lambda point: None
    reached: dict[str, int] = {}

    def checkpoint(name: str) -> None:
        if name in delays:
            time.sleep(delays[name])
        if crash is not None and name == crash[0]:
            reached[name] = reached.get(name, 0) + 1
            if reached[name] == crash[1]:
                os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no finally: a real crash

    return checkpoint


def fault_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The fault settings `environ` holds, for the processes a verb has run elsewhere (a cluster
    night's tasks, on its nodes), so a test reaches the points there too."""
    return {name: environ[name] for name in (CRASH_ENV, DELAY_ENV) if environ.get(name)}


def _crash_at(wanted: str) -> tuple[str, int] | None:
    if not wanted:
        return None
    point, _, nth = wanted.partition(":")
    known = (
        *CRASH_POINTS, *IMAGE_CRASH_POINTS, *GC_CRASH_POINTS, *APPLY_CRASH_POINTS,
        *BAKE_CRASH_POINTS, *MCV_CRASH_POINTS, *BUILD_CRASH_POINTS, *NIGHT_CRASH_POINTS,
        *PORT_CRASH_POINTS, *RESTORE_CRASH_POINTS,
    )  # fmt: skip
    if point not in known or not (nth or "1").isdigit():
        points = ", ".join(known)
        expected = f"expected one of {points}, then :N if wanted"
        raise LifecycleError(f"{CRASH_ENV}={wanted!r}: {expected}")
    return point, int(nth or 1)


def _delays(wanted: str) -> dict[str, float]:
    delays = {}
    for item in filter(None, wanted.split(",")):
        point, _, seconds = item.partition("=")
        try:
            delays[point] = float(seconds)
        except ValueError:
            delays[point] = -1.0
        if point not in DELAY_POINTS or not 0 <= delays[point] <= 600:
            expected = f"expected POINT=SECONDS with POINT one of {', '.join(DELAY_POINTS)}"
            raise LifecycleError(f"{DELAY_ENV}={wanted!r}: {expected}")
    return delays
