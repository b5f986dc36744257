"""A GPU host of a cluster night: what the Ray tasks of lifecycle.night.cluster run there.

Each task works in that host's own LIFECYCLE_HOME, with its own Docker engine and bucket
credentials (its environment at `ray start`), and through the local engine, so a run is the
same boot `lifecycle boot` makes: the image pulled by digest when the host lacks it, a warm
cell's caches restored from the bucket (`restore --best`) when the host holds none good, and,
before the task returns, the boot's caches (their files too, for the next node's restore),
evidence and results archived. The driver receives only the run's summary. Nothing here
imports Ray: a task is a plain function of its arguments and the host's environment.

A task Ray ended after its boot recorded the run's results (its driver was killed as the task
archived the boot) leaves a run the journal has only `started`: the resumed night asks each
node for such runs (`recorded`) and counts them, not running them again (lifecycle.night.adopt).

A task Ray ended (its driver was killed, or cancelled it) leaves its boot `running` here and its
engine, which dockerd runs, serving on: the survey each night begins with, and each end action,
stop such engines and record their boots `interrupted` first, as a boot does before it picks
its caches, so a node the resumed night sends no run still has its dead boots ended.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from lifecycle.archive.catalog import Best, best_versions
from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.objects import s3_client
from lifecycle.archive.record import pushed_images
from lifecycle.archive.restore import restore_cache
from lifecycle.archive.store import BlobStore
from lifecycle.boot.engine import engine_image, existing_tag, stop_orphans
from lifecycle.build.plan import cache_key, image_tag, key_factors
from lifecycle.dockerd import connect, dockerd_said, sdk_errors
from lifecycle.errors import LifecycleError
from lifecycle.faults import crash_checkpoint
from lifecycle.home import Home, default_home
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import boot_archive
from lifecycle.night.engine import EndSummary, Pin, RunOrder, RunSummary
from lifecycle.night.local import LocalEngine


class NodeUnfit(LifecycleError):
    """This host cannot run a night's cells (no Docker engine, no bucket): one line, which the
    driver prefixes with the node's name."""


class NotWarmHere(LifecycleError):
    """A warm run was sent to a host that has no good cache of its pin, nor one to restore."""


@dataclass(frozen=True)
class NodeState:
    """A host as the night's survey found it: which pins it can boot warm, and how."""

    node: str  # the host's name and the first digits of its Ray node id
    arch: str  # LIFECYCLE_GPU_ARCH there: part of its caches' keys
    warm: dict[str, str]  # pin -> `local` (a good cache here) or `bucket` (one to restore)
    settled: list[str] = field(default_factory=list)  # dead boots ended here first, a line each


@dataclass(frozen=True)
class NodeRun:
    """A run's summary, and where the pin's good caches are on this host after it."""

    summary: RunSummary
    warm: str | None  # local | bucket | None
    task_s: float  # this task's own wall time, on this host's clock


def survey(node: str, url: str, pins: Sequence[Pin]) -> NodeState:
    """Whether this host can run cells at all (else NodeUnfit), and where each pin's good
    caches are for it; its dead boots ended first (a dead boot holds its caches)."""
    with _host(url) as host:
        settled = _end_dead_boots(host)
        warm = {pin.ref: state for pin in pins if (state := _warm_state(host, pin))}
        return NodeState(node, host.engine.arch, warm, settled)


def ready(node: str, url: str) -> str:
    """Only this host's engine, ledger and bucket opened: the worker the survey then runs in is
    started, lifecycle imported, its S3 client made. Nothing is ended here: the survey ends
    the dead boots, and the driver reads its answer and says what it did."""
    with _host(url):
        return node


def run(node: str, url: str, order: RunOrder) -> NodeRun:
    """One run of a cell here; see the module's docstring."""
    began = time.monotonic()
    with _host(url) as host:
        pin = _pin_here(host, order.pin)
        order = replace(order, pin=pin)
        cache_from = "cold"
        if order.cell.state == "warm":
            state = _warm_state(host, pin)
            if state is None or (state == "bucket" and not _restore(host, pin)):
                raise NotWarmHere(f"no good cache of {pin.ref} here, nor one to restore")
            cache_from = "local" if state == "local" else "restored"
        summary = host.engine.run(order)
        if summary.boot_id is not None:
            host.engine.archive({summary.boot_id: None})
        summary = summary.model_copy(update={"node": node, "cache_from": cache_from})
        return NodeRun(summary, _warm_state(host, pin), time.monotonic() - began)


def recorded(node: str, url: str, orders: Sequence[RunOrder]) -> list[NodeRun]:
    """Those runs whose boot here recorded their results though their task never returned
    (its driver was killed first; lifecycle.night.adopt): each archived as its task would have
    archived it, its summary, and where its pin's good caches are now."""
    began = time.monotonic()
    with _host(url) as host:
        by_run = {(o.cell.id, o.run, o.attempt): o for o in orders}
        found = []
        for summary in host.engine.recorded(orders):
            assert summary.boot_id is not None, "a recorded run has its boot"
            host.engine.archive({summary.boot_id: None})
            order = by_run[(summary.cell, summary.run, summary.attempt)]
            # Where a warm run's caches came from went with its task; a cold run's made them.
            cache_from = "cold" if order.cell.state == "cold" else None
            summary = summary.model_copy(update={"node": node, "cache_from": cache_from})
            found.append(NodeRun(summary, _warm_state(host, order.pin), time.monotonic() - began))
        return found


