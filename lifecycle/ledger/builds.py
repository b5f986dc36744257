"""Builds in the ledger: every attempt and where its full log is kept; the images this host
pushed to or pulled from a registry, by digest; the images it baked warm caches into, and
their MCV images."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lifecycle.home import Home
from lifecycle.leases import exclusive, held
from lifecycle.ledger.core import Ledger, insert, update


@dataclass(frozen=True)
class BuildRecord:
    """One build attempt and where its full log is kept."""

    started_at: str
    duration_s: float
    manifest_name: str
    manifest_file: str
    manifest_digest: str
    tag: str
    image_id: str | None
    outcome: str  # running | built | up-to-date | failed | interrupted
    error: str | None
    log_path: str | None  # None while running, and for an interrupted build
    # The base image's id (`sha256:…`, its config digest: the same on every host that has
    # it) the image was built on; None for builds recorded before it was kept.
    base_digest: str | None = None
    id: int | None = None
    removed_at: str | None = None  # when a teardown (or apply) removed its image


def how_gone(removed_at: str | None) -> str:
    """How an image this ledger records (a build's, a bake's) left dockerd: by the teardown
    (or apply) that recorded removing it at `removed_at`, else behind lifecycle's back."""
    if removed_at:
        return f"removed {removed_at} by teardown --images or apply"
    return "removed with no record here: by hand, or before lifecycle recorded it"


@dataclass(frozen=True)
class RegistryImage:
    """An image this host pushed to a registry, or pulled from one, by digest."""

    image_id: str
    manifest_digest: str
    reference: str  # REGISTRY/REPOSITORY@sha256:…
    how: str  # pushed | pulled
    at: str


@dataclass(frozen=True)
class BakeRecord:
    """An engine image with verified caches baked in, one layer per cache (lifecycle bake)."""

    image_id: str
    tag: str
    manifest_name: str
    manifest_digest: str
    engine_image_id: str  # the image it was built FROM, by id
    profile: str
    arch: str
    caches: str  # JSON list, as the image's `lifecycle.bake.caches` label holds it
    baked_at: str
    removed_at: str | None = None  # when a teardown (or apply) removed its image

    @property
    def gone(self) -> str:
        """How its image left dockerd, as far as this ledger knows (asked once it is gone)."""
        return how_gone(self.removed_at)


# What a bake's attempt does not know yet (`bake_attempts` has no column for it): dockerd has
# not given its image, so nothing removed it either.
NOT_YET_ATTEMPTED = ("image_id", "removed_at")


def record_bake(ledger: Ledger, bake: BakeRecord) -> None:
    """Record a bake (a bake of the same content again, or pulled again, is the same image,
    on dockerd again: replaced)."""
    with ledger.transaction() as conn:
        insert(conn, "bakes", bake, on_conflict="REPLACE")


@contextmanager
def bake_attempt(ledger: Ledger, home: Home, bake: BakeRecord) -> Iterator[None]:
    """Record `bake` (its image id not known yet) as attempted and hold its lock until the block
    ends, which records the bake or refuses it; then the attempt ends. An attempt whose lock
    nobody holds is a bake whose process died once dockerd was asked (`dead_bake_attempts`)."""
    with _locked_row(
        ledger, "bake_attempts", bake, NOT_YET_ATTEMPTED, home.bake_lock
    ) as attempt_id:
        try:
            yield
        finally:
            end_bake_attempt(ledger, home, attempt_id)


def dead_bake_attempts(ledger: Ledger, home: Home) -> list[tuple[int, BakeRecord]]:
    """(attempt id, its bake, image id '') of each bake whose process died before ending its
    attempt (SIGKILL too: the kernel drops a lock with its holder), oldest first."""
    rows = ledger.query("SELECT * FROM bake_attempts ORDER BY id")
    attempts = [(int(row.pop("id")), BakeRecord(image_id="", **row)) for row in map(dict, rows)]
    return [(i, bake) for i, bake in attempts if not held(home.bake_lock(i))]


def end_bake_attempt(ledger: Ledger, home: Home, attempt_id: int) -> None:
    with ledger.transaction() as conn:
        conn.execute("DELETE FROM bake_attempts WHERE id = ?", (attempt_id,))
    home.bake_lock(attempt_id).unlink(missing_ok=True)


