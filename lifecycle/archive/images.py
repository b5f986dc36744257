"""Image records (`lifecycle-image-record/1`): which registry digest holds a manifest's image.

`build --push` writes one at `images/<manifest digest>/<sha256>.json` when an archive location
is set, so another host finds what to pull by the manifest it has in hand (`boot --pull`), and
`restore --best` reads what a cache key of that image is made of without the image itself.
"""

from __future__ import annotations

from lifecycle.archive.layout import records_of
from lifecycle.archive.record import create_record, read_as
from lifecycle.archive.store import BlobStore
from lifecycle.records import ImageRecordV1


def publish_image(store: BlobStore, record: ImageRecordV1) -> str:
    """Write the image's record (once); its key under the prefix."""
    return create_record(store, "images", record.manifest_digest, record)


def pushed_images(store: BlobStore, manifest_digest: str) -> list[ImageRecordV1]:
    """Every image of the manifest pushed to a registry, as the archive records them, newest
    first."""
    keys = [item.key for item in store.list(records_of("images", manifest_digest))]
    records = [read_as(store, ImageRecordV1, key) for key in keys]
    return sorted(records, key=lambda r: (r.pushed_at, r.reference), reverse=True)