def end(node: str, url: str, action: str, boot_ids: Sequence[str]) -> EndSummary:
    """An end action (archive | teardown) on the boots this host made. Each run's task
    archived its boot before returning: the archive is asked only of a boot it has no record of
    at this location (the teardown verifies every archive again as each cache goes)."""
    with _host(url) as host:
        # Archive and teardown record dead boots `interrupted` without asking dockerd: their
        # engines are stopped first, so none serves on for a boot the ledger says ended.
        settled = _end_dead_boots(host)
        engine = host.engine
        if action == "teardown":
            done = engine.teardown(dict.fromkeys(boot_ids))
        elif missing := [b for b in boot_ids if boot_archive(engine.ledger, b, url) is None]:
            done = engine.archive(dict.fromkeys(missing))
        else:
            done = EndSummary(action=action, ok=True, detail="each run's task archived its boot")
        return done.model_copy(update={"detail": "; ".join([f"{node}: {done.detail}", *settled])})


@dataclass(frozen=True)
class _Host:
    engine: LocalEngine
    store: BlobStore


@contextmanager
def _host(url: str) -> Iterator[_Host]:
    """This host's engine, ledger and bucket, each checked: NodeUnfit names what is missing."""
    environ: Mapping[str, str] = dict(os.environ)
    location = ArchiveLocation.parse(url)
    try:
        docker = connect(environ)
    except LifecycleError as exc:
        raise NodeUnfit(str(exc)) from None
    s3 = _s3_client()
    store = BlobStore(s3, location)
    try:
        next(iter(store.list("images/")), None)
    except LifecycleError as exc:
        raise NodeUnfit(f"cannot reach the bucket {url}: {exc}") from None
    home = Home(default_home(environ))
    ledger = Ledger.open(home)
    try:
        arch = environ.get("LIFECYCLE_GPU_ARCH", "unknown")
        engine = LocalEngine(
            docker, ledger, home, environ, arch, s3, location, with_content=True,
            checkpoint=crash_checkpoint(environ),
        )  # fmt: skip
        yield _Host(engine, store)
    finally:
        ledger.close()
        docker.close()


def _end_dead_boots(host: _Host) -> list[str]:
    """This host's boots whose process died (a task Ray ended with its driver), their engines
    stopped, then recorded `interrupted` (lifecycle.boot.engine.stop_orphans); a line each."""
    engine = host.engine
    at = datetime.now(UTC).isoformat(timespec="seconds")  # as a boot stamps its own end
    return stop_orphans(engine.docker, engine.ledger, engine.home, at)


@functools.cache
def _s3_client() -> Any:
    """This worker's S3 client: made once (some 0.2 s), then shared by the tasks Ray runs in
    the same worker process one after another."""
    return s3_client(dict(os.environ))


def _pin_here(host: _Host, pin: Pin) -> Pin:
    """The pin with this host's image of it: built or pulled here, else pulled by digest from
    where the archive records it was pushed (the `boot --pull` path)."""
    engine = host.engine
    loaded = pin.loaded

    def references() -> list[tuple[str, str]]:
        where = host.store.location.url()
        # A record it cannot read is left out: the driver's resolve said so, reading the same.
        pushed, _ = pushed_images(host.store, pin.digest)
        return [(r.reference, f"pushed, as {where} records") for r in pushed]

    try:
        image = engine_image(
            engine.docker, engine.ledger, pin.digest, pin.ref, pull_from=references
        )
    except sdk_errors() as exc:
        raise NodeUnfit(f"the Docker engine failed: {dockerd_said(exc)}") from None
    tag = existing_tag(
        image, image_tag(loaded.manifest.name, loaded.manifest.engine.vllm, pin.digest)
    )
    tags = [str(t) for t in image.tags or []]
    return replace(
        pin, image={"id": image.id, "tags": tags, "labels": dict(image.labels or {})}, tag=tag
    )


def _keys(host: _Host, pin: Pin) -> dict[str, str]:
    """cache name -> its key for this host's GPU arch."""
    labels = pin.image["labels"] or {}
    caches = pin.loaded.manifest.active_caches()
    return {n: cache_key(key_factors(labels, n, pin.digest, host.engine.arch)) for n in caches}


def _warm_state(host: _Host, pin: Pin) -> str | None:
    """`local`: a warm boot here finds a good cache of each; `bucket`: the newest good version
    of each can be restored here; else None."""
    if host.engine.warm_ready(pin):
        return "local"
    return "bucket" if _restorable(host, pin) else None


def _restorable(host: _Host, pin: Pin) -> dict[str, Best] | None:
    """The versions to restore, when the bucket has a good one of each of the pin's caches
    and none of them is a cache this host holds already (its own, grown by a boot that did
    not end ok since: not good here, and a restore in place would refuse it)."""
    keys = _keys(host, pin)
    chosen, _ = best_versions(host.store, keys)  # a version it cannot read is no candidate
    home = host.engine.home
    if not keys or set(chosen) != set(keys):
        return None
    if any(home.cache_dir(best.cache_id).exists() for best in chosen.values()):
        return None
    return chosen


def _restore(host: _Host, pin: Pin) -> bool:
    """Restore the newest good version of each of the pin's caches; whether all were there."""
    chosen = _restorable(host, pin)
    if chosen is None:
        return False
    engine = host.engine
    for best in chosen.values():
        restore_cache(
            engine.ledger, engine.home, engine.s3, host.store.location, best.cache_id,
            tree=best.tree_digest,
        )  # fmt: skip
    return engine.warm_ready(pin)