def bakes_of(ledger: Ledger, manifest_digest: str, profile: str) -> list[BakeRecord]:
    """The bakes of one manifest digest and profile, newest first."""
    sql = (
        "SELECT * FROM bakes WHERE manifest_digest = ? AND profile = ?"
        " ORDER BY baked_at DESC, rowid DESC"
    )
    return ledger.records(BakeRecord, sql, (manifest_digest, profile))


def all_bakes(ledger: Ledger) -> list[BakeRecord]:
    """Every bake this host recorded, oldest first."""
    return ledger.records(BakeRecord, "SELECT * FROM bakes ORDER BY baked_at, rowid")


def bake_of_image(ledger: Ledger, image_id: str) -> BakeRecord | None:
    """The bake recorded for an image, or None."""
    return ledger.record(BakeRecord, "SELECT * FROM bakes WHERE image_id = ?", (image_id,))


@dataclass(frozen=True)
class McvRecord:
    """A cache-only image in MCV's layout of one cache of a bake (`bake --format mcv`): it goes
    with its bake."""

    image_id: str
    bake_image_id: str
    cache_name: str
    tag: str
    removed_at: str | None = None  # when a teardown (or apply) removed it


def record_mcv_image(ledger: Ledger, image: McvRecord) -> None:
    """Record an MCV image (one built again is the same image: replaced, on dockerd again)."""
    with ledger.transaction() as conn:
        insert(conn, "mcv_images", image, on_conflict="REPLACE")


def mcv_images(ledger: Ledger, bake_image_id: str | None = None) -> list[McvRecord]:
    """The MCV images this host made (of one bake, when given), oldest first."""
    sql = "SELECT * FROM mcv_images WHERE ? IS NULL OR bake_image_id = ? ORDER BY rowid"
    return ledger.records(McvRecord, sql, (bake_image_id, bake_image_id))


def image_removed(ledger: Ledger, image_id: str, at: str) -> None:
    """An image a teardown (or apply) removed from dockerd: recorded on each row that names it
    as a build's image, a bake or a bake's MCV image (called once dockerd confirmed it gone)."""
    with ledger.transaction() as conn:
        for table in ("builds", "bakes", "mcv_images"):
            sql = f"UPDATE {table} SET removed_at = ? WHERE image_id = ? AND removed_at IS NULL"
            conn.execute(sql, (at, image_id))


# A build's outcomes that leave an image complete (an interrupted build's is one dockerd
# finished and tagged).
IMAGE_MADE = ("built", "up-to-date", "interrupted")
# The outcome of a build that found its image on dockerd (its manifest's labels) and built
# nothing: on a dockerd homes share, perhaps another home's build.
UP_TO_DATE = "up-to-date"


def image_removed_at(ledger: Ledger, image_id: str) -> str | None:
    """When a teardown (or apply) removed a build's image, as its newest build records; None
    when none did, or the image was pulled here again since (then it left by other means)."""
    rows = ledger.query(
        "SELECT removed_at FROM builds b WHERE image_id = ?1 AND NOT EXISTS"
        " (SELECT 1 FROM registry_images WHERE image_id = ?1 AND how = 'pulled'"
        " AND at > b.removed_at) ORDER BY id DESC LIMIT 1",
        (image_id,),
    )
    return str(rows[0]["removed_at"]) if rows and rows[0]["removed_at"] else None


def record_build(ledger: Ledger, record: BuildRecord) -> int:
    """Insert a build attempt; returns its id."""
    with ledger.transaction() as conn:
        insert(conn, "builds", record, skip=("id",))
        return int(conn.execute("SELECT last_insert_rowid()").fetchone()[0])


@contextmanager
def build_attempt(ledger: Ledger, home: Home, record: BuildRecord) -> Iterator[int]:
    """Record a build `running` (its id given to the block) and hold its lock until the block
    ends, which records its outcome (`finish_build`): a `running` row whose lock nobody holds
    is a build whose process died."""
    with _locked_row(ledger, "builds", record, ("id",), home.build_lock) as build_id:
        yield build_id
    # Its outcome recorded: no one waits on this lock again (a `held` check finds none).
    home.build_lock(build_id).unlink(missing_ok=True)


