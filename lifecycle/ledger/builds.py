"""Builds in the ledger: every attempt and where its full log is kept; the images this host
pushed to or pulled from a registry, by digest; the images it baked warm caches into."""

from __future__ import annotations

from dataclasses import dataclass

from lifecycle.ledger.core import Ledger, insert


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
    outcome: str
    error: str | None
    log_path: str | None
    # The base image's id (`sha256:…`, its config digest: the same on every host that has
    # it) the image was built on; None for builds recorded before it was kept.
    base_digest: str | None = None
    id: int | None = None


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


def record_bake(ledger: Ledger, bake: BakeRecord) -> None:
    """Record a bake (a bake of the same content again is the same image: replaced)."""
    with ledger.transaction() as conn:
        insert(conn, "bakes", bake, on_conflict="REPLACE")


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


def record_build(ledger: Ledger, record: BuildRecord) -> int:
    """Insert a build attempt; returns its id."""
    with ledger.transaction() as conn:
        insert(conn, "builds", record, skip=("id",))
        return int(conn.execute("SELECT last_insert_rowid()").fetchone()[0])


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


def images_of(ledger: Ledger, manifest_digest: str) -> list[str]:
    """The image ids this host built (or found up to date) or pulled for a manifest digest,
    newest first, each once: the order in which `boot` prefers them."""
    rows = ledger.query(
        "SELECT image_id, started_at AS at, id AS seq FROM builds WHERE manifest_digest = ?"
        " AND image_id IS NOT NULL AND outcome IN ('built', 'up-to-date')"
        " UNION ALL SELECT image_id, at, rowid AS seq FROM registry_images"
        " WHERE manifest_digest = ? AND how = 'pulled'"
        " ORDER BY at DESC, seq DESC",
        (manifest_digest, manifest_digest),
    )
    return list(dict.fromkeys(str(row["image_id"]) for row in rows))