@contextmanager
def _locked_row(
    ledger: Ledger, table: str, row: Any, skip: tuple[str, ...], lock_of: Callable[[int], Path]
) -> Iterator[int]:
    """Insert `row` and hold the lock `lock_of(its id)` names until the block ends, taken before
    the row is committed: no one reads the row without its lock held while its process lives,
    and the kernel drops the lock with a killed one."""
    with ExitStack() as holding:
        with ledger.transaction() as conn:
            insert(conn, table, row, skip=skip)
            row_id = int(conn.execute("SELECT last_insert_rowid()").fetchone()[0])
            lock = lock_of(row_id)
            lock.parent.mkdir(parents=True, exist_ok=True)
            holding.enter_context(exclusive(lock))
        yield row_id


def finish_build(ledger: Ledger, build_id: int, record: BuildRecord) -> None:
    """Record the outcome of a running build."""
    with ledger.transaction() as conn:
        update(conn, "builds", replace(record, id=build_id), key="id")


def dead_builds(ledger: Ledger, home: Home) -> list[BuildRecord]:
    """Builds the ledger says run whose lock nobody holds: their process ended (SIGKILL too:
    the kernel drops a lock with its holder) before recording an outcome; oldest first."""
    sql = "SELECT * FROM builds WHERE outcome = 'running' ORDER BY id"
    running = ledger.records(BuildRecord, sql)
    return [b for b in running if b.id is not None and not held(home.build_lock(b.id))]


def settle_build(ledger: Ledger, home: Home, build_id: int, image_id: str | None, why: str) -> bool:
    """A build whose process died: `interrupted`, with the image dockerd finished for it;
    False if it was not running any more (it recorded its outcome meanwhile)."""
    with ledger.transaction() as conn:
        settled = conn.execute(
            "UPDATE builds SET outcome = 'interrupted', image_id = ?, error = ?"
            " WHERE id = ? AND outcome = 'running'",
            (image_id, why, build_id),
        ).rowcount
    home.build_lock(build_id).unlink(missing_ok=True)
    return settled == 1


def all_builds(ledger: Ledger) -> list[BuildRecord]:
    """Every build, oldest first."""
    return ledger.records(BuildRecord, "SELECT * FROM builds ORDER BY id")


def record_registry_image(ledger: Ledger, image: RegistryImage) -> None:
    """Record a push or a pull (once per image, reference and direction)."""
    with ledger.transaction() as conn:
        insert(conn, "registry_images", image, on_conflict="REPLACE")


def registry_images(ledger: Ledger, image_id: str) -> list[RegistryImage]:
    """Where an image was pushed to or pulled from, oldest first."""
    sql = "SELECT * FROM registry_images WHERE image_id = ? ORDER BY at, rowid"
    return ledger.records(RegistryImage, sql, (image_id,))


def pulled_images(ledger: Ledger) -> dict[str, str]:
    """Image id -> the reference this host last pulled it by, of the images it did not push
    itself: another home's build or bake."""
    sql = (
        "SELECT image_id, reference FROM registry_images r WHERE how = 'pulled' AND NOT EXISTS"
        " (SELECT 1 FROM registry_images p WHERE p.image_id = r.image_id AND p.how = 'pushed')"
        " ORDER BY at, rowid"
    )
    return {str(row["image_id"]): str(row["reference"]) for row in ledger.query(sql)}


def images_of(ledger: Ledger, manifest_digest: str) -> list[str]:
    """The image ids this host built (or found up to date) or pulled for a manifest digest,
    newest first, each once: the order in which `boot` prefers them. An interrupted build's
    image is one dockerd finished (and tagged): complete, as a build's."""
    rows = ledger.query(
        "SELECT image_id, started_at AS at, id AS seq FROM builds WHERE manifest_digest = ?"
        f" AND image_id IS NOT NULL AND outcome IN ({', '.join('?' * len(IMAGE_MADE))})"
        " UNION ALL SELECT image_id, at, rowid AS seq FROM registry_images"
        " WHERE manifest_digest = ? AND how = 'pulled'"
        " ORDER BY at DESC, seq DESC",
        (manifest_digest, *IMAGE_MADE, manifest_digest),
    )
    return list(dict.fromkeys(str(row["image_id"]) for row in rows))
